"""The verdict chapter's helpers (maskfed.chapters.verdict) on hand-made claims and verdict tables."""

import pandas as pd

from maskfed.analysis import claims
from maskfed.chapters import verdict as chapter


def _claim(key, title, criterion):
    return claims.Claim(key=key, title=title, statement="it <is> so", where="Sec. IV", criterion=criterion,
                        measure=lambda ev: claims.NOT_MEASURED)


def test_coverage_values_by_the_order_statistic_argument():
    # execute
    three, four = chapter.coverage_values(3), chapter.coverage_values(4)
    # assert: the range of n seeds misses the median with probability 2 (1/2)^n: 75 % (3), 87.5 % (4),
    # 93.75 % (5); the median of 3 redrawn seeds is the lowest one with probability 7/27 = 25.9 %
    assert three == {"v_n_seeds": 3, "v_cov_range": "75", "v_cov_five": "93.75", "v_p_lowest": "26"}
    assert four["v_cov_range"] == "87.5" and four["v_p_lowest"] == "–"


def test_criteria_html_escapes_and_capitalises_only_ascii_starts():
    # prepare: one criterion opens with a Latin letter, one with σ̂² (σ and Σ differ)
    items = (_claim("a", "A & B", "holds if x > 1"), _claim("b", "Noise", "σ̂² falls"))
    checks = (_claim("c", "Control", "exact"),)
    # execute
    html = chapter.criteria_html(items, checks)
    # assert
    assert "<li><b>A &amp; B</b> (Sec. IV). <em>it &lt;is&gt; so.</em> Holds if x &gt; 1.</li>" in html
    assert "σ̂² falls." in html and "Σ" not in html
    assert html.endswith("<p>Code check, not counted: <b>Control</b>: <em>it &lt;is&gt; so.</em> Exact.</p>")


def test_changes_html_names_each_changed_claim_by_title():
    # execute
    html = chapter.changes_html((("2026-12-03", "b", "needs a majority"),), (_claim("b", "Noise", "x"),))
    # assert
    assert html == "<ul><li>2026-12-03, <b>Noise</b>: needs a majority.</li></ul>"


def test_paper_self_text_lists_what_the_papers_own_table_breaks():
    # prepare
    v = pd.DataFrame({"title": ["Cliff", "Floor", "Span"], "paper_verdict": ["holds", "partly", "does not hold"],
                      "paper": ["2.91", "1.19", "×1.2"]})
    # execute / assert
    assert chapter.paper_self_text(v) == "Floor (partly: 1.19); Span (does not hold: ×1.2)"
    assert chapter.paper_self_text(v.iloc[:1]) == "none"


def test_model_note_names_the_small_cnn_with_both_counts():
    assert chapter.model_note("resnet18_gn", 1, 2) == "its model is the paper's ResNet-18-GN"
    assert chapter.model_note("small_cnn", 62006, 11173962) == (
        "its model is a small GroupNorm CNN (62,006 parameters), not the paper's ResNet-18-GN (11,173,962)")

