"""Checkpoints of a running FedAvg run, so that a killed run resumes where it stopped.

A run being computed owns a hidden folder ``results/runs/.partial-<label>-<key>/``
(:func:`partial_dir`), found only by the same config, code and data. It holds ``checkpoint.pt``
(:class:`RunState` after the last saved round) and ``owner.json`` (pid, host, start time).

The run's lock (``filelock``: ``flock`` on POSIX) is ``results/runs/.locks/<label>-<key>.lock``
(:func:`lock_path`), never deleted: a second process waits on it, then reuses the finished run.
The partial folder is created and removed only under the lock; the OS drops the lock when its
holder dies, even by SIGKILL. Writes are atomic (:func:`write_file`); an OSError raises
:class:`WriteFailed` and leaves the previous file intact.

θ, the round count and the records are the whole state: every random draw comes from generators
seeded by (seed, round, client) (:mod:`maskfed.engine.fedavg`), the models have no buffers and
local SGD keeps no state across rounds. torch's global generator states are saved too, for a
future model that draws from them (tests/test_checkpoint.py checks a run consumes none today)."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch
from filelock import FileLock, Timeout

#: Version of the checkpoint layout; a checkpoint of another version is ignored (the run starts over).
FORMAT = 1
CHECKPOINT = "checkpoint.pt"


@dataclass
class RunState:
    """Everything needed to resume a run after ``rounds_done`` rounds."""

    rounds_done: int                    # rounds finished (the next round's 0-based index)
    theta_P: torch.Tensor               # global parameters θ after that round, flat [P], CPU
    records: list[dict]                 # the per-round records of rounds 1..rounds_done
    wall_s: float = 0.0                 # seconds spent on the run so far, over every attempt
    torch_rng: torch.Tensor = field(default_factory=torch.get_rng_state)  # global CPU generator state
    cuda_rng: list[torch.Tensor] | None = field(  # global CUDA generator states, one per device; None if CUDA unused
        default_factory=lambda: torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)


class WriteFailed(OSError):
    """A file of a run (checkpoint, θ snapshot, run folder) could not be written; ``str()`` names
    the folder, the cause and what to do."""


def write_failed(what: str, folder: Path, exc: OSError) -> WriteFailed:
    """The :class:`WriteFailed` for an OSError ``exc`` raised while writing ``what`` into ``folder``."""
    cause = f"{exc.strerror or exc} (errno {exc.errno})" if exc.errno else str(exc)
    return WriteFailed(f"cannot write {what} in {folder}: {cause}; what was written before (finished runs, the "
                       f"last checkpoint) is intact: free space or point MASKFED_RESULTS_DIR at another folder, "
                       f"then rerun the same command to resume")


def write_file(path: Path, data: bytes, what: str) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, then ``os.replace``
    (the folder is created if needed; ``what`` names the file in errors, "the checkpoint").

    Raises:
        WriteFailed: any OSError while writing, naming the folder and the cause; an existing
            ``path`` is left as it was.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise write_failed(what, path.parent, exc) from exc
    finally:
        tmp.unlink(missing_ok=True)  # only left if writing failed or was interrupted


def write_folder(path: Path, files: dict[str, str | bytes], what: str, *, replace: bool = False) -> None:
    """Write a result folder (a run, a measurement, a ladder) atomically: every file into a hidden
    ``.tmp-*`` sibling, then one rename to ``path``. The one writer of every cached result's folder.

    Args:
        path: the folder; its parent is created if needed.
        files: file name -> content (str is written as UTF-8).
        what: what the folder is, for the error message ("the finished run's folder").
        replace: replace an existing ``path`` (forced recomputation); else a folder another
            process finished first is kept.

    Raises:
        WriteFailed: a file cannot be written, naming the folder and the cause.
    """
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, content in files.items():
            (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(what, path.parent, exc) from exc
    try:
        old = path.parent / f".old-{path.name}-{os.getpid()}"
        if replace and path.exists():
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:  # another process finished the same folder first: keep theirs
            pass
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tensor_bytes(obj) -> bytes:
    """``torch.save`` of ``obj`` into memory, for :func:`write_file` (a full disk is then an OSError
    with its errno)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def partial_dir(run_path: Path) -> Path:
    """The hidden folder of an unfinished run: ``<runs>/.partial-<label>-<key>``."""
    return run_path.parent / f".partial-{run_path.name}"


#: Folder (inside the runs folder) of the runs' lock files, which are never deleted.
LOCKS = ".locks"


def lock_path(folder: Path) -> Path:
    """The lock file of the run whose partial folder is ``folder``: ``<runs>/.locks/<label>-<key>.lock``."""
    return folder.parent / LOCKS / f"{folder.name.removeprefix('.partial-')}.lock"


def _lock(folder: Path) -> FileLock:
    path = lock_path(folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failed("the run's lock file", path.parent, exc) from exc
    return FileLock(path)


def save(folder: Path, state: RunState, run_key: str) -> None:
    """Write ``state`` to ``folder/checkpoint.pt`` atomically (:func:`write_file`).

    The records travel as JSON text (floats, NaN too, read back bit-identical; ``weights_only=True``
    loads it).

    Raises:
        WriteFailed: the disk is full (or another OSError); the previous checkpoint is intact.
    """
    blob = {"format": FORMAT, "run_key": run_key, "rounds_done": state.rounds_done,
            "theta_P": state.theta_P.detach().cpu().clone(), "records_json": json.dumps(state.records),
            "wall_s": float(state.wall_s), "torch_rng": state.torch_rng, "cuda_rng": state.cuda_rng}
    write_file(folder / CHECKPOINT, tensor_bytes(blob), "the run's checkpoint")


def load(folder: Path, run_key: str) -> RunState | None:
    """The checkpoint in ``folder``, or None when there is none usable.

    A checkpoint of another :data:`FORMAT` or run key, or an unreadable one, is reported on stderr
    and ignored (the run starts from round 1).
    """
    path = folder / CHECKPOINT
    if not path.exists():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        if blob.get("format") != FORMAT or blob.get("run_key") != run_key:
            raise ValueError(f"format {blob.get('format')} / run key {blob.get('run_key')}, "
                             f"expected {FORMAT} / {run_key}")
        return RunState(rounds_done=int(blob["rounds_done"]), theta_P=blob["theta_P"],
                        records=json.loads(blob["records_json"]), wall_s=float(blob["wall_s"]),
                        torch_rng=blob["torch_rng"], cuda_rng=blob["cuda_rng"])
    except Exception as exc:  # noqa: BLE001 - an unusable checkpoint costs time, never a wrong number
        print(f"maskfed: ignoring the checkpoint {path} ({exc}); the run starts from round 1", file=sys.stderr)
        return None


def restore_rng(state: RunState) -> None:
    """Set torch's global generators to the states saved in ``state``."""
    torch.set_rng_state(state.torch_rng)
    if state.cuda_rng is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state.cuda_rng)


def discard(folder: Path) -> None:
    """Delete the checkpoint in ``folder`` (the lock, if held, stays)."""
    (folder / CHECKPOINT).unlink(missing_ok=True)


def remove_stale(folder: Path) -> None:
    """Delete the partial folder of a run that is already finished, unless a process holds its lock.

    (Left by a run killed between renaming its folder into place and removing the partial one.)
    """
    if not folder.exists():
        return
    lock = _lock(folder)
    try:
        lock.acquire(timeout=0)
    except Timeout:  # being recomputed (--force) by another process: leave it
        return
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        lock.release()


@contextmanager
def claim(folder: Path):
    """Hold the lock of a run (:func:`lock_path`) while computing it; yields its partial folder.

    If another process holds it, says so on stderr (its pid and host) and waits; the caller must
    check again inside whether the run finished meanwhile. On leaving, a partial folder without a
    checkpoint is removed before the lock is released.

    Raises:
        WriteFailed: the partial folder or the lock file cannot be created.
    """
    lock = _lock(folder)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        owner = folder / "owner.json"
        try:
            who = owner.read_text().strip()
        except OSError:  # not written yet, or just removed
            who = "unknown"
        print(f"maskfed: another process is computing this run ({who}); waiting for it to finish "
              f"({folder})", file=sys.stderr)
        lock.acquire()
    try:
        owner = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                            "since_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "owner.json").write_text(owner)
        except OSError as exc:
            raise write_failed("the run's partial folder", folder.parent, exc) from exc
        yield folder
    finally:
        try:
            if not (folder / CHECKPOINT).exists():
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            lock.release()
