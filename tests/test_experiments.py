"""Which runs each of the book's experiments needs, and their tables."""

import pytest

from maskfed.engine.config import ConfigError, load_profile, Profile
from maskfed.studies import experiments


def test_the_paper_grid_is_36_distinct_runs():
    # prepare: Table I is 9 protocols, Table II 3 alphas (its alpha = 100 run is Table I's bs 32, tau 2),
    # the control 1 setting; 3 seeds each
    prof = load_profile("paper")
    # execute
    per = {e: experiments.configs(prof, e) for e in prof.experiments}
    every = experiments.all_configs(prof)
    # assert
    assert {e: len(c) for e, c in per.items()} == {"table1": 27, "table2": 9, "control": 3}
    assert len(every) == len(set(every)) == 27 + 6 + 3
    shared = set(per["table1"]) & set(per["table2"])
    assert {(c.batch_size, c.local_epochs, c.alpha) for c in shared} == {(32, 2, 100.0)}
    assert experiments.all_configs(prof, ["table2"]) == per["table2"]


def test_an_unknown_experiment_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"experiment .*'table1'.*'table2'.*'control'.*'masked'.*got 'table3'"):
        experiments.configs(load_profile("smoke"), "table3")


def test_cpu_masked_is_the_masked_comparison_at_cpu_papers_settings():
    # prepare: the archive-only profile of the masked-training runs, and the profile whose settings it borrows
    masked, paper = load_profile("cpu-masked"), load_profile("cpu-paper")
    # execute
    cfgs = experiments.all_configs(masked)
    # assert: 2 protocols x (no mask + p = 0.5 independent + shared) x 3 seeds, at 200 rounds and K_c = 10
    assert masked.experiments == ["masked"] and not masked.builds_book and paper.builds_book
    assert len(cfgs) == len({c.key() for c in cfgs}) == 2 * 3 * 3
    assert {(c.batch_size, c.local_epochs) for c in cfgs} == {("full", 1), (32, 2)}
    assert {(c.mask_keep_prob, c.mask_mode) for c in cfgs} == {(1.0, "independent"), (0.5, "independent"),
                                                                (0.5, "shared")}
    same = {"batch_size", "local_epochs", "mask_keep_prob", "mask_mode", "sharpness_iters", "hessian_batch",
            "hessian_every", "seed"}
    base = {k: v for k, v in paper.run(0).model_dump().items() if k not in same}
    assert all({k: v for k, v in c.model_dump().items() if k not in same} == base for c in cfgs)
    assert all(c.sharpness_iters > 0 for c in cfgs) and all((c.hessian_every > 0) == (c.mask_keep_prob == 1) for c in cfgs)


def test_masked_runs_are_refused_where_a_profile_defines_none_or_a_flag_would_be_dropped():
    with pytest.raises(ConfigError, match=r"'cpu' defines no.*masked-training"):
        experiments.configs(load_profile("cpu"), "masked")
    with pytest.raises(ConfigError, match=r"sets \['mask_keep_prob'\]"):
        experiments.all_configs(load_profile("cpu-masked", mask_keep_prob=0.25))
    with pytest.raises(ValueError, match=r"experiments .*'masked'.*masked: section"):
        Profile(name="x", description="x", scaled_down=True, base={}, experiments=["masked"])


def test_tables_have_the_papers_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    prof = load_profile("smoke", rounds=2, num_clients=4, cohort_size=2, synthetic_train=200, synthetic_test=50,
                        width=2, table2={"alphas": [100, 1]})
    results = experiments.run(prof, "table2", workers=1, progress=False)
    table = experiments.table2(results)
    assert list(table.columns) == experiments.TABLE_COLUMNS
    assert list(table.index) == [100.0, 1.0]
    prov = experiments.provenance_table(results)
    assert len(prov) == 2 and (prov["rounds"] == 2).all()


def test_minutes_at_scales_the_timed_seconds_a_round_to_the_runs_and_divides_by_workers():
    # prepare: timed runs of each Table I protocol, 2 s a round at bs 32, 1 s at bs 128, 0.5 s at full batch,
    # pooled over two seeds of different lengths (10 and 30 rounds: the per-round time is their pooled mean)
    from types import SimpleNamespace

    prof = load_profile("cpu")  # two workers
    seconds = {32: 2.0, 128: 1.0, "full": 0.5}
    timed = [SimpleNamespace(config=c.model_copy(update={"rounds": n, "seed": s}),
                             provenance={"wall_s": seconds[c.batch_size] * n})
             for c in experiments.configs(prof, "table1") for s, n in ((0, 10), (1, 30))]
    # execute: 40 rounds of every protocol; Table II's α = 100 run is Table I's (bs 32, τ 2) and counts once
    got = experiments.minutes_at("cpu", ("table1", "table2"), timed, rounds=40)
    # assert: Table I: 3 τ x (2 + 1 + 0.5) s x 40 rounds; Table II adds its α = 1 and 0.1 runs at 2 s x 40
    n_seeds = len(prof.seeds)
    expected = n_seeds * (3 * 3.5 * 40 + 2 * 2.0 * 40) / 2 / 60
    assert prof.workers == 2
    assert got == pytest.approx(expected)
