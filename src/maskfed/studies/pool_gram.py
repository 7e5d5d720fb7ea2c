"""The Gram matrix of a pool's client updates at a fixed θ: measured once, cached, resumable.

Every pool client trains once from θ, nothing aggregated; G_kl = ⟨Δ_k, Δ_l⟩ is kept in float64, so
1/Δ_S (eq. 3, 8) and the signal-noise split (eq. 13-14) of any cohort need only its submatrix and the
shard sizes (:mod:`maskfed.studies.factor_axes`).

Cached (:mod:`maskfed.engine.store`) in ``results/factor/gram-<label>-<key>/``, keyed by configuration,
θ digest, pool, run code plus :data:`GRAM_MODULES` and data fingerprint; resumes after its last finished
client. Ours (the stage study's pool keeping G instead of fixed cohorts).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from filelock import FileLock
from tqdm import tqdm

from maskfed.core import diversity
from maskfed.engine import checkpoint, cohort as cohort_mod, fedavg, runner, store
from maskfed.engine.config import make_run_config, RunConfig
from maskfed.engine.models import build_model, num_parameters
from maskfed.paths import results_dir
from maskfed.studies import stage

#: Modules hashed into the measurement folders' keys beside the run code (this module and the stage
#: study's data and model preparation it uses).
GRAM_MODULES = ("studies.stage", "studies.pool_gram")
#: The round whose client seeds shuffle every pool (fedavg.client_seed(seed, SHUFFLE_ROUND, k)): the
#: same shuffles for every protocol, lr and model at a θ. Ours.
SHUFFLE_ROUND = 0


def theta_digest(theta_P: torch.Tensor) -> str:
    """Content hash of θ (its float32 bytes), 16 hex digits: the same θ from any source has one key."""
    return hashlib.sha256(theta_P.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


@dataclass
class GramResult:
    """The pool's updates at one θ under one protocol, as the Gram matrix and per-client facts."""

    path: Path
    gram: torch.Tensor          # [pool, pool] float64, G_kl = ⟨Δ_k, Δ_l⟩
    clients: pd.DataFrame       # one row per pool client: client, n_k, T (local steps), train_loss (nats)
    provenance: dict

    @property
    def n(self) -> np.ndarray:
        """Shard sizes n_k of the pool's clients, [pool]."""
        return self.clients["n_k"].to_numpy()


def gram_path(cfg: RunConfig, theta_P: torch.Tensor, pool) -> Path:
    """Folder of one measurement: ``results_dir()/factor/gram-<label>-<key>``."""
    blob = {"cfg": cfg.key(), "theta": theta_digest(theta_P), "pool": [int(k) for k in pool], "shuffle": SHUFFLE_ROUND}
    key = store.result_key(blob, GRAM_MODULES, runner.images_for(cfg))
    width = "" if cfg.model == "resnet18_gn" else f"-w{cfg.width}"
    return results_dir() / "factor" / f"gram-{cfg.label()}{width}-lr{cfg.lr:g}-{key}"


def load_gram(path: Path) -> GramResult:
    """Read a finished measurement folder (the float64 CSV round-trips exactly; tests/test_factor_axes.py
    checks it)."""
    gram = pd.read_csv(path / "gram.csv").to_numpy(dtype=np.float64)
    return GramResult(path, torch.as_tensor(gram), pd.read_csv(path / "clients.csv"),
                      json.loads((path / "provenance.json").read_text()))


def measure_gram(cfg: RunConfig, theta_P: torch.Tensor, pool, *, label: str = "") -> GramResult:
    """Train every pool client once from θ under ``cfg``'s protocol and keep the Gram matrix of the updates.

    Shuffling seed ``fedavg.client_seed(cfg.seed, SHUFFLE_ROUND, k)`` (client 0's for all with
    ``identical_client_seeds``); finished updates wait in ``.partial-<folder>/`` for resuming.
    ``label``: where θ came from (provenance.json).

    Returns:
        :class:`GramResult` (the cached folder when it exists).
    """
    path = gram_path(cfg, theta_P, pool)
    if store.is_finished(path):
        return load_gram(path)
    t0 = time.perf_counter()
    partial = path.parent / f".partial-{path.name}"
    partial.mkdir(parents=True, exist_ok=True)
    with FileLock(partial / "lock"):  # one process per measurement; a second waits, then reads it
        if store.is_finished(path):
            return load_gram(path)
        data, model = stage.prepared_for(cfg)
        theta = theta_P.detach().to(device=data.x_train.device, dtype=torch.float32)
        rows, deltas, trained_s = [], [], 0.0
        for k in pool:
            k = int(k)
            file = partial / f"client-{k}.pt"
            if file.exists():
                blob = torch.load(file, weights_only=True)
            else:
                t_client = time.perf_counter()
                idx = torch.as_tensor(data.parts[k], device=data.x_train.device)
                gen = torch.Generator().manual_seed(
                    fedavg.client_seed(cfg.seed, SHUFFLE_ROUND, 0 if cfg.identical_client_seeds else k))
                delta, loss, steps = cohort_mod.client_update(model, theta, data.x_train[idx], data.y_train[idx], lr=cfg.lr,
                                                          batch_size=cfg.batch_size, local_epochs=cfg.local_epochs,
                                                          generator=gen)
                blob = {"delta": delta.detach().cpu(), "n_k": len(idx), "T": steps, "loss": loss,
                        "wall_s": time.perf_counter() - t_client}
                tmp = partial / f".client-{k}.tmp"
                torch.save(blob, tmp)
                os.replace(tmp, file)
            deltas.append(blob["delta"])
            trained_s += float(blob["wall_s"])
            rows.append({"client": k, "n_k": int(blob["n_k"]), "T": int(blob["T"]), "train_loss": float(blob["loss"])})
        gram = diversity.gram_matrix(torch.stack(deltas))
        del deltas
        ids = [str(int(k)) for k in pool]
        prov = store.result_provenance(modules=GRAM_MODULES, code_field="gram_code_hash", device=str(data.x_train.device),
                                       images=runner.images_for(cfg), t0=t0, theta=theta_digest(theta_P),
                                       theta_label=label, seed=cfg.seed, pool=[int(k) for k in pool],
                                       num_parameters=int(theta.numel()), train_s=trained_s)
        checkpoint.write_folder(path, {"gram.csv": pd.DataFrame(gram.numpy(), columns=ids).to_csv(index=False),
                                       "clients.csv": pd.DataFrame(rows).to_csv(index=False),
                                       "config.json": json.dumps(cfg.model_dump(mode="json"), indent=2),
                                       "provenance.json": json.dumps(prov, indent=2)}, "the Gram measurement's folder")
        shutil.rmtree(partial, ignore_errors=True)
    return load_gram(path)


def _gram_in_worker(cfg_json: str, theta_P: torch.Tensor, pool: list[int], label: str, threads: int) -> str:
    torch.set_num_threads(threads)
    return str(measure_gram(RunConfig(**json.loads(cfg_json)), theta_P, pool, label=label).path)


@dataclass
class Task:
    """One Gram measurement to make: protocol, θ, pool."""

    cfg: RunConfig
    theta_P: torch.Tensor
    pool: list[int]
    label: str = ""
    cost: float = 0.0     # relative cost, for longest-first scheduling


def measure_many(tasks: list[Task], *, workers: int = 1, progress: bool = False) -> list[GramResult]:
    """:func:`measure_gram` of every task (cached ones read), in one-thread worker processes
    (spawn) when ``workers`` > 1, longest first; results in the order of ``tasks``.

    Raises:
        Exception: the first failed measurement's own error, after the others ended.
    """
    paths = [gram_path(t.cfg, t.theta_P, t.pool) for t in tasks]
    todo = [i for i, p in enumerate(paths) if not store.is_finished(p)]
    if todo and workers > 1 and len(todo) > 1:
        order = sorted(todo, key=lambda i: -tasks[i].cost)
        pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=multiprocessing.get_context("spawn"),
                                   initializer=runner.worker_init)
        try:
            futs = [pool.submit(_gram_in_worker, tasks[i].cfg.model_dump_json(), tasks[i].theta_P.cpu(),
                                list(map(int, tasks[i].pool)), tasks[i].label, 1) for i in order]
            for fut in tqdm(as_completed(futs), total=len(futs), desc="Gram measurements", disable=not progress):
                fut.result()
        except BaseException:  # Ctrl-C or a failure: end the workers now; finished clients stay in their partial folders
            runner.stop_workers(pool)
            raise
        pool.shutdown(wait=True)
    else:
        for i in tqdm(todo, desc="Gram measurements", disable=not progress):
            measure_gram(tasks[i].cfg, tasks[i].theta_P, tasks[i].pool, label=tasks[i].label)
    return [load_gram(p) for p in paths]


def protocol_config(base: RunConfig, **fields) -> RunConfig:
    """``base`` with ``fields`` replaced (batch_size, local_epochs, lr, model, width), validated.

    Raises:
        ConfigError: an invalid value (naming it).
    """
    return make_run_config(**{**base.model_dump(), **fields})


def task_cost(cfg: RunConfig, pool_size: int) -> float:
    """Relative cost of a measurement for longest-first scheduling: pool size × τ × parameter count."""
    return pool_size * cfg.local_epochs * parameter_count(cfg.model, cfg.gn_groups, cfg.width)


@lru_cache(maxsize=16)
def parameter_count(model: str, gn_groups: int, width: int) -> int:
    """Parameters of ``model`` (10 classes) at ``gn_groups`` and ``width``; cached per process."""
    return num_parameters(build_model(model, num_classes=10, gn_groups=gn_groups, width=width))
