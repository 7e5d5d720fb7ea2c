"""Tables I and II as the book shows them: the closest evidence first, each cell with its seed range.

:func:`sources` orders a table's sources (archived profiles, closest to the paper's setting first, then the
build's profile); :func:`main_table` is the narrow table a reader sees first, :func:`full_table` every quantity
of every source; :func:`matched_table`, the chapters' claims judged again at matched stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from maskfed import book
from maskfed.analysis import claims, summary, uncertainty
from maskfed.book import evidence
from maskfed.engine.config import load_profile
from maskfed.names import CPU_PAPER
from maskfed.studies import archive, experiments

#: The archived profile whose stage study, α-cross and trend test the two chapters' fixed sentences describe.
ARCHIVED = CPU_PAPER


@dataclass
class Source:
    """One column group of a table: a profile's summary with its seed ranges (None: one seed or the paper)."""

    name: str
    table: pd.DataFrame
    low: pd.DataFrame | None = None
    high: pd.DataFrame | None = None
    seeds: int = 1
    rounds: int | None = None
    k_c: int | None = None         # the runs' cohort size K_c (the ceiling on 1/Δ_S)


def sources(experiment: str, live_name: str, live_results: list, found: list[archive.ArchivedSummary],
            live_first: bool = False) -> list[Source]:
    """The table's sources: each archived profile of ``found`` (:func:`maskfed.studies.archive.summaries`), then
    this build's profile ``live_name`` with its runs ``live_results`` of ``experiment``, or, with ``live_first`` (a
    reader's own settings), this build's profile first, named "``live_name`` (your settings)".

    Raises:
        ValueError: unknown experiment.
    """
    if experiment not in evidence.BY:
        raise ValueError(f"experiment must be one of {sorted(evidence.BY)}; got {experiment!r}")
    summarise = {"table1": experiments.table1, "table2": experiments.table2}[experiment]

    def one(name, results, table):
        n_seeds = len({r.config.seed for r in results})
        low, high = uncertainty.seed_range(results, evidence.BY[experiment]) if n_seeds > 1 else (None, None)
        return Source(name, table, low, high, n_seeds, results[0].config.rounds, results[0].config.cohort_size)

    out = [one(archive.column_name(a.profile), a.results, a.table) for a in found]
    live = one(live_label(live_name, live_first), live_results, summarise(live_results))
    return [live, *out] if live_first else [*out, live]


def live_label(profile_name: str, own: bool) -> str:
    """This build's source as the tables name it: the profile's column name, and "(your settings)" where a reader
    ran the chapter with their own settings (``own``)."""
    name = archive.column_name(profile_name, archived=False)
    return f"{name} (your settings)" if own else name


def roles(srcs: list[Source], live_first: bool) -> tuple[Source, Source, Source]:
    """Of :func:`sources`' list (same ``live_first``): this build's own source, the source it is compared with (the
    closest archived one; the live one itself when it is the only source) and the source with the most seeds."""
    live, other = (srcs[0], srcs[min(1, len(srcs) - 1)]) if live_first else (srcs[-1], srcs[0])
    return live, other, max(srcs, key=lambda s: s.seeds)


def with_range(median: float, low: float | None, high: float | None, fmt: str = ".2f") -> str:
    """``"1.23 (1.20–1.26)"``: a median over seeds and its min–max range; the median alone without a
    range; "–" for a missing value."""
    if median is None or (isinstance(median, float) and math.isnan(median)):
        return "–"
    if low is None or high is None:
        return f"{median:{fmt}}"
    return f"{median:{fmt}} ({low:{fmt}}–{high:{fmt}})"


#: The quantities of each table's main view, with their cell format.
MAIN = {"table1": (("recovery_unweighted", ".2f"), ("test_acc", ".3f")),
        "table2": (("recovery_unweighted", ".2f"), ("recovery_weighted", ".2f"), ("test_acc", ".3f"))}
#: Reader names of those quantities.
NAMES = {"recovery_unweighted": "1/Δ_S", "recovery_weighted": "1/Δ_S (n_k-wtd.)", "test_acc": "accuracy",
         "T_mean": "T"}


def main_table(experiment: str, first: Source, paper: pd.DataFrame) -> pd.DataFrame:
    """The narrow table a reader sees first: per row, the local steps T (Table I), and for each main quantity the
    closest source ``first``'s median over seeds with its range beside the ``paper``'s value; text cells, columns
    ``(quantity, source)``, rows the settings of either (:func:`maskfed.analysis.summary.protocol_order`), "–"
    where one lacks a setting."""
    rows = summary.protocol_order(first.table.index.union(paper.index, sort=False))
    t = first.table.reindex(rows)
    low, high = (None if x is None else x.reindex(rows) for x in (first.low, first.high))
    cols = {}
    if experiment == "table1":   # as every table writes T
        cols[("T", first.name)] = ["–" if pd.isna(v) else book.FORMATS["T_mean"].format(v) for v in t["T_mean"]]
    for q, fmt in MAIN[experiment]:
        lows = low[q] if low is not None else [None] * len(t)
        highs = high[q] if high is not None else [None] * len(t)
        cols[(NAMES[q], first.name)] = [with_range(m, lo, hi, fmt) for m, lo, hi in zip(t[q], lows, highs)]
        cols[(NAMES[q], "paper")] = [with_range(paper[q].get(i), None, None, fmt) for i in rows]
    return pd.DataFrame(cols, index=rows)


def full_table(srcs: list[Source], paper: pd.DataFrame) -> pd.DataFrame:
    """Every quantity of :data:`maskfed.studies.experiments.TABLE_COLUMNS` for every source and the paper,
    each quantity's sources side by side (:func:`maskfed.analysis.summary.compare`), on every source's settings."""
    return summary.compare({**{s.name: s.table for s in srcs}, "paper": paper}, experiments.TABLE_COLUMNS)


def matched_values(profile_name: str, keys, prefix: str) -> dict:
    """Whether ``profile_name``'s archive has what the matched-stage view needs: ``{prefix}_m_study`` (a stage study
    and Table I runs, a truth value) and ``{prefix}_m_cross`` (the α-cross's trajectory α besides the main one,
    largest first, as a tuple; empty without a cross). ``keys``: the claims the page judges (:func:`matched_table`)."""
    study = archive.load_stage_study(profile_name)
    loaded = archive.load_alpha_cross(profile_name)
    return {f"{prefix}_m_study": study is not None and bool(evidence.source_runs(profile_name)["table1"]),
            f"{prefix}_m_cross": tuple(evidence.cross_alphas(None if loaded is None else loaded.table))}


def matched_table(profile_name: str, keys) -> pd.DataFrame | None:
    """The claims ``keys`` judged at matched stage from ``profile_name``'s archived stage study and α-cross, by the
    verdict page's rule (:func:`maskfed.book.evidence.matched_stage_verdicts` with the paper's accuracy floor):
    one row per claim (its title), columns ``verdict`` and the checkpoints that ``vote``, ``hold``, hold ``in part``,
    fail ``within tolerance`` (inside the seeds' range), fail (``against``), and lie ``before`` the floor (shown,
    not counted). None without a stage study."""
    study = archive.load_stage_study(profile_name)
    runs = evidence.source_runs(profile_name)["table1"]
    if study is None or not runs:
        return None
    loaded = archive.load_alpha_cross(profile_name)
    main_alpha, steps = load_profile(profile_name).table1.alpha, experiments.table1(runs)["T_mean"]
    chosen = tuple(c for c in claims.CLAIMS if c.key in keys)
    m = evidence.matched_stage_verdicts(study.table, steps, chosen, cross=None if loaded is None else loaded.table,
                                        main_alpha=main_alpha, min_acc=evidence.paper_accuracy_floor())
    out = m[["verdict", "n", "n_holds", "n_partly", "n_tolerance", "n_fail", "n_before"]].astype(
        {k: int for k in ("n", "n_holds", "n_partly", "n_tolerance", "n_fail", "n_before")})
    out.columns = ["verdict", "vote", "hold", "in part", "within tolerance", "against", "before"]
    out.index = pd.Index([c.title for c in chosen], name="claim")
    return out
