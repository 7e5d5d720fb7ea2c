"""The book's evidence pieces on hand-made runs: the control's deviation is judged against K_c."""

import numpy as np
import pandas as pd
import pytest

from maskfed.analysis import claims
from maskfed.book import evidence
from maskfed.engine.config import make_run_config
from maskfed.engine.runner import RunResult


def control_run(recovery, *, seed=0, device="cpu", num_clients=8, cohort_size=4, sigma2=0.0, spread=0.0):
    """An identical-shards control run with K = ``num_clients``, K_c = ``cohort_size`` and the given
    per-round 1/Δ_S (both conventions), σ̂² (with A = 1) and update spread."""
    recovery = np.asarray(recovery, dtype=float)
    cfg = make_run_config(partition="identical", identical_client_seeds=True, num_clients=num_clients,
                          cohort_size=cohort_size, rounds=len(recovery), seed=seed, device="cpu")
    m = pd.DataFrame({"round": np.arange(1, len(recovery) + 1), "recovery_unweighted": recovery,
                      "recovery_weighted": recovery, "sigma2_hat": sigma2, "A": 1.0, "update_spread": spread})
    return RunResult(cfg, None, m, {"machine": {"device": device}})


def test_control_deviation_is_measured_against_the_cohort_size_not_the_population():
    # prepare: K = 8 clients, K_c = 4 per round; identical updates give 1/Δ_S = K_c = 4 exactly
    exact = [control_run([4.0] * 5, seed=s) for s in (0, 1)]
    # execute
    ev = evidence.control_evidence(exact)
    # assert: |4 / 4 - 1| = 0 (judged against K = 8 it would be 0.5), CPU tolerance 1e-12
    assert ev == {"deviation": 0.0, "tolerance": 1e-12}


def test_control_deviation_is_the_worst_relative_gap_over_runs_and_rounds():
    # prepare: one round of the second run at K_c (1 + 1e-3), the rest exact (K = 8, K_c = 4)
    off = [control_run([4.0] * 3), control_run([4.0, 4.0 * (1 + 1e-3), 4.0], seed=1)]
    # execute / assert: |4.004 / 4 - 1| = 1e-3 (against K = 8: 0.4995)
    ev = evidence.control_evidence(off)
    assert ev["deviation"] == pytest.approx(1e-3, rel=1e-9) and ev["tolerance"] == 1e-12
    # below K_c by the same relative amount: the same deviation
    below = evidence.control_evidence([control_run([4.0 * (1 - 1e-3)] * 2)])
    assert below["deviation"] == pytest.approx(1e-3, rel=1e-9)
    # σ̂² / A and the update spread count too: the largest of the four is reported
    assert evidence.control_evidence([control_run([4.0] * 2, sigma2=2e-3)])["deviation"] == pytest.approx(2e-3)
    assert evidence.control_evidence([control_run([4.0] * 2, spread=5e-4)])["deviation"] == pytest.approx(5e-4)


def test_control_evidence_with_another_cohort_size_and_a_gpu_run():
    # prepare: K = 20, K_c = 10: 1/Δ_S = 10 is exact; one of the runs ran on CUDA (tolerance 1e-9)
    runs = [control_run([10.0] * 3, num_clients=20, cohort_size=10),
            control_run([10.0] * 3, seed=1, num_clients=20, cohort_size=10, device="cuda:0")]
    # execute / assert: the loosest device tolerance of the runs, no deviation
    assert evidence.control_evidence(runs) == {"deviation": 0.0, "tolerance": 1e-9}
    assert evidence.control_evidence([]) is None










def _verdicts(**given):
    """A verdict table by hand: every claim 'holds' unless given; paper verdicts 'holds'."""
    from maskfed.analysis import claims

    rows = [{"claim": c.key, "title": c.title, "verdict": given.get(c.key, "holds"), "paper_verdict": "holds",
             "paper": "p", "src": "v"} for c in claims.CLAIMS]
    return pd.DataFrame(rows).set_index("claim")


def test_headline_verdict_follows_its_rule():
    assert evidence.headline_verdict(_verdicts()) == "holds"
    assert evidence.headline_verdict(_verdicts(floor="partly")) == "partly"
    # 2 of 5 fail: not more than half, so in part; 3 of 5 fail: does not hold
    assert evidence.headline_verdict(_verdicts(floor="does not hold", cliff="does not hold")) == "partly"
    assert evidence.headline_verdict(_verdicts(floor="does not hold", cliff="does not hold",
                                               spans="does not hold")) == "does not hold"
    # an unmeasured claim is left out: 2 of the 4 measured fail is not more than half
    assert evidence.headline_verdict(_verdicts(stage="not measured here", floor="does not hold",
                                               cliff="does not hold")) == "partly"
    assert evidence.headline_verdict(_verdicts(**{k: "not measured here" for k in evidence.HEADLINE})) == \
        "not measured here"


def test_against_paper_sets_each_setting_beside_the_paper_once():
    # prepare: Table I bs 32 τ 2 at two seeds (factors 1.0 and 2.0) and Table II α = 100 (the same runs), α = 1
    def run(bs, tau, alpha, seed, value):
        cfg = make_run_config(batch_size=bs, local_epochs=tau, alpha=alpha, seed=seed, rounds=4)
        m = pd.DataFrame({"round": range(1, 5), "recovery_unweighted": value, "recovery_weighted": value,
                          "mu2_hat": 1.0, "sigma2_hat": 1.0, "test_acc": 0.5, "pct_rounds_below_one": 0.0,
                          "T_mean": 1.0, "train_loss": 1.0})
        return RunResult(cfg, None, m, {})
    t1 = [run(32, 2, 100, 0, 1.0), run(32, 2, 100, 1, 2.0)]
    t2 = t1 + [run(32, 2, 1, 0, 3.0)]
    # execute
    got = evidence.against_paper(t1, t2)
    # assert: bs 32, τ 2 once (median 1.5, range 1 to 2, the paper's 1.19), α = 1 from Table II, no α = 100 row
    assert list(got.index) == ["bs 32, τ 2", "α = 1"]
    assert got.loc["bs 32, τ 2", ["ours", "low", "high", "paper"]].tolist() == [1.5, 1.0, 2.0, 1.19]
    assert got.loc["α = 1", "table"] == "II" and got.loc["α = 1", "ours"] == 3.0


def _stage_table(values_by_stage):
    """A stage table by hand: one seed, Table I's protocols full τ 1, 2 and bs 32 τ 1, 2, and α 100, 0.1."""
    rows = []
    for stage, (full1, full2, mini1, mini2) in values_by_stage.items():
        for (bs, tau), v in {("full", 1): full1, ("full", 2): full2, ("32", 1): mini1, ("32", 2): mini2}.items():
            rows.append({"seed": 0, "experiment": "table1", "stage": stage, "round": 10 * stage, "stage_acc": 0.1 * stage,
                         "batch_size": bs, "local_epochs": tau, "alpha": 100.0, "recovery_unweighted": v,
                         "recovery_weighted": v, "sigma2_hat": 1.0 / v, "mu2_hat": 0.01 * tau})
        for alpha, v in ((100.0, mini2), (0.1, mini2 * 1.5)):
            rows.append({"seed": 0, "experiment": "table2", "stage": stage, "round": 10 * stage, "stage_acc": 0.1 * stage,
                         "batch_size": "32", "local_epochs": 2, "alpha": alpha, "recovery_unweighted": v,
                         "recovery_weighted": mini2, "sigma2_hat": 1.0, "mu2_hat": 0.01})
    return pd.DataFrame(rows)


def test_matched_stage_verdicts_judge_each_checkpoint_and_combine_by_the_rule():
    # prepare: θ_0 (stage 0, left out) and three checkpoints; the cliff (smallest full over largest minibatch)
    # is 4/1.5 = 2.67 (holds), 3/1.5 = 2.0 (holds), 1.2/1.5 = 0.8 (does not hold)
    table = _stage_table({0: (9, 9, 9, 9), 1: (8, 4, 1.5, 1.2), 2: (6, 3, 1.5, 1.1), 3: (1.3, 1.2, 1.5, 1.4)})
    steps = pd.Series([1, 2, 16, 32], index=pd.MultiIndex.from_tuples(
        [("full", 1), ("full", 2), (32, 1), (32, 2)], names=["batch_size", "local_epochs"]))
    # execute
    m = evidence.matched_stage_verdicts(table, steps)
    # assert: the cliff holds at 2 of 3 and fails at 1 (not more than half): in part; falls with τ holds at
    # every checkpoint (both batch sizes fall); the trade-off cannot be judged at one θ
    assert (m.loc["cliff", "verdict"], m.loc["cliff", "n_holds"], m.loc["cliff", "n"]) == ("partly", 2, 3)
    assert (m.loc["cliff", "n_partly"], m.loc["cliff", "n_fail"]) == (0, 1)
    assert m.loc["tau", "verdict"] == "holds"
    assert (m.loc["tradeoff", "verdict"], m.loc["tradeoff", "n"]) == ("not measured here", 0)
    # the α split: unweighted ×1.5 and weighted flat at every checkpoint (no intervals: the point decides)
    assert m.loc["alpha_weighting", "verdict"] == "holds"
    # fails at 2 of 3: does not hold
    worse = _stage_table({1: (1.3, 1.2, 1.5, 1.4), 2: (1.3, 1.2, 1.5, 1.4), 3: (8, 4, 1.5, 1.2)})
    assert evidence.matched_stage_verdicts(worse, steps).loc["cliff", "verdict"] == "does not hold"
    assert set(evidence.matched_stage_verdicts(None, None)["verdict"]) == {"not measured here"}
    # the checkpoints that vote: 3 after θ_0 at accuracy 0.1 to 0.3; from 0.15 on, 2 of them
    assert evidence.matched_checkpoints(table) == {"n": 3, "acc_low": 0.1, "acc_high": pytest.approx(0.3)}
    assert evidence.matched_checkpoints(table, 0.15)["n"] == 2 and evidence.matched_checkpoints(None)["n"] == 0


def test_matched_stage_verdicts_judge_the_alpha_claims_along_the_cross_trajectories_too():
    # prepare: the stage study above (α = 0.1 is ×1.5 unweighted, flat weighted, at each of 3 checkpoints: holds);
    # the α-cross adds θ from the α = 0.1 trajectory (2 checkpoints after θ_0): there α = 0.1 is ×0.8 of α = 100
    table = _stage_table({0: (9, 9, 9, 9), 1: (8, 4, 1.5, 1.2), 2: (6, 3, 1.5, 1.1), 3: (1.3, 1.2, 1.5, 1.4)})
    steps = pd.Series([1, 2, 16, 32], index=pd.MultiIndex.from_tuples(
        [("full", 1), ("full", 2), (32, 1), (32, 2)], names=["batch_size", "local_epochs"]))
    cross = pd.DataFrame([{"trajectory_alpha": traj, "seed": 0, "experiment": "table2", "stage": st, "round": 10 * st,
                           "stage_acc": 0.1 * st, "batch_size": "32", "local_epochs": 2, "alpha": a,
                           "recovery_unweighted": 2.0 * (0.8 if a == 0.1 else 1.0), "recovery_weighted": 2.0,
                           "sigma2_hat": 1.0, "mu2_hat": 0.01}
                          for traj in (100.0, 0.1) for st in (0, 1, 2) for a in (100.0, 0.1)])
    # execute
    m = evidence.matched_stage_verdicts(table, steps, cross=cross, main_alpha=100.0)
    # assert: only the other trajectory's 2 checkpoints after θ_0 are added (α = 100's are the stage study's own):
    # the α split now holds at 3 of 5 checkpoints and fails at 2 (not more than half): in part
    assert (m.loc["alpha_weighting", "verdict"], m.loc["alpha_weighting", "n"]) == ("partly", 5)
    # claims that need Table I are judged on the stage study's checkpoints only
    assert m.loc["cliff", "n"] == 3
    assert evidence.cross_alphas(cross) == [0.1] and evidence.cross_alphas(None) == []




def _run(bs, tau, values, seed=0, sigma2=1.0, mu2=1.0, acc=0.5):
    cfg = make_run_config(batch_size=bs, local_epochs=tau, seed=seed, rounds=len(values))
    m = pd.DataFrame({"round": range(1, len(values) + 1), "recovery_unweighted": values, "recovery_weighted": values,
                      "mu2_hat": mu2, "sigma2_hat": sigma2, "test_acc": acc, "pct_rounds_below_one": 0.0,
                      "T_mean": 1.0, "train_loss": 1.0})
    return RunResult(cfg, None, m, {})


def test_variant_runs_halve_the_window_and_leave_out_runs_still_falling():
    import numpy as np

    # prepare: 40 rounds; one run flat at 2 with its last 5 rounds at 3, one falling steadily from 8
    flat = _run(32, 2, [2.0] * 35 + [3.0] * 5)
    falling = _run(32, 5, list(8.0 * np.exp(-0.05 * np.arange(40)) * (1 + 0.01 * np.sin(np.arange(40)))))
    # execute / assert: the halved window keeps the last 20 rounds, whose last quarter (5) is all 3.0
    half = evidence.variant_runs([flat], evidence.VARIANTS[0])[0]
    assert len(half.metrics) == 20 and half.metrics["recovery_unweighted"].tail(5).eq(3.0).all()
    kept = evidence.variant_runs([flat, falling], evidence.VARIANTS[1])
    assert [r.config.local_epochs for r in kept] == [2]
    with pytest.raises(ValueError, match=r"variant .*'no such'"):
        evidence.variant_runs([flat], "no such")


def test_variants_with_a_wider_hac_lag_or_benjamini_hochberg_keep_a_run_the_plain_test_calls_falling():
    import numpy as np

    # prepare: one run falling by 0.2 % a round under AR(1) noise (t = -2.18 at the Newey-West lag, p = 0.029,
    # -1.87 at 3 times it), three flat runs (t = 0, p = 1), one run falling steadily (p ≈ 0)
    rng = np.random.default_rng(13)
    e = np.zeros(80)
    for i in range(1, 80):
        e[i] = 0.8 * e[i - 1] + rng.normal(0, 0.05)
    mild = _run(32, 2, list(2.0 * np.exp(-0.002 * np.arange(80) + e)))
    flats = [_run(128, t, [2.0] * 80) for t in (1, 2, 5)]
    steep = _run("full", 1, list(8.0 * np.exp(-0.05 * np.arange(80)) * (1 + 0.01 * np.sin(np.arange(80)))))
    runs = [mild, *flats, steep]
    # execute
    plain, wide, bh = (evidence.variant_runs(runs, v) for v in evidence.VARIANTS[1:])
    # assert: the plain test leaves out both falling runs; 3 × the lag keeps the mild one; so does
    # Benjamini-Hochberg over the 5 runs (0.029 > 2 × 0.05 / 5 = 0.02 at its rank)
    assert [r.config.batch_size for r in plain] == [128, 128, 128]
    assert [r.config.batch_size for r in wide] == [32, 128, 128, 128]
    assert [r.config.batch_size for r in bh] == [32, 128, 128, 128]


def _stage_rows(values: dict) -> pd.DataFrame:
    """Two checkpoints (early: stage 0, late: stage 1) of one seed, the same 1/Δ_S at both."""
    return pd.DataFrame([{"seed": 0, "experiment": "table1", "stage": st, "stage_acc": 0.2 + 0.2 * st,
                          "batch_size": bs, "local_epochs": tau, "recovery_unweighted": v}
                         for st in (0, 1) for (bs, tau), v in values.items()])


def test_stage_claim_judged_on_the_protocol_subsets():
    from maskfed.analysis import claims

    # prepare: full τ 1 at 8, full τ 5, bs 128 τ 5 and bs 32 τ 5 at 4, bs 128 τ 1 at 1. All five: full against
    # minibatch explains 34 % of the log variance (≥ 1/3: "sampling" in both halves, the claim holds). The paper's
    # pair (4 against 1): all of it. τ = 5 only: every value 4, nothing to explain ("neither": does not hold)
    table = _stage_rows({("full", 1): 8.0, ("full", 5): 4.0, ("128", 1): 1.0, ("128", 5): 4.0, ("32", 5): 4.0})
    stage_claim = next(c for c in claims.CLAIMS if c.key == "stage")
    verdicts = claims.verdict_table([claims.Evidence("src", stage=evidence.stage_evidence(table))])
    # execute
    subsets = evidence.stage_subset_verdicts(table, stage_claim)
    st = evidence.stability(verdicts, {"table1": [], "table2": [], "control": []}, n_boot=10, stage_table=table)
    # assert
    assert verdicts.loc["stage", "verdict"] == "holds"
    pair, tau5 = evidence.STAGE_SUBSETS
    assert subsets == {pair: "holds", tau5: "does not hold"}
    assert st.loc["stage", "mark"] == "fragile" and st.loc["stage", "flips"] == f"{tau5}: does not hold"
    # without the stage table the stage verdict gets no mark; a subset with no rows is not measured
    assert evidence.stability(verdicts, {"table1": [], "table2": [], "control": []}, n_boot=10).loc["stage", "mark"] == "–"
    assert evidence.stage_subset_verdicts(table[table["local_epochs"] == 1], stage_claim)[tau5] == "not measured here"


@pytest.mark.slow
def test_stability_says_a_variant_that_drops_a_protocol_cannot_test_the_claim():
    import numpy as np

    from maskfed.analysis import claims

    # prepare: full τ 1 still falling (about 1.5 in its window), full τ 2 flat at 4.0, bs 32 τ 1 and 2 flat at
    # 1.2 and 1.1: the cliff is 1.5 / 1.2 (in part); with the falling run left out, 4.0 / 1.2 (holds)
    falling = list(6.0 * np.exp(-0.02 * np.arange(80)))
    runs = {"table1": [_run("full", 1, falling, sigma2=0.01, acc=0.3), _run("full", 2, [4.0] * 80, sigma2=0.02, acc=0.4),
                       _run(32, 1, [1.2] * 80, sigma2=1.0, mu2=2.0, acc=0.6),
                       _run(32, 2, [1.1] * 80, sigma2=2.0, mu2=3.0, acc=0.7)], "table2": [], "control": []}
    ev = evidence.profile_evidence("src", runs["table1"], [], [], n_boot=100)
    verdicts = claims.verdict_table([ev])
    # execute
    st = evidence.stability(verdicts, runs, n_boot=100)
    # assert: leaving the falling run out drops the whole full-batch τ 1 protocol, which the cliff compares:
    # those variants cannot test it, and the cliff is not marked fragile by them
    assert verdicts.loc["cliff", "verdict"] == "partly"
    assert evidence.VARIANTS[1] in st.loc["cliff", "cannot_test"].split("; ")
    assert evidence.VARIANTS[1] not in st.loc["cliff", "flips"] and st.loc["cliff", "mark"] == "stable"
    assert st.loc["alpha_span", "mark"] == "–"  # not measured here: no mark


@pytest.mark.slow
def test_stability_counts_a_flip_when_the_variant_keeps_every_setting():
    from maskfed.analysis import claims

    # prepare: two seeds of full τ 1, one still falling (about 1.5 in its window), one flat at 6.0; full τ 2 flat
    # at 4.0; bs 32 τ 1 and 2 flat at 1.2 and 1.1. Leaving the falling run out keeps every protocol
    import numpy as np

    falling = list(6.0 * np.exp(-0.02 * np.arange(80)))
    runs = {"table1": [_run("full", 1, falling, sigma2=0.01, acc=0.3),
                       _run("full", 1, [6.0] * 80, sigma2=0.01, acc=0.3, seed=1),
                       _run("full", 2, [4.0] * 80, sigma2=0.02, acc=0.4),
                       _run(32, 1, [1.2] * 80, sigma2=1.0, mu2=2.0, acc=0.6),
                       _run(32, 2, [1.1] * 80, sigma2=2.0, mu2=3.0, acc=0.7)], "table2": [], "control": []}
    verdicts = claims.verdict_table([evidence.profile_evidence("src", runs["table1"], [], [], n_boot=100)])
    # execute
    st = evidence.stability(verdicts, runs, n_boot=100)
    # assert: the variant kept every setting, so its different cliff verdict is a flip, with its counts
    assert st.loc["cliff", "cannot_test"] == "" and st.loc["cliff", "mark"] == "fragile"
    assert evidence.VARIANTS[1] in [f.split(": ")[0] for f in st.loc["cliff", "flips"].split("; ")]
    sizes = evidence.variant_sizes(runs)
    assert sizes.loc[evidence.VARIANTS[1]].to_dict() == {"runs": 4, "of_runs": 5, "settings": 4, "of_settings": 4}
    assert sizes.loc[evidence.VARIANTS[0], "runs"] == 5  # the halved window keeps every run




def test_cell_trends_average_each_cells_slopes_and_count_the_falling_runs():
    import numpy as np

    from maskfed.analysis import uncertainty

    # prepare: bs 32 τ 2 holds a flat run (slope 0, se 0) and one falling 5 % a round; full τ 1 one flat run
    falling = _run(32, 2, list(8.0 * np.exp(-0.05 * np.arange(40)) * (1 + 0.01 * np.sin(np.arange(40)))), seed=1)
    runs = [_run(32, 2, [2.0] * 40), falling, _run("full", 1, [3.0] * 40)]
    t = uncertainty.trend_test(falling.metrics)
    # execute
    out = evidence.cell_trends(runs)
    # assert: the mean of the two slopes, and √(0² + se²) / 2 runs; the flat cell has slope and se 0
    assert out.loc[("32", 2), ["falling", "runs"]].tolist() == [1, 2]
    assert out.loc[("32", 2), "slope"] == pytest.approx(t["slope"] / 2) and t["slope"] == pytest.approx(-0.05, abs=2e-3)
    assert out.loc[("32", 2), "se"] == pytest.approx(t["se"] / 2)
    assert out.loc[("full", 1)].tolist() == [0, 1, 1, 0.0, 0.0]
    # a run too short to test (fewer than 8 rounds in its second half) is counted, not tested
    short = evidence.cell_trends([_run(128, 1, [2.0, 1.5, 1.2])])
    assert short.loc[("128", 1), ["falling", "runs", "tested"]].tolist() == [0, 1, 0]




def test_loses_test_when_dropping_the_settings_alone_changes_the_claim():
    # prepare: a Table I where full batch does not fall with τ (4.0, 2.7, 4.7) and both minibatch groups do
    from test_claims import table1

    from maskfed.analysis import claims

    t1 = table1([4.0, 2.7, 4.7, 1.4, 1.3, 1.25, 1.2, 1.15, 1.1])
    by = {c.key: c for c in claims.CLAIMS}
    both_full = {("table1", ("full", 1)), ("table1", ("full", 2))}
    # execute / assert: without full τ 1 and τ 2 the full-batch group is gone, so "falls with τ" reads 2 of 2
    # instead of 2 of 3: a variant dropping them cannot test it; the minibatch floor does not read them
    assert evidence.loses_test(by["tau"], t1, None, both_full)
    assert not evidence.loses_test(by["floor"], t1, None, both_full)
    assert not evidence.loses_test(by["tau"], t1, None, set())


def test_stability_counts_count_marks_and_untestable_claims():
    st = pd.DataFrame({"mark": ["stable", "fragile", "–", "stable"], "flips": ["", "x: holds", "", ""],
                       "cannot_test": ["a; b", "", "", ""]}, index=["cliff", "tau", "alpha_span", "stage"])
    assert evidence.stability_counts(st) == {"n_variants": len(evidence.VARIANTS), "n_judged": 3, "n_fragile": 1,
                                             "n_untestable": 1, "stage_subsets": True}


def test_the_stage_claim_is_judged_in_the_papers_accuracy_range_with_the_early_checkpoints_apart():
    from maskfed.analysis import claims

    # prepare: two seeds; below the paper's lowest Table I accuracy (0.314) the protocols have not separated and the
    # checkpoint moves everything (stage), above it full batch stands 4x above minibatch at every checkpoint
    rows = []
    for seed in (0, 1):
        for st, acc, full, mini in ((0, 0.10, 9.0, 9.0), (1, 0.20, 3.0, 3.0), (2, 0.40, 4.0, 1.0), (3, 0.50, 4.4, 1.1)):
            for (bs, tau), v in {("full", 1): full, ("full", 5): full, ("128", 1): mini, ("32", 5): mini}.items():
                rows.append({"seed": seed, "experiment": "table1", "stage": st, "stage_acc": acc, "batch_size": bs,
                             "local_epochs": tau, "recovery_unweighted": v * (1 + 0.01 * seed)})
    # execute
    st = evidence.stage_evidence(pd.DataFrame(rows))
    f = claims.CLAIMS[[c.key for c in claims.CLAIMS].index("stage")].evaluate(claims.Evidence("src", stage=st))
    # assert: the verdict comes from the paper's range (sampling: holds); the early half is shown, not counted
    assert evidence.paper_accuracy_floor() == pytest.approx(0.314)
    assert list(st["by_range"].values()) == ["sampling"] and list(st["before"].values()) == ["stage"]
    assert st["by_range"] == {"accuracy 0.40–0.50": "sampling"} and st["before"] == {"accuracy 0.10–0.20": "stage"}
    assert f.verdict == "holds"


def test_matched_stage_votes_only_in_the_accuracy_range_given():
    # prepare: checkpoints 1-3 at accuracy 0.1, 0.2, 0.3; the cliff holds at the first two and fails at the third
    table = _stage_table({0: (9, 9, 9, 9), 1: (8, 4, 1.5, 1.2), 2: (6, 3, 1.5, 1.1), 3: (1.3, 1.2, 1.5, 1.4)})
    steps = pd.Series([1, 2, 16, 32], index=pd.MultiIndex.from_tuples(
        [("full", 1), ("full", 2), (32, 1), (32, 2)], names=["batch_size", "local_epochs"]))
    # execute: only checkpoints at accuracy 0.25 or more vote
    m = evidence.matched_stage_verdicts(table, steps, min_acc=0.25)
    # assert: the one checkpoint left decides; none left: not measured
    assert (m.loc["cliff", "verdict"], m.loc["cliff", "n"]) == ("does not hold", 1)
    assert set(evidence.matched_stage_verdicts(table, steps, min_acc=0.9)["verdict"]) == {"not measured here"}


def test_paper_pair_at_the_protocols_and_at_matched_theta():
    # prepare: at the protocols full τ 5 is 4 times bs 128 τ 1; at two checkpoints in range (accuracy 0.4, 0.5) the same
    # θ give 2 and 2 (one checkpoint below the range, at 0.2, gives 8 and does not count)
    idx = pd.MultiIndex.from_tuples([("full", 5), ("128", 1)], names=["batch_size", "local_epochs"])
    t1 = pd.DataFrame({"recovery_unweighted": [4.0, 1.0]}, index=idx)
    rows = [{"seed": 0, "experiment": "table1", "stage": st, "stage_acc": acc, "batch_size": bs, "local_epochs": tau,
             "recovery_unweighted": v}
            for st, acc, full in ((1, 0.2, 8.0), (2, 0.4, 2.0), (3, 0.5, 2.0))
            for bs, tau, v in (("full", 5, full), ("128", 1, 1.0))]
    # execute
    p = evidence.paper_pair(t1, pd.DataFrame(rows), min_acc=0.3)
    # assert: log 2 / log 4 of the gap remains at matched θ, so stage removes half of it
    assert (p["protocol"], p["matched_median"], p["n"]) == (4.0, 2.0, 2)
    assert p["stage_share"] == pytest.approx(0.5)
    assert evidence.paper_pair(t1, None, 0.3)["n"] == 0
