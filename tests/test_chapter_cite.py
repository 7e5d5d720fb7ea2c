"""The citation page's values (maskfed.chapters.cite) from a hand-made CITATION.cff."""

import pytest

from maskfed.chapters import cite

CFF = """# a comment line
cff-version: 1.2.0
title: maskfed
version: 0.1.0
authors:
  - name: maskfed contributors
preferred-citation:
  type: article
  title: A Paper
  year: 2026
  authors:
    - given-names: Ada
      family-names: Lovelace
    - given-names: Alan
      family-names: Turing
  identifiers:
    - type: other
      value: arXiv:2608.23286
"""


def test_citation_values_by_hand():
    got = cite.citation_values(CFF)
    assert got["cite_paper"] == "Ada Lovelace, Alan Turing (2026). A Paper. arXiv:2608.23286."
    assert got["cite_software"] == "maskfed contributors. maskfed. Version 0.1.0."
    assert got["cite_buttons"].startswith("This build names no repository")
    with_repo = cite.citation_values(CFF, "https://example.org/r")["cite_buttons"]
    assert "pip install git+https://example.org/r" in with_repo


def test_shown_cff_leaves_out_only_comments():
    shown = cite.shown_cff(CFF)
    assert shown.startswith("~~~yaml\ncff-version") and "# a comment" not in shown and shown.endswith("~~~")
    with pytest.raises(KeyError):
        cite.citation_values("title: x\n")
