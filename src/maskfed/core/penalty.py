"""The curvature penalty of update masking, for one update and for a FedAvg cohort.

Block masking (eq. 2, :mod:`maskfed.core.masking`) adds, to second order, the penalty (eq. 4)
R(Δ) = (1 − p)/(2p) · Σ_b Δ_bᵀ H_bb Δ_b, with H_bb the diagonal blocks of the Hessian at the
evaluated point. Only the block-diagonal part H_bd enters, so the functions take an operator that
applies H_bd to a stack of vectors: :class:`DenseBlockHessian` (a given dense Hessian) or
:class:`HVPBlockHessian` (any torch model, loss and batch, by Hessian-vector products).

At the FedAvg aggregate Δ_agg = Σ_k w_k Δ_k (w_k = 1/K_c or n_k / Σ n_k):

* independent masks per client (Prop. 2, eq. 6): R_ind = Σ_k w_k² R(Δ_k);
* one shared mask per round (Prop. 3, eq. 7): R_shr = R(Δ_agg);
* R_shr / R_ind is 1/Δ_S in the norm ‖v‖²_H = Σ_b v_bᵀ H_bb v_b (Corollary 1, eq. 8), equal to
  the Euclidean 1/Δ_S when every H_bb = c·I.

Paper reference: Yan, Kuroda, Jin, Chen (2026), arXiv 2608.23286, eq. (4)-(8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from maskfed.core import diversity
from maskfed.core.masking import block_sizes_of, block_slices, check_keep_probability, flatten_params

Tensor = torch.Tensor
BlockHessianOp = Callable[[Tensor], Tensor]


def _f64(x) -> Tensor:
    return torch.as_tensor(x).detach().to(torch.float64)


def penalty_coefficient(p) -> float:
    """The price (1 − p)/(2p) of eq. (4); 0 at p = 1.

    Raises:
        ValueError: if ``p`` is outside (0, 1].
    """
    pf = check_keep_probability(p)
    return (1.0 - pf) / (2.0 * pf)


def block_diagonal_part(H_PxP, block_sizes: Sequence[int]) -> Tensor:
    """Keep the diagonal blocks H_bb of a matrix and zero the rest, shape [P, P] -> [P, P] (float64).

    Raises:
        ValueError: if H is not square or the blocks do not sum to P.
    """
    h = _f64(H_PxP)
    if h.ndim != 2 or h.shape[0] != h.shape[1]:
        raise ValueError(f"H_PxP must be square [P, P]; got shape {tuple(h.shape)}")
    if sum(int(s) for s in block_sizes) != h.shape[0]:
        raise ValueError(f"block_sizes sum to {sum(block_sizes)} but H has P = {h.shape[0]}")
    out = torch.zeros_like(h)
    for sl in block_slices(block_sizes):
        out[sl, sl] = h[sl, sl]
    return out


class DenseBlockHessian:
    """Applies the block-diagonal part of a given dense Hessian: V [N, P] -> V H_bd [N, P].

    Args:
        H_PxP: symmetric Hessian, shape [P, P]; off-diagonal blocks are discarded.
        block_sizes: sizes of the B consecutive blocks, summing to P.

    Attributes:
        matrix: H_bd, shape [P, P], float64; block_sizes: the block partition.
    """

    def __init__(self, H_PxP, block_sizes: Sequence[int]):
        self.block_sizes = [int(s) for s in block_sizes]
        self.matrix = block_diagonal_part(H_PxP, self.block_sizes)

    def __call__(self, vectors_NxP) -> Tensor:
        v = _f64(vectors_NxP)
        return v @ self.matrix  # H_bd is symmetric


class HVPBlockHessian:
    """Applies the block-diagonal part of the Hessian of a torch loss by Hessian-vector products.

    (H_bd v)_b = (H v_b)_b, with v_b equal to v on block b and zero elsewhere, by double backward:
    one HVP per block and vector, no [P, P] matrix. The gradient graph is built once, at the
    parameter values on creation.

    Args:
        loss_fn: zero-argument callable returning the scalar loss from ``params``
            (e.g. ``lambda: F.mse_loss(model(x), y)``).
        params: the parameter tensors (``requires_grad``), list or dict; vectors are laid out as
            :func:`maskfed.core.masking.flatten_params` does.
        block_sizes: block partition of the flat vector; default one block per tensor (or per
            output channel with ``granularity="channel"``, used only when ``block_sizes`` is None).

    Raises:
        ValueError: if ``params`` is empty or the blocks do not sum to P.
    """

    def __init__(self, loss_fn: Callable[[], Tensor], params, block_sizes: Sequence[int] | None = None,
                 granularity: str = "tensor"):
        self.params = list(params.values()) if isinstance(params, dict) else list(params)
        if not self.params:
            raise ValueError("params is empty")
        self.block_sizes = (block_sizes_of(self.params, granularity) if block_sizes is None
                            else [int(s) for s in block_sizes])
        self.num_coords = sum(t.numel() for t in self.params)
        if sum(self.block_sizes) != self.num_coords:
            raise ValueError(f"block_sizes sum to {sum(self.block_sizes)} but the parameters have P = {self.num_coords}")
        self._slices = block_slices(self.block_sizes)
        loss = loss_fn()
        grads = torch.autograd.grad(loss, self.params, create_graph=True, allow_unused=True)
        self._grad = [torch.zeros_like(t) if g is None else g for t, g in zip(self.params, grads)]
        self._flat_grad = torch.cat([g.reshape(-1) for g in self._grad])
        self._dtype = self._flat_grad.dtype

    @property
    def gradient(self) -> Tensor:
        """The loss gradient at the current parameters, flat [P] (float64, detached, on the CPU)."""
        return self._flat_grad.detach().to(device="cpu", dtype=torch.float64)

    def hvp(self, v_P: Tensor) -> Tensor:
        """Full Hessian-vector product H v, [P] -> [P] (float64, on the CPU whatever the parameters' device)."""
        if not self._flat_grad.requires_grad:  # loss linear in the parameters
            return torch.zeros(self.num_coords, dtype=torch.float64)
        # v arrives on the CPU in float64; the graph may live on a GPU: compute there, answer on the CPU
        hv = torch.autograd.grad(self._flat_grad, self.params,
                                 grad_outputs=v_P.to(device=self._flat_grad.device, dtype=self._dtype),
                                 retain_graph=True, allow_unused=True)
        return torch.cat([(torch.zeros_like(t) if h is None else h).reshape(-1)
                          for t, h in zip(self.params, hv)]).detach().to(device="cpu", dtype=torch.float64)

    def __call__(self, vectors_NxP) -> Tensor:
        v = _f64(vectors_NxP)
        squeeze = v.ndim == 1
        v = v.reshape(1, -1) if squeeze else v
        if v.shape[-1] != self.num_coords:
            raise ValueError(f"vectors must have P = {self.num_coords} columns; got shape {tuple(v.shape)}")
        out = torch.zeros_like(v)
        for n in range(v.shape[0]):
            for sl in self._slices:
                if not torch.any(v[n, sl] != 0):
                    continue
                vb = torch.zeros(self.num_coords, dtype=torch.float64)
                vb[sl] = v[n, sl]
                out[n, sl] = self.hvp(vb)[sl]
        return out[0] if squeeze else out


def _delta_vector(delta, num_coords: int | None = None) -> Tensor:
    d = flatten_params(delta) if isinstance(delta, (list, tuple, dict)) else _f64(delta)
    d = _f64(d)
    if d.ndim != 1:
        raise ValueError(f"an update must be a flat vector [P] or a list/dict of tensors; got shape {tuple(d.shape)}")
    if num_coords is not None and d.numel() != num_coords:
        raise ValueError(f"update has {d.numel()} coordinates, expected P = {num_coords}")
    return d


def curvature_penalty(delta_P, p, hessian_bd: BlockHessianOp) -> float:
    """Curvature penalty R(Δ) = (1 − p)/(2p) Σ_b Δ_bᵀ H_bb Δ_b (eq. 4), in loss units.

    Args:
        delta_P: the update Δ, shape [P] (parameter units), or a list/dict of per-parameter tensors.
        p: keep probability in (0, 1].
        hessian_bd: operator applying the block-diagonal Hessian, e.g. :class:`DenseBlockHessian`
            or :class:`HVPBlockHessian`.

    Raises:
        ValueError: if ``p`` is outside (0, 1] (before any compute).
    """
    c = penalty_coefficient(p)
    d = _delta_vector(delta_P)
    return c * float(d @ _f64(hessian_bd(d.reshape(1, -1))).reshape(-1))


def curvature_penalty_dense(delta_P, H_PxP, block_sizes: Sequence[int], p) -> float:
    """Eq. (4) for a given dense Hessian [P, P], reading only its diagonal blocks; exact for a quadratic loss.

    Raises:
        ValueError: on a bad ``p`` or a partition that does not match P.
    """
    c = penalty_coefficient(p)
    d = _delta_vector(delta_P)
    h = _f64(H_PxP)
    if sum(int(s) for s in block_sizes) != d.numel() or h.shape != (d.numel(), d.numel()):
        raise ValueError("H_PxP must be [P, P] and block_sizes must sum to P = len(delta_P)")
    return c * sum(float(d[sl] @ h[sl, sl] @ d[sl]) for sl in block_slices(block_sizes))


def curvature_penalty_hvp(loss_fn: Callable[[], Tensor], params, delta, p,
                          block_sizes: Sequence[int] | None = None, granularity: str = "tensor") -> float:
    """R(Δ) (eq. 4, loss units) for any torch model, loss and batch, by one Hessian-vector product per block.

    Args:
        loss_fn: zero-argument callable returning the scalar loss from ``params``.
        params: parameter tensors (``requires_grad``), list or dict; H is taken at their values.
        delta: update Δ as a flat vector [P] or a list/dict shaped like ``params``.
        p: keep probability in (0, 1].
        block_sizes / granularity: the block partition (default one block per tensor).

    Raises:
        ValueError: if ``p`` is outside (0, 1] (before any autograd work).
    """
    check_keep_probability(p)
    op = HVPBlockHessian(loss_fn, params, block_sizes, granularity)
    return curvature_penalty(_delta_vector(delta, op.num_coords), p, op)


def _weights(weights_K, k: int) -> Tensor:
    return diversity.normalised_weights(weights_K, k)


def _deltas(deltas_KxP) -> Tensor:
    d = _f64(deltas_KxP)
    if d.ndim != 2 or d.shape[0] < 1:
        raise ValueError(f"deltas_KxP must have shape [K_c, P]; got {tuple(d.shape)}")
    return d


def aggregate(deltas_KxP, weights_K=None) -> Tensor:
    """FedAvg aggregate Σ_k w_k Δ_k (eq. 1), shape [K_c, P] -> [P]; w_k = 1/K_c or n_k / Σ n_k."""
    d = _deltas(deltas_KxP)
    return _weights(weights_K, d.shape[0]) @ d


def penalty_independent(deltas_KxP, p, hessian_bd: BlockHessianOp, weights_K=None) -> float:
    """Penalty at the aggregate under independent per-client masks (Prop. 2, eq. 6): R_ind = Σ_k w_k² R(Δ_k),
    in loss units.

    Args:
        deltas_KxP: client updates, shape [K_c, P].
        p: keep probability in (0, 1].
        hessian_bd: block-diagonal Hessian operator (H at the aggregated point).
        weights_K: optional aggregation weights n_k, shape [K_c] (normalised here); None: 1/K_c.

    Raises:
        ValueError: on a bad ``p`` (before any compute) or bad shapes/weights.
    """
    c = penalty_coefficient(p)
    d = _deltas(deltas_KxP)
    w = _weights(weights_K, d.shape[0])
    quad_K = (d * _f64(hessian_bd(d))).sum(dim=1)
    return c * float((w**2 * quad_K).sum())


def penalty_shared(deltas_KxP, p, hessian_bd: BlockHessianOp, weights_K=None) -> float:
    """Penalty at the aggregate under one mask shared by the cohort (Prop. 3, eq. 7): R(Σ_k w_k Δ_k).

    Args and errors as :func:`penalty_independent`.
    """
    check_keep_probability(p)
    return curvature_penalty(aggregate(deltas_KxP, weights_K), p, hessian_bd)


def block_hessian_gram(deltas_KxP, hessian_bd: BlockHessianOp) -> Tensor:
    """Gram matrix in the block-Hessian inner product, G_kl = Σ_b Δ_k,bᵀ H_bb Δ_l,b, shape [K_c, K_c].

    Uses :func:`maskfed.core.diversity.gram_matrix` with ``inner=hessian_bd``.
    """
    return diversity.gram_matrix(_deltas(deltas_KxP), inner=hessian_bd)


def penalty_ratio(deltas_KxP, hessian_bd: BlockHessianOp, weights_K=None) -> float:
    """Exact R_shr / R_ind (Corollary 1, eq. 8), independent of p: 1/Δ_S in the block-Hessian norm,
    wᵀGw / Σ_k w_k² G_kk (:func:`maskfed.core.diversity.recovery_factor_from_gram`)."""
    return diversity.recovery_factor_from_gram(block_hessian_gram(deltas_KxP, hessian_bd), weights_K)


@dataclass(frozen=True)
class CohortPenalty:
    """Both penalties of a cohort and their ratio (eq. 6-8).

    Attributes:
        r_ind: R_ind, independent masks (loss units).
        r_shr: R_shr, shared mask (loss units).
        ratio: exact R_shr / R_ind (block-Hessian recovery factor).
        euclidean_ratio: Euclidean recovery factor 1/Δ_S (what a server can measure).
    """

    r_ind: float
    r_shr: float
    ratio: float
    euclidean_ratio: float


def cohort_penalty(deltas_KxP, p, hessian_bd: BlockHessianOp, weights_K=None) -> CohortPenalty:
    """Compute R_ind, R_shr, their exact ratio and the Euclidean 1/Δ_S in one pass (eq. 6-8).

    Args and errors as :func:`penalty_independent`.
    """
    c = penalty_coefficient(p)
    gram = block_hessian_gram(deltas_KxP, hessian_bd)
    w = _weights(weights_K, gram.shape[0])
    r_ind = c * float((w**2 * torch.diagonal(gram)).sum())
    r_shr = c * float(w @ gram @ w)
    return CohortPenalty(
        r_ind=r_ind,
        r_shr=r_shr,
        ratio=diversity.recovery_factor_from_gram(gram, weights_K),
        euclidean_ratio=diversity.recovery_factor(deltas_KxP, weights_K),
    )
