"""Gradient diversity, the recovery factor and the signal-noise split.

Pure tensor math for the FedAvg metrics (:mod:`maskfed.engine.fedavg`) and the derivation chapters.
Every quantity comes from the Gram matrix of the cohort's updates, G_kl = <Δ_k, Δ_l>, so the Euclidean
form of the experiments and the Hessian-weighted form of Corollary 1 (<Δ_k, Δ_l>_H = Δ_kᵀ H Δ_l) share
one code path.

Paper references (Yan, Kuroda, Jin, Chen, 2026, arXiv 2608.23286): eq. (3) gradient diversity Δ_S,
eq. (8) recovery factor 1/Δ_S, eq. (12) 1/Δ_S = (K_c r + 1)/(r + 1), eq. (13)-(14) estimators σ̂², ‖μ̂‖².
Gradient diversity itself is from Yin et al. (2018).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Tensor = torch.Tensor


def _as_float64(x) -> Tensor:
    return torch.as_tensor(x).to(torch.float64)


def gram_matrix(deltas_KxP, inner: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Gram matrix of a cohort's updates, [K_c, K_c] float64.

    Args:
        deltas_KxP: client updates Δ_k as rows, shape [K_c, P] (any float dtype, promoted to float64).
        inner: optional linear map M on the rows, [K_c, P] -> [K_c, P]; the Gram matrix is then
            Δ M(Δ)ᵀ, i.e. <Δ_k, Δ_l>_H when M multiplies by a symmetric PSD H. ``None``: Euclidean.

    Raises:
        ValueError: if ``deltas_KxP`` is not 2-D with at least one row.
    """
    d = _as_float64(deltas_KxP)
    if d.ndim != 2 or d.shape[0] < 1:
        raise ValueError(f"deltas_KxP must have shape [K_c, P] with K_c >= 1; got shape {tuple(d.shape)}")
    md = d if inner is None else _as_float64(inner(d))
    gram = d @ md.T
    return 0.5 * (gram + gram.T)


def normalised_weights(weights_K, k: int) -> Tensor:
    """Aggregation weights w_k = n_k / Σ n_k as float64, shape [k]; ``None`` gives 1/k each.

    Raises:
        ValueError: wrong length, or weights that are not finite and non-negative with a positive sum.
    """
    if weights_K is None:
        return torch.full((k,), 1.0 / k, dtype=torch.float64)
    w = _as_float64(weights_K).flatten()
    if w.numel() != k:
        raise ValueError(f"weights_K must have one entry per client ({k}); got {w.numel()}")
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights_K must be finite, non-negative, with a positive sum (e.g. shard sizes n_k); got {w.tolist()}")
    return w / w.sum()


def recovery_factor_from_gram(gram_KxK, weights_K=None) -> float:
    """Recovery factor 1/Δ_S from a Gram matrix (eq. 3 and 8); ``nan`` when every update is zero.

    Unweighted: 1/Δ_S = ‖Σ_k Δ_k‖² / Σ_k ‖Δ_k‖² = 1ᵀ G 1 / tr G.
    n_k-weighted, w_k = n_k / Σ n_k: 1/Δ_S^w = ‖Σ_k w_k Δ_k‖² / Σ_k w_k² ‖Δ_k‖² = wᵀ G w / Σ_k w_k² G_kk.

    The paper reports an n_k-weighted value (Sec. IV-A) without its formula; this one, eq. (7) over
    eq. (6) with w_k in place of 1/K_c, is ours. It equals the unweighted form for equal weights and
    1/Σ w_k² when all updates coincide, never exceeds K_c (Cauchy-Schwarz), and is scale-free in the
    weights.

    Args:
        gram_KxK: Gram matrix of the updates, shape [K_c, K_c].
        weights_K: optional aggregation weights (e.g. shard sizes n_k), shape [K_c].

    Raises:
        ValueError: on a non-square Gram matrix or invalid weights.
    """
    g = _as_float64(gram_KxK)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"gram_KxK must be square [K_c, K_c]; got shape {tuple(g.shape)}")
    w = normalised_weights(weights_K, g.shape[0])
    num = w @ g @ w
    den = (w**2 * torch.diagonal(g)).sum()
    if den == 0:
        return float("nan")
    return float(num / den)


def recovery_factor(deltas_KxP, weights_K=None, inner=None) -> float:
    """Recovery factor 1/Δ_S in [0, K_c] of a cohort's updates, shape [K_c, P] (eq. 3 and 8).

    Args:
        weights_K: optional aggregation weights n_k, shape [K_c]; ``None``: the unweighted eq. (3).
        inner: optional linear map for a Hessian-weighted norm (:func:`gram_matrix`).
    """
    return recovery_factor_from_gram(gram_matrix(deltas_KxP, inner), weights_K)


def gradient_diversity(deltas_KxP, weights_K=None, inner=None) -> float:
    """Gradient diversity Δ_S = Σ_k ‖Δ_k‖² / ‖Σ_k Δ_k‖² (eq. 3; Yin et al., 2018).

    The reciprocal of :func:`recovery_factor`; bounded below by 1/K_c; ``inf``
    when the updates cancel exactly (Σ_k Δ_k = 0).
    """
    rf = recovery_factor(deltas_KxP, weights_K, inner)
    return float("inf") if rf == 0 else 1.0 / rf


@dataclass(frozen=True)
class SignalNoise:
    """Signal-noise split of a cohort (eq. 9-14).

    Attributes:
        A: (1/K_c) Σ_k ‖Δ_k‖², the mean squared update norm (parameter units²).
        B: ‖Δ̄‖², the squared norm of the unweighted mean update.
        sigma2_hat: σ̂² = (A − B)/(1 − 1/K_c), eq. (13).
        mu2_hat: ‖μ̂‖² = A − σ̂², eq. (14).
    """

    A: float
    B: float
    sigma2_hat: float
    mu2_hat: float


def signal_noise_from_gram(gram_KxK) -> SignalNoise:
    """Estimators σ̂² and ‖μ̂‖² of eq. (13)-(14) from a Gram matrix, shape [K_c, K_c].

    Raises:
        ValueError: if K_c < 2 (the split needs at least two clients).
    """
    g = _as_float64(gram_KxK)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"gram_KxK must be square [K_c, K_c]; got shape {tuple(g.shape)}")
    k = g.shape[0]
    if k < 2:
        raise ValueError(f"the signal-noise split needs a cohort of K_c >= 2 clients; got K_c = {k}")
    a = float(torch.diagonal(g).mean())
    b = float(g.sum() / k**2)
    sigma2 = (a - b) / (1.0 - 1.0 / k)
    return SignalNoise(A=a, B=b, sigma2_hat=sigma2, mu2_hat=a - sigma2)


def signal_noise(deltas_KxP, inner=None) -> SignalNoise:
    """Estimators σ̂² and ‖μ̂‖² (eq. 13-14) from client updates, shape [K_c, P]."""
    return signal_noise_from_gram(gram_matrix(deltas_KxP, inner))


def predicted_recovery_factor(r, k_c: float):
    """Recovery factor (K_c r + 1)/(r + 1) implied by a signal-to-noise ratio r = ‖μ‖²/σ² (eq. 12).

    K_c as r → ∞, 1 as r → 0; elementwise on floats, arrays and tensors. ``k_c`` may be a float:
    the n_k-weighted form uses the effective cohort size K_eff = 1/Σ w_k² (chapter 6 of the book).

    Raises:
        ValueError: if k_c < 1.
    """
    if k_c < 1:
        raise ValueError(f"k_c must be >= 1; got {k_c}")
    return (k_c * r + 1) / (r + 1)
