"""Findings of the appendix "Provenance" (``notebooks/provenance.md``): where every run of a build came from."""

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
    """Run (or reuse) every run of ``profile``'s chapters (:func:`maskfed.studies.experiments.all_configs`)."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    results = runner.run_many(experiments.all_configs(prof), workers=prof.workers if workers is None else workers,
                              progress=False)
    return Findings(prof, results)


def settings_table(profile_name: str) -> pd.DataFrame:
    """:func:`maskfed.book.settings_table` with "stated by" ("paper" or "ours")."""
    settings = book.settings_table(profile_name).rename(columns={"value": "paper profile"})
    settings["stated by"] = ["ours" if w.startswith("ours") else "paper" for w in settings["whose"]]
    return settings


def environment_json(provenance: dict) -> str:
    """The first run's :data:`ENVIRONMENT` and its fingerprint's kind, JSON without paths."""
    shown = {**{k: provenance[k] for k in ENVIRONMENT},
             "data_fingerprint_kind": book.recorded_fingerprint(provenance)[0]}
    return book.without_paths(json.dumps(shown, indent=2))


def configurations(results: list) -> tuple[str, pd.DataFrame]:
    """(the settings every run shares, JSON without paths; the fields that vary, a row per run)."""
    cfgs = pd.DataFrame([r.config.model_dump(mode="json") for r in results])
    varying = [c for c in cfgs if cfgs[c].astype(str).nunique() > 1]
    first = results[0].config.model_dump(mode="json")  # plain JSON values (numbers stay numbers)
    shared = book.without_paths(json.dumps({c: v for c, v in first.items() if c not in varying}, indent=1))
    return shared, cfgs[varying].map(book.without_paths)


def archived_sections(live_profile: str) -> list[tuple[str, str, str, pd.DataFrame | None]]:
    """Per archived book profile but ``live_profile``: (name, column name, the archive's label or
    "no archived run", run provenance table or None)."""
    out = []
    for name in (p for p in archive.BOOK_PROFILES if p != live_profile):
        runs = archive.require_complete(name)
        out.append((name, archive.column_name(name), archive.label(runs, name).text() if runs else "no archived run",
                    experiments.provenance_table(runs).set_index("run") if runs else None))
    return out
