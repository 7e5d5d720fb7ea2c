"""Where the project keeps its data cache, run results and the shared data.

Each location can be moved with an environment variable. A relative value means the working
directory of the command given it: the commands make it absolute (:func:`absolute_env`) before
they start workers or notebook kernels.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (this file is ``<root>/src/maskfed/paths.py``).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: The environment variables that name a folder or file.
PATH_VARIABLES = ("MASKFED_CACHE_DIR", "MASKFED_RESULTS_DIR", "MASKFED_ARCHIVE_DIR", "MASKFED_SHARED_ARCHIVE")


#: Where each of :data:`PATH_VARIABLES` points when it is not set.
DEFAULTS = {"MASKFED_CACHE_DIR": REPO_ROOT / ".cache", "MASKFED_RESULTS_DIR": REPO_ROOT / "results",
            "MASKFED_ARCHIVE_DIR": REPO_ROOT / "results" / "archive",
            "MASKFED_SHARED_ARCHIVE": REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.gz"}


class EmptyPathVariable(ValueError):
    """A path variable set to the empty string (or blanks), refused rather than read as the
    current directory."""

    def __init__(self, name: str, default: Path):
        what = "file" if name == "MASKFED_SHARED_ARCHIVE" else "folder"
        super().__init__(f"{name} is set but empty; unset it to use {default} or set it to a {what}")
        self.name = name


def env_path(name: str, default: Path) -> Path:
    """``$name`` as an absolute path (``~`` expanded; relative to the current directory), or ``default``.

    Raises:
        EmptyPathVariable: ``$name`` is set to the empty string (or only blanks).
    """
    value = os.environ.get(name)
    if value is None:
        return default
    if not value.strip():
        raise EmptyPathVariable(name, default)
    return Path(value).expanduser().absolute()


def absolute_env() -> None:
    """Rewrite each set :data:`PATH_VARIABLES` entry in ``os.environ`` to its absolute form, so
    the processes this one starts (workers, papermill kernels) read the same folders.

    Raises:
        EmptyPathVariable: one of them is set to the empty string (checked before any is rewritten).
    """
    for name in PATH_VARIABLES:
        env_path(name, DEFAULTS[name])
    for name in PATH_VARIABLES:
        if os.environ.get(name) is not None:
            os.environ[name] = str(env_path(name, DEFAULTS[name]))


def cache_dir() -> Path:
    """Decoded-data cache: ``$MASKFED_CACHE_DIR`` or ``<repo>/.cache``."""
    return env_path("MASKFED_CACHE_DIR", DEFAULTS["MASKFED_CACHE_DIR"])


def results_dir() -> Path:
    """Run folders: ``$MASKFED_RESULTS_DIR`` or ``<repo>/results``."""
    return env_path("MASKFED_RESULTS_DIR", DEFAULTS["MASKFED_RESULTS_DIR"])


def shared_archive() -> Path:
    """The offline CIFAR-10 archive: ``$MASKFED_SHARED_ARCHIVE`` or
    ``../shared/data/cifar10-jpeg.tar.gz`` beside the checkout."""
    return env_path("MASKFED_SHARED_ARCHIVE", DEFAULTS["MASKFED_SHARED_ARCHIVE"])
