"""`make device-check DEVICE_CHECK_SIZE=tiny` runs end to end on this CPU (smoke profile) and writes
the documented files: gates that pass (each with its value and tolerance), a throughput table, a
projection of the whole grid from each run's own steps, and at least one finished run folder packed
in runs.tar.gz; a failed gate sets the exit status and summary.json names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pandas as pd
import pytest

from maskfed.paths import REPO_ROOT
from maskfed.perf import bench, devicecheck


@pytest.mark.slow
def test_make_device_check_tiny_end_to_end(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(REPO_ROOT / "src")}
    # a budget of 120 s instead of the tiny size's 20 s: on a loaded machine the gates alone can take 20 s,
    # and the check then (rightly) starts no run, which this end-to-end test needs one of
    proc = subprocess.run(["make", "-s", "device-check", "DEVICE_CHECK_SIZE=tiny", f"DEVICE_PY={sys.executable}",
                           "DEVICE_CHECK_ARGS=--budget-s 120"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["size"] == "tiny" and summary["ok"] is True and summary["exit_status"] == 0
    assert summary["failed"] == []
    gates_ = summary["gates"]
    assert {g["kind"] for g in gates_} == {"control", "engines", "chunking", "precision"}
    assert all(g["ok"] and g["value"] <= g["tolerance"] for g in gates_)
    # the control: the project's four criteria at the CPU's tolerance, with either engine
    control = [g for g in gates_ if g["kind"] == "control"]
    assert len(control) == 8 and {g["detail"]["engine"] for g in control} == {"sequential", "batched"}
    assert all(g["tolerance"] == 1e-12 for g in control)
    # the engines and micro-batches in float64; fp32 against float64; bf16 through the CPU's autocast
    assert [g["tolerance"] for g in gates_ if g["kind"] in ("engines", "chunking")] == [1e-6, 1e-6]
    assert {g["detail"]["precision"] for g in gates_ if g["kind"] == "precision"} == {"fp32", "bf16"}
    thr = pd.read_csv(out / "throughput.csv")
    assert list(thr.columns) == bench.COLUMNS and set(thr["path"]) == set(bench.PATHS)
    assert thr["peak_mem_gib"].isna().all()  # peak GPU memory: none on the CPU
    proj = pd.read_csv(out / "projection.csv")
    assert len(proj) == summary["runs_in_grid"] > 1 and (proj["projected_s"] > 0).all()
    assert set(proj["engine"]) == {"sequential"} and (proj["steps"] > 0).all()  # the CPU's auto engine
    assert summary["projected_grid_s"]["fp32"] == pytest.approx(proj["projected_s"].sum(), rel=1e-12)
    assert summary["runs_finished"] >= 1 and (out / "log.txt").exists()
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    for f in ("metrics.csv", "config.json", "partition.json", "provenance.json"):
        assert any(n.endswith("/" + f) for n in names), (f, names)
    (gate,) = [line for line in proc.stdout.splitlines() if "gate engines: " in line]  # the log line of that gate
    assert "batched" in gate and "sequential" in gate and "(float64): ok " in gate
    for r in summary["runs"]:  # no run was started whose projection exceeded the time left
        assert r["projected_s"] > 0


@pytest.mark.slow
def test_a_failed_gate_sets_the_exit_status_and_summary_names_it(tmp_path, monkeypatch):
    # prepare: the engines' comparison made to fail (as a broken batched engine would)
    import torch

    from maskfed.perf import devicecheck, gates

    def broken(profile, device):
        return [gates.Gate("engines", "batched vs sequential (float64)", 3e-3, 1e-6, False)]

    monkeypatch.setattr(devicecheck, "check_engines", broken)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))  # main() sets it; restored after
    monkeypatch.delenv("OUT", raising=False)
    threads = torch.get_num_threads()
    # execute
    try:
        status = devicecheck.main(["--size", "tiny", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    # assert: exit status 8 (engines), the failed gate with its value and tolerance, no run started
    assert status == gates.EXIT_BITS["engines"] == 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False and summary["exit_status"] == 8
    (failed,) = summary["failed"]
    assert {k: v for k, v in failed.items() if k != "name"} == {
        "kind": "engines", "value": 3e-3, "tolerance": 1e-6, "times_tolerance": pytest.approx(3000), "required": True}
    assert "batched" in failed["name"] and "sequential" in failed["name"] and "(float64)" in failed["name"]
    assert summary["runs_finished"] == 0


@pytest.fixture
def started(monkeypatch):
    """The configs :func:`devicecheck.run_what_fits` starts, in order (runner.run replaced, nothing trains), and a
    stopped clock, so that only the budget's arithmetic decides."""
    from types import SimpleNamespace

    configs = []

    def fake_run(c, progress):
        configs.append(c)
        return SimpleNamespace(path="/nowhere", metrics=pd.DataFrame({"test_acc": [0.5]}))

    monkeypatch.setattr(devicecheck.runner, "run", fake_run)
    monkeypatch.setattr(devicecheck.time, "perf_counter", lambda: 100.0)
    return configs


def test_run_what_fits_never_starts_a_run_projected_past_the_time_left(started):
    from maskfed.engine.config import load_profile

    cfg = load_profile("smoke").run(0)
    proj = pd.DataFrame({"label": ["big", "small"], "seed": [0, 0], "projected_s": [50.0, 5.0],
                         "config": [cfg.model_copy(update={"seed": 1}), cfg]})
    # 4 s left: not even the cheapest run (5 s, 6 s with the margin) starts
    done, skipped = devicecheck.run_what_fits(proj, budget_s=4.0, t_start=100.0)
    assert started == [] and done == [] and skipped == ["small", "big"]
    # 30 s left: the 5 s run starts, the 50 s one does not
    done, skipped = devicecheck.run_what_fits(proj, budget_s=30.0, t_start=100.0)
    assert [c.label() for c in started] == [cfg.label()] and [d["projected_s"] for d in done] == [5.0]
    assert skipped == ["big"]


def test_run_what_fits_starts_the_headline_cell_first_even_when_it_is_not_the_cheapest(started):
    from maskfed.engine.config import load_profile

    # prepare: three runs told apart by their seeds; the headline (20 s) is neither the cheapest nor seed 0's
    cfg = load_profile("smoke").run(0)
    proj = pd.DataFrame({"label": ["cheap", "headline", "seed1"], "seed": [0, 1, 1], "projected_s": [5.0, 20.0, 1.0],
                         "config": [cfg.model_copy(update={"seed": s}) for s in (10, 11, 12)]})
    # execute + assert: with room for all, the headline runs first, then seed 0 before seed 1
    done, skipped = devicecheck.run_what_fits(proj, budget_s=100.0, t_start=100.0, first="headline")
    assert [c.seed for c in started] == [11, 10, 12] and skipped == []
    # 10 s left: the headline (24 s with the margin) is skipped and the others still run, seed 0 first
    started.clear()
    done, skipped = devicecheck.run_what_fits(proj, budget_s=10.0, t_start=100.0, first="headline")
    assert [c.seed for c in started] == [10, 12] and skipped == ["headline"]
    # without ``first``: seed 0, cheapest first, as before
    started.clear()
    devicecheck.run_what_fits(proj, budget_s=100.0, t_start=100.0)
    assert [c.seed for c in started] == [10, 12, 11]


def test_full_size_without_a_gpu_says_what_to_do_and_leaves_no_old_results(tmp_path, monkeypatch, capsys):
    import torch

    from maskfed.perf import devicecheck

    if torch.cuda.is_available():  # the message under test is the one a machine without CUDA gives
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))  # main() sets it; restored after
    stale = tmp_path / "summary.json"
    stale.write_text('{"ok": true}')
    assert devicecheck.main(["--size", "full", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "DEVICE_CHECK_SIZE=tiny" in err
    assert not stale.exists()


def test_tf32_settings_gate_passes_here_and_fails_when_a_setting_does_not_take(monkeypatch):
    from maskfed.perf import devicecheck
    from maskfed.engine import cohort

    ok = devicecheck.check_tf32_settings()
    assert len(ok) == 1 and ok[0].ok and ok[0].value == 0 and ok[0].required
    monkeypatch.setattr(cohort, "_set_tf32", lambda matmul, cudnn_conv: None)  # a torch that ignores the setting
    bad = devicecheck.check_tf32_settings()[0]
    assert not bad.ok and bad.value >= 1 and any("tf32" in w or "ieee" in w for w in bad.detail["wrong"])


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "inf"])
def test_a_budget_that_is_not_a_positive_number_of_seconds_is_refused_before_anything_runs(tmp_path, capsys, budget):
    assert devicecheck.main(["--size", "tiny", "--out", str(tmp_path), "--budget-s", budget]) == 2
    err = capsys.readouterr().err
    assert "--budget-s" in err and "positive" in err and "finite" in err and f"got {float(budget):g}" in err
    assert not any(tmp_path.iterdir())  # refused before the output folder is touched
