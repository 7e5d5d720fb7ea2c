"""The verdict chapter's helpers (maskfed.chapters.verdict) on hand-made claims and verdict tables."""

import pandas as pd
import pytest

from maskfed.analysis import claims
from maskfed.chapters import verdict as chapter


def _claim(key, title, criterion):
    return claims.Claim(key=key, title=title, statement="it <is> so", where="Sec. IV", criterion=criterion,
                        measure=lambda ev: claims.NOT_MEASURED)


def test_coverage_values_by_the_order_statistic_argument():
    # execute
    three, four, five, seven = (chapter.coverage_values(n) for n in (3, 4, 5, 7))
    # assert: the range of n seeds misses the median with probability 2 (1/2)^n: 75 % (3), 87.5 % (4),
    # 93.75 % (5), 98.44 % (7); the median of 3 redrawn seeds is the lowest one with probability 7/27 = 25.9 %,
    # of 5 with 0.0512 + 0.0064 + 0.00032 = 5.8 %, of 7 with about 1.0 %
    assert {k: three[k] for k in ("v_n_seeds", "v_cov_range", "v_p_lowest")} == {
        "v_n_seeds": 3, "v_cov_range": "75", "v_p_lowest": "25.9"}
    assert "93.75 % with 5 seeds" in three["v_cov_text"] and "covers the median 75 % of the time" in three["v_cov_text"]
    assert four["v_cov_range"] == "87.5" and four["v_p_lowest"] == "–"
    assert (five["v_cov_range"], five["v_p_lowest"]) == ("93.75", "5.8")
    assert "75 % with 3 seeds, the paper's count" in five["v_cov_text"]
    # 5.8 % is above the 5 % at each end of a 90 % interval, so its ends are the extreme seeds; 1.0 % is not
    assert "more than the 5 % at each end" in five["v_cov_text"]
    assert (seven["v_p_lowest"], seven["v_cov_range"]) == ("1.0", "98.44")
    assert "no more than the 5 % at each end, so the interval can end inside the seed range" in seven["v_cov_text"]
    assert "$" not in five["v_cov_text"]  # glued as text: no raw LaTeX on the page
    with pytest.raises(ValueError, match="n_seeds must be >= 1"):
        chapter.coverage_values(0)


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


def test_changes_table_names_each_changed_claim_by_title_and_whether_data_were_in_view():
    # execute
    t = chapter.changes_table((("2026-12-03", "b", "needs a majority", True),), (_claim("b", "Noise", "x"),))
    # assert
    assert t.to_dict("records") == [{"date": "2026-12-03", "claim": "Noise", "change": "needs a majority",
                                     "data in view": True}]
    with pytest.raises(KeyError):
        chapter.changes_table((("2026-12-03", "zz", "x", False),), (_claim("b", "Noise", "x"),))
    # every recorded change was set after the first archived seeds had been seen
    assert chapter.changes_table()["data in view"].all()


def test_paper_self_text_lists_what_the_papers_own_table_breaks():
    # prepare
    v = pd.DataFrame({"title": ["Cliff", "Floor", "Span"], "paper_verdict": ["holds", "partly", "does not hold"],
                      "paper": ["2.91", "1.19", "×1.2"]})
    # execute / assert
    assert chapter.paper_self_text(v) == "Floor (partly: 1.19); Span (does not hold: ×1.2)"
    assert chapter.paper_self_text(v.iloc[:1]) == "none"



def test_where_in_places_a_value_against_a_range():
    assert [chapter.where_in(v, 1.0, 2.0) for v in (0.5, 1.0, 1.5, 2.0, 2.5)] == [
        "below", "inside", "inside", "inside", "above"]


def test_resnet_cliffs_take_every_resnet_theta_and_skip_other_models():
    # prepare: ResNet-18-GN at two θ (cliffs 6/3 = 2 and 3/2 = 1.5) and a small CNN whose cliff (10) must not count
    def rows(model, width, target, acc, full, mini):
        return [{"model": model, "width": width, "params": 1, "source": "fedavg", "target": target, "test_acc": acc,
                 "when": target * 100,
                 "images": 1, "batch_size": b, "local_epochs": 1, "recovery_unweighted": r}
                for b, r in (("full", full), ("32", mini))]
    t = pd.DataFrame(rows("resnet18_gn", None, 0.35, 0.37, 6.0, 3.0) + rows("resnet18_gn", None, 0.45, 0.46, 3.0, 2.0)
                     + rows("small_cnn_gn", 8, 0.35, 0.36, 10.0, 1.0))
    # execute
    r = chapter.resnet_cliffs([t, None])
    # assert
    assert r == {"n_theta": 2, "cliff_low": 1.5, "cliff_high": 2.0, "acc_low": 0.37, "acc_high": 0.46}
    assert chapter.resnet_cliffs([None])["n_theta"] == 0


def test_bottom_line_reports_the_headline_cell_the_cliff_and_the_counts():
    # prepare: a Table I whose cliff is 4 / 2 = 2, the paper's headline cell inside our seed range, one cell outside
    idx = pd.MultiIndex.from_tuples([("32", 2), ("128", 1), ("full", 1)], names=["batch_size", "local_epochs"])
    t1 = pd.DataFrame({"recovery_unweighted": [1.2, 2.0, 4.0]}, index=idx)
    ev = claims.Evidence("src", table1=t1)  # no replicates: the interval is the point
    against = pd.DataFrame({"paper": [1.19, 8.96], "ours": [1.2, 4.0], "low": [1.1, 3.0], "high": [1.3, 5.0],
                            "table": ["I", "I"]}, index=["bs 32, τ 2", "full, τ 1"])
    verdicts = pd.DataFrame({"verdict": ["holds", "partly", "does not hold", "holds", "partly"],
                             "title": list("abcde")}, index=["floor", "cliff", "spans", "alpha_span", "tau"])
    # execute
    b = chapter.bottom_line(verdicts, ev, against, n_seeds=5, rounds=200, model="small_cnn_gn",
                            resnet={"n_theta": 0})
    # assert: headline claims floor holds, cliff partly, spans fails, alpha_span holds -> "partly" (1 of 4 fails)
    assert b["b_headline"] == "holds in part"
    assert (b["b_head_paper"], b["b_head_ours"], b["b_head_where"]) == (1.19, 1.2, "inside")
    # the paper's cliff: its smallest full-batch cell (full, τ 5: 3.96) over its largest minibatch one (bs 128, τ 1: 1.36)
    assert (b["b_cliff"], b["b_cliff_low"], b["b_cliff_high"]) == (2.0, 2.0, 2.0)
    assert b["b_cliff_paper"] == pytest.approx(3.96 / 1.36) and b["b_cliff_where"] == "above"
    assert (b["b_inside"], b["b_settings"]) == (1, 2)
    assert (b["b_n_claims"], b["b_n_holds"], b["b_n_partly"], b["b_n_fail"], b["b_n_confounded"]) == (5, 2, 2, 1, 0)
    assert b["b_cov"] == 93.75 and b["b_is_resnet"] is False and b["b_rn_n_theta"] == 0
    with pytest.raises(KeyError):
        chapter.bottom_line(verdicts, ev, against.iloc[1:], n_seeds=5, rounds=200, model="m", resnet={})
