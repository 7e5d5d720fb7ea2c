"""Command line: ``maskfed sweep`` (a profile's experiments), ``maskfed run`` (one setting)
and ``maskfed archive`` (copy a profile's finished runs into ``results/archive/``).

Every :class:`~maskfed.engine.config.RunConfig` field is also a flag (``--batch-size 128``), overriding
the profile's base config. All input is validated before compute (:mod:`maskfed.engine.preflight`).
Errors end as one ``maskfed: error: ...`` line, exit status 2 (bad input, damaged run folder, divergence,
failed write). Ctrl-C, SIGTERM and SIGHUP keep finished runs and checkpoints and say how to go on
(exit status 130, 143, 129).

Examples::

    maskfed sweep --profile cpu
    maskfed run --profile cpu --batch-size full --local-epochs 1 --alpha 0.1 --seeds 0 1 2
    maskfed archive --profile cpu-long
    maskfed archive --profile cpu-paper --factor resnet
    maskfed cache --list
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

import pandas as pd

from maskfed import paths
from maskfed.engine import preflight

from maskfed.studies import archive

from maskfed.analysis import summary
from maskfed.engine import checkpoint, fedavg, runner
from maskfed.studies import experiments, stage
from maskfed.studies.factor_axes import MODEL_PARTS

from maskfed.engine.config import (accepts_none, allowed_values, check_workers, ConfigError, load_profile, MAX_SEED,
                                   MAX_SEEDS, MAX_WORKERS, PROFILES, RunConfig)
from maskfed.engine.data import DataUnavailableError
from maskfed.integrations import ray_backend


class Parser(argparse.ArgumentParser):
    """argparse's parser, ending a command line it cannot parse (``--seeds x``, a missing
    ``--profile``) as one ``maskfed: error:`` line with exit status 2, like every other refusal,
    instead of the usage block."""

    def error(self, message: str):
        self.exit(2, f"maskfed: error: {message} (see {self.prog} --help)\n")


def field_notes() -> dict[str, str]:
    """What each :class:`RunConfig` field means, from its unit comment in the class's source (the
    comments are the fields' one documentation), e.g. ``{"rounds": "communication rounds [200]"}``."""
    source = inspect.getsource(RunConfig)
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^    (\w+): [^#\n]*#\s*(.+)$", source, re.M)}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run configuration (overrides the profile's base; [the paper's values])")
    notes = field_notes()
    for name in RunConfig.model_fields:
        if name == "seed":
            continue
        group.add_argument("--" + name.replace("_", "-"), dest=name, default=None, metavar="VALUE",
                           help=f"{notes.get(name, name).rstrip('.')}. Allowed: {allowed_values(name)} (default: the profile's)")


def _overrides(args) -> dict:
    given = {n: getattr(args, n) for n in RunConfig.model_fields if getattr(args, n, None) is not None}
    for name, value in given.items():  # "--train-subset none" clears a field the profile sets
        if value.strip().lower() in ("none", "null") and accepts_none(name):
            given[name] = None
    if given.get("data_path") is not None:  # as the user meant it: relative to where the command runs, not to a notebook's folder
        given["data_path"] = absolute_path(given["data_path"])
    return given


def absolute_path(path: str) -> str:
    """``path`` with ``~`` expanded, made absolute against the current directory."""
    return str(Path(path).expanduser().absolute())


#: Errors that mean "this input cannot work" (the message says why): printed, exit status 2.
INPUT_ERRORS = (ConfigError, ValueError, FileNotFoundError, DataUnavailableError)
#: Errors of a run underway that its message explains in full (the round, client and quantity of a
#: diverged run; the folder and cause of a failed write): printed as one line, exit status 2.
RUN_ERRORS = (fedavg.TrainingDiverged, checkpoint.WriteFailed)


#: Help of ``--seeds`` (``maskfed run`` and ``maskfed sweep``).
SEEDS_HELP = (f"seeds, integers from 0 to {MAX_SEED} (2**63 - 1), no repeats, at most {MAX_SEEDS} of them "
              "(default: the profile's)")
#: Help of ``--workers`` (``maskfed run``, ``maskfed sweep`` and ``maskfed archive``).
WORKERS_HELP = f"worker processes, an integer from 1 to {MAX_WORKERS}"


def _check_seeds(seeds: list[int] | None) -> None:
    """Refuse seeds outside 0..:data:`~maskfed.engine.config.MAX_SEED`, or more than
    :data:`~maskfed.engine.config.MAX_SEEDS` of them, as one line naming ``--seeds``, before any run starts
    (the generators would fail only once a run starts, naming no flag)."""
    if seeds is not None and len(seeds) > MAX_SEEDS:
        raise ConfigError(f"--seeds: {len(seeds)} seeds given; allowed: 1 to {MAX_SEEDS} seeds")
    bad = [s for s in seeds or () if not 0 <= s <= MAX_SEED]
    if bad:
        raise ConfigError(f"--seeds {' '.join(map(str, bad))}: a seed must be an integer from 0 to {MAX_SEED} "
                          "(2**63 - 1)")


#: Help of ``--force`` (``maskfed run`` and ``maskfed sweep``).
FORCE_HELP = ("recompute every run of the command from round 1, replacing its finished or damaged run folder "
              "and discarding its checkpoint")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="maskfed", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="run (or reuse) the runs of a profile's experiments")
    sweep.add_argument("--profile", default="cpu", help=f"one of {', '.join(PROFILES)} (default cpu)")
    sweep.add_argument("--experiments", nargs="+", default=None,
                       help=f"any of {', '.join(experiments.EXPERIMENTS)} (default: the profile's own list; "
                            "table1, table2 and control for every profile but cpu-masked, whose list is masked)")
    sweep.add_argument("--seeds", type=int, nargs="+", default=None, help=SEEDS_HELP)
    sweep.add_argument("--workers", type=int, default=None, help=f"{WORKERS_HELP} (default: the profile's)")
    sweep.add_argument("--backend", choices=["local", "ray"], default="local",
                       help="local worker processes (default) or one Ray task per run (needs '.[ray]')")
    sweep.add_argument("--address", default=None,
                       help="Ray cluster address, e.g. ray://head:10001 or auto (default: start a local Ray)")
    sweep.add_argument("--force", action="store_true", help=FORCE_HELP)
    _add_config_flags(sweep)
    one = sub.add_parser("run", help="run one setting over seeds and print its summary")
    one.add_argument("--profile", default="cpu", help=f"base profile, one of {', '.join(PROFILES)} (default cpu)")
    one.add_argument("--seeds", type=int, nargs="+", default=None, help=SEEDS_HELP)
    one.add_argument("--workers", type=int, default=None, help=f"{WORKERS_HELP} (default: the profile's)")
    one.add_argument("--force", action="store_true", help=FORCE_HELP)
    _add_config_flags(one)
    arch = sub.add_parser("archive", help="copy a profile's finished runs (every experiment) into results/archive/<profile>/")
    arch.add_argument("--profile", required=True, help=f"one of {', '.join(PROFILES)}")
    arch.add_argument("--data-path", default=None, help="CIFAR-10 archive or folder the sweep used (default: as the sweep)")
    arch.add_argument("--verify", action="store_true",
                      help="instead of archiving: re-run a sample of the archived runs with this checkout's code and "
                           "record whether every metric is bit-identical (the archive's label then says so)")
    arch.add_argument("--seeds", nargs="+", type=int, default=None,
                      help="archive only these seeds' runs (the profile's other seeds stay as archived; say, seeds "
                           "added to a profile later), integers from 0 to 2**63 - 1 (default: every seed of the profile)")
    arch.add_argument("--runs", nargs="+", default=None, metavar="LABEL",
                      help="with --verify: the run labels to re-run (default: the cheapest run of each experiment)")
    arch.add_argument("--stage", action="store_true",
                      help="instead of archiving runs: measure every protocol along the archived stage-ladder "
                           "trajectories (one per seed) and archive that stage study")
    arch.add_argument("--stage-cross", action="store_true",
                      help="instead of archiving runs: measure Table II's alphas at theta from every alpha's trajectory "
                           "(the archived Table II runs, run again with theta snapshots where they lack them; a rerun "
                           "must reproduce the archived metrics bit for bit) and archive that alpha-cross")
    arch.add_argument("--factor", choices=list(MODEL_PARTS), default=None,
                      help="instead of archiving runs: compute the model-size study of the chapter 'What sets the "
                           "recovery factor?' (models: the small CNN at several widths; resnet: ResNet-18-GN at "
                           "centralised θ; resnet-fedavg: ResNet-18-GN at θ of its own FedAvg trajectory) at "
                           "θ of matched accuracy, resumably, and archive it in results/archive/<profile>/factor-<part>/")
    arch.add_argument("--trajectory", default=None, metavar="RUN_FOLDER",
                      help="with --factor: a finished run folder (with thetas.pt) of a model's own FedAvg trajectory, "
                           "read instead of looking for that run in results/runs (say, one trained from another "
                           "checkout); its configuration is checked. The hidden .partial-<run> folder of a run still "
                           "going is read as far as its last checkpoint (the θ it has reached so far)")
    arch.add_argument("--all-protocols", action="store_true",
                      help="with --factor: measure every protocol of the profile's Table I grid (default: the "
                           "study's own list; ResNet-18-GN's has five)")
    arch.add_argument("--manifests", action="store_true",
                      help="instead of archiving: write a manifest.json (sha256 of each file) into every archived folder "
                           "that has none, from its files as they are (then check them with --verify)")
    arch.add_argument("--workers", type=int, default=2,
                      help=f"with --verify, --stage, --stage-cross or --factor: {WORKERS_HELP} (default 2)")
    cache = sub.add_parser("cache", help="list or prune the decoded-data cache (cache_dir()/data/*.pt)")
    cache.add_argument("--list", action="store_true", help="each file: size, source, whether it is live, when modified")
    cache.add_argument("--prune", action="store_true",
                       help="remove the files whose source is gone or changed, and unreadable or old-format ones")
    cache.add_argument("--all", action="store_true", help="with --prune: remove every file")
    return parser


def _plan(args) -> tuple:
    """The profile and the runs a command asks for; every input is checked (ConfigError)."""
    _check_seeds(args.seeds)
    if args.workers is not None:
        check_workers(args.workers, "--workers")
    backend = getattr(args, "backend", "local")
    if args.force and backend == "ray":
        raise ConfigError("--force is not available with --backend ray; delete the run folders to recompute "
                          "(or run with --backend local --force)")
    if getattr(args, "address", None) is not None and backend != "ray":
        raise ConfigError(f"--address is only used with --backend ray; got --backend {backend}")
    if backend == "ray":
        if args.workers is not None:
            raise ConfigError("--workers is not used with --backend ray (Ray schedules one task per run on the "
                              "cluster's CPUs or GPUs); drop --workers")
        ray_backend.require_ray()
    profile = load_profile(args.profile, seeds=args.seeds, **_overrides(args))
    if args.command == "sweep":
        bad = [e for e in args.experiments or [] if e not in experiments.EXPERIMENTS]
        if bad:
            raise ConfigError(f"--experiments: {bad} not allowed; choose from {list(experiments.EXPERIMENTS)}")
        return profile, experiments.all_configs(profile, args.experiments)
    return profile, [profile.run(s) for s in profile.seeds]


def _error(exc: BaseException | str) -> int:
    notes = " ".join(getattr(exc, "__notes__", ()))  # e.g. which run of a sweep failed
    print(f"maskfed: error: {exc}{' ' + notes if notes else ''}", file=sys.stderr)
    return 2


def _interrupted(exc: KeyboardInterrupt, then: str) -> int:
    """One line for a ``maskfed archive`` stopped by Ctrl-C, SIGTERM or SIGHUP (which signal, then
    ``then``: what is kept, how to go on); returns the signal's exit status (130, 143, 129)."""
    print(f"\nmaskfed: {runner.interrupted_message(exc)}; {then}", file=sys.stderr)  # on its own line, after a bar
    return runner.exit_status(exc)


def archive_profile(name: str, data_path: str | None = None, seeds: list[int] | None = None) -> list:
    """Archive every finished run of a profile's experiments (``maskfed archive``), or of ``seeds`` only.

    Archived runs of other seeds are left as they are; ``seeds`` may be outside the profile's.

    Returns:
        The archived folders.

    Raises:
        ConfigError: unknown profile, or a seed outside 0..2**63 - 1 (naming ``--seeds``).
        RuntimeError: some of those runs have not finished (names them and the command that
            computes them); nothing is archived then.
    """
    _check_seeds(seeds)
    profile = load_profile(name, data_path=data_path, **({} if seeds is None else {"seeds": seeds}))
    cfgs = experiments.all_configs(profile)
    found = [runner.find_run(c) for c in cfgs]
    missing = [c.label() for c, r in zip(cfgs, found) if r is None]
    if missing:
        sweep = f"maskfed sweep --profile {name}" + ("" if seeds is None else " --seeds " + " ".join(map(str, seeds)))
        raise RuntimeError(f"{len(missing)} of the {len(cfgs)} runs of profile {name!r} have not finished with the "
                           f"current code and data: {', '.join(missing)}. Run `{sweep}` first; "
                           "nothing was archived.")
    return archive.archive_runs(found, name)


def _cache_command(args) -> int:
    """``maskfed cache --list`` / ``--prune [--all]`` (:mod:`maskfed.engine.datacache`)."""
    from maskfed.engine import datacache

    if args.all and not args.prune:
        return _error("--all is used with --prune only")
    if args.list == args.prune:
        return _error("give one of --list and --prune")
    print(datacache.list_text() if args.list else datacache.prune_text(datacache.prune(every=args.all)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        paths.absolute_env()  # a relative MASKFED_RESULTS_DIR means this directory, to workers as well
    except paths.EmptyPathVariable as exc:  # MASKFED_RESULTS_DIR= would silently mean this directory
        return _error(exc)
    if args.command == "cache":
        return _cache_command(args)
    if args.command == "archive":
        if not args.verify and args.runs is not None:
            return _error("--runs is used with --verify only")
        if args.seeds is not None and (args.verify or args.stage or args.stage_cross or args.factor or args.manifests):
            return _error("--seeds is used when archiving runs only (not with --verify, --stage, --stage-cross, "
                          "--factor or --manifests)")
        try:
            check_workers(args.workers, "--workers")
        except ConfigError as exc:
            return _error(exc)
        if sum([args.verify, args.stage, args.stage_cross, args.factor is not None, args.manifests]) > 1:
            return _error("give one of --verify, --stage, --stage-cross, --factor and --manifests")
        if args.manifests:
            try:
                written = archive.add_manifests(args.profile)
            except (*INPUT_ERRORS, OSError) as exc:
                return _error(exc)
            print(f"wrote {archive.MANIFEST} into {len(written)} folder(s) of the {args.profile} archive that had none"
                  + (f" ({', '.join(f.name for f in written)})" if written else ""), file=sys.stderr)
            return 0
        if (args.all_protocols or args.trajectory) and args.factor is None:
            return _error("--all-protocols and --trajectory are used with --factor only")
        if args.trajectory and not ((Path(args.trajectory) / "config.json").is_file()
                                    or (Path(args.trajectory) / "checkpoint.pt").is_file()):
            return _error(f"--trajectory must be a finished run folder (with config.json) or a running run's "
                          f".partial-<run> folder (with checkpoint.pt); got {args.trajectory}")
        if args.factor is not None:
            try:
                with runner.stop_on_signals():  # SIGTERM and SIGHUP stop it as Ctrl-C does
                    dest = archive.archive_factor_study(
                        args.profile, args.factor, workers=args.workers, all_protocols=args.all_protocols,
                        data_path=absolute_path(args.data_path) if args.data_path else None,
                        own_trajectories=[Path(args.trajectory)] if args.trajectory else ())
            except KeyboardInterrupt as exc:
                res = runner.results_dir()
                return _interrupted(exc, f"rerun the same command to resume: every finished θ path and measurement "
                                         f"is kept (in {res / 'central'}, {res / 'factor'} and {res / 'runs'}) and "
                                         "an unfinished one goes on from what it kept")
            except (*INPUT_ERRORS, RuntimeError) as exc:
                return _error(exc)
            print(f"archived the {args.factor} study of profile {args.profile} in {dest}", file=sys.stderr)
            return 0
        if args.stage or args.stage_cross:
            what = "α-cross" if args.stage_cross else "stage study"
            try:
                with runner.stop_on_signals():
                    dest = (archive.archive_alpha_cross(args.profile, workers=args.workers) if args.stage_cross else
                            archive.archive_stage_study(args.profile, workers=args.workers))
            except KeyboardInterrupt as exc:
                return _interrupted(exc, f"rerun the same command to resume: every finished ladder and stage "
                                         f"measurement is kept in {runner.results_dir() / 'stages'} and only the "
                                         "missing ones are computed")
            except (*INPUT_ERRORS, RuntimeError) as exc:
                return _error(exc)
            print(f"archived the {what} of profile {args.profile} in {dest}", file=sys.stderr)
            return 0
        if args.verify:
            try:
                with runner.stop_on_signals():
                    record = archive.verify_archive(args.profile, labels=args.runs, workers=args.workers, progress=True)
            except KeyboardInterrupt as exc:  # the re-runs' scratch folder is removed: nothing to resume from
                return _interrupted(exc, "the verification recorded nothing and its scratch folder is removed; "
                                         "rerun the same command to start it again")
            except (*INPUT_ERRORS, RuntimeError) as exc:
                return _error(exc)
            for r in record["runs"]:
                if r["identical"]:
                    print(f"identical  {r['label']}", file=sys.stderr)
                else:
                    print(f"DIFFERENT  {archive.difference_text(r)}; max |diff| {r['max_abs_diff']:.3g}; summary cells "
                          f"{'within' if r['within_tolerance'] else 'outside'} relative {record['summary_rtol']:g} "
                          f"(largest {r['summary_max_rel_diff']:.3g})"
                          + (f"; {', '.join(r['changed_files'])}" if r.get("changed_files") else ""), file=sys.stderr)
            verdict = ("every metric bit-identical: the archive's label now says this code reproduces it"
                       if record["identical"] else
                       "not bit-identical: recorded, and the archive's label now says these runs differ"
                       + (", their summary cells within tolerance" if record["within_tolerance"] else ""))
            print(f"verified {len(record['runs'])} run(s) of profile {args.profile} with code {record['code_hash']} "
                  f"on machine identity {record['machine_id']['id']}: {verdict}", file=sys.stderr)
            return 0 if record["identical"] else 1
        try:
            with runner.stop_on_signals():
                folders = archive_profile(args.profile, absolute_path(args.data_path) if args.data_path else None,
                                          seeds=args.seeds)
        except KeyboardInterrupt as exc:
            return _interrupted(exc, "every run folder archived so far is complete; rerun the same command to "
                                     "archive them all")
        except (*INPUT_ERRORS, RuntimeError) as exc:
            return _error(exc)
        print(f"archived {len(folders)} run(s) of profile {args.profile} in {archive.archive_dir() / args.profile}",
              file=sys.stderr)
        return 0
    try:
        profile, cfgs = _plan(args)
        preflight.check_runs(cfgs)  # data, subsets, partitions, device: before any training
        # a damaged finished folder is named here (DamagedRun), before any training
        done = 0 if args.force else sum(runner.find_run(c) is not None for c in cfgs)
    except (*INPUT_ERRORS, ImportError) as exc:  # ImportError: an optional extra (Ray) is missing
        return _error(exc)
    reused = f", {done} finished before and reused (--force recomputes)" if done else ""
    print(f"profile {profile.name}: {len(cfgs)} run(s){reused}; results in {runner.results_dir() / 'runs'}",
          file=sys.stderr)
    try:
        with runner.stop_on_signals():  # SIGTERM and SIGHUP stop the runs as Ctrl-C does
            keep = stage.ladder_snapshots(profile, cfgs)  # θ of the stage chapter's ladder, kept by its run
            if getattr(args, "backend", "local") == "ray":
                results = ray_backend.run_many(cfgs, address=args.address)
            else:
                results = runner.run_many(cfgs, workers=args.workers or profile.workers, keep_every=keep,
                                          force=args.force)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: finished runs and checkpoints are on disk
        if args.force:
            msg = (f"{runner.interrupted_message(exc)}; --force starts every run from round 1: rerun without it "
                   "to resume from the checkpoints")
        else:
            msg = str(exc) if isinstance(exc, runner.Interrupted) else (
                f"{runner.interrupted_message(exc)}; {runner.resume_hint()}")
        print(f"\nmaskfed: {msg}", file=sys.stderr)  # on its own line, not after a progress bar
        return runner.exit_status(exc)
    except RUN_ERRORS as exc:
        return _error(exc)
    except (*INPUT_ERRORS, RuntimeError) as exc:
        cause = exc if isinstance(exc, INPUT_ERRORS) else exc.__cause__  # run_many wraps a worker's error
        if isinstance(cause, RUN_ERRORS):
            return _error(f"{exc}: {cause}")
        if not isinstance(cause, INPUT_ERRORS):
            raise  # not an input problem: a bug, keep its traceback
        where = "" if cause is exc else f"{exc}: "
        print(f"maskfed: finished runs are kept in {runner.results_dir() / 'runs'}; the same command reuses them",
              file=sys.stderr)
        return _error(exc if cause is exc else f"{where}{cause}")
    table = summary.summarize(results, ["dataset", "model", "partition", "alpha", "batch_size", "local_epochs"])
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.drop(columns=["train_loss"]).to_string(float_format=lambda v: f"{v:.4g}"))
    for r in results:
        print(r.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
