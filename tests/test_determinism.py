"""Tests for maskfed.fl.determinism: when the control switches on deterministic algorithms, and that
the settings are restored after the run."""

from __future__ import annotations

import os

import torch

from maskfed.fl import determinism


def test_needed_only_for_a_control_on_cuda():
    assert determinism.needed(True, "cuda")
    assert determinism.needed(True, torch.device("cuda", 0))
    assert not determinism.needed(True, "cpu")
    assert not determinism.needed(False, "cuda")


def test_deterministic_sets_and_restores(monkeypatch):
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


def test_deterministic_off_changes_nothing():
    before = determinism.state()
    with determinism.deterministic(False) as inside:
        assert inside == before
    assert determinism.state() == before
