"""Run FedAvg configurations, store each run in its own folder, reuse finished ones.

A run folder ``results/runs/<label>-<key>`` holds ``metrics.csv`` (one row per round),
``config.json`` (the resolved :class:`~maskfed.engine.config.RunConfig`), ``partition.json``
(shard sizes), ``provenance.json`` (seed, git state, code hash, packages, device, data source,
wall time) and, with ``keep_every``, ``thetas.pt`` (:func:`load_thetas`). It is renamed into place
when the run ends, so an existing folder is complete. The key (:func:`identify`) hashes the config,
the run code, the data fingerprint and the resolved device type and engine.

Checkpoints live in the hidden partial folder (:mod:`maskfed.engine.checkpoint`); the same call
after a kill resumes from it. Ctrl-C during :func:`run_many` (or SIGTERM / SIGHUP inside
:func:`stop_on_signals`) ends the workers and raises :class:`Interrupted`. A damaged finished folder
raises :class:`DamagedRun`; one whose ``config.json``, provenance run key and name disagree (another
run's file copied in) :class:`RunMismatch`, and is never reused; a full disk
:class:`~maskfed.engine.checkpoint.WriteFailed`.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from tqdm import tqdm

from maskfed import provenance
from maskfed.engine import checkpoint, cohort, data as data_mod, determinism, fedavg, partition
from maskfed.engine.config import RunConfig
from maskfed.engine.models import build_model, num_parameters
from maskfed.paths import results_dir


@dataclass
class RunResult:
    """A finished run: its config, folder, per-round metrics and provenance."""

    config: RunConfig
    path: Path
    metrics: pd.DataFrame
    provenance: dict


@lru_cache(maxsize=4)
def load_images(dataset: str, data_path: str | None, synthetic_train: int, synthetic_test: int) -> data_mod.ImageData:
    """The image data a config asks for, loaded once per process (uint8 tensors); ``"cifar10"``
    refuses a source with other classes (:func:`maskfed.engine.data.load_dataset`)."""
    if dataset == "synthetic":
        return data_mod.synthetic_image_data(n_train=synthetic_train, n_test=synthetic_test, seed=0)
    return data_mod.load_dataset(dataset, data_path)


def images_for(cfg: RunConfig) -> data_mod.ImageData:
    """The (cached) image data a run configuration uses.

    Raises:
        ValueError: as :func:`maskfed.engine.data.load_dataset`, or an image size the model cannot
            take (``small_cnn_gn`` needs 32x32).
    """
    images = load_images(cfg.dataset, cfg.data_path, cfg.synthetic_train, cfg.synthetic_test)
    size = tuple(images.x_train.shape[-2:])
    if cfg.model == "small_cnn_gn" and size != (32, 32):
        raise ValueError(f"model = 'small_cnn_gn' takes 32x32 images, but data_path={cfg.data_path!r} holds "
                         f"{size[1]}x{size[0]} images; resize them to 32x32 or use model='resnet18_gn'")
    return images


#: The data fingerprint's kind in new provenance (``data_fingerprint_kind``): every byte hashed.
FINGERPRINT_KIND = data_mod.FINGERPRINT_KIND
#: The kind of every provenance without ``data_fingerprint_kind`` (older archived runs): every 97th image.
SAMPLED_KIND = data_mod.SAMPLED_KIND


def data_fingerprint(images: data_mod.ImageData) -> str:
    """Content hash of the data, 16 hex digits (kind :data:`FINGERPRINT_KIND`,
    :func:`maskfed.engine.data.content_sha256`). Independent of where the data lies; a different
    copy of CIFAR-10 (JPEG vs original) gets a new one.
    """
    return data_mod.content_sha256(images)[:16]


def data_fingerprint_sampled(images: data_mod.ImageData) -> str:
    """The older fingerprint (kind :data:`SAMPLED_KIND`, :func:`maskfed.engine.data.sampled_sha256`),
    16 hex digits, to compare with runs archived with it."""
    return data_mod.sampled_sha256(images)[:16]


_BY_KIND = {FINGERPRINT_KIND: data_fingerprint, SAMPLED_KIND: data_fingerprint_sampled}


def fingerprint_of_kind(images: data_mod.ImageData, kind: str) -> str:
    """``images``' fingerprint of ``kind`` (:data:`FINGERPRINT_KIND` or :data:`SAMPLED_KIND`), to
    compare with a provenance's recorded one (:func:`recorded_fingerprint`).

    Raises:
        ValueError: an unknown kind.
    """
    if kind not in _BY_KIND:
        raise ValueError(f"unknown data fingerprint kind {kind!r}; known: {sorted(_BY_KIND)}")
    return _BY_KIND[kind](images)


def recorded_fingerprint(prov: dict) -> tuple[str, str]:
    """(kind, value) of the data fingerprint a provenance records; without a
    ``data_fingerprint_kind`` field the kind is :data:`SAMPLED_KIND`.

    Raises:
        KeyError: the provenance records no ``data_fingerprint``.
    """
    return prov.get("data_fingerprint_kind", SAMPLED_KIND), prov["data_fingerprint"]


def fingerprint_fields(images: data_mod.ImageData) -> dict[str, str]:
    """The provenance fields naming the data: ``data_fingerprint`` and ``data_fingerprint_kind``."""
    return {"data_fingerprint": data_fingerprint(images), "data_fingerprint_kind": FINGERPRINT_KIND}


@dataclass(frozen=True)
class RunIdentity:
    """Who a run of a configuration is on this machine, resolved once (:func:`identify`)."""

    images: data_mod.ImageData  # the data it trains and tests on (:func:`images_for`)
    device: torch.device        # ``device`` resolved (:func:`resolve_device`)
    engine: str                 # ``engine`` resolved (:func:`maskfed.engine.cohort.resolve_engine`)
    fingerprint: str            # :func:`data_fingerprint` of ``images``
    key: str                    # cache key, 16 hex digits
    path: Path                  # the run's folder, ``results_dir()/runs/<label>-<key>``

    def fingerprint_fields(self) -> dict[str, str]:
        """The provenance fields naming the data: ``data_fingerprint`` and ``data_fingerprint_kind``."""
        return {"data_fingerprint": self.fingerprint, "data_fingerprint_kind": FINGERPRINT_KIND}


def identify(cfg: RunConfig) -> RunIdentity:
    """A run's images, device, engine, data fingerprint, cache key and folder, each resolved once.

    The key (16 hex digits) hashes :meth:`RunConfig.key`, the run code
    (:func:`maskfed.provenance.code_hash`), the data fingerprint and the resolved device type and
    engine (a CPU run is never reused as a GPU one). Archived runs are matched by configuration,
    not key (:mod:`maskfed.studies.archive`).

    Raises:
        ValueError: ``device = 'cuda'`` on a machine without CUDA (:func:`resolve_device`), or data the
            model cannot take (:func:`images_for`).
    """
    images = images_for(cfg)
    device = resolve_device(cfg.device)
    engine = cohort.resolve_engine(cfg.engine, device)
    fingerprint = data_fingerprint(images)
    blob = json.dumps({"config": cfg.key(), "code": provenance.code_hash(), "data": fingerprint,
                       "device_type": device.type, "engine": engine}, sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return RunIdentity(images, device, engine, fingerprint, key, results_dir() / "runs" / f"{cfg.label()}-{key}")


#: The files of a finished run folder (:func:`run` writes them; :func:`load_run` checks them).
RUN_FILES = ("metrics.csv", "config.json", "partition.json", "provenance.json")


class DamagedRun(ValueError):
    """A finished run folder with a file missing or unparsable, or metrics whose columns or rounds
    are not those its config implies. ``str()`` names ``path``, ``reason`` and the remedy."""

    def __init__(self, path: Path | str, reason: str):
        super().__init__(str(path), reason)
        self.path, self.reason = Path(path), reason

    def __str__(self) -> str:
        return (f"run folder {self.path} is damaged: {self.reason}. To recompute it, delete the folder "
                f"(rm -r '{self.path}') and run the same command again, or rerun with --force "
                f"(maskfed run or maskfed sweep; recomputes every run of the command)")


class RunMismatch(DamagedRun):
    """A run folder whose ``config.json``, provenance (its ``run_key`` and ``config_key``) and folder name
    do not agree, say another run's ``config.json`` copied in: it is never reused (:func:`check_identity`).
    ``disagreements``: one entry per part that disagrees; ``str()`` names the folder, each of them and the
    remedy."""

    def __init__(self, path: Path | str, disagreements: list[str]):
        super().__init__(path, "; ".join(disagreements))
        self.disagreements = list(disagreements)

    def __str__(self) -> str:
        return (f"run folder {self.path} is not the run its name says, so it is not reused: {self.reason}. To "
                f"recompute it, delete the folder (rm -r '{self.path}') and run the same command again, or rerun "
                "with --force (maskfed run or maskfed sweep; recomputes every run of the command)")


def check_identity(result: RunResult, cfg: RunConfig | None = None, key: str | None = None) -> None:
    """Check that a run folder is the run it is used as: its ``config.json`` is ``cfg`` (same
    :meth:`RunConfig.key`, and the ``config_key`` its provenance recorded, where recorded), its
    provenance's ``run_key`` is ``key`` (the :func:`identify` key), and its folder name is
    ``<config.json's label>-<run_key>``. Reads the files already loaded; computes nothing.

    Args:
        result: the folder as read (:func:`load_run`).
        cfg: the configuration it is used for; None: only the folder's own files and name are compared.
        key: the run key it is used under; None: not compared.

    Raises:
        RunMismatch: naming each part that disagrees.
    """
    stored, prov, path = result.config, result.provenance, result.path
    run_key = prov.get("run_key")
    wrong = []
    if cfg is not None and stored.key() != cfg.key():
        wrong.append(f"config.json is the run {stored.label()} with config key {stored.key()}, not the "
                     f"{cfg.label()} asked for (config key {cfg.key()})")
    if "config_key" in prov and prov["config_key"] != stored.key():
        wrong.append(f"config.json's config key is {stored.key()}, but provenance.json records {prov['config_key']}")
    if key is not None and run_key != key:
        wrong.append(f"provenance.json's run key is {run_key}, not {key}")
    if cfg is not None or key is not None:  # the folder is used by its name: the name must be its files'
        if path.name != f"{stored.label()}-{run_key}":
            wrong.append(f"the folder name {path.name} is not config.json's label and provenance.json's run key "
                         f"({stored.label()}-{run_key})")
    if wrong:
        raise RunMismatch(path, wrong)


def expected_columns(cfg: RunConfig) -> list[str]:
    """The columns of a run's ``metrics.csv`` that ``cfg`` implies, in the order
    :func:`maskfed.engine.fedavg.run_fedavg` writes them (a test keeps the two in step)."""
    cols = ["round", "cohort", "n_k", "T_mean", "T_min", "T_max", "train_loss", "recovery_unweighted",
            "recovery_weighted", "mean_update_sqnorm", "update_spread"]
    if cfg.cohort_size >= 2:
        cols += ["A", "B", "sigma2_hat", "mu2_hat"]
    if cfg.hessian_every:
        cols += ["recovery_hessian_unweighted", "recovery_hessian_weighted"]
    if cfg.sharpness_iters:
        cols += ["sharpness_top_eig", "sharpness_trace", "sharpness_trace_se"]
    return cols + ["test_acc", "test_loss", "wall_s"]


def load_run(path: Path) -> RunResult:
    """Read a finished run folder, checking that it is whole and that its ``config.json`` is the
    configuration its provenance recorded (``config_key``, in runs made since issue 42;
    :func:`check_identity` without a configuration).

    Raises:
        DamagedRun: a file of :data:`RUN_FILES` missing, JSON or a config that does not parse, or
            metrics that do not parse, lack a column of :func:`expected_columns` or rounds 1..``rounds``.
        RunMismatch: ``config.json`` is not the configuration the provenance recorded.
    """
    result = _read_run(path)
    check_identity(result)
    return result


def _read_run(path: Path) -> RunResult:
    """:func:`load_run` without the identity check (the caller makes its own)."""
    missing = [f for f in RUN_FILES if not (path / f).is_file()]
    if missing:
        raise DamagedRun(path, f"{', '.join(missing)} missing")
    parsed = {}
    for name in ("config.json", "partition.json", "provenance.json"):
        try:
            parsed[name] = json.loads((path / name).read_text())
        except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError, a cut-off or binary file
            raise DamagedRun(path, f"{name} is not valid JSON ({exc})") from None
        if not isinstance(parsed[name], dict):
            raise DamagedRun(path, f"{name} holds {type(parsed[name]).__name__}, not a JSON object")
    try:
        cfg = RunConfig(**parsed["config.json"])
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise DamagedRun(path, f"config.json is not a run configuration this code can read "
                               f"({str(exc).splitlines()[0]})") from None
    try:
        metrics = pd.read_csv(path / "metrics.csv")
    except (OSError, ValueError) as exc:  # ValueError covers pandas' EmptyDataError and ParserError
        raise DamagedRun(path, f"metrics.csv cannot be read ({type(exc).__name__}: {exc})") from None
    absent = [c for c in expected_columns(cfg) if c not in metrics.columns]
    if absent:
        raise DamagedRun(path, f"metrics.csv lacks the column(s) {', '.join(absent)}")
    if metrics["round"].tolist() != list(range(1, cfg.rounds + 1)):
        raise DamagedRun(path, f"metrics.csv has {len(metrics)} rows for a {cfg.rounds}-round run"
                         if len(metrics) != cfg.rounds else f"metrics.csv's rounds are not 1..{cfg.rounds}")
    return RunResult(cfg, path, metrics, parsed["provenance.json"])


#: File of a run folder holding θ at some rounds (:func:`run` with ``keep_every``).
THETAS = "thetas.pt"


def kept_rounds(rounds: int, every: int | Sequence[int]) -> list[int]:
    """Rounds whose θ a run with ``keep_every = every`` keeps.

    An integer n: 0 (θ_0), every multiple of n, and ``rounds`` (as
    :func:`maskfed.studies.stage.fedavg_from` tests from round 0). A list: those up to ``rounds``,
    with 0 and ``rounds`` added.

    Raises:
        ValueError: an integer ``every`` < 1, or a negative round in the list.
    """
    if isinstance(every, int):
        if every < 1:
            raise ValueError(f"keep_every must be a positive number of rounds; got {every}")
        return sorted(set(range(0, rounds + 1, every)) | {rounds})
    if any(int(r) < 0 for r in every):
        raise ValueError(f"keep_every rounds must be >= 0 (0 = initialisation); got {list(every)}")
    return sorted({int(r) for r in every if int(r) <= rounds} | {0, rounds})


def load_thetas(path: Path) -> dict[int, torch.Tensor] | None:
    """θ snapshots of a finished run folder, ``{round: θ [P] float32 on the CPU}`` (round 0 =
    initialisation), or None when the run kept none."""
    file = path / THETAS
    if not file.exists():
        return None
    blob = torch.load(file, weights_only=True)
    return {int(r): t for r, t in zip(blob["rounds"], blob["thetas_RxP"])}


def find_run(cfg: RunConfig, identity: RunIdentity | None = None) -> RunResult | None:
    """The finished run of ``cfg`` with the current code and data, or None (tidies a stale partial folder).
    ``identity``: the run's :func:`identify`, when the caller has it already. The folder is found by its
    name and used only if its files agree with it (:func:`check_identity`).

    Raises:
        DamagedRun: the run's folder exists but is not whole (:func:`load_run`).
        RunMismatch: the folder's ``config.json``, provenance run key and name do not all agree with
            ``cfg`` and its key (a DamagedRun too).
    """
    identity = identity or identify(cfg)
    if not identity.path.exists():
        return None
    checkpoint.remove_stale(checkpoint.partial_dir(identity.path))
    result = _read_run(identity.path)
    check_identity(result, cfg, identity.key)
    return result


def resolve_device(name: str) -> torch.device:
    """The torch device of a config's ``device`` ("auto": CUDA when available, else CPU).

    Raises:
        ValueError: ``cuda`` asked for but not available.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device = 'cuda' but no CUDA device is available; use device='cpu' or 'auto'")
    return torch.device(name)


def split_images(cfg: RunConfig, images: data_mod.ImageData):
    """The run's uint8 train and test images after ``train_subset`` / ``test_subset``:
    ``(x_train [N, 3, H, W], y_train [N], x_test [M, 3, H, W], y_test [M])``.

    Raises:
        ValueError: a subset larger than its split, or ``num_clients`` above the training images.
    """
    x_tr, y_tr, x_te, y_te = images.x_train, images.y_train, images.x_test, images.y_test
    for name, want, have in (("train_subset", cfg.train_subset, len(y_tr)), ("test_subset", cfg.test_subset, len(y_te))):
        if want is not None and want > have:
            raise ValueError(f"{name} = {want} exceeds the {have} images of that split; allowed: up to {have} "
                             f"(or none for all: --{name.replace('_', '-')} none)")
    if cfg.train_subset is not None and cfg.train_subset < len(y_tr):
        keep = torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(0))[:cfg.train_subset]
        x_tr, y_tr = x_tr[keep], y_tr[keep]
    if cfg.test_subset is not None and cfg.test_subset < len(y_te):
        keep = torch.randperm(len(y_te), generator=torch.Generator().manual_seed(1))[:cfg.test_subset]
        x_te, y_te = x_te[keep], y_te[keep]
    if len(y_tr) < cfg.num_clients:
        raise ValueError(f"num_clients = {cfg.num_clients} exceeds the {len(y_tr)} training images; "
                         "allowed: 1 <= num_clients <= number of training images")
    return x_tr, y_tr, x_te, y_te


def partition_for(cfg: RunConfig, y_train: torch.Tensor) -> list:
    """The run's client partition of ``y_train`` (labels after :func:`split_images`); K index arrays.

    Raises:
        ValueError: as :func:`maskfed.engine.partition.make_partition`.
    """
    return partition.make_partition(cfg.partition, y_train.numpy(), cfg.num_clients, alpha=cfg.alpha, seed=cfg.seed,
                                    convention=cfg.dirichlet_convention)


def prepare_data(cfg: RunConfig, images: data_mod.ImageData, device: torch.device) -> fedavg.FedData:
    """Subset, normalise (train-split channel statistics) and partition the images.

    On a CPU the images are stored channels-last, which oneDNN's convolutions run faster (ours,
    after PyTorch's channels-last tutorial; docs/measurements.md); results agree to float32 rounding.
    """
    x_tr, y_tr, x_te, y_te = split_images(cfg, images)
    parts = partition_for(cfg, y_tr)
    mean, std = data_mod.channel_stats(x_tr)
    layout = torch.channels_last if device.type == "cpu" else torch.contiguous_format
    x_tr, x_te = (data_mod.normalize(x, mean, std).to(device).contiguous(memory_format=layout) for x in (x_tr, x_te))
    return fedavg.FedData(x_train=x_tr, y_train=y_tr.to(device), parts=parts, x_test=x_te, y_test=y_te.to(device))


def run(cfg: RunConfig, *, force: bool = False, progress: bool | RoundCounter = True,
        keep_every: int | Sequence[int] = 0) -> RunResult:
    """Run one FedAvg configuration, or return its finished run folder (:class:`RunResult`).

    A checkpoint is saved every ``cfg.checkpoint_every`` rounds (:mod:`maskfed.engine.checkpoint`);
    the same call after a kill resumes from it, bit-identical on the same device. One process
    computes a run at a time: a second one waits, then reuses it.

    Args:
        cfg: the run's configuration (validated).
        force: recompute from round 1, even if a finished run or a checkpoint exists.
        progress: show a tqdm bar over rounds; a :class:`RoundCounter`: count the rounds there instead (a
            worker of :func:`run_many`, whose parent shows them).
        keep_every: n > 0 (or a list of rounds) also keeps θ at :func:`kept_rounds` in
            ``thetas.pt`` (:func:`load_thetas`), for the stage chapter's ladder. Not part of the
            key: a finished run without snapshots is returned as it is.

    Raises:
        ValueError / FileNotFoundError / DataUnavailableError: bad device or data, or
            ``keep_every`` < 0, before training starts.
        DamagedRun / RunMismatch: without ``force``, the run's folder exists but is not whole, or its
            files are another run's (:func:`find_run`); nothing is reused or trained then.
    """
    if isinstance(keep_every, int) and keep_every < 0:
        raise ValueError(f"keep_every must be >= 0 rounds (0: keep no θ snapshots); got {keep_every}")
    if not isinstance(keep_every, int):
        kept_rounds(cfg.rounds, keep_every)  # refuses negative rounds before training
    identity = identify(cfg)
    if not force and (found := find_run(cfg, identity)) is not None:
        return found
    cohort.check_precision(cfg.precision, identity.device)
    with checkpoint.claim(checkpoint.partial_dir(identity.path)) as partial:
        if identity.path.exists() and not force:  # finished by another process while we waited
            result = _read_run(identity.path)
            check_identity(result, cfg, identity.key)
            return result
        return _train(cfg, identity, partial, force=force, progress=progress, keep_every=keep_every)


def _train(cfg: RunConfig, identity: RunIdentity, partial: Path, *, force: bool, progress: bool | RoundCounter,
           keep_every: int | Sequence[int] = 0) -> RunResult:
    """Train ``cfg`` (from its checkpoint if there is one), write the run folder, drop the checkpoint."""
    t0 = time.perf_counter()
    images, device, engine, key, path = identity.images, identity.device, identity.engine, identity.key, identity.path
    data = prepare_data(cfg, images, device)
    torch.manual_seed(cfg.seed)
    num_classes = len(images.classes)  # the source's own class count (10 for CIFAR-10)
    model = build_model(cfg.model, num_classes=num_classes, gn_groups=cfg.gn_groups, width=cfg.width).to(device)
    snapshots = partial / "thetas"
    if force:
        checkpoint.discard(partial)
        shutil.rmtree(snapshots, ignore_errors=True)
    keep = set(kept_rounds(cfg.rounds, keep_every)) if keep_every else set()

    def snapshot(rounds_done: int, theta_P: torch.Tensor) -> None:
        if rounds_done in keep:
            checkpoint.write_file(snapshots / f"r{rounds_done:05d}.pt",
                                  checkpoint.tensor_bytes(theta_P.detach().float().cpu().clone()), "a θ snapshot")

    state = checkpoint.load(partial, key)
    if state is not None:
        checkpoint.restore_rng(state)
    done_before = 0 if state is None else state.rounds_done
    wall_before = 0.0 if state is None else state.wall_s
    if state is None:
        snapshot(0, torch.nn.utils.parameters_to_vector(model.parameters()))

    def save_state(rounds_done: int, theta_P: torch.Tensor, records: list[dict]) -> None:
        snapshot(rounds_done, theta_P)
        if cfg.checkpoint_every and rounds_done % cfg.checkpoint_every == 0 and rounds_done < cfg.rounds:
            wall = wall_before + time.perf_counter() - t0
            checkpoint.save(partial, checkpoint.RunState(rounds_done, theta_P, records, wall_s=wall), key)

    bar = (progress.started(done_before) if isinstance(progress, RoundCounter) else
           tqdm(total=cfg.rounds, initial=done_before, desc=cfg.label(), leave=False, disable=not progress,
                mininterval=2.0))
    # (the bar is closed, and so cleared, also when the run stops: a message after it starts on its own line);
    # every number of the run (training, evaluation, Hessian products, sharpness) in the run's precision
    with bar, determinism.deterministic(determinism.needed(cfg.identical_client_seeds, device)) as determinism_state, \
            cohort.precision_context(cfg.precision, device) as precision_state:
        records = fedavg.run_fedavg(
            model, data, rounds=cfg.rounds, cohort_size=cfg.cohort_size, local_epochs=cfg.local_epochs,
            batch_size=cfg.batch_size, lr=cfg.lr, aggregation=cfg.aggregation, seed=cfg.seed,
            identical_client_seeds=cfg.identical_client_seeds,
            eval_at=fedavg.eval_rounds(cfg.rounds, cfg.eval_every, cfg.eval_every_tail), progress=bar,
            engine=engine, precision=cfg.precision,
            start_round=done_before, theta_P=None if state is None else state.theta_P.to(device),
            records=None if state is None else state.records, on_state=save_state,
            mask_keep_prob=cfg.mask_keep_prob, mask_mode=cfg.mask_mode, hessian_every=cfg.hessian_every,
            hessian_batch_size=cfg.hessian_batch, sharpness_iters=cfg.sharpness_iters, num_classes=num_classes)
    sizes = [len(p) for p in data.parts]
    prov = {
        "run_key": key, "config_key": cfg.key(), **identity.fingerprint_fields(), "label": cfg.label(), "seed": cfg.seed,
        "code_hash": provenance.code_hash(), **provenance.git_state(),
        "packages": provenance.package_versions(), "machine": provenance.machine(str(device)),
        "determinism": determinism_state,
        "data_source": images.source, "data_source_kind": images.source_kind, "dataset": cfg.dataset,
        "classes": list(images.classes),
        "num_parameters": num_parameters(model), "wall_s": wall_before + time.perf_counter() - t0,
        "resumed_after_round": done_before,
        "engine": engine, "precision": cfg.precision, "precision_flags": precision_state,
        "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    files: dict[str, str | bytes] = {
        "metrics.csv": pd.DataFrame(records).to_csv(index=False),
        "config.json": json.dumps(cfg.model_dump(mode="json"), indent=2),
        "partition.json": json.dumps({"sizes": sizes, "min": min(sizes), "max": max(sizes)}),
        "provenance.json": json.dumps(prov, indent=2),
    }
    if keep and all((snapshots / f"r{r:05d}.pt").exists() for r in keep):
        rounds_kept = sorted(keep)
        files[THETAS] = checkpoint.tensor_bytes({"rounds": rounds_kept, "thetas_RxP": torch.stack(
            [torch.load(snapshots / f"r{r:05d}.pt", weights_only=True) for r in rounds_kept])})
    checkpoint.write_folder(path, files, "the finished run's folder", replace=force)
    checkpoint.discard(partial)
    return load_run(path)



def run_cost(cfg: RunConfig) -> float:
    """Relative cost of a run (rounds x τ x K_c: images trained, up to shard size), for longest-first scheduling."""
    return cfg.rounds * cfg.local_epochs * cfg.cohort_size


def worker_init(parent: int | None = None, rounds=None) -> None:
    """Set up a sweep worker: one torch thread; Ctrl-C and SIGHUP left to the parent (which ends
    workers with SIGTERM); a worker whose parent is gone ends itself within a second.

    Args:
        parent: the pid of the process that made the pool; given, a worker that starts after its
            parent died ends at once.
        rounds: a multiprocessing queue for the rounds the worker's runs finish (:class:`RoundCounter`);
            None: no progress reported.
    """
    global _ROUNDS_QUEUE
    _ROUNDS_QUEUE = rounds
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing semaphore, which a worker ended by SIGTERM never
    # releases ("leaked semaphore objects" at exit); a worker's bars need no lock across processes
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(1)
    if parent is None:
        parent = os.getppid()

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_parent, daemon=True, name="maskfed-watch-parent").start()


class RoundCounter:
    """A worker's stand-in for a run's tqdm bar (the ``update``/``set_postfix`` that
    :func:`maskfed.engine.fedavg.run_fedavg` calls): it puts each finished round, as a count, on ``queue``,
    where :func:`run_many`'s parent process adds it to its bar of all runs' rounds."""

    def __init__(self, queue):
        self.queue = queue

    def started(self, rounds_done: int) -> RoundCounter:
        """Count the rounds a run resumed with (from its checkpoint) as done; returns itself."""
        if rounds_done:
            self.queue.put(rounds_done)
        return self

    def update(self, n: int = 1) -> None:
        self.queue.put(n)

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def __enter__(self) -> RoundCounter:
        return self

    def __exit__(self, *exc) -> None:
        pass


#: In a worker of :func:`run_many` with progress: the queue its rounds go to (set by :func:`worker_init`).
_ROUNDS_QUEUE = None


def _run_in_worker(cfg_json: str, keep_every: int | Sequence[int] = 0, force: bool = False) -> str:
    counter = RoundCounter(_ROUNDS_QUEUE) if _ROUNDS_QUEUE is not None else False
    return str(run(RunConfig(**json.loads(cfg_json)), progress=counter, keep_every=keep_every, force=force).path)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT), or SIGTERM / SIGHUP under :func:`stop_on_signals`, during :func:`run_many`;
    ``str()`` says what was kept and how to resume, ``signum`` is the signal's number."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = signum


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived inside :func:`stop_on_signals`; ``signum`` is its number."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


#: Signals that end a run or sweep the way Ctrl-C does (:func:`stop_on_signals`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_on_signals():
    """Inside the block, SIGTERM and SIGHUP raise :class:`Stopped` (a KeyboardInterrupt) in the main
    thread, so ``kill <pid>`` or a closed terminal end a sweep as Ctrl-C does. Only the first signal
    raises; previous handlers are restored on leaving; an ignored signal stays ignored (``nohup``).
    Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = []

    def handler(signum, frame):
        if not raised:
            raised.append(signum)
            raise Stopped(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def exit_status(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for a run stopped by a signal: 128 + its number (130 Ctrl-C, 143 SIGTERM,
    129 SIGHUP)."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def resume_hint() -> str:
    """How to continue after an interruption (used by :class:`Interrupted` and the CLI)."""
    return (f"rerun the same command to resume: finished runs are reused, and each unfinished run continues "
            f"from its last checkpoint (hidden .partial-* folders in {results_dir() / 'runs'})")


def interrupted_message(exc: KeyboardInterrupt) -> str:
    """``interrupted`` (Ctrl-C) or ``interrupted by SIGTERM`` (another signal), for the messages."""
    signum = int(getattr(exc, "signum", signal.SIGINT))
    return "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel queued runs and end the worker processes now (their checkpoints stay on disk)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())  # Python 3.11-3.13; shutdown clears it
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=5)
    pool.shutdown(wait=True)  # the pool's own thread sees the ended workers and releases its queues


def _finished(cfg: RunConfig) -> bool:
    """Whether ``cfg``'s run folder is on disk and whole (for counting; a damaged one is not)."""
    try:
        return find_run(cfg) is not None
    except DamagedRun:
        return False


def _count_rounds(rounds, bar) -> None:
    """Add each count the workers put on ``rounds`` to ``bar``, until a None."""
    while (n := rounds.get()) is not None:
        bar.update(n)


def run_many(configs: list[RunConfig], *, workers: int = 1, progress: bool = True,
             keep_every: dict[RunConfig, int | Sequence[int]] | None = None, force: bool = False) -> list[RunResult]:
    """Run several configurations (finished ones are reused), in parallel processes.

    ``workers`` one-thread processes share the runs out, longest first (:func:`run_cost`); results
    come back in the order of ``configs``. A failed run does not stop the others. Ctrl-C (or
    SIGTERM / SIGHUP inside :func:`stop_on_signals`) cancels queued runs and ends the workers;
    finished runs stay and the same call resumes the others from their checkpoints.

    Args:
        configs: run configurations (duplicates are run once).
        workers: worker processes; 1 runs in this process with torch's default threads.
        progress: tqdm bars: one a run (in this process), or with several workers one over all runs' rounds.
        keep_every: ``{config: n or rounds}`` for runs that keep θ snapshots (:func:`run`).
        force: recompute every run from round 1, replacing finished (or damaged) folders.

    Raises:
        DamagedRun: a finished run's folder is damaged (without ``force``; before any training).
        Interrupted: on Ctrl-C (or SIGTERM / SIGHUP), saying what was kept and how to resume.
        Exception: the first failed run's own error (with a note naming the run and the number
            of failures), after every other run ended.
    """
    unique = list(dict.fromkeys(configs))
    keep = keep_every or {}
    done = {c: None if force else find_run(c) for c in unique}
    pending = [c for c in unique if done[c] is None]
    errors: list[tuple[RunConfig, BaseException]] = []
    try:
        if pending and workers > 1 and len(pending) > 1:
            pending.sort(key=run_cost, reverse=True)
            context = multiprocessing.get_context("spawn")
            rounds = context.Queue() if progress else None
            pool = ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=context,
                                       initializer=worker_init, initargs=(os.getpid(), rounds))
            # one bar over every pending run's rounds, fed by the workers (RoundCounter); runs finished as postfix
            bar = tqdm(total=sum(c.rounds for c in pending), desc=f"{len(pending)} runs", unit="round",
                       disable=not progress, mininterval=2.0)
            feeder = threading.Thread(target=_count_rounds, args=(rounds, bar), daemon=True) if progress else None
            if feeder is not None:
                feeder.start()
            try:
                futures = {pool.submit(_run_in_worker, c.model_dump_json(), keep.get(c, 0), force): c for c in pending}
                for n_done, fut in enumerate(as_completed(futures), start=1):
                    bar.set_postfix(finished=f"{n_done}/{len(futures)}")
                    if fut.exception() is not None:
                        errors.append((futures[fut], fut.exception()))
                    else:
                        done[futures[fut]] = load_run(Path(fut.result()))
            except BaseException:
                stop_workers(pool)
                raise
            finally:
                if feeder is not None:
                    rounds.put(None)
                    feeder.join(timeout=5)
                bar.close()
            pool.shutdown(wait=True)
        else:
            for c in tqdm(pending, desc="runs", disable=not progress or len(pending) < 2):
                try:
                    done[c] = run(c, progress=progress, keep_every=keep.get(c, 0), force=force)
                except Exception as exc:  # noqa: BLE001 - kept and re-raised below, after the other runs
                    errors.append((c, exc))
    except KeyboardInterrupt as exc:
        finished = sum(map(_finished, unique))  # on disk: one may have landed just now
        raise Interrupted(f"{interrupted_message(exc)}; {finished} of {len(unique)} run(s) finished and kept; "
                          + resume_hint(), signum=getattr(exc, "signum", signal.SIGINT)) from None
    if errors:
        cfg, exc = errors[0]
        exc.add_note(f"(run {cfg.label()}; {len(errors)} of {len(unique)} run(s) failed, "
                     "the others are kept)")
        raise exc
    return [done[c] for c in configs]
