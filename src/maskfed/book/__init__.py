"""Book helpers. This module: what every page shares (banners, table styling, numbers, glue).

Submodules: ``notebooks`` (executes the chapters), ``params`` (their parameters), ``plots``, ``tables``,
``evidence``, ``settings``, ``explorer``. The check of the built pages (``make book-check``) is
``book/_tools/browsercheck.py``, outside the package.
"""

from __future__ import annotations

import html
import math
import numbers
import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

from maskfed.book.settings import settings_table  # noqa: F401  (the book's table of whose setting is whose)
from maskfed.engine.config import load_profile, Profile
from maskfed.engine.runner import data_fingerprint, images_for, recorded_fingerprint
from maskfed.perf import bench

if TYPE_CHECKING:
    import IPython.display

#: Display formats of the table columns.
FORMATS = {"T_mean": "{:.0f}", "recovery_unweighted": "{:.2f}", "recovery_weighted": "{:.2f}",
           "mu2_hat": "{:.1e}", "sigma2_hat": "{:.1e}", "test_acc": "{:.3f}", "pct_rounds_below_one": "{:.1f}"}
#: Column headers as the paper prints them, and for the book's other columns as a reader names them.
#: Units: 1/Δ_S and the ratios are dimensionless; ‖μ̂‖², σ̂² and A are in squared parameter units (param.²),
#: losses in nats (cross-entropy), accuracy a fraction of the 10,000 test images.
HEADERS = {"T_mean": "T (steps)", "recovery_unweighted": "1/Δ_S unwtd.", "recovery_weighted": "1/Δ_S n_k-wtd.",
           "mu2_hat": "‖μ̂‖² (param.²)", "sigma2_hat": "σ̂² (param.²)", "test_acc": "test acc. (fraction)",
           "pct_rounds_below_one": "rounds with 1/Δ_S < 1 (%)", "wall_s": "wall time (s)",
           # the control (summary.control_deviations_by_round): deviations from the exact answer
           "dev_unweighted": "|1/Δ_S − K_c| / K_c unwtd.", "dev_weighted": "|1/Δ_S − K_c| / K_c n_k-wtd.",
           "sigma2_rel": "|σ̂²| / A", "update_spread": "max_k ‖Δ_k − Δ_1‖ / ‖Δ_1‖",
           "A": "A (mean ‖Δ_k‖², param.²)", "train_loss": "train loss (nats)", "test_loss": "test loss (nats)",
           # the run grid and the partitions
           "alpha": "α", "batch_size": "bs", "local_epochs": "τ", "cv": "shard-size CV (%)",
           "from_round": "window from round", "rounds": "rounds", "seeds": "seeds",
           # the benchmark (maskfed.perf.bench): its four paths and three ratios
           **bench.PATH_LABELS, "P2_ours_over_bare": "P2 = ours / bare SGD time",
           "P3_typical_over_ours": "P3 = typical / ours time", "batched_speedup": "batched / sequential speed"}
#: Index names as the paper writes them.
INDEX_NAMES = {"alpha": "α", "batch_size": "bs", "local_epochs": "τ"}


#: A text column whose longest entry has more characters than this wraps inside a column at least
#: :data:`WRAP_MIN_EM` wide (a description, a reference) instead of stretching the table.
WRAP_OVER_CHARS = 40
#: Narrowest width (em) of a wrapping text column: about six words a line.
WRAP_MIN_EM = 14

#: An absolute POSIX path (two or more components), as found in a data source or a config.
_ABS_PATH = re.compile(r"(?<![\w.~])(?:/[^\s/()'\",;:]+)+/([^\s/()'\",;:]+)")


def without_paths(value):
    """``value`` with every absolute path in it replaced by its last component (``/a/b/c.tar.gz`` -> ``c.tar.gz``);
    non-strings unchanged."""
    return _ABS_PATH.sub(r"\1", value) if isinstance(value, str) else value


def number(x, digits: int = 4) -> str:
    """A number as a reader writes it: ``0.1``, ``100``, ``1e-06``, ``12.35`` (``digits`` significant digits);
    integers with thousands separators (``17,034``); a truth value as ``yes``/``no``; anything else as ``str``."""
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if not isinstance(x, numbers.Real):
        return x if isinstance(x, str) else str(x)
    if isinstance(x, numbers.Integral):
        return f"{int(x):,}"
    x = float(x)
    if not math.isfinite(x):
        return "–" if math.isnan(x) else ("∞" if x > 0 else "−∞")
    if x == int(x) and abs(x) < 10 ** 15:
        return f"{int(x):,}"
    return format(x, f".{digits}g")


def column_format(values, digits: int = 3):
    """A callable writing one cell of the column ``values`` as a reader would: the same decimals in every row,
    ``digits`` significant digits at the median magnitude (``0.938``, ``1.003``), or :func:`scientific` for a
    column spanning more than four decades or below 1e-3; integers, or values of at most two significant digits
    (α = 100, 1, 0.1), keep :func:`number`; no nonzero value is rounded to 0; NaN as "–".

    Raises:
        ValueError: ``digits`` < 1.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1; got {digits}")
    finite = [abs(float(v)) for v in values if isinstance(v, numbers.Real) and not isinstance(v, bool)
              and math.isfinite(float(v))]
    if not finite or all(float(v).is_integer() for v in finite):
        return number
    if all(v == float(f"{v:.2g}") for v in finite):
        return number   # settings such as α = 100, 1, 0.1 or lr 0.01: written as given, never rounded away
    nonzero = sorted(v for v in finite if v > 0)
    if not nonzero:
        return number
    if nonzero[-1] / nonzero[0] > 1e4 or nonzero[-1] < 1e-3:
        return scientific
    median = nonzero[len(nonzero) // 2]
    decimals = digits - 1 - math.floor(math.log10(median))
    decimals = min(6, max(0, decimals, -math.floor(math.log10(nonzero[0]))))  # no nonzero value shows as 0

    def write(x):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
            return number(x)
        text = f"{float(x):.{decimals}f}"
        return text.lstrip("-") if float(text) == 0 else text  # -0.0 (or a tiny negative) is written 0.000

    return write


def scientific(x, digits: int = 2) -> str:
    """A number in scientific notation as a reader writes it: ``3e-15``, ``1.2e-9`` (``digits`` significant
    digits, no trailing zeros, no padded exponent); zero as ``0``; NaN as "–".

    Raises:
        ValueError: ``digits`` < 1.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1; got {digits}")
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return x if isinstance(x, str) else str(x)
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return number(x)
    mantissa, exponent = format(x, f".{digits - 1}e").split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def signed(decimals: int):
    """A cell format for a signed deviation with ``decimals`` places, ``+0.041`` / ``-0.090``, that writes a value
    rounding to zero as ``0.000``; non-numbers (and NaN) go to :func:`number`.

    Raises:
        ValueError: ``decimals`` < 0.
    """
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0; got {decimals}")

    def write(x):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
            return number(x)
        text = f"{float(x):+.{decimals}f}"
        return text[1:] if float(text) == 0 else text

    return write


def with_error(mean, se) -> str:
    """A Monte Carlo estimate as a reader writes it: the standard error ``se`` to two significant digits and the
    ``mean`` to the same decimal place (``"68.10 ± 0.94"``); a zero or infinite ``se`` leaves both to :func:`number`.

    Raises:
        ValueError: a negative ``se``.
    """
    mean, se = float(mean), float(se)
    if se < 0:
        raise ValueError(f"se (standard error) must be >= 0; got {se}")
    if se == 0 or not math.isfinite(se) or not math.isfinite(mean):
        return f"{number(mean)} ± {number(se)}"
    decimals = max(0, 1 - math.floor(math.log10(se)))
    return f"{mean:.{decimals}f} ± {se:.{decimals}f}"


def span(low, high, decimals: int = 2) -> str:
    """A range as prose writes it: ``"1.07 to 1.87"``, or one value (``"1.00"``) where both ends
    read the same at ``decimals`` places.

    Raises:
        ValueError: ``low`` above ``high``, or ``decimals`` < 0.
    """
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0; got {decimals}")
    if float(low) > float(high):
        raise ValueError(f"low must not exceed high; got low {low}, high {high}")
    lo, hi = f"{float(low):.{decimals}f}", f"{float(high):.{decimals}f}"
    return lo if lo == hi else f"{lo} to {hi}"


def without_comment_lines(text: str) -> str:
    """``text`` (YAML, e.g. CITATION.cff) without its whole-line ``#`` comments."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")) + "\n"


def data_source(profile: Profile) -> dict:
    """The data a profile's runs use: ``data`` (its source without paths) and ``fingerprint``
    (:func:`maskfed.engine.runner.data_fingerprint`, which the runs' cache keys use)."""
    images = images_for(profile.run(profile.seeds[0]))
    return {"data": without_paths(images.source), "fingerprint": data_fingerprint(images)}


def profile_changes(profile: Profile) -> dict:
    """The base fields a page set differently from the profile's own file (``rounds=2`` -> ``{"rounds": 2}``),
    the data location aside."""
    if not profile.overrides:
        return {}
    default = load_profile(profile.name).base
    return {k: v for k, v in profile.overrides.items() if k != "data_path" and default.get(k) != v}


def banner(profile: Profile, *, source: str | None = None, changes: dict | None = None) -> pd.DataFrame:
    """What produced a page's numbers, as a table (one column ``value``): ``lead source`` (``source``, the profile's
    name when None) first, then ``profile``, ``scaled down``, ``model``,
    ``rounds``, ``cohort K_c``, ``seeds`` (how many), ``seed numbers``, ``profile's description``, ``changes`` (:func:`profile_changes`, overridden by
    ``changes``, e.g. ``{"cohort_size (K_c)": 5}``), ``data`` and ``fingerprint`` (:func:`data_source`)."""
    explicit = changes or {}
    changes = {k: v for k, v in profile_changes(profile).items()
               if not any(name == k or name.startswith(f"{k} ") for name in explicit)} | explicit
    cfg, seeds = profile.run(profile.seeds[0]), profile.seeds
    values = {"lead source": source or profile.name, "profile": profile.name, "scaled down": bool(profile.scaled_down),
              "model": cfg.model,
              "rounds": cfg.rounds, "cohort K_c": cfg.cohort_size,
              "seeds": len(seeds), "seed numbers": ", ".join(map(str, seeds)),
              "profile's description": profile.description,   # the file's own text: before the changes below
              "changes": ", ".join(f"{k} = {without_paths(number(v))}" for k, v in changes.items()),
              **data_source(profile)}
    return pd.DataFrame({"value": pd.Series(values, dtype=object)}).rename_axis("field")


def _cell_writers(table: pd.DataFrame, formats: dict | None) -> dict:
    """``{column: format}`` for :func:`styled`: the column's (or its quantity's) entry in ``formats`` or
    :data:`FORMATS`, else :func:`column_format` for a float column and :func:`number` for any other."""
    formats_by_name = {**FORMATS, **(formats or {})}

    def fmt_for(col):
        name = col[0] if isinstance(col, tuple) else col
        values = table[col]
        default = (column_format(values) if isinstance(values, pd.Series) and pd.api.types.is_float_dtype(values)
                   else number)
        return formats_by_name.get(col, formats_by_name.get(name, default))

    return {c: fmt_for(c) for c in table.columns}


def _header(col):
    """A column's header as the reader sees it (:data:`HEADERS`), per level of a (quantity, source) column."""
    return (HEADERS.get(col[0], col[0]), col[1]) if isinstance(col, tuple) else HEADERS.get(col, col)


def _long_text_columns(table: pd.DataFrame) -> list:
    """The text columns with an entry longer than :data:`WRAP_OVER_CHARS` (they wrap)."""
    return [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])
            and table[c].map(lambda v: len(v) if isinstance(v, str) else 0).max() > WRAP_OVER_CHARS]


_NAMES_ROW = re.compile(r"\s*<tr>((?:\s*<th class=\"index_name[^>]*>.*?</th>)+)(?:\s*<th class=\"blank[^>]*>&nbsp;</th>)*\s*</tr>", re.S)
_BLANK = re.compile(r'<th class="blank(?: level\d+)?" >&nbsp;</th>')


def one_header_row(html_table: str) -> str:
    """Pandas' table HTML with the index names moved from their own header row (a row of names and empty
    cells under the column headers) into the empty corner cells of the last column-header row."""
    m = _NAMES_ROW.search(html_table)
    if m is None:
        return html_table
    names = re.findall(r"<th class=\"index_name[^>]*>.*?</th>", m.group(1), re.S)
    head, tail = html_table[:m.start()], html_table[m.end():]
    last = head.rfind("<tr>")
    row = head[last:]
    for name in names:
        row, n = _BLANK.subn(name, row, count=1)
        if not n:
            return html_table  # no corner cell to take it: leave the table as pandas wrote it
    return head[:last] + row + tail


class OneHeaderRowStyler(Styler):
    """A pandas Styler whose HTML has no header row of index names alone (:func:`one_header_row`)."""

    def to_html(self, *args, **kwargs):
        out = super().to_html(*args, **kwargs)
        return one_header_row(out) if isinstance(out, str) else out


def styled(table: pd.DataFrame, formats: dict | None = None):
    """A pandas Styler of a plain or (quantity, source) table with the book's headers (:data:`HEADERS`,
    :data:`INDEX_NAMES`) and cell formats (:func:`_cell_writers`; ``formats``: further ``{column: format}``
    entries), the index by :func:`number`, missing values and empty text as "–"; a default index is hidden, and a long-text
    column (:data:`WRAP_OVER_CHARS`) wraps at least :data:`WRAP_MIN_EM` wide."""
    shown = table.mask(table.map(lambda v: isinstance(v, str) and not v.strip()))  # an empty text cell reads "–"
    shown.columns = (pd.MultiIndex.from_tuples([_header(c) for c in table.columns])
                     if isinstance(table.columns, pd.MultiIndex) else [_header(c) for c in table.columns])
    shown.index.names = [INDEX_NAMES.get(n, n) for n in table.index.names]
    cell_formats = {_header(c): f for c, f in _cell_writers(table, formats).items()}
    style = (OneHeaderRowStyler(shown).format(cell_formats, na_rep="–").format_index(number, axis=0)
             .set_table_styles([{"selector": "td, th", "props": "white-space: nowrap; padding: 0.15em 0.45em;"},
                                {"selector": "th.col_heading", "props": "white-space: normal; vertical-align: bottom;"}]))
    if max((len(str(v)) for v in table.index.get_level_values(-1)), default=0) > WRAP_OVER_CHARS // 2:
        # long row labels (the settings table's) wrap too, instead of taking a third of the page
        style = style.set_table_styles([{"selector": "th.row_heading", "props": "white-space: normal; overflow-wrap: break-word; min-width: 8em;"}],
                                       overwrite=False)
    long_text = [_header(c) for c in _long_text_columns(table)]
    if long_text:  # per-column rules (#T_id td.colN) outrank the table-wide nowrap above (#T_id td)
        wrap = f"white-space: normal; text-align: left; min-width: {WRAP_MIN_EM}em;"
        style = style.set_table_styles({c: [{"selector": "td", "props": wrap}] for c in long_text}, overwrite=False)
    if isinstance(table.index, pd.RangeIndex) and table.index.name is None:
        style = style.hide(axis="index")
    return style


#: Width (in characters of body text) that a table may take in the book's text column at a 1400 px
#: window: 784 px at about 8 px a character of the 16 px body font, less a margin for the estimate.
COLUMN_CHARS = 90
#: Width (characters) of a cell's padding (0.45 em each side) and of a wrapping text column.
_PAD_CHARS, _WRAP_CHARS = 2, 2 * WRAP_MIN_EM
#: Characters kept free when columns are chosen or packed automatically (:func:`main_columns`, :func:`fitted`).
_SLACK_CHARS = 4


def table_chars(table: pd.DataFrame, formats: dict | None = None) -> int:
    """Estimated width of :func:`styled` ``(table)`` in characters of body text: per column and index level the
    longest written cell or header word (a long-text column :data:`WRAP_MIN_EM` em), with its padding."""
    def word(text) -> int:
        return max((len(w) for w in str(text).split()), default=0)

    def cell(fmt, v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        return fmt.format(v) if isinstance(fmt, str) else str(fmt(v))

    long_text = set(_long_text_columns(table))
    width = 0
    for col, fmt in _cell_writers(table, formats).items():
        header = _header(col)
        head = max(word(h) for h in header) if isinstance(header, tuple) else word(header)
        body = _WRAP_CHARS if col in long_text else max((len(cell(fmt, v)) for v in table[col]), default=0)
        width += max(head, body) + _PAD_CHARS
    if not (isinstance(table.index, pd.RangeIndex) and table.index.name is None):
        for level, name in enumerate(table.index.names):
            longest = max((len(number(v)) for v in table.index.get_level_values(level)), default=0)
            if longest > WRAP_OVER_CHARS // 2:   # long row labels wrap (styled: min-width 8 em)
                longest = 16
            width += max(longest, word(INDEX_NAMES.get(name, name or ""))) + _PAD_CHARS
    return width


def csv_link(table: pd.DataFrame, name: str, text: str | None = None) -> str:
    """An HTML link that downloads ``table`` as ``<name>.csv`` at full precision (a ``data:`` address); two-level
    columns are written as ``quantity | source``, the index as the first columns.

    Raises:
        ValueError: ``name`` is not a plain file stem (letters, digits, ``-``, ``_``).
    """
    import urllib.parse

    if not re.fullmatch(r"[A-Za-z0-9_-]+", name or ""):
        raise ValueError(f"name must be a plain file stem (letters, digits, - and _); got {name!r}")
    flat = table.copy()
    if isinstance(flat.columns, pd.MultiIndex):
        flat.columns = [" | ".join(str(level) for level in col) for col in flat.columns]
    keep_index = not (isinstance(flat.index, pd.RangeIndex) and flat.index.name is None)
    data = flat.map(without_paths).to_csv(index=keep_index)   # floats as Python writes them: exact
    href = "data:text/csv;charset=utf-8," + urllib.parse.quote(data)
    label = html.escape(text or f"Full-precision CSV: {name}.csv")
    return f'<p class="table-csv"><a href="{href}" download="{name}.csv">{label}</a></p>'


def main_columns(table: pd.DataFrame, first: list, more: list, formats: dict | None = None) -> list:
    """The main columns of :func:`fitted`: ``first``, then each column of ``more`` (most wanted first) that keeps
    the table within :data:`COLUMN_CHARS` less the slack, in the table's own column order (first-level names)."""
    chosen = list(dict.fromkeys(first))
    for col in more:
        if col not in chosen and table_chars(table[chosen + [col]], formats) <= COLUMN_CHARS - _SLACK_CHARS:
            chosen.append(col)
    return [c for c in dict.fromkeys(table.columns.get_level_values(0)) if c in chosen]


def fitted(table: pd.DataFrame, main: list, *, name: str, formats: dict | None = None,
           detail: str | None = None, collapsed: bool = True, max_chars: int = COLUMN_CHARS) -> "IPython.display.HTML":
    """A wide table as a reader can take it in: a main table of the columns ``main`` (column keys or, for a
    two-level table, quantity names meaning all their sources), the other columns (whole quantities) packed into
    tables no wider than ``max_chars`` (:func:`table_chars`) in a toggled box with summary ``detail`` (or shown
    below it: ``collapsed`` False), and a full-precision CSV link (:func:`csv_link`, file stem ``name``).

    Returns:
        An ``IPython.display.HTML``.

    Raises:
        ValueError: a ``main`` entry that is not a column of ``table``, an empty ``main``, or a
            main table wider than ``max_chars`` (choose fewer main columns).
    """
    from IPython.display import HTML

    two_level = isinstance(table.columns, pd.MultiIndex)
    chosen = []
    for entry in main:
        if entry in table.columns and (not two_level or isinstance(entry, tuple)):
            chosen.append(entry)
        elif two_level and not isinstance(entry, tuple) and entry in table.columns.get_level_values(0):
            chosen += [c for c in table.columns if c[0] == entry]
        else:
            raise ValueError(f"main: {entry!r} is not a column of the table; its columns are {list(table.columns)}")
    if not chosen:
        raise ValueError("main must name at least one column")
    chosen = list(dict.fromkeys(chosen))
    width = table_chars(table[chosen], formats)
    if width > max_chars:
        raise ValueError(f"main: the main table is about {width} characters wide, over the {max_chars} that fit "
                         f"the text column at a 1400 px window; choose fewer main columns")
    if two_level:  # every quantity not wholly in the main table, with all its sources
        partial = [q for q in dict.fromkeys(table.columns.get_level_values(0))
                   if any(c not in chosen for c in table.columns if c[0] == q)]
        rest = [c for c in table.columns if c[0] in partial]
    else:
        rest = [c for c in table.columns if c not in chosen]
    groups = []   # the rest by quantity (two-level) or one column each, in the table's order
    for col in rest:
        key = col[0] if two_level else col
        if groups and groups[-1][0] == key:
            groups[-1][1].append(col)
        else:
            groups.append((key, [col]))
    parts, current = [], []
    for _, cols in groups:   # pack whole groups into tables that fit
        if current and table_chars(table[current + cols], formats) > max_chars - _SLACK_CHARS:
            parts.append(current)
            current = []
        current += cols
    if current:
        parts.append(current)
    out = [styled(table[chosen], formats).to_html()]
    others = "".join(styled(table[p], formats).to_html() for p in parts)
    if parts and collapsed:
        names = list(dict.fromkeys(str(_header(c)[0] if two_level else _header(c)) for c in rest))
        summary = detail or (f"Every source: {', '.join(names)}" if two_level else f"More columns: {', '.join(names)}")
        out.append(f"<details class=\"table-detail\"><summary>{html.escape(summary)}</summary>{others}</details>")
    elif parts:
        out.append(others)
    out.append(csv_link(table, name))
    return HTML("\n".join(out))


def profile_table() -> pd.DataFrame:
    """The profiles side by side (name, scaled down, seeds, rounds, model, description)."""
    from maskfed.engine.config import PROFILES

    rows = []
    for name in PROFILES:
        p = load_profile(name)
        base = p.run(p.seeds[0])
        rows.append({"profile": name, "paper's setting": not p.scaled_down, "seeds": len(p.seeds),
                     "rounds": base.rounds, "model": base.model, "clients K": base.num_clients,
                     "cohort K_c": base.cohort_size, "data": base.dataset, "description": p.description})
    return pd.DataFrame(rows).set_index("profile")


class Shown(str):
    """A glued string as the chapter's text shows it in JupyterLab: its repr is the text itself (no quotes), and a
    format spec formats the number it writes (``f"{t4_mc:.2f}"``), as ``{glue:text}`key:.2f``` does in the book."""

    def __repr__(self) -> str:
        return str(self)

    def __format__(self, spec: str) -> str:
        return format(float(self), spec) if spec else str(self)


#: True while the notebook runner builds a chapter into the book (its hidden setup cell sets it).
IN_BOOK_BUILD = False
#: The names glued so far in this kernel (:func:`glued_before` reads it).
GLUED: set[str] = set()


def glue(key: str, value, display: bool = False) -> None:
    """Glue one value for the chapter's ``{eval}`key``` roles: in the book build ``myst_nb.glue`` (the runner turns
    each role into ``{glue:text}``), numpy scalars as Python ones (MyST-NB cannot format ``np.float64(...)``);
    elsewhere (JupyterLab, where jupyterlab-myst evaluates the roles in the kernel) a variable of that name."""
    if isinstance(value, np.generic):
        value = value.item()
    GLUED.add(key)
    if IN_BOOK_BUILD:
        from myst_nb import glue as myst_glue

        myst_glue(key, value, display=display)
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.user_ns[key] = Shown(value) if isinstance(value, str) else value



def glue_all(values: dict) -> None:
    """:func:`glue` every item of ``values`` (name -> number or string)."""
    for key, value in values.items():
        glue(key, value)


def glued_before(names: list[str], where: str) -> None:
    """The runner's hidden check after a Markdown cell: every name its ``{eval}`` roles read is glued by then.

    Raises:
        NameError: a name not glued yet (JupyterLab, running the chapter top to bottom, would show NameError in
            the text at ``where``).
    """
    missing = [n for n in names if n not in GLUED]
    if missing:
        raise NameError(f"{where} reads {missing} before the chapter glues them: glue them in an earlier cell")


def glue_numbers(values: dict, digits: int = 3, *, decimals: int | None = None) -> None:
    """:func:`glue_all` of ``values`` with each number written by :func:`number`: a float to ``digits``
    significant digits (with ``decimals``: to that many decimal places, as the paper prints 1/Δ_S: ``1.10``,
    not ``1.1``), an integer with thousands separators (``400,000`` draws, as in the tables); the truth values
    left out (they are for the chapter's checks)."""
    def write(value):
        if isinstance(value, (float, np.floating)) and decimals is not None and math.isfinite(value):
            return f"{float(value):.{decimals}f}"
        return number(value, digits)

    glue_all({key: write(value) if isinstance(value, numbers.Real) else value
              for key, value in values.items() if not isinstance(value, (bool, np.bool_))})


def provenance_record() -> pd.DataFrame:
    """When and from what a chapter was executed, as a one-row table: ``executed (UTC)``, ``commit``, ``src/
    changed``, ``run code`` (:func:`maskfed.provenance.code_hash`) and ``packages``."""
    from datetime import datetime, timezone

    from maskfed import provenance

    git = provenance.git_state()
    return pd.DataFrame([{"executed (UTC)": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          "commit": git["commit"][:10], "src/ changed": bool(git["dirty"]),
                          "run code": provenance.code_hash(),
                          "packages": ", ".join(f"{k} {v}" for k, v in provenance.package_versions().items() if v)}])

