"""Tests for maskfed.engine.models: ResNet-18-GN (paper §IV-A: "ResNet-18 with GroupNorm"; the group
count, the CIFAR stem and its init are ours, see maskfed.book.settings), the small CPU CNN, the buffer check."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from maskfed.engine.models import build_model, check_parameters_only, num_parameters, resnet18_gn, SmallCNN


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return build_model("resnet18_gn")


def test_resnet18_gn_uses_groupnorm_only(resnet):
    gns = [m for m in resnet.modules() if isinstance(m, nn.GroupNorm)]
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in resnet.modules())
    assert len(gns) == 20  # stem 1 + 8 blocks x 2 + 3 downsample shortcuts
    assert all(m.num_groups == 2 for m in gns)  # 2 groups: ours (the paper gives no count)
    assert len(list(resnet.buffers())) == 0
    check_parameters_only(resnet)  # does not raise


def test_resnet18_gn_cifar_stem(resnet):
    # ours, following He et al. (2016, Sec. 4.2) and common CIFAR ResNet practice: the paper says
    # only "ResNet-18 with GroupNorm"
    conv1 = resnet.conv1
    assert conv1.kernel_size == (3, 3) and conv1.stride == (1, 1) and conv1.padding == (1, 1)
    assert conv1.in_channels == 3 and conv1.out_channels == 64 and conv1.bias is None
    assert isinstance(resnet.maxpool, nn.Identity)


def test_resnet18_gn_forward_shape(resnet):
    out = resnet(torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()


def test_resnet18_gn_parameter_count(resnet):
    # torchvision resnet18(num_classes=10): 11,181,642 parameters (GroupNorm has the same
    # affine weight + bias per channel as BatchNorm, so swapping the norm changes nothing).
    # The CIFAR stem swaps the 7x7 conv (64·3·7·7 = 9,408) for a 3x3 one (64·3·3·3 = 1,728):
    # 11,181,642 - 9,408 + 1,728 = 11,173,962 (about 11.2 M; the paper gives no parameter count).
    assert num_parameters(resnet) == 11_173_962
    assert num_parameters(resnet18_gn(num_classes=100)) == 11_173_962 + 512 * 90 + 90  # wider head


def test_resnet18_gn_groups_argument():
    m = resnet18_gn(gn_groups=4)
    assert {g.num_groups for g in m.modules() if isinstance(g, nn.GroupNorm)} == {4}


def test_small_cnn_forward_shape_and_count():
    # width 2: conv 3->2 5x5: 2·75 + 2 = 152; GN(2): 4; conv 2->4 5x5: 4·50 + 4 = 204; GN(4): 8;
    # linear 4·5·5=100 -> 8: 800 + 8 = 808; linear 8 -> 10: 80 + 10 = 90.  Total 1,266.
    model = build_model("small_cnn_gn", width=2)
    assert num_parameters(model) == 1_266
    assert model(torch.randn(3, 3, 32, 32)).shape == (3, 10)
    # default widths (16, 32), hidden 64: 1,216 + 32 + 12,832 + 64 + 51,264 + 650 = 66,058 ("about 66 k")
    assert num_parameters(SmallCNN()) == 66_058
    # cpu profile, width 8: 608 + 16 + 3,216 + 32 + 12,832 + 330 = 17,034 ("about 17 k")
    assert num_parameters(build_model("small_cnn_gn", width=8)) == 17_034
    assert SmallCNN(num_classes=5, widths=(4, 8), hidden=16)(torch.randn(1, 3, 32, 32)).shape == (1, 5)


def test_build_model_rejects_unknown_name_listing_allowed():
    with pytest.raises(ValueError, match="vgg16") as exc:
        build_model("vgg16")
    assert "resnet18_gn" in str(exc.value) and "small_cnn_gn" in str(exc.value)


def test_check_parameters_only_refuses_batchnorm_and_buffers():
    with pytest.raises(ValueError, match="BatchNorm") as exc:
        check_parameters_only(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))
    assert "layers (1)" in str(exc.value)  # names the offending module ("1" in the Sequential)
    # BatchNorm without running statistics has no buffers but is still refused
    with pytest.raises(ValueError):
        check_parameters_only(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3, track_running_stats=False)))

    class WithBuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("scale", torch.ones(2))

    with pytest.raises(ValueError, match="buffers"):
        check_parameters_only(WithBuffer())
    check_parameters_only(nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4)))  # fine


def test_num_parameters_counts_every_scalar():
    # Linear(3, 2): 3·2 weights + 2 biases = 8
    assert num_parameters(nn.Linear(3, 2)) == 8
