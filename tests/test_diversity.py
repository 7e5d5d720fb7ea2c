"""Tests for maskfed.core.diversity: recovery factor 1/Δ_S (eq. 3, 8), its n_k-weighted and
Hessian-weighted forms, gradient diversity, the signal-noise split (eq. 12-14).

Hand cases use two or three 2-D updates whose inner products can be checked on paper.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from maskfed.core import diversity as D

# Running example: Δ_1 = (1, 2), Δ_2 = (3, 0).
#   ‖Δ_1‖² = 1 + 4 = 5,  ‖Δ_2‖² = 9,  <Δ_1, Δ_2> = 1·3 + 2·0 = 3
#   Σ Δ_k = (4, 2), ‖Σ Δ_k‖² = 16 + 4 = 20 = 5 + 9 + 2·3
#   1/Δ_S = 20 / (5 + 9) = 10/7
EX = torch.tensor([[1.0, 2.0], [3.0, 0.0]])


# ----------------------------------------------------------------------------- gram matrix

def test_gram_matrix_hand_case_float64_and_symmetric():
    gram = D.gram_matrix(EX.to(torch.float32))

    assert gram.dtype == torch.float64
    assert torch.equal(gram, torch.tensor([[5.0, 3.0], [3.0, 9.0]], dtype=torch.float64))


def test_gram_matrix_accepts_numpy_and_lists():
    assert torch.equal(D.gram_matrix(np.array([[1, 2], [3, 0]])), D.gram_matrix([[1.0, 2.0], [3.0, 0.0]]))


@pytest.mark.parametrize("bad", [torch.ones(4), torch.ones(2, 2, 2), torch.ones(0, 3)])
def test_gram_matrix_rejects_bad_shapes(bad):
    with pytest.raises(ValueError, match="K_c, P"):
        D.gram_matrix(bad)


# ----------------------------------------------------------------------------- unweighted hand cases

def test_orthogonal_updates_give_one():
    # ‖e1 + 2 e2‖² = 1 + 4 = 5 = ‖e1‖² + ‖2 e2‖²  ->  5/5 = 1 (nothing recovered)
    deltas = torch.tensor([[1.0, 0.0], [0.0, 2.0]])

    assert D.recovery_factor(deltas) == pytest.approx(1.0, abs=1e-15)


def test_identical_updates_give_cohort_size():
    # K_c copies of v: ‖K_c v‖² / (K_c ‖v‖²) = K_c
    v = torch.tensor([0.3, -1.2, 2.5])
    for k_c in (2, 5, 10):
        assert D.recovery_factor(v.repeat(k_c, 1)) == pytest.approx(k_c, rel=1e-14)


def test_opposite_equal_updates_give_zero():
    # Δ_2 = -Δ_1: the sum vanishes, ‖0‖² / (5 + 5) = 0
    deltas = torch.tensor([[1.0, 2.0], [-1.0, -2.0]])

    assert D.recovery_factor(deltas) == 0.0


def test_nontrivial_two_client_hand_case():
    assert D.recovery_factor(EX) == pytest.approx(10 / 7, rel=1e-14)  # 20 / 14, see EX
    assert D.recovery_factor_from_gram([[5.0, 3.0], [3.0, 9.0]]) == pytest.approx(10 / 7, rel=1e-14)


def test_three_client_hand_case():
    # (1,0), (0,1), (1,1): sum (2,2), ‖sum‖² = 8; Σ‖Δ_k‖² = 1 + 1 + 2 = 4  ->  2
    deltas = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])

    assert D.recovery_factor(deltas) == pytest.approx(2.0, rel=1e-14)


def test_all_zero_updates_give_nan():
    assert math.isnan(D.recovery_factor(torch.zeros(3, 4)))


def test_cancellation_regime_below_one_iff_cross_terms_negative():
    # 1/Δ_S = 1 + 2 Σ_{i<j}<Δ_i,Δ_j> / Σ‖Δ_k‖².
    # (2,1), (-1,1), (0,-1), pairwise:
    #   <Δ1,Δ2> = -2 + 1 = -1, <Δ1,Δ3> = -1, <Δ2,Δ3> = -1  ->  Σ_{i<j} = -3
    #   Σ‖Δ_k‖² = 5 + 2 + 1 = 8;  sum = (1, 1), ‖sum‖² = 2 = 8 + 2·(-3)  ->  2/8 = 0.25
    deltas = torch.tensor([[2.0, 1.0], [-1.0, 1.0], [0.0, -1.0]])

    assert D.recovery_factor(deltas) == pytest.approx(0.25, rel=1e-14)

    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        d = torch.randn(4, 6, generator=g, dtype=torch.float64)
        gram = D.gram_matrix(d)
        cross = float((gram.sum() - torch.diagonal(gram).sum()) / 2)
        assert (D.recovery_factor(d) < 1.0) == (cross < 0.0)


def test_scale_invariance():
    # Scaling every update by c scales numerator and denominator by c².
    g = torch.Generator().manual_seed(0)
    d = torch.randn(5, 7, generator=g, dtype=torch.float64)
    base = D.recovery_factor(d)
    w = torch.rand(5, generator=g, dtype=torch.float64) + 0.1
    for c in (1e-6, 0.37, 250.0):
        assert D.recovery_factor(c * d) == pytest.approx(base, rel=1e-12)
        # ... and scaling the weights changes nothing either
        assert D.recovery_factor(d, weights_K=c * w) == pytest.approx(D.recovery_factor(d, w), rel=1e-12)


def test_gradient_diversity_is_reciprocal():
    # Δ_S = Σ‖Δ_k‖² / ‖ΣΔ_k‖² = 14 / 20 = 0.7 for EX
    assert D.gradient_diversity(EX) == pytest.approx(0.7, rel=1e-14)
    g = torch.Generator().manual_seed(1)
    d = torch.randn(6, 4, generator=g)
    w = torch.rand(6, generator=g) + 0.5
    assert D.gradient_diversity(d) * D.recovery_factor(d) == pytest.approx(1.0, rel=1e-12)
    assert D.gradient_diversity(d, w) * D.recovery_factor(d, w) == pytest.approx(1.0, rel=1e-12)


def test_gradient_diversity_of_cancelling_updates_is_inf():
    assert D.gradient_diversity(torch.tensor([[1.0, 2.0], [-1.0, -2.0]])) == math.inf


# ----------------------------------------------------------------------------- weighted form

def test_weighted_hand_case():
    # w = (1, 3) -> (1/4, 3/4).  Σ w_k Δ_k = (0.25 + 2.25, 0.5) = (2.5, 0.5), ‖.‖² = 6.25 + 0.25 = 6.5
    # Σ w_k² ‖Δ_k‖² = 5/16 + 9·9/16 = 86/16 = 5.375  ->  6.5 / 5.375 = 52/43
    assert D.recovery_factor(EX, weights_K=[1, 3]) == pytest.approx(52 / 43, rel=1e-14)


def test_equal_weights_equal_unweighted():
    g = torch.Generator().manual_seed(2)
    d = torch.randn(7, 5, generator=g)
    for c in (1.0, 500.0):
        assert D.recovery_factor(d, weights_K=torch.full((7,), c)) == pytest.approx(D.recovery_factor(d), rel=1e-13)


def test_identical_updates_weighted_give_inverse_sum_of_squared_weights():
    # w = (1, 2, 5)/8: Σ w_k² = (1 + 4 + 25)/64 = 30/64  ->  1/Σ w_k² = 64/30 = 32/15
    v = torch.tensor([1.5, -0.5, 2.0, 0.25])
    assert D.recovery_factor(v.repeat(3, 1), weights_K=[1, 2, 5]) == pytest.approx(32 / 15, rel=1e-14)


def test_never_exceeds_cohort_size_on_random_inputs():
    g = torch.Generator().manual_seed(4)
    for trial in range(300):
        k_c = 2 + trial % 9
        # include a strong common component half of the time, so values near K_c are exercised
        mu = torch.randn(8, generator=g, dtype=torch.float64) * (5.0 if trial % 2 else 0.0)
        d = mu + torch.randn(k_c, 8, generator=g, dtype=torch.float64)
        w = torch.rand(k_c, generator=g, dtype=torch.float64) ** 3  # very uneven weights too
        unweighted = D.recovery_factor(d)
        weighted = D.recovery_factor(d, weights_K=w)
        assert 0.0 <= unweighted <= k_c * (1 + 1e-12)
        assert 0.0 <= weighted <= k_c * (1 + 1e-12)


def test_weighted_reaches_cohort_size_when_weighted_updates_coincide():
    # The ceiling of the weighted form is K_c (Cauchy-Schwarz on the vectors w_k Δ_k), not 1/Σ w_k².
    # w = (1, 3)/4, Δ_1 = 3v, Δ_2 = v: w_1Δ_1 = w_2Δ_2 = (3/4)v.
    #   ‖(3/2) v‖² = (9/4)‖v‖²;  Σ w_k²‖Δ_k‖² = (1/16)·9 + (9/16)·1 = 18/16 = 9/8 (‖v‖² = 1)
    #   -> (9/4)/(9/8) = 2 = K_c, above 1/Σ w_k² = 16/10 = 1.6 of identical updates.
    v = torch.tensor([0.6, 0.8])
    assert D.recovery_factor(torch.stack([3 * v, v]), weights_K=[1, 3]) == pytest.approx(2.0, rel=1e-12)
    assert D.recovery_factor(torch.stack([v, v]), weights_K=[1, 3]) == pytest.approx(1.6, rel=1e-12)


@pytest.mark.parametrize("weights", [[1.0], [1.0, 2.0, 3.0], [1.0, -1.0], [0.0, 0.0], [[1.0, 1.0]] * 2])
def test_bad_weights_raise(weights):
    with pytest.raises(ValueError, match="weights_K"):
        D.recovery_factor(EX, weights_K=weights)


def test_nan_weights_raise():
    with pytest.raises(ValueError):
        D.recovery_factor(EX, weights_K=[float("nan"), 1.0])


@pytest.mark.parametrize("gram", [torch.ones(2, 3), torch.ones(3), torch.ones(2, 2, 2)])
def test_recovery_from_gram_rejects_non_square(gram):
    with pytest.raises(ValueError, match="square"):
        D.recovery_factor_from_gram(gram)


# ----------------------------------------------------------------------------- Hessian-weighted form

def test_hessian_weighted_with_scaled_identity_equals_euclidean():
    g = torch.Generator().manual_seed(5)
    d = torch.randn(4, 6, generator=g, dtype=torch.float64)
    w = torch.rand(4, generator=g, dtype=torch.float64) + 0.1
    for c in (0.01, 3.0):
        assert D.recovery_factor(d, inner=lambda x: c * x) == pytest.approx(D.recovery_factor(d), rel=1e-12)
        assert D.recovery_factor(d, w, inner=lambda x: c * x) == pytest.approx(D.recovery_factor(d, w), rel=1e-12)
    assert torch.allclose(D.gram_matrix(d, inner=lambda x: 3.0 * x), 3.0 * D.gram_matrix(d), rtol=1e-14)


def test_hessian_weighted_hand_case_differs_from_euclidean():
    # Δ_1 = (1, 1), Δ_2 = (1, -1): Euclidean-orthogonal -> 1.
    # H = diag(2, 1): <Δ1,Δ2>_H = 2 - 1 = 1, ‖Δ1‖²_H = ‖Δ2‖²_H = 2 + 1 = 3
    #   -> (3 + 3 + 2·1) / (3 + 3) = 8/6 = 4/3
    d = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    h = torch.diag(torch.tensor([2.0, 1.0], dtype=torch.float64))

    assert D.recovery_factor(d) == pytest.approx(1.0, abs=1e-15)
    assert D.recovery_factor(d, inner=lambda x: x @ h) == pytest.approx(4 / 3, rel=1e-14)
    assert torch.equal(D.gram_matrix(d, inner=lambda x: x @ h), torch.tensor([[3.0, 1.0], [1.0, 3.0]], dtype=torch.float64))


# ----------------------------------------------------------------------------- signal-noise split

def test_signal_noise_two_client_hand_case():
    # A = (5 + 9)/2 = 7; mean = (2, 1), B = 4 + 1 = 5
    # σ̂² = (7 - 5)/(1 - 1/2) = 4;  ‖μ̂‖² = 7 - 4 = 3
    sn = D.signal_noise(EX)

    assert (sn.A, sn.B) == pytest.approx((7.0, 5.0), rel=1e-14)
    assert sn.sigma2_hat == pytest.approx(4.0, rel=1e-14)
    assert sn.mu2_hat == pytest.approx(3.0, rel=1e-14)


def test_signal_noise_three_client_hand_case():
    # (1,0), (0,1), (1,1): A = (1 + 1 + 2)/3 = 4/3; mean = (2/3, 2/3), B = 8/9
    # σ̂² = (4/3 - 8/9)/(1 - 1/3) = (4/9)/(2/3) = 2/3;  ‖μ̂‖² = 4/3 - 2/3 = 2/3
    sn = D.signal_noise(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))

    assert sn.A == pytest.approx(4 / 3, rel=1e-14)
    assert sn.B == pytest.approx(8 / 9, rel=1e-14)
    assert sn.sigma2_hat == pytest.approx(2 / 3, rel=1e-14)
    assert sn.mu2_hat == pytest.approx(2 / 3, rel=1e-14)


def test_signal_noise_identical_updates_have_no_noise():
    # K_c copies of v: A = B = ‖v‖² = 1 + 4 + 4 = 9, σ̂² = 0, ‖μ̂‖² = 9
    sn = D.signal_noise(torch.tensor([1.0, -2.0, 2.0]).repeat(4, 1))

    assert sn.sigma2_hat == pytest.approx(0.0, abs=1e-12)
    assert sn.mu2_hat == pytest.approx(9.0, rel=1e-14)


def test_signal_noise_hessian_weighted_uses_the_inner_product():
    # Δ_1 = (1, 1), Δ_2 = (1, -1), H = diag(2, 1): gram [[3, 1], [1, 3]]
    # A = 3, B = (3 + 1 + 1 + 3)/4 = 2, σ̂² = (3 - 2)/(1/2) = 2, ‖μ̂‖² = 1
    d = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    sn = D.signal_noise(d, inner=lambda x: x * torch.tensor([2.0, 1.0], dtype=torch.float64))

    assert (sn.A, sn.B, sn.sigma2_hat, sn.mu2_hat) == pytest.approx((3.0, 2.0, 2.0, 1.0), rel=1e-14)


def test_signal_noise_needs_two_clients():
    with pytest.raises(ValueError, match="K_c >= 2"):
        D.signal_noise(torch.ones(1, 5))
    with pytest.raises(ValueError, match="K_c >= 2"):
        D.signal_noise_from_gram(torch.ones(1, 1))


def test_signal_noise_from_gram_rejects_non_square():
    with pytest.raises(ValueError):
        D.signal_noise_from_gram(torch.ones(2, 3))


def test_estimators_recover_mu_and_sigma_monte_carlo():
    # Δ_k = μ + ε_k, ε_k ~ N(0, s² I_P) independent: σ² = E‖ε_k‖² = P s² = 50 · 0.04 = 2, ‖μ‖² = 1.
    # σ̂² and ‖μ̂‖² are unbiased (eq. 13-14), so their means over N cohorts must lie within a few
    # Monte Carlo standard errors of the truth. The uncorrected A - B would average σ²(1 - 1/K_c)
    # = 1.8, i.e. 0.2 low: the tolerance (4 SE) must be far smaller than that to mean anything.
    g = torch.Generator().manual_seed(2026)
    k_c, p, s, n_cohorts = 10, 50, 0.2, 1500
    mu = torch.randn(p, generator=g, dtype=torch.float64)
    mu = mu / mu.norm()  # ‖μ‖² = 1
    sigma2_true, mu2_true = p * s**2, 1.0

    noise = torch.randn(n_cohorts, k_c, p, generator=g, dtype=torch.float64) * s
    est = np.array([[sn.sigma2_hat, sn.mu2_hat] for sn in (D.signal_noise(mu + noise[i]) for i in range(n_cohorts))])

    mean = est.mean(axis=0)
    se = est.std(axis=0, ddof=1) / np.sqrt(n_cohorts)
    assert np.all(4 * se < 0.05), se  # the test can tell a 10 % bias apart
    assert abs(mean[0] - sigma2_true) < 4 * se[0], (mean[0], se[0])
    assert abs(mean[1] - mu2_true) < 4 * se[1], (mean[1], se[1])


# ----------------------------------------------------------------------------- eq. 12 consistency

def test_eq12_reparametrisation_is_exact():
    # K_c B / A = ‖ΣΔ_k‖² / Σ‖Δ_k‖² identically, and with r̂ = ‖μ̂‖²/σ̂²,
    # (K_c r̂ + 1)/(r̂ + 1) = (K_c ‖μ̂‖² + σ̂²)/A = (K_c A - (K_c - 1)σ̂²)/A = K_c B / A.
    # EX: K_c B / A = 2·5/7 = 10/7; r̂ = 3/4 -> (1.5 + 1)/1.75 = 10/7.
    sn = D.signal_noise(EX)
    r_hat = sn.mu2_hat / sn.sigma2_hat
    assert r_hat == pytest.approx(0.75, rel=1e-14)
    assert D.predicted_recovery_factor(r_hat, 2) == pytest.approx(10 / 7, rel=1e-13)

    g = torch.Generator().manual_seed(12)
    for trial in range(100):
        k_c = 2 + trial % 10
        d = torch.randn(8, generator=g, dtype=torch.float64) * (trial % 4) + torch.randn(k_c, 8, generator=g,
                                                                                          dtype=torch.float64)
        sn = D.signal_noise(d)
        rec = D.recovery_factor(d)
        assert k_c * sn.B / sn.A == pytest.approx(rec, rel=1e-12)
        r_hat = sn.mu2_hat / sn.sigma2_hat  # may be negative in the cancellation regime: still exact
        assert D.predicted_recovery_factor(r_hat, k_c) == pytest.approx(rec, rel=1e-9, abs=1e-12)


def test_predicted_recovery_factor_limits_and_vectorised():
    # r = 0 -> 1;  r = 1 -> (10 + 1)/2 = 5.5;  r = 3 -> 31/4 = 7.75;  r -> ∞ -> K_c
    assert D.predicted_recovery_factor(0.0, 10) == 1.0
    assert D.predicted_recovery_factor(1.0, 10) == 5.5
    assert D.predicted_recovery_factor(1e12, 10) == pytest.approx(10.0, rel=1e-10)
    np.testing.assert_allclose(D.predicted_recovery_factor(np.array([0.0, 1.0, 3.0]), 10), [1.0, 5.5, 7.75])
    out = D.predicted_recovery_factor(torch.tensor([1.0, 3.0]), 10)
    assert torch.allclose(out, torch.tensor([5.5, 7.75]))


def test_predicted_recovery_factor_rejects_bad_cohort():
    with pytest.raises(ValueError, match="k_c"):
        D.predicted_recovery_factor(1.0, 0)
