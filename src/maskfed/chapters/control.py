"""What ``notebooks/control_identical_shards.md`` shows: the control whose answer is known.

Every client holds the same shard with the same seed, so 1/Δ_S = K_c in both conventions (eq. 3, 8) and
σ̂² = 0 (eq. 14); :func:`findings` fails when a deviation is not below the tolerance (:func:`check`)."""

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
    """``values`` (glue names), the profile, every run's metrics.csv (with ``seed``) and K_c."""

    values: dict
    profile: Profile
    metrics: pd.DataFrame
    k_c: int


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             tolerance: float | None = None) -> Findings:
    """Run (or reuse) the control experiment of ``profile`` and check it against its exact answer;
    ``tolerance`` None: the largest of the runs' devices' (:func:`maskfed.analysis.summary.control_tolerance`).

    Raises:
        ControlFailed: as :func:`check`. ConfigError, FileNotFoundError, DataUnavailableError: as the runs."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    results = experiments.run(prof, "control", workers=workers, progress=not book.IN_BOOK_BUILD)
    k_c = results[0].config.cohort_size
    m = pd.concat([r.metrics.assign(seed=r.config.seed) for r in results])
    devices = sorted({r.provenance["machine"]["device"] for r in results})
    tol = tolerance if tolerance is not None else max(summary.control_tolerance(d) for d in devices)
    determinism = any(r.provenance.get("determinism", {}).get("deterministic_algorithms") for r in results)
    return Findings(values=control_values(m, k_c, tol, devices, determinism), profile=prof, metrics=m, k_c=k_c)


def perturbed(k_c: int, eps: float = PERTURBATION) -> float:
    """Relative change of 1/Δ_S when one of K_c updates differs by a relative ``eps`` orthogonal to the
    others: ε² (1/K_c − 1/K_c²)."""
    return eps**2 * (1 / k_c - 1 / k_c**2)


def significant(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits; 0, NaN and infinities as they are."""
    return x if x == 0 or not math.isfinite(x) else round(x, digits - 1 - math.floor(math.log10(abs(x))))


def check(dev: dict, tol: float, k_c: int) -> None:
    """Fail unless every deviation of ``dev`` is below ``tol`` and ``tol`` below :func:`perturbed`.

    Raises:
        ControlFailed: naming the deviations and the tolerance."""
    for key in ("recovery_unweighted", "recovery_weighted", "sigma2_rel", "update_spread"):
        if not dev[key] < tol:  # a NaN deviation is no pass
            raise ControlFailed(f"control deviation {key} = {dev[key]!r} not below the tolerance {tol!r}: {dev}")
    if not tol < perturbed(k_c):
        raise ControlFailed(f"tolerance {tol!r} would let through a {PERTURBATION:.1%} difference between two "
                            f"clients (moves 1/Δ_S by {perturbed(k_c):.1e} of K_c = {k_c})")


def control_values(metrics: pd.DataFrame, k_c: int, tol: float, devices: list[str], determinism: bool) -> dict:
    """The glued values (``ctl_...``) after :func:`check`; deviations to two significant digits.

    Raises:
        ControlFailed: as :func:`check`. ValueError: as ``control_deviations``."""
    dev = summary.control_deviations(metrics, k_c)
    check(dev, tol, k_c)
    return {"ctl_kc": k_c, "ctl_rounds": len(metrics), "ctl_rel_unw": significant(dev["recovery_unweighted"], 2),
            "ctl_rel_w": significant(dev["recovery_weighted"], 2), "ctl_sigma_rel": significant(dev["sigma2_rel"], 2),
            "ctl_spread": significant(dev["update_spread"], 2), "ctl_tol": tol, "ctl_devices": " and ".join(devices),
            "ctl_determinism": "on" if determinism else "off", "ctl_perturbed": significant(perturbed(k_c), 1)}


def table_last_rounds(metrics: pd.DataFrame, k_c: int, n: int = 8) -> pd.DataFrame:
    """The last ``n`` rounds: seed, round, each deviation, train loss and test accuracy."""
    return pd.concat([metrics[["seed", "round"]], summary.control_deviations_by_round(metrics, k_c),
                      metrics[["train_loss", "test_acc"]]], axis=1).tail(n).reset_index(drop=True)
