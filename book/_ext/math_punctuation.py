"""Sphinx extension of the maskfed book: a full stop, comma or closing bracket right after inline
math stays on the line of the formula, and so does an opening bracket right before it. Browsers
may break a line between a MathJax formula and the text beside it, which left a lone "." at the
start of a line or a "(" at the end of one; each such group is wrapped in
``<span class="math-nowrap">`` (``white-space: nowrap`` in book/_static/maskfed.css)."""

from __future__ import annotations

import re

from docutils import nodes

#: Punctuation that must not start a line after a formula, or end one before it.
_TRAILING = re.compile(r"^[.,;:!?)\]’”]+")
_LEADING = re.compile(r"[(\[‘“]+$")


def keep_punctuation_with_math(doctree: nodes.Node) -> int:
    """Wrap every inline ``math`` node that touches punctuation (a full stop or closing bracket
    after it, an opening bracket before it), with that punctuation, in an ``inline`` node of class
    ``math-nowrap``, in place; returns how many were wrapped."""
    wrapped = 0
    for math in list(doctree.findall(nodes.math)):
        parent = math.parent
        if parent is None:
            continue
        i = _position(parent, math)
        after = parent[i + 1] if i + 1 < len(parent) else None
        before = parent[i - 1] if i > 0 else None
        tail = _TRAILING.match(str(after)) if isinstance(after, nodes.Text) else None
        head = _LEADING.search(str(before)) if isinstance(before, nodes.Text) else None
        if not (tail or head):
            continue
        box = nodes.inline(classes=["math-nowrap"])
        if tail:
            _keep(parent, after, str(after)[tail.end():])
        if head:
            _keep(parent, before, str(before)[:head.start()])
            box += nodes.Text(head.group(0))
        parent.children[_position(parent, math)] = box
        box.parent = parent
        box += math
        if tail:
            box += nodes.Text(tail.group(0))
        wrapped += 1
    return wrapped


def _position(parent: nodes.Element, child: nodes.Node) -> int:
    """Index of ``child`` among ``parent``'s children by identity. ``Element.index`` compares with
    ``==``, and docutils ``Text`` nodes are equal whenever their strings are, so it finds the first
    "." of a paragraph rather than the one after this formula (which removed a full stop elsewhere
    and doubled this one)."""
    return next(j for j, c in enumerate(parent.children) if c is child)


def _keep(parent: nodes.Element, text: nodes.Text, rest: str) -> None:
    """Replace ``text`` in ``parent`` by what is left of it, or remove it when nothing is."""
    j = _position(parent, text)
    if rest:
        new = nodes.Text(rest)
        new.parent = parent
        parent.children[j] = new
    else:
        del parent.children[j]


def _on_doctree_read(app, doctree):
    keep_punctuation_with_math(doctree)


def setup(app):
    app.connect("doctree-read", _on_doctree_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
