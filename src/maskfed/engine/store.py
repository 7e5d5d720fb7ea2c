"""The result store: the key, the finished test and the provenance record of every cached computation
that is not a run (ladders and stage measurements, Gram measurements, centralised trajectories, the
measured-penalty table); a run's folder is :mod:`maskfed.engine.runner`'s, keyed by its config.

A cached result lives in ``results_dir()/<kind>/<name>-<key>``. Its key (:func:`result_key`) hashes
the computation's settings, the source of the code that computes it (the run code plus the modules
named, :func:`maskfed.provenance.code_hash_with`) and the data fingerprint
(:func:`maskfed.engine.runner.data_fingerprint`), so a change to any of them computes it anew. A folder
is finished once its ``provenance.json`` exists (:func:`is_finished`): every file is written in one
atomic folder write (:func:`maskfed.engine.checkpoint.write_folder`) with the record of
:func:`result_provenance` among them.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from maskfed import provenance
from maskfed.engine import runner

#: The file whose presence marks a finished result folder.
PROVENANCE = "provenance.json"


def result_key(settings: dict, modules: Sequence[str], images) -> str:
    """The cache key of a computation: 16 hex digits of SHA-256 over ``settings`` (JSON, keys sorted,
    anything else as ``str``), the code hash of the run code plus ``modules`` and the data fingerprint.

    Args:
        settings: what the result depends on besides code and data (config key, θ digest, pool, ...);
            must not use the names "code" and "data".
        modules: dotted ``maskfed`` module names whose source enters the key ("studies.stage").
        images: the run's images (:func:`maskfed.engine.runner.images_for`).

    Raises:
        ValueError: ``settings`` uses "code" or "data". FileNotFoundError: an unknown module.
    """
    if {"code", "data"} & set(settings):
        raise ValueError(f"settings must not use the names 'code' or 'data'; got {sorted(settings)}")
    full = {**settings, "code": provenance.code_hash_with(*modules), "data": runner.data_fingerprint(images)}
    return hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_finished(path: Path) -> bool:
    """Whether the result folder ``path`` is finished (its ``provenance.json`` exists)."""
    return (Path(path) / PROVENANCE).exists()


def result_provenance(*, modules: Sequence[str], code_field: str, device: str, images, t0: float,
                      wall_before: float = 0.0, **fields) -> dict:
    """The ``provenance.json`` record of a finished computation.

    Args:
        modules: the modules of its key (:func:`result_key`); their code hash is stored as ``code_field``.
        code_field: the record's name for that hash ("stage_code_hash").
        device: where it ran ("cpu", "cuda:0"), for :func:`maskfed.provenance.machine`.
        images: the run's images (data source and fingerprint fields).
        t0: ``time.perf_counter()`` when this attempt started; wall_before: seconds of earlier attempts.
        fields: further entries (seed, key, what θ was ...), placed after the code and before the machine.

    Returns:
        ``{**fields, code_hash, <code_field>, git state, packages, machine, data_source, fingerprint
        fields, wall_s, finished_utc}``.
    """
    return {**fields, "code_hash": provenance.code_hash(), code_field: provenance.code_hash_with(*modules),
            **provenance.git_state(), "packages": provenance.package_versions(), "machine": provenance.machine(device),
            "data_source": images.source, **runner.fingerprint_fields(images),
            "wall_s": wall_before + time.perf_counter() - t0,
            "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
