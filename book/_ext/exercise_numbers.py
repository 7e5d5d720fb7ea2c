"""Sphinx extension of the maskfed book: exercises are numbered per chapter (Exercise 1, 2, ...
in each chapter), not across the whole book as Sphinx numbers an unnumbered table of contents
(where the first exercise of the third derivation chapter was Exercise 7)."""

from __future__ import annotations

#: The enumerable node types numbered per chapter (sphinx-exercise's).
PER_CHAPTER = ("exercise",)


def renumber(toc_fignumbers: dict) -> None:
    """Renumber, in place, each chapter's entries of the :data:`PER_CHAPTER` types 1, 2, ... in
    their book-wide order. ``toc_fignumbers`` is Sphinx's ``{docname: {type: {id: (n, ...)}}}``."""
    for numbers in toc_fignumbers.values():
        for kind in PER_CHAPTER:
            entries = numbers.get(kind)
            if entries:
                ordered = sorted(entries, key=lambda ident: entries[ident])
                numbers[kind] = {ident: (i,) for i, ident in enumerate(ordered, start=1)}


def _renumber(app, env):
    renumber(env.toc_fignumbers)
    return []


def setup(app):
    app.connect("env-get-updated", _renumber, priority=900)  # after Sphinx assigned the book-wide numbers
    return {"parallel_read_safe": True, "parallel_write_safe": True}
