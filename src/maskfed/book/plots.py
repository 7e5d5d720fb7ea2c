"""Figures of the book (matplotlib), and the one place for their defaults.

:func:`use_book_style` sets what every figure shares (``maskfed.book.notebooks`` runs it first in every
chapter); :func:`finish` checks a finished figure against the book's rules and raises :class:`FigureError`
naming each breach: no wider than :data:`MAX_WIDTH_IN`, no text below :data:`MIN_FONT_PT`, a label on every
axis showing tick labels and a title on every panel (or the figure), legends hiding no data, annotations not
overlapping, and a log axis wherever more than :data:`SQUASHED_SHARE` of the positive values on a linear axis
lie below 1/:data:`MAX_LINEAR_SPAN` of the largest.
"""

from __future__ import annotations

import itertools
import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

MARKERS = {"32": "o", "128": "s", "full": "^"}
#: Markers of the other batch sizes a figure shows (a reader's or the smoke profile's grid), taken in order.
MORE_MARKERS = ("D", "v", "P", "X", "<", ">")


def markers_for(batch_sizes) -> dict[str, str]:
    """A distinct marker for each of ``batch_sizes`` (as text): :data:`MARKERS`' where it has one, the others from
    :data:`MORE_MARKERS` smallest batch first (cycling past six)."""
    sizes = [str(b) for b in dict.fromkeys(batch_sizes)]
    others = sorted((b for b in sizes if b not in MARKERS), key=lambda b: float("inf") if b == "full" else float(b))
    return {b: MARKERS.get(b) or MORE_MARKERS[others.index(b) % len(MORE_MARKERS)] for b in sizes}

#: Smallest text of a figure (points) at its drawn size.
MIN_FONT_PT = 9.0
#: Widest figure (inches) that the book's text column (784 px at a 1400 px window) shows at its drawn size.
MAX_WIDTH_IN = 8.0
#: Values below 1/MAX_LINEAR_SPAN of the largest are squashed onto a linear axis ...
MAX_LINEAR_SPAN = 100.0
#: ... and more than this share of them squashed requires a log axis.
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
    """Apply :data:`STYLE` and, inside IPython, make the inline backend write SVG."""
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
    """The positive finite data values of ``ax`` along ``axis`` ("x" or "y"), error-bar ends aside."""
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


def _shown_ticks(ax: plt.Axes, which: str = "major") -> list:
    """The tick labels of ``ax`` that are drawn: those whose tick lies within the axes' limits."""
    out = []
    for labels, (low, high), i in ((ax.get_xticklabels(which=which), sorted(ax.get_xlim()), 0),
                                   (ax.get_yticklabels(which=which), sorted(ax.get_ylim()), 1)):
        out += [t for t in labels if low - 1e-9 * abs(high) <= t.get_position()[i] <= high + 1e-9 * abs(high)]
    return out


def figure_problems(fig: plt.Figure) -> list[str]:
    """What in ``fig`` breaks the book's figure rules (see the module docstring); empty if nothing."""
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
            covered = [t.get_text() for t in [ax.xaxis.label, ax.yaxis.label, ax.title, *_shown_ticks(ax)]
                       if t.get_visible() and t.get_text() and t.get_window_extent(renderer).overlaps(box)]
            if covered:
                problems.append(f"{where}: the legend covers {', '.join(map(repr, covered[:3]))}")
        texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        for a, b in itertools.combinations(texts, 2):
            if text_box(a, renderer).overlaps(text_box(b, renderer)):   # the words; a leader line may cross
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
    """A figure's alt text: its title, then each panel's title with its y label against its x label."""
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


def _lay_out(fig: plt.Figure) -> None:
    """Lay ``fig`` out at its present size: legends below the axes and placed labels follow the moved axes."""
    for _ in range(2):
        if not fig.get_constrained_layout():
            fig.tight_layout()
        for ax in fig.axes:
            _below_labels(ax)
    for ax in fig.axes:
        if getattr(ax, "_book_labels", None):
            points, labels, drop = ax._book_labels
            for label in labels:
                label.remove()
            place_labels(ax, points, drop=drop)


def finish(fig: plt.Figure | None = None, alt: str | None = None) -> None:
    """Lay out a finished figure (default: the current one), check it against the book's rules and, in a kernel,
    show it as SVG whose title is ``alt`` (else :func:`describe`), with a phone layout where one passes the rules
    (:func:`phone_layout`), then close it.

    Raises:
        FigureError: the figure breaks a rule; the message lists every breach (:func:`figure_problems`).
    """
    fig = fig if fig is not None else plt.gcf()
    _lay_out(fig)
    problems = figure_problems(fig)
    if problems:
        raise FigureError("the figure breaks the book's figure rules:\n- " + "\n- ".join(problems))
    _show_with_alt(fig, alt if alt is not None else describe(fig))


#: Width (inches) of a figure's phone layout: with the 0.1 in margin savefig adds on each side, no wider than the
#: 358 px text column of a 390 px phone (3.73 in at 96 px an inch).
PHONE_WIDTH_IN = 3.5
#: The widest a phone layout may be once saved (inches): the phone's text column.
PHONE_COLUMN_IN = 358 / 96
#: Shortest plotting area (inches) a phone layout may leave a panel (one drawn thinner keeps 60% of its height).
MIN_PANEL_IN = 1.2


def _crowded_ticks(fig: plt.Figure) -> bool:
    """True where two tick labels of one axis of ``fig`` overlap (a narrow layout's usual failure)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        shown = _shown_ticks(ax, "both")
        for ticks in ([t for t in shown if t in ax.get_xticklabels(which="both")],
                      [t for t in shown if t in ax.get_yticklabels(which="both")]):
            boxes = [t.get_window_extent(renderer) for t in ticks if t.get_visible() and t.get_text().strip()]
            if any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2)):
                return True
    return False


def phone_layout(fig: plt.Figure) -> bool:
    """Redraw ``fig`` in place for a phone's column, :data:`PHONE_WIDTH_IN` wide at the same type sizes: panels in
    one row go one under another, legends right of their axes go below them. True if the result passes
    :func:`figure_problems` with no crowded tick labels and no wider than the column; False (the figure then keeps
    its desktop layout, which a phone scrolls sideways) otherwise, or where the figure is narrow already."""
    width, height = fig.get_size_inches()
    if width <= PHONE_WIDTH_IN:
        return False
    fig.canvas.draw()
    before = {ax: ax.get_window_extent(fig.canvas.get_renderer()).height for ax in fig.axes}   # px, desktop
    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    grid = axes[0].get_subplotspec().get_gridspec() if axes else None
    rows, cols = grid.get_geometry() if grid else (1, 1)
    stacked = cols > 1 and all(ax.get_subplotspec().get_gridspec() is grid for ax in axes)
    if stacked:   # column c of the grid goes under column c - 1: row r of it to row c * rows + r
        ratios = list(grid.get_height_ratios() or [1] * rows) * cols
        column = fig.add_gridspec(rows * cols, 1, height_ratios=ratios)
        for ax in axes:
            spec = ax.get_subplotspec()
            ax.set_subplotspec(column[spec.colspan.start * rows + spec.rowspan.start, 0])
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        renderer = fig.canvas.get_renderer()
        if getattr(legend, "_book_below", False) or legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1 - 1:
            # outside the axes (right or below): one entry a row, below them
            title = legend.get_title().get_text()
            labels = [t.get_text() for t in legend.get_texts()]
            own = dict(zip(*ax.get_legend_handles_labels()[::-1]))   # the drawn artists, markers and error bars kept
            handles = [own.get(label, proxy) for label, proxy in zip(labels, legend.legend_handles)]
            legend.remove()
            legend_outside(ax, "below", handles=handles, labels=labels, title=title or None, ncol=1)
    fig.set_size_inches(PHONE_WIDTH_IN, height * (cols if stacked else 1))   # each column of panels as tall as before
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for text in [fig._suptitle] if fig._suptitle is not None else []:
        _wrap(text, 0.95 * fig.bbox.width, renderer)
    for ax in fig.axes:   # a title or x label wider than its panel, a y label taller than it: wrapped
        _wrap(ax.title, ax.get_window_extent(renderer).width, renderer)
        _wrap(ax.xaxis.label, ax.get_window_extent(renderer).width, renderer)
        _wrap(ax.yaxis.label, 0.95 * ax.get_window_extent(renderer).height, renderer, vertical=True)
    _lay_out(fig)
    renderer = fig.canvas.get_renderer()
    below = sum(leg.get_window_extent(renderer).height for ax in fig.axes if (leg := ax.get_legend()) is not None
                and getattr(leg, "_book_below", False)) / fig.dpi   # inches the legends below take
    if below:
        fig.set_size_inches(PHONE_WIDTH_IN, fig.get_size_inches()[1] + below)
        _lay_out(fig)
    short = [ax for ax in fig.axes if ax.has_data() and (h := ax.get_window_extent(renderer).height)
             < MIN_PANEL_IN * fig.dpi and h < 0.6 * before[ax]]   # squeezed: not a panel drawn thin on purpose
    if short or figure_problems(fig) or _crowded_ticks(fig):
        return False
    pad = plt.rcParams["savefig.pad_inches"]
    return fig.get_tightbbox(fig.canvas.get_renderer()).width + 2 * pad <= PHONE_COLUMN_IN   # the saved SVG


def _wrap(text: plt.Text, limit_px: float, renderer, vertical: bool = False) -> None:
    """Break ``text`` into lines no longer than ``limit_px`` (its height if ``vertical``), between words and never
    inside a $...$ formula."""
    box = text.get_window_extent(renderer)
    size = box.height if vertical else box.width
    words = re.findall(r"(?:\$[^$]*\$|\S)+", text.get_text())
    if size <= limit_px or len(words) < 2:
        return
    per_line = max(8, int(len(text.get_text()) * limit_px / size))   # characters a line holds, about
    lines = [words[0]]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) <= per_line:
            lines[-1] += " " + word
        else:
            lines.append(word)
    text.set_text("\n".join(lines))


def _svg(fig: plt.Figure, alt: str) -> str:
    import io

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Title": alt})
    return buf.getvalue()


def figure_html(fig: plt.Figure, alt: str) -> str:
    """``fig`` as HTML: a ``div.maskfed-fig`` holding its SVG and, where one passes the rules, its
    :func:`phone_layout` (hidden by an inline style, so JupyterLab shows one figure; below 600 px maskfed.css shows
    it instead of the desktop one), each an ``img`` whose alt text is ``alt``. Leaves ``fig`` in its phone layout."""
    import base64
    import xml.etree.ElementTree as ET

    def img(kind: str, svg: str) -> ET.Element:
        src = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
        return ET.Element("img", {"class": f"maskfed-fig-{kind}", "alt": alt, "src": src},
                          **({"style": "display:none"} if kind == "phone" else {}))

    box = ET.Element("div", {"class": "maskfed-fig"})
    box.append(img("wide", _svg(fig, alt)))
    if phone_layout(fig):
        box.append(img("phone", _svg(fig, alt)))
        box.set("class", "maskfed-fig maskfed-has-phone")
    return ET.tostring(box, encoding="unicode", method="html")


def _show_with_alt(fig: plt.Figure, alt: str) -> None:
    """Inside an IPython kernel, display ``fig`` (:func:`figure_html`) and close it; elsewhere nothing."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return
    from IPython.display import HTML, display

    page = figure_html(fig, alt)
    plt.close(fig)
    display(HTML(page))


def legend_outside(ax: plt.Axes, where: str = "right", **kwargs) -> None:
    """A legend outside the plotting area: to the right of ``ax`` or below it (in columns).

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
    """Move a legend placed below by :func:`legend_outside` just under the axes' tick labels and x label."""
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
#: A label whose nearest edge lies farther than this (points) from its point is tied to it by a thin line.
LEADER_PT = 14


def box_gaps(box, points_Nx2: np.ndarray) -> np.ndarray:
    """Distance (display units) from each point to the nearest edge of ``box``; 0 inside it."""
    x, y = np.asarray(points_Nx2, dtype=float).reshape(-1, 2).T
    return np.hypot(np.maximum.reduce([box.x0 - x, np.zeros_like(x), x - box.x1]),
                    np.maximum.reduce([box.y0 - y, np.zeros_like(y), y - box.y1]))


def text_box(text: plt.Text, renderer=None):
    """The display box of ``text``'s words (an annotation's ``get_window_extent`` includes its leader line)."""
    return plt.matplotlib.text.Text.get_window_extent(text, renderer)


def place_labels(ax: plt.Axes, points: list[tuple[float, float, str, dict]], offsets=LABEL_OFFSETS,
                 drop: bool = False) -> None:
    """Annotate ``points`` (``(x, y, text, style)``, data coordinates; ``style`` goes to ``ax.annotate``): each
    label takes the first of ``offsets`` (points) at which it lies inside the axes and meets no earlier label,
    no marker and no error bar, failing that no earlier label and no marker, failing that no earlier label; with
    ``drop``, a label with no such place that is also nearer its own point than any other of ``points`` in its
    colour and off the horizontal reference lines (a ceiling) is left out
    (points piled on one spot), where otherwise it would name the wrong marker or overlap. A label placed farther
    than :data:`LEADER_PT` from its point, or no nearer its own point than (1.5 times) another marker, is tied to it
    by a thin line in its colour."""
    ax.figure.canvas.draw()   # the final axes limits and size
    renderer = ax.figure.canvas.get_renderer()
    r = 4 * ax.figure.dpi / 72   # a marker's half width (4 points): labels keep off the markers too
    centres = _data_points(ax).reshape(-1, 2)
    markers = [plt.matplotlib.transforms.Bbox([[x - r, y - r], [x + r, y + r]]) for x, y in centres]
    bars = []   # error bars (segments in data coordinates): a label across one reads garbled
    for lines in ax.collections:
        if isinstance(lines, plt.matplotlib.collections.LineCollection) and lines.get_transform() == ax.transData:
            for seg in map(ax.transData.transform, lines.get_segments()):
                (x0, y0), (x1, y1) = seg.min(axis=0), seg.max(axis=0)
                bars.append(plt.matplotlib.transforms.Bbox([[x0 - 1, y0 - 1], [x1 + 1, y1 + 1]]))
    frame = ax.get_window_extent(renderer)   # labels stay inside the axes
    if drop:   # horizontal reference lines (axhline: y in data, x across the axes) are obstacles too
        for line in ax.get_lines():
            ys = np.unique(np.asarray(line.get_ydata(), dtype=float))
            if line.get_transform() != ax.transData and len(ys) == 1:
                yd = ax.transData.transform((0.0, ys[0]))[1]
                markers.append(plt.matplotlib.transforms.Bbox([[frame.x0, yd - 1], [frame.x1, yd + 1]]))

    def nearest_own(box, x, y, style) -> bool:
        """The label's centre is nearer its own point than any other labelled point of its colour (its source's:
        a label of another colour cannot be taken for theirs)."""
        own = ax.transData.transform((x, y))
        centre = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
        kin = [(px, py) for px, py, _, st in points if st.get("color") == style.get("color")]
        others = ax.transData.transform(np.asarray(kin, dtype=float).reshape(-1, 2))
        others = others[np.hypot(*(others - own).T) > 1.0]
        return not len(others) or np.hypot(*(others - centre).T).min() > np.hypot(*(own - centre))

    def annotate(x, y, text, style, xytext, **leader):
        return ax.annotate(text, (x, y), textcoords="offset points", xytext=xytext, ha="center", va="center",
                           **leader, **style)

    placed, labels = [], []
    for x, y, text, style in points:
        label, box = None, None
        for avoid in (placed + markers + bars,) if drop else (placed + markers + bars, placed + markers, placed):
            for dx, dy in offsets[:24] if drop else offsets:   # with drop, not the farthest ring (a label floats there)
                label = annotate(x, y, text, style, (dx, dy))
                box = label.get_window_extent(renderer)
                within = (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1)
                if within and not any(box.overlaps(other) for other in avoid) and (not drop or nearest_own(box, x, y, style)):
                    break
                label.remove()
                label = None
            if label is not None:
                break
        if label is None and drop:
            continue
        if label is None:   # nowhere free: the first place (figure_problems then reports the overlap)
            label = annotate(x, y, text, style, offsets[0])
            box = label.get_window_extent(renderer)
        own = ax.transData.transform((x, y))
        gaps = box_gaps(box, centres)
        gap = box_gaps(box, own[None, :])[0]
        rivals = gaps[np.hypot(*(centres - own).T) > r]   # the other markers (not those on its own point)
        # far from its point, or no nearer it than to another marker: a line says which marker it names
        if gap > LEADER_PT * ax.figure.dpi / 72 or (len(rivals) and rivals.min() <= 1.5 * gap):
            xytext = label.xyann
            label.remove()
            label = annotate(x, y, text, style, xytext, arrowprops={
                "arrowstyle": "-", "lw": 0.6, "alpha": 0.7, "shrinkA": 1, "shrinkB": 4, "color": style.get("color", "0.3")})
        placed.append(box)
        labels.append(label)
    ax._book_labels = (points, labels, drop)   # finish() places them again after the layout changes


def plain_log_ticks(ax: plt.Axes, axis: str = "y") -> None:
    """Label a log ``axis`` ("x" or "y") as a reader writes numbers (3, 0.5, 100), not ``3×10⁰``: every minor tick
    within a decade, only 2 and 5 times a power of ten on a longer axis.

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
    """:func:`plain_log_ticks` on a log y axis spanning less than a decade."""
    low, high = ax.get_ylim()
    if low > 0 and high / low < 10:
        plain_log_ticks(ax, "y")


def _labelled(ax: plt.Axes, *, xlabel: str, ylabel: str, title: str | None = None, ncol: int | None = None) -> plt.Axes:
    """Set ``ax``'s axis labels and ``title`` (None: none) and, with ``ncol``, a legend below it in that many columns."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if ncol:
        legend_outside(ax, "below", ncol=ncol)
    return ax


def _by_protocol(table: pd.DataFrame):
    """``(i, batch size, τ, rows)`` of each local protocol of ``table``, in order of appearance."""
    for i, ((bs, tau), g) in enumerate(table.groupby(["batch_size", "local_epochs"], sort=False)):
        yield i, bs, tau, g


def _iqr_line(ax: plt.Axes, x, g: pd.DataFrame, value: str, **style):
    """Medians ``g[value]`` against ``x`` with their interquartile range (``<value>_q1``, ``_q3``) as bars."""
    v = g[value]
    return ax.errorbar(x, v, yerr=[v - g[f"{value}_q1"], g[f"{value}_q3"] - v], ms=5, capsize=2, **style)


def recovery_vs_accuracy(ours: pd.DataFrame, paper: pd.DataFrame | None = None, *, k_c: int | dict[str, int] = 10,
                         ax: plt.Axes | None = None, ours_label: str = "this run",
                         others: dict[str, pd.DataFrame] | None = None,
                         ranges: dict[str, tuple[pd.DataFrame, pd.DataFrame]] | None = None,
                         title: str | None = "Recovery factor against test accuracy per local protocol") -> plt.Axes:
    """Figure 1: recovery factor 1/Δ_S against test accuracy (fraction) for the local protocols: marker shape is
    the batch size (:func:`markers_for`), a thin line joins τ = 1, 2, 5 of one batch size, and τ is written beside
    the lead source's and the paper's markers where there is room; filled markers ours (the lead source's on top,
    the ``others`` smaller and lighter), hollow grey ones the paper's.

    ``ours``, ``paper`` and the ``others`` (``{legend label: summary}``, each in its own colour) are summaries indexed
    by (batch_size, local_epochs) with ``recovery_unweighted`` and ``test_acc``; ``ranges``: ``{legend label: (low,
    high)}`` seed ranges, drawn as bars; ``k_c``: the ceiling of 1/Δ_S, or ``{legend label: K_c}`` (the paper's as
    "paper") where the sources' cohorts differ: one dashed line each, named with its sources, the paper's "the rest".
    """
    ax = ax or plt.subplots(figsize=(6.4, 5.2))[1]
    sources = [(ours, ours_label, dict(color="C0"))]
    sources += [(df, label, dict(color=f"C{i}")) for i, (label, df) in enumerate((others or {}).items(), start=1)]
    if paper is not None:
        sources.append((paper, "paper (Yan et al. 2026)", dict(facecolor="none", edgecolor="0.45")))
    marker = markers_for(b for df, _, _ in sources for b in df.index.get_level_values(0))
    labels = []
    for df, label, style in sources:
        if ranges and label in ranges:
            low, high = (t.reindex(df.index) for t in ranges[label])
            ax.errorbar(df["test_acc"], df["recovery_unweighted"], fmt="none", lw=0.9, capsize=2,
                        color=style.get("color", "0.45"),
                        xerr=[df["test_acc"] - low["test_acc"], high["test_acc"] - df["test_acc"]],
                        yerr=[df["recovery_unweighted"] - low["recovery_unweighted"],
                              high["recovery_unweighted"] - df["recovery_unweighted"]])
        colour = style.get("color", "0.45")
        for bs in df.index.get_level_values(0).unique():   # a thin line joins τ = 1, 2, 5 of one batch size
            g = df.loc[bs].sort_index()
            ax.plot(g["test_acc"], g["recovery_unweighted"], "-", color=colour, lw=0.7, alpha=0.6, zorder=1)
        # the lead source on top at full size, the paper's hollow markers under it, the other sources smaller and
        # lighter below both (a reader's own run was hidden under the archived markers where they overlap)
        lead, ref = df is ours, df is paper
        # (the lead's markers edged in white, so that markers piled on one spot stay apart)
        look = (dict(s=55, zorder=3, edgecolors="white", linewidths=0.6) if lead else dict(s=55, zorder=2) if ref
                else dict(s=30, zorder=1.5, alpha=0.55))
        for (bs, tau), row in df.iterrows():
            ax.scatter(row["test_acc"], row["recovery_unweighted"], marker=marker[str(bs)],
                       label=f"{label}, bs={bs}" if tau == df.loc[bs].index[0] else None, **look, **style)
            if lead or ref:   # τ named for the lead source and the paper; the lines order the rest
                labels.append((row["test_acc"], row["recovery_unweighted"], f"τ={tau}",
                               dict(fontsize=MIN_FONT_PT, color=colour)))
    # the ceiling is named in the legend, not beside its line, where a point's τ label near K_c could meet it
    ceilings = {} if isinstance(k_c, dict) else {k_c: []}
    for label, k in (k_c.items() if isinstance(k_c, dict) else ()):
        ceilings.setdefault(k, []).append(label)
    for k, who in sorted(ceilings.items()):   # where the cohorts differ, each ceiling but the paper's names its sources
        named = "" if len(ceilings) == 1 else " (the rest)" if "paper" in who else f" ({', '.join(who)})"
        ax.axhline(k, color="0.6", ls="--", lw=1, label=f"ceiling K_c = {k}{named}")
    ax.axhline(1, color="0.6", ls=":", lw=1)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    _labelled(ax, xlabel="test accuracy (fraction), median over the summary window",
              ylabel="recovery factor 1/Δ_S (unweighted)", title=title, ncol=2)
    place_labels(ax, labels, drop=True)
    return ax


def against_stage(table: pd.DataFrame, value: str = "recovery_unweighted", *, ax: plt.Axes | None = None,
                  label: str = "1/Δ_S (unweighted)", k_c: int | None = None, legend: bool = True,
                  title: str | None = None) -> plt.Axes:
    """A stage-study quantity ``value`` (medians over cohorts, bars their interquartile range) against the
    checkpoint's test accuracy ``stage_acc``, one line per local protocol (solid: full batch), log scale;
    ``k_c``: drawn as the ceiling of 1/Δ_S."""
    ax = ax or plt.subplots(figsize=(6.4, 4.2))[1]
    marker = markers_for(table["batch_size"])
    for i, bs, tau, g in _by_protocol(table):
        g = g.sort_values("stage_acc")
        _iqr_line(ax, g["stage_acc"], g, value, marker=marker[str(bs)], lw=1.2, color=f"C{i}",
                  ls="-" if str(bs) == "full" else "--", label=f"bs={bs}, τ={tau}")
    if k_c is not None:
        ax.axhline(k_c, color="0.6", ls="--", lw=1)
    ax.set_yscale("log")
    _plain_if_short(ax)
    return _labelled(ax, xlabel="test accuracy of the checkpoint θ_s (fraction)", ylabel=label, title=title,
                     ncol=3 if legend else None)


def branches(branch: pd.DataFrame, *, ax: plt.Axes | None = None, legend: bool = True) -> plt.Axes:
    """Per-round recovery factor of the stage study's FedAvg branches
    (:attr:`maskfed.studies.stage.StageStudy.branches`), one colour per protocol, one line per (protocol,
    checkpoint); solid: full batch. Log scale."""
    ax = ax or plt.subplots(figsize=(6.4, 3.6))[1]
    for i, bs, tau, g in _by_protocol(branch):
        for j, (_, gs) in enumerate(g.groupby("stage")):
            ax.plot(gs["round"], gs["recovery_unweighted"], color=f"C{i}", marker=".", ls="-" if str(bs) == "full" else "--",
                    label=f"bs={bs}, τ={tau}" if j == 0 else None)
    ax.set_yscale("log")
    _plain_if_short(ax)
    ax.xaxis.set_major_locator(plt.matplotlib.ticker.MaxNLocator(integer=True))  # rounds are whole numbers
    return _labelled(ax, xlabel="round (ladder round + branch round)", ylabel="1/Δ_S (one cohort a round)",
                     ncol=3 if legend else None)


def cohort_size(eq12: dict[str, pd.DataFrame], *, axes=None, legend: bool = True):
    """The cohort-size axis: measured 1/Δ_S (first panel) and its share of the ceiling, (1/Δ_S)/K_c
    (second panel), against K_c on log axes, one colour per protocol: markers are medians over
    cohorts, bars their interquartile range, lines eq. 12 with r measured at one K_c; grey dashed: K_c
    itself and a share of 1. The legend of both panels sits below the second.

    Args:
        eq12: ``{protocol name: maskfed.studies.factor_axes.eq12_table(...)}``.
        axes: two matplotlib axes (None: a new figure, the two panels stacked).

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
    """The step-size axis (:func:`maskfed.studies.factor_axes.lr_axis`): median 1/Δ_S over cohorts (bars:
    interquartile range) against lr, log axes with a tick at every lr measured, one line per (batch size, τ);
    solid lines are full batch, and cells measured at two lr only are markers without a line."""
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    marker = markers_for(table["batch_size"])
    for i, bs, tau, g in _by_protocol(table):
        g = g.sort_values("lr")
        _iqr_line(ax, g["lr"], g, "recovery_unweighted", marker=marker[str(bs)], color=f"C{i}",
                  ls=("-" if str(bs) == "full" else "--") if len(g) > 2 else "none", label=f"bs={bs}, τ={tau}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    lrs = sorted(table["lr"].unique())
    ax.set_xticks(lrs, [f"{v:g}" for v in lrs])   # the step sizes measured, written plainly
    ax.set_xticks([], minor=True)
    _plain_if_short(ax)
    return _labelled(ax, xlabel="SGD step size lr", ylabel="recovery factor 1/Δ_S (unweighted)", title=title,
                     ncol=2 if legend else None)


def ours_against_paper(table: pd.DataFrame, *, source: str = "ours", ax: plt.Axes | None = None,
                       title: str | None = None) -> plt.Axes:
    """Our 1/Δ_S against the paper's, one labelled point per setting (bars: our seed range), log axes, with the
    line y = x; Table I settings as circles, Table II's as squares. ``table``:
    :func:`maskfed.book.evidence.against_paper`; ``source``: the name of the runs on the y axis (its label)."""
    ax = ax or plt.subplots(figsize=(6.4, 5.0))[1]
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
    return _labelled(ax, xlabel="the paper's 1/Δ_S (ResNet-18-GN)", ylabel=f"{source}: 1/Δ_S, median over seeds",
                     title=title, ncol=2)


def own_trajectory(metrics: pd.DataFrame, *, paper: float, thetas=(), window: int = 5,
                   summarised: tuple[int, int] | None = None, ax: plt.Axes | None = None,
                   title: str | None = None) -> plt.Axes:
    """A FedAvg run's recovery factor round by round (``metrics``: its ``metrics.csv``; points, and a rolling
    median over ``window`` rounds), log scale, beside the paper's Table I value ``paper`` (dashed), with the
    rounds ``thetas`` whose θ were measured marked and the rounds ``summarised`` (first, last: the window a
    summary takes its medians over) shaded.

    Raises:
        ValueError: ``window`` < 1.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 round; got {window}")
    ax = ax or plt.subplots(figsize=(6.4, 4.0))[1]
    if summarised is not None:
        ax.axvspan(summarised[0] - 0.5, summarised[1] + 0.5, color="0.92", zorder=0,
                   label=f"rounds {summarised[0]}-{summarised[1]}, summarised")
    r, v = metrics["round"], metrics["recovery_unweighted"]
    ax.plot(r, v, ".", ms=3, color="C0", alpha=0.5, label="1/Δ_S of each round")
    ax.plot(r, v.rolling(window, min_periods=1).median(), color="C0", lw=1.5, label=f"rolling median of {window} rounds")
    ax.axhline(paper, color="0.3", ls="--", lw=1.2, label=f"the paper's Table I ({paper:.2f})")
    for i, t in enumerate(thetas):
        ax.axvline(t, color="C3", ls=":", lw=1.2, label="θ measured" if i == 0 else None)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    return _labelled(ax, xlabel="FedAvg round", ylabel="recovery factor 1/Δ_S (unweighted)", title=title, ncol=2)


def recovery_vs_parameters(table: pd.DataFrame, *, ax: plt.Axes | None = None, paper: pd.Series | None = None,
                           target: float | None = None, legend: bool = True, title: str | None = None) -> plt.Axes:
    """Median 1/Δ_S over cohorts against the model's parameter count (log axes) at θ of accuracy ``target``
    (None: every row of ``table``, rows of :attr:`maskfed.studies.factor_axes.ModelStudy.table`), one colour per
    protocol (solid: full batch); hollow markers are θ reached by FedAvg, filled ones by centralised SGD.
    ``paper``: a row of :func:`maskfed.studies.factor_axes.paper_overview` (its name holds ResNet-18-GN's parameter
    count), drawn as grey crosses at that count."""
    from maskfed.studies.factor_axes import protocol_label

    ax = ax or plt.subplots(figsize=(6.4, 4.2))[1]
    t = table if target is None else table[table["target"] == target]
    marker = markers_for(t["batch_size"])
    for i, bs, tau, g in _by_protocol(t):
        for source, gs in g.groupby("source"):
            gs = gs.sort_values("params")
            _iqr_line(ax, gs["params"], gs, "recovery_unweighted", marker=marker[str(bs)], color=f"C{i}",
                      mfc="none" if source == "fedavg" else f"C{i}", ls="-" if str(bs) == "full" else "--",
                      label=protocol_label(bs, tau) if source == "centralised" or g["source"].nunique() == 1 else None)
    if paper is not None:
        x = paper.name[1] if isinstance(paper.name, tuple) else paper.name  # paper_overview's row: its parameter count
        ax.scatter([x] * len(paper), paper.to_numpy(), marker="x", color="0.45", s=30, zorder=3,
                   label="paper's Table I (own trajectories)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    return _labelled(ax, xlabel="parameters P (count)", ylabel="recovery factor 1/Δ_S (unweighted)", title=title,
                     ncol=2 if legend else None)


def trajectories(results, *, ax=None, window: int = 3,
                 title: str | None = "1/Δ_S round by round (rolling median); grey: the summary window"):
    """Per-round recovery factor of each run (rolling median over ``window`` rounds), log scale,
    with the summary window (last quarter of rounds) shaded and the legend below the axes."""
    from maskfed.analysis.summary import tail_window

    ax = ax or plt.subplots(figsize=(6.4, 4.6))[1]
    for r in results:
        m = r.metrics
        ax.plot(m["round"], m["recovery_unweighted"].rolling(window, min_periods=1).median(),
                lw=1.2, label=f"bs={r.config.batch_size}, τ={r.config.local_epochs}",
                ls="-" if r.config.batch_size == "full" else "--")
    rounds = len(results[0].metrics)
    ax.axvspan(rounds - tail_window(rounds) + 0.5, rounds + 0.5, color="0.9", zorder=0)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    return _labelled(ax, xlabel="round", ylabel=f"1/Δ_S (rolling median of {window})", title=title, ncol=3)


def throughput(df: pd.DataFrame, ax=None):
    """Bar chart of images/s by protocol (groups) and path (bars) on a log axis, legend below; ``df``: ``make
    bench`` rows (:data:`maskfed.perf.bench.COLUMNS`)."""
    from maskfed.perf.bench import PATH_LABELS, PATHS

    ax = ax or plt.subplots(figsize=(6.4, 4.4))[1]
    piv = df.assign(protocol=lambda d: "bs " + d["batch_size"].astype(str) + ", τ " + d["local_epochs"].astype(str)
                    + ((", " + d["precision"]) if d["precision"].nunique() > 1 else "")) \
        .pivot_table(index="protocol", columns="path", values="images_per_s", sort=False)
    piv = piv[[p for p in PATHS if p in piv.columns]].rename(columns=PATH_LABELS)
    piv.plot.bar(ax=ax, rot=0, width=0.8, legend=False)
    ax.set_yscale("log")
    plain_log_ticks(ax, "y")
    return _labelled(ax, xlabel="local protocol (batch size bs, local epochs τ)",
                     ylabel="images / s (higher is faster, log scale)",
                     title="Training throughput of one FedAvg round, by path", ncol=2)


def masks_across_clients(rng: np.random.Generator, *, k_c: int = 5, blocks: int = 8, p: float = 0.5) -> plt.Figure:
    """Concept figure (Propositions 2 and 3): each of ``k_c`` clients' own mask over ``blocks`` blocks (left) against
    one mask shared by all (right), each block kept (dark) with probability ``p`` (masks drawn from ``rng``); the
    row below each grid is the aggregate's kept share of each block (eq. 6 and eq. 7).

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
    """Concept figure (eq. 3 and eq. 12): ``k_c`` unit updates in the plane drawn head to tail and their sum (thick),
    directions spread ``spread_deg`` degrees around a shared one (left) or uniform (right), drawn from ``rng``;
    each panel's title gives its 1/Δ_S.

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
