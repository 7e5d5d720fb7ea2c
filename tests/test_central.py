"""Centralised SGD to target accuracies: the union of the shards, the first θ reaching each target,
seeded and resumable like a run."""

import json

import numpy as np
import pytest
import torch

from maskfed.engine import fedavg
from maskfed.engine.config import ConfigError, make_run_config
from maskfed.studies import central, stage

TINY = dict(dataset="synthetic", synthetic_train=400, synthetic_test=100, num_clients=8, cohort_size=3, rounds=2,
            lr=0.05, model="small_cnn_gn", width=2, batch_size=16, local_epochs=1, device="cpu")
SPEC = central.make_spec(targets=(0.2, 0.3), eval_every=4, max_steps=120)


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "a"))
    return tmp_path


def test_union_order_and_images_are_what_they_say():
    # the union of shards, sorted; the epoch orders are seeded permutations, one per epoch
    assert central.union_indices([np.array([5, 1]), np.array([0, 3])]).tolist() == [0, 1, 3, 5]
    a, b = central.epoch_order(10, seed=0, epoch=0), central.epoch_order(10, seed=0, epoch=1)
    assert sorted(a.tolist()) == list(range(10)) and not torch.equal(a, b)
    assert torch.equal(a, central.epoch_order(10, seed=0, epoch=0))
    # 10 images in batches of 4: 3 steps an epoch (4, 4, 2)
    assert [central.images_seen(s, 10, 4) for s in (0, 1, 2, 3, 4, 7)] == [0, 4, 8, 10, 14, 24]


def test_bad_settings_are_refused_before_training(results):
    with pytest.raises(ConfigError, match=r"targets .*accuracies in \(0, 1\]"):
        central.make_spec(targets=(1.5,))
    with pytest.raises(ConfigError, match="eval_every"):
        central.make_spec(targets=(0.5,), eval_every=0)
    with pytest.raises(ValueError, match=r"eval_images = 500 .*100 test"):
        central.train(make_run_config(**TINY), central.make_spec(targets=(0.5,), eval_images=500))
    assert not (results / "a" / "central").exists() or not any((results / "a" / "central").glob("central-*"))


def test_keeps_the_first_theta_reaching_each_target(results):
    cfg = make_run_config(**TINY)
    # execute
    res = central.train(cfg, SPEC)
    # assert: each target's θ is the first evaluation at or above it, and that θ has that accuracy
    acc = res.accuracy
    assert acc["step"].iloc[0] == 0 and (acc["step"].iloc[1:] % SPEC.eval_every == 0).all()
    data, model = stage.prepared_for(cfg)
    for _, row in res.checkpoints.iterrows():
        assert row["reached"]
        first = acc[acc["test_acc"] >= row["target"]].iloc[0]
        assert row["step"] == first["step"] and row["test_acc"] == first["test_acc"]
        got, _ = fedavg.evaluate(model, res.thetas[row["target"]], data.x_test, data.y_test)
        assert got == row["test_acc"]
    # it stops once every target is reached, and starts from the FedAvg run's θ_0
    assert acc["step"].iloc[-1] == res.checkpoints["step"].max()
    assert acc["test_acc"].iloc[0] == fedavg.evaluate(model, stage.initial_theta(cfg), data.x_test, data.y_test)[0]
    assert res.provenance["union_images"] == sum(len(p) for p in data.parts)
    assert central.train(cfg, SPEC).path == res.path  # finished: read back, not trained again


def test_an_unreached_target_stays_unreached(results):
    cfg = make_run_config(**TINY)
    res = central.train(cfg, central.make_spec(targets=(0.2, 0.99), eval_every=5, max_steps=12))
    rows = res.checkpoints.set_index("target")
    assert rows.loc[0.99, "reached"] == False and 0.99 not in res.thetas  # noqa: E712 (a numpy bool)
    assert res.accuracy["step"].iloc[-1] == 12  # ran to max_steps, evaluated at the end


def test_seeded_and_resumable_like_a_run(results, monkeypatch):
    cfg = make_run_config(**TINY)
    # prepare: one uninterrupted path
    whole = central.train(cfg, SPEC)
    # execute: the same path elsewhere, stopped after its second checkpoint, then run again
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results / "b"))

    def stop(step):
        if step == 2 * SPEC.eval_every:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        central.train(cfg, SPEC, on_checkpoint=stop)
    partial = central.central_path(cfg, SPEC).parent / f".partial-{central.central_path(cfg, SPEC).name}"
    assert (partial / "checkpoint.pt").exists()
    resumed = central.train(cfg, SPEC)
    # assert: every number bit for bit, the resume recorded, the partial folder gone
    assert resumed.provenance["resumed_after_step"] == 2 * SPEC.eval_every
    assert resumed.accuracy.equals(whole.accuracy) and resumed.checkpoints.equals(whole.checkpoints)
    assert all(torch.equal(resumed.thetas[t], whole.thetas[t]) for t in whole.thetas)
    assert not partial.exists()
    assert json.loads((resumed.path / "spec.json").read_text())["targets"] == list(SPEC.targets)
