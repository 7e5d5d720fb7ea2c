"""Stage or sampling? Every local protocol measured at the same checkpoints of one trajectory.

In Tables I and II each protocol's 1/Δ_S (eq. 3, 8) comes from its own trajectory, confounding
training stage and sampling noise. Here one reference FedAvg trajectory (default bs 32, τ 2, α 100)
gives a *checkpoint ladder* θ_s at S stages. At each θ_s every protocol trains a fixed client *pool*
once, without aggregating, and many K_c cohorts are drawn; pool, shuffles and cohorts are shared
across protocols (paired). For each of Table II's α the same pool ids hold that α's shards.
Optional *branches* run M real FedAvg rounds from each θ_s.

Cached in :mod:`maskfed.engine.store` under ``results/stages/``, keyed by configuration, run code plus
:data:`STAGE_MODULES` and data fingerprint. The design (pool, paired cohorts, variance split,
thresholds) is ours; the quantities are the paper's (eq. 3, 8, 13-14).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch.nn.utils import parameters_to_vector
from tqdm import tqdm

from maskfed.engine import checkpoint, cohort as cohort_mod, fedavg, runner, store
from maskfed.engine.config import ConfigError, make_settings, Profile, RunConfig
from maskfed.names import CPU_PAPER
from maskfed.engine.models import build_model
from maskfed.paths import results_dir

#: Modules hashed into the stage cache keys beside the run code (provenance.code_hash_with).
STAGE_MODULES = ("studies.stage",)
#: Per-cohort metrics summarised over cohorts (from :func:`maskfed.engine.fedavg.round_metrics`).
COHORT_METRICS = ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat")


class StageSpec(BaseModel):
    """Settings of the stage study (ours, not the paper's). Units in the comments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stages: int = Field(6, ge=2)                    # checkpoints S, θ_0 and the last round included
    rounds: tuple[int, ...] | None = None           # explicit checkpoint rounds (0 = θ_0); replaces `stages`
    target_accuracies: tuple[float, ...] | None = None  # test accuracies (fractions) to reach; replaces `stages`
    pool_size: int = Field(30, ge=2)                # clients trained per (stage, protocol)
    num_cohorts: int = Field(50, ge=1)              # cohorts of K_c drawn from the pool
    branch_rounds: int = Field(0, ge=0)             # M, rounds of real FedAvg from each checkpoint (0: none)
    candidate_every: int = Field(1, ge=1)           # rounds between ladder rounds tested (and kept as candidates)
    candidate_rounds: tuple[int, ...] | None = None  # explicit candidates (0, last added); replaces candidate_every
    extra_rounds: tuple[int, ...] | None = None     # ladder rounds added to those `stages`/`target_accuracies` place

    @model_validator(mode="after")
    def _one_way_to_place_stages(self) -> "StageSpec":
        if self.rounds is not None and self.target_accuracies is not None:
            raise ValueError("give rounds or target_accuracies, not both")
        if self.extra_rounds is not None and self.rounds is not None:
            raise ValueError("extra_rounds adds to the checkpoints that stages or target_accuracies place; "
                             "with explicit rounds, list them all in rounds")
        for name in ("rounds", "extra_rounds", "candidate_rounds"):
            got = getattr(self, name)
            if got is not None and (len(got) < 1 or min(got) < 0):
                raise ValueError(f"{name} must be a non-empty list of rounds >= 0 (0 = initialisation); got {got}")
        if self.target_accuracies is not None and not all(0 <= a <= 1 for a in self.target_accuracies):
            raise ValueError(f"target_accuracies must be fractions in [0, 1]; got {self.target_accuracies}")
        return self


#: Our defaults per profile, sized to the budget (docs/measurements.md). The paper profile keeps every
#: 10th round as a candidate (ResNet-18's θ is 45 MB).
PROFILE_DEFAULTS = {
    "smoke": {"stages": 3, "pool_size": 4, "num_cohorts": 4, "branch_rounds": 1},
    "cpu": {"stages": 5, "pool_size": 16, "num_cohorts": 50, "branch_rounds": 0, "candidate_every": 2},
    "cpu-long": {"stages": 5, "pool_size": 16, "num_cohorts": 50, "branch_rounds": 0, "candidate_every": 5},
    CPU_PAPER: {"stages": 6, "pool_size": 20, "num_cohorts": 100, "branch_rounds": 0,
                  "candidate_rounds": (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 25, 30, 35, 40, 50, 60, 70, 80,
                                       100, 120, 140, 160, 180),
                  # the accuracy-placed checkpoints leave rounds 60 to 200 empty: 100 and the two kept rounds
                  # either side of 150 (no θ is kept at 150) fill it (issue 27)
                  "extra_rounds": (100, 140, 160)},
    "paper": {"stages": 6, "pool_size": 40, "num_cohorts": 50, "branch_rounds": 5, "candidate_every": 10},
}


def _keep(spec: StageSpec) -> int | tuple[int, ...]:
    return spec.candidate_rounds if spec.candidate_rounds is not None else spec.candidate_every


def candidates(spec: StageSpec, rounds: int) -> list[int]:
    """The ladder's candidate rounds of a ``rounds``-round trajectory (0 and ``rounds`` included;
    :func:`maskfed.engine.runner.kept_rounds`)."""
    return runner.kept_rounds(rounds, _keep(spec))


def check_rounds(spec: StageSpec, rounds: int) -> None:
    """Refuse, before any training, ``spec.rounds`` and ``spec.extra_rounds`` not among :func:`candidates`.

    Raises:
        ConfigError: naming the field, the rounds not tested and the allowed rounds.
    """
    allowed = candidates(spec, rounds)
    for name in ("rounds", "extra_rounds"):
        bad = sorted({int(r) for r in getattr(spec, name) or () if int(r) not in allowed})
        if bad:
            raise ConfigError(f"{name} {bad} are not ladder rounds of this {rounds}-round trajectory; "
                              f"allowed: {allowed}")


def make_spec(profile: str, **fields) -> StageSpec:
    """The profile's :data:`PROFILE_DEFAULTS` with ``fields`` (None: not given) replacing them; ConfigError
    (naming the parameter and what is allowed) for unknown fields or invalid values."""
    return make_settings(StageSpec, PROFILE_DEFAULTS.get(profile, {}), fields, "stage settings")


# --------------------------------------------------------------------------- pure pieces

def pick_rounds(acc_by_round: pd.Series, spec: StageSpec) -> list[int]:
    """Checkpoint rounds of the ladder: sorted, distinct, each in ``acc_by_round.index`` (test accuracy, fraction; 0 = θ_0).

    Default: ``spec.stages`` evenly spaced accuracy levels, each the first tested round reaching it (θ_0 and the
    last round always in); or ``spec.target_accuracies`` / ``spec.rounds``; ``spec.extra_rounds`` added.
    Duplicates dropped, so fewer stages than asked can come back.

    Raises:
        ValueError: an explicit round the ladder did not test (naming the allowed ones).
    """
    acc = acc_by_round.sort_index()
    for name in ("rounds", "extra_rounds"):
        bad = [r for r in getattr(spec, name) or () if r not in acc.index]
        if bad:
            raise ValueError(f"{name} {bad} are not ladder rounds; allowed: {list(map(int, acc.index))}")
    if spec.rounds is not None:
        return sorted(set(int(r) for r in spec.rounds))
    targets = (spec.target_accuracies if spec.target_accuracies is not None
               else np.linspace(acc.iloc[0], acc.iloc[-1], spec.stages)[1:-1])
    chosen = {int(acc.index[0]), int(acc.index[-1])}
    for t in targets:
        reached = acc.index[acc.to_numpy() >= t]
        chosen.add(int(reached[0]) if len(reached) else int(acc.index[-1]))
    return sorted(chosen | set(map(int, spec.extra_rounds or ())))


def pool_and_cohorts(num_clients: int, pool_size: int, cohort_size: int, num_cohorts: int,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded pool of ``pool_size`` of the K = ``num_clients`` client ids (sorted) and ``num_cohorts`` cohorts of
    K_c = ``cohort_size`` distinct pool positions, [num_cohorts, K_c]: the same for every protocol.
    ValueError: pool larger than K, or K_c larger than the pool."""
    if not 1 <= pool_size <= num_clients:
        raise ValueError(f"pool_size = {pool_size} must be between 1 and num_clients (K = {num_clients})")
    if not 1 <= cohort_size <= pool_size:
        raise ValueError(f"cohort_size (K_c = {cohort_size}) must be between 1 and pool_size = {pool_size}")
    pool = np.sort(np.random.default_rng([seed, 104729]).choice(num_clients, size=pool_size, replace=False))
    rng = np.random.default_rng([seed, 1299709])
    cohorts = np.stack([np.sort(rng.choice(pool_size, size=cohort_size, replace=False)) for _ in range(num_cohorts)])
    return pool, cohorts


def cohort_table(deltas_PxD: torch.Tensor, n_P, cohorts_CxK: np.ndarray) -> pd.DataFrame:
    """The paper's per-round measurements (:func:`maskfed.engine.fedavg.round_metrics`) of each cohort (positions
    in the pool, [num_cohorts, K_c]) from the pool's updates [pool_size, P] and shard sizes [pool_size]: one row per
    cohort, ``cohort`` (positions, space-separated) and the metrics."""
    n_P = np.asarray(n_P)
    return pd.DataFrame([{"cohort": " ".join(map(str, c)),
                          **fedavg.round_metrics(deltas_PxD[torch.as_tensor(c, dtype=torch.long)], n_P[c])}
                         for c in cohorts_CxK])


def summarise_cohorts(cohorts: pd.DataFrame) -> dict:
    """Median and interquartile range over cohorts of :data:`COHORT_METRICS`, and the share
    (percent) of cohorts with unweighted 1/Δ_S < 1."""
    out = {}
    for m in COHORT_METRICS:
        q1, med, q3 = np.nanquantile(cohorts[m], [0.25, 0.5, 0.75])
        out[m], out[f"{m}_q1"], out[f"{m}_q3"] = float(med), float(q1), float(q3)
    out["pct_cohorts_below_one"] = float(100 * (cohorts["recovery_unweighted"] < 1).mean())
    return out


def variance_shares(table: pd.DataFrame, *, value: str = "recovery_unweighted") -> dict:
    """Share of the variance of log(value) across the (stage, protocol) grid explained by each factor. Ours.

    Main effects of a balanced two-way layout: sums of squares of stage, protocol and sampling (full batch vs
    minibatch) means over the total. ``table``: ``stage``, ``batch_size``, ``local_epochs``, ``value``.

    Returns:
        ``{"stage", "protocol", "sampling"}`` in [0, 1]; with a ``seed`` column also ``"seed"`` (the part of the
        stage share between the seeds' means).
    """
    y = np.log(table[value].astype(float))
    proto = table["batch_size"].astype(str) + "/" + table["local_epochs"].astype(str)
    total = float(((y - y.mean()) ** 2).sum())

    def share(groups) -> float:
        means = y.groupby(groups).transform("mean")
        return float(((means - y.mean()) ** 2).sum() / total) if total > 0 else 0.0

    out = {"stage": share(table["stage"]), "protocol": share(proto),
           "sampling": share(table["batch_size"].astype(str) == "full")}
    if "seed" in table:
        out["seed"] = share(table["seed"])
    return out


#: A factor counts as an explanation when it explains at least this share of the variance of log 1/Δ_S
#: across the grid (ours: a third), with an effect (:func:`effect_sizes`) at least EFFECT_MIN as well
#: (ours, from 2026-12-05): a large share of a small spread is no explanation of a large one.
EXPLAINS = 1 / 3
EFFECT_MIN = 1.5


def effect_sizes(table: pd.DataFrame, *, value: str = "recovery_unweighted") -> dict:
    """The size of each factor's effect on ``value`` across a (checkpoint = ``stage``, protocol) grid. Ours.
    ``sampling_effect``: the median over checkpoints of (median ``value`` of the full-batch protocols / median
    of the minibatch ones; NaN without both); ``stage_effect``: the largest checkpoint median over the smallest."""
    full = table["batch_size"].astype(str) == "full"
    ratio = (table[full].groupby("stage")[value].median() / table[~full].groupby("stage")[value].median()).dropna()
    medians = table.groupby("stage")[value].median()
    return {"sampling_effect": float(ratio.median()), "stage_effect": float(medians.max() / medians.min())}


def verdict(shares: dict, threshold: float = EXPLAINS, effect_min: float = EFFECT_MIN) -> str:
    """"sampling", "stage", "both" or "neither", by which of the sampling and stage shares of
    :func:`variance_shares` reach ``threshold`` with, where ``shares`` holds them (:func:`effect_sizes`), an
    effect of at least ``effect_min`` too (a NaN effect is none)."""
    def explains(factor: str) -> bool:
        effect = shares.get(f"{factor}_effect")
        return shares[factor] >= threshold and (effect is None or effect >= effect_min)

    return {(True, True): "both", (True, False): "sampling", (False, True): "stage",
            (False, False): "neither"}[(explains("sampling"), explains("stage"))]


def cliff_by_stage(table: pd.DataFrame) -> pd.Series:
    """Smallest full-batch over largest minibatch median 1/Δ_S at each stage (the paper's Table I "cliff",
    computed as in the Table I chapter)."""
    full = table["batch_size"].astype(str) == "full"
    rec = table.set_index("stage")["recovery_unweighted"]
    return rec[full.to_numpy()].groupby(level=0).min() / rec[~full.to_numpy()].groupby(level=0).max()


# --------------------------------------------------------------------------- training pieces

def pool_updates(update_fn: Callable[[torch.Tensor, int, torch.Generator], torch.Tensor], theta_P: torch.Tensor,
                 pool, seeds) -> torch.Tensor:
    """Train every pool client (ids, with one shuffling seed each) once from the same θ_s [P], without
    aggregating: Δ_k stacked, [pool_size, P]. ``update_fn``: ``(θ [P], client id, generator) -> Δ_k [P]``."""
    return torch.stack([update_fn(theta_P, int(k), torch.Generator().manual_seed(int(s))) for k, s in zip(pool, seeds)])


#: Fields of a :func:`maskfed.engine.fedavg.run_fedavg` record that :func:`fedavg_from` leaves out.
_LOOP_ONLY = ("cohort", "n_k", "T_mean", "T_min", "T_max", "train_loss", "wall_s", "test_acc", "test_loss")


def fedavg_from(model, data: fedavg.FedData, theta_P: torch.Tensor, cfg: RunConfig, *, start_round: int,
                rounds: int, test_at=None, progress=None) -> tuple[list[dict], dict[int, torch.Tensor]]:
    """``rounds`` FedAvg rounds from θ with the cohorts and shuffles of rounds ``start_round, ...`` of ``cfg``'s run.

    The loop of :func:`maskfed.engine.fedavg.run_fedavg` (sequential engine); ``test_at``: rounds (from round 0)
    after which to test and keep θ.

    Returns:
        ``(records, kept)``: one dict per round (``round`` since θ_0, the round metrics, and
        ``test_acc``/``test_loss`` at tested rounds), and ``{round: θ (CPU copy)}`` of the tested rounds.

    Raises:
        maskfed.engine.fedavg.TrainingDiverged: a client's loss or update is not finite.
    """
    at = set() if test_at is None else {int(r) for r in test_at} | {start_round + rounds}
    records, kept = [], {}
    if start_round in at:
        kept[start_round] = theta_P.cpu()
        acc, loss = fedavg.evaluate(model, theta_P, data.x_test, data.y_test)
        records.append({"round": start_round, "test_acc": acc, "test_loss": loss})

    def keep(done, theta, _records):
        if done in at:
            kept[done] = theta.cpu()

    loop = fedavg.run_fedavg(
        model, data, rounds=start_round + rounds, cohort_size=cfg.cohort_size, local_epochs=cfg.local_epochs,
        batch_size=cfg.batch_size, lr=cfg.lr, aggregation=cfg.aggregation, seed=cfg.seed,
        identical_client_seeds=cfg.identical_client_seeds, engine="sequential", precision=cfg.precision,
        eval_at={r - 1 for r in at}, start_round=start_round, theta_P=theta_P,
        # placeholders for the rounds before the branch: no earlier evaluation for the collapse rule to compare with
        records=[{"test_loss": float("nan")}] * start_round, on_state=keep, progress=progress)[start_round:]
    for rec in loop:
        records.append({k: v for k, v in rec.items() if k not in _LOOP_ONLY}
                       | ({"test_acc": rec["test_acc"], "test_loss": rec["test_loss"]} if rec["round"] in at else {}))
    return records, kept


# --------------------------------------------------------------------------- cached work

#: RunConfig fields the normalised images (:func:`maskfed.engine.runner.prepare_data`), the partition besides
#: them (:func:`maskfed.engine.runner.partition_for`) and the scratch model depend on.
IMAGE_FIELDS = ("dataset", "data_path", "train_subset", "test_subset", "synthetic_train", "synthetic_test", "device")
PARTITION_FIELDS = ("num_clients", "partition", "alpha", "seed", "dirichlet_convention")
MODEL_FIELDS = ("model", "gn_groups", "width", "device", "dataset", "data_path", "synthetic_train", "synthetic_test")
_DATA_CACHE: dict[tuple, fedavg.FedData] = {}
_MODEL_CACHE: dict[tuple, torch.nn.Module] = {}


def prepared_for(cfg: RunConfig) -> tuple[fedavg.FedData, torch.nn.Module]:
    """Prepared data and a scratch model for a config, once per process. One normalised copy of the images
    serves every protocol and α (another partition only redraws the shards), equal to
    :func:`maskfed.engine.runner.prepare_data`'s bit for bit."""
    ikey = tuple(getattr(cfg, f) for f in IMAGE_FIELDS)
    dkey, mkey = ikey + tuple(getattr(cfg, f) for f in PARTITION_FIELDS), tuple(getattr(cfg, f) for f in MODEL_FIELDS)
    if dkey not in _DATA_CACHE:
        same_images = next((d for k, d in _DATA_CACHE.items() if k[:len(ikey)] == ikey), None)
        if same_images is None:
            _DATA_CACHE.clear()  # one copy of the images per process
            _DATA_CACHE[dkey] = runner.prepare_data(cfg, runner.images_for(cfg), runner.resolve_device(cfg.device))
        else:
            parts = runner.partition_for(cfg, same_images.y_train.cpu())
            _DATA_CACHE[dkey] = dataclasses.replace(same_images, parts=parts)
    if mkey not in _MODEL_CACHE:
        _MODEL_CACHE[mkey] = build_model(cfg.model, num_classes=len(runner.images_for(cfg).classes),
                                         gn_groups=cfg.gn_groups, width=cfg.width).to(runner.resolve_device(cfg.device))
    return _DATA_CACHE[dkey], _MODEL_CACHE[mkey]


def initial_theta(cfg: RunConfig) -> torch.Tensor:
    """θ_0 of a run, flat [P]: the model :func:`maskfed.engine.runner.run` builds after ``torch.manual_seed(seed)``."""
    images = runner.images_for(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, num_classes=len(images.classes), gn_groups=cfg.gn_groups, width=cfg.width)
    return parameters_to_vector(model.parameters()).detach().clone()


def _key(blob: dict, cfg: RunConfig) -> str:
    return store.result_key(blob, STAGE_MODULES, runner.images_for(cfg))


def _provenance(cfg: RunConfig, key: str, t0: float) -> dict:
    return store.result_provenance(modules=STAGE_MODULES, code_field="stage_code_hash", device=cfg.device,
                                   images=runner.images_for(cfg), t0=t0, key=key, seed=cfg.seed)


@dataclass
class Ladder:
    """A finished checkpoint ladder: its folder, the tested rounds and the checkpoints."""

    path: Path
    accuracy: pd.DataFrame        # one row per tested round: round, test_acc, test_loss
    checkpoints: pd.DataFrame     # one row per stage: stage, round, test_acc, test_loss
    thetas_SxP: torch.Tensor      # θ at each stage, [S, P], float32

    def theta(self, stage: int) -> torch.Tensor:  # θ_s, flat [P] (stage 0: initialisation)
        return self.thetas_SxP[stage]


def ladder_path(cfg: RunConfig, spec: StageSpec, trajectory: Path | None = None) -> Path:
    """Folder of a ladder: ``results/stages/ladder-<label>-<key>`` (``trajectory``: the run folder its θ
    are read from, see :func:`build_ladder`)."""
    blob = {"ladder": cfg.key(), "rounds": spec.rounds, "targets": spec.target_accuracies,
            "stages": spec.stages, "every": spec.candidate_every}
    # each only when set, so that the keys of ladders without it are unchanged
    if spec.candidate_rounds is not None:
        blob["candidates"] = candidates(spec, cfg.rounds)
    if spec.extra_rounds is not None:
        blob["extra"] = list(spec.extra_rounds)
    if trajectory is not None:
        blob["trajectory"] = Path(trajectory).name
    return results_dir() / "stages" / f"ladder-{cfg.label()}-{_key(blob, cfg)}"


def load_ladder(path: Path) -> Ladder:
    """Read a finished ladder folder."""
    return Ladder(path, pd.read_csv(path / "accuracy.csv"), pd.read_csv(path / "checkpoints.csv"),
                  torch.load(path / "thetas.pt", weights_only=True))


def ladder_snapshots(profile: Profile, configs: list[RunConfig],
                     spec: StageSpec | None = None) -> dict[RunConfig, int | tuple[int, ...]]:
    """``{ladder run: its candidate rounds}`` for each seed whose stage-ladder run (:func:`ladder_config`)
    is among ``configs``: the ``keep_every`` a sweep passes to :func:`maskfed.engine.runner.run_many`, so that
    :func:`build_ladder` reads those θ instead of training again (``spec`` None: the profile's defaults)."""
    t1, t2 = profile.table1, profile.table2
    keep = _keep(spec or make_spec(profile.name))
    out = {}
    for seed in profile.seeds:
        try:  # ladder_config's run, built directly: also when flags set its protocol (no Table I grid then)
            ref = profile.run(seed, batch_size=t2.batch_size, local_epochs=t2.local_epochs,
                              alpha=t1.alpha, partition="dirichlet")
        except ConfigError:  # e.g. an IID or identical partition asked for: not the ladder's run
            return {}
        if ref in configs:
            out[ref] = keep
    return out


#: Settings that say where a run ran, not what it computed (a folder of another place still holds ``cfg``).
WHERE_IT_RAN = {"data_path": None, "device": "auto", "checkpoint_every": 0}


def holds(folder: Path, cfg: RunConfig) -> bool:
    """Whether the run folder ``folder`` (its ``config.json``, else FileNotFoundError) holds ``cfg``, up to
    :data:`WHERE_IT_RAN`."""
    held = RunConfig(**json.loads((Path(folder) / "config.json").read_text()))
    return held.model_copy(update=WHERE_IT_RAN) == cfg.model_copy(update=WHERE_IT_RAN)


def _kept(cfg: RunConfig, trajectory: Path | None, wanted: list[int]) -> tuple[str | None, dict[int, torch.Tensor]]:
    """(run folder name, θ snapshots) of the finished run of ``cfg`` (``{}`` without one), or of the folder
    ``trajectory``, checked against ``cfg`` and ``wanted`` (ValueError if it does not match)."""
    if trajectory is None:
        found = runner.find_run(cfg)
        return (None, {}) if found is None else (found.path.name, runner.load_thetas(found.path) or {})
    folder = Path(trajectory)
    if not holds(folder, cfg):
        held = RunConfig(**json.loads((folder / "config.json").read_text()))
        raise ValueError(f"trajectory {folder} holds run {held.label()}, not {cfg.label()}")
    thetas = runner.load_thetas(folder) or {}
    missing = sorted(set(wanted) - set(thetas))
    if missing:
        raise ValueError(f"trajectory {folder} keeps no θ at rounds {missing}; it has {sorted(thetas)}")
    return folder.name, thetas


def build_ladder(cfg: RunConfig, spec: StageSpec, *, progress: bool = True,
                 trajectory: Path | None = None) -> Ladder:
    """The reference trajectory of ``cfg`` with θ kept at the stages (or its cached folder).

    θ comes from the finished run's snapshots (:func:`ladder_snapshots`, or ``trajectory``'s ``thetas.pt``)
    or is retrained by :func:`fedavg_from`: the same bits on one machine; ``provenance.json`` says which.

    Raises:
        ConfigError: explicit rounds the trajectory does not test (:func:`check_rounds`).
        ValueError: a ``trajectory`` folder of another configuration or without θ at every candidate round.
    """
    path = ladder_path(cfg, spec, trajectory)
    if store.is_finished(path):
        return load_ladder(path)
    check_rounds(spec, cfg.rounds)
    t0 = time.perf_counter()
    data, model = prepared_for(cfg)
    wanted = candidates(spec, cfg.rounds)
    name, thetas = _kept(cfg, trajectory, wanted)
    with cohort_mod.precision_context(cfg.precision, data.x_train.device) as precision:
        if set(wanted) <= set(thetas):
            source = f"θ kept by run {name}" + ("" if trajectory is None else f" (read from {Path(trajectory).parent.name}/)")
            kept = {r: thetas[r] for r in wanted}
            records = [{"round": r, **dict(zip(("test_acc", "test_loss"), fedavg.evaluate(
                model, kept[r].to(data.x_train.device), data.x_test, data.y_test)))} for r in wanted]
        else:
            source = "trained here"
            theta0 = initial_theta(cfg).to(data.x_train.device)
            bar = tqdm(total=cfg.rounds, desc=f"ladder {cfg.label()}", leave=False, disable=not progress,
                       mininterval=2.0)
            records, kept = fedavg_from(model, data, theta0, cfg, start_round=0, rounds=cfg.rounds,
                                        test_at=wanted, progress=bar)
            bar.close()
    acc = pd.DataFrame([r for r in records if "test_acc" in r])[["round", "test_acc", "test_loss"]]
    chosen = pick_rounds(acc.set_index("round")["test_acc"], spec)
    ckpts = acc.set_index("round").loc[chosen].reset_index()
    ckpts.insert(0, "stage", range(len(ckpts)))
    thetas = torch.stack([kept[r] for r in chosen]).float()
    buf = io.BytesIO()
    torch.save(thetas, buf)
    checkpoint.write_folder(path, {
        "accuracy.csv": acc.to_csv(index=False), "checkpoints.csv": ckpts.to_csv(index=False),
        "thetas.pt": buf.getvalue(), "config.json": json.dumps(cfg.model_dump(mode="json"), indent=2),
        "spec.json": spec.model_dump_json(indent=2),
        "provenance.json": json.dumps({**_provenance(cfg, path.name, t0), "trajectory": source,
                                       "precision_flags": precision}, indent=2)}, "the ladder's folder")
    return load_ladder(path)


def measure_path(cfg: RunConfig, ladder: Ladder | Path, stage: int, spec: StageSpec) -> Path:
    """Folder of one (stage, protocol) measurement: ``results/stages/measure-<label>-st<s>-<key>``
    (``ladder``: the ladder or its folder, which need not exist yet)."""
    name = ladder.path.name if isinstance(ladder, Ladder) else Path(ladder).name
    blob = {"cfg": cfg.key(), "ladder": name, "stage": stage, "pool": spec.pool_size,
            "cohorts": spec.num_cohorts, "branch": spec.branch_rounds}
    return results_dir() / "stages" / f"measure-{cfg.label()}-st{stage}-{_key(blob, cfg)}"


def measure(cfg: RunConfig, ladder_dir: str, stage: int, spec: StageSpec, *, at_init: RunConfig | None = None) -> Path:
    """Measure protocol ``cfg`` at θ_stage of a ladder (or reuse the folder); returns the folder.

    Each pool client trains once from θ_s with the stage round's shuffling seed; ``cohorts.csv`` holds
    :func:`cohort_table`; ``branch.csv`` M = ``spec.branch_rounds`` FedAvg rounds. ``at_init``: the ladder's
    config, so stage 0 needs no ladder.

    Raises:
        ValueError: ``at_init`` with a stage other than 0.
    """
    path = measure_path(cfg, Path(ladder_dir), stage, spec)
    if store.is_finished(path):
        return path
    t0 = time.perf_counter()
    data, model = prepared_for(cfg)
    if at_init is not None:
        if stage != 0:
            raise ValueError(f"at_init measures stage 0 (θ_0) only; got stage = {stage}")
        theta, round_s = initial_theta(at_init).to(data.x_train.device), 0
    else:
        ladder = load_ladder(Path(ladder_dir))
        theta = ladder.theta(stage).to(data.x_train.device)
        round_s = int(ladder.checkpoints["round"].iloc[stage])
    pool, cohorts = pool_and_cohorts(len(data.parts), spec.pool_size, cfg.cohort_size, spec.num_cohorts, cfg.seed)
    seeds = [fedavg.client_seed(cfg.seed, round_s, 0 if cfg.identical_client_seeds else int(k)) for k in pool]

    def update(th, k, gen):
        idx = torch.as_tensor(data.parts[k], device=data.x_train.device)
        return cohort_mod.client_update(model, th, data.x_train[idx], data.y_train[idx], lr=cfg.lr,
                                        batch_size=cfg.batch_size, local_epochs=cfg.local_epochs, generator=gen,
                                        precision=cfg.precision)[0]

    with cohort_mod.precision_context(cfg.precision, data.x_train.device) as precision:
        deltas = pool_updates(update, theta, pool, seeds)
        table = cohort_table(deltas, [len(data.parts[k]) for k in pool], cohorts)
        files = {"cohorts.csv": table.to_csv(index=False), "pool.json": json.dumps({"pool": pool.tolist()}),
                 "config.json": json.dumps(cfg.model_dump(mode="json"), indent=2)}
        if spec.branch_rounds:
            branch, _ = fedavg_from(model, data, theta, cfg, start_round=round_s, rounds=spec.branch_rounds)
            files["branch.csv"] = pd.DataFrame(branch).to_csv(index=False)
    files["provenance.json"] = json.dumps({**_provenance(cfg, path.name, t0), "stage": stage, "round": round_s,
                                           "ladder": Path(ladder_dir).name, "precision_flags": precision}, indent=2)
    checkpoint.write_folder(path, files, "the stage measurement's folder")
    return path


# --------------------------------------------------------------------------- the study

@dataclass
class StageStudy:
    """Everything the chapter reads: the ladders (one per seed), one summary row per (seed,
    experiment, stage, protocol) and the branches (empty without them)."""

    ladders: dict[int, Ladder]  # seed -> its trajectory's ladder
    table: pd.DataFrame      # seed, experiment, stage, round, stage_acc, batch_size, local_epochs, alpha, summaries
    branches: pd.DataFrame   # seed, experiment, stage, batch_size, local_epochs, alpha, round, recovery_unweighted, ...


def ladder_config(profile: Profile, seed: int | None = None, alpha: float | None = None) -> RunConfig:
    """The reference trajectory: Table I's run with Table II's protocol (default bs 32, τ 2, α 100); with ``alpha``, Table II's run at that α.

    Raises:
        ConfigError: Table I has no run with Table II's protocol, ``seed`` is not a profile seed, or
            ``alpha`` is not one of Table II's.
    """
    t2 = profile.table2
    seed = profile.seeds[0] if seed is None else seed
    if seed not in profile.seeds:
        raise ConfigError(f"seed = {seed} is not one of the profile's seeds {profile.seeds}")
    if alpha is not None and alpha != profile.table1.alpha:
        for c in profile.experiment_configs("table2"):
            if c.seed == seed and c.alpha == alpha:
                return c
        raise ConfigError(f"alpha = {alpha:g} is not one of Table II's alphas {t2.alphas}")
    for c in profile.experiment_configs("table1"):
        if c.seed == seed and c.batch_size == t2.batch_size and c.local_epochs == t2.local_epochs:
            return c
    raise ConfigError(f"the stage ladder needs Table I to include Table II's protocol (batch_size = "
                      f"{t2.batch_size!r}, local_epochs = {t2.local_epochs}); table1 has batch_sizes "
                      f"{profile.table1.batch_sizes} and local_epochs {profile.table1.local_epochs}")


#: The experiments whose protocols a stage study measures at every stage.
EXPERIMENTS = ("table1", "table2")


def study_configs(profile: Profile, seed: int | None = None,
                  experiments: tuple[str, ...] = EXPERIMENTS) -> dict[str, list[RunConfig]]:
    """The protocols measured at every stage: Table I's nine and Table II's α (or those of ``experiments``;
    ConfigError for one outside :data:`EXPERIMENTS`), at ``seed`` (None: the profile's first seed)."""
    bad = [e for e in experiments if e not in EXPERIMENTS]
    if bad or not experiments:
        raise ConfigError(f"experiments must be a non-empty subset of {list(EXPERIMENTS)}; got {list(experiments)}")
    seed = profile.seeds[0] if seed is None else seed
    return {e: [c for c in profile.experiment_configs(e) if c.seed == seed] for e in experiments}


def run_study(profile: Profile, spec: StageSpec, *, workers: int | None = None, progress: bool = True,
              seeds: list[int] | None = None, trajectories: dict[int, Path] | None = None,
              ladder_alpha: float | None = None, experiments: tuple[str, ...] = EXPERIMENTS) -> StageStudy:
    """Build the ladders (one per seed), then measure every protocol at every stage (cached), in worker processes.

    Raises:
        ConfigError: before any training, a pool larger than K, K_c larger than the pool, Table I without
            Table II's protocol, a seed not the profile's, or a run that cannot work with its data.
        FileNotFoundError, DataUnavailableError, DataReadError: the data cannot be found or read.
        ValueError: a trajectory folder of another run or without θ at the candidate rounds.
    """
    seeds = [profile.seeds[0]] if seeds is None else list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct seeds of the profile; got {seeds}")
    trajectories = trajectories or {}
    refs = {s: ladder_config(profile, s, ladder_alpha) for s in seeds}
    cfgs = {s: study_configs(profile, s, experiments) for s in seeds}
    ref0 = refs[seeds[0]]
    try:
        pool_and_cohorts(ref0.num_clients, spec.pool_size, ref0.cohort_size, 1, ref0.seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    from maskfed.engine.preflight import check_runs, check_writable  # data, subsets, partitions, device: before training

    check_runs([*refs.values(), *(c for s in seeds for cs in cfgs[s].values() for c in cs)])
    check_rounds(spec, ref0.rounds)
    check_writable(results_dir() / "stages", "MASKFED_RESULTS_DIR")
    threads = torch.get_num_threads()
    if runner.resolve_device(ref0.device).type == "cpu":
        # several times faster than two contended threads for the small CPU models (docs/measurements.md)
        torch.set_num_threads(1)
    every = {s: list(dict.fromkeys(c for cs in cfgs[s].values() for c in cs)) for s in seeds}
    lpaths = {s: ladder_path(refs[s], spec, trajectories.get(s)) for s in seeds}

    def todo(s: int, stages) -> list[tuple[RunConfig, int]]:
        ref = refs[s]
        tasks = [(c, st) for st in stages for c in every[s]
                 if not store.is_finished(measure_path(c, lpaths[s], st, spec))]
        return sorted(tasks, key=lambda t: (t[0].alpha != ref.alpha, t[0].alpha, -t[0].local_epochs))

    def finished(s: int) -> bool:
        return store.is_finished(lpaths[s]) and not todo(s, range(len(load_ladder(lpaths[s]).checkpoints)))

    workers = workers or profile.workers
    ladders: dict[int, Ladder] = {}
    try:
        if workers > 1 and not all(finished(s) for s in seeds):
            # stage 0 is θ_0 (round 0 is always a ladder stage unless explicit rounds leave it out), so the
            # workers measure it while this process builds the ladders
            early = spec.rounds is None or 0 in spec.rounds
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=runner.worker_init,
                                     initargs=(os.getpid(),)) as pool:
                try:
                    futs = [pool.submit(measure, c, str(lpaths[s]), 0, spec, at_init=refs[s])
                            for s in seeds for c, _ in (todo(s, [0]) if early else [])]
                    for s in seeds:
                        ladders[s] = build_ladder(refs[s], spec, progress=progress, trajectory=trajectories.get(s))
                        futs += [pool.submit(measure, c, str(lpaths[s]), st, spec)
                                 for c, st in todo(s, range(1 if early else 0, len(ladders[s].checkpoints)))]
                    for fut in tqdm(as_completed(futs), total=len(futs), desc="stage measurements",
                                    disable=not progress):
                        fut.result()
                except KeyboardInterrupt:  # also SIGTERM / SIGHUP: end the workers at once, as runner.run_many does
                    runner.stop_workers(pool)
                    raise
        else:
            for s in seeds:
                ladders[s] = build_ladder(refs[s], spec, progress=progress, trajectory=trajectories.get(s))
                for c, st in tqdm(todo(s, range(len(ladders[s].checkpoints))), desc="stage measurements",
                                  disable=not progress):
                    measure(c, str(lpaths[s]), st, spec)
    finally:
        torch.set_num_threads(threads)
    rows, branches = [], []
    for s in seeds:
        ladder = ladders[s]
        # the checkpoints spec.extra_rounds added (not also placed by accuracy): verdict_by_range splits without them
        placed = set(pick_rounds(ladder.accuracy.set_index("round")["test_acc"], spec.model_copy(update={"extra_rounds": None})))
        for e, cs in cfgs[s].items():
            for c in cs:
                for st, ck in ladder.checkpoints.iterrows():
                    path = measure_path(c, ladder, st, spec)
                    key = {"seed": s, "experiment": e, "stage": st, "round": int(ck["round"]),
                           "stage_acc": float(ck["test_acc"]), "batch_size": str(c.batch_size),
                           "local_epochs": c.local_epochs, "alpha": c.alpha,
                           **({} if spec.extra_rounds is None else {"extra": int(ck["round"]) not in placed})}
                    rows.append({**key, **summarise_cohorts(pd.read_csv(path / "cohorts.csv"))})
                    if (path / "branch.csv").exists():
                        b = pd.read_csv(path / "branch.csv")
                        branches.append(b.assign(steps=b["round"] - key["round"], stage_round=key["round"],
                                                 **{k: v for k, v in key.items() if k != "round"}))
    return StageStudy(ladders, pd.DataFrame(rows), pd.concat(branches) if branches else pd.DataFrame())


def verdict_by_range(table: pd.DataFrame, *, value: str = "recovery_unweighted",
                     threshold: float = EXPLAINS, split_acc: float | None = None) -> dict[str, dict]:
    """The stage-or-sampling verdict in the early and the late half of training, across seeds. Ours.

    Split at the middle stage (or, with an ``extra`` column, on the other checkpoints; an added one is late from
    its seed's first late round), or at ``split_acc`` (test accuracy fraction). Within each half,
    :func:`variance_shares` over every (seed, stage, protocol) row; a factor must explain ``threshold``
    (:data:`EXPLAINS`) with effect ≥ :data:`EFFECT_MIN`.

    Returns:
        ``{"early": {"verdict", "stage", "sampling", "protocol", "seed" (of the stage share, between seeds),
        "sampling_effect", "stage_effect", "stages", "acc_min", "acc_max"}, "late": {...}}``.
    """
    t = table.reset_index(drop=True)
    if split_acc is not None:
        late = t["stage_acc"] >= split_acc
    elif "extra" in t:
        late = pd.Series(False, index=t.index)
        for _, g in t.groupby("seed"):
            placed = sorted(g.loc[~g["extra"].astype(bool), "round"].unique())
            late[g.index] = g["round"] >= placed[math.ceil(len(placed) / 2)] if len(placed) > 1 else False
    else:
        late = t["stage"] >= math.ceil((int(t["stage"].max()) + 1) / 2)
    out = {}
    for name, part in (("early", t[~late]), ("late", t[late])):
        if part.empty:
            continue
        grid = part.assign(stage=part["seed"].astype(str) + "/" + part["stage"].astype(str))
        shares = variance_shares(grid, value=value) | effect_sizes(grid, value=value)
        out[name] = {"verdict": verdict(shares, threshold), **shares,
                     "stages": sorted(part["stage"].unique().tolist()),
                     "acc_min": float(part["stage_acc"].min()), "acc_max": float(part["stage_acc"].max())}
    return out


def cross_ratios(cross: pd.DataFrame) -> pd.DataFrame:
    """The α-cross as Table II's ratio: 1/Δ_S at the smallest α over the largest α, at the same θ (median over seeds).

    Returns:
        Index (``trajectory_alpha``, ``stage``); columns ``acc`` (median test accuracy), ``unweighted`` and
        ``weighted`` (median ratios), ``seeds`` (seeds that gave a ratio).

    Raises:
        ValueError: a missing column in ``cross`` or fewer than two α.
    """
    need = {"trajectory_alpha", "seed", "stage", "stage_acc", "alpha", "recovery_unweighted", "recovery_weighted"}
    if need - set(cross.columns):
        raise ValueError(f"cross lacks the columns {sorted(need - set(cross.columns))}")
    lo, hi = cross["alpha"].min(), cross["alpha"].max()
    if lo == hi:
        raise ValueError(f"cross must hold two or more α; got only {lo:g}")
    keys = ["trajectory_alpha", "stage", "seed"]
    at = cross.set_index(keys + ["alpha"])[["recovery_unweighted", "recovery_weighted"]]
    ratio = (at.xs(lo, level="alpha") / at.xs(hi, level="alpha")).dropna()
    acc = cross.drop_duplicates(keys).set_index(keys)["stage_acc"]
    out = ratio.groupby(level=["trajectory_alpha", "stage"]).median()
    out.columns = ["unweighted", "weighted"]
    out.insert(0, "acc", acc.groupby(level=["trajectory_alpha", "stage"]).median().reindex(out.index))
    out["seeds"] = ratio.groupby(level=["trajectory_alpha", "stage"]).size()
    return out


def parameter_ratio(cfg: RunConfig, other_model: str) -> float:
    """Parameters of ``other_model`` over those of ``cfg``'s model (same classes and GroupNorm groups)."""
    from maskfed.engine.models import num_parameters

    def count(name: str) -> int:
        return num_parameters(build_model(name, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width))

    return count(other_model) / count(cfg.model)


# --------------------------------------------------------------------------- matched stage: the claims at the same θ

def _tables(g: pd.DataFrame, steps: pd.Series) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """Table I (with ``T_mean`` from ``steps``) and Table II of one checkpoint's rows (None where it has none),
    medians over their seeds."""
    t1, t2 = (g[g["experiment"] == e] for e in EXPERIMENTS)
    if len(t1):
        t1 = t1.groupby(["batch_size", "local_epochs"], sort=False)[list(COHORT_METRICS)].median()
        t1["T_mean"] = steps.reindex(t1.index).to_numpy()
    return (t1 if len(t1) else None,
            t2.groupby("alpha", sort=False)[list(COHORT_METRICS)].median() if len(t2) else None)


def matched_votes(table: pd.DataFrame, steps: pd.Series, claim_list: tuple | None = None, *,
                  cross: pd.DataFrame | None = None, main_alpha: float = 100.0,
                  min_acc: float | None = None) -> pd.DataFrame:
    """Each claim's vote at every matched-stage checkpoint (after θ_0), plus α-cross checkpoints for Table II claims.

    Vote: :func:`maskfed.analysis.claims.checkpoint_vote` on the median over seeds; weight 1 at or above
    ``min_acc`` (fraction), else 0 (shown, not counted). Claims in
    :data:`maskfed.analysis.claims.NOT_AT_MATCHED_STAGE` are left out.

    Returns:
        One row per (claim, checkpoint) the claim can be judged at: ``claim``, ``trajectory_alpha``, ``stage``,
        ``acc`` (median over seeds), ``weight``, ``strict`` (the criterion on the median alone) and ``vote``.
    """
    from maskfed.analysis import claims

    judged = [c for c in (claims.CLAIMS if claim_list is None else claim_list)
              if c.key not in claims.NOT_AT_MATCHED_STAGE]
    steps = steps.copy()
    steps.index = pd.MultiIndex.from_arrays([steps.index.get_level_values(0).astype(str),
                                             steps.index.get_level_values(1)], names=["batch_size", "local_epochs"])
    parts = [(float(main_alpha), table)]
    if cross is not None and len(cross):  # an α-cross trajectory: Table II only
        parts += [(float(a), c.assign(experiment="table2"))
                  for a, c in cross[cross["trajectory_alpha"] != main_alpha].groupby("trajectory_alpha")]
    rows = []
    for traj, t in parts:
        t = t.assign(batch_size=t["batch_size"].astype(str))
        for st, g in t[t["stage"] > 0].groupby("stage"):
            median = claims.Evidence("median", *_tables(g, steps))
            seeds = [claims.Evidence(f"seed {i}", *_tables(gs, steps)) for i, (_, gs) in enumerate(g.groupby("seed"))]
            acc = float(g.drop_duplicates("seed")["stage_acc"].median())
            for c in judged:
                strict = c.evaluate(median).verdict
                if strict == "not measured here":
                    continue
                rows.append({"claim": c.key, "trajectory_alpha": traj, "stage": int(st), "acc": acc,
                             "weight": 1.0 if min_acc is None or acc >= min_acc else 0.0, "strict": strict,
                             "vote": claims.checkpoint_vote(c, median, seeds)})
    return pd.DataFrame(rows, columns=["claim", "trajectory_alpha", "stage", "acc", "weight", "strict", "vote"])


def matched_verdicts(votes: pd.DataFrame, claim_list: tuple | None = None) -> pd.DataFrame:
    """Each claim's matched-stage verdict over the weighted votes of :func:`matched_votes`
    (:func:`maskfed.analysis.claims.over_checkpoints`) for ``claim_list`` (default: all; one without votes is "not
    measured here"): index ``claim``; ``verdict``, ``n`` (checkpoints counted), ``n_holds``, ``n_partly``,
    ``n_tolerance``, ``n_fail``, ``fail_share``, ``weight``, ``n_before`` (shown, not counted: below the floor)."""
    from maskfed.analysis import claims

    rows = []
    for c in claims.CLAIMS if claim_list is None else claim_list:
        v = votes[votes["claim"] == c.key]
        rows.append({"claim": c.key, **claims.over_checkpoints(v["vote"], v["weight"]),
                     "n_before": int((v["weight"] == 0).sum())})
    return pd.DataFrame(rows).set_index("claim")
