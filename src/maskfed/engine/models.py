"""Models: ResNet-18 with GroupNorm (the paper's) and a small GroupNorm CNN (CPU profiles).

The paper says only "ResNet-18 with GroupNorm" (Sec. IV-A). The group count, the CIFAR stem and
its initialisation are ours, each labelled below with its reference (list: :mod:`maskfed.book.settings`).
FedAvg here averages parameters only, so models with buffers (BatchNorm) are refused.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn


def resnet18_gn(num_classes: int = 10, gn_groups: int = 2) -> nn.Module:
    """ResNet-18 with GroupNorm (the paper's model, §IV-A) and a CIFAR stem (ours).

    torchvision's ``resnet18`` (He et al., 2016) with every BatchNorm replaced by
    ``GroupNorm(gn_groups, C)`` (Wu & He, 2018), a 3x3 stride-1 first convolution and no max-pool.
    About 11.2 M parameters. Input [N, 3, 32, 32] float32 -> logits [N, num_classes].

    * ``gn_groups`` (default 2; must divide every width, 64..512): ours; GroupNorm under non-IID
      data follows Hsieh et al. (2020).
    * the stem (3x3 stride-1 conv, no max-pool): ours, following He et al. (2016, Sec. 4.2).
    * the stem's initialisation: ours. ``conv1`` keeps PyTorch's default ``Conv2d`` init
      (Kaiming-uniform, a = sqrt(5)); the other convolutions keep torchvision's Kaiming-normal
      (fan-out, He et al., 2015), GroupNorm weight 1, bias 0 (tests/test_settings.py checks both).
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
        ValueError: naming the offending modules (FedAvg here averages parameters only, so
            buffers would stay at the server's initial values).
    """
    offenders = sorted({name.rsplit(".", 1)[0] or name for name, _ in model.named_buffers()})
    bn = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if offenders or bn:
        raise ValueError(
            "model has buffers/BatchNorm layers (" + ", ".join((bn or offenders)[:5]) + "): "
            "FedAvg here averages parameters only; use GroupNorm instead (e.g. model='resnet18_gn')")


def build_model(name: str, *, num_classes: int = 10, gn_groups: int = 2, width: int = 16) -> nn.Module:
    """Build a model by name (one of ``MODELS``) and check it keeps no buffers; ``width`` is the
    small CNN's first-layer width (ignored by ResNet-18).

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
