"""Figures of the book (matplotlib/seaborn)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

MARKERS = {"32": "o", "128": "s", "full": "^"}


def plain_log_ticks(ax: plt.Axes, axis: str = "y") -> None:
    """Label a log axis's major and minor ticks as a reader writes numbers (3, 0.5, 100), not
    as ``3×10⁰``, which matplotlib uses when the axis spans less than a decade.

    Args:
        ax: the axes.
        axis: "x" or "y".

    Raises:
        ValueError: ``axis`` is not "x" or "y".
    """
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y'; got {axis!r}")
    fmt = plt.matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(fmt)
    target.set_minor_formatter(fmt)


def _plain_if_short(ax: plt.Axes) -> None:
    """:func:`plain_log_ticks` on a log y axis spanning less than a decade (where matplotlib writes
    3×10⁰); a longer axis keeps matplotlib's powers of ten and unlabelled minor ticks."""
    low, high = ax.get_ylim()
    if low > 0 and high / low < 10:
        plain_log_ticks(ax, "y")


def recovery_vs_accuracy(ours: pd.DataFrame, paper: pd.DataFrame | None = None, *, k_c: int = 10,
                         ax: plt.Axes | None = None, ours_label: str = "this run",
                         others: dict[str, pd.DataFrame] | None = None,
                         ranges: dict[str, tuple[pd.DataFrame, pd.DataFrame]] | None = None) -> plt.Axes:
    """Figure 1: recovery factor 1/Δ_S against test accuracy for the local protocols.

    Marker shape encodes the batch size, the annotation the local epochs τ;
    filled markers are ours, hollow grey ones the paper's (if given). Accuracy is a fraction on
    the axis as in the book's tables and prose (one convention on every page).

    Args:
        ours, paper: summaries indexed by (batch_size, local_epochs) with
            columns ``recovery_unweighted`` and ``test_acc`` (fraction).
        k_c: cohort size, drawn as the ceiling of 1/Δ_S.
        others: further summaries of the same protocols (e.g. archived profiles),
            ``{legend label: summary}``, each drawn filled in its own colour.
        ranges: ``{legend label: (low, high)}``: seed ranges of a source (min and max over seeds,
            :func:`maskfed.fl.uncertainty.seed_range`), drawn as bars in both directions.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    sources = [(ours, ours_label, dict(color="C0"))]
    sources += [(df, label, dict(color=f"C{i}")) for i, (label, df) in enumerate((others or {}).items(), start=1)]
    if paper is not None:
        sources.append((paper, "paper (Yan et al. 2026)", dict(facecolor="none", edgecolor="0.45")))
    for df, label, style in sources:
        if ranges and label in ranges:
            low, high = (t.reindex(df.index) for t in ranges[label])
            ax.errorbar(df["test_acc"], df["recovery_unweighted"], fmt="none", lw=0.9, capsize=2,
                        color=style.get("color", "0.45"),
                        xerr=[df["test_acc"] - low["test_acc"], high["test_acc"] - df["test_acc"]],
                        yerr=[df["recovery_unweighted"] - low["recovery_unweighted"],
                              high["recovery_unweighted"] - df["recovery_unweighted"]])
        for i, ((bs, tau), row) in enumerate(df.iterrows()):
            ax.scatter(row["test_acc"], row["recovery_unweighted"], marker=MARKERS.get(str(bs), "D"), s=55,
                       label=f"{label}, bs={bs}" if tau == df.loc[bs].index[0] else None, **style)
            ax.annotate(f"τ={tau}", (row["test_acc"], row["recovery_unweighted"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=8, color=style.get("color", "0.45"))
    ax.axhline(k_c, color="0.6", ls="--", lw=1)
    ax.text(ax.get_xlim()[0], k_c, f" ceiling K_c = {k_c}", va="bottom", fontsize=8, color="0.4")
    ax.axhline(1, color="0.6", ls=":", lw=1)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("test accuracy (fraction), median over the summary window")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    ax.legend(fontsize=7, loc="best")
    return ax


def against_stage(table: pd.DataFrame, value: str = "recovery_unweighted", *, ax: plt.Axes | None = None,
                  label: str = "1/Δ_S (unweighted)", k_c: int | None = None) -> plt.Axes:
    """A stage-study quantity against the checkpoint's test accuracy, one line per local protocol.

    Markers are medians over cohorts, bars their interquartile range (columns ``<value>``,
    ``<value>_q1``, ``<value>_q3``, see :func:`maskfed.fl.stage.summarise_cohorts`); solid lines are
    full-batch protocols, dashed ones minibatch; marker shape is the batch size. Log scale.

    Args:
        table: one row per (stage, protocol) with ``stage_acc`` (fraction), ``batch_size``,
            ``local_epochs`` and the value columns.
        k_c: if given, drawn as the ceiling of 1/Δ_S.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, ((bs, tau), g) in enumerate(table.groupby(["batch_size", "local_epochs"], sort=False)):
        g = g.sort_values("stage_acc")
        x = g["stage_acc"]
        ax.errorbar(x, g[value], yerr=[g[value] - g[f"{value}_q1"], g[f"{value}_q3"] - g[value]],
                    marker=MARKERS.get(str(bs), "D"), ms=5, lw=1.2, capsize=2, color=f"C{i}",
                    ls="-" if str(bs) == "full" else "--", label=f"bs={bs}, τ={tau}")
    if k_c is not None:
        ax.axhline(k_c, color="0.6", ls="--", lw=1)
    ax.set_yscale("log")
    _plain_if_short(ax)
    ax.set_xlabel("test accuracy of the checkpoint θ_s (fraction)")
    ax.set_ylabel(label)
    return ax


def branches(branch: pd.DataFrame, *, ax: plt.Axes | None = None) -> plt.Axes:
    """Per-round recovery factor of the short FedAvg branches of the stage study, one colour per
    protocol, one line per (protocol, checkpoint); solid: full batch. Log scale.

    Args:
        branch: rows of :attr:`maskfed.fl.stage.StageStudy.branches` (``round``, ``stage``, ``batch_size``,
            ``local_epochs``, ``recovery_unweighted``).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, ((bs, tau), g) in enumerate(branch.groupby(["batch_size", "local_epochs"], sort=False)):
        for j, (_, gs) in enumerate(g.groupby("stage")):
            ax.plot(gs["round"], gs["recovery_unweighted"], color=f"C{i}", marker=".", ls="-" if str(bs) == "full" else "--",
                    label=f"bs={bs}, τ={tau}" if j == 0 else None)
    ax.set_yscale("log")
    _plain_if_short(ax)
    ax.xaxis.set_major_locator(plt.matplotlib.ticker.MaxNLocator(integer=True))  # rounds are whole numbers
    ax.set_xlabel("round (ladder round + branch round)")
    ax.set_ylabel("1/Δ_S (one cohort a round)")
    return ax
