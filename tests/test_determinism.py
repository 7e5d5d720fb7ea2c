"""Tests for maskfed.engine.determinism: when the control switches on deterministic algorithms, that the
settings are restored after the run, and that CUBLAS_WORKSPACE_CONFIG is set before CUDA can start
in every process that may run the control, with provenance recording the value read at CUDA start.

What these tests check is the switches (PyTorch's flag, cuDNN benchmarking, CUBLAS_WORKSPACE_CONFIG),
not that they make a GPU's kernels deterministic: on this CPU the kernels are deterministic either
way, so no test here could see the difference. Whether identical clients give identical updates
on a GPU with these switches is checked where a GPU is, by `make device-check` (its control gates,
maskfed.perf.gates), and in every control run by the control's own deviations
(maskfed.analysis.summary.control_deviations)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from maskfed.engine import determinism
from maskfed.paths import REPO_ROOT


def test_needed_only_for_a_control_on_cuda():
    assert determinism.needed(True, "cuda")
    assert determinism.needed(True, torch.device("cuda", 0))
    assert not determinism.needed(True, "cpu")
    assert not determinism.needed(False, "cuda")


def test_deterministic_sets_the_switches_and_restores_them():
    before = determinism.state()
    assert before["deterministic_algorithms"] is False

    with determinism.deterministic(True) as inside:
        assert inside == {"deterministic_algorithms": True, "warn_only": True,
                          "cublas_workspace_config": determinism.cublas_workspace_in_force(), "cudnn_benchmark": False}
        assert torch.are_deterministic_algorithms_enabled()

    assert determinism.state() == before


def test_deterministic_off_leaves_the_switches_alone():
    before = determinism.state()
    with determinism.deterministic(False) as inside:
        assert inside == before
    assert determinism.state() == before


@pytest.mark.parametrize("module", ["maskfed.cli", "maskfed.engine.runner", "maskfed.perf.devicecheck"])
@pytest.mark.slow
def test_every_entry_point_sets_the_cublas_workspace_before_cuda_starts(module):
    # prepare: a fresh interpreter without the variable, as a CLI, a spawned sweep worker (which imports
    # maskfed.engine.runner) or the device check starts
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    env["PYTHONPATH"] = str(REPO_ROOT / "src")
    code = (f"import os, torch, {module}\n"
            "from maskfed.engine import determinism\n"
            "print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'), torch.cuda.is_initialized(),"
            " determinism.cublas_workspace_in_force())")
    # execute
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    # assert: set, CUDA not started by the import, and nothing recorded as in force before CUDA starts
    assert out == [":4096:8", "False", "None"]


@pytest.mark.slow
def test_a_value_the_environment_sets_is_kept():
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":16:8", "PYTHONPATH": str(REPO_ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", "import os, maskfed.engine.determinism; "
                          "print(os.environ['CUBLAS_WORKSPACE_CONFIG'])"], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == ":16:8"


def test_the_value_at_cuda_start_is_what_provenance_records(monkeypatch):
    # CUDA's lazy start calls _record_cuda_start; what it reads then is kept, later changes are not
    monkeypatch.setattr(determinism, "_AT_CUDA_START", {})
    assert determinism.cublas_workspace_in_force() is None
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    determinism._record_cuda_start()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    determinism._record_cuda_start()
    assert determinism.cublas_workspace_in_force() == ":4096:8" == determinism.state()["cublas_workspace_config"]


def test_a_control_in_a_process_whose_cuda_started_without_it_is_refused():
    determinism.check_cublas(":4096:8", cuda_started=True)
    determinism.check_cublas(":16:8", cuda_started=True)
    determinism.check_cublas(None, cuda_started=False)  # CUDA will start with the value this module set
    for bad in (None, ":0:0", determinism.STARTED_BEFORE):
        with pytest.raises(RuntimeError, match="fresh process"):
            determinism.check_cublas(bad, cuda_started=True)
