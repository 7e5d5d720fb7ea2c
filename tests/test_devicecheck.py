"""`make device-check DEVICE_CHECK_SIZE=tiny` runs end to end on this CPU (smoke profile) and writes
the documented files: correctness checks that pass, a throughput table, a projection of the whole
grid, and at least one finished run folder packed in runs.tar.gz."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pandas as pd

from maskfed import bench
from maskfed.paths import REPO_ROOT


def test_make_device_check_tiny_end_to_end(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(REPO_ROOT / "src")}
    proc = subprocess.run(["make", "-s", "device-check", "DEVICE_CHECK_SIZE=tiny", f"DEVICE_PY={sys.executable}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["size"] == "tiny" and summary["ok"] is True
    checks = {(c["check"], c.get("engine")): c for c in summary["correctness"]}
    # the control: every client identical, so 1/Δ_S = K_c (to 1e-6) with either engine
    for engine in ("sequential", "batched"):
        assert checks[("control_recovery_equals_Kc", engine)]["max_rel_deviation"] <= 1e-6
    assert checks[("batched_equals_sequential", None)]["max_rel_difference"] <= 1e-5
    thr = pd.read_csv(out / "throughput.csv")
    assert list(thr.columns) == bench.COLUMNS and set(thr["path"]) == set(bench.PATHS)
    proj = pd.read_csv(out / "projection.csv")
    assert len(proj) == summary["runs_in_grid"] > 1 and (proj["projected_s"] > 0).all()
    assert summary["projected_grid_s"]["fp32"] == proj["projected_s"].sum()
    assert summary["runs_finished"] >= 1 and (out / "log.txt").exists()
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    for f in ("metrics.csv", "config.json", "partition.json", "provenance.json"):
        assert any(n.endswith("/" + f) for n in names), (f, names)
    assert "batched_equals_sequential: ok" in proc.stdout  # no empty "()" where a check has no engine


def test_full_size_without_a_gpu_says_what_to_do_and_leaves_no_old_results(tmp_path, monkeypatch, capsys):
    import torch

    from maskfed import devicecheck

    if torch.cuda.is_available():  # the message under test is the one a machine without CUDA gives
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))  # main() sets it; restored after
    stale = tmp_path / "summary.json"
    stale.write_text('{"ok": true}')
    assert devicecheck.main(["--size", "full", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "DEVICE_CHECK_SIZE=tiny" in err
    assert not stale.exists()
