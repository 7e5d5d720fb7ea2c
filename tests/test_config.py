"""Tests for maskfed.engine.config: RunConfig defaults (paper §IV-A), validation messages, keys, profiles."""

from __future__ import annotations

import itertools
import json

import pytest

from maskfed.engine.config import ConfigError, load_profile, make_run_config, Profile, PROFILES, RunConfig


# ----------------------------------------------------------------------------- defaults

def test_defaults_are_the_papers_setting_where_it_states_one():
    cfg = make_run_config()

    assert cfg.num_clients == 100          # K
    assert cfg.cohort_size == 10           # K_c
    assert cfg.lr == 0.01
    assert cfg.rounds == 200
    assert cfg.model == "resnet18_gn"
    assert cfg.gn_groups == 2              # ours: the paper says "GroupNorm" without a group count
    assert cfg.dirichlet_convention == "hsu"  # ours: the paper does not say how the split is drawn
    assert cfg.aggregation == "weighted"   # n_k-weighted mean
    assert cfg.partition == "dirichlet" and cfg.alpha == 100.0
    assert (cfg.batch_size, cfg.local_epochs) == (32, 2)  # the Table II protocol
    assert cfg.identical_client_seeds is False
    assert cfg.dataset == "cifar10"


def test_label_names_the_setting():
    assert make_run_config(model="small_cnn_gn", alpha=0.1, batch_size="full", local_epochs=5, seed=2).label() == \
        "cifar10-small_cnn_gn-dirichlet-a0.1-bsfull-t5-s2"


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("fields, name, shown", [
    ({"alpha": 0}, "alpha", "0"),
    ({"alpha": -1.5}, "alpha", "-1.5"),
    ({"alpha": float("nan")}, "alpha", "nan"),
    ({"batch_size": 0}, "batch_size", "0"),
    ({"batch_size": -1}, "batch_size", "-1"),
    ({"batch_size": "half"}, "batch_size", "'half'"),
    ({"batch_size": True}, "batch_size", "True"),
    ({"batch_size": 32.5}, "batch_size", "32.5"),
    ({"batch_size": "-8"}, "batch_size", "'-8'"),
    ({"local_epochs": 0}, "local_epochs", "0"),
    ({"local_epochs": -2}, "local_epochs", "-2"),
    ({"cohort_size": 101}, "cohort_size", "101"),
    ({"num_clients": 5}, "cohort_size", "10"),        # default K_c = 10 no longer fits
    ({"model": "vgg16"}, "model", "'vgg16'"),
    ({"partition": "pathological"}, "partition", "'pathological'"),
    ({"aggregation": "median"}, "aggregation", "'median'"),
    ({"rounds": 0}, "rounds", "0"),
    ({"lr": 0}, "lr", "0"),
    ({"lr": -0.1}, "lr", "-0.1"),
    ({"lr": float("inf")}, "lr", "finite"),           # would train to NaN
    ({"alpha": float("inf")}, "alpha", "finite number > 0; got inf"),
    ({"rounds": "none"}, "rounds", "allowed: an integer >= 1"),
    ({"mask_keep_prob": 1.5}, "mask_keep_prob", "allowed: a number > 0 and <= 1"),
    ({"num_rounds": 5}, "num_rounds", "5"),           # unknown field
    ({"device": "tpu"}, "device", "'tpu'"),
])
def test_bad_inputs_raise_config_error_naming_parameter_and_value(fields, name, shown):
    with pytest.raises(ConfigError) as exc:
        make_run_config(**fields)
    msg = str(exc.value)
    assert name in msg, msg
    assert shown in msg, msg
    assert isinstance(exc.value, ValueError)  # callers may catch ValueError


HUGE = 12345678901234567890123  # the 23-digit --rounds


@pytest.mark.parametrize("field, limit", [
    ("rounds", "100000"), ("num_clients", "1000000"), ("cohort_size", "1000000"), ("eval_every", "100000"),
    ("eval_every_tail", "100000"), ("hessian_every", "100000"), ("hessian_batch", "10000000"),
    ("sharpness_iters", "10000"), ("checkpoint_every", "100000"), ("train_subset", "10000000"),
    ("test_subset", "10000000"), ("synthetic_train", "200000"), ("synthetic_test", "200000"), ("width", "1024"),
    ("gn_groups", "1024"), ("local_epochs", "1000"), ("batch_size", "10000000"),
])
def test_every_size_has_a_finite_upper_bound_named_in_the_refusal(field, limit):
    # prepare: a 23-digit size, as an integer and as the command line's text
    for value in (HUGE, str(HUGE)):
        # execute
        with pytest.raises(ConfigError) as exc:
            make_run_config(**{field: value})
        # assert: the parameter and its allowed upper bound are named
        assert field in str(exc.value) and limit in str(exc.value)


def test_the_bounds_accept_their_own_limit_and_live_in_one_place():
    from maskfed.engine import config as C

    # prepare / execute: each bound itself is accepted
    cfg = make_run_config(rounds=C.MAX_ROUNDS, num_clients=C.MAX_CLIENTS, cohort_size=C.MAX_CLIENTS,
                          local_epochs=C.MAX_LOCAL_EPOCHS, batch_size=C.MAX_IMAGES)
    # assert
    assert (cfg.rounds, cfg.num_clients, cfg.local_epochs) == (100_000, 1_000_000, 1_000)
    assert C.allowed_values("rounds") == f"an integer >= 1 and <= {C.MAX_ROUNDS}"  # the CLI's help reads it


def test_profile_workers_and_seed_count_are_bounded():
    from pydantic import ValidationError

    from maskfed.engine import config as C

    # execute / assert: a profile's workers and its number of seeds
    with pytest.raises(ValidationError, match="workers"):
        Profile(name="x", description="", scaled_down=True, base={}, workers=C.MAX_WORKERS + 1)
    with pytest.raises(ConfigError, match="seeds"):
        load_profile("smoke", seeds=list(range(C.MAX_SEEDS + 1)))
    with pytest.raises(ConfigError, match=r"--workers .*1 to 256; got 257"):
        C.check_workers(257, "--workers")
    with pytest.raises(ConfigError, match="workers"):
        C.check_workers(0)
    C.check_workers(C.MAX_WORKERS)


def test_unknown_field_lists_allowed_fields():
    with pytest.raises(ConfigError, match="unknown parameter") as exc:
        make_run_config(batchsize=32)
    assert "batch_size" in str(exc.value) and "local_epochs" in str(exc.value)


def test_several_errors_reported_at_once():
    with pytest.raises(ConfigError) as exc:
        make_run_config(alpha=0, local_epochs=0)
    assert "alpha" in str(exc.value) and "local_epochs" in str(exc.value)


def test_boolean_local_epochs_rejected():
    with pytest.raises(ConfigError, match="local_epochs"):
        make_run_config(local_epochs=True)


@pytest.mark.parametrize("given, stored", [("full", "full"), ("64", 64), (" 64 ", 64), (128, 128), (1, 1)])
def test_batch_size_accepted_forms(given, stored):
    cfg = make_run_config(batch_size=given)
    assert cfg.batch_size == stored
    assert type(cfg.batch_size) is type(stored)


def test_config_is_frozen_and_hashable():
    cfg = make_run_config()
    with pytest.raises(Exception):
        cfg.rounds = 3
    assert len({cfg, make_run_config(), make_run_config(seed=1)}) == 2


# ----------------------------------------------------------------------------- key

def test_key_is_stable_and_field_sensitive():
    a = make_run_config(seed=1, batch_size=64, rounds=10)
    b = make_run_config(rounds=10, batch_size="64", seed=1)          # other order, string digits

    assert a.key() == b.key()
    assert len(a.key()) == 16 and int(a.key(), 16) >= 0
    # survives a JSON round trip (how run folders store it)
    assert RunConfig(**json.loads(a.model_dump_json())).key() == a.key()
    keys = {a.key()} | {make_run_config(**{**a.model_dump(), f: v}).key() for f, v in
                        [("seed", 2), ("batch_size", "full"), ("rounds", 11), ("lr", 0.02), ("alpha", 1.0),
                         ("identical_client_seeds", True), ("aggregation", "uniform")]}
    assert len(keys) == 8  # each change gives a new key


# ----------------------------------------------------------------------------- profiles

@pytest.mark.parametrize("name", PROFILES)
def test_profiles_load_and_validate(name):
    prof = load_profile(name)

    assert isinstance(prof, Profile) and prof.name == name
    assert prof.description
    make_run_config(**prof.base)
    assert prof.table1.alpha == 100
    assert prof.table2.alphas == [100, 1, 0.1]


def test_paper_profile_matches_section_iv_a():
    prof = load_profile("paper")
    cfg = prof.run(0)

    assert prof.scaled_down is False
    assert prof.seeds == [0, 1, 2]
    assert cfg.model == "resnet18_gn" and cfg.rounds == 200
    assert (cfg.num_clients, cfg.cohort_size, cfg.lr, cfg.aggregation) == (100, 10, 0.01, "weighted")
    assert prof.table1.batch_sizes == [32, 128, "full"] and prof.table1.local_epochs == [1, 2, 5]
    assert (prof.table2.batch_size, prof.table2.local_epochs) == (32, 2)


@pytest.mark.parametrize("name", ["smoke", "cpu", "cpu-long"])
def test_small_profiles_are_marked_scaled_down(name):
    assert load_profile(name).scaled_down is True


def test_cpu_long_is_the_cpu_profile_with_100_rounds():
    cpu, long = load_profile("cpu"), load_profile("cpu-long")
    a, b = cpu.run(0), long.run(0)

    assert b.rounds == 100 and a.rounds == 25
    assert (b.eval_every, b.eval_every_tail) == (4 * a.eval_every, 5)  # evaluation cadence scaled with the rounds
    same = {"rounds", "eval_every", "eval_every_tail"}
    assert {k: v for k, v in a.model_dump().items() if k not in same} == \
        {k: v for k, v in b.model_dump().items() if k not in same}
    assert (long.seeds, long.workers, long.table1, long.table2, long.control) == \
        (cpu.seeds, 2, cpu.table1, cpu.table2, cpu.control)
    assert "20 to 35 minutes" in long.description and "100 rounds" in long.description and long.scaled_down


def test_table1_configs_grid():
    prof = load_profile("paper")
    cfgs = prof.table1_configs()

    assert len(cfgs) == 9 * 3
    grid = {(c.batch_size, c.local_epochs, c.seed) for c in cfgs}
    assert grid == set(itertools.product([32, 128, "full"], [1, 2, 5], [0, 1, 2]))
    assert all(c.alpha == 100 and c.partition == "dirichlet" and not c.identical_client_seeds for c in cfgs)
    assert len({c.key() for c in cfgs}) == 27


def test_table1_configs_smoke_grid():
    cfgs = load_profile("smoke").table1_configs()
    assert [(c.batch_size, c.local_epochs) for c in cfgs] == list(itertools.product([16, 64, "full"], [1, 2, 5]))


def test_table2_configs():
    prof = load_profile("paper")
    cfgs = prof.table2_configs()

    assert len(cfgs) == 3 * 3
    assert {(c.alpha, c.seed) for c in cfgs} == set(itertools.product([100.0, 1.0, 0.1], [0, 1, 2]))
    assert all((c.batch_size, c.local_epochs, c.partition) == (32, 2, "dirichlet") for c in cfgs)


def test_control_configs():
    prof = load_profile("paper")
    cfgs = prof.control_configs()

    assert [c.seed for c in cfgs] == [0, 1, 2]
    assert all(c.partition == "identical" and c.identical_client_seeds is True for c in cfgs)
    assert all((c.batch_size, c.local_epochs) == (32, 2) for c in cfgs)  # the Table II protocol


def test_load_profile_overrides_apply_everywhere():
    prof = load_profile("cpu", rounds=3, lr=0.05)

    assert prof.base["rounds"] == 3
    assert all(c.rounds == 3 and c.lr == 0.05 for c in prof.table1_configs() + prof.table2_configs()
               + prof.control_configs())
    assert load_profile("smoke").run(0).rounds == 4               # overrides do not leak between loads


def test_allowed_values_and_accepts_none_read_the_annotations():
    from maskfed.engine.config import RunConfig, accepts_none, allowed_values

    assert [f for f in RunConfig.model_fields if accepts_none(f)] == ["data_path", "train_subset", "test_subset"]
    subset = allowed_values("train_subset")
    assert "integer" in subset and ">= 100" in subset and "<= 10000000" in subset and subset.endswith("or none")
    assert allowed_values("mask_keep_prob") == "a number > 0 and <= 1"
    assert allowed_values("lr") == "a finite number > 0"
    assert allowed_values("aggregation").endswith(" 'weighted', 'uniform'")
    with pytest.raises(ConfigError, match=r"batch_size .*positive integer.*'full'"):  # one home
        make_run_config(batch_size=0)


def test_a_none_given_is_applied_or_refused_except_the_books_data_path():
    # a notebook's overrides {test_subset: null} clears the field; {rounds: null} or a misspelt key
    # (YAML reads "{rounds:0}" as {"rounds:0": None}) is refused, not dropped
    assert load_profile("cpu", test_subset=None).run(0).test_subset is None
    with pytest.raises(ConfigError, match=r"rounds = None.*integer >= 1"):
        load_profile("smoke", rounds=None)
    with pytest.raises(ConfigError, match="rounds:0"):
        load_profile("smoke", **{"rounds:0": None})
    # every chapter passes data_path=None for "no path given": that one stays "not given"
    assert load_profile("cpu", data_path=None).overrides == {}


def test_load_profile_errors():
    with pytest.raises(ConfigError, match="profile") as exc:
        load_profile("gpu")
    assert "'gpu'" in str(exc.value) and "smoke" in str(exc.value)
    with pytest.raises(ConfigError, match="rounds = 0"):
        load_profile("smoke", rounds=0)
    with pytest.raises(ConfigError, match="cohort_size"):
        load_profile("smoke", cohort_size=30)  # K = 10 in smoke
    with pytest.raises(ConfigError, match="bogus"):
        load_profile("smoke", bogus=1)


# ----------------------------------------------------------------------------- nothing silently dropped

@pytest.mark.parametrize("given, experiment, shown", [
    ({"alpha": 0.5}, "table2", ["alpha = 0.5", "table2", "[100, 1, 0.1]", "--alpha 0.5", "table2.alphas"]),
    ({"batch_size": 64}, "table1", ["batch_size = 64", "table1", "[16, 64, 'full']", "--batch-size 64"]),
    ({"local_epochs": 3}, "table1", ["local_epochs = 3", "[1, 2, 5]", "table1.local_epochs"]),
    ({"alpha": 0.5}, "table1", ["alpha = 0.5", "table1", "[100]", "table1.alpha"]),
    ({"batch_size": 64}, "table2", ["batch_size = 64", "table2", "[16]"]),
    ({"partition": "iid"}, "table2", ["partition = 'iid'", "table2", "['dirichlet']"]),
    ({"identical_client_seeds": False}, "control", ["identical_client_seeds = False", "control", "[True]"]),
    ({"local_epochs": 5}, "control", ["local_epochs = 5", "control", "table2.local_epochs"]),
])
def test_a_field_an_experiment_sets_is_refused_not_dropped(given, experiment, shown):
    from maskfed.studies import experiments

    prof = load_profile("smoke", **given)  # as a notebook's overrides do

    with pytest.raises(ConfigError) as exc:
        experiments.configs(prof, experiment)
    for s in shown:
        assert s in str(exc.value)


def test_fields_no_experiment_sets_still_apply_to_every_run():
    prof = load_profile("smoke", rounds=2, lr=0.05, seeds=[3, 4])

    cfgs = prof.table1_configs() + prof.table2_configs() + prof.control_configs()

    assert len(cfgs) == (9 + 3 + 1) * 2
    assert all(c.rounds == 2 and c.lr == 0.05 for c in cfgs)
    assert {c.seed for c in cfgs} == {3, 4}


def test_an_experiment_grid_can_be_changed_through_load_profile():
    prof = load_profile("smoke", table2={"alphas": [0.5]}, table1={"local_epochs": [3]})

    assert [(c.alpha, c.batch_size, c.local_epochs) for c in prof.table2_configs()] == [(0.5, 16, 2)]
    assert [(c.batch_size, c.local_epochs) for c in prof.table1_configs()] == [(16, 3), (64, 3), ("full", 3)]
    with pytest.raises(ConfigError, match="alphaz.*allowed: alphas"):
        load_profile("smoke", table2={"alphaz": [0.5]})


@pytest.mark.parametrize("given, shown", [
    ({"partition": "iid", "alpha": 0.5}, ["alpha = 0.5", "'iid'"]),
    ({"data_path": "/some/cifar"}, ["data_path = '/some/cifar'", "synthetic"]),        # smoke is synthetic
    ({"dataset": "cifar10", "synthetic_train": 500}, ["synthetic_train = 500", "train_subset"]),
    ({"model": "resnet18_gn", "width": 8}, ["width = 8", "resnet18_gn"]),
])
def test_a_field_the_run_never_reads_is_refused(given, shown):
    with pytest.raises(ConfigError) as exc:
        load_profile("smoke", **given).run(0)
    for s in shown:
        assert s in str(exc.value)


def test_unread_fields_from_the_profile_itself_are_not_refused():
    # smoke's yaml sets synthetic_train; switching the dataset does not make that the user's mistake
    assert load_profile("smoke", dataset="cifar10").run(0).dataset == "cifar10"
    assert load_profile("cpu").control_configs()[0].partition == "identical"  # base alpha, unused, is fine


def test_seed_is_refused_with_the_way_to_set_seeds():
    with pytest.raises(ConfigError, match=r"seeds=\[3\].*--seeds 3"):
        load_profile("smoke", seed=3)
    with pytest.raises(ConfigError, match="seeds"):
        load_profile("smoke", seeds=[])


@pytest.mark.parametrize("fields, allowed", [
    ({"model": "small_cnn_gn", "width": 4, "gn_groups": 3}, "[1, 2, 4]"),
    ({"model": "resnet18_gn", "gn_groups": 3}, "[1, 2, 4, 8, 16, 32, 64]"),
])
def test_gn_groups_must_divide_the_channels(fields, allowed):
    with pytest.raises(ConfigError) as exc:
        make_run_config(**fields)
    assert "gn_groups = 3" in str(exc.value) and allowed in str(exc.value)


def test_repeated_seeds_are_refused():
    with pytest.raises(ConfigError, match=r"seeds .*distinct; got \[0, 0\]"):
        load_profile("smoke", seeds=[0, 0])


# ----------------------------------------------------------------------------- whose setting, which data

def test_dirichlet_convention_default_keeps_the_label_and_niid_bench_is_named():
    assert make_run_config().dirichlet_convention == "hsu"
    assert make_run_config(dirichlet_convention="niid_bench", seed=1).label() == \
        "cifar10-resnet18_gn-dirichlet-niid_bench-a100-bs32-t2-s1"
    with pytest.raises(ConfigError, match="dirichlet_convention = 'fedlab'"):
        make_run_config(dirichlet_convention="fedlab")


def test_image_folder_dataset_needs_a_data_path_and_is_labelled_as_such():
    with pytest.raises(ConfigError, match="image_folder.*needs data_path"):
        make_run_config(dataset="image_folder")
    cfg = make_run_config(dataset="image_folder", data_path="/some/folder")
    assert cfg.label().startswith("image_folder-")


def test_masked_training_fields_are_checked_and_refused_when_unused():
    with pytest.raises(ConfigError, match="mask_keep_prob"):
        make_run_config(mask_keep_prob=0.0)
    with pytest.raises(ConfigError, match="mask_keep_prob"):
        make_run_config(mask_keep_prob=1.5)
    with pytest.raises(ConfigError, match="mask_mode"):
        make_run_config(mask_keep_prob=0.5, mask_mode="per_block")
    profile = load_profile("smoke", mask_mode="shared")
    with pytest.raises(ConfigError, match=r"mask_mode = 'shared' .*mask_keep_prob = 1 "):
        profile.run(0)
    assert load_profile("smoke", mask_keep_prob=0.5, mask_mode="shared").run(0).mask_mode == "shared"
    with pytest.raises(ConfigError, match=r"hessian_batch = 64 .*ignored"):
        load_profile("smoke", hessian_batch=64).run(0)
    assert load_profile("smoke", hessian_every=2, hessian_batch=64).run(0).hessian_batch == 64


def test_masked_runs_have_their_own_key_and_label():
    plain, masked = make_run_config(), make_run_config(mask_keep_prob=0.5, mask_mode="shared")
    assert plain.key() != masked.key()
    assert masked.label().endswith("-p0.5-shared-s0") and "-p" not in plain.label().split("-t2")[1]


def test_the_profiles_names_have_one_home_in_step_with_the_config():
    # engine.config lists the names itself (its bytes are part of every run's code hash); maskfed.names is their home
    from maskfed import names
    from maskfed.engine import config

    assert config.PROFILES == names.ALL
    assert (names.CPU_PAPER, names.PAPER) == ("cpu-paper", "paper")
