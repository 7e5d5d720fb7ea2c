"""The book's table layout script (book/_static/maskfed-cards.js with maskfed.css) in headless Chromium: on a wide
screen or a phone a table that fits stays as it is, one whose text cells can wrap to fit its column wraps (a number
or range stays whole), and only one still too wide reads as stacked rows, each card inside the column.

Needs Debian's Chromium and Playwright, like tests/test_browsercheck.py (skipped with the reason otherwise)."""

from __future__ import annotations

import shutil
import sys

import pytest

from maskfed.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "book" / "_tools"))
import browsercheck  # noqa: E402

pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[book]')")
if not any(shutil.which(b) for b in ("chromium", "chromium-browser")):
    pytest.skip("no Chromium (apt-get install -y chromium)", allow_module_level=True)

STATIC = REPO_ROOT / "book" / "_static"


def _table(tid: str, head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th class='col_heading'>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<div class='cell_output'><table id='{tid}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>"


#: article 700 px wide (a 1400 px window's text column); on the phone 370 px
PAGE = ("<!doctype html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{(STATIC / 'maskfed.css').read_text()}</style></head>"
        "<body style='margin:0;font:16px sans-serif'><article style='max-width:700px;width:95vw'>"
        + _table("fits", ["bs", "τ", "1/Δ_S"], [["32", "2", "1.19"], ["128", "5", "1.05"]])
        + _table("wraps", ["claim", "paper", "ours", "verdict"],
                 [["Rounds below 1", "max 4.5% (bs 128, τ 1); noisiest 3: 0.0, 0.0, 0.0%",
                   "max 5.9% (bs 32, τ 5); noisiest 3: 5.9, 1.5, 2.0%", "does not hold"],
                  ["Minibatch floor", "1.10–1.36", "1.06–1.62 and then some more words to wrap here", "confounded by stage"]])
        + _table("stacks", [f"c{i}" for i in range(12)], [[f"{i}.123456e-08" for i in range(12)]])
        # a long hyphenated name (a run folder) is no number: in a stacked card it breaks to stay inside the column
        + _table("names", [f"c{i}" for i in range(8)], [["cifar10-small_cnn_gn-dirichlet-a100-bs128-t1-s0-and-a-longer-name-to-pass-the-column train_loss, "
                                                          "round 1, archived 2.319, rel. 2.6e-10"] + ["1.5"] * 7])
        # pandas' Styler writes nowrap under the table's id (it outranks a class): a long header must still wrap
        + "<style>#long td, #long th { white-space: nowrap; min-width: 14em; }</style>"
        + _table("long", ["1/Δ_S n_k-weighted · cpu-paper (small CNN, archived)", "test accuracy · cpu-long (small CNN, archived)"],
                 [["1.19 (1.14–1.17)", "0.612 (0.598–0.620)"]])
        # a Markdown table: the theme puts it in a box that scrolls sideways, so the table itself never overflows
        + "<div class='pst-scrollable-table-container' style='overflow-x:auto'><table id='md' class='table'>"
          "<thead><tr>" + "".join(f"<th>c{i}</th>" for i in range(12)) + "</tr></thead><tbody><tr>"
          + "".join(f"<td>{i}.123456e-08</td>" for i in range(12)) + "</tr></tbody></table></div>"
        # a folded output (hidden when the page loads, 0 wide) that a reader opens later
        + "<div id='fold' style='display:none'>" + _table("folded", [f"c{i}" for i in range(12)],
                                                          [[f"{i}.123456e-08" for i in range(12)]]) + "</div>"
        + f"<script>{(STATIC / 'maskfed-cards.js').read_text()}</script></article></body></html>")

IDS = ["fits", "wraps", "stacks", "names", "long", "md", "folded"]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    page_path = tmp_path_factory.mktemp("cards") / "page.html"
    page_path.write_text(PAGE)
    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browsercheck.chromium_path(), headless=True,
                                     args=list(browsercheck.CHROMIUM_FLAGS))
        for width in (1400, 390):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(page_path.as_uri())
            page.evaluate("""async () => { document.getElementById('fold').style.display = 'block';
                await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))); }""")
            out[width] = page.evaluate("""ids => Object.fromEntries(ids.map(id => {
                const t = document.getElementById(id);
                const whole = Array.from(t.querySelectorAll('span.maskfed-whole'));
                const article = t.closest('article').getBoundingClientRect().right;
                const wider = t.scrollWidth > t.clientWidth + 1 || t.getBoundingClientRect().right > article + 1;
                const cellsInside = Array.from(t.querySelectorAll('td')).every(
                    td => td.scrollWidth <= td.clientWidth + 1 && td.getBoundingClientRect().right <= article + 1
                          && Array.from(td.querySelectorAll('span')).every(
                              s => s.getBoundingClientRect().right <= article + 1));
                return [id, {cls: Array.from(t.classList).sort().filter(c => c !== 'table'), wider, cellsInside,
                             whole: whole.map(s => s.textContent),
                             wholeOneLine: whole.every(s => s.getClientRects().length === 1)}];
            }))""", IDS)
            page.close()
        browser.close()
    return out


@pytest.mark.slow
def test_wide_screen_keeps_a_fitting_table_wraps_a_text_table_and_stacks_only_the_widest(layouts):
    got = layouts[1400]
    assert got["fits"]["cls"] == ["maskfed-cards"]
    assert got["wraps"]["cls"] == ["maskfed-cards", "maskfed-wrap"] and not got["wraps"]["wider"]
    assert got["stacks"]["cls"] == ["maskfed-cards", "maskfed-cards-stack"] and not got["stacks"]["wider"]


@pytest.mark.slow
def test_a_wrapped_table_keeps_each_range_and_number_whole(layouts):
    wraps = layouts[1400]["wraps"]
    assert {"1.10–1.36", "1.06–1.62"} <= set(wraps["whole"]) and wraps["wholeOneLine"]


@pytest.mark.slow
def test_on_a_phone_a_narrow_table_stays_a_table_and_the_wide_ones_stack(layouts):
    got = layouts[390]
    assert got["fits"]["cls"] == ["maskfed-cards"]
    assert "maskfed-cards-stack" in got["stacks"]["cls"]  # twelve numbers cannot fit 370 px, even wrapped
    assert not any(v["wider"] for v in got.values())  # every table fits: as it is, wrapped or stacked


@pytest.mark.slow
def test_on_a_phone_a_card_with_a_long_label_stays_inside_the_column(layouts):
    assert all(v["cellsInside"] for v in layouts[390].values())


@pytest.mark.slow
def test_a_markdown_table_in_a_sideways_scrolling_box_stacks_where_wider_than_its_column(layouts):
    # its own box never overflows (the theme's container scrolls instead), yet formulas in it ran past a phone's edge
    assert "maskfed-cards-stack" in layouts[390]["md"]["cls"] and not layouts[390]["md"]["wider"]


@pytest.mark.slow
def test_a_table_folded_when_the_page_loads_is_laid_out_when_opened(layouts):
    for width in (1400, 390):
        assert "maskfed-cards-stack" in layouts[width]["folded"]["cls"] and not layouts[width]["folded"]["wider"]


def _evaluate(tmp_path, body: str, script: str, widths=(390,), style: str = "") -> dict:
    """``script`` evaluated in headless Chromium on a page of ``body`` with the book's CSS (and ``style``) and
    script, once per viewport width: {width: its value}."""
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "page.html"
    page_path.write_text("<!doctype html><html><head><meta name='viewport' content='width=device-width'>"
                         f"<style>{(STATIC / 'maskfed.css').read_text()}{style}</style></head>"
                         f"<body style='margin:0'><article>{body}"
                         f"<script>{(STATIC / 'maskfed-cards.js').read_text()}</script></article></body></html>")
    got = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browsercheck.chromium_path(), headless=True,
                                     args=list(browsercheck.CHROMIUM_FLAGS))
        for width in widths:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(page_path.as_uri())
            got[width] = page.evaluate(script)
            page.close()
        browser.close()
    return got


@pytest.mark.slow
def test_a_card_names_a_short_row_label_by_its_index_and_a_long_one_by_itself(tmp_path):
    # prepare: pandas-like tables, one indexed by bs (short labels), one by claim (a title)
    def indexed(tid, name, labels):
        head = f"<thead><tr><th class='index_name level0'>{name}</th><th class='col_heading'>vote</th></tr></thead>"
        body = "".join(f"<tr><th class='row_heading'>{x}</th><td>6</td></tr>" for x in labels)
        return f"<div class='cell_output'><table id='{tid}'>{head}<tbody>{body}</tbody></table></div>"

    # execute
    got = _evaluate(tmp_path, indexed("bs", "bs", ["32", "full"]) + indexed("claims", "claim", ["The cliff"]),
                    "() => Array.from(document.querySelectorAll('tbody tr')).map(r => r.dataset.rowlabel)")[390]
    # assert: "bs 32" and "bs full" keep their index's name; the claim's title stands alone (not "claim The cliff")
    assert got == ["bs 32", "bs full", "The cliff"]


@pytest.mark.slow
def test_a_card_sets_a_sentence_below_its_label_left_aligned_and_keeps_a_number_beside_its_label(tmp_path):
    # prepare: a table too wide for a phone, one cell of running text (a criterion) and numbers
    words = "Holds if some protocol has such rounds and their share falls with the noise"
    table = _table("t", ["criterion"] + [f"c{i}" for i in range(9)], [[words] + ["1.123456e-08"] * 9])
    # execute
    got = _evaluate(tmp_path, table, """() => ({
        stacked: document.getElementById('t').classList.contains('maskfed-cards-stack'),
        cells: Array.from(document.querySelectorAll('td')).slice(0, 2).map(td => {
            const s = getComputedStyle(td);  // flex: the label beside its value; block: the label on a line of its own
            return {align: s.textAlign, labelBeside: s.display === 'flex'}; })})""")[390]
    # assert: the sentence reads from the left under its label; the number stays right of its label, as before
    assert got["stacked"]
    assert got["cells"] == [{"align": "left", "labelBeside": False}, {"align": "right", "labelBeside": True}]


@pytest.mark.slow
def test_a_table_that_fits_a_phone_only_as_a_word_or_two_a_line_reads_as_cards(tmp_path):
    # prepare: a text column of pairs beside five numbers (the verdict page's table of runs still falling)
    pairs = "; ".join(f"bs 32 τ {t} over bs 128 τ {t}: ×1.07, moving against it by 0.21 % a round" for t in (1, 2, 5))
    table = _table("t", ["claim", "cells", "still", "way", "rate", "pairs"],
                   [["Minibatch floor", "3", "2 of 3", "against", "0.21", pairs]])
    # execute
    got = _evaluate(tmp_path, table, "() => Array.from(document.getElementById('t').classList).sort()",
                    widths=(1400, 390), style="#t td, #t th { white-space: nowrap; }")
    # assert: on a wide screen the pairs wrap in their column; on a phone, where wrapping leaves a word or two a
    # line, the row reads as a card
    assert got[1400] == ["maskfed-cards", "maskfed-wrap"]
    assert got[390] == ["maskfed-cards", "maskfed-cards-stack"]
