"""Simulation helpers for the derivation chapters (Propositions 1-3, Corollary 1, eq. 9-14).

CPU-only test problems and Monte Carlo estimators for the theory notebooks: a quadratic loss
(:class:`QuadraticLoss`), random SPD and block Hessians, a tiny tanh MLP (:func:`tiny_mlp_problem`);
expectations over block masks by Monte Carlo (:func:`masked_excess_mc`) or exact enumeration of all
2^B masks (:func:`masked_excess_exact`); cohorts Δ_k = μ + ε_k (eq. 9), optionally with correlated or
unequal noise; small statistics; and FedExP's server step size (Jhunjhunwala et al., 2023), which
equals (K_c/2)·Δ_S.

Paper reference: Yan, Kuroda, Jin, Chen (2026), arXiv 2608.23286.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from maskfed.core import diversity, penalty
from maskfed.core.masking import (
    GeneratorLike,
    as_generator,
    block_sizes_of,
    block_slices,
    check_keep_probability,
    expand_block_mask,
    flatten_params,
    mask_cohort,
    unflatten_params,
)

Tensor = torch.Tensor
from maskfed.engine.config import PROFILES
from maskfed.names import PAPER


def profile_value(profile: str, smoke, cpu, paper=None):
    """Pick a setting by run profile: ``smoke``, ``cpu`` or ``paper``.

    ``paper`` defaults to the ``cpu`` value; every other profile (``cpu-long``, ``cpu-paper``, ``cpu-masked``) takes
    the ``cpu`` value.

    Raises:
        ValueError: on an unknown profile.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}; got profile = {profile!r}")
    if profile == "smoke":
        return smoke
    return paper if profile == PAPER and paper is not None else cpu


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class MCEstimate:
    """A Monte Carlo ``mean``, its standard error ``se`` (sample std / sqrt(n)) and the draw count ``n``."""

    mean: float
    se: float
    n: int

    def z(self, target: float) -> float:
        """Distance of the mean from ``target`` in standard errors (inf if se = 0 and they differ)."""
        diff = self.mean - target
        if self.se == 0:
            return 0.0 if diff == 0 else math.inf
        return diff / self.se

    def within(self, target: float, n_se: float = 5.0, atol: float = 1e-12) -> bool:
        """True if ``|mean − target| <= n_se·se + atol``."""
        return abs(self.mean - target) <= n_se * self.se + atol


def mc_estimate(samples_N) -> MCEstimate:
    """Mean and standard error of i.i.d. samples, shape [N]; ValueError if N < 2."""
    x = torch.as_tensor(samples_N, dtype=torch.float64).flatten()
    if x.numel() < 2:
        raise ValueError("need at least two samples for a standard error")
    return MCEstimate(float(x.mean()), float(x.std(unbiased=True) / math.sqrt(x.numel())), x.numel())


def ratio_of_means(num_N, den_N) -> MCEstimate:
    """Ratio mean(num)/mean(den) of paired samples [N], with its delta-method standard error.

    For ratios of expectations such as eq. (12), E‖Σ_k Δ_k‖² / E Σ_k ‖Δ_k‖².
    """
    a = torch.as_tensor(num_N, dtype=torch.float64).flatten()
    b = torch.as_tensor(den_N, dtype=torch.float64).flatten()
    if a.numel() != b.numel() or a.numel() < 2:
        raise ValueError("num_N and den_N must be paired samples of the same length >= 2")
    ratio = a.mean() / b.mean()
    resid = (a - ratio * b) / b.mean()
    return MCEstimate(float(ratio), float(resid.std(unbiased=True) / math.sqrt(a.numel())), a.numel())


def loglog_slope(x, y) -> float:
    """Least-squares slope of log|y| against log x (the exponent a in |y| ≈ c·x^a)."""
    lx = torch.log(torch.as_tensor(x, dtype=torch.float64))
    ly = torch.log(torch.as_tensor(y, dtype=torch.float64).abs())
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx**2).sum())


def loglog_slope_se(x, y, y_se) -> float:
    """First-order standard error of :func:`loglog_slope`, given the standard errors ``y_se`` of y.

    se = sqrt(Σ_i c_i² (se_i/y_i)²), with c_i = (log x_i − mean)/Σ_j (log x_j − mean)².
    """
    lx = torch.log(torch.as_tensor(x, dtype=torch.float64))
    lx = lx - lx.mean()
    c = lx / (lx**2).sum()
    rel = torch.as_tensor(y_se, dtype=torch.float64) / torch.as_tensor(y, dtype=torch.float64).abs()
    return float(torch.sqrt((c**2 * rel**2).sum()))


# --------------------------------------------------------------------------- test problems


def random_spd(num_coords: int, generator: GeneratorLike, cond: float = 10.0, scale: float = 1.0) -> Tensor:
    """Random dense SPD matrix [P, P], float64: eigenvalues log-spaced from ``scale`` to
    ``scale·cond``, Haar-random eigenvectors (every off-diagonal block generically non-zero).

    Raises:
        ValueError: if ``cond < 1`` or ``scale <= 0``.
    """
    if cond < 1 or scale <= 0:
        raise ValueError(f"need cond >= 1 and scale > 0; got cond = {cond}, scale = {scale}")
    g = as_generator(generator)
    q, r = torch.linalg.qr(torch.randn(num_coords, num_coords, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    lam = scale * torch.logspace(0, math.log10(cond), num_coords, dtype=torch.float64)
    h = (q * lam) @ q.T
    return 0.5 * (h + h.T)


def block_anisotropic_hessian(block_sizes: Sequence[int], cond: float, generator: GeneratorLike) -> Tensor:
    """Block-diagonal SPD Hessian [P, P]; each block H_bb has eigenvalues log-spaced in
    [1, cond] and its own random rotation. ``cond = 1`` gives H = I (isotropic blocks, c = 1)."""
    g = as_generator(generator)
    p_total = sum(int(s) for s in block_sizes)
    h = torch.zeros(p_total, p_total, dtype=torch.float64)
    for sl in block_slices(block_sizes):
        n = sl.stop - sl.start
        h[sl, sl] = random_spd(n, g, cond=cond) if n > 1 else torch.ones(1, 1, dtype=torch.float64)
    return h


class QuadraticLoss:
    """Quadratic loss l(θ) = c + gᵀθ + ½ θᵀHθ with a dense Hessian H [P, P].

    The second-order expansion is exact, so Propositions 1-3 hold with no remainder.
    θ of shape [P] gives a 0-d tensor, [N, P] gives [N].
    """

    def __init__(self, H_PxP, g_P, c: float = 0.0):
        self.hessian = 0.5 * (torch.as_tensor(H_PxP, dtype=torch.float64) + torch.as_tensor(H_PxP, dtype=torch.float64).T)
        self.g = torch.as_tensor(g_P, dtype=torch.float64)
        self.c = float(c)

    def __call__(self, theta) -> Tensor:
        t = torch.as_tensor(theta, dtype=torch.float64)
        return self.c + t @ self.g + 0.5 * ((t @ self.hessian) * t).sum(-1)


def random_quadratic(num_coords: int, generator: GeneratorLike, cond: float = 10.0) -> QuadraticLoss:
    """Quadratic loss with a random dense SPD Hessian (condition number ``cond``) and a random linear term."""
    g = as_generator(generator)
    h = random_spd(num_coords, g, cond=cond)
    return QuadraticLoss(h, torch.randn(num_coords, generator=g, dtype=torch.float64))


@dataclass
class MLPProblem:
    """A tiny regression network with its data, for exact small-scale checks.

    Attributes:
        module: ``nn.Sequential(Linear, Tanh, Linear)`` in float64.
        x: inputs, shape [n, d_in]; y: targets, shape [n, d_out].
        params: the module's parameter tensors (W1, b1, W2, b2).
        block_sizes: one block per tensor.
    """

    module: torch.nn.Module
    x: Tensor
    y: Tensor
    params: list
    block_sizes: list

    def loss(self) -> Tensor:
        """Mean squared error at the module's current parameters (scalar, differentiable)."""
        return torch.nn.functional.mse_loss(self.module(self.x), self.y)

    @property
    def theta(self) -> Tensor:
        """Current parameters as a flat vector, shape [P]."""
        return flatten_params(self.params).to(torch.float64)

    def loss_at(self, theta) -> Tensor:
        """Loss at flat parameter vector(s): [P] -> 0-d tensor, [N, P] -> [N]. No autograd."""
        t = torch.as_tensor(theta, dtype=torch.float64)
        rows = t.reshape(-1, t.shape[-1])
        names = [n for n, _ in self.module.named_parameters()]
        out = []
        with torch.no_grad():
            for row in rows:
                values = unflatten_params(row, self.params)
                pred = torch.func.functional_call(self.module, dict(zip(names, values)), (self.x,))
                out.append(torch.nn.functional.mse_loss(pred, self.y))
        res = torch.stack(out)
        return res.reshape(t.shape[:-1])


def tiny_mlp_problem(generator: GeneratorLike, widths: Sequence[int] = (4, 6, 3), n_samples: int = 32) -> MLPProblem:
    """Tiny tanh MLP ``Linear(w0, w1) → tanh → Linear(w1, w2)`` with random data, float64.

    Default widths: 4·6 + 6 + 6·3 + 3 = 51 parameters in B = 4 blocks. tanh is smooth, so the
    third derivatives behind the O(‖Δ‖³) remainder of Prop. 1 exist everywhere.
    """
    g = as_generator(generator)
    d_in, hidden, d_out = (int(w) for w in widths)
    module = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, d_out)).double()
    with torch.no_grad():
        for prm in module.parameters():
            fan_in = prm.shape[-1] if prm.ndim > 1 else hidden
            prm.copy_(torch.randn(prm.shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in))
    x = torch.randn(n_samples, d_in, generator=g, dtype=torch.float64)
    y = torch.randn(n_samples, d_out, generator=g, dtype=torch.float64)
    params = list(module.parameters())
    return MLPProblem(module, x, y, params, block_sizes_of(params))


# --------------------------------------------------------------------------- expectations over masks


def masked_excess_mc(loss_fn: Callable[[Tensor], Tensor], theta_P, deltas_KxP, block_sizes: Sequence[int], p,
                     mode: str, n_draws: int, generator: GeneratorLike, weights_K=None,
                     chunk: int = 2048) -> MCEstimate:
    """Monte Carlo E[l(θ − Δ̃_agg)] − l(θ − Δ_agg) over block masks (Prop. 1-3), as an :class:`MCEstimate`.

    Δ_agg = Σ_k w_k Δ_k is the FedAvg aggregate, Δ̃_agg that of the masked updates (eq. 2); loss units.
    A single update [P] is a cohort of one (Prop. 1).

    Args:
        loss_fn: batched loss, [N, P] -> [N] (e.g. :class:`QuadraticLoss`).
        theta_P: θ, shape [P]; deltas_KxP: client updates, shape [K_c, P] or [P].
        block_sizes: sizes of the B blocks, summing to P.
        p: keep probability in (0, 1].
        mode: ``"independent"`` (a mask per client) or ``"shared"`` (one per round).
        n_draws: mask draws (rounds), >= 2; generator: ``torch.Generator`` or integer seed.
        weights_K: optional aggregation weights n_k (normalised here).
        chunk: draws per batch (memory only).

    Raises:
        ValueError: on a bad ``p`` or ``mode`` (before any draw).
    """
    check_keep_probability(p)
    d = torch.as_tensor(deltas_KxP, dtype=torch.float64)
    d = d.reshape(1, -1) if d.ndim == 1 else d
    k = d.shape[0]
    w = diversity.normalised_weights(weights_K, k)
    theta = torch.as_tensor(theta_P, dtype=torch.float64)
    g = as_generator(generator)
    base = float(loss_fn((theta - w @ d).reshape(1, -1))[0])
    samples = []
    done = 0
    while done < n_draws:
        n = min(chunk, n_draws - done)
        masked = mask_cohort(d.expand(n, k, d.shape[1]), block_sizes, p, mode, g)  # [n, K, P]
        agg = torch.einsum("k,nkp->np", w, masked)
        samples.append(loss_fn(theta - agg) - base)
        done += n
    return mc_estimate(torch.cat(samples))


def masked_excess_exact(loss_fn: Callable[[Tensor], Tensor], theta_P, delta_P, block_sizes: Sequence[int], p) -> float:
    """Exact E[l(θ − Δ̃)] − l(θ − Δ) (loss units) for one update, enumerating all 2^B block masks (Prop. 1).

    Mask m ∈ {0,1}^B has probability p^|m| (1 − p)^(B − |m|). With no Monte Carlo error, the
    O(‖Δ‖³) remainder of eq. (5) is measurable down to round-off.

    Args:
        loss_fn: batched loss, [N, P] -> [N].
        theta_P: θ, shape [P]; delta_P: Δ, shape [P].
        block_sizes: B block sizes, B <= 16; p: keep probability in (0, 1].

    Raises:
        ValueError: on a bad ``p`` or more than 16 blocks.
    """
    pf = check_keep_probability(p)
    b = len(block_sizes)
    if b > 16:
        raise ValueError(f"exact enumeration is limited to 16 blocks; got B = {b}")
    masks = torch.tensor(list(itertools.product([0.0, 1.0], repeat=b)), dtype=torch.float64)  # [2^B, B]
    kept = masks.sum(1)
    prob = pf**kept * (1.0 - pf) ** (b - kept)
    theta = torch.as_tensor(theta_P, dtype=torch.float64)
    delta = torch.as_tensor(delta_P, dtype=torch.float64)
    keep = prob > 0
    masked = delta * expand_block_mask(masks[keep], block_sizes) / pf
    vals = loss_fn(theta - masked)
    base = loss_fn((theta - delta).reshape(1, -1))[0]
    return float((prob[keep] * (vals - base)).sum())


# --------------------------------------------------------------------------- cohorts


def signal_noise_cohorts(mu_P, sigma2: float, k_c: int, n_rounds: int, generator: GeneratorLike,
                         rho: float = 0.0, scales_K=None) -> Tensor:
    """Simulated cohorts Δ_k = μ + ε_k (eq. 9), shape [n_rounds, K_c, P], float64.

    Gaussian noise with E‖ε_k‖² = σ²·s_k, spread evenly over the P coordinates. With ``rho > 0``,
    ε_k = √s_k (√ρ ξ + √(1 − ρ) η_k) with ξ shared by the round's cohort: correlation ρ between clients.

    Args:
        mu_P: the shared component μ, shape [P].
        sigma2: σ², the expected squared noise norm (parameter units²).
        k_c: cohort size K_c; n_rounds: number of independent cohorts (rounds).
        generator: ``torch.Generator`` or integer seed.
        rho: cross-client noise correlation in [0, 1].
        scales_K: optional per-client variance multipliers s_k, shape [K_c] (default 1).

    Raises:
        ValueError: on ``rho`` outside [0, 1], negative σ² or scales of the wrong length.
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [0, 1]; got rho = {rho}")
    if sigma2 < 0:
        raise ValueError(f"sigma2 must be >= 0; got {sigma2}")
    g = as_generator(generator)
    mu = torch.as_tensor(mu_P, dtype=torch.float64)
    p_dim = mu.numel()
    s = torch.ones(k_c, dtype=torch.float64) if scales_K is None else torch.as_tensor(scales_K, dtype=torch.float64)
    if s.numel() != k_c or (s < 0).any():
        raise ValueError(f"scales_K must hold {k_c} non-negative variance multipliers")
    std = math.sqrt(sigma2 / p_dim)
    eta = torch.randn(n_rounds, k_c, p_dim, generator=g, dtype=torch.float64)
    xi = torch.randn(n_rounds, 1, p_dim, generator=g, dtype=torch.float64)
    eps = (math.sqrt(rho) * xi + math.sqrt(1.0 - rho) * eta) * std * s.sqrt().reshape(1, -1, 1)
    return mu.reshape(1, 1, -1) + eps


def random_direction(num_coords: int, norm: float, generator: GeneratorLike) -> Tensor:
    """A uniformly random vector of the given Euclidean norm, shape [P]."""
    v = torch.randn(num_coords, generator=as_generator(generator), dtype=torch.float64)
    return v * (norm / v.norm())


def two_client_updates(angle_rad: float, norm_ratio: float = 1.0) -> Tensor:
    """Two updates in the plane at angle φ: Δ_1 = (1, 0), Δ_2 = a·(cos φ, sin φ); shape [2, 2].

    Their recovery factor is (1 + a² + 2a cos φ)/(1 + a²), below 1 once φ > 90°.
    """
    a = float(norm_ratio)
    return torch.tensor([[1.0, 0.0], [a * math.cos(angle_rad), a * math.sin(angle_rad)]], dtype=torch.float64)


def fedexp_step_size(deltas_KxP, eps: float = 0.0, clip: bool = True) -> float:
    """FedExP's server step size η_g = max(1, Σ_k ‖Δ_k‖² / (2 K_c (‖Δ̄‖² + ε))) (Jhunjhunwala et al., 2023).

    With ε = 0 the raw value equals (K_c/2)·Δ_S, for any number of local steps.

    Args:
        deltas_KxP: client updates, shape [K_c, P].
        eps: FedExP's stabiliser ε (parameter units²).
        clip: apply the max(1, ·); ``False`` returns the raw ratio.
    """
    d = torch.as_tensor(deltas_KxP, dtype=torch.float64)
    k = d.shape[0]
    raw = float((d**2).sum() / (2 * k * (d.mean(0).pow(2).sum() + eps)))
    return max(1.0, raw) if clip else raw


def anisotropic_cohort(block_sizes: Sequence[int], cond: float, k_c: int, r: float, generator: GeneratorLike,
                       signal: str = "isotropic") -> tuple[Tensor, Tensor]:
    """One random cohort of the drift study and its block Hessian.

    H is block-diagonal with blocks of condition number ``cond`` (:func:`block_anisotropic_hessian`);
    Δ_k = μ + ε_k with ‖μ‖² = r, σ² = 1 and isotropic Gaussian noise (eq. 9).

    Args:
        block_sizes: B block sizes, summing to P; cond: condition number κ >= 1 of every H_bb.
        k_c: cohort size K_c; r: signal-to-noise ratio ‖μ‖²/σ².
        generator: ``torch.Generator`` or integer seed.
        signal: ``"isotropic"`` (μ uniformly random) or ``"aligned"`` (μ with covariance ∝ H,
            leaning towards sharp directions as gradients do).

    Returns:
        (H [P, P], deltas [K_c, P]), float64.

    Raises:
        ValueError: on an unknown ``signal``.
    """
    if signal not in ("isotropic", "aligned"):
        raise ValueError(f"signal must be 'isotropic' or 'aligned'; got signal = {signal!r}")
    g = as_generator(generator)
    p_dim = sum(int(s) for s in block_sizes)
    h = block_anisotropic_hessian(block_sizes, cond, g)
    z = torch.randn(p_dim, generator=g, dtype=torch.float64)
    if signal == "aligned":
        z = torch.linalg.cholesky(h) @ z  # covariance ∝ H
    mu = z * math.sqrt(r / float((z**2).sum()))  # ‖μ‖² = r, σ² = 1
    return h, signal_noise_cohorts(mu, 1.0, k_c, 1, g)[0]


def anisotropy_drift(block_sizes: Sequence[int], cond: float, k_c: int, r: float, n_cohorts: int,
                     generator: GeneratorLike, signal: str = "isotropic") -> Tensor:
    """Relative drift (1/Δ_S)_Euclid / (R_shr/R_ind) − 1 of the Euclidean recovery factor, per cohort.

    Each of ``n_cohorts`` cohorts comes from :func:`anisotropic_cohort` with a fresh block Hessian
    (``signal`` as there). Corollary 1 holds exactly where the drift is 0.

    Returns:
        Tensor [n_cohorts] (dimensionless).

    Raises:
        ValueError: on an unknown ``signal``.
    """
    if signal not in ("isotropic", "aligned"):
        raise ValueError(f"signal must be 'isotropic' or 'aligned'; got signal = {signal!r}")
    g = as_generator(generator)
    out = torch.empty(n_cohorts, dtype=torch.float64)
    for i in range(n_cohorts):
        h, deltas = anisotropic_cohort(block_sizes, cond, k_c, r, g, signal)
        exact = penalty.penalty_ratio(deltas, penalty.DenseBlockHessian(h, block_sizes))
        out[i] = diversity.recovery_factor(deltas) / exact - 1.0
    return out


@dataclass(frozen=True)
class SampleSummary:
    """Mean ± standard error ``se``, median, skewness and count ``n`` of i.i.d. samples.

    ``skew``: adjusted Fisher-Pearson sample skewness (pandas ``Series.skew``); > 0: a long right tail.
    """

    mean: float
    se: float
    median: float
    skew: float
    n: int

    def bias_word(self, n_se: float = 3.0) -> str:
        """How the mean relates to zero: "unbiased" when |mean| <= n_se·se, else "too high" or "too low"."""
        z = self.mean / self.se if self.se > 0 else (0.0 if self.mean == 0 else math.inf)
        return "unbiased" if abs(z) <= n_se else ("too high" if z > 0 else "too low")

    @property
    def z(self) -> float:
        """The mean in standard errors (inf for a nonzero mean with zero spread, 0 for none)."""
        return self.mean / self.se if self.se > 0 else (0.0 if self.mean == 0 else math.inf)


def tail_word(skew: float, threshold: float = 1.0) -> str:
    """Which long tail a distribution has: "right" (skew > threshold), "left" (skew < −threshold) or "no"."""
    return "right" if skew > threshold else "left" if skew < -threshold else "no"


def sample_summary(samples_N) -> SampleSummary:
    """Mean ± standard error, median and skewness of samples, shape [N] (N >= 3).

    Raises:
        ValueError: fewer than 3 samples (no skewness).
    """
    import pandas as pd

    x = torch.as_tensor(samples_N, dtype=torch.float64).flatten()
    if x.numel() < 3:
        raise ValueError(f"samples_N needs at least 3 samples; got {x.numel()}")
    est = mc_estimate(x)
    return SampleSummary(est.mean, est.se, float(torch.quantile(x, 0.5)), float(pd.Series(x.numpy()).skew()), x.numel())


def ratio_estimate(num: MCEstimate, den: MCEstimate) -> MCEstimate:
    """Ratio of two independent Monte Carlo means with its first-order standard error.

    se = |num/den| · sqrt((se_num/num)² + (se_den/den)²); ``n`` is the smaller draw count.
    """
    ratio = num.mean / den.mean
    rel = math.hypot(num.se / num.mean, den.se / den.mean)
    return MCEstimate(ratio, abs(ratio) * rel, min(num.n, den.n))


def remainder_curve(loss_fn: Callable[[Tensor], Tensor], theta_P, direction_P, block_sizes: Sequence[int], p,
                    scales, penalty_unit: float) -> tuple[Tensor, Tensor]:
    """Exact masked excess E(s) and its gap E(s) − s²·R(d) to the penalty along Δ = s·d (Prop. 1, eq. 5).

    E(s) = E[l(θ − s·d̃)] − l(θ − s·d) over all 2^B masks (:func:`masked_excess_exact`);
    Prop. 1 says the gap is O(s³).

    Args:
        loss_fn: batched loss, [N, P] -> [N].
        theta_P: θ, shape [P]; direction_P: d, shape [P].
        block_sizes: B block sizes (B <= 16); p: keep probability.
        scales: the step lengths s, shape [S].
        penalty_unit: R(d) for the unit direction, with H at θ (loss units); R(s·d) = s²·R(d).

    Returns:
        ``(excess_S, gap_S)``, float64 [S] each (loss units).
    """
    s_all = torch.as_tensor(scales, dtype=torch.float64)
    d = torch.as_tensor(direction_P, dtype=torch.float64)
    excess = torch.tensor([masked_excess_exact(loss_fn, theta_P, float(s) * d, block_sizes, p) for s in s_all],
                          dtype=torch.float64)
    return excess, excess - s_all**2 * float(penalty_unit)


@dataclass(frozen=True)
class CohortStats:
    """Per-round statistics of simulated cohorts, each a float64 tensor of shape [N].

    Attributes:
        sum_sq: Σ_k w_k² ‖Δ_k‖², the denominator of the recovery factor.
        agg_sq: ‖Σ_k w_k Δ_k‖², its numerator (w_k = 1/K_c without weights).
        recovery: 1/Δ_S of each round (eq. 3; weighted form with weights).
        sigma2_hat: σ̂² of eq. (13); mu2_hat: ‖μ̂‖² of eq. (14) (always unweighted).
    """

    sum_sq: Tensor
    agg_sq: Tensor
    recovery: Tensor | None
    sigma2_hat: Tensor | None
    mu2_hat: Tensor | None


def cohort_stats(cohorts_NxKxP, weights_K=None, estimators: bool = True) -> CohortStats:
    """Recovery factor and signal-noise estimators of each simulated round, as :class:`CohortStats` [N].

    Via :mod:`maskfed.core.diversity`. ``agg_sq / sum_sq`` is each round's recovery factor; the ratio
    of their means (:func:`ratio_of_means`) estimates the ratio of expectations of eq. (12).

    Args:
        cohorts_NxKxP: N rounds of K_c client updates, shape [N, K_c, P] (K_c >= 2).
        weights_K: optional aggregation weights n_k, shape [K_c] (normalised here); they change
            ``sum_sq``, ``agg_sq`` and ``recovery``, not eq. (13)-(14), which the paper defines unweighted.
        estimators: compute ``recovery``, ``sigma2_hat`` and ``mu2_hat`` (one call per round);
            ``False`` leaves them ``None``, much faster for large N.
    """
    c = torch.as_tensor(cohorts_NxKxP, dtype=torch.float64)
    k = c.shape[1]
    w = diversity.normalised_weights(weights_K, k)
    grams = torch.einsum("nkp,nlp->nkl", c, c)
    sum_sq = (w**2 * torch.diagonal(grams, dim1=1, dim2=2)).sum(-1)
    agg_sq = torch.einsum("k,nkl,l->n", w, grams, w)
    if not estimators:
        return CohortStats(sum_sq, agg_sq, None, None, None)
    rows = []
    for gram in grams:
        sn = diversity.signal_noise_from_gram(gram)
        rows.append((diversity.recovery_factor_from_gram(gram, weights_K), sn.sigma2_hat, sn.mu2_hat))
    t = torch.tensor(rows, dtype=torch.float64).reshape(-1, 3)
    return CohortStats(sum_sq, agg_sq, t[:, 0], t[:, 1], t[:, 2])
