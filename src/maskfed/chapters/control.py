"""What ``notebooks/control_identical_shards.md`` shows: the control whose answer is known.

Every client of the cohort holds the same shard and shuffles it with the same seed, so
Δ_1 = … = Δ_{K_c} and 1/Δ_S = ‖K_c Δ‖² / (K_c ‖Δ‖²) = K_c in both conventions (eq. 3 and 8, the
Cauchy-Schwarz ceiling), σ̂² = 0 (eq. 14). :func:`findings` runs (or reuses) the profile's
``control`` experiment (:func:`maskfed.studies.experiments.run`), measures the largest relative
deviations from that answer (:func:`maskfed.analysis.summary.control_deviations`) and fails when
any is not below the tolerance (:func:`check`), so a broken measurement fails the book build.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from maskfed import book
from maskfed.analysis import summary
from maskfed.engine.config import Profile, load_profile
from maskfed.studies import experiments

#: Relative size of the difference between two clients' updates that the tolerance must catch:
#: 0.1 % in a direction orthogonal to the update moves 1/Δ_S by ε² (1/K_c − 1/K_c²) of K_c.
PERTURBATION = 1e-3

#: Cell formats of :func:`table_last_rounds` (for :func:`maskfed.book.styled`): the deviations in
#: scientific notation (their order of magnitude is the point), the training loss to 3 decimals.
LAST_ROUNDS_FORMATS = {**{c: book.scientific for c in ("dev_unweighted", "dev_weighted", "sigma2_rel", "update_spread")},
                       "train_loss": "{:.3f}"}


class ControlFailed(AssertionError):
    """The control's measurement is not within its tolerance of the exact answer."""


@dataclass(frozen=True)
class Findings:
    """The chapter's values.

    Attributes:
        values: glue name -> number or short text (:func:`maskfed.book.glue_numbers`).
        profile: the profile the control ran under (for the banner).
        metrics: every control run's metrics.csv, with a ``seed`` column, one row per round.
        k_c: the cohort size K_c, the exact answer.
    """

    values: dict
    profile: Profile
    metrics: pd.DataFrame
    k_c: int


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             tolerance: float | None = None) -> Findings:
    """Run (or reuse) the control experiment of ``profile`` and check it against its exact answer.

    Args:
        profile: the run profile's name; data_path, overrides: as :func:`maskfed.engine.config.load_profile`.
        workers: worker processes (None: the profile's).
        tolerance: relative tolerance; None: the largest of the runs' devices'
            (:func:`maskfed.analysis.summary.control_tolerance`: 1e-12 on CPU, 1e-9 on CUDA).

    Raises:
        ControlFailed: a deviation is not below the tolerance, or the tolerance would let through
            the :data:`PERTURBATION` case.
        ConfigError, FileNotFoundError, DataUnavailableError: as :func:`maskfed.studies.experiments.run`.
    """
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    results = experiments.run(prof, "control", workers=workers, progress=False)
    k_c = results[0].config.cohort_size
    m = pd.concat([r.metrics.assign(seed=r.config.seed) for r in results])
    devices = sorted({r.provenance["machine"]["device"] for r in results})
    tol = tolerance if tolerance is not None else max(summary.control_tolerance(d) for d in devices)
    determinism = any(r.provenance.get("determinism", {}).get("deterministic_algorithms") for r in results)
    return Findings(values=control_values(m, k_c, tol, devices, determinism), profile=prof, metrics=m, k_c=k_c)


def perturbed(k_c: int, eps: float = PERTURBATION) -> float:
    """Relative change of 1/Δ_S when one of K_c clients' updates differs from the others by a relative
    ``eps`` orthogonal to them: ε² (1/K_c − 1/K_c²) (the worst case of ``tests/test_summary.py``)."""
    return eps**2 * (1 / k_c - 1 / k_c**2)


def significant(x: float, digits: int) -> float:
    """``x`` rounded to ``digits`` significant digits, as a reader writes a deviation whose order of magnitude is
    the point (``2.2204e-16`` -> ``2.2e-16`` at 2); 0, NaN and infinities as they are."""
    return x if x == 0 or not math.isfinite(x) else round(x, digits - 1 - math.floor(math.log10(abs(x))))


def check(dev: dict, tol: float, k_c: int) -> None:
    """Fail unless every deviation of ``dev`` (:func:`maskfed.analysis.summary.control_deviations`)
    is below ``tol`` and ``tol`` is below :func:`perturbed` (``k_c``), the size it must catch.

    Raises:
        ControlFailed: naming the deviations and the tolerance.
    """
    for key in ("recovery_unweighted", "recovery_weighted", "sigma2_rel", "update_spread"):
        if not dev[key] < tol:  # a NaN deviation is no pass
            raise ControlFailed(f"control deviation {key} = {dev[key]!r} not below the tolerance {tol!r}: {dev}")
    if not tol < perturbed(k_c):
        raise ControlFailed(f"tolerance {tol!r} would let through a {PERTURBATION:.1%} difference between two "
                            f"clients (moves 1/Δ_S by {perturbed(k_c):.1e} of K_c = {k_c})")


def control_values(metrics: pd.DataFrame, k_c: int, tol: float, devices: list[str], determinism: bool) -> dict:
    """The glued values of the control, after :func:`check`.

    Args:
        metrics: the control runs' per-round metrics (columns as
            :func:`maskfed.analysis.summary.control_deviations_by_round` needs).
        k_c: the cohort size K_c (the exact 1/Δ_S).
        tol: the relative tolerance.
        devices: the runs' devices ("cpu", "cuda:0").
        determinism: whether any run had PyTorch's deterministic algorithms on.

    Returns:
        ``ctl_kc``, ``ctl_rounds`` (rows of ``metrics``), the four largest relative deviations
        (``ctl_rel_unw``, ``ctl_rel_w``, ``ctl_sigma_rel``, ``ctl_spread``; dimensionless, two significant
        digits), ``ctl_tol``, ``ctl_devices`` ("cpu and cuda:0"), ``ctl_determinism`` ("on" or "off") and
        ``ctl_perturbed`` (:func:`perturbed`, one significant digit).

    Raises:
        ControlFailed: as :func:`check`. ValueError: as ``control_deviations`` (k_c < 2, a missing column).
    """
    dev = summary.control_deviations(metrics, k_c)
    check(dev, tol, k_c)
    return {"ctl_kc": k_c, "ctl_rounds": len(metrics), "ctl_rel_unw": significant(dev["recovery_unweighted"], 2),
            "ctl_rel_w": significant(dev["recovery_weighted"], 2), "ctl_sigma_rel": significant(dev["sigma2_rel"], 2),
            "ctl_spread": significant(dev["update_spread"], 2), "ctl_tol": tol, "ctl_devices": " and ".join(devices),
            "ctl_determinism": "on" if determinism else "off", "ctl_perturbed": significant(perturbed(k_c), 1)}


def table_last_rounds(metrics: pd.DataFrame, k_c: int, n: int = 8) -> pd.DataFrame:
    """The last ``n`` rounds: seed, round, each deviation from the exact answer
    (:func:`maskfed.analysis.summary.control_deviations_by_round`), train loss and test accuracy."""
    return pd.concat([metrics[["seed", "round"]], summary.control_deviations_by_round(metrics, k_c),
                      metrics[["train_loss", "test_acc"]]], axis=1).tail(n).reset_index(drop=True)
