"""Tests for maskfed.engine.cohort, the home of local training: local steps T and one client's SGD
(checked against the closed-form softmax-regression gradient); the batched engine gives the
reference path's Δ_k for every client (unequal Dirichlet shards, every local protocol), also in
micro-batches under a memory budget; engine/precision resolution and validation; the precision
settings (TF32 off for fp32 through the installed torch's API, bf16 autocast of the forward pass
only); and a whole tiny FedAvg run gives the same metrics with either engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from maskfed.engine import cohort as C, data as data_mod, fedavg as F, partition
from maskfed.engine.models import build_model


# ----------------------------------------------------------------------------- local steps T

@pytest.mark.parametrize("n_k, bs, tau, expected", [
    (500, 32, 1, 16),      # ceil(500/32) = ceil(15.625) = 16 (paper, Table I)
    (500, 32, 5, 80),      # 16 · 5
    (500, 128, 1, 4),      # ceil(3.906) = 4
    (500, 128, 5, 20),     # 4 · 5
    (500, "full", 1, 1),   # one step per epoch
    (500, "full", 5, 5),
    (37, 10, 1, 4),        # ceil(3.7) = 4: the last partial batch (7 images) is a step
    (40, 10, 2, 8),        # exact division: 4 · 2
    (3, 128, 2, 2),        # batch larger than the shard: one (partial) batch per epoch
])
def test_local_steps_hand_cases(n_k, bs, tau, expected):
    assert C.local_steps(n_k, bs, tau) == expected


@pytest.mark.parametrize("n_k, bs, tau, word", [
    (500, 0, 1, "batch_size"), (500, -4, 1, "batch_size"), (500, "half", 1, "batch_size"),
    (500, 32.0, 1, "batch_size"), (500, 32, 0, "local_epochs"), (0, 32, 1, "n_k"),
])
def test_local_steps_rejects_bad_inputs(n_k, bs, tau, word):
    with pytest.raises(ValueError, match=word):
        C.local_steps(n_k, bs, tau)


def test_local_steps_matches_paper_table1_column():
    # The paper's T column, with n_k ≈ 500 (K = 100 clients over 50,000 images).
    from maskfed.analysis.summary import paper_table

    t1 = paper_table("table1")
    for (bs, tau), row in t1.iterrows():
        assert C.local_steps(500, bs if bs == "full" else int(bs), int(tau)) == row["T_mean"]


# ----------------------------------------------------------------------------- client update

# Softmax regression: logits = X Wᵀ (nn.Linear without bias), mean cross-entropy.
# ∇_W L = (softmax(X Wᵀ) - onehot(y))ᵀ X / n, so a full-batch step is Δ = lr · vec(∇_W L(W)).
X = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [1.0, 1.0, 0.0], [-1.0, 0.5, 1.0], [2.0, -1.0, 0.0]])
Y = torch.tensor([0, 1, 1, 0, 1])
W0 = torch.tensor([[0.2, -0.1, 0.3], [-0.4, 0.5, 0.1]])


def _linear_model():
    model = nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(W0)
    return model


def _grad_and_loss(w, x, y):
    """Closed-form mean cross-entropy and its gradient for logits x wᵀ (float64 numpy)."""
    w, x, y = (np.asarray(a, dtype=np.float64) for a in (w, x, y))
    z = x @ w.T
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    onehot = np.eye(w.shape[0])[y.astype(int)]
    loss = float(-np.log(p[np.arange(len(y)), y.astype(int)]).mean())
    return (p - onehot).T @ x / len(y), loss


def test_client_update_one_full_batch_step_is_lr_times_gradient():
    model = _linear_model()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    lr = 0.5
    grad, loss0 = _grad_and_loss(W0, X, Y)

    delta, loss, steps = C.client_update(model, theta, X, Y, lr=lr, batch_size="full", local_epochs=1,
                                         generator=torch.Generator().manual_seed(0))

    assert steps == 1
    np.testing.assert_allclose(delta.numpy(), lr * grad.reshape(-1), rtol=1e-5, atol=1e-7)
    assert loss == pytest.approx(loss0, rel=1e-6)  # loss at θ (the only step)
    assert delta.shape == theta.shape


def test_client_update_two_full_batch_epochs_chain_the_steps():
    # τ = 2: W1 = W0 - lr g(W0), W2 = W1 - lr g(W1), Δ = W0 - W2 = lr (g(W0) + g(W1));
    # the reported loss is the mean of the two step losses.
    model = _linear_model()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    lr = 0.5
    g0, l0 = _grad_and_loss(W0, X, Y)
    w1 = W0.double().numpy() - lr * g0
    g1, l1 = _grad_and_loss(w1, X, Y)

    delta, loss, steps = C.client_update(model, theta, X, Y, lr=lr, batch_size="full", local_epochs=2,
                                         generator=torch.Generator().manual_seed(0))

    assert steps == 2
    np.testing.assert_allclose(delta.numpy(), lr * (g0 + g1).reshape(-1), rtol=1e-5, atol=1e-7)
    assert loss == pytest.approx((l0 + l1) / 2, rel=1e-6)


def test_client_update_minibatches_follow_the_generator_permutation():
    # n = 5, bs = 2, τ = 2: each epoch walks randperm(5) in batches of 2, 2, 1 -> T = 3 · 2 = 6.
    model = _linear_model()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    lr, seed = 0.3, 11

    delta, loss, steps = C.client_update(model, theta, X, Y, lr=lr, batch_size=2, local_epochs=2,
                                         generator=torch.Generator().manual_seed(seed))

    g = torch.Generator().manual_seed(seed)
    w = W0.double().numpy()
    losses = []
    for _ in range(2):
        order = torch.randperm(5, generator=g)
        for s in range(0, 5, 2):
            idx = order[s:s + 2]
            grad, l_step = _grad_and_loss(w, X[idx], Y[idx])
            w = w - lr * grad
            losses.append(l_step)
    assert steps == 6 == C.local_steps(5, 2, 2)
    np.testing.assert_allclose(delta.numpy(), (W0.double().numpy() - w).reshape(-1), rtol=1e-5, atol=1e-6)
    assert loss == pytest.approx(np.mean(losses), rel=1e-5)


def test_client_update_is_deterministic_given_the_seed():
    kw = dict(lr=0.3, batch_size=2, local_epochs=2)
    model = _linear_model()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    d1, _, _ = C.client_update(model, theta, X, Y, generator=torch.Generator().manual_seed(5), **kw)
    d2, _, _ = C.client_update(model, theta, X, Y, generator=torch.Generator().manual_seed(5), **kw)
    d3, _, _ = C.client_update(model, theta, X, Y, generator=torch.Generator().manual_seed(6), **kw)

    assert torch.equal(d1, d2)
    assert not torch.allclose(d1, d3)  # another shuffle -> another trajectory


def test_client_update_leaves_theta_unchanged_and_does_not_alias():
    model = _linear_model()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    # Worst case, as inside run_fedavg: the model's parameters are views of θ after evaluate().
    F.evaluate(model, theta, X, Y)
    theta_before = theta.clone()

    delta, _, _ = C.client_update(model, theta, X, Y, lr=0.5, batch_size=2, local_epochs=1,
                                  generator=torch.Generator().manual_seed(0))

    assert torch.equal(theta, theta_before)
    assert delta.abs().sum() > 0
    delta_before = delta.clone()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(123.0)
    assert torch.equal(delta, delta_before)  # Δ owns its storage
    assert torch.equal(theta, theta_before)


# ----------------------------------------------------------------------------- a cohort


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
@pytest.mark.slow
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
    assert t_seq == t_bat == [C.local_steps(n, batch_size, tau) for n in sizes]
    assert d_bat.dtype == dtype and d_bat.shape == d_seq.shape
    for k in range(len(parts)):
        assert d_seq[k].norm() > 0
        rel = float((d_bat[k] - d_seq[k]).norm() / d_seq[k].norm())
        assert rel < rtol, (k, rel)
    np.testing.assert_allclose(l_bat, l_seq, rtol=rtol)


@pytest.mark.slow
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
    with pytest.raises(ValueError, match=r"engine .*'fast'"):
        C.resolve_engine("fast", "cpu")
    C.check_precision("fp32", "cpu")
    for p in ("tf32", "bf16"):
        with pytest.raises(ValueError, match="precision.*CUDA"):
            C.check_precision(p, "cpu")
    with pytest.raises(ValueError, match=r"precision .*'fp16'"):
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
    from maskfed.engine import runner
    from maskfed.engine.config import make_run_config

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
    from maskfed.engine.config import ConfigError, make_run_config

    with pytest.raises(ConfigError, match="engine"):
        make_run_config(engine="fast")
    with pytest.raises(ConfigError, match="precision"):
        make_run_config(precision="fp16")
    with pytest.raises(ConfigError, match=r"precision = 'bf16' .*'cuda'"):
        make_run_config(precision="bf16", device="cpu")
    assert make_run_config().engine == "auto" and make_run_config().precision == "fp32"


@pytest.mark.slow
def test_run_records_resolved_engine_and_precision(tmp_path, monkeypatch):
    # prepare: a 2-round smoke run with engine auto on the CPU
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    from maskfed.engine import runner
    from maskfed.engine.config import load_profile

    cfg = load_profile("smoke").run(0, rounds=2, device="cpu")
    # execute
    res = runner.run(cfg, progress=False)
    # assert: provenance names the concrete engine auto chose on this device, and the precision
    assert res.provenance["engine"] == C.AUTO_ENGINE["cpu"] and res.provenance["precision"] == "fp32"
    forced = runner.run(cfg.model_copy(update={"engine": "batched"}), progress=False)
    assert forced.provenance["engine"] == "batched"
    for col in ("train_loss", "recovery_unweighted", "test_acc"):
        np.testing.assert_allclose(forced.metrics[col], res.metrics[col], rtol=1e-4)


def test_precision_context_sets_and_restores_tf32_settings():
    # the settings exist without a GPU, so the CUDA branch's bookkeeping can be checked here
    before = C.tf32_settings()
    with C.precision_context("fp32", "cuda") as state:
        assert (C.tf32_settings()["matmul"], C.tf32_settings()["cudnn_conv"]) == ("ieee", "ieee")  # cuDNN's default is TF32
        assert state["matmul"] == state["cudnn_conv"] == "ieee" and state["autocast"] is None
    with C.precision_context("tf32", "cuda"):
        assert (C.tf32_settings()["matmul"], C.tf32_settings()["cudnn_conv"]) == ("tf32", "tf32")
    with C.precision_context("bf16", "cuda") as state:  # bf16: TF32 off, autocast only where training runs
        assert (C.tf32_settings()["matmul"], C.tf32_settings()["cudnn_conv"]) == ("ieee", "ieee")
        assert "forward pass" in state["autocast"] and "loss" in state["autocast"]
    assert C.tf32_settings() == before
    with C.precision_context("fp32", "cpu") as state:
        assert C.tf32_settings() == before and state == {"precision": "fp32", "device_type": "cpu", "autocast": None}


def test_precision_context_uses_the_api_this_torch_has(monkeypatch):
    # torch >= 2.9 has fp32_precision (and refuses reads of the legacy flags once both were used);
    # older ones only allow_tf32. Here: this torch's API is the new one, and the legacy branch works too.
    assert C._new_tf32_api() == hasattr(torch.backends.cuda.matmul, "fp32_precision")
    legacy = {"matmul": False, "cudnn": True}

    class Flags:  # stands for torch.backends.cuda.matmul / torch.backends.cudnn of an older torch
        def __init__(self, key):
            self.__dict__["key"] = key

        def __getattr__(self, name):
            if name == "allow_tf32":
                return legacy[self.key]
            raise AttributeError(name)

        def __setattr__(self, name, value):
            assert name == "allow_tf32"
            legacy[self.key] = value

    monkeypatch.setattr(torch.backends.cuda, "matmul", Flags("matmul"))
    monkeypatch.setattr(torch.backends, "cudnn", Flags("cudnn"))
    assert not C._new_tf32_api()
    with C.precision_context("fp32", "cuda") as state:
        assert legacy == {"matmul": False, "cudnn": False} and state["tf32_api"] == "allow_tf32"
    with C.precision_context("tf32", "cuda"):
        assert legacy == {"matmul": True, "cudnn": True}
    assert legacy == {"matmul": False, "cudnn": True}


def test_client_update_refuses_reduced_precision_off_cuda():
    model, theta, x, y, parts = _problem(torch.float32)
    idx = torch.as_tensor(parts[0])
    with pytest.raises(ValueError, match=r"precision = 'bf16' .*CUDA"):
        C.client_update(model, theta, x[idx], y[idx], lr=0.1, batch_size=16, local_epochs=1,
                        generator=torch.Generator().manual_seed(0), precision="bf16")


@pytest.mark.slow
def test_bf16_autocasts_the_forward_pass_only():
    # prepare: the tiny problem; bf16 autocast through the engines' own path (the CPU has bf16 autocast too)
    model, theta, x, y, parts = _problem(torch.float32)
    kw = dict(lr=0.05, batch_size=32, local_epochs=1)
    out = {}
    for engine in ("sequential", "batched"):
        for amp in (None, torch.bfloat16):
            out[engine, amp] = C.local_training(model, theta, x, y, parts, generators=_gens(len(parts)),
                                                engine=engine, autocast_dtype=amp, **kw)[0]
    # assert: parameters, updates stay float32; bf16 changes Δ_k by bf16 rounding (a few %), not more
    from maskfed.perf import gates
    for engine in ("sequential", "batched"):
        assert out[engine, torch.bfloat16].dtype == torch.float32
        assert all(p.dtype == torch.float32 for p in model.parameters())
        rel = gates.max_relative_difference(out[engine, torch.bfloat16], out[engine, None])
        assert 1e-4 < rel < gates.PRECISION_RTOL["bf16"], (engine, rel)  # bf16 did run, within its bound
        n_K = [len(p) for p in parts]
        assert gates.recovery_difference(out[engine, torch.bfloat16], out[engine, None], n_K) < gates.RECOVERY_RTOL["bf16"]
    assert gates.max_relative_difference(out["batched", torch.bfloat16],
                                         out["sequential", torch.bfloat16]) < gates.PRECISION_RTOL["bf16"]


# ----------------------------------------------------------------------------- micro-batches

@pytest.mark.parametrize("clients, width, max_images, expected", [
    (3, 4, None, [((0, 3), (0, 4))]),                        # no limit: the whole step
    (3, 4, 12, [((0, 3), (0, 4))]),                          # fits exactly
    (3, 4, 6, [((0, 3), (0, 2)), ((0, 3), (2, 4))]),         # 2 slots of all 3 clients each
    (3, 5, 7, [((0, 3), (0, 2)), ((0, 3), (2, 4)), ((0, 3), (4, 5))]),  # 7 // 3 = 2 slots, last chunk 1
    (3, 2, 2, [((0, 2), (0, 1)), ((0, 2), (1, 2)), ((2, 3), (0, 1)), ((2, 3), (1, 2))]),  # clients split too
])
def test_chunk_plan_hand_cases(clients, width, max_images, expected):
    plan = C.chunk_plan(clients, width, max_images)
    assert [((c.start, c.stop), (s.start, s.stop)) for c, s in plan] == expected
    covered = sorted((k, j) for c, s in plan for k in range(c.start, c.stop) for j in range(s.start, s.stop))
    assert covered == [(k, j) for k in range(clients) for j in range(width)]  # every image once
    if max_images:
        assert all((c.stop - c.start) * (s.stop - s.start) <= max_images for c, s in plan)


def test_step_memory_max_images_and_refusals():
    # 10 GiB for activations of 18 MiB per image: 568 images (ResNet-18-GN, measured on the CPU)
    assert C.StepMemory(10 * 2**30, 18 * 2**20).max_images() == 568
    assert C.StepMemory(5.0, 100.0).max_images() == 1  # never below one image
    with pytest.raises(ValueError, match="max_images"):
        C.chunk_plan(3, 4, 0)
    model, theta, x, y, _ = _problem(torch.float32)
    with pytest.raises(ValueError, match="CUDA"):
        C.measure_step_memory(model, theta, x, y, clients=3)


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("batch_size", [32, 128, "full"])
@pytest.mark.slow
def test_chunked_steps_give_the_unchunked_updates(dtype, rtol, batch_size):
    # prepare: unequal shards; a budget of 7 images a micro-batch (6 clients: one slot each, or clients
    # split) forces every step of every protocol into micro-batches
    model, theta, x, y, parts = _problem(dtype, smooth=dtype == torch.float32)  # smooth: see the engine test
    kw = dict(lr=0.05, batch_size=batch_size, local_epochs=2, engine="batched")
    whole = C.StepMemory(budget_bytes=1e18, bytes_per_image=1.0)
    small = C.StepMemory(budget_bytes=7.0, bytes_per_image=1.0)
    assert len(C.chunk_plan(len(parts), 32, small.max_images())) > 1
    # execute
    d_whole, T_w, l_whole = C.local_training(model, theta, x, y, parts, generators=_gens(len(parts)),
                                             step_memory=whole, **kw)
    d_chunk, T_c, l_chunk = C.local_training(model, theta, x, y, parts, generators=_gens(len(parts)),
                                             step_memory=small, **kw)
    # assert: the same Δ_k per client (gradients summed over micro-batches), the same losses
    assert T_w == T_c
    for k in range(len(parts)):
        rel = float((d_chunk[k] - d_whole[k]).norm() / d_whole[k].norm())
        assert rel < rtol, (k, rel)
    np.testing.assert_allclose(l_chunk, l_whole, rtol=rtol)
