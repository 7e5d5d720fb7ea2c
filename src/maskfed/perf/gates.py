"""The device check's correctness gates: each compares what it measured with a stated tolerance.

Gates are pure functions of the numbers they judge, so a test can feed a perturbed cohort;
:mod:`maskfed.perf.devicecheck` computes the inputs on the device.

- **control** (:func:`control_gates`): :func:`maskfed.analysis.summary.control_deviations` at
  :func:`maskfed.analysis.summary.control_tolerance`, one gate per criterion and engine.
- **engines**, **chunking** (:func:`agreement_gate` at :data:`ENGINE_RTOL`): batched (or micro-batched)
  Δ_k equal sequential Δ_k in float64 (~1e-14 left; 6e-15 measured on ResNet-18-GN, CPU): only a logic
  error fails it.
- **precision** (:func:`precision_gates` at :data:`PRECISION_RTOL`, :data:`RECOVERY_RTOL`): fp32 vs
  float64 after one full-batch step (float32 rounding grows to ~1e-2 after 7 steps); tf32/bf16 vs fp32
  after several steps (bs 32, τ 1, α = 0.1) on Δ_k and 1/Δ_S, so bf16 leaking into the updates shows
  (autocasting a whole client loop reuses stale bf16 weight copies: Δ_k off by 44 % to 156 %).

``make device-check``'s exit status names the failed gates (:func:`exit_status`); ``summary.json``
lists each with value and tolerance (:func:`failures`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from maskfed.analysis import summary

#: Relative tolerance of the float64 comparisons of two ways to compute the same Δ_k (engines,
#: micro-batching). Float64 rounding gives about 1e-14 (6e-15 measured for ResNet-18-GN, 1e-15 for
#: the small CNN, both on the CPU); a mistake in the batching (a wrong batch, padding that leaks,
#: another shuffle) changes an update by far more than 1e-6. Ours.
ENGINE_RTOL = {"float64": 1e-6}

#: Relative tolerance of each precision's Δ_k against its reference (fp32: float64, one full-batch
#: step; tf32, bf16: fp32, same engine, bs 32, τ 1) and between the engines. Measured on the CPU:
#: fp32 3e-6 (small CNN), 1.4e-4 (ResNet-18-GN); bf16 1.4e-2 to 1.1e-1 from fp32, 1.6e-2 to 4.9e-2
#: between engines (2 to 10 steps); whole-loop autocast 0.44 to 1.56. tf32 gets bf16's, unmeasured.
#: Ours: ~7× the fp32 readings, ~2× the largest bf16 one, below the whole-loop autocast's.
PRECISION_RTOL = {"fp32": 1e-3, "tf32": 0.25, "bf16": 0.25}
#: Relative tolerance of the cohort's recovery factor 1/Δ_S (unweighted) in tf32 and bf16 against
#: fp32 and between engines. Measured on the CPU (the same cases): bf16 moved it by 1.5e-3 to 1.1e-2;
#: the whole-loop autocast by 0.10 to 0.32. Ours: about 2 above the largest bf16 reading.
RECOVERY_RTOL = {"tf32": 0.02, "bf16": 0.02}

#: Bit of the exit status per gate kind: the status is the OR of the failed kinds' bits (0: all
#: passed; 1 and 2 stay Python's crash and the check's usage error).
EXIT_BITS = {"control": 4, "engines": 8, "chunking": 16, "precision": 32}


@dataclass
class Gate:
    """One gate's verdict.

    Attributes:
        kind: one of :data:`EXIT_BITS`.
        value: the measured deviation (dimensionless, relative).
        ok: value <= tolerance (a NaN never passes).
        required: a failure fails the check; False: it only withholds that precision's figures (tf32, bf16).
    """

    kind: str
    name: str
    value: float
    tolerance: float
    ok: bool
    required: bool = True
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _gate(kind: str, name: str, value: float, tolerance: float, required: bool = True, **detail) -> Gate:
    if kind not in EXIT_BITS:
        raise ValueError(f"kind must be one of {list(EXIT_BITS)}; got {kind!r}")
    value = float(value)
    return Gate(kind, name, value, float(tolerance), bool(value <= tolerance), required, detail)  # NaN <= t is False


def max_relative_difference(a_KxP: torch.Tensor, b_KxP: torch.Tensor) -> float:
    """max_k ‖a_k − b_k‖ / ‖b_k‖ over the rows (clients), in float64 (dimensionless).

    Raises:
        ValueError: shapes differ.
    """
    if a_KxP.shape != b_KxP.shape:
        raise ValueError(f"a_KxP and b_KxP must have the same shape; got {tuple(a_KxP.shape)} and {tuple(b_KxP.shape)}")
    a, b = a_KxP.detach().to(torch.float64).cpu(), b_KxP.detach().to(torch.float64).cpu()
    return float(((a - b).norm(dim=1) / b.norm(dim=1)).max())


def control_gates(metrics: pd.DataFrame | list[dict], k_c: int, device: str, engine: str) -> list[Gate]:
    """The control's gates at :func:`maskfed.analysis.summary.control_tolerance` (1e-12 CPU, 1e-9 CUDA).

    Returns:
        Four gates: recovery_unweighted, recovery_weighted (|1/Δ_S / K_c − 1|), sigma2_rel
        (|σ̂²| / A) and update_spread (max_k ‖Δ_k − Δ_1‖ / ‖Δ_1‖), worst round of each.
    """
    worst = summary.control_deviations(pd.DataFrame(metrics), k_c)
    tol = summary.control_tolerance(device)
    rounds = len(pd.DataFrame(metrics))
    return [_gate("control", f"control {name} ({engine})", value, tol, engine=engine, rounds=rounds, k_c=int(k_c))
            for name, value in worst.items()]


def agreement_gate(kind: str, name: str, a_KxP: torch.Tensor, b_KxP: torch.Tensor, tolerance: float,
                   required: bool = True, **detail) -> Gate:
    """Two computations of the same Δ_k agree: :func:`max_relative_difference` ≤ ``tolerance``."""
    return _gate(kind, name, max_relative_difference(a_KxP, b_KxP), tolerance, required, **detail)


def recovery_difference(a_KxP: torch.Tensor, b_KxP: torch.Tensor, n_K) -> float:
    """|1/Δ_S(a) / 1/Δ_S(b) − 1| of two stacks of the same cohort's updates (unweighted, eq. 3)."""
    from maskfed.engine.fedavg import round_metrics

    return abs(round_metrics(a_KxP, n_K)["recovery_unweighted"] / round_metrics(b_KxP, n_K)["recovery_unweighted"] - 1)


def precision_gates(precision: str, deltas: dict[tuple[str, str], torch.Tensor], n_K, required: bool) -> list[Gate]:
    """The gates of one precision, from the same cohort's local training in several settings.

    ``deltas``: Δ_k stacks keyed by (precision, engine), "float64" included; must hold both engines at
    ``precision`` and at the reference (float64 for fp32, else fp32).

    Returns:
        Per engine: Δ_k vs the reference; batched vs sequential (at :data:`PRECISION_RTOL`); for tf32
        and bf16 the same comparisons of 1/Δ_S at :data:`RECOVERY_RTOL`.

    Raises:
        ValueError: an unknown precision or a missing stack.
    """
    if precision not in PRECISION_RTOL:
        raise ValueError(f"precision must be one of {list(PRECISION_RTOL)}; got {precision!r}")
    ref = "float64" if precision == "fp32" else "fp32"
    need = [(precision, "sequential"), (precision, "batched"), (ref, "sequential"), (ref, "batched")]
    missing = [k for k in need if k not in deltas]
    if missing:
        raise ValueError(f"deltas lacks {missing}")
    pairs = [(f"{precision} vs {ref} ({e})", deltas[precision, e], deltas[ref, e], {"engine": e})
             for e in ("sequential", "batched")]
    pairs.append((f"{precision}: batched vs sequential", deltas[precision, "batched"], deltas[precision, "sequential"],
                  {}))
    tol = PRECISION_RTOL[precision]
    out = [agreement_gate("precision", f"Δ_k {name}", a, b, tol, required, precision=precision, **d)
           for name, a, b, d in pairs]
    if precision in RECOVERY_RTOL:
        out += [_gate("precision", f"1/Δ_S {name}", recovery_difference(a, b, n_K), RECOVERY_RTOL[precision],
                      required, precision=precision, **d) for name, a, b, d in pairs]
    return out


def failures(gates: list[Gate]) -> list[dict]:
    """The failed gates, each as ``{kind, name, value, tolerance, times_tolerance, required}``."""
    return [{"kind": g.kind, "name": g.name, "value": g.value, "tolerance": g.tolerance,
             "times_tolerance": g.value / g.tolerance if g.tolerance else float("inf"), "required": g.required}
            for g in gates if not g.ok]


def exit_status(gates: list[Gate]) -> int:
    """0 when every required gate passed, else the OR of :data:`EXIT_BITS` of the failed kinds
    (e.g. 4: the control failed; 12: the control and the engines)."""
    status = 0
    for g in gates:
        if g.required and not g.ok:
            status |= EXIT_BITS[g.kind]
    return status


def passed(gates: list[Gate], precision: str) -> bool:
    """Whether every precision gate of ``precision`` passed (its figures may be reported)."""
    mine = [g for g in gates if g.kind == "precision" and g.detail.get("precision") == precision]
    return bool(mine) and all(g.ok for g in mine)
