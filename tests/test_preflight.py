"""Tests for maskfed.engine.preflight: what needs the data is checked before training, once per partition."""

from __future__ import annotations

import pytest

from maskfed.engine import preflight

from maskfed.engine import runner
from maskfed.engine.config import ConfigError, load_profile
from maskfed.studies import experiments


def test_a_sweep_draws_each_distinct_partition_once(monkeypatch, tmp_path):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    drawn = []
    real = runner.partition_for
    monkeypatch.setattr(runner, "partition_for", lambda cfg, y: drawn.append((cfg.partition, cfg.alpha)) or real(cfg, y))
    cfgs = experiments.all_configs(load_profile("smoke"))

    preflight.check_runs(cfgs)

    assert len(cfgs) == 12  # 9 + 3 + 1 runs, one shared between Tables I and II
    assert sorted(drawn) == [("dirichlet", 0.1), ("dirichlet", 1.0), ("dirichlet", 100.0), ("identical", 100.0)]
    assert not (tmp_path / "runs").exists()  # nothing trained


@pytest.mark.parametrize("fields, shown", [
    ({"num_clients": 1500}, ["num_clients = 1500", "1000 training images"]),
    ({"test_subset": 400}, ["test_subset = 400", "200 images"]),
    ({"num_clients": 100, "alpha": 1e-3}, ["alpha=0.001", "stopped after"]),
    ({"device": "cuda"}, ["device = 'cuda'", "no CUDA device"]),
    ({"precision": "bf16"}, ["precision = 'bf16' needs a CUDA device", "allowed on CPU: 'fp32'"]),
])
def test_a_run_that_cannot_work_is_refused_with_its_label(fields, shown, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # the same on a GPU machine
    cfg = load_profile("smoke", **fields).run(0)

    with pytest.raises(ConfigError) as exc:
        preflight.check_runs([cfg])

    assert str(exc.value).startswith(f"run {cfg.label()}: ")
    for s in shown:
        assert s in str(exc.value)


def test_an_unwritable_results_folder_is_refused_naming_the_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(blocker / "results"))

    with pytest.raises(ConfigError, match="MASKFED_RESULTS_DIR"):
        preflight.check_runs([load_profile("smoke").run(0)])
