"""Sphinx extension of the maskfed book: every mention of one of the paper's equations in the text
("eq. 3", "eq. (11)", "eqs. 13-14", "eq. (10)-(11)", "Eq. (6)") links to the display that carries it.

A derivation chapter marks the display of the paper's equation n with the MyST target
``(paper-eq-n)=`` before it and ``\\tag{n}`` inside it, so the number shown is the paper's and each
equation is numbered once. Mentions in code, math and links are left alone, and so is a number no
page marks (the link would lead nowhere)."""

from __future__ import annotations

import re

from docutils import nodes
from text_links import link_matches

#: "eq." or "eqs." (any case), an equation number with or without brackets, optionally a range.
MENTION = re.compile(r"\b[Ee]qs?\.\s*(?:\((\d{1,2})\)|(\d{1,2}))(?:\s*[-–]\s*(?:\(\d{1,2}\)|\d{1,2}))?")
#: Prefix of the targets that mark the paper's equations.
TARGET = "paper-eq-"
_SKIP = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.reference, nodes.raw,
         nodes.FixedTextElement, nodes.title)


def link_mentions(doctree: nodes.Node, uri_of) -> int:
    """Replace, in place, each equation mention in ``doctree``'s text by a reference to ``uri_of(n)``
    (None: no page marks equation n, the text stays); returns how many were linked."""
    return link_matches(doctree, MENTION, lambda m: uri_of(int(m.group(1) or m.group(2))), _SKIP, "paper-eq")


def _on_doctree_resolved(app, doctree, docname):
    labels = app.env.domaindata["std"]["anonlabels"]  # target name -> (docname, anchor id)

    def uri_of(n: int):
        where = labels.get(f"{TARGET}{n}")
        if where is None:
            return None
        return app.builder.get_relative_uri(docname, where[0]) + "#" + where[1]

    link_mentions(doctree, uri_of)


def setup(app):
    app.connect("doctree-resolved", _on_doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
