"""The verdict chapter's helpers (maskfed.chapters.verdict) on hand-made claims and verdict tables."""

import math

import pandas as pd
import pytest

from maskfed.analysis import claims
from maskfed.chapters import verdict as chapter


def test_coverage_values_by_the_order_statistic_argument():
    # execute
    three, four, five, seven = (chapter.coverage_values(n) for n in (3, 4, 5, 7))
    # assert: the range of n seeds misses the median with probability 2 (1/2)^n: 75 % (3), 87.5 % (4),
    # 93.75 % (5), 98.44 % (7); the median of 3 redrawn seeds is the lowest one with probability 7/27 = 25.9 %,
    # of 5 with 0.0512 + 0.0064 + 0.00032 = 5.8 %, of 7 with about 1.0 %
    assert {k: three[k] for k in ("v_n_seeds", "v_cov_range", "v_p_lowest", "v_other_seeds", "v_cov_other")} == {
        "v_n_seeds": 3, "v_cov_range": 75.0, "v_p_lowest": 25.9, "v_other_seeds": 5, "v_cov_other": 93.75}
    assert four["v_cov_range"] == 87.5 and four["v_p_lowest"] != four["v_p_lowest"] and not four["v_seeds_odd"]
    assert (five["v_cov_range"], five["v_p_lowest"], five["v_other_seeds"], five["v_cov_other"]) == (93.75, 5.8, 3, 75.0)
    # 5.8 % is above the 5 % at each end of a 90 % interval, so its ends are the extreme seeds; 1.0 % is not
    assert five["v_end"] == pytest.approx(5.0) and five["v_ends_at_seeds"] and three["v_ends_at_seeds"]
    assert (seven["v_p_lowest"], seven["v_cov_range"], seven["v_ends_at_seeds"]) == (1.0, 98.44, False)
    assert not chapter.coverage_values(1)["v_seeds_odd"]  # one seed: no seed spread to speak of
    with pytest.raises(ValueError, match="n_seeds must be >= 1"):
        chapter.coverage_values(0)


def test_paper_breaks_lists_what_the_papers_own_table_breaks():
    # prepare
    v = pd.DataFrame({"title": ["Cliff", "Floor", "Span"], "paper_verdict": ["holds", "partly", "does not hold"],
                      "paper": ["2.91", "1.19", "×1.2"]})
    # execute / assert
    got = chapter.paper_breaks(v)
    assert got.to_dict("index") == {"Floor": {"paper": "1.19", "verdict": "partly"},
                                    "Span": {"paper": "×1.2", "verdict": "does not hold"}}
    assert chapter.paper_breaks(v.iloc[:1]).empty


def _one_claim_tables():
    """One claim confounded by stage (partly at the protocols, does not hold at matched stage: 2 of 8 checkpoints
    hold, 1 in part, 5 not), stable but untestable by one variant, and not settled (a gap closing at 0.47 % a
    round, meeting in 108 rounds); a second claim measured by no source."""
    table = pd.DataFrame({"title": ["The cliff", "Trade-off"], "where": ["Sec. IV-B", "Sec. IV-D"],
                          "paper": ["2.91", "yes"], "paper_verdict": ["holds", "partly"], "src": ["1.67", "–"],
                          "src verdict": ["partly", "not measured here"],
                          "verdict": ["confounded by stage", "not measured here"],
                          "protocol_verdict": ["partly", "not measured here"], "from": ["src", "–"]},
                         index=pd.Index(["cliff", "tradeoff"], name="claim"))
    matched = pd.DataFrame({"verdict": ["does not hold", "not measured here"], "n_holds": [2, 0], "n_partly": [1, 0],
                            "n_fail": [5, 0], "n": [8, 0]}, index=["cliff", "tradeoff"])
    stable = pd.DataFrame({"mark": ["stable", "–"], "flips": ["", ""], "cannot_test": ["falling out", ""]},
                          index=["cliff", "tradeoff"])
    trend = pd.DataFrame({"still": ["1 of 2 cells"], "way": ["against"], "meet": [107.6], "against_rate": [0.4712],
                          "toward_rate": [float("nan")], "pairs": ["x"]}, index=["cliff"])
    return table, matched, stable, trend


def test_verdict_table_keeps_one_short_row_per_claim_with_its_marks():
    # prepare
    table, matched, stable, trend = _one_claim_tables()
    # execute
    t = chapter.verdict_table(table, matched, stable, trend)
    # assert: ours is the deciding source's value; the marks are words; an unmeasured claim has none
    assert t.loc["The cliff"].to_dict() == {"paper": "2.91", "ours": "1.67", "matched": "does not hold",
                                            "verdict": "confounded by stage", "marks": "stable · not settled"}
    assert (t.loc["Trade-off", "ours"], t.loc["Trade-off", "marks"]) == ("–", "")
    assert chapter.verdict_table(table).loc["The cliff", ["matched", "marks"]].tolist() == ["–", ""]


def test_details_table_gives_what_the_marks_rest_on_as_numbers():
    # prepare
    table, matched, stable, trend = _one_claim_tables()
    # execute
    d = chapter.verdict_table(table, matched, stable, trend, details=True)
    # assert: the protocol verdict before the matched view, the checkpoint counts, the variant that cannot test it,
    # the drift rounded to two decimals and the rounds until the gap meets
    row = d.loc["The cliff"]
    assert (row["where"], row["paper verdict"], row["from"]) == ("Sec. IV-B", "holds", "src")
    assert (row["protocols"], row["votes"], row["hold"], row["in part"], row["within tolerance"], row["not"]) == (
        "partly", 8, 2, 1, 0, 5)
    assert (row["cannot test"], row["fragile under"], row["drift"], row["meet"]) == ("falling out", "", 0.47, 108.0)
    assert d.loc["Trade-off", "votes"] == 0 and d.loc["Trade-off", "drift"] != d.loc["Trade-off", "drift"]


def test_source_table_gives_each_sources_value_and_verdict():
    from maskfed.analysis import claims as cl

    table, *_ = _one_claim_tables()
    t = chapter.source_table(table, [cl.Evidence("src")])
    assert list(t.columns) == ["src", "src verdict"] and t.loc["The cliff"].tolist() == ["1.67", "partly"]


def test_where_in_places_a_value_against_a_range():
    assert [chapter.where_in(v, 1.0, 2.0) for v in (0.5, 1.0, 1.5, 2.0, 2.5)] == [
        "below", "inside", "inside", "inside", "above"]


def test_resnet_cliffs_take_every_resnet_theta_skip_other_models_and_read_the_latest_fedavg_theta():
    # prepare: ResNet-18-GN at two θ (cliffs 6/3 = 2 and 3/2 = 1.5) and a small CNN whose cliff (10) must not count
    def rows(model, width, target, acc, full, mini):
        return [{"model": model, "width": width, "params": 1, "source": "fedavg", "target": target, "test_acc": acc,
                 "when": target * 100,
                 "images": 1, "batch_size": b, "local_epochs": 1, "recovery_unweighted": r}
                for b, r in (("full", full), ("32", mini))]
    t = pd.DataFrame(rows("resnet18_gn", None, 0.35, 0.37, 6.0, 3.0) + rows("resnet18_gn", None, 0.45, 0.46, 3.0, 2.0)
                     + rows("small_cnn_gn", 8, 0.35, 0.36, 10.0, 1.0))
    # and a centralised-SGD θ (cliff 8/2 = 4) at a larger step than any FedAvg round: not the latest FedAvg θ
    t = pd.concat([t, pd.DataFrame(rows("resnet18_gn", None, 0.55, 0.56, 8.0, 2.0)).assign(source="centralised",
                                                                                             when=3000)])
    # execute
    r = chapter.resnet_cliffs([t, None], reference="bs 32, τ 1")
    # assert: every ResNet θ in the ranges; the latest FedAvg θ is round 45 (accuracy 0.46, cliff 1.5, bs 32 at 2)
    assert r == {"n_theta": 3, "cliff_low": 1.5, "cliff_high": 4.0, "acc_low": 0.37, "acc_high": 0.56,
                 "late_round": 45, "late_acc": 0.46, "late_cliff": 1.5, "late_ref": 2.0}
    assert chapter.resnet_cliffs([None])["n_theta"] == 0 and chapter.resnet_cliffs([None])["late_round"] == 0
    assert math.isnan(chapter.resnet_cliffs([t])["late_ref"])  # no reference protocol named


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


def _resnet_table():
    """ResNet-18-GN at one target, two protocols, θ reached both ways; centralised values 1.5x and 2x FedAvg's."""
    def row(source, bs, tau, value, iqr=0.1, when=40):
        return {"model": "resnet18_gn", "width": None, "params": 11_173_962, "source": source, "target": 0.45,
                "test_acc": 0.46, "when": when, "images": 0, "batch_size": bs, "local_epochs": tau,
                "recovery_unweighted": value, "recovery_unweighted_q1": value - iqr / 2,
                "recovery_unweighted_q3": value + iqr / 2}
    return pd.DataFrame([row("fedavg", "full", 1, 3.0), row("fedavg", "32", 2, 1.2),
                         row("centralised", "full", 1, 4.5, when=1750), row("centralised", "32", 2, 2.4, when=1750)])


def test_resnet_values_at_fedavg_and_centralised_theta_and_the_route_to_the_paper():
    # prepare: the paper's Table I by hand: full τ 1 = 3.0 and bs 32 τ 2 = 1.0, at accuracy 0.46 and 0.80
    paper = pd.DataFrame({"test_acc": [0.46, 0.8], "recovery_unweighted": [3.0, 1.0]},
                         index=pd.MultiIndex.from_tuples([("full", 1), ("32", 2)], names=["batch_size", "local_epochs"]))
    # execute
    r = chapter.resnet_values([_resnet_table(), None], paper)
    # assert: the cliff 3.0 / 1.2 = 2.5 at FedAvg θ (round 40), 4.5 / 2.4 = 1.875 -> 1.88 at centralised θ; the
    # ratios to the paper 1.0 and 1.2 (FedAvg), 1.5 and 2.4 (centralised): FedAvg θ nearer in 2 of 2 protocols
    assert (r["r_ways"], r["r_fedavg_rounds"], r["r_fedavg_holds"], r["r_fedavg_measured"]) == (2, "40", 1, 1)
    assert (r["r_fedavg_cliff_low"], r["r_centralised_cliff_high"]) == (2.5, 1.88)
    assert (r["r_fedavg_ratio_low"], r["r_fedavg_ratio_high"], r["r_centralised_ratio_high"]) == (1.0, 1.2, 2.4)
    assert (r["r_nearer"], r["r_both"], r["r_fed_median"], r["r_cen_median"]) == (2, 2, 1.1, 1.95)
    # the minibatch protocol at FedAvg θ: 1.2 times the paper's, at accuracy 0.46 against the paper's 0.8
    assert (r["r_mini_low"], r["r_mini_high"], r["r_mini_acc_low"], r["r_mini_paper_acc_high"]) == (1.2, 1.2, 0.46, 0.8)
    # without ResNet-18-GN nothing is measured
    assert chapter.resnet_values([_resnet_table().assign(model="small_cnn_gn", width=8)]) == {"r_ways": 0}
    assert chapter.resnet_values([]) == {"r_ways": 0}


def test_route_table_gives_centralised_over_fedavg_per_model():
    # execute: centralised θ give 1.5 and 2 times the value at FedAvg θ, both beyond the IQR of 0.1
    t = chapter.route_table([_resnet_table()])
    # assert
    assert t.loc["ResNet-18-GN"].to_dict() == {"low": 1.5, "median": 1.75, "high": 2.0, "beyond": 2, "cells": 2}
    assert chapter.route_table([None]).empty


def test_fingerprint_table_compares_each_run_by_the_kind_it_recorded():
    from maskfed.engine import data, runner
    from maskfed.engine.runner import RunResult

    # prepare: an old run that recorded only the sampled fingerprint, a new one with its kind, one of other data
    images = data.synthetic_image_data(n_train=20, n_test=10, seed=0)
    old = RunResult(None, None, None, {"data_fingerprint": runner.data_fingerprint_sampled(images)})
    new = RunResult(None, None, None, runner.fingerprint_fields(images))
    other = RunResult(None, None, None, {"data_fingerprint": "0" * 16, "data_fingerprint_kind": runner.FINGERPRINT_KIND})
    # execute
    same, mixed = chapter.fingerprint_table([old, new], images), chapter.fingerprint_table([other], images)
    # assert: each compared with this build's fingerprint of its own kind
    assert len(same) == 2 and same["same"].all()
    assert set(same["this build"]) == {runner.data_fingerprint(images), runner.data_fingerprint_sampled(images)}
    assert mixed.to_dict("records") == [{"kind": runner.FINGERPRINT_KIND, "archived": "0" * 16,
                                         "this build": runner.data_fingerprint(images), "same": False}]
    assert chapter.fingerprint_table([], images).empty


def test_archive_facts_reads_the_label_and_where_each_rerun_first_differed(monkeypatch):
    from types import SimpleNamespace as NS

    # prepare: one archive whose 2 re-runs were checked: one identical, one off at round 1 (2.3187 archived, re-run
    # 2.3187 * (1 + 2.6e-10)); the summary cells off by 0.16734 relative, 1/Δ_S by 1.2 / 1.19 - 1
    verification = {"utc": "2026-12-05T10:00:00", "summary_rtol": 1e-6, "machine": "cpu (x)", "runs": [
        {"label": "run-a", "identical": True},
        {"label": "run-b", "identical": False, "summary_max_rel_diff": 0.16734,
         "summary_archived": {"recovery_unweighted": 1.19}, "summary_rerun": {"recovery_unweighted": 1.2},
         "first_difference": {"column": "train_loss", "round": 1, "archived": 2.3187, "rerun": 2.3187 * (1 + 2.6e-10)}}]}
    label = NS(runs=2, devices=["cpu (Xeon)"], first_utc="2026-12-01T00:00", last_utc="2026-12-05T00:00",
               commits=["629ff29296"], code_hashes=["75cb70fe35e068d9"], changed=[], verification=verification,
               outcome="not reproduced")
    monkeypatch.setattr(chapter.archive, "label", lambda runs, name: label)
    monkeypatch.setattr(chapter.archive, "column_name", lambda name: f"{name} (archived)")
    # execute
    facts, reruns = chapter.archive_facts({"cpu-paper": ["r1", "r2"], "cpu-long": []})
    # assert: one row per archive with runs; the differences rounded to three significant digits
    row = facts.loc["cpu-paper (archived)"]
    assert (row["runs"], row["first"], row["last"], row["re-run"], row["re-runs"]) == (2, "2026-12-01", "2026-12-05",
                                                                                        "not reproduced", 2)
    assert (row["summary off"], row["1/Δ_S off"], row["tolerance"]) == (0.167, 0.0084, 1e-6)
    # the identical re-run names no difference; the other its metric, round, archived value and relative gap
    assert reruns.to_dict("index") == {"run-b": {"metric": "train_loss", "round": 1, "archived": 2.319, "off": 2.6e-10}}
    assert len(facts) == 1


def test_cross_range_values_count_only_checkpoints_in_the_papers_accuracy_range():
    # prepare: one trajectory, two checkpoints; at the early one (accuracy 0.2) α = 0.1 is 3× α = 100, at the later
    # one (0.5) half of it
    rows = [{"trajectory_alpha": 100.0, "seed": 0, "stage": st, "stage_acc": acc, "alpha": a,
             "recovery_unweighted": u, "recovery_weighted": 1.0}
            for st, acc, u01 in ((1, 0.2, 3.0), (2, 0.5, 0.5)) for a, u in ((0.1, u01), (100.0, 1.0))]
    # execute
    got = chapter.cross_range_values(pd.DataFrame(rows), 0.314)
    # assert: only the later checkpoint counts; its ratio is 0.5; no cross gives no checkpoint
    assert (got["v_ax_lo"], got["v_ax_hi"], got["v_ax_n"]) == (0.5, 0.5, 1)
    assert (got["v_ax_small"], got["v_ax_large"]) == (0.1, 100.0)
    assert chapter.cross_range_values(None, 0.314) == {"v_ax_n": 0}
