"""Where the project keeps its data cache, run results and the shared data.

Every location can be moved with an environment variable, so a reader can put
the (large, git-ignored) cache and results wherever there is space.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (this file is ``<root>/src/maskfed/paths.py``).
REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Decoded-data cache: ``$MASKFED_CACHE_DIR`` or ``<repo>/.cache``."""
    return Path(os.environ.get("MASKFED_CACHE_DIR", REPO_ROOT / ".cache"))


def results_dir() -> Path:
    """Run folders: ``$MASKFED_RESULTS_DIR`` or ``<repo>/results``."""
    return Path(os.environ.get("MASKFED_RESULTS_DIR", REPO_ROOT / "results"))


def shared_archive() -> Path:
    """The offline CIFAR-10 archive beside the checkout: ``../shared/data/cifar10-jpeg.tar.gz``.

    ``$MASKFED_SHARED_ARCHIVE`` overrides it (tests use this to hide it).
    """
    default = REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.gz"
    return Path(os.environ.get("MASKFED_SHARED_ARCHIVE", default))
