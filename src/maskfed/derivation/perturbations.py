"""Zero-mean perturbations of client updates and their excess loss at the FedAvg aggregate.

Three perturbations of a client update Δ_k, each unbiased (E[Δ̃_k] = Δ_k):

* ``"block_mask"``: the paper's block mask (eq. 2), Δ̃_k,b = m_b Δ_k,b / p;
* ``"dropout"``: update dropout, the same with one block per coordinate
  (a Bernoulli(p) keep indicator per coordinate, rescaled by 1/p);
* ``"gaussian"``: additive noise, Δ̃_k = Δ_k + ε_k with ε_k ~ N(0, σ² I).

Each is drawn either independently per client (``mode="independent"``) or
once per round and applied by every client (``mode="shared"``). At the
aggregate ``Σ_k w_k Δ̃_k`` the perturbation ``Σ_k w_k (Δ̃_k − Δ_k)`` has zero
mean, and to second order the loss rises by ½ E[eᵀ H e]. Closed forms
(exact for a quadratic loss):

* dropout, independent: (1 − p)/(2p) Σ_k w_k² Σ_i H_ii Δ_k,i²;
  shared: (1 − p)/(2p) Σ_i H_ii (Σ_k w_k Δ_k,i)² — eq. (6)-(7) of the paper
  with one-coordinate blocks;
* Gaussian, independent: ½ σ² tr(H) Σ_k w_k²; shared: ½ σ² tr(H).

So independent perturbations are attenuated at the aggregate by Σ_k w_k²
(1/K_c for the plain mean) relative to the average single-client penalty,
and shared ones are not. The paper remarks at the end of Sec. IV-F, without
a check, that the attenuation of its Prop. 2 applies equally to update
dropout and additive gradient noise; the closed forms and the shared-draw
case are ours, following its eq. (4)-(7).

Paper reference: Yan, Kuroda, Jin, Chen (2026), arXiv 2608.23286, eq. (2), (4)-(7), Sec. IV-F.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from maskfed.fl import diversity, penalty
from maskfed.fl.masking import GeneratorLike, as_generator, check_keep_probability, mask_cohort
from maskfed.derivation.theory import MCEstimate, mc_estimate

Tensor = torch.Tensor
KINDS = ("block_mask", "dropout", "gaussian")
MODES = ("independent", "shared")


def check_perturbation(kind: str, mode: str, level, block_sizes: Sequence[int] | None = None) -> float:
    """Validate a perturbation before any draw; returns ``level`` as a float.

    ``level`` is the keep probability p in (0, 1] for ``"block_mask"`` and
    ``"dropout"``, the noise standard deviation σ >= 0 (parameter units) for
    ``"gaussian"``.

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
    """Draw ``n_draws`` perturbed copies of a cohort's updates, shape [K_c, P] -> [n_draws, K_c, P] (float64).

    Args:
        deltas_KxP: client updates Δ_k, shape [K_c, P].
        kind: ``"block_mask"``, ``"dropout"`` or ``"gaussian"`` (module docstring).
        level: keep probability p (masks, dropout) or σ (Gaussian, parameter units).
        mode: ``"independent"`` (a draw per client) or ``"shared"`` (one per round).
        generator: ``torch.Generator`` or integer seed.
        n_draws: number of independent rounds to draw.
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
    """Monte Carlo E[l(θ − Σ_k w_k Δ̃_k)] − l(θ − Σ_k w_k Δ_k) with its standard error.

    With ``grad_P`` = ∇l(θ − Δ_agg), each sample adds the control variate
    gᵀ(Δ̃_agg − Δ_agg), whose expectation is exactly zero (the perturbations
    are unbiased); it removes the first-order term, which has zero mean but
    dominates the variance. The estimate stays unbiased either way.

    Args:
        loss_fn: batched loss, [N, P] -> [N] (loss units).
        theta_P: θ, shape [P]; deltas_KxP: client updates, shape [K_c, P].
        kind, level, mode, block_sizes: as :func:`perturb_cohort`.
        n_draws: number of draws, >= 2.
        generator: ``torch.Generator`` or integer seed.
        weights_K: optional aggregation weights n_k (normalised here); None: 1/K_c.
        grad_P: optional gradient of the loss at θ − Δ_agg, shape [P].
        chunk: draws per batch (memory only).

    Returns:
        :class:`maskfed.derivation.theory.MCEstimate` (loss units).

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
    """Second-order excess of update dropout at the aggregate (ours, eq. 6-7 with one-coordinate blocks).

    independent: (1 − p)/(2p) Σ_k w_k² Σ_i H_ii Δ_k,i²; shared: (1 − p)/(2p) Σ_i H_ii (Σ_k w_k Δ_k,i)².

    Args:
        deltas_KxP: client updates, shape [K_c, P].
        p: keep probability in (0, 1].
        hessian_diag_P: the Hessian's diagonal H_ii at θ − Δ_agg, shape [P].
        mode: ``"independent"`` or ``"shared"``.
        weights_K: optional aggregation weights n_k; None: 1/K_c.

    Returns:
        The penalty as a float (loss units).

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
    """Second-order excess of additive Gaussian noise N(0, σ² I) on client updates (ours).

    independent: ½ σ² tr(H) Σ_k w_k²; shared: ½ σ² tr(H). It does not depend on the updates.

    Args:
        sigma: noise standard deviation σ >= 0 (parameter units).
        hessian_trace: tr(H) at θ − Δ_agg (loss units per parameter unit²).
        mode: ``"independent"`` or ``"shared"``.
        weights_K: aggregation weights n_k, shape [K_c]; or give ``k_c`` for 1/K_c each.
        k_c: cohort size, when ``weights_K`` is None.

    Raises:
        ValueError: bad σ or mode, or neither/both of ``weights_K`` and ``k_c``.
    """
    s = check_perturbation("gaussian", mode, sigma)
    if (weights_K is None) == (k_c is None):
        raise ValueError("give exactly one of weights_K (aggregation weights) and k_c (cohort size)")
    w = diversity.normalised_weights(weights_K, len(weights_K) if weights_K is not None else int(k_c))
    factor = float((w**2).sum()) if mode == "independent" else 1.0
    return 0.5 * s**2 * float(hessian_trace) * factor
