"""Sweeps on Ray: a real local Ray head on 127.0.0.1 runs the smoke profile and gives the
local backend's run folders bit for bit at the same torch thread count (one: each Ray task's and,
through conftest, this process's); a worker that dies mid-sweep is retried, and a run
that keeps failing loses no finished run. Ray is the optional extra '.[ray]' (make test installs it)."""

import os
from pathlib import Path

import pandas as pd
import pytest
import ray

from maskfed import cli

from maskfed.engine import runner
from maskfed.studies import experiments

from maskfed.engine.config import load_profile, RunConfig
from maskfed.integrations import ray_backend


@pytest.fixture(scope="module")
def ray_head():
    """One local Ray head (2 CPUs, no dashboard) for the whole module: startup takes 10-20 s."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
             object_store_memory=100 * 1024**2)
    yield ray
    ray.shutdown()


def _metrics(results) -> dict[str, pd.DataFrame]:
    return {r.path.name: r.metrics.drop(columns=["wall_s"]) for r in results}


def test_task_resources_follow_the_device():
    cfg = load_profile("smoke").run(0)
    assert ray_backend.task_resources(cfg, cluster_gpus=0) == {"num_cpus": 1}
    assert ray_backend.task_resources(cfg.model_copy(update={"device": "auto"}), 2) == {"num_cpus": 1, "num_gpus": 1}
    assert ray_backend.task_resources(cfg.model_copy(update={"device": "cuda"}), 1) == {"num_cpus": 1, "num_gpus": 1}
    with pytest.raises(ValueError, match="no GPU"):
        ray_backend.task_resources(cfg.model_copy(update={"device": "cuda"}), 0)


def test_bad_input_is_refused_before_ray_starts(capsys):
    with pytest.raises(ValueError, match="max_retries"):
        ray_backend.run_many([], max_retries=-1)
    assert cli.main(["sweep", "--profile", "smoke", "--address", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--address" in err and "--backend ray" in err
    assert cli.main(["sweep", "--profile", "smoke", "--backend", "ray", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "--backend ray" in err  # refused, not ignored
    assert not ray.is_initialized()


@pytest.mark.slow
def test_smoke_sweep_on_ray_equals_the_local_backend(ray_head, tmp_path, monkeypatch, capsys):
    # prepare: the smoke sweep with the local backend, in its own results folder
    profile = load_profile("smoke")
    cfgs = experiments.all_configs(profile)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "local"))
    local = runner.run_many(cfgs, workers=1, progress=False)
    # execute: the same sweep through the CLI on the Ray head, into another folder
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "ray"))
    assert cli.main(["sweep", "--profile", "smoke", "--backend", "ray"]) == 0
    on_ray = [runner.find_run(c) for c in cfgs]
    # assert: same folders (same keys), same numbers bit for bit (wall time aside), under the condition
    # that makes them so: every run of both backends trained with the same torch thread count
    assert None not in on_ray and len(cfgs) >= 10
    assert {r.provenance["machine"]["torch_threads"] for r in [*local, *on_ray]} == {1}
    assert sorted(r.path.name for r in on_ray) == sorted(r.path.name for r in local)
    assert all(r.path.parent == tmp_path / "ray" / "runs" for r in on_ray)
    loc, ray_ = _metrics(local), _metrics(on_ray)
    for name in loc:
        pd.testing.assert_frame_equal(ray_[name], loc[name], check_exact=True)
    assert not list((tmp_path / "ray" / "runs").glob(".tmp-*"))  # every folder renamed into place


def _two_runs() -> list[RunConfig]:
    profile = load_profile("smoke", rounds=2)
    return experiments.configs(profile, "table2")[:2]


@pytest.mark.slow
def test_a_worker_that_dies_is_retried(ray_head, tmp_path, monkeypatch):
    # prepare: a task whose worker process exits on its first attempt at each run
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    marks = tmp_path / "attempts"
    marks.mkdir()

    def dies_once(cfg_json, results):
        mark = marks / RunConfig.model_validate_json(cfg_json).label()
        if not mark.exists():
            mark.write_text(str(os.getpid()))
            os._exit(1)  # the worker process dies, as on a lost node
        return ray_backend.run_task(cfg_json, results)

    cfgs = _two_runs()
    # execute
    results = ray_backend.run_many(cfgs, progress=False, max_retries=1, task=dies_once)
    # assert: each run died once, was retried, and finished with the key a local run gets
    assert sorted(p.name for p in marks.iterdir()) == sorted(c.label() for c in cfgs)
    assert [r.path for r in results] == [runner.identify(c).path for c in cfgs]
    assert all((r.path / "provenance.json").exists() and len(r.metrics) == 2 for r in results)


@pytest.mark.slow
def test_a_run_that_keeps_dying_loses_no_finished_run(ray_head, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    doomed, fine = _two_runs()

    def kills_one(cfg_json, results):
        if RunConfig.model_validate_json(cfg_json) == doomed:
            os._exit(1)
        return ray_backend.run_task(cfg_json, results)

    with pytest.raises(RuntimeError, match=r"1 run\(s\) failed.*Ray; first: " + doomed.label()):
        ray_backend.run_many([doomed, fine], progress=False, max_retries=0, task=kills_one)
    assert runner.find_run(fine) is not None and runner.find_run(doomed) is None
    assert Path(runner.find_run(fine).path).parent == tmp_path / "results" / "runs"
