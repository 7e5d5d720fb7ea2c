"""Tests for maskfed.fl.cohort: the batched engine gives the reference path's Δ_k for every client
(unequal Dirichlet shards, every local protocol), engine/precision resolution and validation,
and a whole tiny FedAvg run gives the same metrics with either engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskfed.fl import cohort as C
from maskfed.fl import data as data_mod
from maskfed.fl import fedavg as F
from maskfed.fl import partition
from maskfed.fl.models import build_model


def _smooth(module: torch.nn.Module) -> torch.nn.Module:
    """The same network with its two comparisons made smooth: average pooling for max pooling and
    softplus for ReLU (in place; parameters unchanged)."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.MaxPool2d):
            setattr(module, name, torch.nn.AvgPool2d(child.kernel_size, child.stride))
        elif isinstance(child, torch.nn.ReLU):
            setattr(module, name, torch.nn.Softplus())
        else:
            _smooth(child)
    return module


def _problem(dtype: torch.dtype, seed: int = 0, smooth: bool = False):
    """Synthetic images over K = 6 clients by Dirichlet α = 0.1 (very unequal shards), tiny GN CNN
    (``smooth``: with :func:`_smooth`)."""
    images = data_mod.synthetic_image_data(n_train=600, n_test=20, seed=seed)
    parts = partition.make_partition("dirichlet", images.y_train.numpy(), 6, alpha=0.1, seed=seed)
    mean, std = data_mod.channel_stats(images.x_train)
    x = data_mod.normalize(images.x_train, mean, std).to(dtype)
    torch.manual_seed(seed)
    model = build_model("small_cnn_gn", num_classes=10, gn_groups=2, width=2).to(dtype)
    if smooth:
        _smooth(model)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    return model, theta, x, images.y_train, parts


def _gens(n: int, seed: int = 3):
    return [torch.Generator().manual_seed(F.client_seed(seed, 0, k)) for k in range(n)]


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("batch_size", [32, 128, "full"])
@pytest.mark.parametrize("tau", [1, 2])
def test_batched_equals_sequential_per_client(dtype, rtol, batch_size, tau):
    # prepare: a Dirichlet(0.1) partition gives shards of very different sizes (so different T_k,
    # different last partial batches, and padding in the batched engine).
    # float64: the cpu profile's CNN itself. float32: the same CNN made smooth (_smooth), because max
    # pooling and ReLU route gradients by comparisons, and two engines whose kernels sum in a
    # different order can break a near-tie differently in float32: on an AMD EPYC CPU one flipped
    # max-pool window in 26,264 moved the first convolution's weight gradient by 1.7e-3 relative
    # (as far from the float64 gradient in the sequential path as in the batched one), which is
    # rounding, not an engine difference. The smooth network has no such jumps, so 1e-5 tests the
    # engine's float32 arithmetic itself.
    model, theta, x, y, parts = _problem(dtype, smooth=dtype == torch.float32)
    sizes = [len(p) for p in parts]
    assert max(sizes) > 3 * min(sizes) and min(sizes) >= 1
    kw = dict(lr=0.05, batch_size=batch_size, local_epochs=tau)
    # execute
    d_seq, n_seq, t_seq, l_seq = C.train_cohort(model, theta, x, y, parts, generators=_gens(len(parts)),
                                                engine="sequential", **kw)
    d_bat, n_bat, t_bat, l_bat = C.train_cohort(model, theta, x, y, parts, generators=_gens(len(parts)),
                                                engine="batched", **kw)
    # assert: same step counts T_k = ceil(n_k/bs)·τ, same Δ_k per client, same losses
    assert n_seq == n_bat == sizes
    assert t_seq == t_bat == [F.local_steps(n, batch_size, tau) for n in sizes]
    assert d_bat.dtype == dtype and d_bat.shape == d_seq.shape
    for k in range(len(parts)):
        assert d_seq[k].norm() > 0
        rel = float((d_bat[k] - d_seq[k]).norm() / d_seq[k].norm())
        assert rel < rtol, (k, rel)
    np.testing.assert_allclose(l_bat, l_seq, rtol=rtol)


def test_batched_uses_each_clients_own_shuffles():
    # a batched engine sharing one permutation stream across clients could still match on other seeds;
    # here: a different generator for the largest client changes its Δ_k and nobody else's
    model, theta, x, y, parts = _problem(torch.float64)
    big = max(range(len(parts)), key=lambda k: len(parts[k]))
    assert len(parts[big]) > 32  # several steps, so the shuffle order matters
    kw = dict(lr=0.05, batch_size=32, local_epochs=1, engine="batched")
    a = C.train_cohort(model, theta, x, y, parts, generators=_gens(len(parts)), **kw)[0]
    gens = _gens(len(parts))
    gens[big] = torch.Generator().manual_seed(12345)
    b = C.train_cohort(model, theta, x, y, parts, generators=gens, **kw)[0]
    assert float((a[big] - b[big]).norm() / a[big].norm()) > 1e-6
    others = [k for k in range(len(parts)) if k != big]
    torch.testing.assert_close(a[others], b[others], rtol=1e-12, atol=0)


def test_client_batches_hand_case():
    # n_k = 7, bs = 3, τ = 2: 3 + 3 + 1 per epoch, 6 steps; each epoch is one permutation of 0..6
    g = torch.Generator().manual_seed(0)
    b = C.client_batches(7, 3, 2, g)
    assert [len(i) for i in b] == [3, 3, 1, 3, 3, 1]
    assert sorted(torch.cat(b[:3]).tolist()) == list(range(7))
    assert sorted(torch.cat(b[3:]).tolist()) == list(range(7))
    g2 = torch.Generator().manual_seed(0)
    assert torch.equal(torch.cat(b[:3]), torch.randperm(7, generator=g2))


def test_resolve_engine_and_precision_validation():
    assert C.resolve_engine("batched", "cpu") == "batched"
    assert C.resolve_engine("sequential", "cuda") == "sequential"
    assert C.resolve_engine("auto", "cpu") == C.AUTO_ENGINE["cpu"]
    assert C.resolve_engine("auto", "cuda") == "batched"
    with pytest.raises(ValueError, match="engine must be one of"):
        C.resolve_engine("fast", "cpu")
    C.check_precision("fp32", "cpu")
    for p in ("tf32", "bf16"):
        with pytest.raises(ValueError, match="precision.*CUDA"):
            C.check_precision(p, "cpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        C.check_precision("fp16", "cuda")


def test_train_cohort_rejects_bad_inputs_before_compute():
    model, theta, x, y, parts = _problem(torch.float32)
    with pytest.raises(ValueError, match="generators"):
        C.train_cohort(model, theta, x, y, parts, lr=0.1, batch_size=32, local_epochs=1, generators=_gens(2))
    with pytest.raises(ValueError, match="precision"):
        C.train_cohort(model, theta, x, y, parts, lr=0.1, batch_size=32, local_epochs=1,
                       generators=_gens(len(parts)), precision="bf16")


def test_whole_run_same_metrics_with_either_engine():
    # prepare: a tiny smoke-sized run, Dirichlet 0.1, with each engine
    from maskfed.fl import runner
    from maskfed.fl.config import make_run_config

    out = {}
    for engine in ("sequential", "batched"):
        cfg = make_run_config(dataset="synthetic", synthetic_train=400, synthetic_test=50, num_clients=6,
                              cohort_size=3, rounds=3, alpha=0.1, batch_size=16, local_epochs=1,
                              model="small_cnn_gn", width=2, eval_every=1, device="cpu", engine=engine)
        images = runner.images_for(cfg)
        data = runner.prepare_data(cfg, images, torch.device("cpu"))
        torch.manual_seed(cfg.seed)
        model = build_model("small_cnn_gn", num_classes=10, gn_groups=2, width=2)
        out[engine] = F.run_fedavg(model, data, rounds=3, cohort_size=3, local_epochs=1, batch_size=16, lr=0.01,
                                   aggregation="weighted", seed=0, eval_at={0, 1, 2}, engine=engine)
    for a, b in zip(out["sequential"], out["batched"]):
        assert a["cohort"] == b["cohort"] and a["T_mean"] == b["T_mean"]
        for col in ("train_loss", "recovery_unweighted", "recovery_weighted", "test_loss", "test_acc", "A", "B"):
            assert b[col] == pytest.approx(a[col], rel=1e-4, abs=1e-6), col


def test_config_fields_validated_before_compute():
    from maskfed.fl.config import ConfigError, make_run_config

    with pytest.raises(ConfigError, match="engine"):
        make_run_config(engine="fast")
    with pytest.raises(ConfigError, match="precision"):
        make_run_config(precision="fp16")
    with pytest.raises(ConfigError, match="precision = 'bf16' needs device 'cuda'"):
        make_run_config(precision="bf16", device="cpu")
    assert make_run_config().engine == "auto" and make_run_config().precision == "fp32"


def test_run_records_resolved_engine_and_precision(tmp_path, monkeypatch):
    # prepare: a 2-round smoke run with engine auto on the CPU
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    from maskfed.fl import runner
    from maskfed.fl.config import load_profile

    cfg = load_profile("smoke").run(0, rounds=2, device="cpu")
    # execute
    res = runner.run(cfg, progress=False)
    # assert: provenance names the concrete engine auto chose on this device, and the precision
    assert res.provenance["engine"] == C.AUTO_ENGINE["cpu"] and res.provenance["precision"] == "fp32"
    forced = runner.run(cfg.model_copy(update={"engine": "batched"}), progress=False)
    assert forced.provenance["engine"] == "batched"
    for col in ("train_loss", "recovery_unweighted", "test_acc"):
        np.testing.assert_allclose(forced.metrics[col], res.metrics[col], rtol=1e-4)


def test_precision_context_sets_and_restores_tf32_flags():
    # the flags exist without a GPU, so the CUDA branch's bookkeeping can be checked here
    cuda_mm, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (cuda_mm.allow_tf32, cudnn.allow_tf32)
    with C.precision_context("fp32", "cuda"):
        assert (cuda_mm.allow_tf32, cudnn.allow_tf32) == (False, False)  # PyTorch's cuDNN default is True
    with C.precision_context("tf32", "cuda"):
        assert (cuda_mm.allow_tf32, cudnn.allow_tf32) == (True, True)
    assert (cuda_mm.allow_tf32, cudnn.allow_tf32) == before
    with C.precision_context("fp32", "cpu"):
        assert (cuda_mm.allow_tf32, cudnn.allow_tf32) == before  # nothing touched on the CPU
