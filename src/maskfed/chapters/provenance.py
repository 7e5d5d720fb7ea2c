"""Findings of the appendix "Provenance" (``notebooks/provenance.md``): where every run of a build came from.

:func:`findings` runs (or reuses) every run the profile's chapters use and returns them with the page's
frames: whose setting each run setting is (:func:`settings_table`), the runs' provenance, the first run's
environment, the configurations (shared settings and the fields that vary), and one section per archived
profile (:func:`archived_sections`); the page's sentences are its Markdown's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from maskfed import book
from maskfed.engine import runner
from maskfed.engine.config import Profile, load_profile
from maskfed.studies import archive, experiments

#: The run table's columns shown at once; the rest (commit, code hash, versions, device, data) are in the box.
RUN_MAIN = ["seed", "rounds", "wall_s", "finished_utc"]

#: What the first run's environment shows, from its provenance.json.
ENVIRONMENT = ("commit", "dirty", "code_hash", "packages", "machine", "data_source", "data_fingerprint")


@dataclass(frozen=True)
class Findings:
    """The page's runs (:class:`maskfed.engine.runner.RunResult`, in the order the chapters run them) and profile."""

    profile: Profile
    results: list


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None) -> Findings:
    """Run (or reuse) every run of ``profile``'s chapters (:func:`maskfed.studies.experiments.all_configs`).

    Raises:
        ConfigError, FileNotFoundError, DataUnavailableError: as :func:`maskfed.engine.runner.run_many`.
    """
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    results = runner.run_many(experiments.all_configs(prof), workers=prof.workers if workers is None else workers,
                              progress=False)
    return Findings(prof, results)


def settings_table(profile_name: str) -> pd.DataFrame:
    """Every run setting with its value in the paper profile (and ``profile_name``'s) and "stated by": "paper"
    or "ours" (:func:`maskfed.book.settings_table`)."""
    settings = book.settings_table(profile_name).rename(columns={"value": "paper profile"})
    settings["stated by"] = ["ours" if w.startswith("ours") else "paper" for w in settings["whose"]]
    return settings


def environment_json(provenance: dict) -> str:
    """The first run's commit, code hash, packages, machine and data (:data:`ENVIRONMENT`) with the kind of its
    data fingerprint, as indented JSON without machine paths."""
    shown = {**{k: provenance[k] for k in ENVIRONMENT},
             "data_fingerprint_kind": book.recorded_fingerprint(provenance)[0]}
    return book.without_paths(json.dumps(shown, indent=2))


def configurations(results: list) -> tuple[str, pd.DataFrame]:
    """(the settings every run shares, as JSON one a line without machine paths; the fields that vary, one
    row per run)."""
    cfgs = pd.DataFrame([r.config.model_dump(mode="json") for r in results])
    varying = [c for c in cfgs if cfgs[c].astype(str).nunique() > 1]
    first = results[0].config.model_dump(mode="json")  # plain JSON values (numbers stay numbers)
    shared = book.without_paths(json.dumps({c: v for c, v in first.items() if c not in varying}, indent=1))
    return shared, cfgs[varying].map(book.without_paths)


def archived_sections(live_profile: str) -> list[tuple[str, str, str, pd.DataFrame | None]]:
    """One (profile name, heading, label, run provenance table or None) per archived book profile other than
    ``live_profile``: the heading is the profile's column name in the book's tables
    (:func:`maskfed.studies.archive.column_name`), the label the archive's own provenance label
    (:meth:`maskfed.studies.archive.ArchiveLabel.text`), or "no archived run"."""
    out = []
    for name in (p for p in archive.BOOK_PROFILES if p != live_profile):
        runs = archive.require_complete(name)
        out.append((name, archive.column_name(name), archive.label(runs, name).text() if runs else "no archived run",
                    experiments.provenance_table(runs).set_index("run") if runs else None))
    return out
