"""Zero-mean perturbations of client updates and their excess loss at the FedAvg aggregate.

Three perturbations of a client update Δ_k, each unbiased (E[Δ̃_k] = Δ_k): ``"block_mask"``, the
paper's block mask (eq. 2); ``"dropout"``, the same with one block per coordinate; ``"gaussian"``,
Δ̃_k = Δ_k + ε_k with ε_k ~ N(0, σ² I). Each is drawn per client (``mode="independent"``) or once
per round for all clients (``mode="shared"``).

To second order the loss at the aggregate rises by ½ E[eᵀ H e], e = Σ_k w_k (Δ̃_k − Δ_k). The closed
forms (:func:`dropout_penalty`, :func:`noise_penalty`; exact for a quadratic loss) attenuate
independent perturbations by Σ_k w_k² (1/K_c for the plain mean) and shared ones not at all. The
paper states this attenuation for update dropout and additive gradient noise without a check (end of
Sec. IV-F); the closed forms and the shared case are ours, following its eq. (4)-(7).

Paper reference: Yan, Kuroda, Jin, Chen (2026), arXiv 2608.23286, eq. (2), (4)-(7), Sec. IV-F.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from maskfed.core import diversity, penalty
from maskfed.core.masking import as_generator, check_keep_probability, GeneratorLike, mask_cohort
from maskfed.derivation.theory import mc_estimate, MCEstimate

Tensor = torch.Tensor
KINDS = ("block_mask", "dropout", "gaussian")
MODES = ("independent", "shared")


def check_perturbation(kind: str, mode: str, level, block_sizes: Sequence[int] | None = None) -> float:
    """Validate a perturbation before any draw and return ``level`` as a float.

    ``level`` is the keep probability p in (0, 1] for ``"block_mask"`` and ``"dropout"``, the noise
    standard deviation σ >= 0 (parameter units) for ``"gaussian"``.

    Raises:
        ValueError: naming the bad parameter and its allowed values.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got kind = {kind!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got mode = {mode!r}")
    if kind == "gaussian":
        sigma = float(level)
        if not sigma >= 0 or sigma == float("inf"):
            raise ValueError(f"level (noise standard deviation σ) must be finite and >= 0; got {level!r}")
        return sigma
    if kind == "block_mask" and block_sizes is None:
        raise ValueError("kind = 'block_mask' needs block_sizes (sizes of the B blocks, summing to P)")
    return check_keep_probability(level)


def perturb_cohort(deltas_KxP, kind: str, level, mode: str, generator: GeneratorLike, n_draws: int = 1,
                   block_sizes: Sequence[int] | None = None) -> Tensor:
    """Draw ``n_draws`` perturbed copies of a cohort's updates, [K_c, P] -> [n_draws, K_c, P] (float64).

    Args:
        deltas_KxP: client updates Δ_k, shape [K_c, P].
        kind: ``"block_mask"``, ``"dropout"`` or ``"gaussian"`` (module docstring).
        level: keep probability p (masks, dropout) or σ (Gaussian, parameter units).
        mode: ``"independent"`` (a draw per client) or ``"shared"`` (one per round).
        generator: ``torch.Generator`` or integer seed; n_draws: independent rounds to draw.
        block_sizes: the block partition (``"block_mask"`` only).

    Raises:
        ValueError: bad kind, mode, level or shape (before any draw).
    """
    lv = check_perturbation(kind, mode, level, block_sizes)
    d = torch.as_tensor(deltas_KxP, dtype=torch.float64)
    if d.ndim != 2:
        raise ValueError(f"deltas_KxP must have shape [K_c, P]; got {tuple(d.shape)}")
    if n_draws < 1:
        raise ValueError(f"n_draws must be >= 1; got {n_draws}")
    g = as_generator(generator)
    k, n_coords = d.shape
    many = d.expand(n_draws, k, n_coords)
    if kind == "gaussian":
        rows = k if mode == "independent" else 1
        noise = lv * torch.randn(n_draws, rows, n_coords, generator=g, dtype=torch.float64)
        return many + noise.expand(n_draws, k, n_coords)
    sizes = list(block_sizes) if kind == "block_mask" else [1] * n_coords
    return mask_cohort(many, sizes, lv, mode, g)


def aggregate_excess_mc(loss_fn: Callable[[Tensor], Tensor], theta_P, deltas_KxP, kind: str, level, mode: str,
                        n_draws: int, generator: GeneratorLike, weights_K=None,
                        block_sizes: Sequence[int] | None = None, grad_P=None, chunk: int = 256) -> MCEstimate:
    """Monte Carlo E[l(θ − Σ_k w_k Δ̃_k)] − l(θ − Σ_k w_k Δ_k), as a
    :class:`~maskfed.derivation.theory.MCEstimate` (loss units).

    With ``grad_P`` = ∇l(θ − Δ_agg), each sample adds the control variate gᵀ(Δ̃_agg − Δ_agg), of
    mean exactly zero, which removes the first-order term's variance. Unbiased either way.

    Args:
        loss_fn: batched loss, [N, P] -> [N] (loss units).
        theta_P: θ, shape [P]; deltas_KxP: client updates, shape [K_c, P].
        kind, level, mode, block_sizes: as :func:`perturb_cohort`.
        n_draws: number of draws, >= 2; generator: ``torch.Generator`` or integer seed.
        weights_K: optional aggregation weights n_k (normalised here); None: 1/K_c.
        grad_P: optional gradient of the loss at θ − Δ_agg, shape [P].
        chunk: draws per batch (memory only).

    Raises:
        ValueError: bad kind, mode, level or n_draws < 2 (before any draw).
    """
    check_perturbation(kind, mode, level, block_sizes)
    if n_draws < 2:
        raise ValueError(f"n_draws must be >= 2 for a standard error; got {n_draws}")
    d = torch.as_tensor(deltas_KxP, dtype=torch.float64)
    d = d.reshape(1, -1) if d.ndim == 1 else d
    w = diversity.normalised_weights(weights_K, d.shape[0])
    theta = torch.as_tensor(theta_P, dtype=torch.float64)
    agg = w @ d
    base = float(torch.as_tensor(loss_fn((theta - agg).reshape(1, -1))).reshape(-1)[0])
    g = as_generator(generator)
    grad = None if grad_P is None else torch.as_tensor(grad_P, dtype=torch.float64)
    samples, done = [], 0
    while done < n_draws:
        n = min(chunk, n_draws - done)
        agg_tilde = torch.einsum("k,nkp->np", w, perturb_cohort(d, kind, level, mode, g, n, block_sizes))
        s = torch.as_tensor(loss_fn(theta - agg_tilde), dtype=torch.float64) - base
        if grad is not None:
            s = s + (agg_tilde - agg) @ grad
        samples.append(s)
        done += n
    return mc_estimate(torch.cat(samples))


def dropout_penalty(deltas_KxP, p, hessian_diag_P, mode: str, weights_K=None) -> float:
    """Second-order excess loss of update dropout at the aggregate, in loss units (ours; eq. 6-7
    with one-coordinate blocks).

    independent: (1 − p)/(2p) Σ_k w_k² Σ_i H_ii Δ_k,i²; shared: (1 − p)/(2p) Σ_i H_ii (Σ_k w_k Δ_k,i)².

    Args:
        deltas_KxP: client updates, shape [K_c, P].
        p: keep probability in (0, 1].
        hessian_diag_P: the Hessian's diagonal H_ii at θ − Δ_agg, shape [P].
        mode: ``"independent"`` or ``"shared"``.
        weights_K: optional aggregation weights n_k; None: 1/K_c.

    Raises:
        ValueError: bad p or mode (before any compute), or mismatched shapes.
    """
    c = penalty.penalty_coefficient(p)
    check_perturbation("dropout", mode, p)
    d = torch.as_tensor(deltas_KxP, dtype=torch.float64)
    h = torch.as_tensor(hessian_diag_P, dtype=torch.float64).flatten()
    if d.ndim != 2 or d.shape[1] != h.numel():
        raise ValueError(f"deltas_KxP [K_c, P] and hessian_diag_P [P] must agree; got {tuple(d.shape)}, {h.numel()}")
    w = diversity.normalised_weights(weights_K, d.shape[0])
    if mode == "independent":
        return c * float((w**2) @ (d**2 @ h))
    return c * float((w @ d) ** 2 @ h)


def noise_penalty(sigma: float, hessian_trace: float, mode: str, weights_K=None, k_c: int | None = None) -> float:
    """Second-order excess loss of additive Gaussian noise N(0, σ² I) on client updates (ours).

    independent: ½ σ² tr(H) Σ_k w_k²; shared: ½ σ² tr(H). Independent of the updates.

    Args:
        sigma: noise standard deviation σ >= 0 (parameter units).
        hessian_trace: tr(H) at θ − Δ_agg (loss units per parameter unit²).
        mode: ``"independent"`` or ``"shared"``.
        weights_K: aggregation weights n_k, shape [K_c]; or give ``k_c`` (cohort size) for 1/K_c each.

    Raises:
        ValueError: bad σ or mode, or neither/both of ``weights_K`` and ``k_c``.
    """
    s = check_perturbation("gaussian", mode, sigma)
    if (weights_K is None) == (k_c is None):
        raise ValueError("give exactly one of weights_K (aggregation weights) and k_c (cohort size)")
    w = diversity.normalised_weights(weights_K, len(weights_K) if weights_K is not None else int(k_c))
    factor = float((w**2).sum()) if mode == "independent" else 1.0
    return 0.5 * s**2 * float(hessian_trace) * factor


# --------------------------------------------------------------------------- gradient noise through T local steps


def _check_local_steps(lr: float, steps: int, sigma: float, mode: str) -> None:
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr (local step size η) must be finite and > 0; got {lr!r}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps (local steps T) must be an integer >= 1; got {steps!r}")
    check_perturbation("gaussian", mode, sigma)


def local_noise_covariance(hessian_PxP, lr: float, steps: int, sigma: float) -> Tensor:
    """Covariance [P, P] of what Gaussian gradient noise leaves in one client's update (ours).

    T steps θ ← θ − η(∇l_k(θ) + ξ_t), ξ_t ~ N(0, σ² I), on a quadratic loss with Hessian H give
    Δ̃_k − Δ_k = η Σ_t A^(T−1−t) ξ_t with A = I − ηH, hence the covariance η² σ² Σ_{j<T} A^j (A^j)ᵀ
    (exact for a quadratic).

    Args:
        hessian_PxP: H, symmetric, shape [P, P] (loss units per parameter unit²).
        lr: local step size η > 0; steps: local steps T >= 1; sigma: noise standard deviation σ >= 0
            (gradient units).

    Raises:
        ValueError: bad η, T or σ (before any compute).
    """
    _check_local_steps(lr, steps, sigma, "independent")
    h = torch.as_tensor(hessian_PxP, dtype=torch.float64)
    a = torch.eye(h.shape[0], dtype=torch.float64) - lr * h
    power, cov = torch.eye(h.shape[0], dtype=torch.float64), torch.zeros_like(h)
    for _ in range(int(steps)):
        cov = cov + power @ power.T
        power = a @ power
    return (lr * sigma) ** 2 * cov


def step_noise_penalty(hessian_PxP, lr: float, steps: int, sigma: float, mode: str, weights_K=None,
                       k_c: int | None = None) -> float:
    """Second-order excess at the aggregate of gradient noise added at each of T local steps (ours).

    independent (a ξ_t per client): ½ tr(H C) Σ_k w_k²; shared (one ξ_t per step, from a seed the
    server broadcasts): ½ tr(H C), with C = :func:`local_noise_covariance`. Independent of the
    updates, like :func:`noise_penalty`; exact for a quadratic loss whose clients share H.

    Args:
        hessian_PxP, lr, steps, sigma: as :func:`local_noise_covariance`.
        mode: ``"independent"`` or ``"shared"``.
        weights_K: aggregation weights n_k, shape [K_c]; or give ``k_c`` for 1/K_c each.

    Raises:
        ValueError: bad η, T, σ or mode, or neither/both of ``weights_K`` and ``k_c``.
    """
    _check_local_steps(lr, steps, sigma, mode)
    if (weights_K is None) == (k_c is None):
        raise ValueError("give exactly one of weights_K (aggregation weights) and k_c (cohort size)")
    w = diversity.normalised_weights(weights_K, len(weights_K) if weights_K is not None else int(k_c))
    h = torch.as_tensor(hessian_PxP, dtype=torch.float64)
    factor = float((w**2).sum()) if mode == "independent" else 1.0
    return 0.5 * float(torch.trace(h @ local_noise_covariance(h, lr, steps, sigma))) * factor


def local_steps_excess_mc(loss, theta_P, offsets_KxP, lr: float, steps: int, sigma: float, mode: str,
                          n_draws: int, generator: GeneratorLike, weights_K=None, chunk: int = 256) -> MCEstimate:
    """Monte Carlo excess loss of FedAvg's aggregate when every client adds Gaussian noise to its
    gradient at each of its T local steps, against the same round without noise (ours); an
    :class:`~maskfed.derivation.theory.MCEstimate` (loss units).

    Client k takes T steps θ ← θ − η(∇l_k(θ) + ξ_t) on l_k(θ) = l(θ) + c_kᵀθ (distinct noiseless
    updates); l is taken at θ − Σ_k w_k Δ̃_k. Each sample adds the zero-mean control variate
    ∇l(θ − Δ_agg)ᵀ(Δ̃_agg − Δ_agg), so for a quadratic a sample is exactly ½ eᵀHe.

    Args:
        loss: a :class:`maskfed.derivation.theory.QuadraticLoss` (its ``hessian`` [P, P], ``g`` [P]).
        theta_P: θ at the start of the round, [P]; offsets_KxP: the clients' c_k, [K_c, P].
        lr, steps, sigma: η, T, σ as :func:`local_noise_covariance`.
        mode: ``"independent"`` (a ξ_t per client and step) or ``"shared"`` (one ξ_t per step for all).
        n_draws: rounds to draw (>= 2); generator: ``torch.Generator`` or seed.
        weights_K: aggregation weights n_k; None: 1/K_c.
        chunk: draws per batch (memory only).

    Raises:
        ValueError: bad η, T, σ, mode, shapes, or n_draws < 2 (before any draw).
    """
    _check_local_steps(lr, steps, sigma, mode)
    if n_draws < 2:
        raise ValueError(f"n_draws must be >= 2 for a standard error; got {n_draws}")
    h, g_lin = loss.hessian, loss.g
    c = torch.as_tensor(offsets_KxP, dtype=torch.float64)
    theta = torch.as_tensor(theta_P, dtype=torch.float64)
    if c.ndim != 2 or c.shape[1] != theta.numel() or h.shape != (theta.numel(), theta.numel()):
        raise ValueError(f"offsets_KxP [K_c, P], theta_P [P] and the loss's Hessian [P, P] must agree; got "
                         f"{tuple(c.shape)}, {tuple(theta.shape)}, {tuple(h.shape)}")
    k, n_coords = c.shape
    w = diversity.normalised_weights(weights_K, k)

    def train(noise_fn, n):
        t = theta.expand(n, k, n_coords).clone()
        for _ in range(int(steps)):
            t = t - lr * (t @ h + g_lin + c + noise_fn(n))
        return torch.einsum("k,nkp->np", w, theta - t)   # the aggregate Δ̃_agg, [n, P]

    agg = train(lambda n: 0.0, 1)[0]
    base = float(loss(theta - agg))
    grad = g_lin + h @ (theta - agg)
    gen = as_generator(generator)
    rows = k if mode == "independent" else 1
    samples, done = [], 0
    while done < n_draws:
        n = min(chunk, n_draws - done)
        agg_tilde = train(lambda m: sigma * torch.randn(m, rows, n_coords, generator=gen, dtype=torch.float64), n)
        samples.append(loss(theta - agg_tilde) - base + (agg_tilde - agg) @ grad)
        done += n
    return mc_estimate(torch.cat(samples))
