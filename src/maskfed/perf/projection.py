"""Projected time of a run from its own steps: its partition, its cohorts, the engine it uses.

A sequential round makes Σ_k T_k steps over Σ_k τ·n_k images; a batched round makes max_k T_k steps
over Σ_s m_s·b_s images (m_s clients still training, b_s their widest batch, padding included).
Both depend on the cohort, so each run is projected from its own shards (:func:`run_work`). Seconds
come from :func:`fit_cost` (seconds = a·steps + b·images per engine and precision, fitted to ``make bench``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from maskfed.engine import cohort, fedavg
from maskfed.engine.config import RunConfig


def batch_width(n_k: int, batch_size: int | str, step: int) -> int:
    """Images in step ``step`` (0-based) of a client with ``n_k`` images (last partial batch kept).

    Raises:
        ValueError: as :func:`maskfed.engine.cohort.local_steps`.
    """
    per_epoch = cohort.local_steps(n_k, batch_size, 1)
    if batch_size == "full":
        return n_k
    j = step % per_epoch
    return n_k - j * batch_size if j == per_epoch - 1 else batch_size


def round_work(n_K, batch_size: int | str, local_epochs: int) -> dict:
    """Steps and images of one round of each engine for a cohort with shard sizes ``n_K``.

    Returns:
        ``{"sequential_steps": Σ T_k, "sequential_images": Σ τ·n_k, "batched_steps": max T_k,
        "batched_images": Σ_s m_s·b_s}`` (images computed, padding included for the batched engine).
    """
    n_K = [int(n) for n in n_K]
    T_K = [cohort.local_steps(n, batch_size, local_epochs) for n in n_K]
    batched_images = 0
    for s in range(max(T_K)):
        active = [k for k in range(len(n_K)) if T_K[k] > s]
        batched_images += len(active) * max(batch_width(n_K[k], batch_size, s) for k in active)
    return {"sequential_steps": sum(T_K), "sequential_images": local_epochs * sum(n_K),
            "batched_steps": max(T_K), "batched_images": batched_images}


def run_work(cfg: RunConfig, shard_sizes) -> pd.DataFrame:
    """The work of every round of ``cfg``: the cohorts :func:`maskfed.engine.fedavg.sample_cohort`
    draws for its seed over its partition's shard sizes (images per client, [K]).

    Returns:
        One row per round with the columns of :func:`round_work`.
    """
    sizes = np.asarray(shard_sizes)
    return pd.DataFrame([round_work(sizes[fedavg.sample_cohort(len(sizes), cfg.cohort_size, cfg.seed, r)],
                                    cfg.batch_size, cfg.local_epochs) for r in range(cfg.rounds)])


@dataclass(frozen=True)
class Cost:
    """Seconds of a round = ``per_step`` · steps + ``per_image`` · images (both >= 0, seconds)."""

    per_step: float
    per_image: float

    def seconds(self, steps, images):
        return self.per_step * np.asarray(steps, dtype=float) + self.per_image * np.asarray(images, dtype=float)


def fit_cost(steps, images, seconds) -> Cost:
    """Least-squares fit of seconds = a·steps + b·images with a, b ≥ 0 over measured rounds.

    Two parameters, solved in closed form: the unconstrained fit, or, where it makes one
    coefficient negative, the best fit with that one at zero. One measurement fits the
    per-step cost alone.

    Raises:
        ValueError: no measurement, lengths that differ, or a non-positive time.
    """
    X = np.column_stack([np.asarray(steps, dtype=float), np.asarray(images, dtype=float)])
    y = np.asarray(seconds, dtype=float)
    if len(y) == 0 or X.shape[0] != len(y):
        raise ValueError(f"need one (steps, images) pair per time; got {X.shape[0]} and {len(y)}")
    if (y <= 0).any():
        raise ValueError(f"seconds must be positive; got {y.tolist()}")
    if len(y) >= 2 and np.linalg.matrix_rank(X) == 2:
        a, b = np.linalg.lstsq(X, y, rcond=None)[0]
        if a >= 0 and b >= 0:
            return Cost(float(a), float(b))
    only_steps = float(X[:, 0] @ y / (X[:, 0] @ X[:, 0]))
    if len(y) == 1:
        return Cost(only_steps, 0.0)
    only_images = float(X[:, 1] @ y / (X[:, 1] @ X[:, 1]))
    err = lambda c: float(np.sum((c.seconds(X[:, 0], X[:, 1]) - y) ** 2))  # noqa: E731
    return min(Cost(only_steps, 0.0), Cost(0.0, only_images), key=err)


def costs_from_bench(throughput: pd.DataFrame) -> dict[tuple[str, str], Cost]:
    """A :class:`Cost` per (engine, precision) from ``make bench`` rows of our two engines.

    Uses each row's ``steps_computed`` and ``images_computed`` (the engine's own steps and
    images, :func:`round_work`) and its median ``seconds``.
    """
    ours = throughput[throughput["path"].str.startswith("ours_")]
    return {(path.removeprefix("ours_"), prec): fit_cost(g["steps_computed"], g["images_computed"], g["seconds"])
            for (path, prec), g in ours.groupby(["path", "precision"], sort=False)}


def project_run(cfg: RunConfig, shard_sizes, cost: Cost, engine: str, *, n_test: int, eval_images_per_s: float) -> dict:
    """Projected seconds of one run: its rounds' own work at ``cost``, plus its test evaluations.

    Returns:
        ``{"steps", "images", "train_s", "eval_s", "projected_s"}`` (steps and images summed
        over rounds; seconds).

    Raises:
        ValueError: an engine other than "sequential" or "batched".
    """
    if engine not in ("sequential", "batched"):
        raise ValueError(f"engine must be 'sequential' or 'batched'; got {engine!r}")
    work = run_work(cfg, shard_sizes)
    steps, images = work[f"{engine}_steps"], work[f"{engine}_images"]
    train_s = float(cost.seconds(steps, images).sum())
    n_eval = len(fedavg.eval_rounds(cfg.rounds, cfg.eval_every, cfg.eval_every_tail))
    eval_s = n_eval * n_test / eval_images_per_s
    return {"steps": int(steps.sum()), "images": int(images.sum()), "train_s": train_s, "eval_s": eval_s,
            "projected_s": train_s + eval_s}


#: How close a projection should come to the measured time, relative (ours): the device check starts a
#: run only when its projection plus 20 % fits, so a projection within 30 % rarely overruns the budget.
#: Reported by ``make bench`` (:func:`maskfed.perf.bench.projection_check`), never asserted by a test:
#: a measured wall time depends on what else the machine runs.
PROJECTION_AIM = 0.3


def compare(projected_s: float, measured_s: float) -> dict:
    """A projected run time against the measured one (seconds, > 0).

    Returns:
        ``{"projected_s", "measured_s", "relative_error"}`` (projected / measured − 1: > 0 over,
        < 0 under) and ``"within_aim"`` (abs(relative_error) <= :data:`PROJECTION_AIM`).

    Raises:
        ValueError: a time that is not a positive finite number.
    """
    for name, v in (("projected_s", projected_s), ("measured_s", measured_s)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number of seconds; got {v!r}")
    err = projected_s / measured_s - 1.0
    return {"projected_s": float(projected_s), "measured_s": float(measured_s), "relative_error": float(err),
            "within_aim": bool(abs(err) <= PROJECTION_AIM)}
