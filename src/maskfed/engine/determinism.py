"""Deterministic GPU kernels for the identical-shards control.

The control (identical shards and shuffling seeds) must give bit-identical client updates, so that
1/Δ_S = K_c holds to float64 rounding. CPU kernels are deterministic already; on CUDA a control run
switches on ``torch.use_deterministic_algorithms(True, warn_only=True)``, turns cuDNN benchmarking
off and needs ``CUBLAS_WORKSPACE_CONFIG=:4096:8``. cuBLAS reads that variable once, when CUDA starts,
so importing this module sets it (unless already set); provenance records the value read then
(:func:`cublas_workspace_in_force`). With ``warn_only`` an op with no deterministic kernel (the
backward of ``AdaptiveAvgPool2d`` in ResNet-18) warns; the control's own check
(:func:`maskfed.analysis.summary.control_deviations`) shows whether the updates still coincide.
Settings are restored afterwards. Ours, following PyTorch's reproducibility guide; the paper does
not say how its control was run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: cuBLAS workspace setting that makes its GEMMs reproducible (PyTorch reproducibility notes).
CUBLAS_WORKSPACE = ":4096:8"
#: The settings cuBLAS documents as reproducible (":16:8" uses less memory, runs slower).
DETERMINISTIC_WORKSPACES = (":4096:8", ":16:8")
#: Marker recorded when CUDA had started before this module could set the variable.
STARTED_BEFORE = "unknown: CUDA started before maskfed set CUBLAS_WORKSPACE_CONFIG"

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # before CUDA starts in this process

_AT_CUDA_START: dict[str, str | None] = {}


def _record_cuda_start() -> None:
    """Called by torch when CUDA starts in this process: keep the value cuBLAS reads then."""
    _AT_CUDA_START.setdefault("value", os.environ.get("CUBLAS_WORKSPACE_CONFIG"))


if torch.cuda.is_initialized():  # pragma: no cover - only when CUDA ran before maskfed was imported
    _AT_CUDA_START["value"] = STARTED_BEFORE
else:
    torch.cuda._lazy_call(_record_cuda_start)  # runs at CUDA's lazy initialisation (never on a CPU-only run)


def cublas_workspace_in_force() -> str | None:
    """``CUBLAS_WORKSPACE_CONFIG`` as read when CUDA started in this process; None while CUDA has
    not started, :data:`STARTED_BEFORE` if it started before this module was imported."""
    return _AT_CUDA_START.get("value")


def needed(identical_client_seeds: bool, device: torch.device | str) -> bool:
    """True for a control run (``identical_client_seeds``) on a CUDA device."""
    return bool(identical_client_seeds) and torch.device(device).type == "cuda"


def state() -> dict:
    """The determinism settings now in force, for a run's provenance.

    Returns:
        ``{"deterministic_algorithms": bool, "warn_only": bool, "cublas_workspace_config": str or None
        (:func:`cublas_workspace_in_force`), "cudnn_benchmark": bool}``.
    """
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cublas_workspace_config": cublas_workspace_in_force(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}


def check_cublas(value: str | None, cuda_started: bool) -> None:
    """Refuse a control on CUDA whose cuBLAS did not start with a reproducible workspace.

    Args:
        value: :func:`cublas_workspace_in_force`.
        cuda_started: whether CUDA has started in this process (if not, it starts with this
            module's setting).

    Raises:
        RuntimeError: CUDA started with another value (or before maskfed could set it).
    """
    if cuda_started and value not in DETERMINISTIC_WORKSPACES:
        raise RuntimeError(f"the identical-shards control on CUDA needs CUBLAS_WORKSPACE_CONFIG in "
                           f"{list(DETERMINISTIC_WORKSPACES)} when CUDA starts, but this process started CUDA "
                           f"with {value!r}; run the control in a fresh process (import maskfed before "
                           "anything uses CUDA, or export CUBLAS_WORKSPACE_CONFIG=:4096:8)")


@contextmanager
def deterministic(enable: bool) -> Iterator[dict]:
    """Switch on deterministic algorithms inside the block when ``enable``; restore afterwards.

    Yields:
        :func:`state` inside the block (record it in the run's provenance).

    Raises:
        RuntimeError: ``enable`` in a process whose CUDA started without a reproducible cuBLAS
            workspace (:func:`check_cublas`), before anything runs.
    """
    if not enable:
        yield state()
        return
    check_cublas(cublas_workspace_in_force(), torch.cuda.is_initialized())
    before = state()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield state()
    finally:
        torch.use_deterministic_algorithms(before["deterministic_algorithms"], warn_only=before["warn_only"])
        torch.backends.cudnn.benchmark = before["cudnn_benchmark"]
