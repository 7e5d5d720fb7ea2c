"""Sphinx extension of the maskfed book: every figure's alt text says what it shows.

MyST-NB gives an image from a cell's output no alt text, so the reader's browser (and a screen
reader) falls back to its file name. :func:`maskfed.book.plots.finish` writes each figure's
description into its SVG as the title (``<dc:title>``: the chapter's ``alt`` text, else the figure's
own title and axis labels); this extension copies it into the image's ``alt`` on every page.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from docutils import nodes

_TITLE = re.compile(r"<dc:title>(.*?)</dc:title>", re.S)


def svg_title(path: Path) -> str | None:
    """The ``<dc:title>`` of an SVG file, unescaped; None when the file is missing or has none."""
    try:
        found = _TITLE.search(path.read_text(errors="replace")[:20000])
    except OSError:
        return None
    return html.unescape(found.group(1)).strip() if found else None


def _alt_from_svg(app, doctree, docname) -> None:
    for image in doctree.findall(nodes.image):
        uri = image.get("uri", "")
        if not uri.endswith(".svg") or (image.get("alt") and image["alt"] != uri):
            continue
        for path in (Path(uri), Path(app.srcdir) / uri, Path(app.srcdir) / Path(docname).parent / uri):
            title = svg_title(path)
            if title:
                image["alt"] = title
                break


def setup(app):
    app.connect("doctree-resolved", _alt_from_svg)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
