"""Summaries in the paper's convention, and the paper's own tables.

Per run: the median of each per-round metric over the last quarter of rounds
(the paper: the last 50 of 200). Across seeds: the median of those run
medians. The share of rounds with 1/Δ_S < 1 is pooled over every round of
every seed (the convention the paper's numbers imply).
"""

from __future__ import annotations

from importlib import resources
from io import StringIO

import numpy as np
import pandas as pd

from .runner import RunResult

#: Per-round columns summarised by their median over the tail window.
METRICS = ("T_mean", "recovery_unweighted", "recovery_weighted", "mu2_hat", "sigma2_hat", "test_acc", "train_loss")


def tail_window(rounds: int) -> int:
    """Rounds in the summary window: the last quarter, at least one (200 -> 50)."""
    return max(1, rounds // 4)


def summarize_run(metrics: pd.DataFrame) -> dict:
    """Median of each of :data:`METRICS` over the last quarter of rounds.

    Args:
        metrics: a run's per-round table (``RunResult.metrics``), one row per round.

    Returns:
        ``{metric: median}``; NaN entries (rounds without a test evaluation) are
        skipped, so ``test_acc`` is the median of the evaluations in the window.
    """
    tail = metrics.tail(tail_window(len(metrics)))
    return {m: float(np.nanmedian(tail[m])) if tail[m].notna().any() else float("nan") for m in METRICS}


def summarize(results: list[RunResult], by: list[str]) -> pd.DataFrame:
    """One row per setting: medians across seeds of per-run medians.

    Args:
        results: finished runs (any number of seeds per setting).
        by: RunConfig fields that name a setting, e.g. ``["batch_size", "local_epochs"]``.

    Returns:
        DataFrame indexed by ``by`` with columns :data:`METRICS`,
        ``pct_rounds_below_one`` (percent of all rounds of all seeds with
        unweighted 1/Δ_S < 1), ``seeds`` and ``rounds``; rows in input order.
    """
    rows = []
    for r in results:
        key = {f: str(getattr(r.config, f)) if f == "batch_size" else getattr(r.config, f) for f in by}
        rows.append({**key, **summarize_run(r.metrics), "seed": r.config.seed, "rounds": len(r.metrics),
                     "below_one": int((r.metrics.recovery_unweighted < 1).sum())})
    per_run = pd.DataFrame(rows)
    grouped = per_run.groupby(by, sort=False)
    out = grouped[list(METRICS)].median()
    out["pct_rounds_below_one"] = 100 * grouped["below_one"].sum() / grouped["rounds"].sum()
    out["seeds"] = grouped["seed"].nunique()
    out["rounds"] = grouped["rounds"].first()
    return out


#: Our column names for the paper's CSV columns.
PAPER_COLUMNS = {"local_steps": "T_mean", "recovery_unweighted": "recovery_unweighted",
                 "recovery_weighted": "recovery_weighted", "mu2_hat": "mu2_hat", "sigma2_hat": "sigma2_hat",
                 "test_accuracy": "test_acc", "pct_rounds_below_one": "pct_rounds_below_one"}


def paper_table(name: str) -> pd.DataFrame:
    """The paper's Table I ("table1") or its heterogeneity table ("table2") as a DataFrame.

    Indexed like :func:`summarize` output (``batch_size``, ``local_epochs`` or
    ``alpha``), with our column names. Source: Yan et al. (2026), arXiv:2608.23286.

    Raises:
        ValueError: unknown name.
    """
    files = {"table1": "table1_local_protocol.csv", "table2": "table2_heterogeneity.csv"}
    if name not in files:
        raise ValueError(f"name must be one of {sorted(files)}; got {name!r}")
    text = resources.files("maskfed").joinpath("paper", files[name]).read_text()
    df = pd.read_csv(StringIO(text), dtype={"batch_size": str})
    if name == "table1":
        df = df.set_index(["batch_size", "local_epochs"])
    else:
        df = df.rename(columns={"dirichlet_alpha": "alpha"}).set_index("alpha")
    return df.rename(columns=PAPER_COLUMNS)


def side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Our summary and the paper's values in adjacent columns: (quantity, "ours"/"paper")."""
    return compare({"ours": ours, "paper": paper}, columns)


def compare(sources: dict[str, pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """Several summaries of the same settings, each quantity's sources in adjacent columns.

    Each source stays its own column; nothing is pooled across sources.

    Args:
        sources: ``{name: summary}`` in column order, e.g. the live profile, archived
            profiles and the paper's table; all indexed by the same setting fields. The
            first source's index gives the rows; the others are aligned to it (missing
            rows and quantities become NaN).
        columns: quantities to show, e.g. :data:`maskfed.experiments.TABLE_COLUMNS`.

    Returns:
        DataFrame with (quantity, source name) columns.

    Raises:
        ValueError: no sources, or two sources indexed by different fields.
    """
    if not sources:
        raise ValueError("sources must name at least one summary; got none")
    first = next(iter(sources.values()))
    for name, df in sources.items():
        if list(df.index.names) != list(first.index.names):
            raise ValueError(f"source {name!r} is indexed by {list(df.index.names)}; "
                             f"expected {list(first.index.names)} like the first source")
    aligned = {name: df.reindex(first.index) for name, df in sources.items()}
    parts = {(c, name): (df[c] if c in df else pd.Series(np.nan, index=first.index))
             for c in columns for name, df in aligned.items()}
    return pd.DataFrame(parts, index=first.index)


def rank_correlation(a: pd.Series, b: pd.Series) -> float:
    """Spearman rank correlation of two aligned series (Pearson correlation of their ranks);
    pairs with a missing value are dropped. NaN with fewer than three pairs."""
    both = pd.concat([a, b], axis=1).dropna()
    if len(both) < 3:
        return float("nan")
    return float(both.iloc[:, 0].rank().corr(both.iloc[:, 1].rank()))


def log_trend(metrics: pd.DataFrame, column: str = "recovery_unweighted", frac: float = 0.5) -> float:
    """Least-squares slope of log(column) against round over the last ``frac`` of rounds (at least 3).

    Negative: the quantity was still falling when the run ended (per round, in
    natural-log units; -0.02 is about 2 % a round). Used to ask whether a short
    run's summary window has settled.

    Raises:
        ValueError: ``frac`` outside (0, 1] or fewer than 3 rounds in the window.
    """
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1]; got {frac}")
    tail = metrics.tail(max(3, int(round(len(metrics) * frac))))
    tail = tail[tail[column] > 0]
    if len(tail) < 3:
        raise ValueError(f"need at least 3 rounds with positive {column} in the window; got {len(tail)}")
    return float(np.polyfit(tail["round"].to_numpy(float), np.log(tail[column].to_numpy(float)), 1)[0])
