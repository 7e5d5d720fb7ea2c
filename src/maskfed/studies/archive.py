"""An archive of finished runs kept in git: ``results/archive/<profile>/<run-folder>/``.

Profiles too long for every ``make book`` (``cpu-long``; ``paper``, which needs a GPU) keep their finished
run folders here (small files only, :data:`FILES`), read back beside the live profile's numbers with a
provenance label (device, dates, commits, run-code hashes); never pooled across profiles.
``results/runs/`` stays a git-ignored cache. ``$MASKFED_ARCHIVE_DIR`` moves the archive (tests use this).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from maskfed import provenance

from maskfed.analysis import uncertainty
from maskfed.engine.config import load_profile, NOT_IN_KEY, PROFILES, RunConfig
from maskfed.names import CPU_LONG, CPU_PAPER, PAPER
from maskfed.engine.runner import DamagedRun, load_run, RunResult
from maskfed.paths import env_path, REPO_ROOT
from maskfed.studies import experiments

#: The files of a run folder that are archived (all small).
FILES = ("metrics.csv", "config.json", "partition.json", "provenance.json")
#: Archived when present: θ snapshots of a stage-ladder run (:data:`maskfed.engine.runner.THETAS`).
OPTIONAL_FILES = ("thetas.pt",)
#: Columns a metrics.csv must have to be read back.
REQUIRED_COLUMNS = ("round", "recovery_unweighted", "recovery_weighted", "mu2_hat", "sigma2_hat", "test_acc")
#: RunConfig fields that say where or how a run ran, not what it computed: ignored when matching runs.
WHERE_FIELDS = ("data_path", "device", *NOT_IN_KEY)
#: Profiles the book looks for in the archive, in column order (closest to the paper's setting first).
BOOK_PROFILES = (PAPER, CPU_PAPER, CPU_LONG)


def _require(folder: Path, files: tuple) -> None:
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"missing {missing}")


def archive_dir() -> Path:
    """The archive root: ``$MASKFED_ARCHIVE_DIR`` or ``<repo>/results/archive``."""
    return env_path("MASKFED_ARCHIVE_DIR", REPO_ROOT / "results" / "archive")


def _check_profile(profile_name: str) -> None:
    if profile_name not in PROFILES:
        raise ValueError(f"profile_name must be one of {list(PROFILES)}; got {profile_name!r}")


def archive_runs(results: list[RunResult], profile_name: str) -> list[Path]:
    """Copy finished run folders (:data:`FILES`, :data:`OPTIONAL_FILES` where present) into
    ``archive_dir()/<profile_name>/<run-folder>/`` through a temporary name (:func:`install`), replacing a
    folder of the same name; returns the archived folders. ValueError: unknown profile, or a run folder
    lacking one of :data:`FILES` (checked for every run before anything is copied)."""
    _check_profile(profile_name)
    for r in results:
        missing = [f for f in FILES if not (r.path / f).is_file()]
        if missing:
            raise ValueError(f"run folder {r.path} is not a finished run: missing {missing}")
    dest_root = archive_dir() / profile_name
    dest_root.mkdir(parents=True, exist_ok=True)
    clean_leftovers(dest_root)
    out = []
    for r in results:
        tmp = _scratch(dest_root / r.path.name)
        for f in FILES + tuple(o for o in OPTIONAL_FILES if (r.path / o).is_file()):
            shutil.copy2(r.path / f, tmp / f)
        install(tmp, dest_root / r.path.name)
        out.append(dest_root / r.path.name)
    return out


# --------------------------------------------------------------------------- manifests and folder writes

#: File in every archived run and study folder: the sha256 of each of its other files, written last.
MANIFEST = "manifest.json"
#: Name prefixes of a folder being written and of the folder it replaces (kept until the new one is in place).
TMP_PREFIX, OLD_PREFIX = ".tmp-", ".old-"


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, 64 hex digits."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _hashed_files(folder: Path) -> dict[str, str]:
    return {f.name: file_sha256(f) for f in sorted(folder.iterdir()) if f.is_file() and f.name != MANIFEST}


def write_manifest(folder: Path) -> str:
    """Write ``folder/manifest.json`` (``{"kind": "sha256", "files": {name: sha256}}`` over every other
    file, atomically); returns :func:`manifest_digest`."""
    body = json.dumps({"kind": "sha256", "files": _hashed_files(folder)}, indent=1, sort_keys=True) + "\n"
    (folder / f"{MANIFEST}.tmp").write_text(body)
    os.replace(folder / f"{MANIFEST}.tmp", folder / MANIFEST)
    return manifest_digest(folder)


def manifest_digest(folder: Path) -> str | None:
    """sha256 (16 hex digits) of ``folder``'s manifest file, or None when it has none."""
    path = folder / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None


def content_digest(folder: Path, hashed: dict[str, str] | None = None) -> str:
    """sha256 (16 hex digits) of the names and sha256 of every file of ``folder`` but its manifest, as they
    are now (``hashed``: :func:`_hashed_files` already computed); a verification record holds it per run."""
    hashed = _hashed_files(folder) if hashed is None else hashed
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:16]


def manifest_changes(folder: Path, now: dict[str, str] | None = None) -> list[str]:
    """How ``folder``'s files (``now``: :func:`_hashed_files`) differ from its manifest ([] when all match):
    ``"<file> changed"``, ``"<file> missing"``, ``"<file> extra"``, ``"no manifest.json"`` or ``"... unreadable"``."""
    now = _hashed_files(folder) if now is None else now
    path = folder / MANIFEST
    if not path.is_file():
        return [f"no {MANIFEST}"]
    try:
        recorded = json.loads(path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [f"{MANIFEST} unreadable"]
    out = [f"{n} changed" for n in sorted(recorded) if n in now and now[n] != recorded[n]]
    out += [f"{n} missing" for n in sorted(recorded) if n not in now]
    return out + [f"{n} extra" for n in sorted(now) if n not in recorded]


def _scratch(dest: Path) -> Path:
    """A fresh hidden folder ``.tmp-<name>-<pid>`` beside ``dest``."""
    tmp = dest.parent / f"{TMP_PREFIX}{dest.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def install(tmp: Path, dest: Path) -> None:
    """Write ``tmp``'s manifest, then put ``tmp`` in the place of ``dest``. An existing ``dest`` is renamed
    to ``.old-<name>-<pid>`` and removed only once the new folder is in place, so a kill leaves either
    folder whole (:func:`clean_leftovers` restores an orphaned old one)."""
    write_manifest(tmp)
    old = dest.parent / f"{OLD_PREFIX}{dest.name}-{os.getpid()}"
    if dest.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def clean_leftovers(root: Path) -> list[str]:
    """Tidy what killed archive commands left in ``root`` (a profile's archive folder); returns one entry
    per action (``"restored <name>"``, ``"removed <folder>"``). A ``.old-<name>-<pid>`` whose ``<name>`` is gone
    is renamed back, any other removed; ``.tmp-*`` folders of processes no longer running are removed."""
    done = []
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        if not p.is_dir() or not p.name.startswith((TMP_PREFIX, OLD_PREFIX)):
            continue
        prefix = TMP_PREFIX if p.name.startswith(TMP_PREFIX) else OLD_PREFIX
        name, _, pid = p.name[len(prefix):].rpartition("-")
        if pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue  # another archive command is writing it now
        if prefix == OLD_PREFIX and name and not (root / name).exists():
            os.replace(p, root / name)  # its replacement was interrupted
            done.append(f"restored {name}")
        else:
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {p.name}")
    return done


def add_manifests(profile_name: str) -> list[Path]:
    """Write a manifest into every folder of a profile's archive (runs and studies) that has none, from its
    files as they are; returns the folders written. ValueError: unknown profile name."""
    _check_profile(profile_name)
    root = archive_dir() / profile_name
    done = [f for f in (sorted(root.iterdir()) if root.is_dir() else [])
            if f.is_dir() and not f.name.startswith(".") and not (f / MANIFEST).is_file()]
    for folder in done:
        write_manifest(folder)
    return done


def _read(folder: Path) -> RunResult:
    """Read one archived folder; ValueError with the reason if it is malformed."""
    _require(folder, FILES)
    try:
        r = load_run(folder)
    except DamagedRun as exc:  # a file cut short or unparsable, or metrics of the wrong shape
        raise ValueError(exc.reason.splitlines()[0]) from None
    except (ValueError, TypeError, OSError, pd.errors.ParserError) as exc:  # bad JSON/CSV or unknown config fields
        raise ValueError(f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    absent = [c for c in REQUIRED_COLUMNS if c not in r.metrics.columns]
    if absent:
        raise ValueError(f"metrics.csv lacks columns {absent}")
    if len(r.metrics) != r.config.rounds:
        raise ValueError(f"metrics.csv has {len(r.metrics)} rows for a {r.config.rounds}-round run")
    for key in ("code_hash", "commit", "finished_utc", "machine"):
        if key not in r.provenance:
            raise ValueError(f"provenance.json lacks {key!r}")
    return r


@dataclass
class DamagedFolder:
    """An archived run folder that cannot be read back (:func:`damaged_folders`)."""

    folder: Path    # the folder in the archive
    reason: str     # why, e.g. "metrics.csv has 3 rows for a 5-round run"

    @property
    def label(self) -> str:
        """The run label its name starts with (the folder is ``<label>-<16 hex digit key>``)."""
        m = re.fullmatch(r"(.*)-[0-9a-f]{16}", self.folder.name)
        return m.group(1) if m else self.folder.name

    def text(self) -> str:
        return f"{self.folder.name} ({self.reason})"


def _folders(profile_name: str) -> list[Path]:
    """The run folders of a profile's archive (hidden and study folders left out)."""
    _check_profile(profile_name)
    root = archive_dir() / profile_name
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and p.name not in (STAGE_DIR, CROSS_DIR)
                  and not p.name.startswith(FACTOR_PREFIX)) if root.is_dir() else []


def damaged_folders(profile_name: str) -> list[DamagedFolder]:
    """The archived run folders of a profile that :func:`load_archive` skips as malformed, with the reason."""
    return [d for d in _scan(profile_name) if isinstance(d, DamagedFolder)]


def _scan(profile_name: str) -> list[RunResult | DamagedFolder]:
    """:func:`_read` of every run folder of a profile (ValueError: unknown profile name)."""
    out = []
    for folder in _folders(profile_name):
        try:
            out.append(_read(folder))
        except ValueError as exc:
            out.append(DamagedFolder(folder, str(exc)))
    return out


def load_archive(profile_name: str) -> list[RunResult]:
    """The archived runs of one profile, sorted by folder name; [] when there are none. Malformed folders
    (:func:`damaged_folders`) are skipped with a :class:`UserWarning`; of several folders holding the same
    configuration up to :data:`WHERE_FIELDS`, only the most recently finished is kept, with a warning.
    ValueError: unknown profile name."""
    newest: dict[RunConfig, RunResult] = {}
    for r in _scan(profile_name):
        if isinstance(r, DamagedFolder):
            warnings.warn(f"archive {profile_name}: skipping malformed run folder {r.folder.name}: {r.reason}",
                          stacklevel=2)
            continue
        key = _what(r.config)  # the same run, wherever its data lay and whichever device ran it
        if key in newest:
            old = newest[key]
            keep, drop = (r, old) if r.provenance["finished_utc"] > old.provenance["finished_utc"] else (old, r)
            warnings.warn(f"archive {profile_name}: {drop.path.name} and {keep.path.name} hold the same run; "
                          f"using the newer {keep.path.name}", stacklevel=2)
            r = keep
        newest[key] = r
    return sorted(newest.values(), key=lambda r: r.path.name)


def _what(cfg: RunConfig) -> RunConfig:
    return cfg.model_copy(update={f: RunConfig.model_fields[f].default for f in WHERE_FIELDS})


def select_keyed(results: list[RunResult], configs: dict) -> dict:
    """``{key: run}`` for every entry of ``configs`` (``{key: RunConfig}``) with a run among ``results``
    (compared on every field but :data:`WHERE_FIELDS`); entries without a run are left out."""
    by_what = {_what(r.config): r for r in results}
    return {k: by_what[_what(c)] for k, c in configs.items() if _what(c) in by_what}


def select(results: list[RunResult], configs: list[RunConfig]) -> list[RunResult]:
    """The runs among ``results`` of ``configs`` (as :func:`select_keyed`), in the order of ``configs``."""
    return list(select_keyed(results, dict(enumerate(configs))).values())


def missing_frame(profile_name: str, results: list[RunResult] | None = None) -> pd.DataFrame:
    """The profile's runs (every experiment) that ``results`` (default: its archive) lacks, one row each:
    ``experiment``, ``run`` (its label), ``seed``, ``folder`` (a damaged archived folder of that run, else "")
    and ``reason`` ("not archived", or why the folder cannot be read); empty when none is missing."""
    results = load_archive(profile_name) if results is None else results
    have = {_what(r.config) for r in results}
    damaged = {d.label: d for d in damaged_folders(profile_name)}
    prof = load_profile(profile_name)
    rows = [{"experiment": e, "run": c.label(), "seed": c.seed, "folder": d.folder.name if d else "",
             "reason": d.reason if d else "not archived"}
            for e in prof.experiments for c in experiments.configs(prof, e) if _what(c) not in have
            for d in [damaged.get(c.label())]]
    return pd.DataFrame(rows, columns=["experiment", "run", "seed", "folder", "reason"]).drop_duplicates("run")


def how_to_make(profile_name: str, seeds=()) -> str:
    """The ``maskfed`` commands (shell-quoted, joined by ``&&``) that make and archive a profile's runs
    (of ``seeds`` only, when given)."""
    s = ["--seeds", *(str(int(x)) for x in sorted(set(seeds)))] if len(seeds) else []
    return " && ".join(shlex.join(["maskfed", c, "--profile", profile_name, *s]) for c in ("sweep", "archive"))


class IncompleteArchive(ValueError):
    """A profile's archive holds some of its runs but not all (:func:`require_complete`). ``missing`` is
    :func:`missing_frame`; ``seeds`` the seeds of the runs it lacks; ``command`` what restores them."""

    def __init__(self, profile_name: str, missing: pd.DataFrame, total: int):
        self.profile, self.missing, self.total = profile_name, missing, total
        self.seeds = sorted({int(s) for s in missing["seed"]})
        self.command = how_to_make(profile_name, self.seeds)
        runs = "; ".join(r.run + (f" (folder {r.folder}: {r.reason})" if r.folder else "")
                         for r in missing.itertuples())
        super().__init__(f"the {profile_name} archive lacks {len(missing)} of its {total} runs: {runs}; "
                         f"restore them with: {self.command}")


def require_complete(profile_name: str, results: list[RunResult] | None = None) -> list[RunResult]:
    """A profile's archived runs (``results``, default :func:`load_archive`; [] when it has none); raises
    :class:`IncompleteArchive` when some of its runs (:func:`missing_frame`) are absent or damaged."""
    results = load_archive(profile_name) if results is None else results
    if not results:
        return results
    missing = missing_frame(profile_name, results)
    if len(missing):
        total = len({_what(c) for c in experiments.all_configs(load_profile(profile_name))})
        raise IncompleteArchive(profile_name, missing, total)
    return results


class InconsistentRun(ValueError):
    """A run's own files disagree with what the book derives from them (a chapter's consistency check): names
    the run's ``folder`` (its path) and the ``file`` that holds the numbers, e.g. an edited ``metrics.csv``."""

    def __init__(self, folder: Path, file: str, what: str):
        self.folder, self.file, self.what = Path(folder), file, what
        super().__init__(f"run folder {self.folder.name}, {file}: {what} (restore it from git, or re-archive)")


@dataclass
class ArchiveLabel:
    """Where and when an archive's runs were made, whether their files are still those archived, and
    whether the run code has changed since."""

    profile: str
    runs: int
    devices: list[str]          # e.g. ["cuda (NVIDIA H200)"], ["cpu (x86_64)"]
    first_utc: str              # finish time of the earliest run, ISO 8601
    last_utc: str               # finish time of the latest run
    commits: list[str]          # 10-digit git commits, "+dirty" when src/ had uncommitted changes
    code_hashes: list[str]      # run-code hashes (provenance.code_hash) of the runs
    current_code_hash: str      # provenance.code_hash() of this checkout
    verification: dict | None = None  # the newest check of this code on exactly these files (verify_archive)
    changed: list[str] = field(default_factory=list)  # "<run folder>: <manifest_changes entry>", ...
    own_code_check: dict | None = None  # the newest verification made with the runs' own run code, if any
    same_code_runs: int = 0     # runs made with this checkout's run code
    labels: list[str] = field(default_factory=list)  # the runs' labels (RunConfig.label)
    #: run folders no verification of this code covers as they are now ([] when :attr:`verification` covers all)
    unverified: list[str] = field(default_factory=list)
    checked_before: bool = False  # some verification of this checkout's code exists (on any files)

    @property
    def verified(self) -> bool:
        """True when the newest verification of this checkout's code on these very files was bit-identical."""
        return bool(self.verification and self.verification.get("identical") is True)

    @property
    def outcome(self) -> str | None:
        """:func:`verification_outcome` of :attr:`verification`, or None without one."""
        return None if self.verification is None else verification_outcome(self.verification)

    @property
    def code_changed(self) -> bool:
        """Some run was made by other run code than this checkout's, and :attr:`verified` is False."""
        return any(h != self.current_code_hash for h in self.code_hashes) and not self.verified

    @property
    def status(self) -> str:
        """The first that applies: "files unchecked" (every changed entry is a folder without a manifest),
        "files changed", "within tolerance" or "not reproduced" (:attr:`verification` not bit-identical),
        "code changed" (:attr:`code_changed`), "bit-identical" (other run code, :attr:`verified`), "same code";
        the words of :func:`verification_outcome` mean the same on every page."""
        if self.changed:
            unchecked = all(c.endswith(f": no {MANIFEST}") for c in self.changed)
            return "files unchecked" if unchecked else "files changed"
        if self.verification is not None and not self.verified:
            return "within tolerance" if self.outcome == "within tolerance" else "not reproduced"
        if self.code_changed:
            return "code changed"
        other = any(h != self.current_code_hash for h in self.code_hashes)
        return "bit-identical" if self.verification is not None and other else "same code"

    def record(self) -> dict:
        """The label as values for a row of :func:`archive_table`: dates, commits, hashes, :attr:`status`, the
        verification's date and machine (:func:`machine_text`), the runs it re-ran (among these runs or the rest
        of the archive), the largest relative difference of their :func:`summary_cells` and of their 1/Δ_S cell
        (3 significant digits, NaN without a record), the tolerance, :func:`difference_text` of each that
        differed, ``own code`` (outcome with the runs' own run code, and its machine where that is not the
        verification's), :attr:`changed` and :attr:`unverified`."""
        v = self.verification or {}
        runs = v.get("runs", [])
        reran, own = [r["label"] for r in runs], self.own_code_check
        worst = max((r.get("summary_max_rel_diff", math.nan) for r in runs), default=math.nan)
        factor = max((abs(r["summary_rerun"]["recovery_unweighted"] / r["summary_archived"]["recovery_unweighted"] - 1)
                      for r in runs if r.get("summary_archived") and r.get("summary_rerun")), default=math.nan)
        return {"runs": self.runs, "device": ", ".join(self.devices), "first finished": self.first_utc[:10],
                "last finished": self.last_utc[:10], "commit": ", ".join(self.commits),
                "run code": ", ".join(self.code_hashes), "this code": self.current_code_hash, "status": self.status,
                "verified": v.get("utc", "")[:10], "verified on": machine_text(v) if v else "",
                "re-run": len(reran), "re-run here": sum(x in self.labels for x in reran),
                "re-run other": sum(x not in self.labels for x in reran),
                "max rel. diff": _significant(worst), "1/Δ_S rel. diff": _significant(factor),
                "tolerance": v.get("summary_rtol", SUMMARY_RTOL) if v else math.nan,
                "first difference": "; ".join(difference_text(r) for r in runs if not r["identical"]),
                "own code": "" if own is None else verification_outcome(own) + (  # where, if not where this code ran
                    f" on {own.get('machine', '?')}" if own.get("machine") != v.get("machine") else ""),
                "changed": "; ".join(self.changed),
                "unverified": ", ".join(self.unverified) if self.checked_before else ""}

    def text(self) -> str:
        """The record's non-empty entries as ``name value`` pairs joined by "; "."""
        return "; ".join(f"{k} {v}" for k, v in self.record().items() if v != "" and not
                         (isinstance(v, float) and math.isnan(v)))


def _significant(x: float, digits: int = 3) -> float:
    """``x`` rounded to ``digits`` significant digits (0, NaN and infinities unchanged)."""
    return x if not math.isfinite(x) or x == 0 else round(x, digits - 1 - math.floor(math.log10(abs(x))))


def machine_text(record: dict) -> str:
    """The machine of a verification record, with its identity when recorded: ``"cpu (Intel Xeon; AVX512,
    torch 2.14.1, identity 0123456789ab)"``, else the recorded device text."""
    m = record.get("machine_id")
    if not m:
        return record["machine"]
    head, detail = record["machine"], f"{m.get('cpu_capability')}, torch {m.get('torch')}, identity {m.get('id')}"
    return f"{head[:-1]}; {detail})" if head.endswith(")") else f"{head} ({detail})"


def verification_outcome(record: dict) -> str:
    """"bit-identical" (every re-run metric equalled the archived one), "within tolerance" (every re-run's
    :func:`summary_cells` agreed within the record's tolerance) or "not reproduced" (neither)."""
    if record.get("identical") is True:
        return "bit-identical"
    return "within tolerance" if record.get("within_tolerance") is True else "not reproduced"


def difference_text(run: dict) -> str:
    """Where a :func:`verify_archive` record's run entry first differed: ``"run-a: train_loss, round 1, archived
    2.319, rel. 2.6e-10"``, or ``"run-a: |diff| 0.5"`` (the largest) without a recorded first difference."""
    d = run.get("first_difference")
    if not d:
        return f"{run['label']}: |diff| {run['max_abs_diff']:.3g}"
    if d.get("round") is None:
        return f"{run['label']}: {d['column']}"
    a, b = float(d["archived"]), float(d["rerun"])
    rel = abs(b - a) / abs(a) if a else abs(b - a)
    return ", ".join([f"{run['label']}: {d['column']}", f"round {d['round']}", f"archived {a:.4g}", f"rel. {rel:.1e}"])


def _device(p: dict) -> str:
    m = p.get("machine", {})
    detail = m.get("cuda_device") or m.get("cpu_model") or m.get("processor") or "unknown machine"
    return f"{m.get('device', '?')} ({detail})"


def label(results: list[RunResult], profile_name: str) -> ArchiveLabel:
    """The provenance label of a profile's archived runs, each folder checked against its manifest now
    (ValueError: ``results`` is empty)."""
    if not results:
        raise ValueError(f"no archived runs of profile {profile_name!r} to label")
    provs = [r.provenance for r in results]
    times = sorted(p["finished_utc"] for p in provs)
    current = provenance.code_hash()
    hashes = sorted({p["code_hash"] for p in provs})
    hashed = {r.path.name: _hashed_files(r.path) for r in results}  # every file hashed once
    changed = [f"{r.path.name}: {c}" for r in results for c in manifest_changes(r.path, hashed[r.path.name])]
    digests = {r.path.name: content_digest(r.path, hashed[r.path.name]) for r in results}
    records = _verifications(profile_name)
    ours = [v for v in records if v.get("code_hash") == current]
    # the newest check of this code (passed or failed) whose contents hold every run's digest now: a record on
    # other bytes, or without some run's digest, never counts; a newer failure is never shadowed by an older pass
    verification = None if changed else next((v for v in reversed(ours) if all(
        (v.get("contents") or {}).get(n) == d for n, d in digests.items())), None)
    newest = (ours[-1].get("contents") or {}) if ours else {}
    unverified = [] if verification is not None else [n for n in sorted(digests) if newest.get(n) != digests[n]]
    return ArchiveLabel(
        profile=profile_name, runs=len(results),
        devices=sorted({_device(p) for p in provs}), first_utc=times[0], last_utc=times[-1],
        commits=sorted({p["commit"][:10] + ("+dirty" if p.get("dirty") else "") for p in provs}),
        code_hashes=hashes, current_code_hash=current, changed=changed, verification=verification,
        unverified=unverified, checked_before=bool(ours),
        own_code_check=next((v for v in reversed(records) if v.get("code_hash") in hashes), None),
        same_code_runs=sum(p["code_hash"] == current for p in provs), labels=[r.config.label() for r in results])


#: File in ``archive_dir()/<profile>/`` recording each verification (:func:`verify_archive`).
VERIFIED = "verified.json"


def _verifications(profile_name: str) -> list[dict]:
    path = archive_dir() / profile_name / VERIFIED
    if not path.is_file():
        return []
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        warnings.warn(f"archive {profile_name}: {VERIFIED} is unreadable ({exc}); ignoring it", stacklevel=2)
        return []


def default_sample(results: list[RunResult], profile_name: str) -> list[RunResult]:
    """Each experiment's cheapest archived run (:func:`maskfed.engine.runner.run_cost`, then lowest seed)."""
    from maskfed.engine.runner import run_cost

    prof = load_profile(profile_name)
    picked: dict = {}
    for e in prof.experiments:
        runs = [r for r in select(results, experiments.configs(prof, e)) if r.path.name not in picked]
        if runs:
            best = min(runs, key=lambda r: (run_cost(r.config), r.config.seed, r.path.name))
            picked[best.path.name] = best
    return list(picked.values())


#: Per-round columns that are measurements of time, not results: left out of the comparison.
TIMING_COLUMNS = ("wall_s",)
#: Relative tolerance (ours, issue 42) within which a re-run's :func:`summary_cells` count as the archived run's:
#: far below the seed spread and the book's printed digits, above float32's relative precision (6e-8).
SUMMARY_RTOL = 1e-6
#: The per-run values the book's Table I and II cells are medians over seeds of (:func:`summary_cells`).
SUMMARY_CELLS = ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat", "test_acc", "share_below_one")


def summary_cells(metrics: pd.DataFrame) -> dict[str, float]:
    """The last-quarter medians of :data:`SUMMARY_CELLS` (:func:`maskfed.analysis.summary.summarize_run`) and
    ``share_below_one``, the fraction of rounds with unweighted 1/Δ_S < 1."""
    from maskfed.analysis import summary

    s = summary.summarize_run(metrics)
    out = {c: s[c] for c in SUMMARY_CELLS if c in s}
    out["share_below_one"] = float((metrics["recovery_unweighted"] < 1).mean())
    return out


def compare_summaries(archived: pd.DataFrame, rerun: pd.DataFrame, rtol: float = SUMMARY_RTOL) -> dict:
    """Compare two metrics tables' :func:`summary_cells`: ``{"within_tolerance": bool, "max_rel_diff": float,
    "worst": cell name or None, "archived": {...}, "rerun": {...}}``; a cell agrees when
    |a − b| <= rtol · max(|a|, |b|) (both NaN agree; one NaN does not: max_rel_diff inf)."""
    a, b = summary_cells(archived), summary_cells(rerun)
    x, y = np.array([a[c] for c in a], float), np.array([b[c] for c in a], float)
    scale = np.maximum(np.abs(x), np.abs(y))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(scale == 0, 0.0, np.abs(x - y) / scale)
    rel = dict(zip(a, np.where(np.isnan(x) & np.isnan(y), 0.0, np.where(np.isnan(x) | np.isnan(y), np.inf, r))))
    worst = max(rel, key=rel.get) if rel else None
    top = rel[worst] if worst else 0.0
    return {"within_tolerance": bool(top <= rtol), "max_rel_diff": float(top), "worst": worst if top > 0 else None,
            "archived": a, "rerun": b}


def same_metrics(a: pd.DataFrame, b: pd.DataFrame) -> tuple[bool, float]:
    """Whether two metrics tables hold the same numbers bit for bit (every column but
    :data:`TIMING_COLUMNS`; NaN equals NaN), and the largest absolute difference (inf when their shapes
    or columns differ)."""
    cols = [c for c in a.columns if c not in TIMING_COLUMNS]
    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        return False, float("inf")
    identical = a[cols].equals(b[cols])
    numeric = [c for c in cols if pd.api.types.is_numeric_dtype(a[c])]
    diff = (a[numeric] - b[numeric]).abs().max().max() if numeric else 0.0
    return bool(identical), float(0.0 if pd.isna(diff) else diff)


def first_difference(archived: pd.DataFrame, rerun: pd.DataFrame) -> dict | None:
    """The first differing cell of two metrics tables, in round then column order (as :func:`same_metrics`):
    ``{"column", "round", "archived", "rerun"}``, or None when they agree (``round`` None when the shapes
    or columns differ)."""
    if list(archived.columns) != list(rerun.columns) or archived.shape != rerun.shape:
        return {"column": f"shape {archived.shape} / {rerun.shape}",  # or other columns
                "round": None, "archived": None, "rerun": None}
    a, b = (t[[c for c in archived.columns if c not in TIMING_COLUMNS]].reset_index(drop=True) for t in (archived, rerun))
    where = np.argwhere(~((a == b) | (a.isna() & b.isna())).to_numpy())  # row-major: round, then column
    if not len(where):
        return None
    i, j = where[0]
    rnd = archived["round"].iloc[i] if "round" in archived.columns else i + 1
    return {"column": a.columns[j], "round": int(rnd), "archived": float(a.iat[i, j]), "rerun": float(b.iat[i, j])}


def verify_archive(profile_name: str, *, labels: list[str] | None = None, workers: int = 1,
                   scratch: Path | None = None, progress: bool = False) -> dict:
    """Re-run a sample of an archive's runs (``labels``, None: :func:`default_sample`) with this checkout's code in
    ``scratch`` (None: a temporary folder), with the archived runs' thread count (``workers`` only if they recorded
    one), compare bit for bit (:func:`same_metrics`, :func:`first_difference`) and to :data:`SUMMARY_RTOL`
    (:func:`compare_summaries`); return the record, also appended whatever the outcome to
    ``archive_dir()/<profile>/verified.json`` with every run's :func:`content_digest` (``contents``).
    ValueError: unknown profile, no archive, or a label not in the archive (naming those it has).
    """
    import torch

    from maskfed.engine import runner

    results = load_archive(profile_name)
    if not results:
        raise ValueError(f"profile {profile_name!r} has no archived runs to verify ({how_to_make(profile_name)})")
    if labels is None:
        sample = default_sample(results, profile_name)
        if not sample:
            raise ValueError(f"none of the {profile_name} archive's runs is a run of the profile's experiments; "
                             f"name the runs to re-run with --runs (it has: {', '.join(sorted(r.config.label() for r in results))})")
    else:
        by_label = {r.config.label(): r for r in results}
        unknown = [x for x in labels if x not in by_label]
        if unknown:
            raise ValueError(f"runs {unknown} are not in the {profile_name} archive; it has: {', '.join(sorted(by_label))}")
        sample = [by_label[x] for x in dict.fromkeys(labels)]
    # float32 sums depend on the thread count: re-run with the threads the archived runs recorded
    threads = {r.provenance.get("machine", {}).get("torch_threads") for r in sample}
    threads = threads.pop() if len(threads) == 1 and None not in threads else None
    own, old, old_threads = scratch is None, os.environ.get("MASKFED_RESULTS_DIR"), torch.get_num_threads()
    try:  # the scratch folder is made inside, so a signal at any point removes it
        scratch = Path(tempfile.mkdtemp(prefix="maskfed-verify-")) if own else Path(scratch)
        os.environ["MASKFED_RESULTS_DIR"] = str(scratch)
        if threads is not None and not (threads == 1 and workers > 1):  # else one-thread workers, as a sweep's
            torch.set_num_threads(threads)
        fresh = runner.run_many([r.config for r in sample], workers=workers if threads == 1 else 1, progress=progress)
    finally:
        torch.set_num_threads(old_threads)
        if old is None:
            os.environ.pop("MASKFED_RESULTS_DIR", None)
        else:
            os.environ["MASKFED_RESULTS_DIR"] = old
        if own and scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    checked = []
    for arch, new in zip(sample, fresh):
        same, diff = same_metrics(arch.metrics, new.metrics)
        near = compare_summaries(arch.metrics, new.metrics)
        changed = manifest_changes(arch.path)
        checked.append({"label": arch.config.label(), "folder": arch.path.name, "identical": same,
                        "max_abs_diff": diff, "first_difference": first_difference(arch.metrics, new.metrics),
                        "within_tolerance": near["within_tolerance"], "summary_max_rel_diff": near["max_rel_diff"],
                        "summary_worst": near["worst"], "summary_archived": near["archived"],
                        "summary_rerun": near["rerun"], "changed_files": changed,
                        "outcome": verification_outcome({"identical": same and not changed,
                                                         "within_tolerance": near["within_tolerance"] and not changed})})
    machine = fresh[0].provenance["machine"]
    record = {"code_hash": provenance.code_hash(), "commit": _commit(), "torch_threads": threads,
              "utc": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds"), "machine": _device({"machine": machine}),
              "machine_id": provenance.machine_identity(machine.get("device", "cpu")),
              "archived_code_hashes": sorted({r.provenance["code_hash"] for r in results}),
              "identical": all(c["identical"] and not c["changed_files"] for c in checked),
              "within_tolerance": all(c["within_tolerance"] and not c["changed_files"] for c in checked),
              "summary_rtol": SUMMARY_RTOL, "runs": checked,
              "contents": {r.path.name: content_digest(r.path) for r in results}}
    record["outcome"] = verification_outcome(record)
    path = archive_dir() / profile_name / VERIFIED
    path.write_text(json.dumps(_verifications(profile_name) + [record], indent=2) + "\n")
    return record


#: A reader's short name for a model that is not the paper's, shown in an archived profile's column header.
MODEL_SHORT = {"small_cnn_gn": "small CNN"}


def column_name(profile_name: str, *, archived: bool = True) -> str:
    """Header of a profile's column in the book's tables: ``"cpu-paper (small CNN, archived)"`` (the model named
    where it is not the paper's ResNet-18-GN, so that a name such as cpu-paper never reads as the paper's setting),
    or the bare name for the live profile; ``paper`` becomes ``"paper profile ..."`` so as not to collide with the
    paper's column."""
    name = f"{profile_name}{' profile' if profile_name == 'paper' else ''}"
    if not archived:
        return name
    model = load_profile(profile_name).base.get("model")
    return f"{name} ({MODEL_SHORT[model]}, archived)" if model in MODEL_SHORT else f"{name} (archived)"


@dataclass
class ArchivedSummary:
    """One archived profile's runs of one experiment, summarised like the live runs."""

    profile: str
    results: list[RunResult]    # the archived runs of the experiment's configurations
    table: pd.DataFrame         # experiments.table1 / table2 of those runs (never pooled with other profiles)
    label: ArchiveLabel         # provenance of those runs
    missing: list[str]          # labels of the experiment's runs the archive lacks
    damaged: list[DamagedFolder] = field(default_factory=list)  # its runs' folders that are malformed (not used)

    def trends(self) -> dict:
        """:func:`maskfed.analysis.uncertainty.trend_counts` of the runs (1/Δ_S over their second half)."""
        return uncertainty.trend_counts(self.results)


def summaries(experiment: str, *, live: str | None = None, profiles: list[str] | tuple[str, ...] | None = None,
              whole: bool = False) -> tuple[list[ArchivedSummary], list[str]]:
    """Archived summaries of ``experiment`` ("table1" or "table2") for each of ``profiles`` (None:
    :data:`BOOK_PROFILES` less ``live``), each profile's runs matched to its own configurations (:func:`select`),
    never pooled. ``whole``: refuse a partial archive (:func:`require_complete`), as the book's chapters do.
    Returns ``(found, notes)``: an :class:`ArchivedSummary` per profile with runs, an :class:`AbsentArchive` per
    profile without any. ValueError: another experiment, or an unknown profile."""
    tables = {"table1": experiments.table1, "table2": experiments.table2}
    if experiment not in tables:
        raise ValueError(f"experiment must be one of {sorted(tables)}; got {experiment!r}")
    if profiles is None:
        profiles = [p for p in BOOK_PROFILES if p != live]
    for name in profiles:
        _check_profile(name)
    found, notes = [], []
    for name in profiles:
        cfgs = experiments.configs(load_profile(name), experiment)
        runs = select(require_complete(name) if whole else load_archive(name), cfgs)
        have = {_what(r.config) for r in runs}
        lacking = [c.label() for c in cfgs if _what(c) not in have]
        damaged = [d for d in damaged_folders(name) if d.label in lacking]
        bad = {d.label for d in damaged}
        if runs:
            found.append(ArchivedSummary(name, runs, tables[experiment](runs), label(runs, name),
                                         [x for x in lacking if x not in bad], damaged))
        else:
            notes.append(AbsentArchive(name, experiment, damaged))
    return found, notes


@dataclass
class AbsentArchive:
    """A profile without an archived run of an experiment's settings (:func:`summaries`)."""

    profile: str
    experiment: str               # "table1" or "table2"
    damaged: list[DamagedFolder]  # its folders of those settings that cannot be read back

    @property
    def status(self) -> str:
        """"damaged" when some of its folders exist but cannot be read back, else "not archived"."""
        return "damaged" if self.damaged else "not archived"


def archive_table(found: list[ArchivedSummary], notes: list[AbsentArchive] = ()) -> pd.DataFrame:
    """The provenance of a book table's archived columns, one row per profile (``found``, then ``notes``),
    indexed by :func:`column_name`: :meth:`ArchiveLabel.record`, ``rounds``, ``seeds``, the trend counts
    (:meth:`ArchivedSummary.trends`), ``missing`` runs, ``damaged`` folders and ``make with`` (for a damaged or
    absent archive); a profile without runs has ``runs`` 0. A column empty (or NaN) in every row is left out."""
    rows = {}
    for a in found:
        rows[column_name(a.profile)] = {
            **a.label.record(), "rounds": max(r.config.rounds for r in a.results),
            "seeds": len({r.config.seed for r in a.results}),
            **{k: v for k, v in a.trends().items() if k != "runs"}, "missing": ", ".join(a.missing),
            "damaged": "; ".join(d.text() for d in a.damaged), "make with": how_to_make(a.profile) if a.damaged else ""}
    for n in notes:
        rows[column_name(n.profile)] = {"runs": 0, "status": n.status,
                                        "damaged": "; ".join(d.text() for d in n.damaged), "make with": how_to_make(n.profile)}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "archive"
    for col in ("runs", "rounds", "seeds", "falling", "flat", "rising", "too short", "re-run", "re-run here",
                "re-run other"):
        if col in table:
            table[col] = table[col].astype("Int64")
    table = table.fillna({c: "" for c in table.columns if table[c].dtype == object})
    empty = [c for c in table.columns if table[c].map(lambda v: isinstance(v, str) and v == "" or pd.isna(v)).all()]
    return table.drop(columns=empty)


# --------------------------------------------------------------------------- archived studies

#: Folder of a profile's archived stage study: ``archive_dir()/<profile>/STAGE_DIR/``, and its files.
STAGE_DIR = "stage"
STAGE_FILES = ("table.csv", "checkpoints.csv", "accuracy.csv", "spec.json", "provenance.json")


@dataclass
class ArchivedStudy:
    """A stage study kept in the archive (:func:`archive_stage_study`), as the stage chapter reads it."""

    profile: str
    table: pd.DataFrame        # StageStudy.table: one row per (seed, experiment, stage, protocol)
    checkpoints: pd.DataFrame  # seed, stage, round, test_acc, test_loss
    accuracy: pd.DataFrame     # seed, round, test_acc, test_loss: every candidate round of each ladder
    spec: "stage.StageSpec"
    provenance: dict           # code hashes, commit, machine, wall time, trajectories
    changed: list[str] = field(default_factory=list)  # its files that differ from its manifest (manifest_changes)


def ladder_trajectories(profile_name: str) -> dict[int, Path]:
    """``{seed: archived run folder}`` of the stage-ladder run (:func:`maskfed.studies.stage.ladder_config`)
    at each profile seed that the archive holds with θ snapshots."""
    from maskfed.engine import runner
    from maskfed.studies import stage

    prof = load_profile(profile_name)
    runs = load_archive(profile_name)
    found = {s: select(runs, [stage.ladder_config(prof, s)]) for s in prof.seeds}
    return {s: f[0].path for s, f in found.items() if f and (f[0].path / runner.THETAS).is_file()}


def _commit() -> str:
    git = provenance.git_state()
    return git["commit"][:10] + ("+dirty" if git["dirty"] else "")


def _study_provenance(profile_name: str, t0: float, hashes: dict, device: str = "cpu", **extra) -> dict:
    """The provenance record of an archived study (``t0``: its ``time.perf_counter()`` start): profile, run code
    hash and ``hashes`` (``{key: modules}`` for :func:`maskfed.provenance.code_hash_with`), commit, packages,
    machine, ``extra``, wall time and the finishing time."""
    return {"profile": profile_name, "code_hash": provenance.code_hash(),
            **{k: provenance.code_hash_with(*m) for k, m in hashes.items()}, "commit": _commit(),
            "packages": provenance.package_versions(), "machine": provenance.machine(device), **extra,
            "wall_s": time.perf_counter() - t0,
            "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _keep_study(dest: Path, csvs: dict[str, pd.DataFrame], spec, prov: dict, copies: dict | None = None) -> Path:
    """Write a study folder ``dest`` (``csvs``: ``{file name: frame}``, ``spec.json``, ``provenance.json`` and
    ``copies``: ``{file name: source path}``) through a temporary name (:func:`install`)."""
    clean_leftovers(dest.parent)
    tmp = _scratch(dest)
    for name, frame in csvs.items():
        frame.to_csv(tmp / name, index=False)
    (tmp / "spec.json").write_text(spec.model_dump_json(indent=2))
    (tmp / "provenance.json").write_text(json.dumps(prov, indent=2))
    for name, src in (copies or {}).items():
        shutil.copy2(src, tmp / name)
    install(tmp, dest)
    return dest


def _load_study(profile_name: str, root: Path, files: tuple, what: str, read):
    """``read(root)`` of a profile's archived study folder ``root``, or None when there is none; a folder
    missing one of ``files`` or failing to read is skipped with a :class:`UserWarning` naming ``what``."""
    _check_profile(profile_name)
    if not root.is_dir():
        return None
    try:
        _require(root, files)
        return read(root)
    except (ValueError, TypeError, OSError, pd.errors.ParserError) as exc:
        warnings.warn(f"archive {profile_name}: skipping malformed {what} {root.name}: {exc}", stacklevel=3)
        return None


def archive_stage_study(profile_name: str, *, workers: int | None = None, progress: bool = True) -> Path:
    """Run the stage study (:func:`maskfed.studies.stage.run_study`) on a profile's archived ladder trajectories
    (:func:`ladder_trajectories`) and keep it in ``archive_dir()/<profile>/stage/`` (:data:`STAGE_FILES`),
    replacing an older one. ValueError: the archive holds no ladder run with θ snapshots."""
    from maskfed.studies import stage

    trajectories = ladder_trajectories(profile_name)
    if not trajectories:
        raise ValueError(f"the {profile_name} archive holds no stage-ladder run with θ snapshots "
                         f"({how_to_make(profile_name)} keeps them)")
    spec = stage.make_spec(profile_name)
    t0 = time.perf_counter()
    study = stage.run_study(load_profile(profile_name), spec, workers=workers, progress=progress,
                            seeds=sorted(trajectories), trajectories=trajectories)
    checkpoints = pd.concat([ld.checkpoints.assign(seed=s) for s, ld in study.ladders.items()])
    accuracy = pd.concat([ld.accuracy.assign(seed=s) for s, ld in study.ladders.items()])
    prov = _study_provenance(profile_name, t0, {"stage_code_hash": stage.STAGE_MODULES},
                             trajectories={str(s): p.name for s, p in trajectories.items()})
    return _keep_study(archive_dir() / profile_name / STAGE_DIR, {
        "table.csv": study.table, "checkpoints.csv": checkpoints[["seed", "stage", "round", "test_acc", "test_loss"]],
        "accuracy.csv": accuracy[["seed", "round", "test_acc", "test_loss"]]}, spec, prov)


def load_stage_study(profile_name: str) -> ArchivedStudy | None:
    """A profile's archived stage study, or None when there is none (a malformed one is skipped
    with a :class:`UserWarning` naming the reason)."""
    from maskfed.studies import stage

    root = archive_dir() / profile_name / STAGE_DIR
    return _load_study(profile_name, root, STAGE_FILES, "stage study", lambda root: ArchivedStudy(
        profile_name, pd.read_csv(root / "table.csv", dtype={"batch_size": str}),
        pd.read_csv(root / "checkpoints.csv"), pd.read_csv(root / "accuracy.csv"),
        stage.StageSpec(**json.loads((root / "spec.json").read_text())),
        json.loads((root / "provenance.json").read_text()), [f"{STAGE_DIR}/: {c}" for c in manifest_changes(root)]))


# --------------------------------------------------------------------------- the α-cross of the stage study

#: Folder of a profile's archived α-cross (:func:`archive_alpha_cross`) and its files (small CSV and JSON).
CROSS_DIR = "stage-cross"
CROSS_FILES = ("table.csv", "checkpoints.csv", "spec.json", "provenance.json")


def alpha_trajectories(profile_name: str, *, workers: int = 2,
                       progress: bool = True) -> tuple[dict[float, dict[int, Path]], dict[str, str]]:
    """``({α: {seed: run folder with θ snapshots}}, report)`` for every Table II α's trajectory
    (:func:`maskfed.studies.stage.ladder_config`; ValueError: the archive lacks one). A run without ``thetas.pt`` is
    rerun keeping θ; if bit-identical (:func:`same_metrics`) its ``thetas.pt`` joins the archive (manifest rewritten),
    else the rerun is the trajectory. ``report``: folder -> "kept" (or an earlier α-cross's entry), "rerun
    identical", or ``{"outcome": "rerun differs", "max_abs_diff", "round", "column"}``.
    """
    from maskfed.engine import runner
    from maskfed.studies import stage

    prof = load_profile(profile_name)
    spec = stage.make_spec(profile_name)
    keep = spec.candidate_rounds if spec.candidate_rounds is not None else spec.candidate_every
    runs = load_archive(profile_name)
    earlier = load_alpha_cross(profile_name)
    earlier = {} if earlier is None else earlier.provenance.get("reproduction", {})
    out: dict[float, dict[int, Path]] = {a: {} for a in prof.table2.alphas}
    todo: dict[RunConfig, tuple[float, int, RunResult]] = {}
    report = {}
    for a in prof.table2.alphas:
        for s in prof.seeds:
            cfg = stage.ladder_config(prof, s, a)
            found = select(runs, [cfg])
            if not found:
                raise ValueError(f"the {profile_name} archive lacks the run {cfg.label()} ({how_to_make(profile_name)})")
            if (found[0].path / runner.THETAS).is_file():
                out[a][s] = found[0].path
                report[found[0].path.name] = earlier.get(found[0].path.name, "kept")
            else:
                todo[cfg] = (a, s, found[0])
    reruns = runner.run_many(list(todo), workers=workers, progress=progress,
                             keep_every={c: keep for c in todo}) if todo else []
    for (a, s, arch), rerun in zip(todo.values(), reruns):
        same, diff = same_metrics(arch.metrics, rerun.metrics)
        if same:  # bit for bit: its θ joins the archived folder
            shutil.copy2(rerun.path / runner.THETAS, arch.path / runner.THETAS)
            write_manifest(arch.path)
            out[a][s], report[arch.path.name] = arch.path, "rerun identical"
        else:
            d = first_difference(arch.metrics, rerun.metrics) or {}
            out[a][s] = rerun.path
            report[arch.path.name] = {"outcome": "rerun differs", "max_abs_diff": diff,
                                      "round": d.get("round"), "column": d.get("column")}
    return out, report


def archive_alpha_cross(profile_name: str, *, workers: int = 2, progress: bool = True) -> Path:
    """Measure Table II's α at θ from every α's trajectory (:func:`alpha_trajectories`; the stage study's
    settings) and keep it in ``archive_dir()/<profile>/stage-cross/`` (:data:`CROSS_FILES`), replacing an older
    one. ValueError: the archive lacks a Table II run."""
    from maskfed.studies import stage

    t0 = time.perf_counter()
    prof = load_profile(profile_name)
    spec = stage.make_spec(profile_name)
    trajectories, report = alpha_trajectories(profile_name, workers=workers, progress=progress)
    tables, ckpts = [], []
    for a, traj in trajectories.items():
        st = stage.run_study(prof, spec, workers=workers, progress=progress, seeds=sorted(traj), trajectories=traj,
                             ladder_alpha=a, experiments=("table2",))
        tables.append(st.table.assign(trajectory_alpha=a))
        ckpts.append(pd.concat([ld.checkpoints.assign(seed=s) for s, ld in st.ladders.items()]).assign(trajectory_alpha=a))
    prov = _study_provenance(profile_name, t0, {"stage_code_hash": stage.STAGE_MODULES}, reproduction=report,
                             trajectories={f"{a:g}": {str(s): p.name for s, p in t.items()} for a, t in trajectories.items()})
    cols = ["trajectory_alpha", "seed", "stage", "round", "test_acc", "test_loss"]
    return _keep_study(archive_dir() / profile_name / CROSS_DIR,
                       {"table.csv": pd.concat(tables), "checkpoints.csv": pd.concat(ckpts)[cols]}, spec, prov)


@dataclass
class ArchivedCross:
    """An archived α-cross (:func:`archive_alpha_cross`)."""

    profile: str
    table: pd.DataFrame         # the stage table's columns and trajectory_alpha
    checkpoints: pd.DataFrame   # trajectory_alpha, seed, stage, round, test_acc, test_loss
    provenance: dict
    changes: list[str]          # files that differ from the manifest


def load_alpha_cross(profile_name: str) -> ArchivedCross | None:
    """A profile's archived α-cross, or None when there is none (a malformed one is skipped with a
    :class:`UserWarning` naming the reason)."""
    root = archive_dir() / profile_name / CROSS_DIR
    return _load_study(profile_name, root, CROSS_FILES, "α-cross", lambda root: ArchivedCross(
        profile_name, pd.read_csv(root / "table.csv", dtype={"batch_size": str}), pd.read_csv(root / "checkpoints.csv"),
        json.loads((root / "provenance.json").read_text()), [f"{CROSS_DIR}/: {c}" for c in manifest_changes(root)]))


# --------------------------------------------------------------------------- archived factor studies

#: Files of an archived model-size study (:func:`archive_factor_study`), all small CSV and JSON.
FACTOR_FILES = ("table.csv", "checkpoints.csv", "accuracy.csv", "spec.json", "provenance.json")
#: Files of a model's own FedAvg trajectory kept with a model-size study (its run folder but ``thetas.pt``),
#: each named with :data:`TRAJECTORY_PREFIX` (``trajectory-metrics.csv``, ...).
TRAJECTORY_FILES = ("config.json", "metrics.csv", "partition.json", "provenance.json")
TRAJECTORY_PREFIX = "trajectory-"
#: Name prefix of the folders of a profile's archived model-size studies (never run folders).
FACTOR_PREFIX = "factor-"


def factor_dir(profile_name: str, part: str) -> Path:
    """Folder of a profile's archived model-size study ``part``: ``archive_dir()/<profile>/factor-<part>/``."""
    return archive_dir() / profile_name / f"{FACTOR_PREFIX}{part}"


@dataclass
class ArchivedFactor:
    """A model-size study kept in the archive, as the chapter "What sets the recovery factor?" reads it."""

    profile: str
    part: str                  # "models" (the small CNN's widths) or "resnet" (ResNet-18-GN)
    table: pd.DataFrame        # factor_axes.ModelStudy.table
    checkpoints: pd.DataFrame  # factor_axes.ModelStudy.checkpoints
    accuracy: pd.DataFrame     # factor_axes.ModelStudy.accuracy
    spec: "factor_axes.ModelStudySpec"
    provenance: dict           # code hashes, commit, machine, packages, wall and compute time, trajectory, settings
    changed: list[str] = field(default_factory=list)  # its files that differ from its manifest (manifest_changes)
    trajectory: pd.DataFrame | None = None  # metrics.csv of a model's own FedAvg trajectory (TRAJECTORY_FILES), if kept

    def record(self) -> dict:
        """The study's provenance as values (``compute h``: hours of compute in all; ``wall h``: of the last command)."""
        p = self.provenance
        return {"finished": p["finished_utc"][:10], "device": _device({"machine": p["machine"]}),
                "commit": p["commit"], "run code": p["code_hash"], "this code": provenance.code_hash(),
                "code changed": p["code_hash"] != provenance.code_hash(), "compute h": p["compute_s"] / 3600,
                "wall h": p["wall_s"] / 3600, "changed": "; ".join(self.changed)}


def archive_factor_study(profile_name: str, part: str, *, workers: int = 2, progress: bool = True,
                         all_protocols: bool = False, data_path: str | None = None,
                         own_trajectories=()) -> Path:
    """Compute a profile's model-size study ``part`` (:func:`maskfed.studies.factor_axes.model_study`; cached,
    resumable) and keep it in :func:`factor_dir` (:data:`FACTOR_FILES`), replacing an older one. "fedavg" θ from the
    first seed's archived ladder (:func:`ladder_trajectories`), else ``results/runs``; a model's own trajectory is
    kept without θ (:data:`TRAJECTORY_FILES`). ConfigError: a profile or part without a study; ValueError: the
    study has more than one trajectory of its own.
    """
    from maskfed.studies import central, factor_axes, pool_gram
    from maskfed.engine import runner

    spec = factor_axes.model_spec(profile_name, part, all_protocols=all_protocols)
    prof = load_profile(profile_name, data_path=data_path)
    trajectory = ladder_trajectories(profile_name).get(prof.seeds[0]) if any(
        m.source == "fedavg" for m in spec.models) else None
    t0 = time.perf_counter()
    study = factor_axes.model_study(prof, spec, trajectory=trajectory, workers=workers, progress=progress,
                                    own_trajectories=own_trajectories)
    if len(study.own_trajectories) > 1:
        raise ValueError(f"a factor study keeps one trajectory of its own; {part} has {len(study.own_trajectories)}")
    prov = _study_provenance(profile_name, t0, {"gram_code_hash": pool_gram.GRAM_MODULES,
                                                "central_code_hash": central.CENTRAL_MODULES},
                             str(runner.resolve_device(prof.run(prof.seeds[0]).device)), part=part, workers=workers,
                             trajectory=None if trajectory is None else trajectory.name, compute_s=study.compute_s)
    # the run's record without its θ (45 MB each for ResNet-18-GN); an unfinished run has no partition.json
    copies = {f"{TRAJECTORY_PREFIX}{f}": d / f for d in study.own_trajectories for f in TRAJECTORY_FILES
              if (d / f).is_file()}
    return _keep_study(factor_dir(profile_name, part), {"table.csv": study.table, "checkpoints.csv": study.checkpoints,
                                                        "accuracy.csv": study.accuracy}, spec, prov, copies)


def load_factor_study(profile_name: str, part: str) -> ArchivedFactor | None:
    """A profile's archived model-size study ``part``, or None when there is none (a malformed one
    is skipped with a :class:`UserWarning` naming the folder and the reason)."""
    from maskfed.studies import factor_axes

    def read(root: Path) -> ArchivedFactor:
        prov = json.loads((root / "provenance.json").read_text())
        absent = [k for k in ("code_hash", "commit", "machine", "finished_utc", "wall_s", "compute_s") if k not in prov]
        if absent:
            raise ValueError(f"provenance.json lacks {absent}")
        table = pd.read_csv(root / "table.csv", dtype={"batch_size": str})
        lacking = [c for c in ("model", "width", "params", "source", "target", "test_acc", "batch_size",
                               "local_epochs", "recovery_unweighted") if c not in table.columns]
        if lacking:
            raise ValueError(f"table.csv lacks columns {lacking}")
        own = root / f"{TRAJECTORY_PREFIX}metrics.csv"
        return ArchivedFactor(profile_name, part, table, pd.read_csv(root / "checkpoints.csv"),
                              pd.read_csv(root / "accuracy.csv"),
                              factor_axes.ModelStudySpec(**json.loads((root / "spec.json").read_text())), prov,
                              [f"{root.name}/: {c}" for c in manifest_changes(root)],
                              pd.read_csv(own) if own.is_file() else None)

    return _load_study(profile_name, factor_dir(profile_name, part), FACTOR_FILES, "factor study", read)
