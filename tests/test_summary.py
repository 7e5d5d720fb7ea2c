"""Tests for maskfed.analysis.summary: the paper's summary convention (median over the last quarter per run,
median across seeds, pooled share of rounds below one), the paper's tables and the comparisons."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from maskfed.analysis import summary
from maskfed.analysis.summary import (METRICS, compare, paper_table, protocol_order, rank_correlation, summarize,
                                      summarize_run, tail_window)
from maskfed.engine.config import make_run_config
from maskfed.engine.runner import RunResult

NAN = float("nan")


def metrics_frame(n, **columns):
    """A per-round table with every METRICS column (constant 1.0 unless given)."""
    df = pd.DataFrame({"round": np.arange(1, n + 1)})
    for m in METRICS:
        df[m] = columns.get(m, [1.0] * n)
    return df


# ----------------------------------------------------------------------------- tail window

@pytest.mark.parametrize("rounds, expected", [(200, 50), (40, 10), (20, 5), (7, 1), (4, 1), (3, 1), (1, 1)])
def test_tail_window(rounds, expected):
    # last quarter, at least one round: 200 // 4 = 50, 40 // 4 = 10, 7 // 4 = 1, 3 // 4 = 0 -> 1
    assert tail_window(rounds) == expected


# ----------------------------------------------------------------------------- one run

def test_summarize_run_medians_over_last_quarter_skipping_nan():
    # 16 rounds -> window = last 4 rows (rounds 13..16).
    #   recovery_unweighted tail (1, 4, 2, 3) -> median (2 + 3)/2 = 2.5; earlier rounds 100 must not count
    #   test_acc tail (NaN, 0.5, NaN, 0.8) -> median of (0.5, 0.8) = 0.65; round 12 (0.1) and
    #     round 10 (0.9) lie outside the window
    #   sigma2_hat tail (0.1, 0.3, 0.2, 10) -> (0.2 + 0.3)/2 = 0.25 (a mean would give 2.65)
    #   mu2_hat all NaN in the window -> NaN
    n = 16
    acc = [NAN] * n
    acc[9], acc[11] = 0.9, 0.1
    acc[13], acc[15] = 0.5, 0.8
    df = metrics_frame(
        n,
        recovery_unweighted=[100.0] * 12 + [1.0, 4.0, 2.0, 3.0],
        test_acc=acc,
        sigma2_hat=[50.0] * 12 + [0.1, 0.3, 0.2, 10.0],
        mu2_hat=[7.0] * 12 + [NAN] * 4,
        T_mean=[16.0] * n,
    )

    out = summarize_run(df)

    assert set(out) == set(METRICS)
    assert out["recovery_unweighted"] == pytest.approx(2.5)
    assert out["test_acc"] == pytest.approx(0.65)
    assert out["sigma2_hat"] == pytest.approx(0.25)
    assert math.isnan(out["mu2_hat"])
    assert out["T_mean"] == 16.0
    assert out["train_loss"] == 1.0


# ----------------------------------------------------------------------------- across seeds

def _result(tmp_path, per_round_recovery, acc_last, seed, **cfg):
    n = len(per_round_recovery)
    acc = [NAN] * (n - 1) + [acc_last]
    config = make_run_config(seed=seed, **cfg)
    return RunResult(config, tmp_path / f"run-{config.key()}",
                     metrics_frame(n, recovery_unweighted=per_round_recovery, test_acc=acc), {"seed": seed})


def test_summarize_medians_across_seeds_and_pooled_below_one(tmp_path):
    # 4 rounds per run -> window = last round only, so each run's median is its last value.
    # Setting (full, 1):
    #   seed 0: (0.5, 2, 2, 9)      -> 9, 1 round < 1
    #   seed 1: (3, 3, 3, 1.0)      -> 1, 0 rounds < 1 (1.0 is not below one)
    #   seed 2: (0.9, 0.8, 0.7, 2)  -> 2, 3 rounds < 1
    #   median across seeds of (9, 1, 2) = 2 (a mean would give 4)
    #   pooled below one: (1 + 0 + 3) / 12 rounds = 33.33 % (median of per-seed 25/0/75 % would be 25)
    #   test_acc: median of (0.3, 0.4, 0.5) = 0.4
    # Setting (32, 2): recoveries 1.2, 1.1, 1.3 every round -> median 1.2, 0 % below one.
    # Rows come out in input order: (32, 2) first.
    results = [
        _result(tmp_path, [1.2] * 4, 0.6, 0, batch_size=32, local_epochs=2),
        _result(tmp_path, [0.5, 2.0, 2.0, 9.0], 0.3, 0, batch_size="full", local_epochs=1),
        _result(tmp_path, [1.1] * 4, 0.7, 1, batch_size=32, local_epochs=2),
        _result(tmp_path, [3.0, 3.0, 3.0, 1.0], 0.4, 1, batch_size="full", local_epochs=1),
        _result(tmp_path, [1.3] * 4, 0.8, 2, batch_size=32, local_epochs=2),
        _result(tmp_path, [0.9, 0.8, 0.7, 2.0], 0.5, 2, batch_size="full", local_epochs=1),
    ]

    out = summarize(results, by=["batch_size", "local_epochs"])

    assert list(out.index) == [("32", 2), ("full", 1)]
    assert list(out.index.names) == ["batch_size", "local_epochs"]
    assert set(METRICS) | {"pct_rounds_below_one", "seeds", "rounds"} <= set(out.columns)
    assert out.loc[("full", 1), "recovery_unweighted"] == pytest.approx(2.0)
    assert out.loc[("full", 1), "pct_rounds_below_one"] == pytest.approx(100 * 4 / 12)
    assert out.loc[("full", 1), "test_acc"] == pytest.approx(0.4)
    assert out.loc[("32", 2), "recovery_unweighted"] == pytest.approx(1.2)
    assert out.loc[("32", 2), "pct_rounds_below_one"] == 0.0
    assert out.loc[("32", 2), "test_acc"] == pytest.approx(0.7)
    assert list(out["seeds"]) == [3, 3]
    assert list(out["rounds"]) == [4, 4]


def test_summarize_by_alpha_lines_up_with_paper_table2(tmp_path):
    results = [_result(tmp_path, [1.5] * 4, 0.4, s, alpha=0.1) for s in range(2)] + \
              [_result(tmp_path, [1.2] * 4, 0.7, 0, alpha=100.0)]

    out = summarize(results, by=["alpha"])

    assert list(out.index) == [0.1, 100.0] and out.index.name == "alpha"
    paper = paper_table("table2")
    both = compare({"ours": out, "paper": paper}, ["recovery_unweighted"])
    assert list(both.index) == [100.0, 1.0, 0.1]                  # nearest IID first, the paper's α = 1 added
    assert both[("recovery_unweighted", "paper")].tolist() == [1.19, paper.loc[1.0, "recovery_unweighted"], 1.50]
    assert both[("recovery_unweighted", "ours")].iloc[[0, 2]].tolist() == [1.2, 1.5]


# ----------------------------------------------------------------------------- the paper's tables

def test_paper_table1():
    t1 = paper_table("table1")

    assert t1.shape[0] == 9
    assert list(t1.index.names) == ["batch_size", "local_epochs"]
    assert set(t1.index) == {(bs, tau) for bs in ("32", "128", "full") for tau in (1, 2, 5)}
    assert {"T_mean", "recovery_unweighted", "recovery_weighted", "mu2_hat", "sigma2_hat", "test_acc",
            "pct_rounds_below_one"} <= set(t1.columns)
    assert "local_steps" not in t1.columns and "test_accuracy" not in t1.columns
    assert t1.loc[("full", 1), "recovery_unweighted"] == 8.96
    assert t1.loc[("full", 1), "recovery_weighted"] == 8.95
    assert t1.loc[("full", 1), "test_acc"] == 0.314
    assert t1.loc[("32", 5), "T_mean"] == 80
    assert t1.loc[("32", 2), "recovery_unweighted"] == 1.19      # the headline 1.19 (paper abstract)
    assert t1.loc[("128", 1), "pct_rounds_below_one"] == 4.5
    assert t1.loc[("32", 5), "sigma2_hat"] == pytest.approx(0.6)


def test_paper_table2():
    t2 = paper_table("table2")

    assert t2.index.name == "alpha"
    assert list(t2.index) == [100.0, 1.0, 0.1]
    assert t2.loc[0.1, "recovery_unweighted"] == 1.50
    assert t2.loc[0.1, "recovery_weighted"] == 1.18
    assert t2.loc[1.0, "recovery_weighted"] == 1.17
    assert t2.loc[100.0, "test_acc"] == 0.680
    # α = 100 in Table II is the (32, 2) cell of Table I
    t1 = paper_table("table1")
    assert t2.loc[100.0, "recovery_unweighted"] == t1.loc[("32", 2), "recovery_unweighted"]


def test_paper_table_unknown_name():
    with pytest.raises(ValueError, match="table3"):
        paper_table("table3")


# ----------------------------------------------------------------------------- comparisons

def test_protocol_order_puts_small_batches_first_full_last_and_alpha_largest_first():
    idx = pd.MultiIndex.from_tuples([("full", 1), ("128", 5), ("32", 2), ("full", 2), ("16", 1)],
                                    names=["batch_size", "local_epochs"])
    # "128" < "32" as text: the order must read the batch size as a number
    assert list(protocol_order(idx)) == [("16", 1), ("32", 2), ("128", 5), ("full", 1), ("full", 2)]
    assert list(protocol_order(pd.Index([1.0, 100.0, 0.1], name="alpha"))) == [100.0, 1.0, 0.1]


def test_compare_keeps_each_source_in_its_own_column():
    # prepare: the live profile, an archived profile covering only two of its rows, and the paper
    idx = pd.MultiIndex.from_tuples([("full", 1), ("32", 2), ("16", 1)], names=["batch_size", "local_epochs"])
    live = pd.DataFrame({"recovery_unweighted": [7.0, 1.3, 1.1]}, index=idx)
    longer = pd.DataFrame({"recovery_unweighted": [1.2, 5.0]}, index=pd.MultiIndex.from_tuples(
        [("32", 2), ("full", 1)], names=["batch_size", "local_epochs"]))
    # execute
    out = compare({"cpu": live, "cpu-long (archived)": longer, "paper": paper_table("table1")},
                  ["recovery_unweighted", "test_acc"])
    # assert: the rows are every source's settings in protocol order, so the live grid's (16, 1) and the paper's
    # other seven protocols are all there; others aligned by setting, never averaged together
    assert list(out.columns) == [(q, s) for q in ("recovery_unweighted", "test_acc")
                                 for s in ("cpu", "cpu-long (archived)", "paper")]
    assert list(out.index) == [("16", 1), ("32", 1), ("32", 2), ("32", 5), ("128", 1), ("128", 2), ("128", 5),
                               ("full", 1), ("full", 2), ("full", 5)]
    by = out["recovery_unweighted"]
    assert by.loc[("16", 1)].tolist()[0] == 1.1 and by.loc[("16", 1)].iloc[1:].isna().all()
    assert by.loc[("32", 2)].tolist() == [1.3, 1.2, 1.19] and by.loc[("full", 1)].tolist() == [7.0, 5.0, 8.96]
    assert by.loc[("128", 1)].iloc[:2].isna().all() and by.loc[("128", 1), "paper"] == 1.36
    assert out[("test_acc", "cpu")].isna().all()                 # a quantity a source lacks is NaN
    with pytest.raises(ValueError, match="indexed by"):
        compare({"cpu": live, "table2": paper_table("table2")}, ["recovery_unweighted"])
    with pytest.raises(ValueError, match="at least one"):
        compare({}, ["recovery_unweighted"])


def test_rank_correlation_hand_cases():
    a = pd.Series([1.0, 2.0, 3.0, 4.0])
    assert rank_correlation(a, pd.Series([10.0, 20.0, 35.0, 100.0])) == pytest.approx(1.0)   # monotone, not linear
    assert rank_correlation(a, pd.Series([9.0, 5.0, 2.0, -1.0])) == pytest.approx(-1.0)
    # (1, 2, 3) vs (1, 3, 2): ranks deviate by (-1, 0, 1) and (-1, 1, 0): cov 1, var 2 -> 0.5
    # (= 1 - 6 Σd²/(n(n²-1)) = 1 - 6·2/24)
    assert rank_correlation(pd.Series([1.0, 2.0, 3.0]), pd.Series([1.0, 3.0, 2.0])) == pytest.approx(0.5)


def test_rank_correlation_drops_missing_pairs_before_ranking():
    # After dropping the pair with a NaN: a = (1, 2, 4), b = (1, 4, 2) -> ranks (1,2,3) vs (1,3,2) -> 0.5.
    # Ranking first and dropping after would correlate (1, 2, 4) with (1, 3, 2) -> 3/sqrt(84) = 0.327.
    a = pd.Series([1.0, 2.0, 3.0, 4.0])
    b = pd.Series([1.0, 4.0, NAN, 2.0])
    assert rank_correlation(a, b) == pytest.approx(0.5)
    # fewer than three complete pairs -> NaN
    assert math.isnan(rank_correlation(pd.Series([1.0, 2.0, NAN]), pd.Series([1.0, 2.0, 3.0])))


def test_rank_correlation_aligns_on_index():
    a = pd.Series([1.0, 2.0, 3.0], index=["x", "y", "z"])
    b = pd.Series([30.0, 20.0, 10.0], index=["z", "y", "x"])  # same values as a, other order
    assert rank_correlation(a, b) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["smoke", "cpu", "cpu-long", "paper"])
def test_profiles_evaluate_inside_the_summary_window(name):
    # test_acc is summarised over the last tail_window(rounds) rounds, so each profile's evaluation
    # schedule (fedavg.eval_rounds) must test every eval_every_tail rounds inside that window.
    from maskfed.engine.config import load_profile
    from maskfed.engine.fedavg import eval_rounds

    cfg = load_profile(name).run(0)
    window = set(range(cfg.rounds - tail_window(cfg.rounds), cfg.rounds))
    evaluated = eval_rounds(cfg.rounds, cfg.eval_every, cfg.eval_every_tail) & window
    # counted back from the last round: rounds-1, rounds-1-e, ... (plus any eval_every round in the window)
    assert set(range(cfg.rounds - 1, min(window) - 1, -cfg.eval_every_tail)) <= evaluated
    if name == "paper":
        assert evaluated == set(range(150, 200))  # every one of the last 50 rounds


def test_aggregation_gap_pct_hand_case_and_rounding_bounds():
    table = pd.DataFrame({"recovery_unweighted": [1.36, 2.00], "recovery_weighted": [1.35, 2.00]})

    gaps = summary.aggregation_gap_pct(table, decimals=2)

    assert gaps["gap_pct"].tolist() == pytest.approx([100 * 0.01 / 1.36, 0.0])
    # printed 1.36 vs 1.35: the true values may agree exactly, or differ by up to 0.02
    assert gaps["gap_min_pct"].tolist() == pytest.approx([0.0, 0.0])
    assert gaps["gap_max_pct"].tolist() == pytest.approx([100 * 0.02 / 1.36, 100 * 0.01 / 2.0])
    assert "gap_min_pct" not in summary.aggregation_gap_pct(table)
    with pytest.raises(ValueError, match="recovery_weighted"):
        summary.aggregation_gap_pct(table[["recovery_unweighted"]])


def test_paper_table1_aggregation_gaps_against_the_papers_two_statements():
    gaps = summary.aggregation_gap_pct(summary.paper_table("table1"), decimals=2)

    assert gaps["gap_pct"].max() == pytest.approx(100 * 0.01 / 1.32)  # 1.32 vs 1.31 at bs 128, tau 2
    assert gaps["gap_pct"].idxmax() == ("128", 2)
    assert gaps.loc[("128", 1), "gap_pct"] == pytest.approx(100 * 0.01 / 1.36)  # 1.36 vs 1.35
    assert int((gaps["gap_pct"] > 0).sum()) == 3
    assert gaps["gap_pct"].max() > summary.PAPER_TEXT["aggregation_gap_sec_iv_a"]  # as printed: not within 0.04%
    assert gaps["gap_pct"].max() < summary.PAPER_TEXT["aggregation_gap_sec_iv_b"]  # but within 1%
    assert gaps.loc[("32", 2), "gap_pct"] == 0.0  # the Table II protocol prints equal values


# ----------------------------------------------------------------------------- the identical-shards control

def _control_rounds(deltas_list):
    from maskfed.engine.fedavg import round_metrics

    return pd.DataFrame([round_metrics(d, [50] * d.shape[0]) for d in deltas_list])


def test_control_check_accepts_identical_updates_and_rejects_a_0p1_percent_perturbation():
    # K_c = 10 identical updates: every deviation is float64 rounding. Perturb one client's update by
    # 0.1 % in an orthogonal direction: 1/Δ_S moves by only ~1e-7 relative (so the old 1e-6 check
    # passed it), while the 1e-12 check and the spread column both reject it.
    g = torch.Generator().manual_seed(0)
    same = torch.randn(1000, generator=g).expand(10, 1000).clone()
    noise = torch.randn(1000, generator=g)
    noise -= (noise @ same[0]) / (same[0] @ same[0]) * same[0]          # orthogonal to Δ
    perturbed = same.clone()
    perturbed[3] += 1e-3 * noise * same[0].norm() / noise.norm()        # ‖Δ_4 − Δ‖ = 0.1 % of ‖Δ‖
    tol = summary.control_tolerance("cpu")

    exact = summary.control_deviations(_control_rounds([same]), 10)
    off = summary.control_deviations(_control_rounds([same, perturbed]), 10)

    assert tol == 1e-12
    assert exact["update_spread"] == 0.0
    assert max(exact.values()) < tol
    assert off["update_spread"] == pytest.approx(1e-3, rel=1e-3)
    # hand computation: ‖KΔ + e‖² / (K (K‖Δ‖² + ‖e‖²)) = K (1 + ε²/K²) / (1 + ε²/K), ε = 1e-3:
    # relative deviation ≈ ε² (1/K − 1/K²) = 9e-8
    assert off["recovery_unweighted"] == pytest.approx(1e-6 * (1 / 10 - 1 / 100), rel=1e-3)
    assert off["recovery_unweighted"] < 1e-6               # what the old check let through
    assert off["recovery_unweighted"] > tol and off["sigma2_rel"] > tol   # what the new one rejects


def test_control_deviations_by_round_gives_each_rounds_deviation_and_the_max_is_the_worst():
    # prepare: K_c = 4, two hand-made rounds: exact, then 1/Δ_S = 4.4 (10 % over) with σ̂² = 0.5, A = 2
    m = pd.DataFrame({"recovery_unweighted": [4.0, 4.4], "recovery_weighted": [4.0, 3.8],
                      "sigma2_hat": [0.0, 0.5], "A": [1.0, 2.0], "update_spread": [0.0, 1e-3]})
    # execute
    by_round = summary.control_deviations_by_round(m, 4)
    worst = summary.control_deviations(m, 4)
    # assert: per round, and the worst round's values
    assert list(by_round.columns) == ["dev_unweighted", "dev_weighted", "sigma2_rel", "update_spread"]
    assert by_round["dev_unweighted"].tolist() == pytest.approx([0.0, 0.1])
    assert by_round["dev_weighted"].tolist() == pytest.approx([0.0, 0.05])
    assert by_round["sigma2_rel"].tolist() == pytest.approx([0.0, 0.25])
    assert worst == pytest.approx({"recovery_unweighted": 0.1, "recovery_weighted": 0.05, "sigma2_rel": 0.25,
                                   "update_spread": 1e-3})
    # a round whose measurement is missing is no pass
    assert math.isnan(summary.control_deviations(m.assign(A=[1.0, float("nan")]), 4)["sigma2_rel"])


def test_control_tolerance_by_device_and_errors():
    assert summary.control_tolerance("cuda:0") == summary.CONTROL_TOLERANCE["cuda"]
    assert summary.CONTROL_TOLERANCE["cuda"] < 1e-7        # still rejects a 0.1 % client difference
    with pytest.raises(ValueError, match="device"):
        summary.control_tolerance("mps")
    with pytest.raises(ValueError, match="k_c"):
        summary.control_deviations(pd.DataFrame(), 1)
    with pytest.raises(ValueError, match="update_spread"):
        summary.control_deviations(pd.DataFrame({"recovery_unweighted": [2.0]}), 2)


# ----------------------------------------------------------------------------- orderings and eq. (12)

def _table1(values):
    idx = pd.MultiIndex.from_tuples(list(values), names=["batch_size", "local_epochs"])
    return pd.DataFrame({"recovery_unweighted": list(values.values())}, index=idx)


def test_protocol_orderings_hand_cases():
    paper_like = _table1({("full", 1): 9.0, ("full", 2): 4.1, ("full", 5): 4.0,
                          ("128", 1): 1.36, ("128", 2): 1.32, ("128", 5): 1.18,
                          ("32", 1): 1.24, ("32", 2): 1.19, ("32", 5): 1.10})
    out = summary.protocol_orderings(paper_like)
    assert (out["cliff"], out["n_falling"], out["n_groups"]) == (True, 3, 3)
    # a full-batch value below a minibatch one breaks the cliff; a rise with τ breaks one group
    broken = _table1({("full", 1): 1.2, ("full", 2): 4.1, ("128", 1): 1.36, ("128", 2): 1.5})
    out = summary.protocol_orderings(broken)
    assert (out["cliff"], out["n_falling"], out["n_groups"]) == (False, 0, 2)
    assert out["t_inversions"] is None  # no T_mean column: the paper's T ordering is not checked
    # the paper's own claim, monotone in T within each group, checked on the paper's own table:
    # T = 20 (bs 128, τ 5) gives 1.18 and T = 32 (bs 32, τ 2) gives 1.19
    own = summary.protocol_orderings(summary.paper_table("table1"))
    assert own["t_inversions"] == [(("128", 5), ("32", 2))]
    clean = paper_like.assign(T_mean=[1, 2, 5, 4, 8, 20, 16, 32, 80])
    clean.loc[("128", 5), "recovery_unweighted"] = 1.21  # between T = 16 (1.24) and T = 32 (1.19)
    assert summary.protocol_orderings(clean)["t_inversions"] == []
    with pytest.raises(ValueError, match="batch_size"):
        summary.protocol_orderings(pd.DataFrame({"recovery_unweighted": [1.0]}))


def test_eq12_identity_gap_is_rounding_for_consistent_rounds_and_large_otherwise():
    # K_c = 4, A = 5, B = 2: σ̂² = (5 − 2)/(3/4) = 4, ‖μ̂‖² = 1, r̂ = 1/4; (4/4 + 1)/(5/4) = 1.6 = 4·2/5
    good = pd.DataFrame({"mu2_hat": [1.0, 2.0], "sigma2_hat": [4.0, 0.0], "recovery_unweighted": [1.6, 4.0]})
    assert summary.eq12_identity_gap(good, 4) < 1e-15          # the σ̂² = 0 round is skipped
    bad = good.assign(recovery_unweighted=[1.6 * 1.01, 4.0])
    assert summary.eq12_identity_gap(bad, 4) == pytest.approx(1 - 1 / 1.01, rel=1e-9)   # |1.6 / 1.616 − 1|


def test_table1_contrast_by_hand():
    # prepare: two full-batch and two minibatch protocols; the paper's table ranks them the same way
    idx = pd.MultiIndex.from_tuples([("full", 1), ("full", 2), ("32", 1), ("32", 2)],
                                    names=["batch_size", "local_epochs"])
    ours = pd.DataFrame({"recovery_unweighted": [5.0, 4.0, 2.0, 1.0], "sigma2_hat": [1e-4, 2e-4, 1e-2, 5e-2]}, index=idx)
    paper = pd.DataFrame({"recovery_unweighted": [9.0, 4.1, 1.3, 1.2], "sigma2_hat": [4e-4, 1e-3, 7e-2, 2e-1]}, index=idx)
    # execute
    c = summary.table1_contrast(ours, paper)
    # assert: ranges, cliff = 4 / 2, perfect rank agreement
    assert (c["full_min"], c["full_max"], c["mini_min"], c["mini_max"]) == (4.0, 5.0, 1.0, 2.0)
    assert c["cliff"] == 2.0
    assert c["spearman_rec"] == pytest.approx(1.0) and c["spearman_sigma"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="full-batch and minibatch"):
        summary.table1_contrast(ours.iloc[:2], paper)
