"""Findings of the page "How to cite" (``notebooks/cite.md``), read from ``CITATION.cff`` and ``book/_config.yml``."""

from __future__ import annotations

import yaml

from maskfed.book import without_comment_lines
from maskfed.paths import REPO_ROOT


def citation_values(cff_text: str, repo_url: str = "") -> dict:
    """The page's glued values (``cite_...``) from ``CITATION.cff``'s text and the repository URL.

    Raises:
        KeyError: the file lacks ``preferred-citation``, ``authors``, ``title`` or ``version``."""
    cff = yaml.safe_load(cff_text)
    paper = cff["preferred-citation"]
    return {"cite_authors": ", ".join(f"{a['given-names']} {a['family-names']}" for a in paper["authors"]),
            "cite_year": str(paper["year"]),  # a label, not a count: no thousands separator
            "cite_title": paper["title"], "cite_id": paper["identifiers"][0]["value"],
            "cite_software_by": cff["authors"][0]["name"], "cite_software_title": cff["title"],
            "cite_version": cff["version"], "cite_repo": repo_url or "none"}


def shown_cff(cff_text: str) -> str:
    """``CITATION.cff`` without its comment lines, as a fenced YAML block.

    Raises:
        ValueError: leaving out the comments changed what the file says."""
    shown = without_comment_lines(cff_text)
    if yaml.safe_load(shown) != yaml.safe_load(cff_text):
        raise ValueError("CITATION.cff reads differently without its comment lines")
    return f"~~~yaml\n{shown}~~~"


def repository_url() -> str:
    """The book's repository URL (``repository.url`` in ``book/_config.yml``), or ""."""
    return (yaml.safe_load((REPO_ROOT / "book" / "_config.yml").read_text()).get("repository") or {}).get("url") or ""
