"""Run a sweep's FedAvg runs as Ray tasks, on this machine or on a Ray cluster.

Ray counterpart of :func:`maskfed.engine.runner.run_many`: one task per pending run calling
:func:`maskfed.engine.runner.run` (same folders, reuse, checkpoints). A task takes one CPU (torch on one
thread), or one GPU for CUDA runs; Ray retries a task whose worker dies; a failed run does not stop the others.

Optional extra: ``pip install -e '.[ray]'``. On a cluster every node needs the same checkout (the run key
hashes the source) and a results folder shared with the driver. Reference: Moritz et al. (2018), "Ray: A
Distributed Framework for Emerging AI Applications"; API: ``ray.remote``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from maskfed.engine import runner
from maskfed.engine.config import RunConfig

#: How often Ray re-runs a task whose worker process died (count; Ray's ``max_retries``).
MAX_RETRIES = 3
#: Install hint shown when Ray is missing.
INSTALL_HINT = "the Ray backend needs the optional extra: pip install -e '.[ray]'"


def require_ray():
    """Import and return the ``ray`` module.

    Raises:
        ImportError: Ray is not installed (the message says how to install it).
    """
    try:
        import ray
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return ray


def task_resources(cfg: RunConfig, cluster_gpus: float) -> dict:
    """Ray resources one run's task declares (``cluster_gpus``: ``ray.cluster_resources()["GPU"]``).

    Returns:
        ``{"num_cpus": 1}`` for a CPU run; ``{"num_cpus": 1, "num_gpus": 1}`` when ``device``
        is ``"cuda"``, or ``"auto"`` on a cluster with GPUs.

    Raises:
        ValueError: ``device = "cuda"`` on a cluster without GPUs.
    """
    if cfg.device == "cuda" and cluster_gpus < 1:
        raise ValueError("device = 'cuda' but the Ray cluster has no GPU; use device='cpu' or 'auto'")
    gpu = cfg.device == "cuda" or (cfg.device == "auto" and cluster_gpus >= 1)
    return {"num_cpus": 1, "num_gpus": 1} if gpu else {"num_cpus": 1}


def run_task(cfg_json: str, results: str) -> str:
    """Body of one Ray task: run (or reuse) one configuration in the worker and return its folder's path.

    Args:
        cfg_json: the run's :class:`~maskfed.engine.config.RunConfig` as JSON.
        results: the driver's results folder (must be visible at this path on the worker).
    """
    import torch

    os.environ["MASKFED_RESULTS_DIR"] = results
    torch.set_num_threads(1)
    return str(runner.run(RunConfig.model_validate_json(cfg_json), progress=False).path)


def run_many(configs: list[RunConfig], *, address: str | None = None, progress: bool = True,
             max_retries: int = MAX_RETRIES, task: Callable[[str, str], str] = run_task) -> list[runner.RunResult]:
    """Run several configurations as Ray tasks, longest first; finished runs are reused, not resubmitted.

    ``address``: e.g. ``"ray://head:10001"`` or ``"auto"``; None: the current session or a new local one
    (shut down at the end). ``task``: ``(cfg_json, results_dir) -> run folder`` (tests swap it).

    Returns:
        :class:`~maskfed.engine.runner.RunResult` list in the order of ``configs``.

    Raises:
        ValueError: ``max_retries`` < 0, or a CUDA run on a cluster without GPUs (before any task starts).
        ImportError: Ray is not installed.
        FileNotFoundError: a finished task's folder is not visible here (results folder not shared).
        RuntimeError: runs failed after their retries (the others are kept; the first error is chained).
    """
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an integer >= 0; got {max_retries!r}")
    ray = require_ray()
    unique = list(dict.fromkeys(configs))
    done = {c: runner.find_run(c) for c in unique}
    pending = sorted((c for c in unique if done[c] is None), key=runner.run_cost, reverse=True)
    if pending:
        started = not ray.is_initialized()
        if started:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        try:
            _submit_and_collect(ray, pending, done, progress=progress, max_retries=max_retries, task=task)
        finally:
            if started:
                ray.shutdown()
    return [done[c] for c in configs]


def _submit_and_collect(ray, pending, done, *, progress, max_retries, task) -> None:
    gpus = float(ray.cluster_resources().get("GPU", 0))
    resources = {c: task_resources(c, gpus) for c in pending}  # all checked before anything is submitted
    remote = ray.remote(task)
    results = str(runner.results_dir().resolve())
    refs = {remote.options(max_retries=max_retries, retry_exceptions=False, **resources[c])
            .remote(c.model_dump_json(), results): c for c in pending}
    errors = []
    with tqdm(total=len(refs), desc="runs (ray)", disable=not progress) as bar:
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            cfg = refs[ready[0]]
            try:
                path = Path(ray.get(ready[0]))
            except Exception as exc:  # a run that failed after its retries; the others continue
                errors.append((cfg.label(), exc))
            else:
                if not (path / "provenance.json").exists():
                    raise FileNotFoundError(f"run folder {path} was written by a Ray worker but is not visible here; "
                                            "the results folder (MASKFED_RESULTS_DIR) must be shared by all nodes")
                done[cfg] = runner.load_run(path)
            bar.update(1)
    if errors:
        raise RuntimeError(f"{len(errors)} run(s) failed on Ray; first: {errors[0][0]}") from errors[0][1]
