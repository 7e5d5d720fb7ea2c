"""Summaries in the paper's convention, and the paper's own tables.

Per run: the median of each per-round metric over the last quarter of rounds
(the paper, Sec. IV-A: the last 50 of 200; a quarter at other round counts is
ours, keeping that ratio). Across seeds: the median of those run medians (the
paper, Table I caption). The share of rounds with 1/Δ_S < 1 is pooled over
every round of every seed (ours: the convention the paper's numbers suggest).
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
    """Rounds in the summary window: the last quarter, at least one (200 -> 50, 25 -> 6).

    At 200 rounds this is the paper's window (Sec. IV-A: "medians over the last 50 rounds"). At any
    other round count the paper says nothing; keeping the same quarter is ours.
    """
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


#: Numbers the paper states in its text rather than its tables (percent), with where it says them.
PAPER_TEXT = {
    "aggregation_gap_sec_iv_a": 0.04,  # Sec. IV-A: the two conventions "agree to within 0.04%" at alpha = 100
    "aggregation_gap_sec_iv_b": 1.0,   # Sec. IV-B: they "agree to within 1% in every cell" of Table I
    "shard_spread_alpha100": 3.0,      # Sec. IV-A: at alpha = 100 "shard sizes vary by under 3%"
}


def aggregation_gap_pct(table: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """Gap between the n_k-weighted and unweighted recovery factors of each row, in percent.

    ``gap_pct = 100 |w - u| / u`` with ``u = recovery_unweighted``, ``w = recovery_weighted``.
    With ``decimals`` (the values were printed rounded to that many decimals, as the paper's
    tables are), also the smallest and largest gap the unrounded values could have had:
    ``100 max(0, |w - u| - 10^-decimals) / u`` and ``100 (|w - u| + 10^-decimals) / u``
    (each value may sit up to half a unit of the last decimal from its print).

    Args:
        table: rows with columns ``recovery_unweighted`` and ``recovery_weighted`` (e.g.
            :func:`paper_table` or :func:`summarize` output).
        decimals: decimals the values were rounded to, or None.

    Returns:
        DataFrame on ``table``'s index with ``gap_pct`` (and ``gap_min_pct``, ``gap_max_pct``).

    Raises:
        ValueError: a column is missing, or ``decimals`` is negative.
    """
    missing = [c for c in ("recovery_unweighted", "recovery_weighted") if c not in table]
    if missing:
        raise ValueError(f"table lacks column(s) {missing}; columns: {list(table.columns)}")
    u, w = table["recovery_unweighted"], table["recovery_weighted"]
    diff = (w - u).abs()
    out = pd.DataFrame({"gap_pct": 100 * diff / u}, index=table.index)
    if decimals is not None:
        if decimals < 0:
            raise ValueError(f"decimals must be >= 0 or None; got {decimals}")
        unit = 10.0 ** -decimals
        out["gap_min_pct"] = 100 * (diff - unit).clip(lower=0) / u
        out["gap_max_pct"] = 100 * (diff + unit) / u
    return out


def side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Our summary and the paper's values in adjacent columns: (quantity, "ours"/"paper")."""
    paper = paper.reindex(ours.index)
    parts = {}
    for c in columns:
        parts[(c, "ours")] = ours[c]
        parts[(c, "paper")] = paper[c] if c in paper else np.nan
    return pd.DataFrame(parts, index=ours.index)


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
