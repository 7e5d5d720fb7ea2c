"""Models: ResNet-18 with GroupNorm (the paper's) and a small GroupNorm CNN (CPU profiles).

The paper says "ResNet-18 with GroupNorm" (Sec. IV-A) and nothing more. The group count, the
CIFAR stem and the stem's initialisation are this project's choices; each is labelled below with
the reference it follows (the whole list: :mod:`maskfed.book.settings`).

FedAvg here averages parameters only, so a model must keep no running
statistics: BatchNorm layers (and any other buffers) are refused.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn


def resnet18_gn(num_classes: int = 10, gn_groups: int = 2) -> nn.Module:
    """ResNet-18 with GroupNorm (the paper's model, §IV-A) and a CIFAR stem (ours).

    torchvision's ``resnet18`` (He et al., 2016) with every BatchNorm replaced by
    ``GroupNorm(gn_groups, C)`` (Wu & He, 2018), a 3x3 stride-1 first convolution and no
    max-pool, so a 32x32 input keeps its resolution in the first stage. About 11.2 M parameters.

    Whose choices (the paper states only "ResNet-18 with GroupNorm"):

    * ``gn_groups`` (default 2): ours. GroupNorm for BatchNorm under non-IID data follows
      Hsieh et al. (2020); the paper gives no group count.
    * the stem (3x3 stride-1 conv, no max-pool): ours, following He et al. (2016, Sec. 4.2), whose
      CIFAR-10 networks start with a 3x3 convolution, and common CIFAR ResNet practice.
    * the stem's initialisation: ours. The replaced ``conv1`` keeps PyTorch's default ``Conv2d``
      init (Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in))), while every
      other convolution keeps torchvision's Kaiming-normal (fan-out, He et al., 2015) and every
      GroupNorm weight 1, bias 0 (tests/test_settings.py checks both).

    Args:
        num_classes: output logits.
        gn_groups: GroupNorm groups (count, ours, see above); must divide every width (64..512).

    Input [N, 3, 32, 32] float32 -> logits [N, num_classes].
    """
    import torchvision  # imported here: the small CNN needs no torchvision

    model = torchvision.models.resnet18(num_classes=num_classes, norm_layer=partial(nn.GroupNorm, gn_groups))
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


class SmallCNN(nn.Module):
    """A LeNet-sized CNN with GroupNorm for CPU profiles.

    conv5x5(3→w1)-GN-ReLU-maxpool2 → conv5x5(w1→w2)-GN-ReLU-maxpool2 →
    linear(w2·5·5 → hidden)-ReLU → linear(hidden → classes).
    With the defaults (16, 32, 64) it has about 66 k parameters.
    Input [N, 3, 32, 32] float32 -> logits [N, num_classes].
    """

    def __init__(self, num_classes: int = 10, widths: tuple[int, int] = (16, 32), hidden: int = 64, gn_groups: int = 2):
        super().__init__()
        w1, w2 = widths
        self.features = nn.Sequential(
            nn.Conv2d(3, w1, 5), nn.GroupNorm(gn_groups, w1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w1, w2, 5), nn.GroupNorm(gn_groups, w2), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(w2 * 5 * 5, hidden), nn.ReLU(), nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


MODELS = {
    "resnet18_gn": lambda num_classes, gn_groups, width: resnet18_gn(num_classes, gn_groups),
    "small_cnn_gn": lambda num_classes, gn_groups, width: SmallCNN(
        num_classes, widths=(width, 2 * width), hidden=4 * width, gn_groups=gn_groups),
}


def check_parameters_only(model: nn.Module) -> None:
    """Refuse models with buffers (BatchNorm running statistics and the like).

    Raises:
        ValueError: naming the offending modules; FedAvg here averages
            parameters only, so buffers would silently stay at the server's
            initial values.
    """
    offenders = sorted({name.rsplit(".", 1)[0] or name for name, _ in model.named_buffers()})
    bn = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if offenders or bn:
        raise ValueError(
            "model has buffers/BatchNorm layers (" + ", ".join((bn or offenders)[:5]) + "): "
            "FedAvg here averages parameters only; use GroupNorm instead (e.g. model='resnet18_gn')")


def build_model(name: str, *, num_classes: int = 10, gn_groups: int = 2, width: int = 16) -> nn.Module:
    """Build a model by name and check it keeps no buffers.

    Args:
        name: one of ``MODELS`` ("resnet18_gn", "small_cnn_gn").
        num_classes: logits.
        gn_groups: GroupNorm groups.
        width: first-layer width of the small CNN (ignored by ResNet-18).

    Raises:
        ValueError: unknown name, or a model with BatchNorm/buffers.
    """
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}; got {name!r}")
    model = MODELS[name](num_classes, gn_groups, width)
    check_parameters_only(model)
    return model


def num_parameters(model: nn.Module) -> int:
    """Number of trainable scalars P (the length of a flat update Δ_k)."""
    return sum(p.numel() for p in model.parameters())
