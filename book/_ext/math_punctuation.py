"""Sphinx extension of the maskfed book: a full stop, comma or closing bracket right after inline
math stays on the line of the formula. Browsers may break a line between a MathJax formula and
the text that follows it, which left a lone "." at the start of a line; each such pair is
wrapped in ``<span class="math-nowrap">`` (``white-space: nowrap`` in book/_static/maskfed.css)."""

from __future__ import annotations

import re

from docutils import nodes

#: Punctuation that must not start a line after a formula.
_TRAILING = re.compile(r"^[.,;:!?)\]’”]+")


def keep_punctuation_with_math(doctree: nodes.Node) -> int:
    """Wrap every inline ``math`` node followed by punctuation, with that punctuation, in an
    ``inline`` node of class ``math-nowrap``, in place; returns how many were wrapped."""
    wrapped = 0
    for math in list(doctree.findall(nodes.math)):
        parent = math.parent
        if parent is None:
            continue
        i = parent.index(math)
        after = parent[i + 1] if i + 1 < len(parent) else None
        if not isinstance(after, nodes.Text):
            continue
        m = _TRAILING.match(str(after))
        if not m:
            continue
        rest = str(after)[m.end():]
        box = nodes.inline(classes=["math-nowrap"])
        if rest:
            parent.replace(after, nodes.Text(rest))
        else:
            parent.remove(after)
        parent.replace(math, box)
        box += math
        box += nodes.Text(m.group(0))
        wrapped += 1
    return wrapped


def _on_doctree_read(app, doctree):
    keep_punctuation_with_math(doctree)


def setup(app):
    app.connect("doctree-read", _on_doctree_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
