"""Findings of the chapter "Table II: the recovery factor across data heterogeneity"
(``notebooks/table2_heterogeneity.md``).

The chapter fixes the local protocol (the paper's bs = 32, τ = 2) and varies the Dirichlet
concentration α from near-IID (100) to strongly skewed (0.1), as the paper's Table II does (Yan et
al. 2026, Sec. IV-A and IV-B): the recovery factor 1/Δ_S unweighted (eq. 3) and n_k-weighted
(eq. 8) per α, the shard sizes behind the runs, the two ways to draw a Dirichlet split (Hsu et al.
2019 and NIID-Bench, Li et al. 2022) against the paper's "shard sizes vary by under 3 %", the span
across α against the span across Table I's protocols, and the archived stage study's comparison of
the α values at the same θ. :func:`findings` gathers the glued values and the frames;
:func:`table_conventions` gives the partition-convention table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from maskfed.analysis import claims, summary, uncertainty
from maskfed.book import evidence, tables
from maskfed.engine import partition, runner
from maskfed.engine.config import Profile
from maskfed.studies import archive, experiments, stage

#: Reader names of the two Dirichlet partition conventions (engine.partition.DIRICHLET_CONVENTIONS).
NAMES = {"hsu": "Hsu et al.", "niid_bench": "NIID-Bench"}

#: Number format of :func:`table_sizes`' CV (percent, as in the partition-convention table).
SIZES_FORMATS = {"cv": "{:.1f}"}

#: Caption of :func:`table_conventions`.
CONVENTIONS_CAPTION = ("Client shard sizes (samples) under each partition convention: smallest, largest, and "
                       "coefficient of variation (%)")

#: The verdict page's claims judged again at matched stage on this page (evidence.matched_stage_summary).
#: Caption of the α-cross table (:func:`cross_table`).
CROSS_CAPTION = ("The α-cross: 1/Δ_S at the smallest over the largest α at the same θ, median over the checkpoints "
                 "after initialisation (range), by the α whose trajectory gave θ")
MATCHED_CLAIMS = ("alpha_span", "alpha_weighting")


@dataclass(frozen=True)
class Findings:
    """What the chapter shows.

    ``values`` maps each glue name (``t2_...``) to a number or a short phrase; the rest are the
    frames and sources the tables are drawn from.
    """

    values: dict
    prof: Profile                # this build's profile (the banner's)
    sizes: pd.DataFrame          # table_sizes of this build's runs: index (alpha, seed); cv in percent
    spread: pd.DataFrame         # both conventions' shard sizes: alpha, convention, min, max (samples), cv (%)
    srcs: list[tables.Source]    # every source, closest to the paper's setting first; the live one last
    found: list                  # archive.summaries: the archived profiles that have Table II runs
    archive_notes: list[str]     # one sentence per archived profile without runs
    paper: pd.DataFrame          # the paper's Table II (summary.paper_table)
    main: pd.DataFrame           # tables.main_table of the closest source
    full: pd.DataFrame           # tables.full_table of every source
    cross: pd.DataFrame | None = None  # cross_table of the archived α-cross (None: not archived)

    @property
    def first(self) -> tables.Source:
        """The closest source (the table's lead)."""
        return self.srcs[0]


def partition_row(alpha: float, seed: int, part: dict) -> dict:
    """One row of the shard-size table from a run's ``partition.json``.

    Args:
        alpha: the run's Dirichlet α.
        seed: its seed.
        part: the parsed ``partition.json``; its ``sizes`` (samples per client) become ``cv``, the
            population standard deviation over the mean in percent; its other fields are kept.

    Raises:
        KeyError: ``part`` has no ``sizes``.
    """
    sizes = pd.Series(part["sizes"])
    return {"alpha": alpha, "seed": seed, **{k: v for k, v in part.items() if k != "sizes"},
            "cv": 100 * sizes.std(ddof=0) / sizes.mean()}


def table_sizes(results: list) -> pd.DataFrame:
    """The partitions behind the runs (:func:`partition_row` of each run's ``partition.json``),
    indexed by (alpha, seed); format ``cv`` (percent) with :data:`SIZES_FORMATS`."""
    rows = [partition_row(r.config.alpha, r.config.seed, json.loads((r.path / "partition.json").read_text()))
            for r in results]
    return pd.DataFrame(rows).set_index(["alpha", "seed"])


def convention_phrases(under: list[str]) -> dict:
    """What the paper's "under 3 %" says about the partition convention, as two short phrases.

    Args:
        under: the conventions (keys of :data:`NAMES`) whose shard sizes have a coefficient of
            variation under the paper's figure at the largest α.

    Returns:
        ``t2_conv_under``: the subject and verb before "a coefficient of variation under ...% here"
        ("only the Hsu et al. partition convention has", "both partition conventions have",
        "neither partition convention has"); ``t2_conv_points``: what follows "so".
    """
    if len(under) == 1:
        return {"t2_conv_under": f"only the {NAMES[under[0]]} partition convention has",
                "t2_conv_points": f"the paper's figure, read as a coefficient of variation, points to the "
                                  f"{NAMES[under[0]]} convention"}
    return {"t2_conv_under": "both partition conventions have" if under else "neither partition convention has",
            "t2_conv_points": "the figure does not single out either"}


def convention_values(spread: pd.DataFrame, n_images: int, num_clients: int) -> dict:
    """The values of "Two ways to draw a Dirichlet split" at the largest α of ``spread``.

    Args:
        spread: :func:`maskfed.engine.partition.shard_size_spread` rows as a frame (``alpha``,
            ``convention``, ``min``, ``max`` in samples, ``cv`` in percent).
        n_images: training images N.
        num_clients: clients K.

    Returns:
        ``t2_claim_spread`` (the paper's figure, percent), ``t2_conv_n``, ``t2_conv_k``,
        ``t2_conv_ahi`` (the largest α); per convention c, ``t2_{c}_cv`` (percent), ``t2_{c}_min``,
        ``t2_{c}_max`` (samples) and ``t2_{c}_relrange`` ((largest − smallest) / (N/K), percent);
        and :func:`convention_phrases`.
    """
    by = spread.set_index(["alpha", "convention"])
    a_hi = spread["alpha"].max()
    claim = summary.PAPER_TEXT["shard_spread_alpha100"]
    values = {"t2_claim_spread": claim, "t2_conv_n": n_images, "t2_conv_k": num_clients, "t2_conv_ahi": a_hi}
    for c in partition.DIRICHLET_CONVENTIONS:
        lo, hi = by.loc[(a_hi, c), "min"], by.loc[(a_hi, c), "max"]
        values |= {f"t2_{c}_cv": by.loc[(a_hi, c), "cv"], f"t2_{c}_min": lo, f"t2_{c}_max": hi,
                   f"t2_{c}_relrange": 100 * (hi - lo) / (n_images / num_clients)}
    under = [c for c in partition.DIRICHLET_CONVENTIONS if by.loc[(a_hi, c), "cv"] < claim]
    return values | convention_phrases(under)


def table_conventions(f: Findings) -> tuple[pd.DataFrame, dict]:
    """Both conventions' shard sizes: one row per α (largest first); columns (convention, statistic)
    with the smallest and largest shard (samples) and the CV (percent); and the columns' formats.
    Caption: :data:`CONVENTIONS_CAPTION`."""
    stats = {"min": "smallest", "max": "largest", "cv": "CV (%)"}
    shown = (f.spread.assign(convention=f.spread["convention"].map(NAMES))
             .pivot(index="alpha", columns="convention", values=list(stats)).rename(columns=stats)
             .sort_index(ascending=False))
    shown = shown.reorder_levels([1, 0], axis=1).sort_index(axis=1, level=0, sort_remaining=False)
    shown.columns.names = ["partition convention", None]
    return shown, {c: ("{:.1f}" if c[1] == "CV (%)" else "{:.0f}") for c in shown.columns}


def live_text(live: tables.Source, first: tables.Source, live_name: str) -> str:
    """The sentence under the tables: that this build's own profile is the closest evidence, or
    its live range of 1/Δ_S across α and test accuracies (fraction) against the closest source's.

    Args:
        live, first: :func:`maskfed.book.tables.sources`' last and first source.
        live_name: this build's profile name.
    """
    if first is live:
        return "This build's own profile is the closest evidence."
    lt, ft = live.table, first.table
    return (f"This build's live {live_name} profile ({live.rounds} rounds, {live.seeds} seed"
            f"{'s' if live.seeds > 1 else ''}) gives {lt['recovery_unweighted'].min():.2f}–"
            f"{lt['recovery_unweighted'].max():.2f} across α at test accuracies "
            f"{lt['test_acc'].min():.3f}–{lt['test_acc'].max():.3f}, far earlier in training than "
            f"{first.name} ({ft['test_acc'].min():.3f}–{ft['test_acc'].max():.3f}).")


def stage_text(study) -> str:
    """What the archived stage study says of the α values at the same θ, as the section's sentences.

    With a study: over the checkpoints after initialisation (stage > 0), the smallest over the
    largest α's median 1/Δ_S at the same checkpoint, unweighted and n_k-weighted (range and median,
    dimensionless), and whether the table's rise of the unweighted factor at low α reappears there
    (its median above 1 and above the weighted one's).

    Args:
        study: :func:`maskfed.studies.archive.load_stage_study` output (its ``profile`` and ``table``
            with ``experiment``, ``seed``, ``stage``, ``alpha``, ``recovery_unweighted``,
            ``recovery_weighted``), or None.
    """
    if study is None:
        return ("No archived stage study is available in this build, so the α values are not compared at "
                "the same θ here (the stage chapter measures them when it runs on an archived profile).")
    a2 = study.table[study.table.experiment == "table2"]
    wide = a2.pivot_table(index=["seed", "stage"], columns="alpha", values=["recovery_unweighted", "recovery_weighted"])
    lo_a, hi_a = min(a2["alpha"]), max(a2["alpha"])
    later = wide.drop(index=0, level="stage")  # after initialisation
    ru = later[("recovery_unweighted", lo_a)] / later[("recovery_unweighted", hi_a)]
    rw = later[("recovery_weighted", lo_a)] / later[("recovery_weighted", hi_a)]
    return (f"In the stage study of {study.profile} (every Table II α measured at the same checkpoints θ of each "
            f"seed's bs 32, τ 2 trajectory at α = {hi_a:g}; {len(later)} checkpoints after initialisation, each seed's "
            f"counted apart, so these are not the α-cross table's medians over seeds), the "
            f"unweighted recovery factor at α = {lo_a:g} is {ru.min():.2f} to {ru.max():.2f} times that at "
            f"α = {hi_a:g} "
            f"(median {ru.median():.2f}), the n_k-weighted one {rw.min():.2f} to {rw.max():.2f} times (median "
            f"{rw.median():.2f}). At matched θ the accuracy differences between the α runs play no part, so "
            + ("the rise of the unweighted factor at low α is not a training-stage effect: it appears at the same θ."
               if ru.median() > 1 and rw.median() < ru.median() else
               "the rise of the unweighted factor seen in the table does not reappear at the same θ: part of it is "
               "where the α runs are in training."))


def cross_table(cross: pd.DataFrame) -> pd.DataFrame:
    """The α-cross as the page shows it: one row per trajectory α (whose θ), the median over its checkpoints
    after initialisation of :func:`maskfed.studies.stage.cross_ratios` (smallest α over largest α at the same θ,
    unweighted and n_k-weighted) with their range, and the θ's test accuracies.

    Args:
        cross: :attr:`maskfed.studies.archive.ArchivedCross.table`.
    """
    r = stage.cross_ratios(cross)
    r = r[r.index.get_level_values("stage") > 0]
    rows = []
    for a, g in r.groupby(level="trajectory_alpha", sort=False):
        rows.append({"θ from the trajectory at α": f"{a:g}", "checkpoints": len(g),
                     "test accuracy of θ": f"{g['acc'].min():.2f}–{g['acc'].max():.2f}",
                     "unweighted ratio": f"{g['unweighted'].median():.2f} ({g['unweighted'].min():.2f}–{g['unweighted'].max():.2f})",
                     "weighted ratio": f"{g['weighted'].median():.2f} ({g['weighted'].min():.2f}–{g['weighted'].max():.2f})"})
    return pd.DataFrame(rows).sort_values("θ from the trajectory at α", key=lambda x: -x.astype(float))


def cross_text(cross: pd.DataFrame | None, profile_name: str) -> str:
    """The section's sentences on the α-cross: along which α's trajectories the unweighted factor at the
    smallest α lies above that at the largest (median over checkpoints after θ_0 of the per-checkpoint median
    over seeds), or, without an archived cross, the command that makes it."""
    if cross is None:
        return (f"The {profile_name} archive holds no α-cross yet: θ from the α = 1 and α = 0.1 trajectories as well, "
                f"with every α measured at each (made by: maskfed archive --profile {profile_name} --stage-cross), so the "
                "comparison above still rests on θ trained at α = 100 alone.")
    r = stage.cross_ratios(cross)
    r = r[r.index.get_level_values("stage") > 0]
    med = r.groupby(level="trajectory_alpha")["unweighted"].median().sort_index(ascending=False)
    above = [a for a, v in med.items() if v > 1]
    lo, hi = cross["alpha"].min(), cross["alpha"].max()
    return (f"The α-cross of {profile_name} measures every α at θ from every α's own trajectory. The unweighted "
            f"factor at α = {lo:g} over that at α = {hi:g}, at the same θ (median over checkpoints): "
            + "; ".join(f"{v:.2f} along the α = {a:g} trajectory" for a, v in med.items()) + ". "
            + ("It lies above 1 along every trajectory: the rise at low α survives once the route to θ is varied."
               if len(above) == len(med) else
               "It lies below 1 along every trajectory: at the same θ the smallest α recovers less, whichever α "
               "trained θ, so the rise in the table comes from where the α runs are in training." if not above else
               "It lies above 1 along the α = " + " and ".join(f"{a:g}" for a in above)
               + " trajectories only: whether low α raises the factor depends on which α trained θ."))


def findings(profile: Profile, *, workers: int | None = None, archived: list[str] | None = None) -> Findings:
    """The chapter's findings: this build's Table II runs (and its Table I runs, for the span
    comparison), the archived profiles' beside them, both partition conventions on the runs' own
    training labels, and every value the chapter's prose names.

    Args:
        profile: this build's profile (``load_profile`` with the chapter's data path and overrides).
        workers: worker processes for the runs; None: the profile's.
        archived: archived profiles shown beside this one (the chapter's parameter); None:
            :data:`maskfed.studies.archive.BOOK_PROFILES` less this profile.

    Returns:
        :class:`Findings`. Its ``values`` hold, among others, the closest source's range of 1/Δ_S
        across α (``t2_unw_min``, ...) and the paper's, the gap between the two conventions at the
        lowest α (``t2_gap_low``, percent) and the log-span of 1/Δ_S across α over that across
        Table I's protocols (``t2_span_ratio``), both as ``"estimate [low, high]"`` with 90 %
        bootstrap intervals over seeds and window rounds; the largest shard-size CV of this build's
        partitions at the lowest and the largest α (``t2_cv_low``, ``t2_cv_high``, percent);
        :func:`convention_values` and :func:`stage_text`.

    Raises:
        ValueError: the lowest α's shards are not the most unequal of this build's partitions (the
            prose says they are, asserted).
    """
    results = experiments.run(profile, "table2", workers=workers, progress=False)
    paper = summary.paper_table("table2")
    sizes = table_sizes(results)
    cfg0 = profile.run(profile.seeds[0])
    labels = runner.split_images(cfg0, runner.images_for(cfg0))[1].numpy()
    spread = pd.DataFrame(partition.shard_size_spread(labels, cfg0.num_clients, profile.table2.alphas, seed=cfg0.seed))
    spread["cv"] *= 100  # percent
    found, notes = archive.summaries("table2", live=profile.name, profiles=archived, whole=True)
    found1, _ = archive.summaries("table1", live=profile.name, profiles=[a.profile for a in found])
    srcs = tables.sources("table2", profile.name, results, found)
    first = srcs[0]
    first_results = found[0].results if found else results
    live_t1 = experiments.run(profile, "table1", workers=workers, progress=False)
    first_t1_results = found1[0].results if found and found1 and found1[0].profile == found[0].profile else live_t1
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
    if cv_by_alpha.idxmax() != cv_by_alpha.index.min():
        raise ValueError(f"the lowest α's shards are not the most unequal (largest CV per α, percent: "
                         f"{cv_by_alpha.to_dict()}); the chapter says they are")
    cross = archive.load_alpha_cross("cpu-paper")  # the archived profile the matched-stage view reads
    values = {"t2_seed": int(profile.seeds[0]),
              **convention_values(spread, len(labels), cfg0.num_clients),
              "t2_first": first.name, "t2_caption": tables.caption(first),
              "t2_unw_min": rec.min(), "t2_unw_max": rec.max(), "t2_w_min": wrec.min(), "t2_w_max": wrec.max(),
              "t2_low_alpha": low, "t2_gap_low": gap_iv.text(".1f"),
              "t2_paper_unw_min": paper["recovery_unweighted"].min(),
              "t2_paper_unw_max": paper["recovery_unweighted"].max(),
              "t2_protocol_span": t1f["recovery_unweighted"].max() / t1f["recovery_unweighted"].min(),
              "t2_alpha_span": rec.max() / rec.min(),
              "t2_span_ratio": ratio_iv.text(),
              "t2_paper_span_ratio": claims.span_ratio(summary.paper_table("table1"), paper),
              "t2_coverage": uncertainty.coverage_note(len({r.config.seed for r in first_results})),
              "t2_acc_min": t2f["test_acc"].min(), "t2_acc_max": t2f["test_acc"].max(),
              "t2_level": round(100 * uncertainty.LEVEL),
              "t2_cv_low": cv_by_alpha[cv_by_alpha.index.min()], "t2_cv_high": cv_by_alpha[cv_by_alpha.index.max()],
              "t2_high_alpha": cv_by_alpha.index.max(),
              "t2_span_text": "smaller than" if ratio_iv.high < 1 else "not clearly smaller than",
              "t2_live_text": live_text(srcs[-1], first, profile.name),
              "t2_st_text": stage_text(archive.load_stage_study(found[0].profile) if found else None),
              "t2_cross_text": cross_text(None if cross is None else cross.table, "cpu-paper"),
              "t2_matched": evidence.matched_stage_summary("cpu-paper", MATCHED_CLAIMS)}
    return Findings(values, profile, sizes, spread, srcs, found, notes, paper,
                    tables.main_table("table2", first, paper), tables.full_table(srcs, paper),
                    None if cross is None else cross_table(cross.table))
