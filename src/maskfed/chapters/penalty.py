"""Findings of the chapter "The measured penalty and the Hessian-weighted recovery factor"
(``notebooks/limit_penalty.md``).

The chapter tests two limitations the paper names and leaves open (Yan et al. 2026): the masking penalty
is a second-order expansion (Prop. 1-3, eq. 4-7), and Corollary 1 (eq. 8) makes
R_shr / R_ind = 1/Δ_S only in the block-diagonal Hessian norm, while the paper reports 1/Δ_S in the
Euclidean one. For the cohorts of a few FedAvg rounds and two local protocols,
:func:`maskfed.derivation.limits.measure_limits` measures the excess loss under independent and
shared block masks by Monte Carlo, predicts R_ind (eq. 6) and R_shr (eq. 7) by block Hessian-vector
products, and gives 1/Δ_S in both norms. :func:`findings` gathers the chapter's glued values and
frames from that table; the ``table_...`` and ``figure_...`` functions give what it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from maskfed.book import plots
from maskfed.derivation import limits, theory
from maskfed.engine.config import load_profile, Profile, RunConfig
from maskfed.engine.models import build_model

#: The penalty table's columns, renamed for the page, in the order shown (independent masks, then shared).
PENALTY_COLUMNS = {"r_ind": "R_ind (eq. 6)", "excess_ind": "measured, ind.", "excess_ind_se": "SE ind.",
                   "miss_ind": "miss ind.", "r_shr": "R_shr (eq. 7)", "excess_shr": "measured, shr.",
                   "excess_shr_se": "SE shr.", "miss_shr": "miss shr."}

#: The columns :func:`maskfed.book.fitted` keeps in the page's table (the independent masks').
PENALTY_MAIN = ["R_ind (eq. 6)", "measured, ind.", "SE ind.", "miss ind."]

#: Number formats of the penalty table: 3 significant digits; the misses as signed percentages.
PENALTY_FORMATS = {c: "{:.3g}" for c in PENALTY_COLUMNS.values()} | {"miss ind.": "{:+.0%}", "miss shr.": "{:+.0%}"}


@dataclass(frozen=True)
class Findings:
    """What the chapter shows: ``values`` maps each glue name (``lp_...``) to a number or a short word;
    the rest are the frames and settings the table and the figures are drawn from."""

    values: dict
    profile: Profile        # the loaded profile (for the banner)
    cfg: RunConfig          # the trajectory's configuration (the profile's first seed)
    table: pd.DataFrame     # measure_limits with second_order_error: one row per (round, protocol)
    cases: pd.DataFrame     # cases_table: one row per (round, protocol, mask mode)
    protocols: dict         # name -> (batch size, τ), the defaults filled in
    n_se: float             # standard errors within which a prediction holds


def settings(profile: str, *, at_rounds=None, protocols=None, train_protocol=None, n_draws=None,
             eval_size=None) -> dict:
    """The chapter's settings with its defaults filled in for ``profile``: protocols full batch and a
    minibatch one (:func:`maskfed.derivation.limits.default_protocols`), the last of them training the
    trajectory, rounds [0, 1] / [0, 3] / [0, 10, 50], 8 / 64 / 400 mask draws and evaluation batches of
    64 / 128 / 1024 images at smoke / cpu / paper (:func:`maskfed.derivation.theory.profile_value`).

    Raises:
        ValueError: unknown profile.
    """
    protocols = limits.default_protocols(profile) if protocols is None else protocols
    return {"protocols": protocols,
            "train_protocol": list(protocols)[-1] if train_protocol is None else train_protocol,
            "at_rounds": theory.profile_value(profile, smoke=[0, 1], cpu=[0, 3], paper=[0, 10, 50])
            if at_rounds is None else at_rounds,
            "n_draws": theory.profile_value(profile, smoke=8, cpu=64, paper=400) if n_draws is None else n_draws,
            "eval_size": theory.profile_value(profile, smoke=64, cpu=128, paper=1024) if eval_size is None else eval_size}


def cases_table(table: pd.DataFrame, n_se: float) -> pd.DataFrame:
    """One row per (cohort, mask mode) of the limits table.

    Args:
        table: :func:`maskfed.derivation.limits.second_order_error` of a limits table (``round``,
            ``protocol``, ``T``, ``excess_<m>``, ``excess_<m>_se``, ``r_<m>``, ``miss_<m>``, ``miss_<m>_se``
            for m in ind, shr; excess and R in nats, misses as fractions).
        n_se: standard errors within which the prediction holds (:func:`maskfed.derivation.limits.within_se`).

    Returns:
        Columns round, protocol, mode ("independent" / "shared"), T, measured, se, predicted, miss,
        miss_se and holds (bool).
    """
    cases = []
    for _, row in table.iterrows():
        for mode, name in (("ind", "independent"), ("shr", "shared")):
            cases.append({"round": int(row["round"]), "protocol": row["protocol"], "mode": name, "T": row["T"],
                          "measured": row[f"excess_{mode}"], "se": row[f"excess_{mode}_se"],
                          "predicted": row[f"r_{mode}"], "miss": row[f"miss_{mode}"], "miss_se": row[f"miss_{mode}_se"]})
    cases = pd.DataFrame(cases)
    cases["holds"] = [limits.within_se(m, s, r, n_se) for m, s, r in zip(cases.measured, cases.se, cases.predicted)]
    return cases


def jump(p: float) -> float:
    """How far a masked aggregate lies from θ − Δ̄ at most, in units of a block's own length: a kept block
    (scaled by 1/p) moves by 1/p − 1 of it, a dropped one by all of it (eq. 2 with keep probability p)."""
    return max(1 / p - 1, 1.0)


def norm_values(table: pd.DataFrame) -> dict:
    """The two-norm comparison: per cohort, the gaps |measured ratio − 1/Δ_S| in the block-Hessian norm and in
    the Euclidean one (dimensionless, their means to 2 decimals), and the relative gap between the two norms'
    1/Δ_S (whole percent), rounded as the page writes them.

    Returns:
        ``lp_n_cohorts``, ``lp_closer_h`` (cohorts where the block-Hessian factor is the closer),
        ``lp_norm_gap_max_pct``, ``lp_norm_gap_mean_pct``, ``lp_gap_h_mean``, ``lp_gap_e_mean``.
    """
    gap_h = (table.ratio_measured - table.recovery_h).abs()
    gap_e = (table.ratio_measured - table.recovery_euclid).abs()
    norm_gap = (table.recovery_h / table.recovery_euclid - 1).abs()
    return {"lp_n_cohorts": len(table), "lp_closer_h": int((gap_h < gap_e).sum()),
            "lp_norm_gap_max_pct": round(100 * float(norm_gap.max())),
            "lp_norm_gap_mean_pct": round(100 * float(norm_gap.mean())),
            "lp_gap_h_mean": round(float(gap_h.mean()), 2), "lp_gap_e_mean": round(float(gap_e.mean()), 2)}


def findings(profile: str, *, data_path=None, overrides: dict | None = None, at_rounds=None, protocols=None,
             train_protocol=None, p: float = 0.5, n_draws=None, eval_size=None, granularity: str = "tensor",
             n_se: float = 3.0) -> Findings:
    """The chapter's findings, from its parameters (see the chapter's parameters cell for each; None
    takes the defaults of :func:`settings`).

    Measures (or reads from the cache) :func:`maskfed.derivation.limits.measure_limits` on the profile's
    first seed, with :func:`maskfed.derivation.limits.second_order_error`; minutes at the cpu profile.

    Returns:
        :class:`Findings`; its ``values`` hold the settings shown (with :func:`jump` and the network's
        piecewise-linear layer kinds, "none" if it has none), how many cases hold within ``n_se``
        standard errors, the largest relative miss (whole percent) and where, and :func:`norm_values`.

    Raises:
        ValueError: a block-Hessian penalty R_ind or R_shr is not positive (eq. 6-7 need positive
            curvature along the update here), or unknown profile.
    """
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    cfg = prof.run(prof.seeds[0])
    s = settings(profile, at_rounds=at_rounds, protocols=protocols, train_protocol=train_protocol, n_draws=n_draws,
                 eval_size=eval_size)
    table = limits.measure_limits(cfg, at_rounds=s["at_rounds"], protocols=s["protocols"],
                                  train_protocol=s["train_protocol"], p=p, n_draws=s["n_draws"],
                                  eval_size=s["eval_size"], granularity=granularity)
    table = limits.second_order_error(table)
    if not ((table.r_ind > 0).all() and (table.r_shr > 0).all()):
        raise ValueError("the block Hessian penalties must be positive here")
    cases = cases_table(table, n_se)
    worst = cases.loc[cases.miss.abs().idxmax()]
    by_protocol = cases.groupby("protocol").apply(lambda g: float(g.miss.abs().max()), include_groups=False)
    full_name, mini_name = list(s["protocols"])[0], list(s["protocols"])[-1]
    model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width)
    kinks = limits.piecewise_linear_parts(model)
    # percentages as whole numbers, the way the page writes them
    values = {
        "lp_kc": cfg.cohort_size, "lp_train": s["train_protocol"], "lp_draws": s["n_draws"],
        "lp_eval": s["eval_size"], "lp_p": p, "lp_inv_p": 1 / p, "lp_jump": jump(p),
        "lp_model": cfg.model, "lp_kinks": " and ".join(kinks) if kinks else "none",
        "lp_n_se": n_se, "lp_cases": len(cases), "lp_holds": int(cases.holds.sum()),
        "lp_worst_pct": round(100 * float(worst.miss)), "lp_worst_se_pct": round(100 * float(worst.miss_se)),
        "lp_worst_mode": worst["mode"], "lp_worst_protocol": worst["protocol"], "lp_worst_round": int(worst["round"]),
        "lp_rel_se_median_pct": round(100 * float(cases.miss_se.median())),
        "lp_n_above": int((cases.miss > 0).sum()),
        "lp_full_name": full_name, "lp_mini_name": mini_name,
        "lp_full_maxmiss_pct": round(100 * by_protocol[full_name]),
        "lp_mini_maxmiss_pct": round(100 * by_protocol[mini_name]),
    } | norm_values(table)
    return Findings(values, prof, cfg, table, cases, s["protocols"], n_se)


def table_penalty(f: Findings) -> pd.DataFrame:
    """Measured against predicted penalty per cohort: index (t, protocol, T: mean local steps); the columns
    of :data:`PENALTY_COLUMNS` (nats; misses as fractions)."""
    return f.table.rename(columns={"round": "t", **PENALTY_COLUMNS}).set_index(["t", "protocol", "T"])[
        list(PENALTY_COLUMNS.values())]


def table_cases(f: Findings) -> pd.DataFrame:
    """Each (cohort, mask mode) case: index (t, protocol, masks), its miss in whole percent (measured over
    predicted minus one) and whether the prediction holds within ``n_se`` standard errors."""
    c = f.cases
    return pd.DataFrame({"t": c["round"], "protocol": c.protocol, "masks": c["mode"],
                         "miss (%)": (100 * c.miss).round(), "holds": c.holds}).set_index(
        ["t", "protocol", "masks"])


def figure_penalty(f: Findings) -> plt.Figure:
    """Monte Carlo excess loss (± n_se standard errors) against the second-order prediction R of eq. (6)-(7),
    one colour per protocol, filled markers for independent masks and open ones for shared; log-log with
    the diagonal measured = predicted."""
    fig, ax = plt.subplots(figsize=(6.4, 5.0))
    cases, n_se = f.cases, f.n_se
    markers = {"independent": "o", "shared": "s"}
    for i, name in enumerate(f.protocols):
        for mode, marker in markers.items():
            c = cases[(cases.protocol == name) & (cases["mode"] == mode)]
            ax.errorbar(c.predicted, c.measured, yerr=n_se * c.se, fmt=marker, color=f"C{i}", capsize=2,
                        mfc="none" if mode == "shared" else f"C{i}", label=f"{name}, {mode}")
    lo = float(min(cases.predicted.min(), cases.measured[cases.measured > 0].min())) / 2
    hi = float(max(cases.predicted.max(), cases.measured.max())) * 2
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="measured = predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted R (nats)")
    ax.set_ylabel("measured excess (nats)")
    ax.set_title("Masking penalty")
    plots.legend_outside(ax, "below")
    return fig


def figure_recovery(f: Findings) -> plt.Figure:
    """Per cohort: the measured ratio of the shared to the independent excess loss (± n_se SE) beside
    1/Δ_S in the block-Hessian norm (= R_shr / R_ind, eq. 8) and in the Euclidean norm, with the ceiling K_c."""
    fig, ax = plt.subplots(figsize=(6.4, 5.0))
    table, n_se, k_c = f.table, f.n_se, f.cfg.cohort_size
    x = np.arange(len(table))
    ax.errorbar(x, table.ratio_measured, yerr=n_se * table.ratio_measured_se, fmt="ko", capsize=2,
                label="measured ratio")
    ax.plot(x, table.recovery_h, "D", color="C3", label="block-Hessian 1/Δ_S")
    ax.plot(x, table.recovery_euclid, "^", color="C2", label="Euclidean 1/Δ_S")
    ax.axhline(k_c, color="grey", ls=":", lw=1, label=f"ceiling K_c = {k_c}")
    ax.set_xticks(x, [f"t={r}\n{pname}" for r, pname in zip(table["round"], table.protocol)],
                  rotation=30 if len(x) > 4 else 0)
    ax.set_xlabel("round t, protocol")
    ax.set_ylabel("recovery factor (dimensionless)")
    ax.set_ylim(bottom=0)
    ax.set_title("Per-cohort recovery factor")
    plots.legend_outside(ax, "below", ncol=1)
    return fig
