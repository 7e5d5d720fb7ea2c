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


def cohort_size(eq12: dict[str, pd.DataFrame], *, axes=None):
    """The cohort-size axis: measured 1/Δ_S (left) and its share of the ceiling, (1/Δ_S)/K_c (right),
    against K_c on log axes, one colour per protocol: markers are medians over cohorts, bars their
    interquartile range, lines eq. 12 with r measured at one K_c; the grey dashed line is K_c itself.

    Args:
        eq12: ``{protocol name: maskfed.fl.factor_axes.eq12_table(...)}``.
        axes: two matplotlib axes (None: a new figure).

    Returns:
        The two axes.
    """
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10.5, 4.0))
    left, right = axes
    for i, (name, t) in enumerate(eq12.items()):
        t = t.sort_values("k_c")
        for ax, (v, q1, q3, p) in ((left, ("median", "q1", "q3", "predicted")),
                                   (right, ("share", "share_q1", "share_q3", "predicted_share"))):
            ax.errorbar(t["k_c"], t[v], yerr=[t[v] - t[q1], t[q3] - t[v]], fmt="o", ms=5, capsize=2, color=f"C{i}",
                        label=f"{name}, measured")
            ax.plot(t["k_c"], t[p], "-", color=f"C{i}", lw=1, label=f"{name}, eq. 12 (r = {t['r'].iloc[0]:.3g})")
    ks = sorted({int(k) for t in eq12.values() for k in t["k_c"]})
    left.plot(ks, ks, "--", color="0.6", lw=1, label="ceiling K_c")
    right.axhline(1, color="0.6", ls="--", lw=1)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax, "x")
        ax.set_xlabel("cohort size K_c (clients)")
    _plain_if_short(left)
    _plain_if_short(right)
    left.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    right.set_ylabel("share recovered, (1/Δ_S)/K_c")
    left.legend(fontsize=6.5)
    return axes


def step_size(table: pd.DataFrame, *, ax: plt.Axes | None = None) -> plt.Axes:
    """The step-size axis: median 1/Δ_S over cohorts (bars: interquartile range) against lr, log
    axes, one line per (batch size, τ); solid lines are full batch, and the large-minibatch cells
    (measured at two lr only) are markers without a line.

    Args:
        table: :func:`maskfed.fl.factor_axes.lr_axis` output.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, ((bs, tau), g) in enumerate(table.groupby(["batch_size", "local_epochs"], sort=False)):
        g = g.sort_values("lr")
        v = g["recovery_unweighted"]
        ax.errorbar(g["lr"], v, yerr=[v - g["recovery_unweighted_q1"], g["recovery_unweighted_q3"] - v],
                    marker=MARKERS.get(str(bs), "D"), ms=5, capsize=2, color=f"C{i}",
                    ls=("-" if str(bs) == "full" else "--") if len(g) > 2 else "none", label=f"bs={bs}, τ={tau}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax, "x")
    _plain_if_short(ax)
    ax.set_xlabel("SGD step size lr")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    ax.legend(fontsize=7)
    return ax


def recovery_vs_parameters(table: pd.DataFrame, *, ax: plt.Axes | None = None, paper: pd.Series | None = None,
                           target: float | None = None) -> plt.Axes:
    """Median 1/Δ_S over cohorts against the model's parameter count (log axes) at θ of one target
    accuracy, one colour per protocol (solid lines: full batch); hollow markers are θ reached by
    FedAvg, filled ones by centralised SGD. ``paper``: the row of
    :func:`maskfed.fl.factor_axes.paper_overview` (its name holds ResNet-18-GN's parameter count; index:
    protocol labels), without its cliff, drawn as grey crosses at that count (each protocol at its own
    accuracy).

    Args:
        table: rows of :attr:`maskfed.fl.factor_axes.ModelStudy.table` (one or several studies).
        target: the target accuracy shown (None: every row of ``table``).
    """
    from maskfed.fl.factor_axes import protocol_label

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    t = table if target is None else table[table["target"] == target]
    for i, ((bs, tau), g) in enumerate(t.groupby(["batch_size", "local_epochs"], sort=False)):
        for source, gs in g.groupby("source"):
            gs = gs.sort_values("params")
            v = gs["recovery_unweighted"]
            ax.errorbar(gs["params"], v, yerr=[v - gs["recovery_unweighted_q1"], gs["recovery_unweighted_q3"] - v],
                        marker=MARKERS.get(str(bs), "D"), ms=5, capsize=2, color=f"C{i}",
                        mfc="none" if source == "fedavg" else f"C{i}", ls="-" if str(bs) == "full" else "--",
                        label=protocol_label(bs, tau) if source == "centralised" or g["source"].nunique() == 1 else None)
    if paper is not None:
        x = paper.name[1] if isinstance(paper.name, tuple) else paper.name  # paper_overview's row: its parameter count
        ax.scatter([x] * len(paper), paper.to_numpy(), marker="x", color="0.45", s=30, zorder=3,
                   label="paper's Table I (own trajectories)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_if_short(ax)
    ax.set_xlabel("parameters P (count)")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    ax.legend(fontsize=6.5, ncol=2)
    return ax
