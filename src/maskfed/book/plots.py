"""Figures of the book (matplotlib), and the one place for their defaults.

:func:`use_book_style` sets what every figure of the book shares (SVG output, text sizes, the
default size); ``maskfed.book.notebooks`` runs it first in every chapter. :func:`finish` checks a
finished figure against the book's rules and raises :class:`FigureError` naming each breach, so a
chapter whose figure breaks one stops (and ``make book`` with it):

- no wider than :data:`MAX_WIDTH_IN` (it then shows at its drawn size in the text column at a
  1400 px window) and no text smaller than :data:`MIN_FONT_PT` at that size;
- a label on every axis that shows tick labels (panels sharing an axis take its label from the one
  panel that shows the ticks), and a title on every panel (or one for the figure);
- legends that hide no data point or bar, and annotations that do not overlap;
- a log axis wherever more than :data:`SQUASHED_SHARE` of the positive values on a linear axis lie
  below 1/:data:`MAX_LINEAR_SPAN` of the largest (they would be squashed onto the axis).
"""

from __future__ import annotations

import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

MARKERS = {"32": "o", "128": "s", "full": "^"}

#: Smallest text of a figure (points) at its drawn size.
MIN_FONT_PT = 9.0
#: Widest figure (inches) that the book's text column (784 px at a 1400 px window, 96 px an inch)
#: shows at its drawn size; a wider one is scaled down and its text with it.
MAX_WIDTH_IN = 8.0
#: Largest ratio of the largest to the smallest positive value on a linear axis; beyond it (two
#: decades) small values become invisible and the axis must be logarithmic.
MAX_LINEAR_SPAN = 100.0
#: Share of the positive values on a linear axis that may lie below 1/MAX_LINEAR_SPAN of the largest
#: (squashed onto the axis, like the bs-16 bars beside full-batch ones) before a log axis is required.
SQUASHED_SHARE = 0.25
#: The defaults of every figure in the book (matplotlib rcParams).
STYLE = {
    "font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9, "legend.title_fontsize": 9, "figure.titlesize": 11,
    "figure.figsize": (6.4, 4.0),   # inches: 614 px in the 784 px column
    "svg.fonttype": "path",         # text drawn as outlines: the same on every reader's machine
    "figure.facecolor": "white", "savefig.facecolor": "white",
}


class FigureError(ValueError):
    """A figure breaks one of the book's figure rules (:func:`figure_problems`)."""


def use_book_style() -> None:
    """Apply :data:`STYLE` and, inside IPython (a chapter being executed), make the inline backend
    write SVG: figures are vectors, sharp at any zoom and any screen density."""
    plt.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
    except ImportError:  # not inside IPython: nothing is displayed inline
        return
    if get_ipython() is not None:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg")


def _data_points(ax: plt.Axes) -> np.ndarray:
    """Display coordinates (px) of every data point, error-bar end and bar top of ``ax``, [N, 2]."""
    pts = []
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), dtype=float)
        if line.get_visible() and len(xy) and line.get_transform() == ax.transData:
            pts.append(ax.transData.transform(xy))
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        offsets = np.asarray(coll.get_offsets(), dtype=float)
        if len(offsets) and offsets.ndim == 2:
            pts.append(coll.get_offset_transform().transform(offsets))
        for path in getattr(coll, "get_paths", lambda: [])():   # error bars (LineCollection)
            if len(path.vertices) and coll.get_transform() == ax.transData:
                pts.append(ax.transData.transform(np.asarray(path.vertices, dtype=float)))
    for patch in ax.patches:   # bars (a span drawn across the axes is no data)
        if (patch.get_visible() and isinstance(patch, plt.matplotlib.patches.Rectangle) and patch.get_height()
                and patch.get_transform() == ax.transData):
            x, y, w, h = patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()
            pts.append(ax.transData.transform([(x + w / 2, y + h), (x, y + h), (x + w, y + h)]))
    pts = [p for p in pts if len(p)]
    out = np.concatenate(pts) if pts else np.empty((0, 2))
    return out[np.isfinite(out).all(axis=1)]


def _positive_values(ax: plt.Axes, axis: str) -> np.ndarray:
    """The positive finite data values of ``ax`` along ``axis`` ("x" or "y"): lines, markers and
    bars, not the ends of error bars."""
    i = 0 if axis == "x" else 1
    caps = {id(cap) for c in ax.containers if isinstance(c, plt.matplotlib.container.ErrorbarContainer)
            for cap in c.lines[1]}   # the ends of error bars are no values
    vals = [np.asarray(line.get_xydata(), dtype=float)[:, i] for line in ax.get_lines()
            if line.get_visible() and len(line.get_xydata()) and line.get_transform() == ax.transData
            and id(line) not in caps]
    vals += [np.asarray(c.get_offsets(), dtype=float)[:, i] for c in ax.collections
             if len(c.get_offsets()) and np.asarray(c.get_offsets()).ndim == 2]
    if axis == "y":
        vals += [np.array([p.get_height() for p in ax.patches if isinstance(p, plt.matplotlib.patches.Rectangle)
                           and p.get_visible() and p.get_transform() == ax.transData])]
    flat = np.concatenate(vals) if vals else np.empty(0)
    return flat[np.isfinite(flat) & (flat > 0)]


def figure_problems(fig: plt.Figure) -> list[str]:
    """What in ``fig`` breaks the book's figure rules (see the module docstring); empty if nothing.

    Draws the figure once to measure its text and legends.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    width = fig.get_size_inches()[0]
    if width > MAX_WIDTH_IN + 1e-9:
        problems.append(f"the figure is {width:g} in wide: more than {MAX_WIDTH_IN:g} in is shrunk in the text column")
    small = sorted({(t.get_text().strip()[:30], t.get_fontsize()) for t in fig.findobj(plt.matplotlib.text.Text)
                    if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_FONT_PT - 1e-9})
    problems += [f"text {text!r} is {size:g} pt, below {MIN_FONT_PT:g} pt" for text, size in small]
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    for n, ax in enumerate(fig.axes, start=1):
        if not ax.get_visible() or not ax.has_data():
            continue
        where = f"panel {n}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        for axis, label, ticks in (("x", ax.get_xlabel(), ax.get_xticklabels()), ("y", ax.get_ylabel(), ax.get_yticklabels())):
            shown = any(t.get_visible() and t.get_text() for t in ticks)
            if not label.strip() and shown:   # a shared axis without tick labels takes its label from the panel that shows them
                problems.append(f"{where}: no {axis} label")
        if not ax.get_title().strip() and not suptitle.strip():
            problems.append(f"{where}: no title (set one on the panel or the figure)")
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            box = legend.get_window_extent(renderer)
            inside = [p for p in _data_points(ax) if box.x0 <= p[0] <= box.x1 and box.y0 <= p[1] <= box.y1]
            if inside:
                problems.append(f"{where}: the legend hides {len(inside)} data point(s)")
            covered = [t.get_text() for t in [ax.xaxis.label, ax.yaxis.label, ax.title, *ax.get_xticklabels(),
                                              *ax.get_yticklabels()]
                       if t.get_visible() and t.get_text() and t.get_window_extent(renderer).overlaps(box)]
            if covered:
                problems.append(f"{where}: the legend covers {', '.join(map(repr, covered[:3]))}")
        texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        for a, b in itertools.combinations(texts, 2):
            if a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer)):
                problems.append(f"{where}: labels {a.get_text()!r} and {b.get_text()!r} overlap")
        for axis, scale in (("x", ax.get_xscale()), ("y", ax.get_yscale())):
            vals = _positive_values(ax, axis)
            squashed = (vals < vals.max() / MAX_LINEAR_SPAN).mean() if len(vals) > 1 else 0.0
            if scale == "linear" and squashed > SQUASHED_SHARE:
                problems.append(f"{where}: {axis} values span {math.log10(vals.max() / vals.min()):.1f} decades "
                                f"on a linear axis, {100 * squashed:.0f}% of them below 1/{MAX_LINEAR_SPAN:g} of "
                                "the largest (use a log axis)")
    return problems


def describe(fig: plt.Figure) -> str:
    """A figure's own words, for its alt text: its title, then each panel's title with what it plots
    (the y label against the x label), e.g. ``"the factor by round: 1/Δ_S against round"``."""
    parts = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) is not None else []
    for ax in fig.axes:
        what = " against ".join(t for t in (ax.get_ylabel(), ax.get_xlabel()) if t)
        parts.append(": ".join(t for t in (ax.get_title(), what) if t))
    plain = {"$": "", "\\Delta": "Δ", "\\mu": "μ", "\\sigma": "σ", "\\tau": "τ", "\\theta": "θ",
             "\\alpha": "α", "\\lVert": "‖", "\\rVert": "‖", "\\hat": "", "\\,": " "}

    def words(text: str) -> str:   # mathtext as a reader says it: $1/\Delta_S$ -> 1/Δ_S
        for tex, char in plain.items():
            text = text.replace(tex, char)
        return text

    return "; ".join(dict.fromkeys(words(p) for p in parts if p)) or "figure"


def finish(fig: plt.Figure | None = None, alt: str | None = None) -> None:
    """Check a finished figure (default: the current one) against the book's rules, lay it out and, in a
    chapter being executed, show it as SVG with its alt text (``alt``, else :func:`describe`), which the
    book's ``figure_alt`` extension gives the page's image (the SVG's title), then close it.

    Raises:
        FigureError: the figure breaks a rule; the message lists every breach
            (:func:`figure_problems`).
    """
    fig = fig if fig is not None else plt.gcf()
    for _ in range(2):   # the layout moves the axes: legends below them and placed labels follow
        if not fig.get_constrained_layout():
            fig.tight_layout()
        for ax in fig.axes:
            _below_labels(ax)
    for ax in fig.axes:
        if getattr(ax, "_book_labels", None):
            for label in ax._book_labels[1]:
                label.remove()
            place_labels(ax, ax._book_labels[0])
    problems = figure_problems(fig)
    if problems:
        raise FigureError("the figure breaks the book's figure rules:\n- " + "\n- ".join(problems))
    _show_with_alt(fig, alt if alt is not None else describe(fig))


def _show_with_alt(fig: plt.Figure, alt: str) -> None:
    """Inside an IPython kernel, display ``fig`` as SVG whose title is ``alt`` and close it (so the inline
    backend does not show it a second time); elsewhere (tests, scripts) do nothing."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return
    import io

    from IPython.display import SVG, display

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Title": alt})
    plt.close(fig)
    display(SVG(buf.getvalue()))


def legend_outside(ax: plt.Axes, where: str = "right", **kwargs) -> None:
    """A legend outside the plotting area, so that it hides no data: to the right of ``ax`` or
    below it (in columns).

    Raises:
        ValueError: ``where`` is not "right" or "below".
    """
    if where == "right":
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)
    elif where == "below":
        legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), borderaxespad=0.0, **{"ncol": 2, **kwargs})
        legend._book_below = True
        _below_labels(ax)
    else:
        raise ValueError(f"where must be 'right' or 'below'; got {where!r}")


def _below_labels(ax: plt.Axes) -> None:
    """Move a legend placed by :func:`legend_outside` (below) just under the axes' tick labels and
    x label, which it must not cover (their height depends on the figure's current layout)."""
    legend = ax.get_legend()
    if legend is None or not getattr(legend, "_book_below", False):
        return
    legend.set_visible(False)   # the axes' extent without the legend itself
    ax.figure.canvas.draw()
    bottom = ax.get_tightbbox(ax.figure.canvas.get_renderer()).y0
    legend.set_visible(True)
    gap = 4 * ax.figure.dpi / 72   # 4 points
    y = ax.transAxes.inverted().transform((0, bottom - gap))[1]
    legend.set_bbox_to_anchor((0.5, y), transform=ax.transAxes)


#: Where :func:`place_labels` tries a label, as offsets (points) of its centre from its point: rings
#: of growing radius, eight directions each (wider than tall, as labels are).
LABEL_OFFSETS = tuple((round(1.8 * r * math.cos(a), 1), round(r * math.sin(a), 1))
                      for r in (9, 16, 24, 32) for a in np.radians([30, -30, 150, -150, 90, -90, 0, 180]))


def place_labels(ax: plt.Axes, points: list[tuple[float, float, str, dict]], offsets=LABEL_OFFSETS) -> None:
    """Annotate data points so that no two labels overlap: each label takes the first offset
    (points, from its data point to the label's centre) at which its box lies inside the axes and
    meets no label placed before it and no marker; failing that, the first at which it lies inside
    and meets no label.

    Args:
        points: ``(x, y, text, style)`` in data coordinates; ``style`` goes to ``ax.annotate``.
        offsets: candidate offsets in points, tried in order (:data:`LABEL_OFFSETS`).
    """
    ax.figure.canvas.draw()   # the final axes limits and size
    renderer = ax.figure.canvas.get_renderer()
    r = 4 * ax.figure.dpi / 72   # a marker's half width (4 points): labels keep off the markers too
    markers = [plt.matplotlib.transforms.Bbox([[x - r, y - r], [x + r, y + r]]) for x, y in _data_points(ax)]
    frame = ax.get_window_extent(renderer)   # labels stay inside the axes
    placed, labels = [], []
    for x, y, text, style in points:
        label, box = None, None
        for avoid in (placed + markers, placed):
            for dx, dy in offsets:
                label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), ha="center",
                                    va="center", **style)
                box = label.get_window_extent(renderer)
                within = (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1)
                if within and not any(box.overlaps(other) for other in avoid):
                    break
                label.remove()
                label = None
            if label is not None:
                break
        if label is None:   # nowhere free: the first place (figure_problems then reports the overlap)
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=offsets[0], ha="center",
                                va="center", **style)
            box = label.get_window_extent(renderer)
        placed.append(box)
        labels.append(label)
    ax._book_labels = (points, labels)   # finish() places them again after the layout changes


def plain_log_ticks(ax: plt.Axes, axis: str = "y") -> None:
    """Label a log axis's ticks as a reader writes numbers (3, 0.5, 100), not as ``3×10⁰``, which
    matplotlib uses when the axis spans less than a decade. On an axis spanning less than a decade
    every minor tick is labelled; on a longer one only 2 and 5 times a power of ten, so that the
    labels never run into each other.

    Args:
        ax: the axes.
        axis: "x" or "y".

    Raises:
        ValueError: ``axis`` is not "x" or "y".
    """
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y'; got {axis!r}")
    target = ax.yaxis if axis == "y" else ax.xaxis

    def minor(v, _):
        low, high = sorted(target.get_view_interval())
        if v <= 0 or low <= 0:
            return ""
        mantissa = round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
        return f"{v:g}" if high / low < 10 or mantissa in (2.0, 5.0) else ""

    target.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(plt.matplotlib.ticker.FuncFormatter(minor))


def _plain_if_short(ax: plt.Axes) -> None:
    """:func:`plain_log_ticks` on a log y axis spanning less than a decade (where matplotlib writes
    3×10⁰); a longer axis keeps matplotlib's powers of ten and unlabelled minor ticks."""
    low, high = ax.get_ylim()
    if low > 0 and high / low < 10:
        plain_log_ticks(ax, "y")


def recovery_vs_accuracy(ours: pd.DataFrame, paper: pd.DataFrame | None = None, *, k_c: int = 10,
                         ax: plt.Axes | None = None, ours_label: str = "this run",
                         others: dict[str, pd.DataFrame] | None = None,
                         ranges: dict[str, tuple[pd.DataFrame, pd.DataFrame]] | None = None,
                         title: str | None = "Recovery factor against test accuracy, nine local protocols") -> plt.Axes:
    """Figure 1: recovery factor 1/Δ_S against test accuracy for the local protocols.

    Marker shape encodes the batch size, the label beside each marker the local epochs τ (placed so
    that no two labels overlap); filled markers are ours, hollow grey ones the paper's (if given).
    Accuracy is a fraction on the axis as in the book's tables and prose (one convention on every
    page). The legend sits below the axes, where it hides no point.

    Args:
        ours, paper: summaries indexed by (batch_size, local_epochs) with
            columns ``recovery_unweighted`` and ``test_acc`` (fraction).
        k_c: cohort size, drawn as the ceiling of 1/Δ_S.
        others: further summaries of the same protocols (e.g. archived profiles),
            ``{legend label: summary}``, each drawn filled in its own colour.
        ranges: ``{legend label: (low, high)}``: seed ranges of a source (min and max over seeds,
            :func:`maskfed.analysis.uncertainty.seed_range`), drawn as bars in both directions.
        title: the panel's title (None: none).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 5.2))
    sources = [(ours, ours_label, dict(color="C0"))]
    sources += [(df, label, dict(color=f"C{i}")) for i, (label, df) in enumerate((others or {}).items(), start=1)]
    if paper is not None:
        sources.append((paper, "paper (Yan et al. 2026)", dict(facecolor="none", edgecolor="0.45")))
    labels = []
    for df, label, style in sources:
        if ranges and label in ranges:
            low, high = (t.reindex(df.index) for t in ranges[label])
            ax.errorbar(df["test_acc"], df["recovery_unweighted"], fmt="none", lw=0.9, capsize=2,
                        color=style.get("color", "0.45"),
                        xerr=[df["test_acc"] - low["test_acc"], high["test_acc"] - df["test_acc"]],
                        yerr=[df["recovery_unweighted"] - low["recovery_unweighted"],
                              high["recovery_unweighted"] - df["recovery_unweighted"]])
        for (bs, tau), row in df.iterrows():
            ax.scatter(row["test_acc"], row["recovery_unweighted"], marker=MARKERS.get(str(bs), "D"), s=55,
                       label=f"{label}, bs={bs}" if tau == df.loc[bs].index[0] else None, **style)
            labels.append((row["test_acc"], row["recovery_unweighted"], f"τ={tau}",
                           dict(fontsize=MIN_FONT_PT, color=style.get("color", "0.45"))))
    # the ceiling is named in the legend, not beside its line, where a point's τ label near K_c could meet it
    ax.axhline(k_c, color="0.6", ls="--", lw=1, label=f"ceiling K_c = {k_c}")
    ax.axhline(1, color="0.6", ls=":", lw=1)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("test accuracy (fraction), median over the summary window")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    if title:
        ax.set_title(title)
    legend_outside(ax, "below")
    place_labels(ax, labels)
    return ax


def against_stage(table: pd.DataFrame, value: str = "recovery_unweighted", *, ax: plt.Axes | None = None,
                  label: str = "1/Δ_S (unweighted)", k_c: int | None = None, legend: bool = True,
                  title: str | None = None) -> plt.Axes:
    """A stage-study quantity against the checkpoint's test accuracy, one line per local protocol.

    Markers are medians over cohorts, bars their interquartile range (columns ``<value>``,
    ``<value>_q1``, ``<value>_q3``, see :func:`maskfed.studies.stage.summarise_cohorts`); solid lines are
    full-batch protocols, dashed ones minibatch; marker shape is the batch size. Log scale.

    Args:
        table: one row per (stage, protocol) with ``stage_acc`` (fraction), ``batch_size``,
            ``local_epochs`` and the value columns.
        k_c: if given, drawn as the ceiling of 1/Δ_S.
        legend: a legend below the axes (:func:`legend_outside`), where it hides no point.
        title: the panel's title (None: none).
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
    if title:
        ax.set_title(title)
    if legend:
        legend_outside(ax, "below", ncol=3)
    return ax


def branches(branch: pd.DataFrame, *, ax: plt.Axes | None = None, legend: bool = True) -> plt.Axes:
    """Per-round recovery factor of the short FedAvg branches of the stage study, one colour per
    protocol, one line per (protocol, checkpoint); solid: full batch. Log scale.

    Args:
        branch: rows of :attr:`maskfed.studies.stage.StageStudy.branches` (``round``, ``stage``, ``batch_size``,
            ``local_epochs``, ``recovery_unweighted``).
        legend: a legend below the axes (:func:`legend_outside`), where it hides no point.
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
    if legend:
        legend_outside(ax, "below", ncol=3)
    return ax


def cohort_size(eq12: dict[str, pd.DataFrame], *, axes=None, legend: bool = True):
    """The cohort-size axis: measured 1/Δ_S (first panel) and its share of the ceiling, (1/Δ_S)/K_c
    (second panel), against K_c on log axes, one colour per protocol: markers are medians over
    cohorts, bars their interquartile range, lines eq. 12 with r measured at one K_c; the grey
    dashed line of the first panel is K_c itself, that of the second a share of 1. Each panel has
    its title; the legend (every series of both panels) sits below the second panel.

    Args:
        eq12: ``{protocol name: maskfed.studies.factor_axes.eq12_table(...)}``.
        axes: two matplotlib axes (None: a new figure, the two panels stacked, 6.4 in wide).
        legend: a legend below the second panel (:func:`legend_outside`), where it hides no point.

    Returns:
        The two axes.
    """
    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(6.4, 8.4), sharex=True)
    first, second = axes
    handles = []   # the first panel's series in drawing order: the legend of both panels
    for i, (name, t) in enumerate(eq12.items()):
        t = t.sort_values("k_c")
        for ax, (v, q1, q3, p) in ((first, ("median", "q1", "q3", "predicted")),
                                   (second, ("share", "share_q1", "share_q3", "predicted_share"))):
            measured = ax.errorbar(t["k_c"], t[v], yerr=[t[v] - t[q1], t[q3] - t[v]], fmt="o", ms=5, capsize=2,
                                   color=f"C{i}", label=f"{name}, measured")
            line, = ax.plot(t["k_c"], t[p], "-", color=f"C{i}", lw=1,
                            label=f"{name}, eq. 12 (r = {t['r'].iloc[0]:.3g})")
            if ax is first:
                handles += [measured, line]
    ks = sorted({int(k) for t in eq12.values() for k in t["k_c"]})
    handles += first.plot(ks, ks, "--", color="0.6", lw=1, label="ceiling K_c")
    second.axhline(1, color="0.6", ls="--", lw=1)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax, "x")
        ax.set_xlabel("cohort size K_c (clients)")
    _plain_if_short(first)
    _plain_if_short(second)
    first.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    second.set_ylabel("share recovered, (1/Δ_S)/K_c")
    first.set_title("1/Δ_S against the cohort size K_c")
    second.set_title("Share of the ceiling recovered, (1/Δ_S)/K_c")
    if legend:
        legend_outside(second, "below", handles=handles, labels=[h.get_label() for h in handles])
    return axes


def step_size(table: pd.DataFrame, *, ax: plt.Axes | None = None, legend: bool = True,
              title: str | None = None) -> plt.Axes:
    """The step-size axis: median 1/Δ_S over cohorts (bars: interquartile range) against lr, log
    axes with a tick at every lr measured, one line per (batch size, τ); solid lines are full batch,
    and the large-minibatch cells (measured at two lr only) are markers without a line.

    Args:
        table: :func:`maskfed.studies.factor_axes.lr_axis` output.
        legend: a legend below the axes (:func:`legend_outside`), where it hides no point.
        title: the panel's title (None: none).
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
    lrs = sorted(table["lr"].unique())
    ax.set_xticks(lrs, [f"{v:g}" for v in lrs])   # the step sizes measured, written plainly
    ax.set_xticks([], minor=True)
    _plain_if_short(ax)
    ax.set_xlabel("SGD step size lr")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    if title:
        ax.set_title(title)
    if legend:
        legend_outside(ax, "below", ncol=2)
    return ax


def ours_against_paper(table: pd.DataFrame, *, ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Our 1/Δ_S against the paper's, one point per setting (bars: our seed range), log axes, with the line
    y = x where the two agree; Table I settings as circles, Table II's as squares, each labelled.

    Args:
        table: :func:`maskfed.book.evidence.against_paper` (columns paper, ours, low, high, table).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 5.0))
    for t, marker, colour in (("I", "o", "C0"), ("II", "s", "C1")):
        g = table[table["table"] == t]
        if len(g):
            ax.errorbar(g["paper"], g["ours"], yerr=[g["ours"] - g["low"], g["high"] - g["ours"]], fmt=marker,
                        color=colour, ms=5, capsize=2, label=f"the paper's Table {t} settings")
    lo = min(table[["paper", "low"]].min()) / 1.15
    hi = max(table[["paper", "high"]].max()) * 1.15
    ax.plot([lo, hi], [lo, hi], color="0.5", ls="--", lw=1, label="ours = the paper's")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    plain_log_ticks(ax, "x")
    plain_log_ticks(ax, "y")
    place_labels(ax, [(p, o, name, {"fontsize": 9}) for name, p, o in zip(table.index, table["paper"], table["ours"])])
    ax.set_xlabel("the paper's 1/Δ_S (ResNet-18-GN)")
    ax.set_ylabel("ours: 1/Δ_S, median over seeds")
    if title:
        ax.set_title(title)
    legend_outside(ax, "below", ncol=2)
    return ax


def own_trajectory(metrics: pd.DataFrame, *, paper: float, thetas=(), window: int = 5, ax: plt.Axes | None = None,
                   title: str | None = None) -> plt.Axes:
    """A FedAvg trajectory's recovery factor round by round (points; line: rolling median over ``window``
    rounds), log scale, beside the paper's value for its protocol (dashed line), with the rounds whose θ
    were measured marked.

    Args:
        metrics: the run's ``metrics.csv`` (columns ``round``, ``recovery_unweighted``).
        paper: the paper's Table I value of the run's protocol (1/Δ_S, unweighted).
        thetas: rounds whose θ a study measured (vertical dotted lines).
        window: rounds of the rolling median (>= 1).

    Raises:
        ValueError: ``window`` < 1.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 round; got {window}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    r, v = metrics["round"], metrics["recovery_unweighted"]
    ax.plot(r, v, ".", ms=3, color="C0", alpha=0.5, label="1/Δ_S of each round")
    ax.plot(r, v.rolling(window, min_periods=1).median(), color="C0", lw=1.5, label=f"rolling median of {window} rounds")
    ax.axhline(paper, color="0.3", ls="--", lw=1.2, label=f"the paper's Table I ({paper:.2f})")
    for i, t in enumerate(thetas):
        ax.axvline(t, color="C3", ls=":", lw=1.2, label="θ measured" if i == 0 else None)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("FedAvg round")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    if title:
        ax.set_title(title)
    legend_outside(ax, "below", ncol=2)
    return ax


def recovery_vs_parameters(table: pd.DataFrame, *, ax: plt.Axes | None = None, paper: pd.Series | None = None,
                           target: float | None = None, legend: bool = True, title: str | None = None) -> plt.Axes:
    """Median 1/Δ_S over cohorts against the model's parameter count (log axes) at θ of one target
    accuracy, one colour per protocol (solid lines: full batch); hollow markers are θ reached by
    FedAvg, filled ones by centralised SGD. ``paper``: the row of
    :func:`maskfed.studies.factor_axes.paper_overview` (its name holds ResNet-18-GN's parameter count; index:
    protocol labels), without its cliff, drawn as grey crosses at that count (each protocol at its own
    accuracy).

    Args:
        table: rows of :attr:`maskfed.studies.factor_axes.ModelStudy.table` (one or several studies).
        target: the target accuracy shown (None: every row of ``table``).
        legend: a legend below the axes (:func:`legend_outside`), where it hides no point.
        title: the panel's title (None: none).
    """
    from maskfed.studies.factor_axes import protocol_label

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
    plain_log_ticks(ax, "y")
    ax.set_xlabel("parameters P (count)")
    ax.set_ylabel("recovery factor 1/Δ_S (unweighted)")
    if title:
        ax.set_title(title)
    if legend:
        legend_outside(ax, "below", ncol=2)
    return ax


def trajectories(results, *, ax=None, window: int = 3,
                 title: str | None = "1/Δ_S round by round (rolling median); grey: the summary window"):
    """Per-round recovery factor of each run (rolling median over ``window`` rounds), log scale,
    with the summary window (last quarter of rounds) shaded and the legend below the axes."""
    from maskfed.analysis.summary import tail_window

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.6))
    for r in results:
        m = r.metrics
        ax.plot(m["round"], m["recovery_unweighted"].rolling(window, min_periods=1).median(),
                lw=1.2, label=f"bs={r.config.batch_size}, τ={r.config.local_epochs}",
                ls="-" if r.config.batch_size == "full" else "--")
    rounds = len(results[0].metrics)
    ax.axvspan(rounds - tail_window(rounds) + 0.5, rounds + 0.5, color="0.9", zorder=0)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("round")
    ax.set_ylabel(f"1/Δ_S (rolling median of {window})")
    if title:
        ax.set_title(title)
    legend_outside(ax, "below", ncol=3)
    return ax


def throughput(df: pd.DataFrame, ax=None):
    """Bar chart of images/s by protocol (groups) and path (bars) on a log axis (a full-batch round
    moves a hundred times the images a second of a bs-16 one: on a linear axis the slow bars vanish),
    with the legend below the bars.

    Args:
        df: ``make bench`` rows (:data:`maskfed.perf.bench.COLUMNS`).
    """
    from maskfed.perf.bench import PATH_LABELS, PATHS

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.4))
    piv = df.assign(protocol=lambda d: "bs " + d["batch_size"].astype(str) + ", τ " + d["local_epochs"].astype(str)
                    + ((", " + d["precision"]) if d["precision"].nunique() > 1 else "")) \
        .pivot_table(index="protocol", columns="path", values="images_per_s", sort=False)
    piv = piv[[p for p in PATHS if p in piv.columns]].rename(columns=PATH_LABELS)
    piv.plot.bar(ax=ax, rot=0, width=0.8, legend=False)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    ax.set_ylabel("images / s (higher is faster, log scale)")
    ax.set_xlabel("local protocol (batch size bs, local epochs τ)")
    ax.set_title("Training throughput of one FedAvg round, by path")
    legend_outside(ax, "below")
    return ax


def masks_across_clients(rng: np.random.Generator, *, k_c: int = 5, blocks: int = 8, p: float = 0.5) -> plt.Figure:
    """Concept figure: independent against shared block masks across a cohort (Propositions 2 and 3).

    Left, each of ``k_c`` clients draws its own mask: block b of client k is kept (dark) with probability ``p``;
    right, one mask drawn per round is shared by every client. The row below each grid is the aggregate's
    kept share of each block (the mean over clients of the kept indicators): independent masks average it
    toward p, which dilutes the masking noise by the cohort (eq. 6); a shared mask keeps it at 0 or 1 (eq. 7).

    Args:
        rng: the generator every mask is drawn from (seeded by the chapter).
        k_c: clients in the cohort; blocks: parameter blocks B; p: keep probability, in (0, 1].

    Raises:
        ValueError: ``k_c`` or ``blocks`` below 1, or ``p`` outside (0, 1].
    """
    if k_c < 1 or blocks < 1:
        raise ValueError(f"k_c and blocks must be >= 1; got k_c={k_c}, blocks={blocks}")
    if not 0 < p <= 1:
        raise ValueError(f"p (keep probability) must lie in (0, 1]; got {p}")
    own_KxB = (rng.random((k_c, blocks)) < p).astype(float)
    shared_KxB = np.repeat((rng.random((1, blocks)) < p).astype(float), k_c, axis=0)
    fig, axes = plt.subplots(2, 2, figsize=(6.4, 3.6), height_ratios=[k_c, 1.3], sharex="col", sharey="row")
    fig.suptitle(f"blocks kept (dark) at p = {p:g}")
    for col, (grid, title) in enumerate(((own_KxB, "a mask per client"), (shared_KxB, "one shared mask"))):
        top, bottom = axes[0, col], axes[1, col]
        top.imshow(grid, cmap="Greys", vmin=0, vmax=1.25, aspect="auto")
        top.set_title(title)
        top.set_yticks(range(k_c), [str(k + 1) for k in range(k_c)])
        share = grid.mean(axis=0, keepdims=True)
        bottom.imshow(share, cmap="Greys", vmin=0, vmax=1.25, aspect="auto")
        for b in range(blocks):
            bottom.text(b, 0, f"{share[0, b]:.1g}", ha="center", va="center", fontsize=MIN_FONT_PT,
                        color="white" if share[0, b] > 0.6 else "black")
        bottom.set_yticks([0], ["mean"])
        bottom.set_xticks(range(blocks), [str(b + 1) for b in range(blocks)])
        bottom.set_xlabel("block b")
        if col == 0:
            top.set_ylabel("client k")
            bottom.set_ylabel("aggregate")
        else:
            top.tick_params(labelleft=False)
            bottom.tick_params(labelleft=False)
    return fig


def coherent_incoherent(rng: np.random.Generator, *, k_c: int = 6, spread_deg: float = 15.0):
    """Concept figure: coherent against incoherent addition of a cohort's updates (eq. 3 and eq. 12).

    Unit-length updates Δ_k in the plane, drawn head to tail, and their sum from the origin (thick): left, the
    directions spread ``spread_deg`` degrees around a shared one (signal dominates, ‖Σ_k Δ_k‖² near K_c²); right,
    independent uniform directions (noise dominates, ‖Σ_k Δ_k‖² near Σ_k ‖Δ_k‖² = K_c). Each panel's title gives
    its recovery factor 1/Δ_S (:func:`maskfed.core.diversity.recovery_factor`).

    Args:
        rng: the generator the directions are drawn from.
        k_c: clients in the cohort (>= 1); spread_deg: the coherent cohort's standard deviation of angles (degrees).

    Returns:
        ``(figure, {"coherent": 1/Δ_S, "incoherent": 1/Δ_S})``.

    Raises:
        ValueError: ``k_c`` below 1 or a negative ``spread_deg``.
    """
    import torch

    from maskfed.core.diversity import recovery_factor

    if k_c < 1 or spread_deg < 0:
        raise ValueError(f"k_c must be >= 1 and spread_deg >= 0; got k_c={k_c}, spread_deg={spread_deg}")
    angles = {"coherent": np.deg2rad(30.0 + spread_deg * rng.standard_normal(k_c)),
              "incoherent": rng.uniform(0.0, 2 * np.pi, k_c)}
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.3))
    factors = {}
    for ax, (name, a) in zip(axes, angles.items()):
        deltas_Kx2 = np.stack([np.cos(a), np.sin(a)], axis=1)
        factors[name] = recovery_factor(torch.as_tensor(deltas_Kx2))
        heads = np.vstack([np.zeros(2), np.cumsum(deltas_Kx2, axis=0)])
        for start, step in zip(heads[:-1], deltas_Kx2):
            ax.annotate("", xy=start + step, xytext=start, arrowprops=dict(arrowstyle="->", color="0.45", lw=1.2))
        ax.annotate("", xy=heads[-1], xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="C3", lw=3.0, alpha=0.45))
        pad = 0.6
        lo, hi = heads.min(axis=0) - pad, heads.max(axis=0) + pad
        half = max(hi - lo) / 2
        mid = (hi + lo) / 2
        ax.set_xlim(mid[0] - half, mid[0] + half)
        ax.set_ylim(mid[1] - half, mid[1] + half)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(rf"{name}: $1/\Delta_S$ = {factors[name]:.2f}")
    return fig, factors
