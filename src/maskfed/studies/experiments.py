"""The book's experiments: which runs each table needs, and their summaries.

Thin glue over :mod:`maskfed.engine.config` (which runs), :mod:`maskfed.engine.runner`
(running or reusing them) and :mod:`maskfed.analysis.summary` (the paper's convention).
"""

from __future__ import annotations

import pandas as pd

from maskfed.engine import preflight

from maskfed.analysis import summary
from maskfed.engine import runner
from maskfed.engine.config import EXPERIMENT_NAMES, load_profile, Profile, RunConfig
from maskfed.studies import masked_training

#: Every experiment a profile can compute; a profile's own list is :attr:`maskfed.engine.config.Profile.experiments`.
EXPERIMENTS = EXPERIMENT_NAMES
#: Columns of Tables I and II, in the paper's order.
TABLE_COLUMNS = ["T_mean", "recovery_unweighted", "recovery_weighted", "mu2_hat", "sigma2_hat", "test_acc",
                 "pct_rounds_below_one"]


def configs(profile: Profile, experiment: str) -> list[RunConfig]:
    """Run configurations of one experiment ("table1", "table2", "control" or "masked").

    Raises:
        ValueError: unknown experiment name.
        ConfigError: "masked" for a profile without a ``masked:`` section.
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {list(EXPERIMENTS)}; got {experiment!r}")
    if experiment == "masked":
        return list(masked_training.profile_configs(profile).values())
    return {"table1": profile.table1_configs, "table2": profile.table2_configs,
            "control": profile.control_configs}[experiment]()


def all_configs(profile: Profile, experiments=None) -> list[RunConfig]:
    """Every distinct run the given experiments need (shared runs listed once); None: the profile's
    own :attr:`~maskfed.engine.config.Profile.experiments`."""
    names = profile.experiments if experiments is None else experiments
    return list(dict.fromkeys(c for e in names for c in configs(profile, e)))


def run(profile: Profile, experiment: str, *, workers: int | None = None, progress: bool = True):
    """Run (or reuse) one experiment's runs, all checked first (:func:`maskfed.engine.preflight.check_runs`); returns their :class:`~maskfed.engine.runner.RunResult` list.

    Raises:
        ConfigError: a refused setting or a run that cannot work with its data.
        FileNotFoundError, DataUnavailableError, DataReadError: the data cannot be found or read.
    """
    from maskfed.studies import stage  # the ladder's run keeps θ snapshots for the stage chapter

    cfgs = configs(profile, experiment)
    preflight.check_runs(cfgs)
    return runner.run_many(cfgs, workers=workers or profile.workers, progress=progress,
                           keep_every=stage.ladder_snapshots(profile, cfgs))


def minutes_at(profile: str, names: tuple[str, ...], timed: list, **overrides) -> float:
    """Wall minutes the runs of the experiments ``names`` at ``profile`` with ``overrides`` take (a run that two
    of them share, once), estimated from ``timed``: recorded runs of the same model and data (e.g. an archive's).
    Per local protocol (model, data, batch size, τ), the timed runs' seconds a round (provenance ``wall_s`` over
    rounds, pooled over α and seeds: a round's work is the cohort's images times τ) times a run's rounds, summed
    over the runs and divided by the profile's workers (one thread each). Loading the data and executing the
    notebook are not included; a busier machine takes longer.

    Raises:
        KeyError: a protocol of the runs has no timed run.
    """
    def protocol(c: RunConfig) -> tuple:
        return c.model, c.dataset, c.batch_size, c.local_epochs

    wall = pd.DataFrame([{"key": protocol(r.config), "s": r.provenance["wall_s"], "rounds": r.config.rounds}
                         for r in timed]).groupby("key")[["s", "rounds"]].sum()
    per_round = wall["s"] / wall["rounds"]
    prof = load_profile(profile, **overrides)
    runs = {c.key(): c for name in names for c in configs(prof, name)}.values()
    return float(sum(per_round[protocol(c)] * c.rounds for c in runs) / prof.workers / 60)


def table1(results) -> pd.DataFrame:
    """Table I summary (index: batch size, τ), our columns in the paper's order."""
    return summary.summarize(results, ["batch_size", "local_epochs"])[TABLE_COLUMNS]


def table2(results) -> pd.DataFrame:
    """Table II summary (index: Dirichlet α)."""
    return summary.summarize(results, ["alpha"])[TABLE_COLUMNS]


def provenance_table(results) -> pd.DataFrame:
    """One row per run: folder, seed, commit, code hash, versions, device, data, wall time."""
    rows = []
    for r in results:
        p = r.provenance
        rows.append({"run": r.path.name, "seed": p["seed"], "rounds": r.config.rounds,
                     "commit": p["commit"][:10] + ("+dirty" if p.get("dirty") else ""), "code_hash": p["code_hash"],
                     "torch": p["packages"]["torch"], "python": p["packages"]["python"],
                     "device": p["machine"]["device"], "data": p["data_source_kind"],
                     "wall_s": round(p["wall_s"], 1), "finished_utc": p["finished_utc"]})
    return pd.DataFrame(rows)
