"""The verdict criteria on hand-made tables: one that holds, one that fails, one with a missing profile."""

import math

import numpy as np
import pandas as pd
import pytest

from maskfed.analysis import claims

PROTOCOLS = [("full", 1, 1), ("full", 2, 2), ("full", 5, 5), ("128", 1, 4), ("128", 2, 8), ("32", 1, 16),
             ("128", 5, 20), ("32", 2, 32), ("32", 5, 80)]


def table1(rec, *, sigma=None, mu=None, acc=None, below=None):
    """A Table I summary with the given recovery factors (the paper's protocol order)."""
    idx = pd.MultiIndex.from_tuples([(b, t) for b, t, _ in PROTOCOLS], names=["batch_size", "local_epochs"])
    n = len(PROTOCOLS)
    return pd.DataFrame({"T_mean": [float(T) for _, _, T in PROTOCOLS], "recovery_unweighted": rec,
                         "recovery_weighted": rec,
                         "mu2_hat": mu if mu is not None else np.geomspace(1e-3, 8e-3, n),
                         "sigma2_hat": sigma if sigma is not None else np.geomspace(1e-4, 1.0, n),
                         "test_acc": acc if acc is not None else np.linspace(0.3, 0.8, n),
                         "pct_rounds_below_one": below if below is not None else [0, 0, 0, 4, 2, 1, 0, 0, 0]},
                        index=idx)


def table2(unweighted, weighted):
    return pd.DataFrame({"recovery_unweighted": unweighted, "recovery_weighted": weighted},
                        index=pd.Index([100.0, 1.0, 0.1], name="alpha"))


HOLDS = claims.Evidence("good", table1([9.0, 4.5, 4.0, 1.4, 1.3, 1.25, 1.2, 1.15, 1.1]),
                        table2([1.2, 1.2, 1.5], [1.2, 1.19, 1.2]),
                        control={"deviation": 1e-15, "tolerance": 1e-12},
                        stage={"by_range": {"early": "sampling", "late": "sampling"}})
FAILS = claims.Evidence("bad", table1([3.0] * 9, sigma=[1e-2] * 9, mu=[1e-3] * 9, acc=[0.5] * 9,
                                      below=[0] * 9),
                        table2([1.0, 2.0, 1.0], [1.0, 2.0, 1.0]),
                        control={"deviation": 1e-6, "tolerance": 1e-12},
                        stage={"by_range": {"early": "stage", "late": "neither"}})


def test_a_table_that_holds_holds_every_claim():
    found = {c.key: c.evaluate(HOLDS) for c in claims.CLAIMS}
    assert {k: f.verdict for k, f in found.items()} == {c.key: "holds" for c in claims.CLAIMS}
    assert found["cliff"].value == f"{4.0 / 1.4:.2f}"
    assert found["cliff"].numbers["estimate"] == pytest.approx(4.0 / 1.4) and math.isnan(found["cliff"].numbers["low"])
    b = found["below_one"].numbers
    assert (b["max_pct"], b["max_batch_size"], b["max_tau"], b["noisiest_zeros"]) == (4.0, "128", 1, 3)


def test_a_table_that_fails_fails_every_claim():
    found = {c.key: c.evaluate(FAILS).verdict for c in claims.CLAIMS}
    assert found == {c.key: "does not hold" for c in claims.CLAIMS}


def test_the_control_is_a_code_check_not_a_claim():
    assert "control" not in [c.key for c in claims.CLAIMS]
    (control,) = claims.CODE_CHECKS
    assert control.evaluate(HOLDS).verdict == "holds" and control.evaluate(FAILS).verdict == "does not hold"
    assert len(claims.verdict_table([HOLDS])) == len(claims.CLAIMS)
    assert claims.verdict_table([HOLDS], claims.CODE_CHECKS).loc["control", "verdict"] == "holds"


def _one(key, ev):
    return next(c for c in claims.CLAIMS if c.key == key).evaluate(ev)


def test_partly_needs_a_majority_of_the_groups():
    # falls with τ at one batch size of three (full only): was "partly", is "does not hold"
    one = claims.Evidence("one", table1([9.0, 4.5, 4.0, 1.2, 1.3, 1.1, 1.4, 1.15, 1.2]))
    assert _one("tau", one).numbers["n_falling"] == 1 and _one("tau", one).verdict == "does not hold"
    two = claims.Evidence("two", table1([9.0, 4.5, 4.0, 1.2, 1.3, 1.25, 1.4, 1.15, 1.1]))
    assert _one("tau", two).numbers["n_falling"] == 2 and _one("tau", two).verdict == "partly"
    # ‖μ̂‖² rising at one batch size of three
    mu = [1e-3, 2e-3, 3e-3, 5e-3, 4e-3, 5e-3, 3e-3, 4e-3, 3e-3]  # full rises; 128: 5, 4, 3; 32: 5, 4, 3
    f = _one("signal_steps", claims.Evidence("mu", table1(HOLDS.table1["recovery_unweighted"].tolist(), mu=mu)))
    assert f.numbers == {"n_rising": 1, "groups": 3} and f.verdict == "does not hold"
    # the stage verdict: one of two ranges says "sampling" → not a majority
    half = claims.Evidence("half", stage={"by_range": {"early": "stage", "late": "sampling"}})
    both = claims.Evidence("both", stage={"by_range": {"early": "both", "late": "sampling"}})
    assert _one("stage", half).verdict == "does not hold" and _one("stage", both).verdict == "partly"
    assert claims.majority(2, 3) and not claims.majority(1, 2) and not claims.majority(0, 0)


def test_rounds_below_one_must_decline_with_the_noise():
    rec = HOLDS.table1["recovery_unweighted"].tolist()
    # the archive's pattern: the noisiest cell has the most rounds below 1 (share rises with σ̂²)
    rising = claims.Evidence("rising", table1(rec, below=[0, 0, 0, 0.5, 0.5, 1, 2, 4, 6.2]))
    f = _one("below_one", rising)
    assert f.verdict == "does not hold" and f.numbers["rho"] > 0 and f.numbers["noisiest_zeros"] == 0
    # declining, but only two of the three noisiest at zero: partly
    assert _one("below_one", claims.Evidence("two", table1(rec, below=[0, 0, 0, 4, 2, 1, 0.5, 0, 0]))).verdict == "partly"
    # declining and zero in the three noisiest: holds (as the paper's own table)
    assert _one("below_one", HOLDS).verdict == "holds"
    assert _one("below_one", claims.paper_evidence()).verdict == "holds"


def test_a_weighted_factor_that_rises_ten_percent_is_not_flat():
    # the archive's α = 0.1 split: unweighted ×1.48, weighted 1.165 → 1.277 (×1.10)
    ev = claims.Evidence("split", table2=table2([1.20, 1.25, 1.776], [1.165, 1.20, 1.277]))
    f = _one("alpha_weighting", ev)
    assert f.verdict == "partly" and f.value == "×1.48 vs ×1.10"
    assert (f.numbers["unweighted_estimate"], f.numbers["weighted_estimate"]) == pytest.approx((1.776 / 1.20, 1.277 / 1.165))
    flat = claims.Evidence("flat", table2=table2([1.20, 1.25, 1.776], [1.165, 1.17, 1.20]))
    assert _one("alpha_weighting", flat).verdict == "holds"  # ×1.03: within 5 %
    assert _one("alpha_weighting", claims.Evidence("no", table2=table2([1.2, 1.2, 1.1], [1.2, 1.2, 1.2]))).verdict == (
        "does not hold")


def test_the_claims_quote_the_papers_tables():
    # the numbers notebooks/verdict.md's table of the claims glues, read from the paper's Tables I and II
    n = claims.paper_numbers()
    assert (n["alpha_lo"], n["alpha_hi"], n["proto_lo"], n["proto_hi"]) == pytest.approx((1.19, 1.50, 1.10, 8.96))
    t1 = claims.summary.paper_table("table1")
    assert (n["below_max"], n["below_bs"], n["below_tau"]) == (t1["pct_rounds_below_one"].max(), "128", 1)


def test_partial_verdicts_between_the_thresholds():
    # the cliff above 1 but below 2; one batch size not falling with τ; a minibatch value of 1.8
    ev = claims.Evidence("mid", table1([3.0, 2.8, 2.6, 1.8, 1.3, 1.25, 1.2, 1.25, 1.1]))
    f = {c.key: c.evaluate(ev) for c in claims.CLAIMS}
    assert f["cliff"].verdict == "partly" and f["cliff"].value == f"{2.6 / 1.8:.2f}"
    assert f["floor"].verdict == "partly"
    assert f["tau"].numbers["n_falling"] == 2 and f["tau"].verdict == "partly"
    # bs 128 τ 5 (T = 20, 1.2) → bs 32 τ 2 (T = 32, 1.25): one inversion, clear without replicates
    assert f["monotone_t"].verdict == "does not hold"
    assert (f["monotone_t"].numbers["inversions"], f["monotone_t"].numbers["clear"]) == (1, 1)


def test_a_missing_profile_is_not_measured_and_the_next_source_decides():
    # prepare: the closest source has Table I only; the next has both tables
    t1_only = claims.Evidence("closest", HOLDS.table1)
    table = claims.verdict_table([t1_only, FAILS])
    # assert: Table I claims from the closest source, Table II ones from the next
    assert table.loc["cliff", "closest verdict"] == "holds" and table.loc["cliff", "from"] == "closest"
    assert table.loc["alpha_span", "closest verdict"] == "not measured here"
    assert table.loc["alpha_span", "verdict"] == "does not hold" and table.loc["alpha_span", "from"] == "bad"
    assert sum(claims.counts(table).values()) == len(claims.CLAIMS)
    assert claims.verdict_table([claims.Evidence("none")])["verdict"].eq("not measured here").all()
    # the numbers behind a cell, by name
    assert claims.CLAIMS[0].evaluate(t1_only).numbers["estimate"] == pytest.approx(4.0 / 1.4)


def test_the_papers_own_table_keeps_its_monotone_in_t_claim_within_rounding():
    # Sec. IV-B: "within each group the ordering is monotone in T"; its Table I has T = 20 at 1.18
    # and T = 32 at 1.19 (bs 128 τ 5, bs 32 τ 2): one unit of the printed digit, a possible tie
    paper = claims.paper_evidence()
    monotone = claims.CLAIMS[[c.key for c in claims.CLAIMS].index("monotone_t")]
    f = monotone.evaluate(paper)
    assert f.verdict == "holds" and f.numbers == {"inversions": 0, "within_rounding": 1, "clear": 0}
    # the same printed table with 1.21 at T = 32 (two units above 1.18) breaks the claim
    t1 = paper.table1.copy()
    t1.loc[("32", 2), "recovery_unweighted"] = 1.21
    g = monotone.evaluate(claims.Evidence("printed", t1, print_unit=claims.PAPER_PRINT_UNIT))
    assert g.verdict == "does not hold" and g.numbers == {"inversions": 1, "within_rounding": 0, "clear": 1}
    # our own, unrounded values: the 0.01 rise is an inversion
    assert monotone.evaluate(claims.Evidence("ours", paper.table1)).verdict == "does not hold"
    assert claims.cliff(paper.table1) == pytest.approx(3.96 / 1.36)
    # Sec. IV-C: more local steps travel further along the shared direction; its full-batch ‖μ̂‖²
    # falls from τ = 1 to τ = 2 (3.6e-3 to 6.2e-4)
    g = claims.CLAIMS[[c.key for c in claims.CLAIMS].index("signal_steps")].evaluate(paper)
    assert (g.verdict, g.numbers) == ("partly", {"n_rising": 2, "groups": 3})
    assert claims.span_ratio(paper.table1, paper.table2) == pytest.approx(np.log(1.50 / 1.19) / np.log(8.96 / 1.10))


def test_bootstrap_replicates_widen_a_verdict_into_an_interval():
    # prepare: replicates that scatter the bs 128 τ 1 value up to 2.5 make the cliff's interval reach below 2
    base = HOLDS.table1
    reps = []
    for v in np.linspace(1.2, 2.5, 50):
        t = base.copy()
        t.loc[("128", 1), "recovery_unweighted"] = v
        reps.append(t)
    f = claims.CLAIMS[0].evaluate(claims.Evidence("wide", base, reps1=reps))
    assert f.verdict == "partly" and "[" in f.value


def test_finding_refuses_an_unknown_verdict():
    with pytest.raises(ValueError, match=r"verdict .*'maybe'"):
        claims.Finding("1", "maybe")


# --------------------------------------------------------------------------- the trend test reaches the claims

def _trends(slopes: dict, *, se=0.001, falling=None):
    """Per-cell trends: slope 0 except those given (cell -> slope per round), every se the same, 3 runs a cell."""
    idx = pd.MultiIndex.from_tuples([(b, t) for b, t, _ in PROTOCOLS], names=["batch_size", "local_epochs"])
    slope = [slopes.get(p, 0.0) for p in idx]
    fall = [falling.get(p, 0) for p in idx] if falling else [3 * (s < 0) for s in slope]
    return pd.DataFrame({"falling": fall, "runs": 3, "slope": slope, "se": se}, index=idx)


def test_trend_pairs_are_the_cells_each_claim_compares():
    t1 = HOLDS.table1  # full: 9, 4.5, 4.0; minibatch at T = 4, 8, 16, 20, 32, 80: 1.4, 1.3, 1.25, 1.2, 1.15, 1.1
    # the cliff: the smallest full-batch cell over the largest minibatch cell
    assert claims.trend_pairs(t1, "cliff") == [(("full", 5), ("128", 1))]
    # falls with τ: adjacent τ within each batch size (2 pairs each for full, 128 and 32)
    assert claims.trend_pairs(t1, "tau") == [(("full", 1), ("full", 2)), (("full", 2), ("full", 5)),
                                             (("128", 1), ("128", 2)), (("128", 2), ("128", 5)),
                                             (("32", 1), ("32", 2)), (("32", 2), ("32", 5))]
    # monotone in T: adjacent T within full batch (T = 1, 2, 5) and within the minibatch group (T = 4 ... 80),
    # which interleaves the batch sizes (bs 32 τ 1 at T = 16 sits between bs 128 τ 2 and bs 128 τ 5)
    assert claims.trend_pairs(t1, "monotone_t") == [(("full", 1), ("full", 2)), (("full", 2), ("full", 5)),
                                                    (("128", 1), ("128", 2)), (("128", 2), ("32", 1)),
                                                    (("32", 1), ("128", 5)), (("128", 5), ("32", 2)),
                                                    (("32", 2), ("32", 5))]
    with pytest.raises(ValueError, match=r"key .*'floor'"):
        claims.trend_pairs(t1, "floor")


def test_trend_bearing_a_falling_full_batch_cell_closes_the_cliff_and_opens_the_tau_gap():
    # prepare: only full batch τ 5 (4.0) still falls, by 1 % a round, se 0.001 in every cell
    t1 = HOLDS.table1
    out = claims.trend_bearing(t1, _trends({("full", 5): -0.01}))
    # cliff: d = -0.01 - 0 = -0.01, se = √2 · 0.001, |t| = 7.1 > 2: against; the ×4.0/1.4 gap meets in
    # log(4.0 / 1.4) / 0.01 = 104.98 rounds
    assert out.loc["cliff", "way"] == "against" and out.loc["cliff", "still"] == "1 of 2 cells"
    assert out.loc["cliff", ["n_still", "n_cells"]].tolist() == [1, 2]
    assert out.loc["cliff", "meet"] == pytest.approx(math.log(4.0 / 1.4) / 0.01)
    pairs = out.loc["cliff", "pairs"]  # which cells, the ratio, the way, the slope, where they meet
    assert pairs.startswith("full batch, τ 5 ") and " bs 128, τ 1: ×2.86, " in pairs and "against" in pairs
    assert out.loc["cliff", "against_rate"] == pytest.approx(1.0) and " 1.00 % " in pairs and pairs.endswith(" 105 rounds")
    # falls with τ and monotone in T: full τ 2 over full τ 5 widens (d = 0 - (-0.01) = +0.01): toward, no meeting
    for key in ("tau", "monotone_t"):
        assert out.loc[key, "way"] == "toward" and math.isnan(out.loc[key, "meet"])
    assert out.loc["tau", "still"] == "1 of 9 cells"


def test_trend_bearing_ignores_drifts_within_their_error_and_sees_both_ways():
    t1 = HOLDS.table1
    # a fall of 0.2 % a round against se 0.001 a cell: |t| = 0.002 / 0.00141 = 1.41 < 2: steady
    steady = claims.trend_bearing(t1, _trends({("full", 5): -0.002}))
    assert set(steady["way"]) == {"steady"} and steady["pairs"].eq("").all() and steady["meet"].isna().all()
    # the middle full-batch cell falls: (τ 1, τ 2) has d = slope(τ 1) - slope(τ 2) = +0.01, toward; (τ 2, τ 5)
    # has d = -0.01, against, meeting in log(4.5 / 4.0) / 0.01 = 11.8 rounds
    mid = claims.trend_bearing(t1, _trends({("full", 2): -0.01}))
    assert mid.loc["tau", "way"] == "both ways"
    assert mid.loc["tau", "meet"] == pytest.approx(math.log(4.5 / 4.0) / 0.01)
    # an inversion that widens is against the claim but has no meeting round
    inverted = claims.trend_bearing(table1([9.0, 4.0, 4.5, 1.4, 1.3, 1.25, 1.2, 1.15, 1.1]),
                                    _trends({("full", 2): -0.01}))
    assert inverted.loc["tau", "way"] == "both ways" and math.isnan(inverted.loc["tau", "meet"])
    # a cell still falling counts when most of its runs do (2 of 3), not when one does
    counted = claims.trend_bearing(t1, _trends({}, falling={("full", 5): 2, ("128", 1): 1}))
    assert counted.loc["cliff", "still"] == "1 of 2 cells" and counted.loc["cliff", "way"] == "steady"
    with pytest.raises(ValueError, match=r"trends lacks.*cells"):
        claims.trend_bearing(t1, _trends({}).iloc[:-1])


def test_not_settled_marks_a_verdict_whose_gap_moves_toward_its_boundary():
    # prepare: the cliff holds and its gap closes (full τ 5 falls 1 % a round); falls with τ holds and its gap
    # only widens; monotone in T does not hold and the same widening gap moves it toward holding
    t1 = HOLDS.table1
    bearing = claims.trend_bearing(t1, _trends({("full", 5): -0.01}))
    verdicts = pd.DataFrame({"verdict": ["holds", "holds", "does not hold"]}, index=["cliff", "tau", "monotone_t"])
    # execute
    out = claims.not_settled(bearing, verdicts)
    # assert: the cliff is not settled, at 1 % a round, meeting in log(4.0 / 1.4) / 0.01 rounds
    assert not out.loc["cliff", "settled"] and out.loc["cliff", "rate"] == pytest.approx(1.0)
    assert out.loc["cliff", "meet"] == pytest.approx(math.log(4.0 / 1.4) / 0.01)
    assert out.loc["tau", "settled"] and math.isnan(out.loc["tau", "rate"])
    assert not out.loc["monotone_t", "settled"] and math.isnan(out.loc["monotone_t", "meet"])


def test_a_claim_whose_two_views_disagree_in_direction_is_confounded_by_stage():
    # prepare: the α = 0.1 split holds in part at the protocols and fails at matched θ (reversed); the cliff holds
    # at both; the floor holds at the protocols and in part at matched stage (same direction)
    verdicts = pd.DataFrame({"verdict": ["partly", "holds", "holds", "does not hold"]},
                            index=["alpha_weighting", "cliff", "floor", "monotone_t"])
    matched = pd.DataFrame({"verdict": ["does not hold", "holds", "partly", "holds"]},
                           index=["alpha_weighting", "cliff", "floor", "monotone_t"])
    # execute
    out = claims.with_matched_view(verdicts, matched)
    # assert: the reversals are confounded, the protocol verdict kept beside; agreement in direction is not
    assert list(out["verdict"]) == ["confounded by stage", "holds", "holds", "confounded by stage"]
    assert list(out["protocol_verdict"]) == ["partly", "holds", "holds", "does not hold"]
    assert claims.counts(out)["confounded by stage"] == 2
    assert list(claims.with_matched_view(verdicts, None)["verdict"]) == list(verdicts["verdict"])


# --------------------------------------------------------------------------- the matched-stage vote with its interval

def _with(rec_by_cell: dict, base=None):
    """HOLDS's Table I (or ``base``) with some cells' 1/Δ_S replaced."""
    t = (HOLDS.table1 if base is None else base).copy()
    for cell, v in rec_by_cell.items():
        t.loc[cell, "recovery_unweighted"] = v
    return t


def test_an_inversion_inside_its_seed_range_is_within_tolerance_and_one_outside_votes_against():
    # prepare: at one checkpoint bs 128 rises from τ 1 (1.20) to τ 2 (1.26), a 0.06 inversion on the medians; two seeds
    # disagree (1.30 over 1.22 at one, 1.10 under 1.30 at the other), so the seed range of d = log(τ 1 / τ 2) is
    # [log(1.10 / 1.30), log(1.30 / 1.22)] = [-0.167, +0.0635]: it reaches the claim's side (d > 0)
    median = _with({("128", 1): 1.20, ("128", 2): 1.26})
    seeds = [_with({("128", 1): 1.30, ("128", 2): 1.22}), _with({("128", 1): 1.10, ("128", 2): 1.30})]
    # execute
    pairs = claims.pair_votes(median, seeds, "tau").set_index("larger")
    # assert: the pair is within tolerance, with the hand-computed range; the other pairs vote for
    p = pairs.loc[[("128", 1)]].iloc[0]
    assert p["vote"] == "within tolerance" and p["d"] == pytest.approx(math.log(1.20 / 1.26))
    assert (p["d_low"], p["d_high"]) == pytest.approx((math.log(1.10 / 1.30), math.log(1.30 / 1.22)))
    assert (pairs["vote"] == "for").sum() == len(pairs) - 1
    # the claim fails on the medians (2 of 3 batch sizes fall: partly by its criterion) ...
    tau = next(c for c in claims.CLAIMS if c.key == "tau")
    assert tau.evaluate(claims.Evidence("m", median)).verdict == "partly"
    # ... and monotone in T fails on the medians, but only within tolerance: the checkpoint does not vote against
    mono = next(c for c in claims.CLAIMS if c.key == "monotone_t")
    ev_seeds = [claims.Evidence(f"s{i}", s) for i, s in enumerate(seeds)]
    assert mono.evaluate(claims.Evidence("m", median)).verdict == "does not hold"
    assert claims.checkpoint_vote(mono, claims.Evidence("m", median), ev_seeds) == "within tolerance"
    # a clear inversion: every seed has τ 2 above τ 1 (seed range of d = [log(1.10/1.30), log(1.18/1.26)] < 0)
    clear = [_with({("128", 1): 1.18, ("128", 2): 1.26}), _with({("128", 1): 1.10, ("128", 2): 1.30})]
    assert claims.pair_votes(median, clear, "tau").set_index("larger").loc[[("128", 1)]].iloc[0]["vote"] == "against"
    assert claims.checkpoint_vote(mono, claims.Evidence("m", median),
                                  [claims.Evidence(f"s{i}", s) for i, s in enumerate(clear)]) == "does not hold"


def test_falls_with_tau_fails_against_only_where_the_inversions_are_clear():
    # prepare: two of three batch sizes inverted on the medians (full τ 2 < τ 5; bs 128 τ 1 < τ 2): 1 of 3 falls,
    # "does not hold"; the full-batch inversion is clear at every seed, the bs 128 one is not at seed 0
    median = _with({("full", 2): 3.9, ("128", 1): 1.20, ("128", 2): 1.26})
    s0 = _with({("full", 2): 3.8, ("128", 1): 1.30, ("128", 2): 1.22})
    s1 = _with({("full", 2): 3.9, ("128", 1): 1.10, ("128", 2): 1.30})
    tau = next(c for c in claims.CLAIMS if c.key == "tau")
    m = claims.Evidence("m", median)
    assert tau.evaluate(m).verdict == "does not hold"
    # execute / assert: leniently only full batch is broken, 2 of 3 fall (a majority): within tolerance
    assert claims.checkpoint_vote(tau, m, [claims.Evidence("s0", s0), claims.Evidence("s1", s1)]) == "within tolerance"
    # with bs 128 clearly inverted too (both seeds), 1 of 3: against
    s0c = _with({("full", 2): 3.8, ("128", 1): 1.15, ("128", 2): 1.22})
    assert claims.checkpoint_vote(tau, m, [claims.Evidence("s0", s0c), claims.Evidence("s1", s1)]) == "does not hold"
    # without seeds the median decides, as before
    assert claims.checkpoint_vote(tau, m, []) == "does not hold"


def test_a_single_statistic_claim_fails_against_only_when_every_seed_fails():
    # prepare: the cliff on the medians is 1.3 / 1.4 < 1 (does not hold); one seed has the cliff 4.0 / 1.4 (holds)
    cliff = next(c for c in claims.CLAIMS if c.key == "cliff")
    m = claims.Evidence("m", _with({("full", 5): 1.3}))
    assert cliff.evaluate(m).verdict == "does not hold"
    good, bad = claims.Evidence("s0", HOLDS.table1), claims.Evidence("s1", _with({("full", 5): 1.2}))
    # execute / assert
    assert claims.checkpoint_vote(cliff, m, [good, bad]) == "within tolerance"
    assert claims.checkpoint_vote(cliff, m, [bad, bad]) == "does not hold"
    # a vote that holds on the medians is the criterion's own
    assert claims.checkpoint_vote(cliff, claims.Evidence("h", HOLDS.table1), [bad]) == "holds"


def test_checkpoints_before_the_papers_range_do_not_vote_and_tolerance_is_not_against():
    # prepare: 2 early checkpoints (weight 0) against; 4 in the range: 1 holds, 1 within tolerance, 2 against
    votes = pd.Series(["does not hold", "does not hold", "holds", "within tolerance", "does not hold", "does not hold"])
    weights = pd.Series([0, 0, 1, 1, 1, 1])
    # execute
    out = claims.over_checkpoints(votes, weights)
    # assert: against carries 2 of 4 = half the counted weight, not more: partly
    assert out["verdict"] == "partly" and out["n"] == 4 and out["n_fail"] == 2 and out["n_tolerance"] == 1
    assert out["fail_share"] == pytest.approx(0.5)
    # counted as against, the within-tolerance checkpoint would make 3 of 4: does not hold
    assert claims.over_checkpoints(votes.replace("within tolerance", "does not hold"), weights)["verdict"] == "does not hold"
    # every counted checkpoint holds: holds, whatever the early ones say
    assert claims.over_checkpoints(pd.Series(["does not hold", "holds", "holds"]), pd.Series([0, 1, 1]))["verdict"] == "holds"
    assert claims.over_checkpoints(pd.Series(["holds"]), pd.Series([0]))["verdict"] == "not measured here"
