"""Where the project keeps its data cache, run results and the shared data.

Every location can be moved with an environment variable, so a reader can put
the (large, git-ignored) cache and results wherever there is space. A relative
value means the working directory of the command that was given it, everywhere:
the commands rewrite it to its absolute form (:func:`absolute_env`) before they
start worker processes or notebook kernels (which run in ``notebooks/``).
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (this file is ``<root>/src/maskfed/paths.py``).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: The environment variables that name a folder or file.
PATH_VARIABLES = ("MASKFED_CACHE_DIR", "MASKFED_RESULTS_DIR", "MASKFED_ARCHIVE_DIR", "MASKFED_SHARED_ARCHIVE")


def env_path(name: str, default: Path) -> Path:
    """``$name`` as an absolute path (``~`` expanded; relative to the current directory), or ``default``."""
    value = os.environ.get(name)
    return default if value is None else Path(value).expanduser().absolute()


def absolute_env() -> None:
    """Rewrite each of :data:`PATH_VARIABLES` that is set to a relative path (or ``~``) to its
    absolute form against the current directory, in ``os.environ``: the processes this one
    starts (workers, papermill's kernels in ``notebooks/``) then read the same folders."""
    for name in PATH_VARIABLES:
        if os.environ.get(name) is not None:
            os.environ[name] = str(env_path(name, REPO_ROOT))


def cache_dir() -> Path:
    """Decoded-data cache: ``$MASKFED_CACHE_DIR`` or ``<repo>/.cache``."""
    return env_path("MASKFED_CACHE_DIR", REPO_ROOT / ".cache")


def results_dir() -> Path:
    """Run folders: ``$MASKFED_RESULTS_DIR`` or ``<repo>/results``."""
    return env_path("MASKFED_RESULTS_DIR", REPO_ROOT / "results")


def shared_archive() -> Path:
    """The offline CIFAR-10 archive beside the checkout: ``../shared/data/cifar10-jpeg.tar.gz``.

    ``$MASKFED_SHARED_ARCHIVE`` overrides it (tests use this to hide it).
    """
    return env_path("MASKFED_SHARED_ARCHIVE", REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.gz")
