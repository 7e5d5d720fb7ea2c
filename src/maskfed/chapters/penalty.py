"""Findings of the chapter "The measured penalty and the Hessian-weighted recovery factor"
(``notebooks/limit_penalty.md``): the second-order penalty (Prop. 1-3, eq. 4-7) against the Monte Carlo excess
loss under independent and shared block masks, and 1/Δ_S in the block-Hessian (eq. 8) and Euclidean norms
(:func:`maskfed.derivation.limits.measure_limits`)."""

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
    """``values`` (glue name ``lp_...`` -> number or short word) and what the tables and figures draw."""

    values: dict
    profile: Profile        # the loaded profile (for the banner)
    cfg: RunConfig          # the trajectory's configuration (the profile's first seed)
    table: pd.DataFrame     # measure_limits with second_order_error: one row per (round, protocol)
    cases: pd.DataFrame     # cases_table: one row per (round, protocol, mask mode)
    protocols: dict         # name -> (batch size, τ), the defaults filled in
    n_se: float             # standard errors within which a prediction holds


def settings(profile: str, *, at_rounds=None, protocols=None, train_protocol=None, n_draws=None,
             eval_size=None) -> dict:
    """The chapter's settings, defaults filled in for ``profile`` (smoke / cpu / paper).

    Raises:
        ValueError: unknown profile."""
    protocols = limits.default_protocols(profile) if protocols is None else protocols
    return {"protocols": protocols,
            "train_protocol": list(protocols)[-1] if train_protocol is None else train_protocol,
            "at_rounds": theory.profile_value(profile, smoke=[0, 1], cpu=[0, 3], paper=[0, 10, 50])
            if at_rounds is None else at_rounds,
            "n_draws": theory.profile_value(profile, smoke=8, cpu=64, paper=400) if n_draws is None else n_draws,
            "eval_size": theory.profile_value(profile, smoke=64, cpu=128, paper=1024) if eval_size is None else eval_size}


def cases_table(table: pd.DataFrame, n_se: float) -> pd.DataFrame:
    """One row per (cohort, mask mode) of a :func:`maskfed.derivation.limits.second_order_error` table:
    round, protocol, mode, T, measured, se, predicted, miss, miss_se and holds (within ``n_se`` SE)."""
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
    """The largest move of a masked aggregate from θ − Δ̄ in units of a block's length (eq. 2, keep prob. p)."""
    return max(1 / p - 1, 1.0)


def norm_values(table: pd.DataFrame) -> dict:
    """Per cohort |measured ratio − 1/Δ_S| in each norm (their means, 2 decimals), cohorts where the
    block-Hessian one is closer, and the relative gap between the norms' 1/Δ_S (whole %)."""
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
    """The chapter's findings from its parameters (None: the defaults of :func:`settings`), on the
    profile's first seed (:func:`maskfed.derivation.limits.measure_limits`, cached).

    Raises:
        ValueError: R_ind or R_shr not positive (eq. 6-7 need positive curvature here), or unknown profile."""
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
    """Measured against predicted penalty per cohort (nats; misses as fractions)."""
    return f.table.rename(columns={"round": "t", **PENALTY_COLUMNS}).set_index(["t", "protocol", "T"])[
        list(PENALTY_COLUMNS.values())]


def table_cases(f: Findings) -> pd.DataFrame:
    """Each (cohort, mask mode): its miss (whole %) and whether it holds within ``n_se`` SE."""
    c = f.cases
    return pd.DataFrame({"t": c["round"], "protocol": c.protocol, "masks": c["mode"],
                         "miss (%)": (100 * c.miss).round(), "holds": c.holds}).set_index(
        ["t", "protocol", "masks"])


def figure_penalty(f: Findings) -> plt.Figure:
    """Measured excess loss (± n_se SE) against the prediction R (eq. 6-7), log-log."""
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
    """Per cohort: the measured shared-over-independent ratio beside 1/Δ_S in both norms, and K_c."""
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
