"""Seed ranges, bootstrap intervals over seeds and window rounds, and the trend test."""

import numpy as np
import pandas as pd
import pytest

from maskfed.fl import uncertainty
from maskfed.fl.config import make_run_config
from maskfed.fl.runner import RunResult
from maskfed.fl.summary import summarize


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
