"""Tests for maskfed.fl.determinism: when the control switches on deterministic algorithms, which
switches it sets, and that they are restored after the run.

What these tests check is the switches (PyTorch's flag, cuDNN benchmarking, CUBLAS_WORKSPACE_CONFIG),
not that they make a GPU's kernels deterministic: on this CPU the kernels are deterministic either
way, so no test here could see the difference. Whether identical clients give identical updates
on a GPU with these switches is checked where a GPU is, by `make device-check` (the control's
1/Δ_S = K_c to 1e-6 relative with each engine, maskfed.devicecheck), and in every control run by
the control's own deviations (maskfed.fl.summary.control_deviations)."""

from __future__ import annotations

import os

import torch

from maskfed.fl import determinism


def test_needed_only_for_a_control_on_cuda():
    assert determinism.needed(True, "cuda")
    assert determinism.needed(True, torch.device("cuda", 0))
    assert not determinism.needed(True, "cpu")
    assert not determinism.needed(False, "cuda")


def test_deterministic_sets_the_switches_and_restores_them(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = determinism.state()
    assert before["deterministic_algorithms"] is False

    with determinism.deterministic(True) as inside:
        assert inside == {"deterministic_algorithms": True, "warn_only": True, "cublas_workspace_config": ":4096:8",
                          "cudnn_benchmark": False}
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"

    assert determinism.state() == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_deterministic_off_leaves_the_switches_alone():
    before = determinism.state()
    with determinism.deterministic(False) as inside:
        assert inside == before
    assert determinism.state() == before
