"""Masked FedAvg training (past the paper's limits, limitation 3): the runs and their summaries.

Builds the runs of ``notebooks/masked_training.md`` (p × mask mode × protocol × seed, cached
:mod:`maskfed.engine.runner` runs logging final sharpness and, unmasked, the Hessian-weighted recovery
factor) and summarises them (medians, seed ranges, a stated rule, ours). A book helper, not in
:data:`maskfed.provenance.RUN_MODULES`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from maskfed.core.masking import check_keep_probability
from maskfed.engine.config import ConfigError, Profile, RunConfig

#: Summary columns of the final model: name in metrics.csv -> (label, whether larger is better).
FINAL_METRICS = {"test_acc": ("test accuracy", True), "sharpness_top_eig": ("top Hessian eigenvalue", False),
                 "sharpness_trace": ("Hessian trace", False)}


@dataclass(frozen=True)
class Setting:
    """One cell of the comparison: a local protocol and a mask (p = 1: no mask, mode "none")."""

    protocol: str
    p: float
    mode: str


def settings(protocols: dict, keep_probs, modes) -> list[Setting]:
    """Every (protocol, p, mode) to run; p = 1 appears once per protocol with mode "none" (no mask to share).

    Raises:
        ValueError: a p outside (0, 1], an unknown mode, or empty inputs.
    """
    if not protocols or not keep_probs or not modes:
        raise ValueError("protocols, keep_probs and modes must each be non-empty")
    for m in modes:
        if m not in ("independent", "shared"):
            raise ValueError(f"modes must be among 'independent', 'shared'; got {m!r}")
    ps = [check_keep_probability(p) for p in keep_probs]
    out = []
    for name in protocols:
        for p in ps:
            out += [Setting(name, 1.0, "none")] if p == 1.0 else [Setting(name, p, m) for m in modes]
    return list(dict.fromkeys(out))


def configs(profile: Profile, protocols: dict, keep_probs, modes, *, sharpness_iters: int, hessian_every: int,
            hessian_batch: int, **fields) -> dict[tuple[Setting, int], RunConfig]:
    """The run configuration of every (setting, seed); ``fields`` replace the profile's base (e.g. rounds).

    Unmasked runs log the Hessian-weighted recovery factor every ``hessian_every`` rounds (0: never); all
    measure final sharpness (``sharpness_iters`` power iterations, Hutchinson probes on ``hessian_batch`` images).

    Raises:
        ValueError / ConfigError: as :func:`settings` and :meth:`maskfed.engine.config.Profile.run`.
    """
    out = {}
    for s in settings(protocols, keep_probs, modes):
        bs, tau = protocols[s.protocol]
        mask = {} if s.p == 1.0 else {"mask_keep_prob": s.p, "mask_mode": s.mode}
        hess = {"hessian_every": hessian_every} if s.p == 1.0 else {}
        for seed in profile.seeds:
            out[(s, seed)] = profile.run(seed, batch_size=bs, local_epochs=tau, sharpness_iters=sharpness_iters,
                                         hessian_batch=hessian_batch, **mask, **hess, **fields)
    return out


#: RunConfig fields the masked-training experiment sets for its runs (a user's value for one is refused).
SETS = ("batch_size", "local_epochs", "mask_keep_prob", "mask_mode", "sharpness_iters", "hessian_batch", "hessian_every")


def profile_configs(profile: Profile) -> dict[tuple[Setting, int], RunConfig]:
    """:func:`configs` of a profile's ``masked:`` section (:class:`maskfed.engine.config.MaskedSpec`) at
    every seed, on the profile's base (its rounds, K_c, model).

    Raises:
        ConfigError: no ``masked:`` section, or the user set a field the experiment sets (:data:`SETS`).
    """
    spec = profile.masked
    if spec is None:
        raise ConfigError(f"profile {profile.name!r} defines no masked-training runs (a masked: section in its yaml); "
                          "the cpu-masked profile does: maskfed sweep --profile cpu-masked")
    clash = sorted(set(profile.overrides) & set(SETS))
    if clash:
        raise ConfigError(f"experiment masked sets {clash} for its runs (profile key masked: in "
                          f"src/maskfed/profiles/{profile.name}.yaml); a value given for them would be ignored")
    return configs(profile, spec.protocols, spec.keep_probs, spec.modes, sharpness_iters=spec.sharpness_iters,
                   hessian_every=spec.hessian_every, hessian_batch=spec.hessian_batch)


def final_table(metrics: dict[tuple[Setting, int], pd.DataFrame]) -> pd.DataFrame:
    """One row per (setting, seed): the last round's test accuracy and sharpness.

    Raises:
        KeyError: a run without the sharpness columns (run with sharpness_iters = 0).
    """
    rows = []
    for (s, seed), m in metrics.items():
        last = m.iloc[-1]
        rows.append({"protocol": s.protocol, "p": s.p, "mode": s.mode, "seed": seed,
                     **{k: float(last[k]) for k in FINAL_METRICS}})
    return pd.DataFrame(rows)


def summary(final: pd.DataFrame) -> pd.DataFrame:
    """Median, min and max across seeds of each final metric per (protocol, p, mode): columns
    ``<metric>_median``, ``<metric>_min``, ``<metric>_max`` and ``seeds``."""
    g = final.groupby(["protocol", "p", "mode"], sort=False)
    out = g.size().rename("seeds").to_frame()
    for k in FINAL_METRICS:
        out[f"{k}_median"] = g[k].median()
        out[f"{k}_min"] = g[k].min()
        out[f"{k}_max"] = g[k].max()
    return out.reset_index()


def _compare(r: pd.Series, b: pd.Series) -> list[tuple[str, float, str]]:
    """(metric label, median difference r − b, verdict) of setting ``r`` against ``b`` on every final
    metric, by the disjoint-range rule of :func:`verdicts`."""
    out = []
    for k, (label, larger_better) in FINAL_METRICS.items():
        lo, hi, blo, bhi = r[f"{k}_min"], r[f"{k}_max"], b[f"{k}_min"], b[f"{k}_max"]
        above, below = lo > bhi, hi < blo
        good, bad = (above, below) if larger_better else (below, above)
        out.append((label, r[f"{k}_median"] - b[f"{k}_median"], "better" if good else "worse" if bad else
                    "within seed spread"))
    return out


def verdicts(summ: pd.DataFrame) -> pd.DataFrame:
    """Does a mask buy accuracy or flatness over p = 1 on the same protocol? A stated rule, ours.

    "better"/"worse": the masked seed range lies wholly on the good/bad side of the unmasked range (higher
    accuracy; lower top eigenvalue or trace), else "within seed spread".

    Returns:
        One row per masked setting and metric: protocol, p, mode, metric, median difference (masked
        minus unmasked), verdict.

    Raises:
        ValueError: a protocol without its p = 1 row.
    """
    rows = []
    for _, r in summ[summ.p < 1].iterrows():
        base = summ[(summ.protocol == r.protocol) & (summ.p == 1.0)]
        if base.empty:
            raise ValueError(f"protocol {r.protocol!r} has no unmasked (p = 1) runs to compare with")
        rows += [{"protocol": r.protocol, "p": r.p, "mode": r["mode"], "metric": label, "median difference": diff,
                  "verdict": verdict} for label, diff, verdict in _compare(r, base.iloc[0])]
    return pd.DataFrame(rows)


def shared_vs_independent(summ: pd.DataFrame) -> pd.DataFrame:
    """Does a shared mask change accuracy or sharpness against independent masks at the same p and
    protocol? The rule of :func:`verdicts`.

    Returns:
        One row per (protocol, p < 1) with both modes and metric: protocol, p, metric, median
        difference (shared minus independent), verdict.
    """
    rows = []
    for (proto, p), g in summ[summ.p < 1].groupby(["protocol", "p"], sort=False):
        modes = g.set_index("mode")
        if {"shared", "independent"} <= set(modes.index):
            rows += [{"protocol": proto, "p": p, "metric": label, "median difference": diff, "verdict": verdict}
                     for label, diff, verdict in _compare(modes.loc["shared"], modes.loc["independent"])]
    return pd.DataFrame(rows, columns=["protocol", "p", "metric", "median difference", "verdict"])




def recovery_trajectory(metrics: dict[tuple[Setting, int], pd.DataFrame]) -> pd.DataFrame:
    """The rounds where the Hessian-weighted recovery factor was logged, unmasked runs only.

    Returns:
        Long table: protocol, seed, round, ``euclidean`` (1/Δ_S, eq. 3), ``hessian`` (1/Δ_S in
        ⟨·,·⟩_{H_bd}, eq. 8), unweighted, and ``gap`` = hessian − euclidean.
    """
    rows = []
    for (s, seed), m in metrics.items():
        if s.p != 1.0 or "recovery_hessian_unweighted" not in m:
            continue
        logged = m[np.isfinite(m["recovery_hessian_unweighted"])]
        for _, r in logged.iterrows():
            rows.append({"protocol": s.protocol, "seed": seed, "round": int(r["round"]),
                         "euclidean": float(r["recovery_unweighted"]),
                         "hessian": float(r["recovery_hessian_unweighted"])})
    out = pd.DataFrame(rows, columns=["protocol", "seed", "round", "euclidean", "hessian"])
    out["gap"] = out["hessian"] - out["euclidean"]
    return out
