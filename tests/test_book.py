"""Every notebook executes at the smoke profile, and the book builds from them offline,
with no warnings (a missing glue key is a warning) and math served from _static."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from maskfed import notebooks
from maskfed.paths import REPO_ROOT

NAMES = notebooks.book_order()


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    """Execute all notebooks at smoke into a temporary copy of book/ and build it."""
    root = tmp_path_factory.mktemp("book")
    book = root / "book"
    book.mkdir()
    for f in ("_config.yml", "_toc.yml"):
        shutil.copy(REPO_ROOT / "book" / f, book / f)
    failures = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKFED_RESULTS_DIR", str(root / "results"))
        for name in NAMES:
            try:
                notebooks.execute(name, profile="smoke", out_dir=book / "nb")
            except Exception as exc:  # reported per notebook below
                failures[name] = exc
    jb = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run([str(jb), "build", str(book)], capture_output=True, text=True, timeout=600)
    return book, failures, proc


def test_book_lists_every_notebook():
    on_disk = sorted(p.stem for p in notebooks.NOTEBOOK_DIR.glob("*.md"))
    assert sorted(NAMES) == on_disk
    assert len(NAMES) >= 11  # intro, 4 measurement chapters, 6 derivation chapters


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_at_smoke(built_book, name):
    book, failures, _ = built_book
    assert name not in failures, f"{name} failed: {failures.get(name)}"
    assert (book / "nb" / f"{name}.ipynb").exists()


def test_book_builds_without_warnings(built_book):
    book, _, proc = built_book
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert warnings == [], "\n".join(warnings[:20])
    html = book / "_build" / "html"
    for name in NAMES:
        assert (html / "nb" / f"{name}.html").exists()


def test_glued_numbers_are_rendered(built_book):
    import nbformat

    book, _, _ = built_book
    # prepare: the value the executed notebook glued under "ctl_rel_unw"
    nb = nbformat.read(book / "nb" / "control_identical_shards.ipynb", as_version=4)
    glued = {o["metadata"]["scrapbook"]["name"]: o["data"] for c in nb.cells for o in c.get("outputs", [])
             if "scrapbook" in o.get("metadata", {})}
    value = float(next(iter(glued["ctl_rel_unw"].values())))
    # execute / assert: the page shows that value with the prose's format, not the key
    page = (book / "_build" / "html" / "nb" / "control_identical_shards.html").read_text()
    assert "ctl_rel_unw" not in page
    assert f"{value:.1e}" in page


def test_math_renders_without_network(built_book):
    book, _, _ = built_book
    html = book / "_build" / "html"
    page = (html / "nb" / "intro.html").read_text()
    assert "cdn.jsdelivr.net/npm/mathjax" not in page
    assert "_static/mathjax/tex-chtml.js" in page
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()


def test_no_page_loads_anything_from_the_network(built_book):
    book, _, _ = built_book
    pages = sorted((book / "_build" / "html").rglob("*.html"))
    assert len(pages) >= len(NAMES)
    # a script, stylesheet, image or frame fetched from another host on page load (hyperlinks are fine)
    fetch = re.compile(r"<(?:script|img|iframe)\b[^>]*\bsrc=[\"'](?:https?:)?//[^>]*>|"
                       r"<link\b[^>]*\bhref=[\"'](?:https?:)?//[^>]*>", re.I)
    for page in pages:
        assert fetch.findall(page.read_text()) == [], page.name
    # the check bites on the theme's live-code loader, which the pages carry only as an inline
    # constant (fetched on a click of a live-code button, which thebe: false leaves out)
    assert fetch.findall('<script src="https://unpkg.com/thebe@0.8.2/lib/index.js"></script>')
    assert fetch.findall('<link rel="stylesheet" href="//cdn.example.org/x.css">')


def test_launch_and_repository_buttons_use_the_one_repository_setting(built_book):
    import yaml

    book, _, _ = built_book
    repo = yaml.safe_load((book / "_config.yml").read_text())["repository"]
    slug = repo["url"].removeprefix("https://github.com/")
    page = (book / "_build" / "html" / "nb" / "flower.html").read_text()
    nb_path = f"{repo['path_to_book']}/nb/flower.ipynb"
    assert f"https://mybinder.org/v2/gh/{slug}/{repo['branch']}?urlpath=lab/tree/{nb_path}" in page
    assert f"https://colab.research.google.com/github/{slug}/blob/{repo['branch']}/{nb_path}" in page
    assert f'href="{repo["url"]}"' in page  # the repository button
