"""Shared by the book's Sphinx extensions that turn words of the text into links (equation_links,
glossary_links): the walk over a doctree's text and the replacement of matches by references."""

from __future__ import annotations

import re
from collections.abc import Callable

from docutils import nodes


def ancestors(node: nodes.Node):
    """The node's parents, nearest first."""
    a = node.parent
    while a is not None:
        yield a
        a = a.parent


def link_matches(doctree: nodes.Node, pattern: re.Pattern, uri_for: Callable[[re.Match], str | None],
                 skip: tuple, css_class: str) -> int:
    """Replace, in place, each match of ``pattern`` in ``doctree``'s text (outside nodes of the types in
    ``skip``) by a reference to ``uri_for(match)`` with class ``css_class``; a match whose URI is None stays
    text. Returns how many were linked."""
    linked = 0
    for text in list(doctree.findall(nodes.Text)):
        if text.parent is None or any(isinstance(a, skip) for a in ancestors(text)):
            continue
        s, pos, parts = str(text), 0, []
        for m in pattern.finditer(s):
            uri = uri_for(m)
            if uri is None:
                continue
            parts += [nodes.Text(s[pos:m.start()]),
                      nodes.reference("", m.group(0), internal=True, refuri=uri, classes=[css_class])]
            pos = m.end()
            linked += 1
        if parts:
            parts.append(nodes.Text(s[pos:]))
            text.parent.replace(text, [p for p in parts if not (isinstance(p, nodes.Text) and not str(p))])
    return linked
