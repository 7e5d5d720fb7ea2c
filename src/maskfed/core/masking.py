"""Block-wise update masking (eq. 2) for one client and for a FedAvg cohort.

An update Δ is cut into B disjoint blocks Δ^(b); masking draws m^(b) ~ Bernoulli(p) per block,
independently, and returns Δ̃^(b) = m^(b) Δ^(b) / p. The 1/p keeps it unbiased, E[Δ̃] = Δ; its
variance gives the curvature penalty of :mod:`maskfed.core.penalty`.

A partition is either a list of block sizes over a flat vector [P] (consecutive blocks), or a
list/dict of parameter tensors with one block per tensor (``granularity="tensor"``, the paper's
choice) or per slice along dim 0, i.e. per output channel (``"channel"``). :func:`flatten_params`
lays the blocks of :func:`block_sizes_of` out contiguously, so both describe the same partition.

For a cohort of K_c clients, ``mode="independent"`` draws a mask per client (Proposition 2) and
``mode="shared"`` one mask per round for all clients (Proposition 3). All randomness goes through an
explicit ``torch.Generator`` or integer seed.

Paper reference: Yan, Kuroda, Jin, Chen (2026), arXiv 2608.23286, eq. (2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Union

import torch

Tensor = torch.Tensor
GeneratorLike = Union[torch.Generator, int]

#: Allowed values of ``mode`` in :func:`mask_cohort`.
MODES = ("independent", "shared")
#: Allowed values of ``granularity`` in :func:`block_sizes_of`.
GRANULARITIES = ("tensor", "channel")


def check_keep_probability(p) -> float:
    """Validate a keep probability 0 < p <= 1 and return it as a float.

    Raises:
        ValueError: if ``p`` is not a number in (0, 1].
    """
    try:
        pf = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"keep probability p must be a number in (0, 1]; got {p!r}") from None
    if not (0.0 < pf <= 1.0):
        raise ValueError(f"keep probability p must lie in (0, 1]; got p = {p!r}")
    return pf


def _check_mode(mode) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got mode = {mode!r}")
    return mode


def as_generator(generator: GeneratorLike) -> torch.Generator:
    """A ``torch.Generator``: the argument itself (its state advances) or a new CPU one seeded with an integer.

    Raises:
        TypeError: on anything else, including ``None`` (randomness must be explicit).
    """
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, int) and not isinstance(generator, bool):
        return torch.Generator().manual_seed(generator)
    raise TypeError(f"generator must be a torch.Generator or an integer seed; got {generator!r}")


def _param_items(params) -> list[tuple[str, Tensor]]:
    if isinstance(params, Mapping):
        return [(str(k), v) for k, v in params.items()]
    if isinstance(params, Tensor):
        raise TypeError("params must be a list/tuple or dict of tensors, not a single tensor")
    return [(str(i), v) for i, v in enumerate(params)]


def block_sizes_of(params, granularity: str = "tensor") -> list[int]:
    """Block partition of a model's parameters: block sizes summing to P, in :func:`flatten_params` order.

    Args:
        params: list/tuple or dict of parameter tensors (e.g. ``list(model.parameters())`` or
            ``model.state_dict()``).
        granularity: ``"tensor"`` (one block per tensor, the paper's choice) or ``"channel"`` (one
            block per slice along dim 0, i.e. per output channel; a 0-d tensor is one block).

    Raises:
        ValueError: on an unknown ``granularity``.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}; got granularity = {granularity!r}")
    sizes: list[int] = []
    for _, t in _param_items(params):
        n = t.numel()
        if granularity == "tensor" or t.ndim == 0:
            sizes.append(n)
        else:
            rows = t.shape[0]
            sizes.extend([n // rows] * rows)
    return sizes


def flatten_params(params) -> Tensor:
    """Concatenate a list/dict of tensors (dicts in insertion order) into one detached vector [P].

    Raises:
        ValueError: if ``params`` is empty.
    """
    items = _param_items(params)
    if not items:
        raise ValueError("params is empty")
    return torch.cat([t.detach().reshape(-1) for _, t in items])


def unflatten_params(flat_P: Tensor, like):
    """Inverse of :func:`flatten_params`: cut a flat vector, shape [P], into tensors shaped like ``like``.

    Returns a dict if ``like`` is a dict (same keys), else a list.

    Raises:
        ValueError: if the length of ``flat_P`` differs from the total size of ``like``.
    """
    items = _param_items(like)
    total = sum(t.numel() for _, t in items)
    if flat_P.ndim != 1 or flat_P.numel() != total:
        raise ValueError(f"flat_P must have shape [{total}]; got {tuple(flat_P.shape)}")
    out, start = [], 0
    for _, t in items:
        out.append(flat_P[start : start + t.numel()].reshape(t.shape))
        start += t.numel()
    if isinstance(like, Mapping):
        return dict(zip(like.keys(), out))
    return out


def block_slices(block_sizes: Sequence[int]) -> list[slice]:
    """Index ranges ``[start, stop)`` of consecutive blocks with the given sizes.

    Raises:
        ValueError: if the list is empty or a size is not a positive integer.
    """
    sizes = [int(s) for s in block_sizes]
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError(f"block_sizes must be a non-empty list of positive integers; got {list(block_sizes)!r}")
    out, start = [], 0
    for s in sizes:
        out.append(slice(start, start + s))
        start += s
    return out


def block_sizes_from_ranges(ranges: Sequence[tuple[int, int]], num_coords: int | None = None) -> list[int]:
    """Block sizes from consecutive half-open index ranges ``[(start, stop), ...]`` starting at 0.

    ``num_coords``: optional P the ranges must cover.

    Raises:
        ValueError: if the ranges leave gaps, overlap, are empty or do not cover ``num_coords``.
    """
    sizes, pos = [], 0
    for start, stop in ranges:
        if start != pos or stop <= start:
            raise ValueError(f"ranges must be consecutive, non-empty and start at 0; got {list(ranges)!r}")
        sizes.append(stop - start)
        pos = stop
    if num_coords is not None and pos != num_coords:
        raise ValueError(f"ranges cover {pos} coordinates, expected {num_coords}")
    return sizes


def draw_block_mask(num_blocks: int, p, generator: GeneratorLike, batch_shape: Sequence[int] = ()) -> Tensor:
    """Block keep-indicators m^(b) ~ Bernoulli(p), independent across blocks (eq. 2), float64 [*batch_shape, B].

    Args:
        num_blocks: B.
        p: keep probability in (0, 1].
        generator: ``torch.Generator`` or integer seed.
        batch_shape: leading shape for many independent masks (e.g. ``(K_c,)`` or ``(n_draws, K_c)``).

    Raises:
        ValueError: if ``p`` is outside (0, 1] (before drawing).
    """
    pf = check_keep_probability(p)
    g = as_generator(generator)
    u = torch.rand(*batch_shape, int(num_blocks), generator=g, dtype=torch.float64)
    return (u < pf).to(torch.float64)


def expand_block_mask(mask_B: Tensor, block_sizes: Sequence[int]) -> Tensor:
    """Repeat each block's indicator over its coordinates: shape [..., B] -> [..., P]."""
    sizes = torch.as_tensor([int(s) for s in block_sizes])
    if mask_B.shape[-1] != sizes.numel():
        raise ValueError(f"mask has {mask_B.shape[-1]} blocks but block_sizes lists {sizes.numel()}")
    return torch.repeat_interleave(mask_B, sizes, dim=-1)


def apply_block_mask(delta_P: Tensor, block_sizes: Sequence[int], mask_B: Tensor, p) -> Tensor:
    """Masked update Δ̃^(b) = m^(b) Δ^(b) / p (eq. 2), shape [..., P], dtype of ``delta_P``.

    Args:
        delta_P: update Δ, shape [..., P] (parameter units).
        block_sizes: sizes of the B consecutive blocks, summing to P.
        mask_B: 0/1 block indicators, shape [..., B] or [B] (broadcast).
        p: keep probability in (0, 1].

    Raises:
        ValueError: on a bad ``p`` or when the partition does not match P.
    """
    pf = check_keep_probability(p)
    sizes = [int(s) for s in block_sizes]
    if sum(sizes) != delta_P.shape[-1]:
        raise ValueError(f"block_sizes sum to {sum(sizes)} but the update has P = {delta_P.shape[-1]} coordinates")
    m = expand_block_mask(torch.as_tensor(mask_B, dtype=delta_P.dtype), sizes)
    return delta_P * m / pf


def mask_cohort(deltas_KxP, block_sizes: Sequence[int], p, mode: str, generator: GeneratorLike,
                return_mask: bool = False):
    """Mask every client update of a FedAvg cohort, independently or with one shared mask.

    Args:
        deltas_KxP: client updates Δ_k, shape [K_c, P] (or [N, K_c, P] for N rounds at once).
        block_sizes: sizes of the B blocks, summing to P.
        p: keep probability in (0, 1].
        mode: ``"independent"`` (a mask per client, Prop. 2) or ``"shared"`` (one mask per round
            for all clients, as if each seeded its generator with the same round seed, Prop. 3).
        generator: ``torch.Generator`` or integer seed.
        return_mask: also return the block masks, shape [..., K_c, B].

    Returns:
        Masked updates Δ̃_k, shaped like ``deltas_KxP`` (and the mask if asked).

    Raises:
        ValueError: on a bad ``p`` or ``mode`` (before any draw).
    """
    check_keep_probability(p)
    _check_mode(mode)
    d = torch.as_tensor(deltas_KxP)
    if d.ndim < 2:
        raise ValueError(f"deltas_KxP must have shape [K_c, P] or [N, K_c, P]; got {tuple(d.shape)}")
    lead, k = tuple(d.shape[:-2]), d.shape[-2]
    b = len(block_sizes)
    if mode == "independent":
        mask = draw_block_mask(b, p, generator, batch_shape=(*lead, k))
    else:
        mask = draw_block_mask(b, p, generator, batch_shape=(*lead, 1)).expand(*lead, k, b)
    out = apply_block_mask(d, block_sizes, mask, p)
    return (out, mask) if return_mask else out


def mask_params(update, p, generator: GeneratorLike, granularity: str = "tensor", mask_B: Tensor | None = None):
    """Mask one client's update, a list/dict of parameter tensors (eq. 2); returns the same container and shapes.

    Args:
        update: list/tuple or dict of tensors, one per parameter.
        p: keep probability in (0, 1].
        generator: ``torch.Generator`` or integer seed; two clients passing the same seed get the
            same mask (the shared mode of Prop. 3).
        granularity: ``"tensor"`` or ``"channel"`` (:func:`block_sizes_of`).
        mask_B: optional precomputed 0/1 mask [B]; then no draw is made.

    Raises:
        ValueError: on a bad ``p`` or ``granularity``, or a mask of the wrong length.
    """
    pf = check_keep_probability(p)
    sizes = block_sizes_of(update, granularity)
    if mask_B is None:
        mask_B = draw_block_mask(len(sizes), pf, generator)
    elif mask_B.shape != (len(sizes),):
        raise ValueError(f"mask_B must have shape [{len(sizes)}]; got {tuple(mask_B.shape)}")
    flat = flatten_params(update)
    masked = apply_block_mask(flat, sizes, mask_B.to(flat.dtype), pf)
    return unflatten_params(masked, update)
