"""Zero-mean perturbations of client updates (maskfed.derivation.perturbations): closed forms and Monte Carlo."""

from __future__ import annotations

import pytest
import torch

from maskfed.derivation import perturbations, theory

from maskfed.core import penalty


@pytest.fixture
def quad_cohort():
    g = torch.Generator().manual_seed(3)
    loss = theory.random_quadratic(8, g, cond=20.0)
    theta = torch.randn(8, generator=g, dtype=torch.float64)
    deltas = 0.5 * torch.randn(4, 8, generator=g, dtype=torch.float64)
    return loss, theta, deltas


def _grad(loss, point):
    return loss.g + loss.hessian @ point


def test_dropout_penalty_hand_computed():
    # prepare: Δ = [[1, 2], [3, 0]], diag H = [2, 1], p = 0.5 -> (1-p)/(2p) = 0.5
    deltas = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    h = torch.tensor([2.0, 1.0])
    # independent: 0.5 * (0.25 * (2·1 + 1·4) + 0.25 * (2·9 + 0)) = 3.0
    assert perturbations.dropout_penalty(deltas, 0.5, h, "independent") == pytest.approx(3.0)
    # shared: mean update [2, 1] -> 0.5 * (2·4 + 1·1) = 4.5
    assert perturbations.dropout_penalty(deltas, 0.5, h, "shared") == pytest.approx(4.5)


def test_dropout_penalty_is_the_block_penalty_with_one_coordinate_blocks(quad_cohort):
    _, _, deltas = quad_cohort
    h = theory.random_spd(8, 1, cond=5.0)
    op = penalty.DenseBlockHessian(h, [1] * 8)
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert perturbations.dropout_penalty(deltas, 0.3, torch.diagonal(h), "independent", w) == pytest.approx(
        penalty.penalty_independent(deltas, 0.3, op, w), rel=1e-12)
    assert perturbations.dropout_penalty(deltas, 0.3, torch.diagonal(h), "shared", w) == pytest.approx(
        penalty.penalty_shared(deltas, 0.3, op, w), rel=1e-12)


def test_noise_penalty_hand_computed():
    # σ = 2, tr H = 3: shared ½·4·3 = 6; independent with K_c = 4 equal weights: 6 / 4 = 1.5
    assert perturbations.noise_penalty(2.0, 3.0, "shared", k_c=4) == pytest.approx(6.0)
    assert perturbations.noise_penalty(2.0, 3.0, "independent", k_c=4) == pytest.approx(1.5)
    # weights 1:3 -> Σ w² = 1/16 + 9/16 = 10/16
    assert perturbations.noise_penalty(2.0, 3.0, "independent", weights_K=[1, 3]) == pytest.approx(6.0 * 10 / 16)


@pytest.mark.parametrize("mode", ["independent", "shared"])
@pytest.mark.parametrize("kind,level", [("dropout", 0.5), ("gaussian", 0.3), ("block_mask", 0.5)])
def test_monte_carlo_matches_closed_form_on_quadratic(quad_cohort, kind, level, mode):
    loss, theta, deltas = quad_cohort
    w = torch.tensor([1.0, 1.0, 2.0, 4.0], dtype=torch.float64)
    agg = (w / w.sum()) @ deltas
    blocks = [3, 3, 2]
    if kind == "dropout":
        pred = perturbations.dropout_penalty(deltas, level, torch.diagonal(loss.hessian), mode, w)
    elif kind == "gaussian":
        pred = perturbations.noise_penalty(level, float(torch.trace(loss.hessian)), mode, weights_K=w)
    else:
        op = penalty.DenseBlockHessian(loss.hessian, blocks)
        pred = (penalty.penalty_independent if mode == "independent" else penalty.penalty_shared)(deltas, level, op, w)
    est = perturbations.aggregate_excess_mc(loss, theta, deltas, kind, level, mode, 20000, 11, w,
                                            block_sizes=blocks, grad_P=_grad(loss, theta - agg))
    assert est.within(pred, 4.0), (est, pred)
    assert est.se < 0.05 * pred  # the check has teeth: a 20 % error would be 4 SE away


def test_control_variate_keeps_the_mean_and_cuts_the_error(quad_cohort):
    loss, theta, deltas = quad_cohort
    agg = deltas.mean(0)
    plain = perturbations.aggregate_excess_mc(loss, theta, deltas, "dropout", 0.5, "shared", 4000, 5)
    cv = perturbations.aggregate_excess_mc(loss, theta, deltas, "dropout", 0.5, "shared", 4000, 5,
                                           grad_P=_grad(loss, theta - agg))
    pred = perturbations.dropout_penalty(deltas, 0.5, torch.diagonal(loss.hessian), "shared")
    assert plain.within(pred, 4.0) and cv.within(pred, 4.0)
    assert cv.se < plain.se


def test_independent_is_attenuated_by_k_c_and_shared_is_not():
    # identical updates, equal weights: independent = shared / K_c for both kinds (exactly)
    k_c = 5
    deltas = torch.tensor([[1.0, -2.0, 0.5]]).expand(k_c, 3)
    h = torch.tensor([1.0, 3.0, 2.0])
    single = perturbations.dropout_penalty(deltas[:1], 0.5, h, "shared")
    assert perturbations.dropout_penalty(deltas, 0.5, h, "shared") == pytest.approx(single)
    assert perturbations.dropout_penalty(deltas, 0.5, h, "independent") == pytest.approx(single / k_c)
    ind = perturbations.noise_penalty(1.0, 6.0, "independent", k_c=k_c)
    assert perturbations.noise_penalty(1.0, 6.0, "shared", k_c=k_c) == pytest.approx(k_c * ind)


@pytest.mark.parametrize("kind,level", [("dropout", 0.5), ("gaussian", 1.0), ("block_mask", 0.5)])
def test_shared_draws_are_identical_across_clients_and_independent_ones_are_not(kind, level):
    deltas = torch.ones(3, 6)
    out = {mode: perturbations.perturb_cohort(deltas, kind, level, mode, 0, n_draws=20, block_sizes=[2, 2, 2])
           for mode in ("independent", "shared")}
    assert out["shared"].shape == (20, 3, 6)
    assert torch.equal(out["shared"][:, 0], out["shared"][:, 1]) and torch.equal(out["shared"][:, 0], out["shared"][:, 2])
    assert not torch.equal(out["independent"][:, 0], out["independent"][:, 1])


def test_perturbations_are_unbiased():
    deltas = torch.tensor([[1.0, -1.0, 2.0, 0.5]])
    for kind, level in (("dropout", 0.4), ("gaussian", 0.5)):
        draws = perturbations.perturb_cohort(deltas, kind, level, "independent", 1, n_draws=40000)
        assert torch.allclose(draws.mean(0), deltas.double(), atol=0.05)


@pytest.mark.parametrize("kwargs,match", [
    ({"kind": "pruning"}, "kind must be one of"),
    ({"mode": "per-layer"}, "mode must be one of"),
    ({"level": 0.0}, "p"),
    ({"kind": "gaussian", "level": -1.0}, "level"),
    ({"kind": "block_mask"}, "block_sizes"),
])
def test_bad_input_is_refused_before_drawing(kwargs, match):
    args = {"kind": "dropout", "level": 0.5, "mode": "independent", **kwargs}
    with pytest.raises(ValueError, match=match):
        perturbations.perturb_cohort(torch.ones(2, 3), args["kind"], args["level"], args["mode"], 0)


# --- gradient noise through T local steps ------------------------------------------------------


def test_step_noise_penalty_hand_computed():
    # prepare: one coordinate, H = 2, η = 0.25 -> A = 1 − ηH = 0.5; σ = 2
    h = torch.tensor([[2.0]], dtype=torch.float64)
    # T = 2: C = η²σ²(1 + A²) = 0.0625 · 4 · 1.25 = 0.3125; shared ½·H·C = 0.3125, independent (K_c = 4) / 4
    assert perturbations.local_noise_covariance(h, 0.25, 2, 2.0).item() == pytest.approx(0.3125)
    assert perturbations.step_noise_penalty(h, 0.25, 2, 2.0, "shared", k_c=4) == pytest.approx(0.3125)
    assert perturbations.step_noise_penalty(h, 0.25, 2, 2.0, "independent", k_c=4) == pytest.approx(0.078125)
    # T = 1 is noise of standard deviation ησ added once to the update
    assert perturbations.step_noise_penalty(h, 0.25, 1, 2.0, "shared", k_c=1) == pytest.approx(
        perturbations.noise_penalty(0.5, 2.0, "shared", k_c=1))


@pytest.mark.parametrize("mode", ["independent", "shared"])
def test_local_steps_monte_carlo_matches_the_closed_form(quad_cohort, mode):
    # prepare: four clients with their own linear terms, unequal weights, T = 3 noisy local steps
    loss, theta, deltas = quad_cohort
    w = torch.tensor([1.0, 1.0, 2.0, 4.0], dtype=torch.float64)
    lr, steps, sigma = 0.02, 3, 0.5
    # execute
    est = perturbations.local_steps_excess_mc(loss, theta, deltas, lr, steps, sigma, mode, 4000, 11, w)
    pred = perturbations.step_noise_penalty(loss.hessian, lr, steps, sigma, mode, weights_K=w)
    # assert: within 4 SE, and a measurement of a few percent
    assert est.within(pred, 4.0) and est.se < 0.05 * pred, (est, pred)


def test_local_steps_independent_noise_is_attenuated_by_the_weights():
    h = theory.random_spd(5, 2, cond=5.0)
    w = torch.tensor([1.0, 3.0])
    shared = perturbations.step_noise_penalty(h, 0.05, 4, 0.3, "shared", weights_K=w)
    independent = perturbations.step_noise_penalty(h, 0.05, 4, 0.3, "independent", weights_K=w)
    assert shared / independent == pytest.approx(1 / (0.25**2 + 0.75**2), rel=1e-12)


@pytest.mark.parametrize("kwargs, match", [({"lr": 0.0}, "lr"), ({"steps": 0}, "steps"), ({"sigma": -1.0}, "σ"),
                                           ({"mode": "both"}, "mode"), ({"n_draws": 1}, "n_draws")])
def test_local_steps_refuse_bad_input_before_drawing(quad_cohort, kwargs, match):
    loss, theta, deltas = quad_cohort
    args = {"lr": 0.05, "steps": 2, "sigma": 0.1, "mode": "shared", "n_draws": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        perturbations.local_steps_excess_mc(loss, theta, deltas, args["lr"], args["steps"], args["sigma"],
                                            args["mode"], args["n_draws"], 0)
