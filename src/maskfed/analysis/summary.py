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

from maskfed.engine.runner import RunResult

#: Per-round columns summarised by their median over the tail window.
METRICS = ("T_mean", "recovery_unweighted", "recovery_weighted", "mu2_hat", "sigma2_hat", "test_acc", "train_loss")


def tail_window(rounds: int) -> int:
    """Rounds in the summary window: the last quarter, at least one (200 -> 50, 25 -> 6).

    At 200 rounds the paper's window (Sec. IV-A: "medians over the last 50 rounds"); elsewhere ours.
    """
    return max(1, rounds // 4)


def summarize_run(metrics: pd.DataFrame) -> dict:
    """Median of each of :data:`METRICS` over the last quarter of a run's per-round table.

    NaN entries (rounds without a test evaluation) are skipped, so ``test_acc`` is the median of the
    evaluations in the window. Returns ``{metric: median}``.
    """
    tail = metrics.tail(tail_window(len(metrics)))
    return {m: float(np.nanmedian(tail[m])) if tail[m].notna().any() else float("nan") for m in METRICS}


def summarize(results: list[RunResult], by: list[str]) -> pd.DataFrame:
    """One row per setting (``by``: RunConfig fields): medians across seeds of per-run medians.

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
    """The paper's Table I ("table1") or heterogeneity table ("table2") as a DataFrame.

    Indexed like :func:`summarize` (``batch_size``, ``local_epochs`` or ``alpha``), with our column
    names. Source: Yan et al. (2026), arXiv:2608.23286.

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
    """Gap 100 |w - u| / u between the n_k-weighted (w) and unweighted (u) recovery factors per row, in percent.

    With ``decimals`` (values printed rounded), also the bounds the unrounded values allow:
    100 max(0, |w - u| - 10^-decimals) / u and 100 (|w - u| + 10^-decimals) / u.

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



def protocol_order(index: pd.Index) -> pd.Index:
    """``index`` (levels among ``batch_size``, ``local_epochs``, ``alpha``) in the tables' order: batch sizes
    smallest first and "full" last, τ ascending, Dirichlet α largest (nearest IID) first."""
    def key(level: pd.Index) -> pd.Index:
        if level.name == "batch_size":
            return level.map(lambda b: float("inf") if str(b) == "full" else float(b))
        return -level.astype(float) if level.name == "alpha" else level

    return index.sort_values(key=key) if index.nlevels == 1 else index[
        np.lexsort([np.asarray(key(index.get_level_values(i))) for i in reversed(range(index.nlevels))])]


def compare(sources: dict[str, pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """Several summaries of the same kind of settings, each quantity's sources in adjacent columns (nothing pooled).

    The rows are every source's settings (their union, in :func:`protocol_order`), so a source run on another grid
    adds its rows rather than hiding the others'; a setting or quantity a source lacks is NaN.

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
    rows = first.index
    for df in sources.values():
        rows = rows.union(df.index, sort=False)
    rows = protocol_order(rows)
    aligned = {name: df.reindex(rows) for name, df in sources.items()}
    parts = {(c, name): (df[c] if c in df else pd.Series(np.nan, index=rows))
             for c in columns for name, df in aligned.items()}
    return pd.DataFrame(parts, index=rows)


def rank_correlation(a: pd.Series, b: pd.Series) -> float:
    """Spearman rank correlation of two aligned series (Pearson correlation of their ranks);
    pairs with a missing value are dropped. NaN with fewer than three pairs."""
    both = pd.concat([a, b], axis=1).dropna()
    if len(both) < 3:
        return float("nan")
    return float(both.iloc[:, 0].rank().corr(both.iloc[:, 1].rank()))


def table1_contrast(ours: pd.DataFrame, paper: pd.DataFrame) -> dict:
    """Full batch against minibatch in a Table I summary (:func:`maskfed.studies.experiments.table1`), and its agreement with the paper's.

    Returns:
        ``full_min``, ``full_max``, ``mini_min``, ``mini_max`` (1/Δ_S of the full-batch and minibatch
        protocols), ``cliff`` (smallest full-batch over largest minibatch 1/Δ_S) and ``spearman_rec``,
        ``spearman_sigma`` (rank correlations with the paper's 1/Δ_S and σ̂² over shared protocols).

    Raises:
        ValueError: ``ours`` lacks a full-batch or a minibatch protocol.
    """
    is_full = ours.index.get_level_values("batch_size") == "full"
    if is_full.all() or not is_full.any():
        raise ValueError("ours must hold full-batch and minibatch protocols (batch_size 'full' and a number)")
    rec = ours["recovery_unweighted"]
    both = ours.join(paper.add_suffix("_paper"))
    return {"full_min": float(rec[is_full].min()), "full_max": float(rec[is_full].max()),
            "mini_min": float(rec[~is_full].min()), "mini_max": float(rec[~is_full].max()),
            "cliff": float(rec[is_full].min() / rec[~is_full].max()),
            "spearman_rec": rank_correlation(both["recovery_unweighted"], both["recovery_unweighted_paper"]),
            "spearman_sigma": rank_correlation(both["sigma2_hat"], both["sigma2_hat_paper"])}


#: Relative tolerance of the identical-shards control, by device type (ours). On the CPU the updates are
#: bit-identical, so 1e-12 covers float64 rounding in the Gram matrix (about 1e-16 · K_c) and nothing else.
#: On CUDA (deterministic algorithms, maskfed.engine.determinism) 1e-9 allows for float64 GPU reductions,
#: still 1000 times below what a 0.1 % difference between two clients gives (about 1e-7 at K_c = 10).
CONTROL_TOLERANCE = {"cpu": 1e-12, "cuda": 1e-9}


def control_tolerance(device: str) -> float:
    """The control's relative tolerance for a run's device ("cpu", "cuda" or "cuda:N").

    Raises:
        ValueError: a device type not in :data:`CONTROL_TOLERANCE`.
    """
    kind = str(device).split(":")[0]
    if kind not in CONTROL_TOLERANCE:
        raise ValueError(f"device must be one of {sorted(CONTROL_TOLERANCE)} (optionally 'cuda:N'); got {device!r}")
    return CONTROL_TOLERANCE[kind]


def control_deviations_by_round(metrics: pd.DataFrame, k_c: int) -> pd.DataFrame:
    """How far an identical-shards control run is from its exact answer, round by round.

    Exact: 1/Δ_S = K_c in both conventions (eq. 3, 8), σ̂² = 0 (eq. 14), every Δ_k = Δ_1.

    Returns:
        One row per row of ``metrics`` (same index): ``dev_unweighted``, ``dev_weighted``
        (|1/Δ_S / K_c − 1|), ``sigma2_rel`` (|σ̂²| / A) and ``update_spread``
        (max_k ‖Δ_k − Δ_1‖ / ‖Δ_1‖), all dimensionless.

    Raises:
        ValueError: k_c < 2 (the control needs two clients) or a missing column.
    """
    if int(k_c) < 2:
        raise ValueError(f"k_c (cohort size) must be >= 2 for the control; got {k_c}")
    need = ["recovery_unweighted", "recovery_weighted", "sigma2_hat", "A", "update_spread"]
    missing = [c for c in need if c not in metrics.columns]
    if missing:
        raise ValueError(f"metrics lacks column(s) {missing}; a control run's metrics.csv has {need}")
    return pd.DataFrame({
        "dev_unweighted": np.abs(metrics["recovery_unweighted"] / k_c - 1),
        "dev_weighted": np.abs(metrics["recovery_weighted"] / k_c - 1),
        "sigma2_rel": np.abs(metrics["sigma2_hat"]) / metrics["A"],
        "update_spread": metrics["update_spread"],
    }, index=metrics.index)


def control_deviations(metrics: pd.DataFrame, k_c: int) -> dict:
    """The worst round of :func:`control_deviations_by_round` (same arguments and errors).

    Returns:
        Maxima over rounds (dimensionless): ``recovery_unweighted``, ``recovery_weighted``
        (|1/Δ_S / K_c − 1|), ``sigma2_rel`` (|σ̂²| / A), ``update_spread`` (max_k ‖Δ_k − Δ_1‖ / ‖Δ_1‖).
    """
    worst = control_deviations_by_round(metrics, k_c).max(skipna=False)  # a NaN round is no pass
    return {"recovery_unweighted": float(worst["dev_unweighted"]), "recovery_weighted": float(worst["dev_weighted"]),
            "sigma2_rel": float(worst["sigma2_rel"]), "update_spread": float(worst["update_spread"])}


def protocol_orderings(table: pd.DataFrame, column: str = "recovery_unweighted") -> dict:
    """The orderings the paper reads from Table I, checked on a Table I summary (default column: unweighted 1/Δ_S).

    Returns:
        ``cliff`` (every full-batch value above every minibatch one); ``n_falling`` of ``n_groups``
        (batch sizes with two or more τ whose values fall strictly as τ grows); ``t_inversions``
        (:func:`t_inversions`; None without a ``T_mean`` column).

    Raises:
        ValueError: the index lacks ``batch_size`` or ``local_epochs``.
    """
    names = list(table.index.names)
    if "batch_size" not in names or "local_epochs" not in names:
        raise ValueError(f"table must be indexed by batch_size and local_epochs; got index {names}")
    bs = table.index.get_level_values("batch_size").astype(str)
    full, mini = table[column][bs == "full"], table[column][bs != "full"]
    cliff = bool(len(full) and len(mini) and full.min() > mini.max())
    n_falling = n_groups = 0
    for _, g in table[column].groupby(bs, sort=False):
        g = g.sort_index(level="local_epochs")
        if len(g) >= 2:
            n_groups += 1
            n_falling += bool((g.diff().dropna() < 0).all())
    inversions = t_inversions(table, column) if "T_mean" in table else None
    return {"cliff": cliff, "n_falling": n_falling, "n_groups": n_groups, "t_inversions": inversions}


def t_inversions(t1: pd.DataFrame, column: str = "recovery_unweighted", steps: str = "T_mean") -> list[tuple]:
    """Pairs of protocols adjacent in local steps T, within the full-batch or the minibatch group, where
    the value does not fall as T grows (against the paper's "monotone in T within each group", Sec. IV-B).

    Returns:
        ``[(protocol at smaller T, protocol at larger T), ...]``, protocols as their index tuples.
    """
    out = []
    full = (t1.index.get_level_values("batch_size").astype(str) == "full")
    for group in (t1[full], t1[~full]):
        g = group.sort_values(steps)
        vals, names = g[column].to_numpy(float), list(g.index)
        out += [(names[i], names[i + 1]) for i in range(len(g) - 1) if not vals[i + 1] < vals[i]]
    return out


def eq12_identity_gap(metrics: pd.DataFrame, k_c: int) -> float:
    """Largest relative gap, over rounds, between eq. (12) fed with the round's estimates and its 1/Δ_S.

    With r̂ = ‖μ̂‖²/σ̂² (eq. 13-14), (K_c r̂ + 1)/(r̂ + 1) = K_c B / A = 1/Δ_S by algebra, so the gap is
    float rounding unless computed inconsistently. Rounds with σ̂² = 0 are skipped.

    Returns:
        max |pred / measured − 1| (dimensionless); 0.0 if every round is skipped.
    """
    from maskfed.core.diversity import predicted_recovery_factor

    m = metrics[metrics["sigma2_hat"] > 0]
    if m.empty:
        return 0.0
    pred = predicted_recovery_factor(m["mu2_hat"] / m["sigma2_hat"], k_c)
    return float(np.max(np.abs(np.asarray(pred, dtype=float) / m["recovery_unweighted"].to_numpy(float) - 1)))
