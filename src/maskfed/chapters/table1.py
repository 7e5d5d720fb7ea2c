"""Findings of the chapter "Table I: the recovery factor across local protocols"
(``notebooks/table1_local_protocol.md``): bs ∈ {32, 128, full} × τ ∈ {1, 2, 5} at α = 100, summarised as the
paper's Table I (Sec. IV-A to IV-C): 1/Δ_S (eq. 3, 8), ‖μ̂‖², σ̂² (eq. 13-14), test accuracy."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from maskfed import book
from maskfed.analysis import claims, summary, uncertainty
from maskfed.book import evidence, plots, tables
from maskfed.book.plots import recovery_vs_accuracy
from maskfed.core.diversity import predicted_recovery_factor
from maskfed.engine.config import Profile, load_profile
from maskfed.engine.models import build_model, num_parameters
from maskfed.names import PAPER
from maskfed.studies import archive, experiments

#: The index of Table I's rows: (batch size as text, local epochs τ).
BY = evidence.BY["table1"]

#: The verdict page's claims judged again at matched stage on this page (:func:`maskfed.book.tables.matched_values`).
MATCHED_CLAIMS = ("cliff", "floor", "tau", "monotone_t", "spans", "signal_steps")


@dataclass(frozen=True)
class Findings:
    """What the chapter shows: ``values`` (glue name ``t1_...`` -> number, short name or verdict word, or a
    truth value for the chapter's hidden checks), and the sources, frames and runs of its tables and figures."""

    values: dict
    prof: Profile                  # this build's profile (the banner's)
    srcs: list[tables.Source]      # every source, the lead first (the closest to the paper's setting, or a reader's own run)
    found: list                    # archive.summaries: the archived profiles that have Table I runs
    archive_notes: list[str]       # archive.summaries' notes on the archived profiles without runs (archive.archive_table)
    first_results: list            # the closest source's runs (RunResult)
    k_c: int                       # the closest source's cohort size K_c (the ceiling on 1/Δ_S)
    paper: pd.DataFrame            # the paper's Table I (summary.paper_table)
    main: pd.DataFrame             # tables.main_table of the closest source
    full: pd.DataFrame             # tables.full_table of every source

    @property
    def first(self) -> tables.Source:
        """The closest source (the table's and the figures' lead)."""
        return self.srcs[0]


def estimator_values(table: pd.DataFrame, k_c: int) -> dict:
    """Of one Table I summary (``table``, :func:`maskfed.studies.experiments.table1`) and K_c:
    ``t1_sigma_span``, ``t1_mu_span`` (largest over smallest σ̂², ‖μ̂‖², whole numbers); ``t1_eq12_dev``, the largest
    relative gap (%, one decimal) between eq. (12) with r = ‖μ̂‖²/σ̂² of the medians and the median 1/Δ_S;
    ``t1_wtd_gap``, the largest relative gap (%, two decimals) between the weighted and unweighted 1/Δ_S."""
    rec = table["recovery_unweighted"]
    r = table["mu2_hat"] / table["sigma2_hat"]
    return {"t1_sigma_span": round(table["sigma2_hat"].max() / table["sigma2_hat"].min()),
            "t1_mu_span": round(table["mu2_hat"].max() / table["mu2_hat"].min()),
            "t1_eq12_dev": round(100 * ((predicted_recovery_factor(r, k_c) - rec).abs() / rec).max(), 1),
            "t1_wtd_gap": round(100 * ((table["recovery_weighted"] - rec).abs() / rec).max(), 2)}


def grid_values(table: pd.DataFrame, paper: pd.DataFrame) -> dict:
    """The lead source's grid (``table``, a Table I summary): its batch sizes and τ as text in the tables' order
    (``t1_grid_bs``, ``t1_grid_tau``), T's smallest and largest cohort mean (``t1_T_min``, ``t1_T_max``, whole
    steps), how many protocols are full-batch and minibatch (``t1_n_full``, ``t1_n_mini``) and how many it shares
    with the ``paper``'s table (``t1_n_shared``, the pairs of the rank correlations)."""
    rows = summary.protocol_order(table.index)
    bs, tau = (list(dict.fromkeys(rows.get_level_values(i))) for i in (0, 1))
    full = sum(str(b) == "full" for b in rows.get_level_values(0))
    return {"t1_grid_bs": ", ".join(map(str, bs)), "t1_grid_tau": ", ".join(map(str, sorted(tau))),
            "t1_T_min": round(table["T_mean"].min()), "t1_T_max": round(table["T_mean"].max()),
            "t1_n_full": full, "t1_n_mini": len(rows) - full, "t1_n_shared": len(table.index.intersection(paper.index))}


def steepest_fall(runs: pd.DataFrame) -> float:
    """100 (1 − e^s) for the most negative slope s of log 1/Δ_S per round among ``runs``
    (:func:`maskfed.analysis.uncertainty.trend_counts`' ``runs``) falling; 0 where none falls."""
    falling = runs[runs["verdict"] == "falling"]
    return 0.0 if falling.empty else float(100 * (1 - np.exp(falling["slope"].min())))


def live_values(live: tables.Source, paper: pd.DataFrame, prefix: str = "t1_live") -> dict:
    """``<prefix>...`` of one source (this build's own profile by default): name, rounds, seeds, cliff,
    accuracy and full-batch 1/Δ_S ranges (:func:`maskfed.analysis.summary.table1_contrast` against ``paper``).

    Raises:
        ValueError: a table without both full-batch and minibatch protocols."""
    lt, lc = live.table, summary.table1_contrast(live.table, paper)
    return {prefix: live.name, f"{prefix}_rounds": live.rounds, f"{prefix}_seeds": live.seeds,
            f"{prefix}_cliff": round(lc["cliff"], 2),
            f"{prefix}_acc_min": round(lt["test_acc"].min(), 3), f"{prefix}_acc_max": round(lt["test_acc"].max(), 3),
            f"{prefix}_full_min": round(lc["full_min"], 2), f"{prefix}_full_max": round(lc["full_max"], 2)}


def ordering_values(table: pd.DataFrame, prefix: str) -> dict:
    """The orderings of :func:`maskfed.analysis.summary.protocol_orderings`: ``{prefix}_cliff_word``
    ("every"/"not every"), ``_n_falling`` of ``_n_groups``, ``_n_inv`` and the first inverted pair's ``_inv_bs_a``,
    ``_inv_tau_a``, ``_inv_T_a``, ``_inv_v_a`` (and ``_b``; "–" without an inversion)."""
    o = summary.protocol_orderings(table)
    inv = o["t_inversions"] or []
    values = {f"{prefix}_cliff_word": "every" if o["cliff"] else "not every", f"{prefix}_n_falling": o["n_falling"],
              f"{prefix}_n_groups": o["n_groups"], f"{prefix}_n_inv": len(inv)}
    for end, p in zip("ab", inv[0] if inv else [None, None]):
        values |= {f"{prefix}_inv_bs_{end}": p[0] if p else "–", f"{prefix}_inv_tau_{end}": p[1] if p else "–",
                   f"{prefix}_inv_T_{end}": round(table.loc[p, "T_mean"]) if p else "–",
                   f"{prefix}_inv_v_{end}": table.loc[p, "recovery_unweighted"] if p else "–"}
    return values


def paper_values(paper: pd.DataFrame) -> dict:
    """The values of "Where the paper disagrees with itself" from the paper's own Table I: its
    aggregation gap (``t1_pgap_...``, percent, as printed to two decimals), its Sec. IV-A/B statements
    (``t1_claim_a``, ``t1_claim_b``), Table II's bs 32, τ 2 (``t1_p3219_...``), full-batch ‖μ̂‖² (``t1_mu_full1``, ...)
    and the truth values the sentences rest on (``t1_pgap_between``, ``t1_p3219_agree``, ``t1_mu_full_dips``)."""
    gaps = summary.aggregation_gap_pct(paper, decimals=2)  # the paper prints two decimals
    worst = gaps["gap_pct"].idxmax()
    claim_a, claim_b = summary.PAPER_TEXT["aggregation_gap_sec_iv_a"], summary.PAPER_TEXT["aggregation_gap_sec_iv_b"]
    mu = paper.xs("full", level="batch_size")["mu2_hat"]
    return {"t1_pgap_max": round(gaps["gap_pct"].max(), 2), "t1_pgap_bs": worst[0], "t1_pgap_tau": worst[1],
            "t1_pgap_u": paper.loc[worst, "recovery_unweighted"], "t1_pgap_w": paper.loc[worst, "recovery_weighted"],
            "t1_pgap_n": int((gaps["gap_pct"] > 0).sum()), "t1_pgap_cells": len(gaps),
            "t1_pgap_rounding_max": round(gaps.loc[worst, "gap_max_pct"], 1), "t1_claim_a": claim_a,
            "t1_claim_b": claim_b, "t1_p3219_u": paper.loc[("32", 2), "recovery_unweighted"],
            "t1_p3219_w": paper.loc[("32", 2), "recovery_weighted"],
            **{f"t1_mu_full{tau}": book.scientific(mu.loc[tau]) for tau in (1, 2, 5)},
            "t1_pgap_between": bool(claim_a < gaps["gap_pct"].max() < claim_b),
            "t1_p3219_agree": bool(gaps.loc[("32", 2), "gap_pct"] == 0),
            "t1_mu_full_dips": bool(mu.loc[2] < mu.loc[1] < mu.loc[5])}


def trend_claim_values(runs: list) -> dict:
    """:func:`maskfed.analysis.claims.trend_bearing` of one source's Table I ``runs``:
    ``t1_tc_falling`` of ``t1_tc_runs``, per claim c ``t1_tc_{c}_still``, ``_way``, ``_pairs``; ``t1_tc_claims``."""
    trends = evidence.cell_trends(runs)
    bearing = claims.trend_bearing(experiments.table1(runs), trends)
    values = {"t1_tc_falling": int(trends["falling"].sum()), "t1_tc_runs": int(trends["runs"].sum()),
              "t1_tc_tested": int(trends["tested"].sum()), "t1_tc_claims": tuple(bearing.index)}
    for key, row in bearing.iterrows():
        values |= {f"t1_tc_{key}_{col}": row[col] for col in ("still", "way", "pairs")}
    return values


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             archived: list[str] | None = None) -> Findings:
    """The chapter's findings: this build's Table I runs, the archived profiles' (``archived``; None:
    :data:`maskfed.studies.archive.BOOK_PROFILES` less this one) beside them, and every value the prose names.

    Raises:
        InconsistentRun: eq. (12) with a round's own estimates misses its 1/Δ_S (:func:`eq12_round_gap`).
        IncompleteArchive: an archived profile lacks some of its runs."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    results = experiments.run(prof, "table1", workers=workers, progress=not book.IN_BOOK_BUILD)
    paper = summary.paper_table("table1")
    found, notes = archive.summaries("table1", live=prof.name, profiles=archived, whole=True)
    own = bool(overrides)  # a reader's own settings: their run leads the page, the archived evidence beside it
    srcs = tables.sources("table1", prof.name, results, found, live_first=own)
    first = srcs[0]
    first_results = found[0].results if found and not own else results
    k_c = first_results[0].config.cohort_size  # the closest source's K_c (the ceiling drawn and used in eq. 12)
    t = first.table
    reps = uncertainty.replicate_tables(first_results, BY, n_boot=uncertainty.N_BOOT)
    contrast, p_contrast = summary.table1_contrast(t, paper), summary.table1_contrast(paper, paper)
    live, other, most = tables.roles(srcs, own)  # the coverage sentence is about the source with the most seeds
    values = {"t1_first": first.name, "t1_rounds": first.rounds, "t1_n_seeds": first.seeds, **grid_values(t, paper),
              "t1_cov_source": most.name, "t1_cov_seeds": most.seeds,
              "t1_coverage_pct": round(100 * uncertainty.seed_range_coverage(most.seeds), 2),
              "t1_changes": (book.banner(prof).loc["changes", "value"] if own else "") or "none"}
    for key in ("full_min", "full_max", "mini_min", "mini_max"):
        values |= {f"t1_{key}": round(contrast[key], 2), f"t1_paper_{key}": p_contrast[key]}
    for key, name in (("cliff", "gap"), ("spearman_rec", "spearman_rec"), ("spearman_sigma", "spearman_sigma")):
        iv = uncertainty.bootstrap(lambda tab, key=key: summary.table1_contrast(tab, paper)[key], [t], [reps])
        values |= {f"t1_{name}{end}": round(x, 2) for end, x in (("", iv.estimate), ("_lo", iv.low), ("_hi", iv.high))}
    # eq. (12) with each round's own estimates reproduces that round's 1/Δ_S by algebra: the prose's
    # "not exact only because medians of ratios are not ratios of medians" rests on this
    round_gap = eq12_round_gap(first_results, k_c)
    trends = uncertainty.trend_counts(first_results)
    values |= {"t1_paper_gap": p_contrast["cliff"], "t1_level": round(100 * uncertainty.LEVEL),
               "t1_block": uncertainty.BLOCK, **live_values(live, paper), **live_values(other, paper, "t1_other"),
               **estimator_values(t, k_c),
               "t1_acc_min": round(t["test_acc"].min(), 3), "t1_acc_max": round(t["test_acc"].max(), 3),
               "t1_n_falling": trends["falling"], "t1_n_flat": trends["flat"], "t1_n_rising": trends["rising"],
               "t1_n_short": trends["too short"],
               "t1_n_runs": len(first_results), "t1_steepest_fall": round(steepest_fall(trends["runs"]), 2),
               "t1_round_gap": book.scientific(round_gap, 1),
               **ordering_values(t, "t1_ord"), **ordering_values(paper, "t1_pord"),
               "t1_paper_acc_min": paper["test_acc"].min(), "t1_paper_acc_max": paper["test_acc"].max(),
               "t1_model": first_results[0].config.model,
               "t1_n_params": first_results[0].provenance["num_parameters"],
               "t1_window": summary.tail_window(first.rounds),
               "t1_n_params_resnet": num_parameters(build_model("resnet18_gn", num_classes=10)),
               **trend_claim_values(evidence.source_runs(tables.ARCHIVED)["table1"]),
               **tables.matched_values(tables.ARCHIVED, MATCHED_CLAIMS, "t1"), **paper_values(paper)}
    return Findings(values, prof, srcs, found, notes, first_results, k_c, paper,
                    tables.main_table("table1", first, paper), tables.full_table(srcs, paper))


#: Largest relative gap between eq. (12) with a round's own estimates and its 1/Δ_S that float rounding explains.
EQ12_ROUND_TOL = 1e-9


def eq12_round_gap(results: list, k_c: int) -> float:
    """The largest gap over ``results``' rounds between eq. (12) fed with a round's own estimates
    and its 1/Δ_S (:func:`maskfed.analysis.summary.eq12_identity_gap`).

    Raises:
        InconsistentRun: a gap of :data:`EQ12_ROUND_TOL` or more (or NaN), naming the run's metrics.csv."""
    gaps = [(r, summary.eq12_identity_gap(r.metrics, k_c)) for r in results]
    for r, gap in gaps:
        if not gap < EQ12_ROUND_TOL:
            raise archive.InconsistentRun(r.path, "metrics.csv", f"eq. (12) misses a round's own 1/Δ_S by "
                                          f"{gap:.1e}; the chapter says they agree")
    return max(gap for _, gap in gaps)


# --------------------------------------------------------------------------- figures (finish them with plots.finish)


def figure_recovery(f: Findings) -> plt.Figure:
    """Figure 1: 1/Δ_S against test accuracy per protocol, every source, the paper's, and each source's ceiling
    K_c (the paper's: its 10 clients a round)."""
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    first = f.first
    k_c = {s.name: s.k_c for s in f.srcs} | {"paper": load_profile(PAPER).base["cohort_size"]}
    recovery_vs_accuracy(first.table, f.paper, k_c=k_c, ax=ax, ours_label=first.name,
                         others={s.name: s.table for s in f.srcs[1:]},
                         ranges=None if first.low is None else {first.name: (first.low, first.high)})
    return fig


def figure_trajectories(f: Findings) -> plt.Figure:
    """Per-round 1/Δ_S of each protocol of the closest source's first seed."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    seed0 = min(r.config.seed for r in f.first_results)
    plots.trajectories([r for r in f.first_results if r.config.seed == seed0], ax=ax)
    ax.set_title(f"{f.first.name}, seed {seed0}")
    return fig
