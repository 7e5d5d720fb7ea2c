"""Sphinx extension of the maskfed book: on every page, the first use of each glossary term in the
prose links to its entry on the glossary page (book/glossary.md), so a reader meets no term
undefined.

The terms are those the glossary page defines (Sphinx's ``term`` objects). A use is the term as a
whole word or phrase, any case, with an optional plural "s"; terms shorter than three letters
(symbols such as T or τ) are left to the text. Uses in titles, captions, tables, code, math, links
and raw HTML are not counted, nor anything on the glossary page itself. A chapter may still mark a
use by hand with ``{term}`` (it then counts as that page's first use)."""

from __future__ import annotations

import re

from docutils import nodes
from sphinx import addnodes
from text_links import ancestors, link_matches

#: Where a use is not linked (and, being no prose, is not a first use either).
_SKIP = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.reference, nodes.raw,
         nodes.FixedTextElement, nodes.title, nodes.caption, nodes.table, nodes.rubric, nodes.term,
         addnodes.pending_xref, addnodes.glossary)
#: The shortest term linked (letters): single symbols would match ordinary words.
MIN_LEN = 3


def term_pattern(terms) -> re.Pattern:
    """One regex that matches any of ``terms`` (longest first) as a whole word, any case, optional plural."""
    alts = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])({alts})(?:e?s)?(?![\w-])", re.IGNORECASE)


def link_first_uses(doctree: nodes.Node, uri_of: dict) -> list[str]:
    """Replace, in place, the first prose use of each term in ``doctree`` by a reference to
    ``uri_of[term]`` (terms lower-case); returns the terms linked, in order. A term the page links
    (a reference to its URI, e.g. by ``{term}``) before its first prose use counts as used; one linked
    only later still gets its first use linked."""
    todo = {t: u for t, u in uri_of.items() if len(t) >= MIN_LEN}
    if todo:
        todo = {t: u for t, u in todo.items() if t not in _linked_before_use(doctree, todo)}
    linked = []

    def uri_for(m):
        term = m.group(1).lower()
        if term not in todo:
            return None
        linked.append(term)
        return todo.pop(term)

    if todo:
        link_matches(doctree, term_pattern(todo), uri_for, _SKIP, "glossary-term")
    return linked


def _linked_before_use(doctree: nodes.Node, uri_of: dict) -> set[str]:
    """The terms of ``uri_of`` that ``doctree`` links (a reference to the term's URI) before, in
    document order, any prose use of them."""
    term_of = {u: t for t, u in uri_of.items()}
    pattern = term_pattern(uri_of)
    seen, early = set(), set()
    for node in doctree.findall():
        if isinstance(node, nodes.reference) and node.get("refuri") in term_of:
            t = term_of[node["refuri"]]
            if t not in seen:
                early.add(t)
            seen.add(t)
        elif isinstance(node, nodes.Text) and not any(isinstance(a, _SKIP) for a in ancestors(node)):
            seen.update(m.group(1).lower() for m in pattern.finditer(str(node)))
    return early


def _on_doctree_resolved(app, doctree, docname):
    terms = {name: where for (kind, name), where in app.env.domaindata["std"]["objects"].items() if kind == "term"}
    if not terms or docname in {where[0] for where in terms.values()}:
        return
    uri_of = {name.lower(): app.builder.get_relative_uri(docname, doc) + "#" + anchor
              for name, (doc, anchor) in terms.items()}
    link_first_uses(doctree, uri_of)


def setup(app):
    app.connect("doctree-resolved", _on_doctree_resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
