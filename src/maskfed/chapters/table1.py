"""Findings of the chapter "Table I: the recovery factor across local protocols"
(``notebooks/table1_local_protocol.md``).

The chapter sweeps FedAvg's local protocol (batch size bs ∈ {32, 128, full} times local epochs
τ ∈ {1, 2, 5}, Dirichlet α = 100) and summarises, per protocol, the recovery factor 1/Δ_S (eq. 3,
unweighted, and n_k-weighted, eq. 8), the estimates ‖μ̂‖² and σ̂² (eq. 13-14) and the test accuracy,
as the paper's Table I does (Yan et al. 2026, Sec. IV-A to IV-C). :func:`findings` runs (or reads
from the archive) those runs and gathers the glued values, the two tables and the figures' inputs;
:func:`figure_recovery` and :func:`figure_trajectories` draw the chapter's figures. The pure helpers
(:func:`estimator_values`, :func:`trend_phrase`, :func:`live_text`, :func:`paper_values`) compute one
paragraph's values each.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from maskfed import book
from maskfed.analysis import summary, uncertainty
from maskfed.book import evidence, plots, tables
from maskfed.book.plots import recovery_vs_accuracy
from maskfed.core.diversity import predicted_recovery_factor
from maskfed.engine.config import Profile
from maskfed.engine.models import build_model, num_parameters
from maskfed.studies import archive, experiments

#: The index of Table I's rows: (batch size as text, local epochs τ).
BY = ["batch_size", "local_epochs"]

#: The verdict page's claims judged again at matched stage on this page (evidence.matched_stage_summary).
MATCHED_CLAIMS = ("cliff", "floor", "tau", "monotone_t", "spans", "signal_steps")


@dataclass(frozen=True)
class Findings:
    """What the chapter shows.

    ``values`` maps each glue name (``t1_...``) to a number or a short phrase; the rest are the
    sources, frames and runs the tables and figures are drawn from.
    """

    values: dict
    prof: Profile                  # this build's profile (the banner's)
    srcs: list[tables.Source]      # every source, closest to the paper's setting first; the live one last
    found: list                    # archive.summaries: the archived profiles that have Table I runs
    archive_notes: list[str]       # one sentence per archived profile without runs
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
    """The estimates' spans and the two consistency checks of one Table I summary.

    Args:
        table: a Table I summary (one row per protocol) with ``recovery_unweighted``,
            ``recovery_weighted``, ``mu2_hat`` and ``sigma2_hat`` (param.²), as
            :func:`maskfed.studies.experiments.table1` returns.
        k_c: cohort size K_c.

    Returns:
        ``t1_sigma_span``, ``t1_mu_span``: largest over smallest σ̂² and ‖μ̂‖² across the rows
        (dimensionless); ``t1_eq12_dev``: the largest relative gap (percent) between eq. (12),
        (K_c r + 1)/(r + 1) with r = ‖μ̂‖²/σ̂² of the medians, and the median 1/Δ_S;
        ``t1_wtd_gap``: the largest relative gap (percent) between the n_k-weighted and the
        unweighted 1/Δ_S.
    """
    rec = table["recovery_unweighted"]
    r = table["mu2_hat"] / table["sigma2_hat"]
    return {"t1_sigma_span": table["sigma2_hat"].max() / table["sigma2_hat"].min(),
            "t1_mu_span": table["mu2_hat"].max() / table["mu2_hat"].min(),
            "t1_eq12_dev": 100 * ((predicted_recovery_factor(r, k_c) - rec).abs() / rec).max(),
            "t1_wtd_gap": 100 * ((table["recovery_weighted"] - rec).abs() / rec).max()}


def trend_phrase(runs: pd.DataFrame) -> str:
    """The clause after the trend counts: the steepest significant fall of 1/Δ_S per round, in
    percent (from the slope s of log 1/Δ_S per round, 100 (1 − e^s)), or that none falls.

    Args:
        runs: :func:`maskfed.analysis.uncertainty.trend_counts`' ``runs`` (``slope``, ``verdict``).
    """
    falling = runs[runs["verdict"] == "falling"]
    if falling.empty:
        return "none falls significantly"
    return f"the steepest significant fall is {100 * (1 - np.exp(falling['slope'].min())):.2f}% a round"


def live_text(live: tables.Source, first: tables.Source, paper: pd.DataFrame, live_name: str) -> str:
    """The sentence under the tables: that this build's own profile is the closest evidence, or
    why its live numbers (``live``, the last source) differ from the closest source's (``first``):
    its cliff, its test accuracies (fraction) and its full-batch factors against ``first``'s.

    Args:
        live, first: :func:`maskfed.book.tables.sources`' last and first source.
        paper: the paper's Table I (for :func:`maskfed.analysis.summary.table1_contrast`).
        live_name: this build's profile name.

    Raises:
        ValueError: a table without both full-batch and minibatch protocols (``table1_contrast``).
    """
    if first is live:
        return "This build's own profile is the closest evidence."
    lt, ft = live.table, first.table
    lc, fc = summary.table1_contrast(lt, paper), summary.table1_contrast(ft, paper)
    return (f"This build's live {live_name} profile ({live.rounds} rounds, {live.seeds} seed"
            f"{'s' if live.seeds > 1 else ''}) gives a cliff of {lc['cliff']:.2f} against "
            f"{fc['cliff']:.2f} for {first.name}: it stops at test accuracies "
            f"{lt['test_acc'].min():.3f}–{lt['test_acc'].max():.3f} where {first.name} reaches "
            f"{ft['test_acc'].min():.3f}–{ft['test_acc'].max():.3f}, so its summary window lies far "
            f"earlier in training, and its full-batch factors ({lc['full_min']:.2f}–{lc['full_max']:.2f}) "
            f"are not yet where {first.name}'s are ({fc['full_min']:.2f}–{fc['full_max']:.2f}).")


def _protocol(p: tuple, paper: pd.DataFrame) -> str:
    """``"bs 128, τ = 5 (T = 20)"``: a protocol of the paper's table with its local steps T."""
    return f"bs {p[0]}, τ = {p[1]} (T = {paper.loc[p, 'T_mean']:.0f})"


def paper_values(paper: pd.DataFrame) -> dict:
    """The values of "Where the paper disagrees with itself", from the paper's own Table I.

    Three checks: the aggregation gap between its unweighted and n_k-weighted columns (as printed,
    two decimals) against its Sec. IV-A (0.04 %) and Sec. IV-B (1 %) statements; its one inversion
    of "monotone in T within each group" (Sec. IV-B); its full-batch ‖μ̂‖² against "more local steps
    travel further along the shared direction" (Sec. IV-C).

    Args:
        paper: the paper's Table I (:func:`maskfed.analysis.summary.paper_table`), indexed by
            (batch size as text, τ).

    Returns:
        ``t1_pgap_...`` (the gap: its largest value in percent, that cell as ``"bs = ..., τ = ..."``,
        its two printed values, the number of cells that differ, of how many, and the largest gap the
        rounding allows there, percent), ``t1_claim_a``, ``t1_claim_b`` (the two statements, percent),
        ``t1_p3219_u``, ``t1_p3219_w`` (Table II's protocol bs 32, τ 2), ``t1_inv_a``, ``t1_inv_b``
        (the inverted pair as ``"bs ..., τ = ... (T = ...)"``), ``t1_inv_va``, ``t1_inv_vb`` (their
        1/Δ_S) and ``t1_mu_full1``, ``t1_mu_full2``, ``t1_mu_full5`` (full-batch ‖μ̂‖² at τ = 1, 2,
        5, as :func:`maskfed.book.scientific` writes them).

    Raises:
        ValueError: the table no longer fits the chapter's sentences: its largest gap not between the
            two statements, a gap at bs 32, τ 2, not exactly one T inversion, or full-batch ‖μ̂‖² not
            falling from τ 1 to 2 and then rising above τ 1's at 5.
    """
    gaps = summary.aggregation_gap_pct(paper, decimals=2)  # the paper prints two decimals
    worst = gaps["gap_pct"].idxmax()
    claim_a, claim_b = summary.PAPER_TEXT["aggregation_gap_sec_iv_a"], summary.PAPER_TEXT["aggregation_gap_sec_iv_b"]
    # the paragraph says the printed table breaks the 0.04% figure but keeps the 1% one
    if not claim_a < gaps["gap_pct"].max() < claim_b:
        raise ValueError(f"the paper's largest aggregation gap {gaps['gap_pct'].max()}% is not between "
                         f"{claim_a}% and {claim_b}%, as the chapter says")
    if gaps.loc[("32", 2), "gap_pct"] != 0:
        raise ValueError("the paper's bs 32, τ 2 values differ; the chapter says they agree")
    # the paper's "monotone in T within each group" against its own table: exactly one inversion
    inversions = summary.protocol_orderings(paper)["t_inversions"]
    if len(inversions) != 1:
        raise ValueError(f"the chapter names exactly one T inversion in the paper's table; found {inversions}")
    (inv_a, inv_b), = inversions
    full_mu = paper.xs("full", level="batch_size")["mu2_hat"]
    if not full_mu.loc[2] < full_mu.loc[1] < full_mu.loc[5]:  # the sentence: falls from τ 1 to 2, then rises
        raise ValueError("the paper's full-batch ‖μ̂‖² no longer falls from τ 1 to 2 and rises at 5: "
                         f"{full_mu.to_dict()}")
    return {"t1_pgap_max": gaps["gap_pct"].max(), "t1_pgap_cell": f"bs = {worst[0]}, τ = {worst[1]}",
            "t1_pgap_u": paper.loc[worst, "recovery_unweighted"], "t1_pgap_w": paper.loc[worst, "recovery_weighted"],
            "t1_pgap_n": int((gaps["gap_pct"] > 0).sum()), "t1_pgap_cells": len(gaps),
            "t1_pgap_rounding_max": gaps.loc[worst, "gap_max_pct"],
            "t1_claim_a": claim_a, "t1_claim_b": claim_b,
            "t1_p3219_u": paper.loc[("32", 2), "recovery_unweighted"],
            "t1_p3219_w": paper.loc[("32", 2), "recovery_weighted"],
            "t1_inv_a": _protocol(inv_a, paper), "t1_inv_b": _protocol(inv_b, paper),
            "t1_inv_va": paper.loc[inv_a, "recovery_unweighted"], "t1_inv_vb": paper.loc[inv_b, "recovery_unweighted"],
            "t1_mu_full1": book.scientific(full_mu.loc[1]), "t1_mu_full2": book.scientific(full_mu.loc[2]),
            "t1_mu_full5": book.scientific(full_mu.loc[5])}


def findings(profile: Profile, *, workers: int | None = None, archived: list[str] | None = None) -> Findings:
    """The chapter's findings: this build's Table I runs, the archived profiles' beside them, and
    every value the chapter's prose names.

    Args:
        profile: this build's profile (``load_profile`` with the chapter's data path and overrides).
        workers: worker processes for the runs; None: the profile's.
        archived: archived profiles shown beside this one (the chapter's parameter); None:
            :data:`maskfed.studies.archive.BOOK_PROFILES` less this profile.

    Returns:
        :class:`Findings`. Its ``values`` hold, among others, the closest source's full-batch and
        minibatch 1/Δ_S ranges (``t1_full_min``, ...) and the paper's (``t1_paper_full_min``, ...),
        the cliff and the rank correlations with the paper's as ``"estimate [low, high]"`` texts
        (90 % bootstrap intervals over seeds and window rounds: ``t1_gap``, ``t1_spearman_rec``,
        ``t1_spearman_sigma``), :func:`estimator_values`, the trend counts of the runs
        (``t1_n_falling``, ...), :func:`paper_values` and the model's parameter count
        (``t1_n_params``, an int).

    Raises:
        InconsistentRun: eq. (12) with a round's own estimates misses that round's 1/Δ_S by 1e-9 or more
            in a run (the prose says they agree by algebra), naming its folder and metrics.csv.
        IncompleteArchive: an archived profile lacks some of its runs (:func:`archive.require_complete`).
        ValueError: as :func:`paper_values`.
    """
    results = experiments.run(profile, "table1", workers=workers, progress=False)
    paper = summary.paper_table("table1")
    found, notes = archive.summaries("table1", live=profile.name, profiles=archived, whole=True)
    srcs = tables.sources("table1", profile.name, results, found)
    first = srcs[0]
    first_results = found[0].results if found else results
    k_c = first_results[0].config.cohort_size  # the closest source's K_c (the ceiling drawn and used in eq. 12)
    t = first.table
    reps = uncertainty.replicate_tables(first_results, BY, n_boot=uncertainty.N_BOOT)
    contrast, p_contrast = summary.table1_contrast(t, paper), summary.table1_contrast(paper, paper)

    def interval(key):  # a table1_contrast statistic with its bootstrap interval, as text
        return uncertainty.bootstrap(lambda tab: summary.table1_contrast(tab, paper)[key], [t], [reps]).text()

    # eq. (12) with each round's own estimates reproduces that round's 1/Δ_S by algebra: the prose's
    # "not exact only because medians of ratios are not ratios of medians" rests on this
    round_gap = eq12_round_gap(first_results, k_c)
    trends = uncertainty.trend_counts(first_results)
    values = {"t1_first": first.name, "t1_caption": tables.caption(first),
              "t1_coverage": uncertainty.coverage_note(len({r.config.seed for r in first_results})),
              "t1_profile": first.name, "t1_rounds": first.rounds, "t1_kc": k_c}
    for key in ("full_min", "full_max", "mini_min", "mini_max"):
        values |= {f"t1_{key}": contrast[key], f"t1_paper_{key}": p_contrast[key]}
    values |= {"t1_gap": interval("cliff"), "t1_paper_gap": p_contrast["cliff"],
               "t1_spearman_rec": interval("spearman_rec"), "t1_spearman_sigma": interval("spearman_sigma"),
               "t1_level": round(100 * uncertainty.LEVEL), "t1_block": uncertainty.BLOCK,
               "t1_live_text": live_text(srcs[-1], first, paper, profile.name),
               **estimator_values(t, k_c),
               "t1_acc_min": t["test_acc"].min(), "t1_acc_max": t["test_acc"].max(),
               "t1_n_falling": trends["falling"], "t1_n_flat": trends["flat"], "t1_n_rising": trends["rising"],
               "t1_n_runs": len(first_results), "t1_trend_text": trend_phrase(trends["runs"]),
               "t1_trend_claims": evidence.trend_view(first_results, first.name)[1],
               "t1_round_gap": round_gap,
               "t1_orderings": summary.protocol_orderings(t)["falling_text"],
               "t1_paper_orderings": summary.protocol_orderings(paper)["falling_text"],
               "t1_paper_acc_min": paper["test_acc"].min(), "t1_paper_acc_max": paper["test_acc"].max(),
               "t1_model": first_results[0].config.model,
               "t1_n_params": first_results[0].provenance["num_parameters"],
               "t1_n_seeds": first.seeds, "t1_window": summary.tail_window(first.rounds),
               "t1_n_params_resnet": num_parameters(build_model("resnet18_gn", num_classes=10)),
               "t1_matched": evidence.matched_stage_summary("cpu-paper", MATCHED_CLAIMS),
               **paper_values(paper)}
    return Findings(values, profile, srcs, found, notes, first_results, k_c, paper,
                    tables.main_table("table1", first, paper), tables.full_table(srcs, paper))


#: Largest relative gap between eq. (12) with a round's own estimates and its 1/Δ_S that float rounding explains.
EQ12_ROUND_TOL = 1e-9


def eq12_round_gap(results: list, k_c: int) -> float:
    """The largest gap, over ``results``' rounds, between eq. (12) fed with a round's own estimates and that
    round's 1/Δ_S (:func:`maskfed.analysis.summary.eq12_identity_gap`): equal by algebra, so only rounding.

    Raises:
        InconsistentRun: a run's gap is :data:`EQ12_ROUND_TOL` or more (or NaN), naming the first such run's
            folder and its metrics.csv (an edited archived file, say).
    """
    gaps = [(r, summary.eq12_identity_gap(r.metrics, k_c)) for r in results]
    for r, gap in gaps:
        if not gap < EQ12_ROUND_TOL:
            raise archive.InconsistentRun(r.path, "metrics.csv", f"eq. (12) misses a round's own 1/Δ_S by "
                                          f"{gap:.1e}; the chapter says they agree")
    return max(gap for _, gap in gaps)


# --------------------------------------------------------------------------- figures (finish them with plots.finish)


def figure_recovery(f: Findings) -> plt.Figure:
    """Figure 1: 1/Δ_S against test accuracy (fraction) of the nine protocols
    (:func:`maskfed.book.plots.recovery_vs_accuracy`): the closest source with its seed ranges, the
    other sources and the paper's values, with the ceiling K_c."""
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    first = f.first
    recovery_vs_accuracy(first.table, f.paper, k_c=f.k_c, ax=ax, ours_label=first.name,
                         others={s.name: s.table for s in f.srcs[1:]},
                         ranges=None if first.low is None else {first.name: (first.low, first.high)})
    return fig


def figure_trajectories(f: Findings) -> plt.Figure:
    """The per-round 1/Δ_S of every protocol of the closest source's first seed
    (:func:`maskfed.book.plots.trajectories`, the summary window shaded)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    seed0 = min(r.config.seed for r in f.first_results)
    plots.trajectories([r for r in f.first_results if r.config.seed == seed0], ax=ax)
    ax.set_title(f"Per-round 1/Δ_S, {f.first.name}, seed {seed0}")
    return fig
