"""Sphinx extension of the maskfed book: exercises are numbered by chapter, "Exercise 2.1" for the first
exercise of the second chapter that has exercises (the derivation chapters, in book order), not across
the whole book as Sphinx numbers an unnumbered table of contents (where the first exercise of the third
derivation chapter was Exercise 7), nor 1, 2, ... in every chapter (which a teacher cannot cite)."""

from __future__ import annotations

#: The enumerable node types numbered per chapter (sphinx-exercise's).
PER_CHAPTER = ("exercise",)


def renumber(toc_fignumbers: dict) -> None:
    """Renumber, in place, each chapter's entries of the :data:`PER_CHAPTER` types (c, 1), (c, 2), ... in
    their book-wide order, c being the chapter's place (from 1) among the chapters that have entries of that
    type, in book order. ``toc_fignumbers`` is Sphinx's ``{docname: {type: {id: (n, ...)}}}``; Sphinx writes
    the tuple (2, 1) as "2.1"."""
    for kind in PER_CHAPTER:
        chapters = sorted((min(n[kind].values()), doc) for doc, n in toc_fignumbers.items() if n.get(kind))
        for c, (_, doc) in enumerate(chapters, start=1):
            entries = toc_fignumbers[doc][kind]
            ordered = sorted(entries, key=lambda ident: entries[ident])
            toc_fignumbers[doc][kind] = {ident: (c, i) for i, ident in enumerate(ordered, start=1)}


def _renumber(app, env):
    renumber(env.toc_fignumbers)
    return []


def setup(app):
    app.connect("env-get-updated", _renumber, priority=900)  # after Sphinx assigned the book-wide numbers
    return {"parallel_read_safe": True, "parallel_write_safe": True}
