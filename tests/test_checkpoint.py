"""Checkpoints: written atomically, read back bit-identical, refused when they belong to
another run, and guarded by a lock; and the FedAvg loop draws from no global generator,
which is why (round, θ, records) is all a checkpoint needs."""

import json
import threading
import time

import numpy as np
import pytest
import torch
from filelock import FileLock

from maskfed.engine import checkpoint, data as data_mod, fedavg, partition
from maskfed.engine.models import build_model


@pytest.fixture(scope="module")
def fed_data():
    """4 Dirichlet(α = 1) clients of unequal size over 200 synthetic images."""
    images = data_mod.synthetic_image_data(n_train=200, n_test=50, seed=0)
    mean, std = data_mod.channel_stats(images.x_train)
    parts = partition.make_partition("dirichlet", images.y_train.numpy(), 4, alpha=1.0, seed=0)
    return fedavg.FedData(x_train=data_mod.normalize(images.x_train, mean, std), y_train=images.y_train,
                          parts=parts, x_test=data_mod.normalize(images.x_test, mean, std), y_test=images.y_test)


def _model():
    torch.manual_seed(5)
    return build_model("small_cnn_gn", num_classes=10, width=2)


KW = dict(rounds=4, cohort_size=2, local_epochs=1, batch_size=16, lr=0.05, aggregation="weighted", seed=0,
          eval_at={1, 3})


def _state(rounds_done=3):
    theta = torch.randn(50, generator=torch.Generator().manual_seed(1)) * 1e-3
    records = [{"round": 1, "cohort": "0 2", "train_loss": 0.1 + 0.2, "test_acc": float("nan"), "T_min": 7},
               {"round": 2, "cohort": "1 3", "train_loss": 1 / 3, "test_acc": 0.25, "T_min": 4}]
    return checkpoint.RunState(rounds_done, theta, records, wall_s=12.5)


def test_save_then_load_gives_back_every_bit(tmp_path):
    state = _state()
    torch.manual_seed(123)
    state.torch_rng = torch.get_rng_state()
    checkpoint.save(tmp_path, state, run_key="abc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temporary file left
    back = checkpoint.load(tmp_path, run_key="abc")
    assert back.rounds_done == 3 and back.wall_s == 12.5
    assert torch.equal(back.theta_P, state.theta_P)
    assert back.records[0]["train_loss"] == 0.1 + 0.2 and back.records[1]["train_loss"] == 1 / 3  # exact floats
    assert np.isnan(back.records[0]["test_acc"]) and back.records[0]["T_min"] == 7
    torch.manual_seed(0)  # move the global generator, then restore it
    checkpoint.restore_rng(back)
    assert torch.equal(torch.get_rng_state(), state.torch_rng)


def test_a_checkpoint_of_another_run_or_a_broken_file_is_ignored(tmp_path, capsys):
    assert checkpoint.load(tmp_path, run_key="abc") is None  # none yet
    checkpoint.save(tmp_path, _state(), run_key="abc")
    assert checkpoint.load(tmp_path, run_key="other") is None
    assert "ignoring the checkpoint" in capsys.readouterr().err
    (tmp_path / "checkpoint.pt").write_bytes(b"half a file")
    assert checkpoint.load(tmp_path, run_key="abc") is None
    assert "starts from round 1" in capsys.readouterr().err


def test_save_replaces_the_previous_checkpoint(tmp_path):
    checkpoint.save(tmp_path, _state(2), run_key="k")
    checkpoint.save(tmp_path, _state(4), run_key="k")
    assert checkpoint.load(tmp_path, run_key="k").rounds_done == 4
    checkpoint.discard(tmp_path)
    assert checkpoint.load(tmp_path, run_key="k") is None


def _holder(folder):
    """Another process's hold on the run of partial folder ``folder`` (its lock file beside it)."""
    checkpoint.lock_path(folder).parent.mkdir(parents=True, exist_ok=True)
    return FileLock(checkpoint.lock_path(folder))


@pytest.mark.slow
def test_claim_waits_for_the_holder_and_removes_a_finished_folder(tmp_path, capsys):
    folder = tmp_path / ".partial-run"
    folder.mkdir()
    holder = _holder(folder)
    holder.acquire()
    entered = []

    def second():
        with checkpoint.claim(folder):
            entered.append(time.monotonic())

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.5)
    assert entered == []  # still waiting while the other holder runs
    released = time.monotonic()
    holder.release()
    t.join(timeout=10)
    assert entered and entered[0] >= released
    err = capsys.readouterr().err
    assert "another process" in err and "computing" in err
    assert not folder.exists()  # no checkpoint inside: the folder is cleaned up
    assert checkpoint.lock_path(folder).exists()  # the lock file outlives it, for the next waiter


def test_the_lock_file_lives_beside_the_partial_folder_and_is_never_removed(tmp_path):
    folder = tmp_path / "runs" / ".partial-cifar10-x-s0-0123456789abcdef"
    assert checkpoint.lock_path(folder) == tmp_path / "runs" / ".locks" / "cifar10-x-s0-0123456789abcdef.lock"
    with checkpoint.claim(folder):
        assert folder.is_dir() and checkpoint.lock_path(folder).exists()
    assert not folder.exists() and checkpoint.lock_path(folder).exists()


def test_a_failing_write_names_the_folder_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    checkpoint.save(tmp_path, _state(2), run_key="k")
    real = Path.write_bytes

    def full_disk(self, data):
        real(self, data[:10])  # part of the file reached the disk, then it was full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full_disk)
    with pytest.raises(checkpoint.WriteFailed, match=r"checkpoint .*space.*\(errno 28\).*intact") as info:
        checkpoint.save(tmp_path, _state(4), run_key="k")
    assert str(tmp_path) in str(info.value)
    monkeypatch.undo()
    assert checkpoint.load(tmp_path, run_key="k").rounds_done == 2  # the previous checkpoint, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temporary file left


def test_claim_keeps_the_folder_of_an_interrupted_run(tmp_path):
    folder = tmp_path / ".partial-run"
    try:
        with checkpoint.claim(folder):
            checkpoint.save(folder, _state(), run_key="k")
            assert json.loads((folder / "owner.json").read_text())["pid"] > 0
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert checkpoint.load(folder, run_key="k").rounds_done == 3
    with checkpoint.claim(folder):  # the lock was released: a restart gets it at once
        pass
    assert folder.exists()  # still holds the checkpoint


def test_the_fedavg_loop_draws_from_no_global_generator(fed_data):
    model = _model()
    torch_before, np_before = torch.get_rng_state(), np.random.get_state()[1].copy()
    fedavg.run_fedavg(model, fed_data, **KW)
    assert torch.equal(torch.get_rng_state(), torch_before)
    assert np.array_equal(np.random.get_state()[1], np_before)


def test_resuming_the_loop_from_a_saved_state_is_bit_identical(fed_data):
    # prepare: an uninterrupted 4-round run, and the state it had after round 2
    saved = {}

    def keep(rounds_done, theta_P, records):
        saved[rounds_done] = (theta_P.clone(), [dict(r) for r in records])

    straight = fedavg.run_fedavg(_model(), fed_data, on_state=keep, **KW)
    assert sorted(saved) == [1, 2, 3, 4]
    theta2, records2 = saved[2]
    # execute: a fresh model (other initial weights) resumed after round 2
    torch.manual_seed(99)
    resumed = fedavg.run_fedavg(build_model("small_cnn_gn", num_classes=10, width=2), fed_data,
                                start_round=2, theta_P=theta2, records=records2, **KW)
    # assert: every value of every round, exactly (wall time aside)
    assert len(resumed) == 4
    for a, b in zip(straight, resumed):
        a, b = dict(a), dict(b)
        a.pop("wall_s"), b.pop("wall_s")
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == b[key] or (np.isnan(a[key]) and np.isnan(b[key])), key
    assert not torch.equal(saved[4][0], theta2)  # the state really moved on after round 2


@pytest.mark.parametrize("kw, word", [
    (dict(start_round=5), "start_round"),
    (dict(start_round=2), "theta_P"),
    (dict(start_round=2, theta_P=torch.zeros(3), records=[{}]), "records"),
])
def test_resume_arguments_are_checked(fed_data, kw, word):
    with pytest.raises(ValueError, match=word):
        fedavg.run_fedavg(_model(), fed_data, **kw, **KW)


def test_remove_stale_leaves_a_folder_whose_lock_is_held(tmp_path):
    folder = tmp_path / ".partial-run"
    checkpoint.save(folder, _state(), run_key="k")
    holder = _holder(folder)
    with holder:
        checkpoint.remove_stale(folder)
        assert folder.exists()  # someone is computing it
    checkpoint.remove_stale(folder)
    assert not folder.exists()
