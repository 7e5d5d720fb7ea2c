"""Centralised SGD on the union of the client shards: θ at chosen test accuracies, seeded and resumable.

For the factor study (:mod:`maskfed.studies.factor_axes`) where a FedAvg trajectory costs too much
(wider small CNNs, ResNet-18-GN): plain SGD (no momentum), the config's lr and batch size, from the
seed's FedAvg θ_0 (:func:`maskfed.studies.stage.initial_theta`); θ kept at the first evaluation reaching
each target. Ours; the paper trains only with FedAvg.

Seeded (:func:`epoch_order`), checkpointed and resumable like a run (:mod:`maskfed.engine.checkpoint`; same
numbers on the same machine and thread count); folder ``results/central/central-<label>-<key>``, key hashing
configuration, settings, run code plus :data:`CENTRAL_MODULES` and data fingerprint.
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from maskfed.engine import checkpoint, fedavg, runner, store
from maskfed.engine.config import make_settings, RunConfig
from maskfed.paths import results_dir
from maskfed.studies import stage

#: Modules hashed into the key of a centralised-SGD folder beside the run code.
CENTRAL_MODULES = ("studies.stage", "studies.central")
#: Extra SeedSequence entry of the epoch permutations, so they share no stream with FedAvg's draws. Ours.
CENTRAL_STREAM = 15485863


class CentralSpec(BaseModel):
    """Settings of one centralised-SGD θ path (ours). Units in the comments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    targets: tuple[float, ...]                    # test accuracies (fractions) at which θ is kept
    eval_every: int = Field(100, ge=1)            # SGD steps between test evaluations (each one a checkpoint)
    max_steps: int = Field(20000, ge=1)           # SGD steps at most; a target not reached by then stays unreached
    eval_images: int | None = Field(None, ge=10)  # test images evaluated while searching (seeded subset); None: all

    @model_validator(mode="after")
    def _targets_are_fractions(self) -> "CentralSpec":
        if not self.targets or not all(0 < t <= 1 for t in self.targets):
            raise ValueError(f"targets must be a non-empty list of accuracies in (0, 1]; got {list(self.targets)}")
        return self


def make_spec(**fields) -> CentralSpec:
    """A :class:`CentralSpec` from ``fields`` (None: not given, the default).

    Raises:
        ConfigError: naming each bad setting and what is allowed.
    """
    return make_settings(CentralSpec, {}, fields, "centralised-SGD settings")


@dataclass
class CentralResult:
    """A finished centralised-SGD path."""

    path: Path
    accuracy: pd.DataFrame      # one row per evaluation: step, epochs, images, test_acc, test_loss (search set)
    checkpoints: pd.DataFrame   # one row per target: target, reached, step, epochs, images, search_acc, test_acc, test_loss
    thetas: dict[float, torch.Tensor]  # target -> θ [P] float32 (reached targets only)
    provenance: dict


def central_path(cfg: RunConfig, spec: CentralSpec) -> Path:
    """Folder of the path: ``results_dir()/central/central-<label>-w<width>-<key>``."""
    key = store.result_key({"config": cfg.key(), "spec": spec.model_dump(mode="json")}, CENTRAL_MODULES,
                           runner.images_for(cfg))
    width = "" if cfg.model == "resnet18_gn" else f"-w{cfg.width}"
    return results_dir() / "central" / f"central-{cfg.label()}{width}-{key}"


def load(path: Path) -> CentralResult:
    """Read a finished folder."""
    blob = torch.load(path / "thetas.pt", weights_only=True)
    thetas = {float(t): th for t, th in zip(blob["targets"], blob["thetas_RxP"])}
    return CentralResult(path, pd.read_csv(path / "accuracy.csv"), pd.read_csv(path / "checkpoints.csv"), thetas,
                         json.loads((path / "provenance.json").read_text()))


def union_indices(parts) -> torch.Tensor:
    """The union of the client shards (indices into the training split), sorted, int64."""
    return torch.as_tensor(np.sort(np.concatenate([np.asarray(p) for p in parts])), dtype=torch.int64)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order in which epoch ``epoch`` walks the ``n`` union images: a permutation seeded by
    (seed, :data:`CENTRAL_STREAM`, epoch), so a resumed path draws the same batches."""
    s = int(np.random.SeedSequence([seed, CENTRAL_STREAM, epoch]).generate_state(1)[0])
    return torch.randperm(n, generator=torch.Generator().manual_seed(s))


def images_seen(step: int, n: int, batch: int) -> int:
    """Training images passed after ``step`` steps over ``n`` images in batches of ``batch`` (the last
    partial batch of each epoch kept)."""
    per_epoch = math.ceil(n / batch)
    epochs, within = divmod(step, per_epoch)
    return epochs * n + min(within * batch, n)


def train(cfg: RunConfig, spec: CentralSpec, *, progress: bool = False,
          on_checkpoint: Callable[[int], None] | None = None) -> CentralResult:
    """θ at each target accuracy from centralised SGD on the union of ``cfg``'s client shards (or the finished folder).

    Uses ``cfg``'s data, partition, model, θ_0 (seed), ``lr`` and batch size ("full": the whole union); not
    rounds, K_c or τ. ``on_checkpoint(step)``: called after each checkpoint (tests stop half-way with it).

    Returns:
        :class:`CentralResult`.

    Raises:
        ValueError: ``eval_images`` above the test images, or data that cannot be read, before training.
    """
    path = central_path(cfg, spec)
    if store.is_finished(path):
        return load(path)
    key = path.name.rsplit("-", 1)[-1]
    with checkpoint.claim(path.parent / f".partial-{path.name}") as partial:
        if store.is_finished(path):  # finished by another process while we waited
            return load(path)
        return _train(cfg, spec, path, key, partial, progress=progress, on_checkpoint=on_checkpoint)


def _train(cfg, spec, path, key, partial, *, progress, on_checkpoint) -> CentralResult:
    from tqdm import tqdm

    t0 = time.perf_counter()
    data, model = stage.prepared_for(cfg)
    device = data.x_train.device
    union = union_indices(data.parts)
    n = len(union)
    batch = n if cfg.batch_size == "full" else cfg.batch_size
    per_epoch = math.ceil(n / batch)
    if spec.eval_images is not None and spec.eval_images > len(data.y_test):
        raise ValueError(f"eval_images = {spec.eval_images} exceeds the {len(data.y_test)} test images; "
                         f"allowed: 10..{len(data.y_test)} or None (all)")
    if spec.eval_images is None:
        x_eval, y_eval = data.x_test, data.y_test
    else:
        pick = torch.randperm(len(data.y_test), generator=torch.Generator().manual_seed(
            int(np.random.SeedSequence([cfg.seed, CENTRAL_STREAM, 1]).generate_state(1)[0])))[:spec.eval_images]
        x_eval, y_eval = data.x_test[pick.to(device)], data.y_test[pick.to(device)]
    state = checkpoint.load(partial, key)
    step = 0 if state is None else state.rounds_done
    wall_before = 0.0 if state is None else state.wall_s
    theta = stage.initial_theta(cfg) if state is None else state.theta_P
    theta = theta.to(device)
    records = [] if state is None else state.records
    targets = sorted(set(spec.targets))

    def reached() -> dict[float, int]:
        return {t: r["step"] for r in records for t in r.get("kept", [])}

    def evaluate_and_keep(theta_P: torch.Tensor) -> None:
        acc, loss = fedavg.evaluate(model, theta_P, x_eval, y_eval)
        new = [t for t in targets if t not in reached() and acc >= t]
        for t in new:  # written before the checkpoint that records it: a kill in between recomputes the same θ
            tmp = partial / f".kept-{t:.6f}.tmp"
            torch.save(theta_P.detach().float().cpu().clone(), tmp)
            os.replace(tmp, partial / f"kept-{t:.6f}.pt")
        records.append({"step": step, "epochs": step / per_epoch, "images": images_seen(step, n, batch),
                        "test_acc": acc, "test_loss": loss, "kept": new})

    if state is None:
        evaluate_and_keep(theta)
    vector_to_parameters(theta.clone(), model.parameters())
    params = list(model.parameters())
    order, order_epoch = None, -1
    bar = tqdm(total=spec.max_steps, initial=step, desc=f"centralised SGD {cfg.label()}", leave=False,
               disable=not progress, mininterval=2.0)
    while step < spec.max_steps and len(reached()) < len(targets):
        epoch, within = divmod(step, per_epoch)
        if epoch != order_epoch:
            order, order_epoch = epoch_order(n, cfg.seed, epoch), epoch
        idx = union[order[within * batch:(within + 1) * batch]].to(device)
        model.train()
        loss = nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            torch._foreach_add_(params, grads, alpha=-cfg.lr)
        step += 1
        bar.update(1)
        if step % spec.eval_every == 0 or step == spec.max_steps:
            with torch.no_grad():
                theta = parameters_to_vector(params).detach().clone()
            evaluate_and_keep(theta)
            vector_to_parameters(theta.clone(), model.parameters())
            params = list(model.parameters())
            checkpoint.save(partial, checkpoint.RunState(step, theta.cpu(), records,
                                                         wall_s=wall_before + time.perf_counter() - t0), key)
            if on_checkpoint is not None:
                on_checkpoint(step)
    bar.close()
    # every reached target's θ, also on the whole test set when the search used a subset
    got = reached()
    rows, kept = [], {}
    for t in targets:
        row = {"target": t, "reached": t in got}
        if t in got:
            rec = next(r for r in records if r["step"] == got[t])
            th = torch.load(partial / f"kept-{t:.6f}.pt", weights_only=True)
            kept[t] = th
            acc, loss = ((rec["test_acc"], rec["test_loss"]) if spec.eval_images is None
                         else fedavg.evaluate(model, th.to(device), data.x_test, data.y_test))
            row.update(step=got[t], epochs=rec["epochs"], images=rec["images"], search_acc=rec["test_acc"],
                       test_acc=acc, test_loss=loss)
        rows.append(row)
    buf = io.BytesIO()
    torch.save({"targets": list(kept), "thetas_RxP": torch.stack(list(kept.values())) if kept
                else torch.zeros(0, len(theta))}, buf)
    prov = store.result_provenance(modules=CENTRAL_MODULES, code_field="central_code_hash", device=str(device),
                                   images=runner.images_for(cfg), t0=t0, wall_before=wall_before, key=key,
                                   seed=cfg.seed, union_images=n, steps=step,
                                   resumed_after_step=0 if state is None else state.rounds_done)
    files = {"accuracy.csv": pd.DataFrame([{k: v for k, v in r.items() if k != "kept"} for r in records]).to_csv(index=False),
             "checkpoints.csv": pd.DataFrame(rows).to_csv(index=False), "thetas.pt": buf.getvalue(),
             "config.json": json.dumps(cfg.model_dump(mode="json"), indent=2), "spec.json": spec.model_dump_json(indent=2),
             "provenance.json": json.dumps(prov, indent=2)}
    checkpoint.write_folder(path, files, "the centralised trajectory's folder")
    checkpoint.discard(partial)
    for f in partial.glob("kept-*.pt"):
        f.unlink()
    return load(path)
