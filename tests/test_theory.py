"""Tests for the simulation helpers of the theory chapters (maskfed.derivation.theory)."""

from __future__ import annotations

import math

import pytest
import torch

from maskfed.derivation import theory

from maskfed.core import diversity, penalty

torch.set_num_threads(1)  # the test machine is small and shared

N_SE = 5.0


def test_profile_value():
    assert theory.profile_value("smoke", 1, 2) == 1
    assert theory.profile_value("cpu", 1, 2) == 2
    assert theory.profile_value("paper", 1, 2) == 2
    assert theory.profile_value("paper", 1, 2, 3) == 3
    assert theory.profile_value("cpu-long", 1, 2, 3) == 2  # longer FedAvg runs, the cpu derivation settings
    assert theory.profile_value("cpu-paper", 1, 2, 3) == 2  # the paper's protocol with the cpu model: the same
    assert theory.profile_value("cpu-masked", 1, 2, 3) == 2  # every profile has a value (it raised KeyError before)
    with pytest.raises(ValueError, match="profile"):
        theory.profile_value("gpu", 1, 2)


def test_mc_estimate_and_ratio_of_means():
    est = theory.mc_estimate([1.0, 2.0, 3.0, 4.0])
    assert est.mean == 2.5 and est.n == 4
    assert est.se == pytest.approx(math.sqrt(5 / 3) / 2)
    assert est.within(2.5 + 4 * est.se) and not est.within(2.5 + 6 * est.se)
    assert est.z(2.5 - est.se) == pytest.approx(1.0)
    r = theory.ratio_of_means([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert r.mean == pytest.approx(2.0) and r.se == pytest.approx(0.0, abs=1e-15)


def test_loglog_slope_of_power_law():
    x = torch.logspace(-3, 0, 10, dtype=torch.float64)
    assert theory.loglog_slope(x, 7 * x**3) == pytest.approx(3.0, abs=1e-12)
    assert theory.loglog_slope(x, -2 * x**2) == pytest.approx(2.0, abs=1e-12)


def test_random_spd_is_dense_symmetric_with_given_condition():
    h = theory.random_spd(8, 0, cond=50.0)
    assert torch.allclose(h, h.T)
    ev = torch.linalg.eigvalsh(h)
    assert float(ev.max() / ev.min()) == pytest.approx(50.0, rel=1e-8)
    assert float(h[:4, 4:].abs().max()) > 1e-3  # off-diagonal blocks are not zero


def test_block_anisotropic_hessian():
    sizes = [3, 2, 1]
    assert torch.allclose(theory.block_anisotropic_hessian(sizes, 1.0, 0), torch.eye(6, dtype=torch.float64))
    h = theory.block_anisotropic_hessian(sizes, 30.0, 0)
    assert torch.allclose(h, penalty.block_diagonal_part(h, sizes))
    ev = torch.linalg.eigvalsh(h[:3, :3])
    assert float(ev.max() / ev.min()) == pytest.approx(30.0, rel=1e-8)


def test_quadratic_loss_batched():
    q = theory.random_quadratic(5, 1)
    t = torch.randn(7, 5, dtype=torch.float64)
    vals = q(t)
    assert vals.shape == (7,)
    assert float(q(t[2])) == pytest.approx(float(vals[2]))


def test_tiny_mlp_problem_and_loss_at():
    prob = theory.tiny_mlp_problem(0)
    assert prob.block_sizes == [24, 6, 18, 3]
    th = prob.theta
    assert float(prob.loss_at(th)) == pytest.approx(float(prob.loss().detach()), rel=1e-14)
    assert prob.loss_at(torch.stack([th, th + 0.1])).shape == (2,)


def test_exact_excess_equals_penalty_on_quadratic_and_p_one_is_zero():
    gen = torch.Generator().manual_seed(0)
    q = theory.random_quadratic(9, gen)
    theta, delta = torch.randn(9, generator=gen, dtype=torch.float64), torch.randn(9, generator=gen, dtype=torch.float64)
    sizes = [2, 3, 4]
    for p in (0.2, 0.7):
        assert theory.masked_excess_exact(q, theta, delta, sizes, p) == pytest.approx(
            penalty.curvature_penalty_dense(delta, q.hessian, sizes, p), rel=1e-10)
    assert theory.masked_excess_exact(q, theta, delta, sizes, 1.0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="16"):
        theory.masked_excess_exact(lambda t: t.sum(-1), torch.zeros(17), torch.ones(17), [1] * 17, 0.5)


def test_prop1_remainder_is_cubic_on_tiny_mlp():
    prob = theory.tiny_mlp_problem(0)
    op = penalty.HVPBlockHessian(prob.loss, prob.params)
    d = theory.random_direction(51, 1.0, 1)
    p = 0.3
    r1 = penalty.curvature_penalty(d, p, op)
    scales = torch.logspace(-3.5, -1.5, 5, dtype=torch.float64)
    gaps = [theory.masked_excess_exact(prob.loss_at, prob.theta, s * d, prob.block_sizes, p) - s**2 * r1 for s in scales]
    assert abs(theory.loglog_slope(scales, torch.tensor(gaps)) - 3.0) < 0.1


def test_signal_noise_cohorts_moments():
    mu = torch.zeros(50, dtype=torch.float64)
    mu[0] = 1.0
    sims = theory.signal_noise_cohorts(mu, 2.0, 4, 4000, 0)
    assert sims.shape == (4000, 4, 50)
    eps2 = ((sims - mu) ** 2).sum(-1).flatten()
    assert theory.mc_estimate(eps2).within(2.0, N_SE)
    # correlated noise: E<ε_1, ε_2> = ρ σ²
    sims = theory.signal_noise_cohorts(mu, 2.0, 4, 4000, 1, rho=0.5)
    e = sims - mu
    assert theory.mc_estimate((e[:, 0] * e[:, 1]).sum(-1)).within(1.0, N_SE)
    # unequal scales: E‖ε_k‖² = σ² s_k
    sims = theory.signal_noise_cohorts(mu, 2.0, 2, 4000, 2, scales_K=[0.5, 3.0])
    e2 = ((sims - mu) ** 2).sum(-1)
    assert theory.mc_estimate(e2[:, 1]).within(6.0, N_SE)
    with pytest.raises(ValueError, match="rho"):
        theory.signal_noise_cohorts(mu, 1.0, 2, 1, 0, rho=1.5)


def test_fedexp_step_is_half_cohort_times_diversity():
    deltas = torch.randn(6, 20, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    raw = theory.fedexp_step_size(deltas, clip=False)
    assert raw == pytest.approx(6 / 2 * diversity.gradient_diversity(deltas), rel=1e-12)
    assert theory.fedexp_step_size(deltas) == max(1.0, raw)
    same = torch.ones(6, 20)
    assert theory.fedexp_step_size(same, clip=False) == pytest.approx(0.5)
    assert theory.fedexp_step_size(same) == 1.0


@pytest.mark.parametrize("angle,a", [(0.0, 1.0), (math.pi / 2, 2.0), (2.5, 0.7), (math.pi, 1.0)])
def test_two_client_recovery_factor(angle, a):
    d = theory.two_client_updates(angle, a)
    want = (1 + a * a + 2 * a * math.cos(angle)) / (1 + a * a)
    rf = diversity.recovery_factor(d)
    assert rf == pytest.approx(want, abs=1e-12)


def test_anisotropy_drift():
    drift = theory.anisotropy_drift([4, 4], 1.0, 3, 1.0, 5, 0)
    assert torch.allclose(drift, torch.zeros(5, dtype=torch.float64), atol=1e-12)
    drift = theory.anisotropy_drift([4, 4], 100.0, 3, 1.0, 20, 0, signal="aligned")
    assert float(drift.abs().median()) > 1e-3
    with pytest.raises(ValueError, match="signal"):
        theory.anisotropy_drift([4], 2.0, 2, 1.0, 1, 0, signal="bogus")


def test_anisotropic_cohort_shapes_and_signal_strength():
    h, deltas = theory.anisotropic_cohort([4, 4], 30.0, 5, 2.0, 0)
    assert h.shape == (8, 8) and deltas.shape == (5, 8)
    assert torch.equal(h[:4, 4:], torch.zeros(4, 4))          # block-diagonal
    ev = torch.linalg.eigvalsh(h[:4, :4])
    assert float(ev.max() / ev.min()) == pytest.approx(30.0, rel=1e-9)
    # the drift study is built from these cohorts: same stream, same numbers
    h2, d2 = theory.anisotropic_cohort([4, 4], 30.0, 5, 2.0, 0)
    assert torch.equal(h, h2) and torch.equal(deltas, d2)
    with pytest.raises(ValueError, match="signal"):
        theory.anisotropic_cohort([4], 2.0, 2, 1.0, 0, signal="bogus")


def test_sample_summary_hand_case():
    # samples 0, 0, 0, 4: mean 1, sd = sqrt(12/3) = 2, se = 2/2 = 1; median 0;
    # skewness (adjusted Fisher-Pearson): m2 = 3, m3 = 6, g1 = 6/3^1.5 = 1.1547, G1 = g1·sqrt(12)/2 = 2.0
    s = theory.sample_summary([0.0, 0.0, 0.0, 4.0])
    assert (s.mean, s.se, s.median, s.n) == pytest.approx((1.0, 1.0, 0.0, 4))
    assert s.skew == pytest.approx(2.0, rel=1e-12)
    assert theory.sample_summary([1.0, 2.0, 3.0, 4.0]).median == pytest.approx(2.5)   # midpoint, not the lower one
    with pytest.raises(ValueError, match="samples_N"):
        theory.sample_summary([1.0, 2.0])


def test_bias_and_tail_words_follow_the_numbers():
    near = theory.SampleSummary(mean=0.004, se=0.005, median=0.0, skew=0.0, n=100)
    high = theory.SampleSummary(mean=0.07, se=0.011, median=0.03, skew=2.0, n=400)
    low = theory.SampleSummary(mean=-0.2, se=0.01, median=-0.2, skew=0.0, n=400)
    assert near.bias_word() == "unbiased" and high.bias_word() == "too high" and low.bias_word() == "too low"
    assert high.z == pytest.approx(high.mean / high.se) and theory.tail_word(1.5) == "right"
    assert theory.tail_word(-1.5) == "left" and theory.tail_word(0.2) == "no"


