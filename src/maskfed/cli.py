"""Command line: ``maskfed sweep`` (a profile's experiments) and ``maskfed run`` (one setting).

Every :class:`~maskfed.config.RunConfig` field is also a flag (``--batch-size 128``,
``--local-epochs 5``, ``--alpha 0.1``, ``--rounds 100`` ...), overriding the profile's
base config. Everything is validated before any compute starts.

Examples::

    maskfed sweep --profile cpu                       # the runs the book needs
    maskfed run --profile cpu --batch-size full --local-epochs 1 --alpha 0.1 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from . import experiments, runner, summary
from .data import DataUnavailableError
from .config import PROFILES, ConfigError, RunConfig, load_profile


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run configuration (overrides the profile's base)")
    for name, field in RunConfig.model_fields.items():
        if name == "seed":
            continue
        group.add_argument("--" + name.replace("_", "-"), dest=name, default=None, metavar="VALUE",
                           help=f"default from the profile; type {getattr(field.annotation, '__name__', field.annotation)}")


def _overrides(args) -> dict:
    return {n: getattr(args, n) for n in RunConfig.model_fields if getattr(args, n, None) is not None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maskfed", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="run (or reuse) the runs of a profile's experiments")
    sweep.add_argument("--profile", default="cpu", help=f"one of {', '.join(PROFILES)} (default cpu)")
    sweep.add_argument("--experiments", nargs="+", default=list(experiments.EXPERIMENTS),
                       help=f"any of {', '.join(experiments.EXPERIMENTS)} (default all)")
    sweep.add_argument("--workers", type=int, default=None, help="worker processes (default: the profile's)")
    _add_config_flags(sweep)
    one = sub.add_parser("run", help="run one setting over seeds and print its summary")
    one.add_argument("--profile", default="cpu", help=f"base profile, one of {', '.join(PROFILES)} (default cpu)")
    one.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default: the profile's)")
    one.add_argument("--workers", type=int, default=None, help="worker processes (default: the profile's)")
    one.add_argument("--force", action="store_true", help="recompute even if a finished run exists")
    _add_config_flags(one)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        profile = load_profile(args.profile, **_overrides(args))
        if args.command == "sweep":
            bad = [e for e in args.experiments if e not in experiments.EXPERIMENTS]
            if bad:
                raise ConfigError(f"--experiments: {bad} not allowed; choose from {list(experiments.EXPERIMENTS)}")
            cfgs = experiments.all_configs(profile, args.experiments)
        else:
            seeds = args.seeds if args.seeds is not None else profile.seeds
            cfgs = [profile.run(s) for s in seeds]
        if args.workers is not None and args.workers < 1:
            raise ConfigError(f"--workers must be >= 1; got {args.workers}")
        for c in cfgs:
            runner.images_for(c)  # resolve (and decode once) the data before any training; cached
    except (ConfigError, ValueError, FileNotFoundError, DataUnavailableError) as exc:
        print(f"maskfed: error: {exc}", file=sys.stderr)
        return 2
    print(f"profile {profile.name}: {len(cfgs)} run(s); results in {runner.results_dir() / 'runs'}", file=sys.stderr)
    try:
        if getattr(args, "force", False):
            results = [runner.run(c, force=True) for c in cfgs]
        else:
            results = runner.run_many(cfgs, workers=args.workers or profile.workers)
    except KeyboardInterrupt as exc:  # Ctrl-C: finished runs and checkpoints are on disk
        if getattr(args, "force", False):
            msg = "interrupted; --force starts every run from round 1: rerun without it to resume from the checkpoints"
        else:
            msg = str(exc) or "interrupted; " + runner.resume_hint()
        print(f"maskfed: {msg}", file=sys.stderr)
        return 130
    table = summary.summarize(results, ["dataset", "model", "partition", "alpha", "batch_size", "local_epochs"])
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.drop(columns=["train_loss"]).to_string(float_format=lambda v: f"{v:.4g}"))
    for r in results:
        print(r.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
