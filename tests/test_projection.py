"""Tests for maskfed.perf.projection: batch widths, steps and images of each engine by hand, the cost fit,
a run's projected time from fabricated costs, and the comparison with a recorded time. No test reads a
clock: the projection of a live run against its measured time is reported by ``make bench``
(:func:`maskfed.perf.bench.projection_check`), not asserted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskfed.engine.config import load_profile
from maskfed.perf import projection


def test_batch_width_hand_cases():
    # n_k = 7, bs = 3: steps of 3, 3, 1 per epoch; "full": the whole shard
    assert [projection.batch_width(7, 3, s) for s in range(6)] == [3, 3, 1, 3, 3, 1]
    assert [projection.batch_width(6, 3, s) for s in range(2)] == [3, 3]
    assert projection.batch_width(7, "full", 4) == 7
    assert projection.batch_width(2, 128, 0) == 2


def test_round_work_hand_case():
    # shards 5 and 3, bs 2, τ 1: T = 3 and 2. Sequential: 5 steps over 8 images. Batched: 3 steps;
    # step 0: both clients, widest batch 2 -> 4 images; step 1: both, widths 2 and 1 -> 4; step 2: the
    # first alone, its last image -> 1. 9 images computed (one padded).
    w = projection.round_work([5, 3], 2, 1)
    assert w == {"sequential_steps": 5, "sequential_images": 8, "batched_steps": 3, "batched_images": 9}
    # τ = 2: widths 2 2 1 2 2 1 and 2 1 2 1 side by side: 4 + 4 + 4 + 4 (the second client's epochs
    # are out of step with the first's), then 2 + 1 alone: 19, not twice 9. Full batch: one step per
    # epoch, as wide as the widest shard.
    assert projection.round_work([5, 3], 2, 2)["batched_images"] == 19
    assert projection.round_work([5, 3], "full", 2) == {"sequential_steps": 4, "sequential_images": 16,
                                                        "batched_steps": 2, "batched_images": 20}


def test_fit_cost_recovers_a_linear_cost_and_clips_negatives():
    steps, images = np.array([10, 40, 5]), np.array([320, 640, 500])
    c = projection.fit_cost(steps, images, 0.002 * steps + 1e-4 * images)
    assert c.per_step == pytest.approx(0.002) and c.per_image == pytest.approx(1e-4)
    only = projection.fit_cost([10], [320], [0.5])
    assert only == projection.Cost(0.05, 0.0)
    # times that fall with images would need a negative per-image cost: the fit keeps both >= 0
    c = projection.fit_cost([10, 10, 20], [100, 400, 200], [1.0, 0.5, 2.0])
    assert c.per_step >= 0 and c.per_image >= 0
    with pytest.raises(ValueError, match="positive"):
        projection.fit_cost([1], [1], [0.0])
    with pytest.raises(ValueError, match="one"):
        projection.fit_cost([1, 2], [1, 2], [1.0])


def test_run_work_uses_the_runs_own_cohorts():
    # two runs that differ only in seed draw other cohorts over the same shards, hence other work
    cfg = load_profile("smoke").run(0, alpha=0.1)
    sizes = [300, 5, 5, 5, 5, 5, 5, 5, 5, 5]  # one large client: rounds that draw it have far more steps
    work = projection.run_work(cfg, sizes)
    assert len(work) == cfg.rounds
    from maskfed.engine import fedavg
    for r, row in work.iterrows():
        n = [sizes[k] for k in fedavg.sample_cohort(10, cfg.cohort_size, cfg.seed, r)]
        assert row["sequential_images"] == cfg.local_epochs * sum(n)
    with pytest.raises(ValueError, match="engine"):
        projection.project_run(cfg, sizes, projection.Cost(1.0, 0.0), "auto", n_test=10, eval_images_per_s=1.0)


def test_project_run_is_the_work_at_the_cost_plus_the_evaluations():
    # prepare: fabricated timings: 10 ms a step, 0.1 ms an image, 1,000 test images a second
    cfg = load_profile("smoke").run(0, alpha=0.1)
    sizes = [300, 5, 5, 5, 5, 5, 5, 5, 5, 5]
    cost = projection.Cost(0.01, 1e-4)
    # execute
    p = projection.project_run(cfg, sizes, cost, "sequential", n_test=50, eval_images_per_s=1000.0)
    # assert: by hand from the run's own rounds and its evaluation schedule
    work = projection.run_work(cfg, sizes)
    from maskfed.engine import fedavg
    n_eval = len(fedavg.eval_rounds(cfg.rounds, cfg.eval_every, cfg.eval_every_tail))
    train = 0.01 * work["sequential_steps"].sum() + 1e-4 * work["sequential_images"].sum()
    assert p["train_s"] == pytest.approx(train) and p["eval_s"] == pytest.approx(n_eval * 50 / 1000.0)
    assert p["projected_s"] == pytest.approx(train + n_eval * 0.05)
    assert (p["steps"], p["images"]) == (work["sequential_steps"].sum(), work["sequential_images"].sum())


def test_compare_gives_the_relative_error_of_a_projection_against_recorded_times():
    # prepare / execute / assert: recorded times, no clock read (make bench reports the live comparison)
    assert projection.compare(1.25, 1.0) == {"projected_s": 1.25, "measured_s": 1.0,
                                             "relative_error": pytest.approx(0.25), "within_aim": True}
    assert projection.compare(0.5, 1.0)["relative_error"] == pytest.approx(-0.5)
    assert projection.compare(0.5, 1.0)["within_aim"] is False
    assert projection.compare(1.02, 1.0)["within_aim"] is True  # the 2-3 % measured on the smoke profile
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="measured_s"):
            projection.compare(1.0, bad)
    with pytest.raises(ValueError, match="projected_s"):
        projection.compare(0.0, 1.0)
