"""The decoded-data cache ``cache_dir()/"data"/<key>.pt`` (:func:`maskfed.engine.data.load_cifar10`):
list its files and remove the stale ones (``maskfed cache --list`` / ``--prune``).

A cache file is *live* while its source still exists and still maps to the file's key (same path,
size and modification time, same cache format). Any other file (source gone or changed, older
format, unreadable) can never be loaded again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch

from maskfed import paths
from maskfed.engine import data as data_mod


@dataclass(frozen=True)
class CacheEntry:
    """One file of the decoded-data cache.

    Attributes:
        path: the ``.pt`` file.
        size_bytes: its size.
        modified: its last modification time (local time).
        source: the source path it was decoded from (``None``: not recorded or unreadable).
        decoded_utc: when it was written (ISO 8601, UTC; ``None`` if not recorded).
        status: ``"live"``, ``"source missing"``, ``"source changed"`` (the source no longer maps to
            this key), ``"old format"`` or ``"unreadable (<why>)"``.
    """

    path: Path
    size_bytes: int
    modified: datetime
    source: str | None
    decoded_utc: str | None
    status: str

    @property
    def live(self) -> bool:
        return self.status == "live"

    @property
    def size_mb(self) -> float:
        """The size in MB (10**6 bytes)."""
        return self.size_bytes / 1e6


def folder() -> Path:
    """The cache's folder: ``cache_dir()/"data"``."""
    return paths.cache_dir() / "data"


def entries() -> list[CacheEntry]:
    """Every ``.pt`` file of the cache, by name, with its source and status (tensors memory-mapped,
    not read)."""
    where = folder()
    if not where.is_dir():
        return []
    return [_entry(f) for f in sorted(where.glob("*.pt"))]


def _entry(f: Path) -> CacheEntry:
    st = f.stat()
    modified = datetime.fromtimestamp(st.st_mtime)
    try:
        record = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
        if not isinstance(record, dict):
            raise TypeError(f"holds a {type(record).__name__}, not a dict")
    except Exception as exc:
        why = " ".join(str(exc).split())[:120] or type(exc).__name__
        return CacheEntry(f, st.st_size, modified, None, None, f"unreadable ({type(exc).__name__}: {why})")
    source, kind = record.get("source_path"), record.get("source_kind")
    decoded_utc = record.get("decoded_utc")
    if record.get("format") != data_mod.CACHE_FORMAT or not source or kind not in ("archive", "image_folder"):
        return CacheEntry(f, st.st_size, modified, source, decoded_utc, "old format")
    p = Path(source)
    if not p.exists():
        status = "source missing"
    else:
        try:
            status = "live" if data_mod.cache_key(p, kind) == f.stem else "source changed"
        except OSError as exc:  # a source that cannot be listed any more
            status = f"source changed ({exc})"
    return CacheEntry(f, st.st_size, modified, source, decoded_utc, status)


def list_text(found: list[CacheEntry] | None = None) -> str:
    """``maskfed cache --list``: one line per file (name, MB, status, source, decoded, modified),
    then the total."""
    found = entries() if found is None else found
    if not found:
        return f"the decoded-data cache {folder()} holds no files"
    lines = [f"{e.path.name}  {e.size_mb:8.1f} MB  {e.status}  source: {e.source or '(not recorded)'}  "
             f"decoded: {e.decoded_utc or '(not recorded)'}  modified: {e.modified:%Y-%m-%d %H:%M:%S}"
             for e in found]
    live = sum(e.live for e in found)
    total = sum(e.size_mb for e in found)
    lines.append(f"{len(found)} file(s) in {folder()}, {total:.1f} MB; {live} live, {len(found) - live} stale "
                 "(`maskfed cache --prune` removes the stale ones)")
    return "\n".join(lines)


def prune(every: bool = False) -> list[CacheEntry]:
    """Remove the cache files that no load can use any more (every file but the live ones), or
    every file with ``every=True``.

    Returns:
        The removed entries.
    """
    removed = []
    for e in entries():
        if e.live and not every:
            continue
        try:
            os.unlink(e.path)
        except FileNotFoundError:  # removed meanwhile (another prune)
            continue
        removed.append(e)
    return removed


def prune_text(removed: list[CacheEntry]) -> str:
    """What :func:`prune` removed, one line per file, and the MB freed."""
    lines = [f"removed {e.path.name}  {e.size_mb:.1f} MB  ({e.status}; source: {e.source or '(not recorded)'})"
             for e in removed]
    lines.append(f"removed {len(removed)} file(s) from {folder()}, {sum(e.size_mb for e in removed):.1f} MB freed")
    return "\n".join(lines)
