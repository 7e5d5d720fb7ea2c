"""Check everything about a list of runs that can be checked before any training starts.

Single fields are validated in :mod:`maskfed.engine.config`; here: the data can be found and read,
each subset fits its split, each run's partition can be drawn (:mod:`maskfed.engine.partition`) and
its device exists. Training builds these with the same functions, so a run that passes here does not
fail on them later.
"""

from __future__ import annotations

import os
from pathlib import Path

from maskfed.engine import cohort, runner
from maskfed.engine.config import ConfigError, RunConfig


def check_runs(cfgs: list[RunConfig]) -> None:
    """Resolve each run's data, split, partition and device, without training (each data source
    read once, each distinct partition drawn once).

    Raises:
        FileNotFoundError, DataUnavailableError, maskfed.engine.data.DataReadError: the data cannot be
            found or read (naming the file and what was expected).
        ConfigError: the results folder cannot be written, or a run's subsets, number of clients,
            partition or device cannot work with its data (starting with the run's label).
    """
    check_writable(runner.results_dir() / "runs", "MASKFED_RESULTS_DIR")
    drawn: set[tuple] = set()
    for cfg in cfgs:
        images = runner.images_for(cfg)
        key = (cfg.dataset, cfg.data_path, cfg.synthetic_train, cfg.synthetic_test, cfg.train_subset,
               cfg.test_subset, cfg.num_clients, cfg.partition, cfg.alpha, cfg.seed)
        try:
            cohort.check_precision(cfg.precision, runner.resolve_device(cfg.device))
            if key not in drawn:
                _x_tr, y_tr, _x_te, _y_te = runner.split_images(cfg, images)
                runner.partition_for(cfg, y_tr)
                drawn.add(key)
        except ValueError as exc:
            raise ConfigError(f"run {cfg.label()}: {exc}") from exc


def check_writable(folder: Path, env: str) -> None:
    """Refuse a folder that cannot be created or written (checked without creating it).

    Raises:
        ConfigError: naming the folder, the environment variable that moves it, and why.
    """
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{folder} cannot be created: {existing} is not a folder; set {env} to a writable folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{folder} cannot be written ({existing} is not writable); set {env} to a writable folder")
