"""Run folders: written atomically, reused when config, code and data are unchanged,
identical whether runs go through worker processes or not."""

import json

import pandas as pd
import pytest

from maskfed import partition, provenance, runner
from maskfed.config import make_run_config

TINY = dict(dataset="synthetic", synthetic_train=200, synthetic_test=50, num_clients=4, cohort_size=2, rounds=2,
            model="small_cnn_gn", width=2, batch_size=16, local_epochs=1, eval_every=1)


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    return tmp_path


def test_run_writes_complete_folder_and_reuses_it(results_in_tmp):
    cfg = make_run_config(**TINY)
    first = runner.run(cfg, progress=False)
    assert sorted(p.name for p in first.path.iterdir()) == [
        "config.json", "metrics.csv", "partition.json", "provenance.json"]
    assert first.path.parent == results_in_tmp / "runs"
    assert list(first.metrics["round"]) == [1, 2]
    prov = first.provenance
    for key in ("seed", "commit", "dirty", "code_hash", "packages", "machine", "data_source", "wall_s"):
        assert key in prov
    assert prov["packages"]["torch"] is not None
    assert prov["determinism"]["deterministic_algorithms"] is False  # only a control on CUDA switches it on
    assert json.loads((first.path / "config.json").read_text()) == cfg.model_dump(mode="json")
    images = runner.load_images("synthetic", None, 200, 50)
    expected = partition.make_partition("dirichlet", images.y_train.numpy(), 4, alpha=cfg.alpha, seed=cfg.seed)
    sizes = json.loads((first.path / "partition.json").read_text())["sizes"]
    assert sizes == [len(p) for p in expected] and sum(sizes) == 200  # the run's own seeded partition
    # a second call reuses the folder: same provenance (same finish time), nothing recomputed
    again = runner.run(cfg, progress=False)
    assert again.path == first.path
    assert again.provenance["finished_utc"] == prov["finished_utc"]
    assert not [p for p in (results_in_tmp / "runs").iterdir() if p.name.startswith(".tmp")]


def test_key_changes_with_config_and_code(monkeypatch):
    images = runner.load_images("synthetic", None, 200, 50)
    a, b = make_run_config(**TINY), make_run_config(**{**TINY, "lr": 0.02})
    assert runner.run_key(a, images) != runner.run_key(b, images)
    before = runner.run_key(a, images)
    monkeypatch.setattr(provenance, "code_hash", lambda: "another-code-version")
    assert runner.run_key(a, images) != before


def test_data_fingerprint_depends_on_content_not_location():
    one = runner.load_images("synthetic", None, 200, 50)
    same = runner.data_mod.synthetic_image_data(n_train=200, n_test=50, seed=0)
    other = runner.data_mod.synthetic_image_data(n_train=200, n_test=50, seed=1)
    assert runner.data_fingerprint(one) == runner.data_fingerprint(same)
    assert runner.data_fingerprint(one) != runner.data_fingerprint(other)


def test_worker_processes_give_the_same_numbers_as_one_process(results_in_tmp, monkeypatch):
    cfgs = [make_run_config(**{**TINY, "seed": s}) for s in (0, 1)]
    parallel = runner.run_many(cfgs, workers=2, progress=False)
    assert [r.config for r in parallel] == cfgs  # input order kept
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results_in_tmp / "sequential"))
    sequential = runner.run_many(cfgs, workers=1, progress=False)
    for p, s in zip(parallel, sequential):
        cols = ["recovery_unweighted", "recovery_weighted", "sigma2_hat", "train_loss", "test_acc"]
        pd.testing.assert_frame_equal(p.metrics[cols], s.metrics[cols], rtol=1e-6)
    assert parallel[0].metrics["recovery_unweighted"].iloc[0] != parallel[1].metrics["recovery_unweighted"].iloc[0]


def test_a_failing_run_keeps_the_finished_ones(results_in_tmp):
    good = make_run_config(**TINY)
    bad = make_run_config(**{**TINY, "num_clients": 500, "cohort_size": 2})  # more clients than images
    with pytest.raises(ValueError, match="num_clients"):
        runner.run_many([good, bad], workers=1, progress=False)
    assert runner.find_run(good) is not None
    assert runner.find_run(bad) is None


def test_force_recomputes_and_replaces_the_folder(results_in_tmp):
    cfg = make_run_config(**TINY)
    first = runner.run(cfg, progress=False)
    forced = runner.run(cfg, force=True, progress=False)
    assert forced.path == first.path
    assert forced.provenance["wall_s"] != first.provenance["wall_s"]  # really recomputed and written
    assert runner.find_run(cfg).provenance["wall_s"] == forced.provenance["wall_s"]
    pd.testing.assert_frame_equal(first.metrics.drop(columns="wall_s"), forced.metrics.drop(columns="wall_s"))
    assert [p.name for p in (results_in_tmp / "runs").iterdir()] == [first.path.name]  # no leftovers


def test_control_on_cuda_runs_with_deterministic_algorithms(results_in_tmp, monkeypatch):
    # No GPU here: pretend the device is CUDA and record what the training loop sees.
    import torch

    from maskfed import fedavg

    seen = {}
    real = fedavg.run_fedavg

    def spy(*args, **kwargs):
        seen["deterministic"] = torch.are_deterministic_algorithms_enabled()
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "_device", lambda name: torch.device("cpu"))
    monkeypatch.setattr(runner.determinism, "needed", lambda control, device: control)
    monkeypatch.setattr(fedavg, "run_fedavg", spy)
    cfg = make_run_config(**{**TINY, "partition": "identical", "identical_client_seeds": True})
    res = runner.run(cfg, progress=False)
    assert seen["deterministic"] is True
    assert res.provenance["determinism"]["deterministic_algorithms"] is True
    assert res.provenance["determinism"]["cublas_workspace_config"] == ":4096:8"
    assert not torch.are_deterministic_algorithms_enabled()   # restored after the run
