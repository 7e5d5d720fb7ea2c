"""Findings of the chapter "Table II: the recovery factor across data heterogeneity"
(``notebooks/table2_heterogeneity.md``): bs 32, τ 2 under Dirichlet α from 100 to 0.1, as the paper's Table II
(Sec. IV-A, IV-B): 1/Δ_S per α (eq. 3, 8), the shard sizes and both Dirichlet conventions (Hsu et al. 2019,
NIID-Bench), the span across α against Table I's, and the archived stage study's α at the same θ."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from maskfed import book
from maskfed.analysis import claims, summary, uncertainty
from maskfed.book import tables
from maskfed.engine import partition, runner
from maskfed.engine.config import Profile, load_profile
from maskfed.studies import archive, experiments, stage

#: Reader names of the two Dirichlet partition conventions (engine.partition.DIRICHLET_CONVENTIONS).
NAMES = {"hsu": "Hsu et al.", "niid_bench": "NIID-Bench"}

#: Number format of :func:`table_sizes`' CV (percent, as in the partition-convention table).
SIZES_FORMATS = {"cv": "{:.1f}"}

#: The verdict page's claims judged again at matched stage on this page (:func:`maskfed.book.tables.matched_values`).
MATCHED_CLAIMS = ("alpha_span", "alpha_weighting")


@dataclass(frozen=True)
class Findings:
    """What the chapter shows: ``values`` (glue name ``t2_...`` -> number, short name or verdict word, or a
    truth value for the chapter's hidden checks), and the frames and sources of its tables."""

    values: dict
    prof: Profile                # this build's profile (the banner's)
    sizes: pd.DataFrame          # table_sizes of this build's runs: index (alpha, seed); cv in percent
    spread: pd.DataFrame         # both conventions' shard sizes: alpha, convention, min, max (samples), cv (%)
    srcs: list[tables.Source]    # every source, closest to the paper's setting first; the live one last
    found: list                  # archive.summaries: the archived profiles that have Table II runs
    archive_notes: list[str]     # archive.summaries' notes on the archived profiles without runs (archive.archive_table)
    paper: pd.DataFrame          # the paper's Table II (summary.paper_table)
    main: pd.DataFrame           # tables.main_table of the closest source
    full: pd.DataFrame           # tables.full_table of every source
    cross: pd.DataFrame | None = None  # cross_table of the archived α-cross (None: not archived)

    @property
    def first(self) -> tables.Source:
        """The closest source (the table's lead)."""
        return self.srcs[0]


def partition_row(alpha: float, seed: int, part: dict) -> dict:
    """One row of the shard-size table from a run's parsed ``partition.json`` (``part``): its fields
    but ``sizes``, and ``cv``, the population SD over the mean of ``sizes`` (%).

    Raises:
        KeyError: ``part`` has no ``sizes``."""
    sizes = pd.Series(part["sizes"])
    return {"alpha": alpha, "seed": seed, **{k: v for k, v in part.items() if k != "sizes"},
            "cv": 100 * sizes.std(ddof=0) / sizes.mean()}


def table_sizes(results: list) -> pd.DataFrame:
    """:func:`partition_row` of each run's ``partition.json``, indexed by (alpha, seed)."""
    rows = [partition_row(r.config.alpha, r.config.seed, json.loads((r.path / "partition.json").read_text()))
            for r in results]
    return pd.DataFrame(rows).set_index(["alpha", "seed"])


def conventions_under(under: list[str]) -> str:
    """The verdict word for the conventions (keys of :data:`NAMES`) ``under`` the paper's figure:
    the one convention's name, "both" or "neither"."""
    return NAMES[under[0]] if len(under) == 1 else "both" if under else "neither"


def convention_values(spread: pd.DataFrame, n_images: int, num_clients: int) -> dict:
    """The values of "Two ways to draw a Dirichlet split" at the largest α of ``spread``
    (:func:`maskfed.engine.partition.shard_size_spread` rows; cv in %), N = ``n_images``, K = ``num_clients``:
    ``t2_claim_spread``, ``t2_conv_n``, ``t2_conv_k``, ``t2_conv_ahi``; per convention c ``t2_{c}_cv`` (%),
    ``_min``, ``_max`` (samples), ``_relrange`` ((max − min) / (N/K), %); ``t2_conv_under``."""
    by = spread.set_index(["alpha", "convention"])
    a_hi = spread["alpha"].max()
    claim = summary.PAPER_TEXT["shard_spread_alpha100"]
    values = {"t2_claim_spread": claim, "t2_conv_n": n_images, "t2_conv_k": num_clients, "t2_conv_ahi": a_hi}
    for c in partition.DIRICHLET_CONVENTIONS:
        lo, hi = by.loc[(a_hi, c), "min"], by.loc[(a_hi, c), "max"]
        values |= {f"t2_{c}_cv": round(by.loc[(a_hi, c), "cv"], 1), f"t2_{c}_min": lo, f"t2_{c}_max": hi,
                   f"t2_{c}_relrange": round(100 * (hi - lo) / (n_images / num_clients))}
    under = [c for c in partition.DIRICHLET_CONVENTIONS if by.loc[(a_hi, c), "cv"] < claim]
    return values | {"t2_conv_under": conventions_under(under)}


def table_conventions(f: Findings) -> tuple[pd.DataFrame, dict]:
    """Both conventions' smallest and largest shard (samples) and CV (%), one row per α (largest
    first); and the formats."""
    stats = {"min": "smallest", "max": "largest", "cv": "CV (%)"}
    shown = (f.spread.assign(convention=f.spread["convention"].map(NAMES))
             .pivot(index="alpha", columns="convention", values=list(stats)).rename(columns=stats)
             .sort_index(ascending=False))
    shown = shown.reorder_levels([1, 0], axis=1).sort_index(axis=1, level=0, sort_remaining=False)
    shown.columns.names = ["partition convention", None]
    # samples with thousands separators (2,276), as every other number of the book
    return shown, {c: ("{:.1f}" if c[1] == "CV (%)" else "{:,.0f}") for c in shown.columns}


def live_values(live: tables.Source, prefix: str = "t2_live") -> dict:
    """``<prefix>...`` of one source (this build's own profile by default): name, rounds, seeds, and the ranges
    of 1/Δ_S and test accuracy."""
    lt = live.table
    return {prefix: live.name, f"{prefix}_rounds": live.rounds, f"{prefix}_seeds": live.seeds,
            f"{prefix}_min": round(lt["recovery_unweighted"].min(), 2), f"{prefix}_max": round(lt["recovery_unweighted"].max(), 2),
            f"{prefix}_acc_min": round(lt["test_acc"].min(), 3), f"{prefix}_acc_max": round(lt["test_acc"].max(), 3)}


def stage_values(study) -> dict:
    """The archived stage study (:func:`maskfed.studies.archive.load_stage_study`, or None) on the α at
    the same θ: over checkpoints after θ_0, each seed apart, the smallest over the largest α's 1/Δ_S, unweighted
    (``t2_st_u_min``, ``_max``, ``_med``) and weighted (``t2_st_w_...``), two decimals; ``t2_st_n``, ``t2_st_lo_a``,
    ``t2_st_hi_a``; ``t2_st_rise`` (unweighted median above 1 and the weighted one's); ``t2_st_study``."""
    if study is None:
        return {"t2_st_study": False}
    a2 = study.table[study.table.experiment == "table2"]
    wide = a2.pivot_table(index=["seed", "stage"], columns="alpha", values=["recovery_unweighted", "recovery_weighted"])
    lo_a, hi_a = min(a2["alpha"]), max(a2["alpha"])
    later = wide.drop(index=0, level="stage")  # after initialisation
    ru = later[("recovery_unweighted", lo_a)] / later[("recovery_unweighted", hi_a)]
    rw = later[("recovery_weighted", lo_a)] / later[("recovery_weighted", hi_a)]
    values = {"t2_st_study": True, "t2_st_n": len(later), "t2_st_lo_a": lo_a, "t2_st_hi_a": hi_a,
              "t2_st_rise": bool(ru.median() > 1 and rw.median() < ru.median())}
    for name, r in (("u", ru), ("w", rw)):
        values |= {f"t2_st_{name}_min": round(r.min(), 2), f"t2_st_{name}_max": round(r.max(), 2),
                   f"t2_st_{name}_med": round(r.median(), 2)}
    return values


def cross_table(cross: pd.DataFrame) -> pd.DataFrame:
    """The α-cross (:attr:`maskfed.studies.archive.ArchivedCross.table`) per trajectory α: the
    median over checkpoints after θ_0 of :func:`maskfed.studies.stage.cross_ratios` with its range, and the θ's
    test accuracies (text cells)."""
    r = stage.cross_ratios(cross)
    r = r[r.index.get_level_values("stage") > 0]
    rows = []
    for a, g in r.groupby(level="trajectory_alpha", sort=False):
        rows.append({"trajectory α": f"{a:g}", "checkpoints": len(g),
                     "accuracy of θ": f"{g['acc'].min():.2f}–{g['acc'].max():.2f}",
                     **{f"{w} ratio": tables.with_range(g[w].median(), g[w].min(), g[w].max())
                        for w in ("unweighted", "weighted")}})
    return pd.DataFrame(rows).sort_values("trajectory α", key=lambda x: -x.astype(float))


def cross_values(cross: pd.DataFrame | None) -> dict:
    """The α-cross's unweighted smallest-over-largest α ratio per trajectory α, largest first
    (median over checkpoints after θ_0): ``t2_cx_alphas`` (empty without a cross), ``t2_cx_lo``, ``t2_cx_hi``,
    ``t2_cx_med_0``, ... (two decimals) and ``t2_cx_above`` (how many above 1)."""
    if cross is None:
        return {"t2_cx_alphas": ()}
    r = stage.cross_ratios(cross)
    r = r[r.index.get_level_values("stage") > 0]
    med = r.groupby(level="trajectory_alpha")["unweighted"].median().sort_index(ascending=False)
    return {"t2_cx_alphas": tuple(float(a) for a in med.index), "t2_cx_lo": cross["alpha"].min(),
            "t2_cx_hi": cross["alpha"].max(), "t2_cx_above": int((med > 1).sum()),
            **{f"t2_cx_med_{i}": round(v, 2) for i, v in enumerate(med)}}


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             archived: list[str] | None = None) -> Findings:
    """The chapter's findings: this build's Table II runs (and Table I runs, for the span comparison),
    the archived profiles' (``archived``; None: :data:`maskfed.studies.archive.BOOK_PROFILES` less this one), both
    partition conventions on the runs' training labels, and every value the prose names."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    results = experiments.run(prof, "table2", workers=workers, progress=not book.IN_BOOK_BUILD)
    paper = summary.paper_table("table2")
    sizes = table_sizes(results)
    cfg0 = prof.run(prof.seeds[0])
    labels = runner.split_images(cfg0, runner.images_for(cfg0))[1].numpy()
    spread = pd.DataFrame(partition.shard_size_spread(labels, cfg0.num_clients, prof.table2.alphas, seed=cfg0.seed))
    spread["cv"] *= 100  # percent
    found, notes = archive.summaries("table2", live=prof.name, profiles=archived, whole=True)
    found1, _ = archive.summaries("table1", live=prof.name, profiles=[a.profile for a in found])
    own = bool(overrides)  # a reader's own settings: their run leads the page, the archived evidence beside it
    srcs = tables.sources("table2", prof.name, results, found, live_first=own)
    first = srcs[0]
    live, other, most = tables.roles(srcs, own)
    first_results = found[0].results if found and not own else results
    live_t1 = experiments.run(prof, "table1", workers=workers, progress=not book.IN_BOOK_BUILD)
    first_t1_results = (found1[0].results if found and found1 and found1[0].profile == found[0].profile and not own
                        else live_t1)
    t2f, t1f = first.table, experiments.table1(first_t1_results)
    reps2 = uncertainty.replicate_tables(first_results, ["alpha"])
    reps1 = uncertainty.replicate_tables(first_t1_results, ["batch_size", "local_epochs"])
    rec, wrec = t2f["recovery_unweighted"], t2f["recovery_weighted"]
    low = t2f.index.min()

    def gap_low(t):  # the two conventions' gap at the lowest α, percent of the unweighted factor
        u, w = t.loc[low, "recovery_unweighted"], t.loc[low, "recovery_weighted"]
        return 100 * abs(u - w) / u

    gap_iv = uncertainty.bootstrap(gap_low, [t2f], [reps2])
    ratio_iv = uncertainty.bootstrap(claims.span_ratio, [t1f, t2f], [reps1, reps2])
    # "the shard sizes there are far from equal": the lowest α has the most unequal shards (the live runs' partitions)
    cv_by_alpha = sizes["cv"].groupby(level="alpha").max()
    cross = archive.load_alpha_cross(tables.ARCHIVED)
    values = {"t2_seed": int(prof.seeds[0]), **convention_values(spread, len(labels), cfg0.num_clients),
              "t2_first": first.name, "t2_n_seeds": first.seeds,
              "t2_cov_source": most.name, "t2_cov_seeds": most.seeds,
              "t2_coverage_pct": round(100 * uncertainty.seed_range_coverage(most.seeds), 2),
              "t2_unw_min": round(rec.min(), 2), "t2_unw_max": round(rec.max(), 2),
              "t2_w_min": round(wrec.min(), 2), "t2_w_max": round(wrec.max(), 2), "t2_low_alpha": low,
              "t2_gap_low": round(gap_iv.estimate, 1), "t2_gap_low_lo": round(gap_iv.low, 1),
              "t2_gap_low_hi": round(gap_iv.high, 1),
              "t2_paper_unw_min": paper["recovery_unweighted"].min(),
              "t2_paper_unw_max": paper["recovery_unweighted"].max(),
              "t2_protocol_span": round(t1f["recovery_unweighted"].max() / t1f["recovery_unweighted"].min(), 2),
              "t2_alpha_span": round(rec.max() / rec.min(), 2),
              "t2_span_ratio": round(ratio_iv.estimate, 2), "t2_span_ratio_lo": round(ratio_iv.low, 2),
              "t2_span_ratio_hi": round(ratio_iv.high, 2),
              "t2_span_word": "clearly" if ratio_iv.high < 1 else "not clearly",
              "t2_paper_span_ratio": round(claims.span_ratio(summary.paper_table("table1"), paper), 2),
              "t2_acc_min": round(t2f["test_acc"].min(), 3), "t2_acc_max": round(t2f["test_acc"].max(), 3),
              "t2_level": round(100 * uncertainty.LEVEL),
              "t2_cv_low": round(cv_by_alpha[cv_by_alpha.index.min()], 1),
              "t2_cv_high": round(cv_by_alpha[cv_by_alpha.index.max()], 1),
              "t2_high_alpha": cv_by_alpha.index.max(),
              "t2_cv_low_largest": bool(cv_by_alpha.idxmax() == cv_by_alpha.index.min()),
              **live_values(live), **live_values(other, "t2_other"), **stage_values(archive.load_stage_study(tables.ARCHIVED)),
              **cross_values(None if cross is None else cross.table),
              **tables.matched_values(tables.ARCHIVED, MATCHED_CLAIMS, "t2")}
    return Findings(values, prof, sizes, spread, srcs, found, notes, paper,
                    tables.main_table("table2", first, paper), tables.full_table(srcs, paper),
                    None if cross is None else cross_table(cross.table))
