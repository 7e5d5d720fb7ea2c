"""Sharpness of a trained model: the top Hessian eigenvalue and the Hessian trace, by Hessian-vector products.

Both use only products H v, no [P, P] matrix: :func:`top_eigenvalue` by power iteration (Golub &
Van Loan, *Matrix Computations*, §7.3; used for sharpness by e.g. Yao et al. 2020, PyHessian) and
:func:`hutchinson_trace`, tr H ≈ mean_i z_iᵀ H z_i over Rademacher probes (Hutchinson 1990), with its
standard error. :func:`model_hessian` builds the operator for a network's mean cross-entropy on a
fixed batch. Randomness enters only through an explicit ``torch.Generator``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils import vector_to_parameters

from maskfed.core import penalty

Tensor = torch.Tensor
HVP = Callable[[Tensor], Tensor]  # v [P] float64 -> H v [P] float64


def model_hessian(model: nn.Module, theta_P: Tensor, x: Tensor, y: Tensor) -> penalty.HVPBlockHessian:
    """Hessian operator of ``model``'s mean cross-entropy (nats) at θ on the batch (x, y).

    ``.hvp(v)`` applies the full Hessian; calling the object applies its block-diagonal part (one
    block per parameter tensor, the paper's blocks). Overwrites the parameters with ``theta_P`` [P]
    (scratch) and puts the model in eval mode.

    Args:
        x: inputs [n, 3, 32, 32]; y: integer labels [n].
    """
    vector_to_parameters(theta_P.detach().to(next(model.parameters()).dtype).clone(), model.parameters())
    model.eval()
    return penalty.HVPBlockHessian(lambda: nn.functional.cross_entropy(model(x), y), list(model.parameters()))


def _check_count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    return value


def top_eigenvalue(hvp: HVP, num_coords: int, *, iters: int, generator: torch.Generator) -> float:
    """Largest-magnitude Hessian eigenvalue by power iteration on Hessian-vector products.

    Returns the Rayleigh quotient vᵀ H v of the last normalised iterate, started from a Gaussian
    vector. At a trained network the positive top eigenvalue dominates, so this is the usual
    sharpness λ_max (nats per parameter unit²).

    Args:
        hvp: v [P] float64 -> H v [P] float64.
        num_coords: P.
        iters: power iterations (>= 1); the error shrinks like (|λ_2| / |λ_1|)^iters.
        generator: CPU generator for the start vector.

    Raises:
        ValueError: ``num_coords`` or ``iters`` not a positive integer.
    """
    _check_count("num_coords", num_coords)
    _check_count("iters", iters)
    v = torch.randn(num_coords, generator=generator, dtype=torch.float64)
    v /= torch.linalg.vector_norm(v)
    lam = 0.0
    for _ in range(iters):
        hv = hvp(v)
        lam = float(v @ hv)
        norm = float(torch.linalg.vector_norm(hv))
        if norm == 0.0:
            return 0.0
        v = hv / norm
    return float(v @ hvp(v))


@dataclass(frozen=True)
class TraceEstimate:
    """Hutchinson estimate of tr H: ``mean`` and its standard error ``se`` over ``probes`` probes."""

    mean: float
    se: float
    probes: int


def hutchinson_trace(hvp: HVP, num_coords: int, *, probes: int, generator: torch.Generator) -> TraceEstimate:
    """Hutchinson's estimate tr H ≈ (1/N) Σ_i z_iᵀ H z_i, z_i Rademacher (±1), with its standard error.

    Unbiased for any symmetric H; exact for a diagonal H with a single probe.

    Args:
        hvp: v [P] float64 -> H v [P] float64.
        num_coords: P.
        probes: N >= 1 (the standard error is NaN for N = 1).
        generator: CPU generator for the probes.

    Raises:
        ValueError: ``num_coords`` or ``probes`` not a positive integer.
    """
    _check_count("num_coords", num_coords)
    _check_count("probes", probes)
    vals = []
    for _ in range(probes):
        z = torch.randint(0, 2, (num_coords,), generator=generator, dtype=torch.int64).to(torch.float64) * 2 - 1
        vals.append(float(z @ hvp(z)))
    t = torch.tensor(vals, dtype=torch.float64)
    se = float(t.std(unbiased=True) / math.sqrt(probes)) if probes > 1 else float("nan")
    return TraceEstimate(mean=float(t.mean()), se=se, probes=probes)
