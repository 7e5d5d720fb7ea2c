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
    # execute
    got = cite.citation_values(CFF)
    # assert: the fields the page writes its two references from; no repository reads "none"
    assert got == {"cite_authors": ", ".join(["Ada Lovelace", "Alan Turing"]), "cite_year": "2026", "cite_title": "A Paper",
                   "cite_id": "arXiv:2608.23286", "cite_software_by": "maskfed contributors",
                   "cite_software_title": "maskfed", "cite_version": "0.1.0", "cite_repo": "none"}
    assert cite.citation_values(CFF, "https://example.org/r")["cite_repo"] == "https://example.org/r"


def test_shown_cff_leaves_out_only_comments():
    shown = cite.shown_cff(CFF)
    assert shown.startswith("~~~yaml\ncff-version") and "# a comment" not in shown and shown.endswith("~~~")
    with pytest.raises(KeyError):
        cite.citation_values("title: x\n")
