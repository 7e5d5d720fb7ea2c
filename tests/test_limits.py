"""Measured masking penalty and the Hessian-weighted recovery factor (maskfed.derivation.limits)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from maskfed.derivation import limits

from maskfed.core import diversity, penalty
from maskfed.core.masking import block_sizes_of


def _tiny_classifier(seed=0, n=40):
    """Linear(4, 5) -> tanh -> Linear(5, 3) in float64 with random data: 43 parameters, 4 blocks."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).double()
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    return model, x, y, g


def _dense_block_hessian(model, theta, x, y):
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]

    def loss_of(flat):
        parts, start = [], 0
        for s in shapes:
            parts.append(flat[start:start + s.numel()].reshape(s))
            start += s.numel()
        out = torch.func.functional_call(model, dict(zip(names, parts)), (x,))
        return nn.functional.cross_entropy(out, y)

    h = torch.autograd.functional.hessian(loss_of, theta)
    return penalty.block_diagonal_part(h, block_sizes_of(list(model.parameters())))


def test_hessian_gram_by_block_hvps_equals_dense_block_diagonal_hessian():
    # prepare: a tiny classifier, its dense Hessian's block-diagonal part, 3 random updates
    model, x, y, g = _tiny_classifier()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    deltas = torch.randn(3, theta.numel(), generator=g, dtype=torch.float64)
    h_bd = _dense_block_hessian(model, theta, x, y)
    # execute
    rf = limits.hessian_recovery_factor(deltas, limits.model_block_hessian(model, theta, x, y), weights_K=[1, 2, 3])
    # assert: Gram and factor as the dense H_bd gives them; the Euclidean one differs
    dense_gram = deltas @ h_bd @ deltas.T
    assert torch.allclose(rf.gram_h_KxK, dense_gram, rtol=1e-9, atol=1e-12)
    assert rf.hessian == pytest.approx(diversity.recovery_factor_from_gram(dense_gram, [1, 2, 3]), rel=1e-9)
    assert rf.euclidean == pytest.approx(diversity.recovery_factor(deltas, [1, 2, 3]), rel=1e-12)
    assert abs(rf.hessian - rf.euclidean) > 1e-3


def test_hessian_factor_is_k_c_for_identical_updates():
    model, x, y, g = _tiny_classifier(1)
    theta = parameters_to_vector(model.parameters()).detach().clone()
    d = torch.randn(1, theta.numel(), generator=g, dtype=torch.float64).expand(4, -1)
    rf = limits.hessian_recovery_factor(d, limits.model_block_hessian(model, theta, x, y))
    assert rf.hessian == pytest.approx(4.0, rel=1e-9) and rf.euclidean == pytest.approx(4.0, rel=1e-12)


def test_penalty_check_matches_second_order_for_small_updates():
    # prepare: small updates (scale 1e-3) of a smooth (tanh) model, where eq. (6)-(7) should hold
    model, x, y, g = _tiny_classifier(2)
    theta = parameters_to_vector(model.parameters()).detach().clone()
    deltas = 1e-2 * torch.randn(4, theta.numel(), generator=g, dtype=torch.float64) + 2e-2 * torch.randn(
        theta.numel(), generator=g, dtype=torch.float64)
    # execute
    chk = limits.penalty_check(model, theta, deltas, x, y, p=0.5, n_draws=3000, generator=torch.Generator().manual_seed(0))
    # assert: Monte Carlo within 4 SE of R_ind and R_shr, each a few-% measurement; ratio = H_bd factor
    assert chk.excess_ind.within(chk.r_ind, 4.0) and chk.excess_ind.se < 0.1 * chk.r_ind, chk
    assert chk.excess_shr.within(chk.r_shr, 4.0) and chk.excess_shr.se < 0.1 * chk.r_shr, chk
    assert chk.ratio_measured.within(chk.recovery_h, 4.0)
    # R_ind, R_shr and their ratio as eq. (6)-(7) give them from the dense block-diagonal Hessian at
    # θ − Δ̄ (an independent route: no Gram matrix, no Hessian-vector products)
    mean = deltas.mean(dim=0)
    h_bd = _dense_block_hessian(model, theta - mean, x, y)
    c = (1 - 0.5) / (2 * 0.5)
    r_ind = c / deltas.shape[0] ** 2 * float(sum(d @ h_bd @ d for d in deltas))
    r_shr = c * float(mean @ h_bd @ mean)
    assert chk.r_ind == pytest.approx(r_ind, rel=1e-9) and chk.r_shr == pytest.approx(r_shr, rel=1e-9)
    assert chk.recovery_h == pytest.approx(r_shr / r_ind, rel=1e-9)
    row = chk.row()
    assert {"excess_ind", "excess_ind_se", "r_shr", "recovery_euclid"} <= set(row)


def test_piecewise_linear_parts_names_what_the_network_has():
    from maskfed.engine.models import build_model

    # the small CNN has ReLU and max-pooling; ResNet-18-GN's CIFAR stem has no max-pool (an Identity)
    assert limits.piecewise_linear_parts(build_model("small_cnn_gn", num_classes=10)) == ["ReLU", "max-pooling"]
    assert limits.piecewise_linear_parts(build_model("resnet18_gn", num_classes=10)) == ["ReLU"]
    assert limits.piecewise_linear_parts(_tiny_classifier()[0]) == []   # tanh: smooth


def test_second_order_error_columns():
    import pandas as pd

    t = pd.DataFrame({"excess_ind": [1.5], "excess_ind_se": [0.1], "r_ind": [1.0],
                      "excess_shr": [2.0], "excess_shr_se": [0.2], "r_shr": [4.0]})
    out = limits.second_order_error(t)
    assert out.miss_ind[0] == pytest.approx(0.5) and out.miss_shr[0] == pytest.approx(-0.5)
    assert out.miss_ind_se[0] == pytest.approx(0.1) and out.miss_shr_se[0] == pytest.approx(0.05)


@pytest.mark.parametrize("kwargs,match", [({"p": 0.0}, "p"), ({"n_draws": 1}, "n_draws")])
def test_penalty_check_refuses_bad_input(kwargs, match):
    model, x, y, _ = _tiny_classifier()
    theta = parameters_to_vector(model.parameters()).detach().clone()
    args = {"p": 0.5, "n_draws": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        limits.penalty_check(model, theta, torch.zeros(2, theta.numel()), x, y, generator=torch.Generator(), **args)


@pytest.mark.slow
def test_measure_limits_on_smoke_profile_is_cached(tmp_path, monkeypatch):
    from maskfed.engine.config import load_profile

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    cfg = load_profile("smoke").run(0)
    protocols = {"full, τ=1": ("full", 1), "bs 16, τ=1": (16, 1)}
    kw = dict(at_rounds=[0, 1], protocols=protocols, train_protocol="bs 16, τ=1", n_draws=8, eval_size=64)
    table = limits.measure_limits(cfg, **kw)
    assert list(table["round"]) == [0, 0, 1, 1] and set(table.protocol) == set(protocols)
    assert (table.r_ind > 0).all() and (table.r_shr > 0).all()
    assert list(table["T"]) == [1.0, 7.0, 1.0, 7.0]  # 100-image shards: ceil(100/16) = 7 steps
    monkeypatch.setattr(limits, "trajectory_snapshots", lambda *a, **k: pytest.fail("cache was not used"))
    again = limits.measure_limits(cfg, **kw)
    assert again.equals(table) or (again.round.tolist() == table.round.tolist()
                                   and (again.r_ind - table.r_ind).abs().max() < 1e-12 * table.r_ind.max())
    with pytest.raises(ValueError, match="train_protocol"):
        limits.measure_limits(cfg, **{**kw, "train_protocol": "bs 8"}, force=True)


@pytest.mark.slow
def test_trajectory_snapshots_follow_fedavg():
    # prepare: the same smoke configuration trained by fedavg.run_fedavg for 3 rounds
    from maskfed.engine import fedavg, runner
    from maskfed.engine.config import load_profile
    from maskfed.engine.models import build_model

    cfg = load_profile("smoke").run(0, batch_size=16, local_epochs=1, rounds=3)
    images = runner.images_for(cfg)
    data = runner.prepare_data(cfg, images, torch.device("cpu"))
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, num_classes=int(images.y_train.max()) + 1, gn_groups=cfg.gn_groups, width=cfg.width)
    records = fedavg.run_fedavg(model, data, rounds=3, cohort_size=cfg.cohort_size, local_epochs=1, batch_size=16,
                                lr=cfg.lr, aggregation=cfg.aggregation, seed=cfg.seed)
    # execute
    _, _, snaps = limits.trajectory_snapshots(cfg, [0, 2], {"full": ("full", 1), "bs 16": (16, 1)}, "bs 16")
    # assert: the recorded cohorts are FedAvg's, round for round (a drifted trajectory changes 1/Δ_S)
    assert [s.round for s in snaps] == [0, 2]
    for s in snaps:
        rec = records[s.round]
        assert " ".join(map(str, s.n_K)) == rec["n_k"]
        assert diversity.recovery_factor(s.deltas["bs 16"], s.n_K) == pytest.approx(rec["recovery_weighted"], rel=1e-9)
        assert not torch.equal(s.deltas["full"], s.deltas["bs 16"])


def test_default_protocols_are_full_batch_and_a_small_batch_per_profile():
    assert limits.default_protocols("smoke") == {"full batch, τ=1": ("full", 1), "bs 16, τ=1": (16, 1)}
    for name in ("cpu", "cpu-long", "cpu-paper", "paper"):
        assert limits.default_protocols(name) == {"full batch, τ=1": ("full", 1), "bs 32, τ=1": (32, 1)}
