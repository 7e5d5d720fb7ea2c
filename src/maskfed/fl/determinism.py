"""Deterministic GPU kernels for the identical-shards control.

The control (identical shards, identical shuffling seeds) must give bit-identical
client updates, so that 1/Δ_S = K_c holds to float64 rounding. On the CPU PyTorch's
kernels are deterministic already. On a GPU some kernels (atomic-add reductions,
cuBLAS workspaces, cuDNN autotuning) may not be, so a control run on CUDA switches on
``torch.use_deterministic_algorithms(True)``, sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8``
(required by cuBLAS for reproducible GEMMs, see PyTorch's "Reproducibility" notes)
and turns cuDNN benchmarking off. ``warn_only=True``: an op with no deterministic CUDA
kernel (PyTorch's list includes the backward of ``AdaptiveAvgPool2d``, which ResNet-18
uses) warns instead of stopping the run; the control's own check (1/Δ_S = K_c and
the update spread, :func:`maskfed.fl.summary.control_deviations`) then shows whether the
updates still coincide. The settings are restored afterwards, so other runs in the same
process keep PyTorch's faster defaults. The choice is ours, following PyTorch's
reproducibility guide; the paper does not say how its control was run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: cuBLAS workspace setting that makes its GEMMs reproducible (PyTorch reproducibility notes).
CUBLAS_WORKSPACE = ":4096:8"


def needed(identical_client_seeds: bool, device: torch.device | str) -> bool:
    """True for a control run (``identical_client_seeds``) on a CUDA device."""
    return bool(identical_client_seeds) and torch.device(device).type == "cuda"


def state() -> dict:
    """The determinism settings now in force, for a run's provenance.

    Returns:
        ``{"deterministic_algorithms": bool, "warn_only": bool, "cublas_workspace_config": str or None,
        "cudnn_benchmark": bool}``.
    """
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}


@contextmanager
def deterministic(enable: bool) -> Iterator[dict]:
    """Switch on deterministic algorithms inside the block when ``enable``; restore afterwards.

    Yields:
        :func:`state` inside the block (record it in the run's provenance).
    """
    if not enable:
        yield state()
        return
    before = state()
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield state()
    finally:
        torch.use_deterministic_algorithms(before["deterministic_algorithms"], warn_only=before["warn_only"])
        torch.backends.cudnn.benchmark = before["cudnn_benchmark"]
        if before["cublas_workspace_config"] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = before["cublas_workspace_config"]
