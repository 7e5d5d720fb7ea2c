"""The browser check of the built book (book/_tools/browsercheck.py): each detection rule on a small
local HTML page, read in headless Chromium at both widths. A page that breaks a rule must be
reported under that rule, and the clean variant of the same page must not be reported at all.

Needs Debian's Chromium and Playwright (skipped with the reason where either is missing: CI does
not install Chromium; ``make book-check`` and these tests run where it is)."""

from __future__ import annotations

import base64
import io
import shutil
import sys

import pytest

from maskfed.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "book" / "_tools"))
import browsercheck  # noqa: E402

pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[book]')")
if not any(shutil.which(b) for b in ("chromium", "chromium-browser")):
    pytest.skip("no Chromium (apt-get install -y chromium)", allow_module_level=True)


def _png(width: int, height: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


_SVG = ("data:image/svg+xml;base64," + base64.b64encode(
    b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100"><rect width="200" height="100"/></svg>').decode())

#: page name -> (article body, the rules it must raise at each width: {width: {rules}}).
#: The article column is 300 px wide at both widths (the phone window is 390 px).
PAGES = {
    "clean": ("<p>Plain text of 17,034 parameters at 0.4529 and 1.19, that is, a formula <span class='math'><mjx-container style='display:inline-block'>"
              "<mjx-math style='display:inline-block;width:40px'>x</mjx-math></mjx-container></span>.</p>"
              f"<img src='{_png(200, 100)}' style='width:100px'>"
              f"<img src='{_SVG}' style='width:200px'>"
              "<div style='overflow-x:auto'><div style='width:250px'>fits</div></div>",
              {"desktop": set(), "phone": set()}),
    "js_error": ("<script>let a = 1;</script><script>let a = 2;</script>"
                 "<script>console.error('invalid theme mode');</script><p>text</p>",
                 {"desktop": {"js-error"}, "phone": {"js-error"}}),
    "other_host": ("<img src='http://example.org/remote.png' alt='remote'>",
                   {"desktop": {"other-host", "image-missing"}, "phone": {"other-host", "image-missing"}}),
    "missing_file": ("<img src='nowhere.png' alt='local'>",
                     {"desktop": {"missing-file", "image-missing"}, "phone": {"missing-file", "image-missing"}}),
    "wide": ("<div style='width:500px'>a wide block with no scroll box</div>",
             {"desktop": {"wider-than-column"}, "phone": {"wider-than-column"}}),
    "closed_box": ("<style>.toggle-hidden { display: none }</style>"
                   "<details><summary>more</summary><div style='width:500px'>wide, once opened</div></details>"
                   "<div class='solution toggle-hidden'><div style='width:600px'>a hidden solution</div></div>",
                   {"desktop": {"wider-than-column"}, "phone": {"wider-than-column"}}),
    "clipped": ("<div style='overflow:hidden;width:300px'><div style='width:500px'>cut off</div></div>",
                {"desktop": {"clipped"}, "phone": {"clipped"}}),
    "scroll_box": ("<div style='overflow-x:auto'><table><tr><td style='min-width:500px'>wide table</td></tr></table></div>",
                   {"desktop": {"scrolls-at-desktop"}, "phone": set()}),
    "equation": ("<mjx-container display='true' style='display:block;overflow-x:auto'>"
                 "<mjx-math style='display:inline-block;width:500px'>a long display</mjx-math></mjx-container>",
                 {"desktop": {"equation-clipped"}, "phone": {"equation-clipped"}}),
    "raster": (f"<img src='{_png(150, 75)}' style='width:100px'>",
               {"desktop": {"image-resolution"}, "phone": {"image-resolution"}}),
    "svg_shrunk": (f"<img src='{_SVG}' style='width:100px' alt='the factor against rounds'>",
                   {"desktop": {"figure-shrunk"}, "phone": {"figure-text-small"}}),
    "alt_path": (f"<img src='{_png(200, 100)}' style='width:100px' alt='../_images/fig-3.png'>",
                 {"desktop": {"alt-path"}, "phone": {"alt-path"}}),
    "doubled": ("<p>The headline holds in <em>part</em> part.</p><table><tr><td>1 1</td></tr></table>",
                {"desktop": {"doubled-word"}, "phone": {"doubled-word"}}),
    "math_between": ("<p>write g and <span class='math'><mjx-container style='display:inline-block'>x</mjx-container>"
                     "</span> and expand; see arXiv:1909.06335 and doi 10.1080/03610918</p>",
                     {"desktop": set(), "phone": set()}),
    "nan": ("<ul><li>the cliff is nan against 2.91</li></ul><pre>nan</pre>",
            {"desktop": {"nan-shown"}, "phone": {"nan-shown"}}),
    "long_number": ("<p>the factor is 1.186234 here</p><table><tr><td>1.186234</td></tr></table>",
                    {"desktop": {"long-number"}, "phone": {"long-number"}}),
    "raw_eval": ("<p>the cliff is {eval}`cliff` here</p>", {"desktop": {"raw-latex"}, "phone": {"raw-latex"}}),
    "raw_latex": ("<p>the factor $\\frac{1}{K_c}$ and {glue:text}`key`</p>", {"desktop": {"raw-latex"}, "phone": {"raw-latex"}}),
    "backticks": ("<p>No `make bench` result was found; <code>make bench</code> is fine.</p>",
                  {"desktop": {"raw-latex"}, "phone": {"raw-latex"}}),
    "debug": ("<div class='cell_output'><pre>chapter 3 executed in 2.1 s at profile 'cpu'</pre></div>",
              {"desktop": {"debug-line"}, "phone": {"debug-line"}}),
    "punctuation": ("<p style='width:100px;font:16px monospace'>"
                    "<span class='math'><mjx-container style='display:inline-block;width:99px'>x</mjx-container></span>"
                    ". next words</p>", {"desktop": {"punctuation-wrapped"}, "phone": {"punctuation-wrapped"}}),
    "punctuation_kept": ("<p style='width:100px;font:16px monospace'><span style='white-space:nowrap'>"
                         "<span class='math'><mjx-container style='display:inline-block;width:99px'>x</mjx-container></span>"
                         ".</span> next words</p>", {"desktop": set(), "phone": set()}),
    "word_broken": ("<table><tr><td style='width:40px;overflow-wrap:anywhere;font:16px monospace'>Minibatch</td></tr></table>",
                    {"desktop": {"word-broken"}, "phone": {"word-broken"}}),
    "word_whole": ("<table><tr><td style='width:40px;font:16px monospace'>a b c d</td></tr></table>",
                   {"desktop": set(), "phone": set()}),
    "placeholder": ("<p>install with pip install git+&lt;repository URL&gt;</p>",
                    {"desktop": {"placeholder"}, "phone": {"placeholder"}}),
    "dev_comment": ("<div class='cell_input'><pre style='white-space:pre-wrap'>n: Optional[int] = None  # papermill reads Optional[int]</pre></div>"
                    "<div class='cell_input' style='display:none'><pre>x = 1  # noqa: E402</pre></div>",
                    {"desktop": {"developer-comment"}, "phone": {"developer-comment"}}),
    "eq_unlinked": ("<p>By eq. (11) the noise adds up; <a href='#e'>eq. (12)</a> links.</p>"
                    "<table><tr><th>eq. (12)</th></tr></table><pre>eq. 3</pre>",
                    {"desktop": {"eq-unlinked"}, "phone": {"eq-unlinked"}}),
    # the book's glossary page: its terms are the ones the other pages must link at first use
    "glossary": ("<dl class='glossary'><dt id='term-ladder'>ladder<a class='headerlink' href='#term-ladder'>#</a></dt>"
                 "<dd>the ladder's checkpoints</dd><dt id='term-T'>T</dt><dd>local steps</dd></dl>",
                 {"desktop": set(), "phone": set()}),
    "term_unlinked": ("<h2>The ladder</h2><p>Each ladder checkpoint; later the <a href='glossary.html#term-ladder'>ladder</a>"
                      " at T steps.</p>", {"desktop": {"term-unlinked"}, "phone": {"term-unlinked"}}),
    "term_linked": ("<table><tr><td>ladder</td></tr></table><p><a href='other.html'>The ladder page</a>. "
                    "Two <a href='glossary.html#term-ladder'>ladders</a>, "
                    "then the ladder unlinked.</p>", {"desktop": set(), "phone": set()}),
    "term_undefined": ("<p><span class='xref std std-term'>nowhere</span>, and "
                       "<a href='glossary.html#term-ladder'><span class='xref std std-term'>ladder</span></a>.</p>",
                       {"desktop": {"term-undefined"}, "phone": {"term-undefined"}}),
}


def _page(body: str) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'></head>"
            f"<body style='margin:0'><main><article class='bd-article' style='width:300px'>{body}</article></main>"
            "</body></html>")


@pytest.fixture(scope="module")
def findings(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    for name, (body, _) in PAGES.items():
        (root / f"{name}.html").write_text(_page(body))
    found = browsercheck.check_book(root)
    return {(f.page.removesuffix(".html"), f.width): f for f in found}, found


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_rule_reports_its_page_and_nothing_else(findings, name):
    _, found = findings
    for width, expected in PAGES[name][1].items():
        # execute: the rules raised on this page at this width
        got = {f.rule for f in found if f.page == f"{name}.html" and f.width == width}
        # assert
        assert got == expected, (name, width, [str(f) for f in found if f.page == f"{name}.html"])


def test_every_rule_is_exercised_by_a_page():
    exercised = set().union(*(rules for _, by_width in PAGES.values() for rules in by_width.values()))
    assert exercised == set(browsercheck.RULES)


@pytest.mark.slow
def test_findings_name_page_width_and_rule(findings):
    _, found = findings
    line = str(next(f for f in found if f.page == "wide.html" and f.width == "phone"))
    assert line.startswith("wide.html [phone 390 px] ") and " wider-than-column: " in line and " 300 px " in line


@pytest.mark.slow
def test_main_exits_1_on_findings_and_0_on_a_clean_book(tmp_path, capsys):
    (tmp_path / "clean.html").write_text(_page(PAGES["clean"][0]))
    assert browsercheck.main([str(tmp_path), "--width", "phone"]) == 0
    (tmp_path / "wide.html").write_text(_page(PAGES["wide"][0]))
    assert browsercheck.main([str(tmp_path), "--width", "phone"]) == 1
    assert "wider-than-column" in capsys.readouterr().out


def test_redirect_pages_are_not_read(tmp_path):
    # prepare: the book's index.html forwards to the first chapter and holds nothing else
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=nb/intro.html" />\n')
    (tmp_path / "page.html").write_text(_page("<p>x</p>"))
    # execute / assert
    assert browsercheck._pages(tmp_path, None) == ["page.html"]


def test_bad_input_is_refused_before_the_browser_starts(tmp_path):
    with pytest.raises(FileNotFoundError, match="html_dir"):
        browsercheck.check_book(tmp_path / "missing")
    with pytest.raises(ValueError, match="widths"):
        (tmp_path / "p.html").write_text("<p>x</p>")
        browsercheck.check_book(tmp_path, widths=["tablet"])
    with pytest.raises(browsercheck.BrowserMissing, match="apt-get install -y chromium"):
        browsercheck.check_book(tmp_path, chromium="no-such-browser-binary")


def test_the_glossary_terms_are_read_from_the_built_glossary_page(tmp_path):
    # prepare: a glossary page as Sphinx writes it (a permalink inside each <dt>), one level down
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "glossary.html").write_text(_page(PAGES["glossary"][0]))
    # execute / assert: the terms without their permalink sign; no glossary page, no terms
    assert browsercheck.glossary_terms(tmp_path) == ["ladder", "T"]
    assert browsercheck.glossary_terms(tmp_path / "nb" / "none") == []
