"""Findings of the page "How to cite" (``notebooks/cite.md``), read from ``CITATION.cff`` and ``book/_config.yml``."""

from __future__ import annotations

import yaml

from maskfed.book import without_comment_lines
from maskfed.paths import REPO_ROOT


def citation_values(cff_text: str, repo_url: str = "") -> dict:
    """The page's glued values from the text of ``CITATION.cff`` and the book's repository URL ("" for none).

    Returns:
        ``cite_paper`` ("Given Family, ... (year). Title. identifier."), ``cite_software`` ("Name. Title.
        Version v.") and ``cite_buttons`` (what the launch buttons open, or why there are none).

    Raises:
        KeyError: the file lacks ``preferred-citation``, ``authors``, ``title`` or ``version``.
    """
    cff = yaml.safe_load(cff_text)
    paper = cff["preferred-citation"]
    authors = ", ".join(f"{a['given-names']} {a['family-names']}" for a in paper["authors"])
    buttons = (f"The launch buttons at the top of each page (Binder, Colab) open that page's executed notebook from "
               f"{repo_url}; on Colab, install the package first (pip install git+{repo_url})." if repo_url else
               "This build names no repository (repository.url in book/_config.yml is empty), so its pages have no "
               "launch buttons: to run a page, clone the repository and use the command in the page's own provenance "
               "note or README's.")
    return {"cite_paper": f"{authors} ({paper['year']}). {paper['title']}. {paper['identifiers'][0]['value']}.",
            "cite_software": f"{cff['authors'][0]['name']}. {cff['title']}. Version {cff['version']}.",
            "cite_buttons": buttons}


def shown_cff(cff_text: str) -> str:
    """``CITATION.cff`` without its comment lines, as a fenced YAML block.

    Raises:
        ValueError: leaving out the comments changed what the file says.
    """
    shown = without_comment_lines(cff_text)
    if yaml.safe_load(shown) != yaml.safe_load(cff_text):
        raise ValueError("CITATION.cff reads differently without its comment lines")
    return f"~~~yaml\n{shown}~~~"


def repository_url() -> str:
    """The book's repository URL (``repository.url`` in ``book/_config.yml``), or ""."""
    return (yaml.safe_load((REPO_ROOT / "book" / "_config.yml").read_text()).get("repository") or {}).get("url") or ""
