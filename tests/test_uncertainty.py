"""Seed ranges, bootstrap intervals over seeds and window rounds, and the trend test."""

import math

import numpy as np
import pandas as pd
import pytest

from maskfed.analysis import uncertainty
from maskfed.analysis.summary import summarize
from maskfed.engine.config import make_run_config
from maskfed.engine.runner import RunResult


def fake(values, *, batch_size=32, seed=0, rounds=None):
    """A finished run whose per-round recovery factor is ``values`` (the other metrics follow it)."""
    values = np.asarray(values, dtype=float)
    cfg = make_run_config(batch_size=batch_size, seed=seed, rounds=rounds or len(values), device="cpu")
    m = pd.DataFrame({"round": np.arange(1, len(values) + 1), "T_mean": 4.0, "recovery_unweighted": values,
                      "recovery_weighted": values, "mu2_hat": values, "sigma2_hat": 1 / (1 + values),
                      "test_acc": 0.5, "train_loss": 1.0})
    return RunResult(cfg, None, m, {})


def test_interval_takes_the_percentiles_of_the_replicates():
    # prepare: replicates 0..100, level 0.9 -> the 5th and 95th percentiles are 5 and 95
    iv = uncertainty.interval(50.0, range(101), level=0.9)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((50.0, 5.0, 95.0))
    assert iv.text(".1f") == "50.0 [5.0, 95.0]"
    with pytest.raises(ValueError, match="level"):
        uncertainty.interval(1.0, [1.0], level=1.0)
    with pytest.raises(ValueError, match="no finite"):
        uncertainty.interval(1.0, [np.nan])


def test_replicates_of_constant_runs_are_the_table_itself():
    # prepare: two settings, two seeds each, every round the same value within a setting
    runs = [fake([2.0] * 8, seed=s) for s in (0, 1)] + [fake([5.0] * 8, batch_size="full", seed=s) for s in (0, 1)]
    # execute
    reps = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted"], n_boot=20)
    # assert: same index as the summary, and nothing to vary
    table = summarize(runs, ["batch_size"])
    assert len(reps) == 20 and all(list(r.index) == list(table.index) for r in reps)
    assert all(r["recovery_unweighted"].tolist() == [2.0, 5.0] for r in reps)


def test_replicates_redraw_only_the_window_and_are_reproducible():
    # prepare: a 20-round run whose window (the last 5 rounds) holds 10..14; earlier rounds are 0
    run = fake([0.0] * 15 + [10, 11, 12, 13, 14])
    reps = uncertainty.replicate_tables([run], ["batch_size"], ["recovery_unweighted"], n_boot=200, block=2)
    values = np.array([r["recovery_unweighted"].iloc[0] for r in reps])
    # assert: medians of resampled window rounds, never the rounds before it
    assert values.min() >= 10 and values.max() <= 14 and len(set(values)) > 1
    again = uncertainty.replicate_tables([run], ["batch_size"], ["recovery_unweighted"], n_boot=200, block=2)
    assert [r.iloc[0, 0] for r in again] == values.tolist()
    with pytest.raises(ValueError, match="n_boot"):
        uncertainty.replicate_tables([run], ["batch_size"], n_boot=0)


def test_seed_range_is_min_and_max_of_the_per_run_medians():
    runs = [fake([1.0] * 4, seed=0), fake([3.0] * 4, seed=1), fake([2.0] * 4, seed=2)]
    low, high = uncertainty.seed_range(runs, ["batch_size"], ["recovery_unweighted"])
    assert low.loc["32", "recovery_unweighted"] == 1.0 and high.loc["32", "recovery_unweighted"] == 3.0


@pytest.mark.slow
def test_bootstrap_intervals_cover_a_known_ratio_at_about_their_nominal_rate():
    # prepare: two settings with per-round values lognormal around medians 4 and 2 (true ratio 2),
    # three seeds of 200 rounds each (window: the last 50), no seed effect
    rng = np.random.default_rng(0)
    hits, trials = 0, 120
    for _ in range(trials):
        runs = [fake(np.exp(rng.normal(np.log(m), 0.3, 200)), batch_size=bs, seed=s)
                for bs, m in (("full", 4.0), (32, 2.0)) for s in range(3)]
        reps = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted"], n_boot=200, seed=_)
        table = summarize(runs, ["batch_size"])
        ratio = lambda t: t.loc["full", "recovery_unweighted"] / t.loc["32", "recovery_unweighted"]  # noqa: E731
        iv = uncertainty.bootstrap(ratio, [table], [reps], level=0.9)
        hits += iv.low <= 2.0 <= iv.high
    # assert: 90 % intervals cover the true ratio in roughly 90 % of the trials
    assert 0.8 <= hits / trials <= 0.99, hits / trials


def test_trend_test_does_not_call_correlated_flat_noise_falling_but_finds_a_real_decay():
    rng = np.random.default_rng(1)

    def ar1(n, phi=0.5, sd=0.05):
        e = np.zeros(n)
        for i in range(1, n):
            e[i] = phi * e[i - 1] + rng.normal(0, sd)
        return e

    def series(slope):
        values = np.exp(np.log(2.0) + slope * np.arange(100) + ar1(100))
        return pd.DataFrame({"round": np.arange(1, 101), "recovery_unweighted": values})

    flat = [uncertainty.trend_test(series(0.0))["verdict"] for _ in range(200)]
    decay = [uncertainty.trend_test(series(-0.004))["verdict"] for _ in range(100)]
    # assert: flat noise is "falling" about as often as a one-sided 2.5 % test allows (HAC is a little
    # liberal at n = 50), a 0.4 %-a-round decay nearly always
    assert flat.count("falling") / len(flat) < 0.08
    assert decay.count("falling") / len(decay) > 0.9
    with pytest.raises(ValueError, match="at least 8"):
        uncertainty.trend_test(pd.DataFrame({"round": [1, 2], "recovery_unweighted": [1.0, 1.0]}))


def test_trend_counts_sorts_runs_into_falling_flat_rising():
    rounds = np.arange(1, 41)
    runs = [fake(np.exp(-0.05 * rounds)), fake(np.exp(0.05 * rounds), seed=1),
            fake(2 + 0.01 * np.sin(rounds), seed=2)]
    counts = uncertainty.trend_counts(runs + [fake([1.0, 2.0, 3.0, 4.0], seed=3)])
    assert (counts["falling"], counts["rising"], counts["flat"], counts["too short"]) == (1, 1, 1, 1)
    assert list(counts["runs"]["verdict"]) == ["falling", "rising", "flat", "too short"]


def test_trend_slope_recovers_a_known_geometric_decay():
    # prepare: 1/Δ_S = 8 · 0.9^(round-1), so log falls by log(0.9) ≈ -0.10536 per round
    rounds = np.arange(1, 21)
    metrics = pd.DataFrame({"round": rounds, "recovery_unweighted": 8 * 0.9 ** (rounds - 1)})
    # execute / assert: the exact slope over the last 10 rounds; a flat series has slope 0
    assert uncertainty.trend_test(metrics)["slope"] == pytest.approx(np.log(0.9), rel=1e-9)
    assert uncertainty.trend_test(metrics.assign(recovery_unweighted=3.0))["slope"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="frac"):
        uncertainty.trend_test(metrics, frac=0)


def test_seed_range_coverage_and_the_chance_the_median_is_the_lowest_seed():
    # [min, max] of n draws misses the median only if all n fall on one side: 2 (1/2)^n
    assert uncertainty.seed_range_coverage(3) == 0.75 and uncertainty.seed_range_coverage(5) == 0.9375
    assert uncertainty.seed_range_coverage(1) == 0.0
    # 3 seeds {a < b < c} redrawn with replacement: the median is a when a is drawn 2 or 3 times:
    # 3 (1/3)^2 (2/3) + (1/3)^3 = 6/27 + 1/27
    assert uncertainty.median_at_lowest_seed(3) == pytest.approx(7 / 27, abs=1e-15)
    # 5 seeds: k = 3, 4, 5 of 5 at the lowest, p = 1/5
    assert uncertainty.median_at_lowest_seed(5) == pytest.approx(10 * 0.2**3 * 0.8**2 + 5 * 0.2**4 * 0.8 + 0.2**5)
    with pytest.raises(ValueError, match="n_seeds"):
        uncertainty.median_at_lowest_seed(4)
    with pytest.raises(ValueError, match="n_seeds"):
        uncertainty.seed_range_coverage(0)


# ------------------------------------------------ hand-computed cases (a wrong formula must fail these)

def _nw_lag(n):
    """The Newey-West (1994) rule, written out again: floor(4 (n/100)^(2/9))."""
    return int(np.floor(4.0 * (n / 100.0) ** (2.0 / 9.0)))


def _newey_west_slope(t, y, lag):
    """Independent OLS slope of y on (1, t) and its Newey-West standard error, Bartlett weights.

    The slope is sum(a_t y_t) with a_t = d_t / sum(d^2), d_t = t - mean(t) (Frisch-Waugh), so its
    HAC variance is sum_{s,u} w(|s-u|) a_s e_s a_u e_u with w(l) = 1 - l/(lag+1) for l <= lag, else 0,
    e the OLS residuals; no small-sample (n/(n-k)) factor (statsmodels' HAC default).
    """
    t, y = np.asarray(t, float), np.asarray(y, float)
    d = t - t.mean()
    a = d / (d @ d)
    slope = float(a @ y)
    e = y - (y.mean() - slope * t.mean()) - slope * t
    lags = np.abs(np.subtract.outer(np.arange(len(t)), np.arange(len(t))))
    w = np.clip(1 - lags / (lag + 1), 0, None)
    g = a * e
    return slope, float(np.sqrt(g @ w @ g))


def test_hac_lag_rule_at_hand_computed_lengths():
    # prepare: 4 (n/100)^(2/9) by hand: n = 8 -> 2.28, 10 -> 2.40, 27 -> 2.990, 28 -> 3.014, 50 -> 3.43,
    # 100 -> 4 exactly, 200 -> 4.67, 272 -> 4.9961, 273 -> 5.0002, 1000 -> 6.67 (floors below; the
    # steps sit at n = 100 (k/4)^4.5, e.g. 27.4 and 273.0)
    hand = {8: 2, 10: 2, 27: 2, 28: 3, 50: 3, 100: 4, 200: 4, 272: 4, 273: 5, 1000: 6}
    # execute / assert: the module's rule, the formula re-written here and the hand values agree
    assert {n: uncertainty.hac_maxlags(n) for n in hand} == hand
    assert all(_nw_lag(n) == hand[n] for n in hand)
    assert [uncertainty.hac_maxlags(n) for n in range(8, 400)] == [_nw_lag(n) for n in range(8, 400)]


def test_trend_se_is_newey_west_with_bartlett_weights_on_an_8_round_series():
    # prepare: 8 rounds with autocorrelated wiggles around a decline; frac = 1 uses all 8, lag 2
    rounds = np.arange(1, 9)
    logs = np.array([0.0, 0.3, 0.1, -0.2, 0.05, -0.4, -0.3, -0.7])
    metrics = pd.DataFrame({"round": rounds, "recovery_unweighted": np.exp(logs)})
    slope, se = _newey_west_slope(rounds, logs, lag=2)
    # execute
    out = uncertainty.trend_test(metrics, frac=1.0)
    # assert: slope, SE, t and n as computed by hand; lag 1 or 3, or flat weights, or no HAC give other SEs
    assert out["n"] == 8 and out["slope"] == pytest.approx(slope, rel=1e-10)
    assert out["se"] == pytest.approx(se, rel=1e-8)
    assert out["t"] == pytest.approx(slope / se, rel=1e-8)
    others = [_newey_west_slope(rounds, logs, lag)[1] for lag in (0, 1, 3)]
    assert all(abs(o / se - 1) > 0.02 for o in others), (se, others)


def test_trend_se_uses_the_lag_of_the_rounds_in_the_window_not_of_the_whole_run():
    # prepare: 28 rounds (lag 3 for 28); frac 0.5 keeps the last 14 (lag 2): a decline with a
    # period-4 wiggle (+, +, -, -), whose lag-2 and lag-3 SEs differ by 18 %; the first half is junk
    rng = np.random.default_rng(5)
    rounds = np.arange(1, 29)
    logs = np.concatenate([rng.normal(3, 1, 14), -0.02 * rounds[14:] + np.resize([0.1, 0.1, -0.1, -0.1], 14)])
    metrics = pd.DataFrame({"round": rounds, "recovery_unweighted": np.exp(logs)})
    slope, se = _newey_west_slope(rounds[14:], logs[14:], lag=2)
    # execute
    out = uncertainty.trend_test(metrics)
    counts = uncertainty.trend_counts([fake(np.exp(logs))])
    # assert: the window's 14 rounds with lag floor(4 * 0.14^(2/9)) = 2
    assert out["n"] == 14 and out["slope"] == pytest.approx(slope, rel=1e-10)
    assert out["se"] == pytest.approx(se, rel=1e-8)
    assert abs(_newey_west_slope(rounds[14:], logs[14:], lag=3)[1] / se - 1) > 0.02
    row = counts["runs"].iloc[0]
    assert row["n"] == 14 and row["se"] == pytest.approx(se, rel=1e-8) and row["t"] == pytest.approx(slope / se)
    expected = "falling" if slope / se < -1.96 else "rising" if slope / se > 1.96 else "flat"
    assert row["verdict"] == expected and counts[expected] == 1
    # and a 56-round run: its 28-round window sits just past a step of the rule (lag 3; 27 rounds: lag 2)
    rounds = np.arange(1, 57)
    logs = np.concatenate([rng.normal(3, 1, 28), -0.02 * rounds[28:] + np.resize([0.1, 0.1, -0.1, -0.1], 28)])
    slope, se = _newey_west_slope(rounds[28:], logs[28:], lag=3)
    out = uncertainty.trend_test(pd.DataFrame({"round": rounds, "recovery_unweighted": np.exp(logs)}))
    assert out["n"] == 28 and out["se"] == pytest.approx(se, rel=1e-8)
    assert abs(_newey_west_slope(rounds[28:], logs[28:], lag=2)[1] / se - 1) > 0.02


def _seed_runs(values_by_seed, *, batch_size=32, rounds=8, scale=1.0):
    """One constant run per seed: seed s holds ``values_by_seed[s]`` in every round (a column scaled by
    ``scale`` in ``mu2_hat``), so the block bootstrap within a seed has nothing to vary."""
    runs = []
    for s, v in enumerate(values_by_seed):
        r = fake([v] * rounds, batch_size=batch_size, seed=s)
        r.metrics["mu2_hat"] = scale * v
        runs.append(r)
    return runs


def test_seed_bootstrap_takes_the_median_of_a_with_replacement_draw_of_seeds():
    # prepare: seeds 0, 1, 2 hold 1, 2, 4. A draw of 3 seeds with replacement has median 1 when at least
    # two draws are seed 0: 3 (1/3)^2 (2/3) + (1/3)^3 = 7/27; likewise 4 with 7/27; 2 with 13/27.
    # (Without replacement the median is always 2; one draw for all slots gives 1/3 each; a draw that
    # never reaches the last seed never gives 4.)
    runs = _seed_runs([1.0, 2.0, 4.0])
    n_boot = 4000
    # execute
    reps = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted"], n_boot=n_boot, seed=3)
    values = np.array([r.loc["32", "recovery_unweighted"] for r in reps])
    # assert: only the three possible medians, each at its multinomial rate; a frequency from 4000
    # independent replicates has sd sqrt(p (1-p) / 4000) <= 0.0079, so 4.5 sd is 0.036 (a false alarm
    # about once in 10^5 runs; the seed is fixed anyway), below the 0.074 gap to the 1/3 of a shared draw
    assert set(np.unique(values)) == {1.0, 2.0, 4.0}
    for v, p in ((1.0, 7 / 27), (2.0, 13 / 27), (4.0, 7 / 27)):
        tol = 4.5 * np.sqrt(p * (1 - p) / n_boot)
        assert abs((values == v).mean() - p) < tol, (v, (values == v).mean(), p)


@pytest.mark.slow
def test_seed_bootstrap_with_two_seeds_averages_the_two_draws():
    # prepare: seeds hold 1 and 3; the median of two draws is their mean: 1 (p 1/4), 2 (1/2), 3 (1/4)
    runs = _seed_runs([1.0, 3.0])
    reps = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted"], n_boot=4000, seed=1)
    values = np.array([r.iloc[0, 0] for r in reps])
    assert set(np.unique(values)) == {1.0, 2.0, 3.0}
    for v, p in ((1.0, 0.25), (2.0, 0.5), (3.0, 0.25)):
        assert abs((values == v).mean() - p) < 4.5 * np.sqrt(p * (1 - p) / 4000)


def test_seed_bootstrap_draws_one_seed_set_for_all_columns_and_all_settings():
    # prepare: two settings with the same three seeds (values 1, 2, 4 and 10, 20, 40): seed s shares one
    # partition across a profile's protocols, so replicate b must draw the same seeds for both settings
    runs = _seed_runs([1.0, 2.0, 4.0], scale=10.0) + _seed_runs([10.0, 20.0, 40.0], batch_size="full", scale=10.0)
    n_boot = 4000
    # execute
    reps = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted", "mu2_hat"], n_boot=n_boot)
    a = np.array([r.loc["32", "recovery_unweighted"] for r in reps])
    b = np.array([r.loc["full", "recovery_unweighted"] for r in reps])
    mu_a = np.array([r.loc["32", "mu2_hat"] for r in reps])
    # assert: the columns of one setting move together in every replicate, and so do the two settings
    # (independent draws would make b == 10 a only with probability (49 + 169 + 49) / 729 = 0.366)
    assert np.array_equal(mu_a, 10 * a)
    assert np.array_equal(b, 10 * a)
    # the marginal law of one setting is unchanged: P(median = lowest seed) = 7/27
    p1 = 7 / 27
    assert abs((a == 1).mean() - p1) < 4.5 * np.sqrt(p1 * (1 - p1) / n_boot)


def test_a_run_in_two_tables_is_one_draw_and_a_setting_with_other_seeds_draws_its_own():
    # prepare: the same three runs summarised as two tables (Table I's bs 32, tau 2 is Table II's alpha = 100)
    runs = _seed_runs([1.0, 2.0, 4.0])
    t1 = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted"], n_boot=500)
    t2 = uncertainty.replicate_tables(runs + _seed_runs([5.0, 6.0, 7.0], batch_size="full"), ["batch_size"],
                                      ["recovery_unweighted"], n_boot=500)
    # assert: the shared cell is the same draw in both tables, replicate by replicate
    assert [r.loc["32", "recovery_unweighted"] for r in t1] == [r.loc["32", "recovery_unweighted"] for r in t2]
    # a setting whose seeds differ from the rest is drawn on its own (not every replicate moves together)
    other = runs + [RunResult(r.config.model_copy(update={"seed": r.config.seed + 10, "batch_size": "full"}), r.path,
                              r.metrics * 10, r.provenance) for r in runs]
    reps = uncertainty.replicate_tables(other, ["batch_size"], ["recovery_unweighted"], n_boot=2000)
    a = np.array([r.loc["32", "recovery_unweighted"] for r in reps])
    b = np.array([r.loc["full", "recovery_unweighted"] for r in reps])
    assert 0.2 < (b == 10 * a).mean() < 0.55


def test_bootstrap_pairs_replicate_b_of_every_table():
    # prepare: two tables whose replicates are built so that replicate b of the second is 2x that of the
    # first: the ratio is then 2 in every replicate, and its interval is [2, 2]; mis-paired it would not be
    runs = _seed_runs([1.0, 2.0, 4.0])
    reps1 = uncertainty.replicate_tables(runs, ["batch_size"], ["recovery_unweighted"], n_boot=300)
    reps2 = [2 * r for r in reps1]
    table = summarize(runs, ["batch_size"])[["recovery_unweighted"]]
    ratio = lambda t1, t2: t2.iloc[0, 0] / t1.iloc[0, 0]  # noqa: E731
    iv = uncertainty.bootstrap(ratio, [table, 2 * table], [reps1, reps2])
    assert (iv.estimate, iv.low, iv.high) == (2.0, 2.0, 2.0)
    shuffled = reps2[1:] + reps2[:1]
    assert uncertainty.bootstrap(ratio, [table, 2 * table], [reps1, shuffled]).high > 2.0




def _ar1_drift(seed: int = 13, n: int = 80) -> pd.DataFrame:
    """1/Δ_S falling by 0.2 % a round under AR(1) noise (φ = 0.8): falling at the Newey-West lag, flat at 3 times it."""
    rng = np.random.default_rng(seed)
    e = np.zeros(n)
    for i in range(1, n):
        e[i] = 0.8 * e[i - 1] + rng.normal(0, 0.05)
    return pd.DataFrame({"round": np.arange(1, n + 1), "recovery_unweighted": 2.0 * np.exp(-0.002 * np.arange(n) + e)})


def test_trend_test_lag_factor_widens_the_hac_window_and_gives_a_p_value():
    # prepare: 80 rounds, the test uses the last 40: floor(4 (40/100)^(2/9)) = 3 lags, 3 × 3 = 9
    m = _ar1_drift()
    # execute
    base, wide = uncertainty.trend_test(m), uncertainty.trend_test(m, lag_factor=3)
    # assert: the same slope; the wider window's larger standard error turns "falling" into "flat"
    assert (base["lags"], wide["lags"]) == (3, 9)
    assert base["slope"] == pytest.approx(wide["slope"])
    assert base["verdict"] == "falling" and wide["verdict"] == "flat" and wide["se"] > base["se"]
    assert base["p"] == pytest.approx(math.erfc(abs(base["t"]) / math.sqrt(2)))
    assert 0.01 < base["p"] < 0.05
    with pytest.raises(ValueError, match="lag_factor"):
        uncertainty.trend_test(m, lag_factor=0)


def test_benjamini_hochberg_by_hand():
    # prepare: m = 5; thresholds k q / m at q = 0.05: 0.01, 0.02, 0.03, 0.04, 0.05
    p = [0.04, 0.001, 0.5, 0.025, float("nan")]
    # execute
    got = uncertainty.benjamini_hochberg(p, 0.05)
    # assert: sorted, 0.001 ≤ 0.01 passes rank 1, 0.025 > 0.02 and 0.04 > 0.03 fail theirs: only rank 1 is rejected;
    # a plain 5 % cut would also reject 0.04 and 0.025
    assert got.tolist() == [False, True, False, False, False]
    # the step-up: 0.011 fails its own rank (0.01) but 0.019 passes rank 2 (0.02), so both are rejected
    assert uncertainty.benjamini_hochberg([0.019, 0.011, 0.9, 0.9, 0.9], 0.05).tolist() == [True, True, False, False, False]
    with pytest.raises(ValueError, match="q must be in"):
        uncertainty.benjamini_hochberg(p, 1.0)


def test_trend_test_calls_a_constant_series_flat():
    # prepare: 1/Δ_S exactly 2 in every round (least squares gives a slope of 6.5e-18 with a smaller standard
    # error there, which read as t = 2.06, "rising", before the constant case was handled)
    m = pd.DataFrame({"round": np.arange(1, 81), "recovery_unweighted": [2.0] * 80})
    # execute
    got = uncertainty.trend_test(m)
    # assert
    assert got == {"slope": 0.0, "se": 0.0, "t": 0.0, "p": 1.0, "n": 40, "lags": 3, "verdict": "flat"}


def test_simulated_coverage_of_a_seed_range_is_the_order_statistic_answer():
    # prepare: 5 seeds, no round noise to speak of: the seed range covers the median 1 - 2 (1/2)^5 = 93.75 %
    noise = {"between_sd": 1.0, "within_sd": 1e-6, "phi": 0.0, "window": 8, "n_seeds": 5}
    # execute
    cov = uncertainty.simulated_coverage(noise, n_sims=2000, n_boot=50, seed=3)
    # assert: within 3 points of the exact value (a binomial standard error of 0.54 points at 2,000 data sets)
    assert cov["seed_range"] == pytest.approx(uncertainty.seed_range_coverage(5), abs=0.03)
    assert cov["n_sims"] == 2000
    with pytest.raises(ValueError, match="n_sims must be >= 1"):
        uncertainty.simulated_coverage(noise, n_sims=0)


@pytest.mark.slow
def test_the_coverage_the_verdict_page_states_is_what_a_larger_simulation_measures():
    # prepare: the headline cell's runs of the cpu-paper archive, as the verdict page reads them
    from maskfed.book import evidence
    from maskfed.chapters import verdict

    runs = evidence.source_runs("cpu-paper")["table1"]
    page = verdict.headline_coverage(runs)  # the page: COVERAGE_SIMS data sets, seed 0
    # execute: 2.5 times as many data sets, another seed
    cell = [r for r in runs if str(r.config.batch_size) == "32" and r.config.local_epochs == 2]
    big = uncertainty.simulated_coverage(uncertainty.window_noise(cell), n_sims=1000, seed=1)
    # assert: the stated coverage is the measured one to within 3 points, for both intervals
    assert page["b_cov_boot"] == pytest.approx(100 * big["bootstrap"], abs=3)
    assert page["b_cov_range"] == pytest.approx(100 * big["seed_range"], abs=3)
