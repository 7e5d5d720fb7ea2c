"""Tests for the masking curvature penalty (eq. 4) and Propositions 1-3, Corollary 1."""

from __future__ import annotations

import pytest
import torch

from maskfed.derivation import theory

from maskfed.core import diversity, masking, penalty

torch.set_num_threads(1)  # the test machine is small and shared

N_SE = 5.0  # Monte Carlo tolerance in standard errors


def _quadratic_model(seed=0, sizes=(3, 4, 5)):
    """Parameters as separate tensors and a quadratic loss over their concatenation."""
    gen = torch.Generator().manual_seed(seed)
    p_dim = sum(sizes)
    h = theory.random_spd(p_dim, gen, cond=20.0)
    g = torch.randn(p_dim, generator=gen, dtype=torch.float64)
    params = [torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True) for s in sizes]

    def loss():
        t = torch.cat(params)
        return g @ t + 0.5 * t @ h @ t

    return h, params, loss


def test_hvp_penalty_equals_closed_form_on_quadratic():
    h, params, loss = _quadratic_model()
    delta = torch.randn(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = penalty.curvature_penalty_hvp(loss, params, delta, 0.3)
    want = penalty.curvature_penalty_dense(delta, h, [3, 4, 5], 0.3)
    assert got == pytest.approx(want, rel=1e-12)
    # the same through the dense operator
    assert penalty.curvature_penalty(delta, 0.3, penalty.DenseBlockHessian(h, [3, 4, 5])) == pytest.approx(want, rel=1e-12)


def _flat_loss(problem):
    names = [n for n, _ in problem.module.named_parameters()]

    def f(flat):
        vals = masking.unflatten_params(flat, problem.params)
        pred = torch.func.functional_call(problem.module, dict(zip(names, vals)), (problem.x,))
        return torch.nn.functional.mse_loss(pred, problem.y)

    return f


@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_hvp_penalty_equals_dense_hessian_on_tiny_mlp(granularity):
    prob = theory.tiny_mlp_problem(3)
    assert prob.theta.numel() == 51
    h = torch.autograd.functional.hessian(_flat_loss(prob), prob.theta)
    sizes = masking.block_sizes_of(prob.params, granularity)
    delta = torch.randn(51, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = penalty.curvature_penalty_hvp(prob.loss, prob.params, delta, 0.5, granularity=granularity)
    want = penalty.curvature_penalty_dense(delta, h, sizes, 0.5)
    assert got == pytest.approx(want, rel=1e-10)
    # delta given as a list of tensors shaped like the parameters
    as_list = masking.unflatten_params(delta, prob.params)
    assert penalty.curvature_penalty_hvp(prob.loss, prob.params, as_list, 0.5, granularity=granularity) == pytest.approx(want, rel=1e-10)


def test_block_operator_matches_block_diagonal_of_dense_hessian():
    prob = theory.tiny_mlp_problem(4)
    h = torch.autograd.functional.hessian(_flat_loss(prob), prob.theta)
    op = penalty.HVPBlockHessian(prob.loss, prob.params)
    v = torch.randn(3, 51, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.allclose(op(v), v @ penalty.block_diagonal_part(h, prob.block_sizes), atol=1e-12)


def test_penalty_is_zero_at_p_one():
    h, params, loss = _quadratic_model()
    delta = torch.ones(12, dtype=torch.float64)
    assert penalty.curvature_penalty_hvp(loss, params, delta, 1.0) == 0.0
    assert penalty.curvature_penalty_dense(delta, h, [3, 4, 5], 1.0) == 0.0
    op = penalty.DenseBlockHessian(h, [3, 4, 5])
    assert penalty.penalty_independent(torch.ones(3, 12), 1.0, op) == 0.0
    assert penalty.penalty_shared(torch.ones(3, 12), 1.0, op) == 0.0


def test_off_diagonal_blocks_do_not_enter():
    gen = torch.Generator().manual_seed(5)
    sizes = [2, 3, 3]
    h = theory.random_spd(8, gen)
    bd = penalty.block_diagonal_part(h, sizes)
    other = bd + 3.0 * (h - bd)  # same diagonal blocks, different coupling
    delta = torch.randn(8, generator=gen, dtype=torch.float64)
    assert penalty.curvature_penalty_dense(delta, h, sizes, 0.4) == pytest.approx(
        penalty.curvature_penalty_dense(delta, other, sizes, 0.4), rel=1e-13)
    assert penalty.curvature_penalty(delta, 0.4, penalty.DenseBlockHessian(other, sizes)) == pytest.approx(
        penalty.curvature_penalty(delta, 0.4, penalty.DenseBlockHessian(h, sizes)), rel=1e-13)
    # but the naive full-Hessian form (1-p)/(2p) Δᵀ H Δ differs
    assert abs(penalty.penalty_coefficient(0.4) * float(delta @ h @ delta)
               - penalty.curvature_penalty_dense(delta, h, sizes, 0.4)) > 1e-3


def test_bad_p_raises():
    h, params, loss = _quadratic_model()
    op = penalty.DenseBlockHessian(h, [3, 4, 5])
    for bad in (0.0, 1.2):
        with pytest.raises(ValueError, match="p"):
            penalty.curvature_penalty(torch.ones(12), bad, op)
        with pytest.raises(ValueError, match="p"):
            penalty.penalty_independent(torch.ones(2, 12), bad, op)
        with pytest.raises(ValueError, match="p"):
            penalty.curvature_penalty_hvp(loss, params, torch.ones(12), bad)


# --------------------------------------------------------------------- Monte Carlo checks of Prop. 1-3

SIZES = [3, 4, 5]


@pytest.fixture(scope="module")
def quad_cohort():
    gen = torch.Generator().manual_seed(2024)
    q = theory.random_quadratic(12, gen, cond=20.0)  # dense, not block-diagonal
    theta = torch.randn(12, generator=gen, dtype=torch.float64)
    mu = torch.randn(12, generator=gen, dtype=torch.float64)
    deltas = mu + 0.3 * torch.randn(4, 12, generator=gen, dtype=torch.float64)
    return q, theta, deltas


def test_prop1_monte_carlo_and_exact_on_dense_quadratic(quad_cohort):
    q, theta, deltas = quad_cohort
    p = 0.4
    want = penalty.curvature_penalty_dense(deltas[0], q.hessian, SIZES, p)
    est = theory.masked_excess_mc(q, theta, deltas[0], SIZES, p, "independent", 20_000, 0)
    assert est.within(want, N_SE), (est, want)
    # exact expectation over all 2^B masks: equality to round-off on a quadratic
    exact = theory.masked_excess_exact(q, theta, deltas[0], SIZES, p)
    assert exact == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("weights", [None, [1.0, 2.0, 3.0, 10.0]])
def test_prop2_independent_masks(quad_cohort, weights):
    q, theta, deltas = quad_cohort
    p = 0.5
    op = penalty.DenseBlockHessian(q.hessian, SIZES)
    want = penalty.penalty_independent(deltas, p, op, weights)
    if weights is None:
        by_hand = sum(penalty.curvature_penalty_dense(d, q.hessian, SIZES, p) for d in deltas) / 16
        assert want == pytest.approx(by_hand, rel=1e-12)
    est = theory.masked_excess_mc(q, theta, deltas, SIZES, p, "independent", 20_000, 1, weights_K=weights)
    assert est.within(want, N_SE), (est, want)
    # the shared-mask value is far away: the check discriminates
    assert abs(est.z(penalty.penalty_shared(deltas, p, op, weights))) > N_SE


@pytest.mark.parametrize("weights", [None, [1.0, 2.0, 3.0, 10.0]])
def test_prop3_shared_mask(quad_cohort, weights):
    q, theta, deltas = quad_cohort
    p = 0.5
    op = penalty.DenseBlockHessian(q.hessian, SIZES)
    want = penalty.penalty_shared(deltas, p, op, weights)
    agg = penalty.aggregate(deltas, weights)
    assert want == pytest.approx(penalty.curvature_penalty_dense(agg, q.hessian, SIZES, p), rel=1e-12)
    est = theory.masked_excess_mc(q, theta, deltas, SIZES, p, "shared", 20_000, 2, weights_K=weights)
    assert est.within(want, N_SE), (est, want)
    assert abs(est.z(penalty.penalty_independent(deltas, p, op, weights))) > N_SE


# --------------------------------------------------------------------- Corollary 1


@pytest.mark.parametrize("weights", [None, [5.0, 1.0, 1.0, 2.0, 9.0]])
def test_ratio_equals_euclidean_recovery_factor_for_isotropic_blocks(weights):
    gen = torch.Generator().manual_seed(9)
    sizes = [4, 4, 2]
    h = theory.random_spd(10, gen)
    c = 2.5
    for sl in masking.block_slices(sizes):  # every H_bb = c·I, off-diagonal blocks arbitrary
        h[sl, sl] = c * torch.eye(sl.stop - sl.start, dtype=torch.float64)
    deltas = torch.randn(5, 10, generator=gen, dtype=torch.float64)
    op = penalty.DenseBlockHessian(h, sizes)
    ratio = penalty.penalty_ratio(deltas, op, weights)
    assert ratio == pytest.approx(diversity.recovery_factor(deltas, weights), rel=1e-12)
    cp = penalty.cohort_penalty(deltas, 0.3, op, weights)
    assert cp.r_shr / cp.r_ind == pytest.approx(cp.ratio, rel=1e-12)
    assert cp.euclidean_ratio == pytest.approx(ratio, rel=1e-12)
    assert cp.r_ind == pytest.approx(penalty.penalty_independent(deltas, 0.3, op, weights), rel=1e-12)
    assert cp.r_shr == pytest.approx(penalty.penalty_shared(deltas, 0.3, op, weights), rel=1e-12)


def test_ratio_differs_from_euclidean_for_anisotropic_blocks():
    gen = torch.Generator().manual_seed(10)
    sizes = [4, 4]
    h = theory.block_anisotropic_hessian(sizes, 100.0, gen)
    deltas = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    op = penalty.DenseBlockHessian(h, sizes)
    assert abs(penalty.penalty_ratio(deltas, op) / diversity.recovery_factor(deltas) - 1) > 1e-3


def test_weighted_ratio_for_coinciding_updates_is_inverse_sum_of_squared_weights():
    gen = torch.Generator().manual_seed(11)
    h = theory.block_anisotropic_hessian([3, 3], 10.0, gen)
    delta = torch.randn(6, generator=gen, dtype=torch.float64)
    n_k = torch.tensor([10.0, 20.0, 30.0, 40.0], dtype=torch.float64)
    w = n_k / n_k.sum()
    ratio = penalty.penalty_ratio(delta.expand(4, 6), penalty.DenseBlockHessian(h, [3, 3]), n_k)
    assert ratio == pytest.approx(float(1 / (w**2).sum()), rel=1e-12)
    assert ratio <= 4


def test_hvp_gram_matches_dense_on_mlp():
    prob = theory.tiny_mlp_problem(6)
    h = torch.autograd.functional.hessian(_flat_loss(prob), prob.theta)
    deltas = torch.randn(3, 51, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    g_hvp = penalty.block_hessian_gram(deltas, penalty.HVPBlockHessian(prob.loss, prob.params))
    g_dense = penalty.block_hessian_gram(deltas, penalty.DenseBlockHessian(h, prob.block_sizes))
    assert torch.allclose(g_hvp, g_dense, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------- signal-noise split (eq. 9-14)


@pytest.mark.parametrize("k_c,mu2,sigma2", [(2, 1.0, 1.0), (5, 0.3, 2.0), (10, 4.0, 0.5)])
def test_signal_noise_formula_on_exact_inputs(k_c, mu2, sigma2):
    # Δ_k = μ + ε_k with μ ⊥ ε_k, ε_k mutually orthogonal, ‖ε_k‖² = σ²: every cross term is exactly 0
    p_dim = k_c + 1
    eye = torch.eye(p_dim, dtype=torch.float64)
    deltas = mu2**0.5 * eye[0] + sigma2**0.5 * eye[1:]
    sn = diversity.signal_noise(deltas)
    assert sn.sigma2_hat == pytest.approx(sigma2, rel=1e-12)
    assert sn.mu2_hat == pytest.approx(mu2, rel=1e-12)
    r = mu2 / sigma2
    assert diversity.recovery_factor(deltas) == pytest.approx(diversity.predicted_recovery_factor(r, k_c), rel=1e-12)
