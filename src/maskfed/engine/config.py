"""Run configurations and profiles, validated before any compute starts.

A :class:`RunConfig` is one FedAvg run (one seed). A profile (``profiles/*.yaml``) bundles a base
config with the book's experiments: Table I's local-protocol grid, Table II's Dirichlet-α sweep and
the identical-shards control. Validation uses pydantic; errors name the parameter, value and what
is allowed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import types
import typing
from importlib import resources
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

BatchSize = Union[int, Literal["full"]]
#: Profile names (``profiles/<name>.yaml``); ``cpu-long`` is the cpu profile run 4x longer and ``cpu-paper``
#: the paper's protocol (200 rounds, 3 seeds) with the cpu profile's model, both meant to be archived;
#: ``cpu-masked`` holds only the masked-training runs at cpu-paper's settings (archived, not a book profile).
PROFILES = ("smoke", "cpu", "cpu-long", "cpu-paper", "cpu-masked", "paper")
#: Experiments a profile can name (:attr:`Profile.experiments`; :mod:`maskfed.studies.experiments` builds their runs).
EXPERIMENT_NAMES = ("table1", "table2", "control", "masked")
#: RunConfig fields that change no result and so stay out of :meth:`RunConfig.key`.
NOT_IN_KEY = ("checkpoint_every",)
#: Largest seed (2**63 - 1): the seed is a column of the summary tables and CSV files, kept within int64.
MAX_SEED = 2**63 - 1

# Upper bounds of every size a user can set (issue 42): generous, but finite, so that a mistyped
# 23-digit ``--rounds`` is refused at validation instead of allocating or looping in proportion to it.
# Every bound is ours; each is far above any setting of the paper (200 rounds, K = 100, K_c = 10).
# RunConfig's Field(le=...) read them, and so do the CLI (--workers, --seeds) and the chapters'
# parameters of the same names (maskfed.book.params.SIZE_TWINS).
#: Most communication rounds, and the most rounds between evaluations, Hessian factors or checkpoints.
MAX_ROUNDS = 100_000
#: Most clients K in the population (and so in a cohort); the partition then checks K against the data.
MAX_CLIENTS = 1_000_000
#: Most images of a subset, a batch or the Hessian batch (CIFAR-10 has 60,000); checked against the data later.
MAX_IMAGES = 10_000_000
#: Most synthetic images of a split (each is 3 KiB of uint8, 12 KiB as float32: 200,000 are 2.4 GB).
MAX_SYNTHETIC_IMAGES = 200_000
#: Most local epochs τ (the paper's largest is 5).
MAX_LOCAL_EPOCHS = 1_000
#: Most first-layer channels of the small CNN (and GroupNorm groups); its default is 16.
MAX_WIDTH = 1_024
#: Most power iterations and Hutchinson probes of the sharpness measures.
MAX_ITERS = 10_000
#: Most worker processes of a sweep (``workers``, ``--workers``).
MAX_WORKERS = 256
#: Most seeds of one profile or command (``seeds``, ``--seeds``): a run per seed and setting.
MAX_SEEDS = 1_000


class ConfigError(ValueError):
    """A parameter outside its allowed values (raised before any compute)."""


def check_workers(workers: int, name: str = "workers") -> None:
    """Refuse a worker count outside 1..:data:`MAX_WORKERS` (``name``: how the caller calls it, ``--workers``).

    Raises:
        ConfigError: naming ``name``, the value and the allowed range.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"{name} must be an integer from 1 to {MAX_WORKERS}; got {workers!r}")


class RunConfig(BaseModel):
    """One FedAvg run. Units in the comments; the paper's values in brackets (§IV-A); settings it
    does not state are marked "ours" with their reference (:mod:`maskfed.book.settings`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # data
    # image_folder: any train/<class>/ test/<class>/ source (needs data_path); synthetic: class-conditional noise
    dataset: Literal["cifar10", "image_folder", "synthetic"] = "cifar10"  # cifar10 (its ten classes checked), image_folder (any classes) or synthetic noise
    data_path: str | None = None          # archive/folder; None: ../shared archive, then torchvision (cifar10 only)
    train_subset: int | None = Field(None, ge=100, le=MAX_IMAGES)  # images kept from the train split (None: all 50,000)
    test_subset: int | None = Field(None, ge=10, le=MAX_IMAGES)  # test images used for evaluation (None: all 10,000)
    synthetic_train: int = Field(2000, ge=100, le=MAX_SYNTHETIC_IMAGES)   # images, synthetic dataset only
    synthetic_test: int = Field(500, ge=10, le=MAX_SYNTHETIC_IMAGES)   # images, synthetic dataset only
    # partition
    num_clients: int = Field(100, ge=1, le=MAX_CLIENTS)   # K, clients in the population [100]
    partition: Literal["dirichlet", "iid", "identical"] = "dirichlet"  # how images go to clients; identical: the control
    alpha: float = 100.0                            # Dirichlet concentration α [100, 1, 0.1]
    # ours (the paper does not say): "hsu" = Hsu et al. 2019, empty clients redrawn; "niid_bench" =
    # Li et al. 2021: N/K cap per client, redrawn until every client holds >= 10 samples
    dirichlet_convention: Literal["hsu", "niid_bench"] = "hsu"  # per-class Dirichlet split: Hsu et al. 2019 or NIID-Bench (ours)
    identical_client_seeds: bool = False            # control: every client shuffles with the same seed
    # FedAvg
    cohort_size: int = Field(10, ge=1, le=MAX_CLIENTS)   # K_c, clients per round [10]
    rounds: int = Field(200, ge=1, le=MAX_ROUNDS)   # communication rounds [200]
    local_epochs: int = 2                           # τ, passes over the client's shard per round [1, 2, 5]
    batch_size: BatchSize = 32                      # images per SGD step, or "full" (one step per epoch) [32, 128, full]
    lr: float = Field(0.01, gt=0, allow_inf_nan=False)  # SGD learning rate, no momentum [0.01]
    aggregation: Literal["weighted", "uniform"] = "weighted"  # n_k-weighted mean [weighted]
    # model
    model: Literal["resnet18_gn", "small_cnn_gn"] = "resnet18_gn"  # network [resnet18_gn; its CIFAR stem is ours]
    # GroupNorm: Wu & He 2018; for BatchNorm under non-IID data: Hsieh et al. 2020
    gn_groups: int = Field(2, ge=1, le=MAX_WIDTH)   # GroupNorm groups per layer (ours: the paper gives no count)
    width: int = Field(16, ge=1, le=MAX_WIDTH)   # small CNN first-layer channels
    # evaluation and run
    eval_every: int = Field(10, ge=1, le=MAX_ROUNDS)   # rounds between test evaluations
    # rounds between evaluations in the summary window: the last quarter of rounds (paper: the last
    # 50 of 200; a quarter at other round counts is ours)
    eval_every_tail: int = Field(1, ge=1, le=MAX_ROUNDS)   # rounds between evaluations in the last quarter
    seed: int = Field(0, ge=0, le=MAX_SEED)         # model init, partition, cohorts, shuffling
    device: Literal["auto", "cpu", "cuda"] = "auto"  # where to train; auto: CUDA if available
    engine: Literal["auto", "sequential", "batched"] = "auto"  # local training: client by client, or the K_c clients as one batched model; auto: per device (cohort.AUTO_ENGINE)
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"      # arithmetic of local training and every measurement: fp32 (on CUDA with TF32 off), or on CUDA tf32 (TF32 on) / bf16 (forward pass and loss autocast); θ, gradients and Δ_k stay fp32
    # masked FedAvg (limitation 3; ours: the paper trains without masks): each client keeps each block
    # (parameter tensor) of its update with probability p and rescales it by 1/p (eq. (2))
    mask_keep_prob: float = Field(1.0, gt=0, le=1)  # p, keep probability of a block, in (0, 1]; 1: no masking
    mask_mode: Literal["independent", "shared"] = "independent"  # a mask per client, or one per round broadcast to all
    # measurements past the paper's limits (limitation 2; ours): the recovery factor in the
    # block-Hessian inner product, and the final model's sharpness, on a fixed batch of training images
    hessian_every: int = Field(0, ge=0, le=MAX_ROUNDS)   # rounds between Hessian-weighted recovery factors; 0: never
    hessian_batch: int = Field(256, ge=1, le=MAX_IMAGES)   # images in the fixed Hessian evaluation batch (seeded by seed)
    sharpness_iters: int = Field(0, ge=0, le=MAX_ITERS)   # power iterations and Hutchinson probes on the final model; 0: none

    # bookkeeping only: changes no result, so RunConfig.key() leaves it out (config.json keeps it)
    checkpoint_every: int = Field(10, ge=0, le=MAX_ROUNDS)   # rounds between checkpoints of a running run; 0: none.
    # Our default, not the paper's; the profiles set their own (smoke 1, cpu 5, paper 10).

    @model_validator(mode="after")
    def _precision_on_device(self) -> "RunConfig":
        if self.precision != "fp32" and self.device == "cpu":
            raise ValueError(f"precision = {self.precision!r} needs device 'cuda' or 'auto' with a GPU; "
                             "allowed on CPU: 'fp32'")
        return self

    @field_validator("alpha")
    @classmethod
    def _alpha_positive(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"alpha (Dirichlet concentration) must be {_VALIDATED['alpha']}; got {v}")
        return v

    @field_validator("local_epochs", mode="before")
    @classmethod
    def _tau_positive(cls, v) -> int:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_LOCAL_EPOCHS:
            raise ValueError(f"local_epochs (τ) must be {_VALIDATED['local_epochs']}; got {v}")
        return v

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, v):
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if v == "full" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_IMAGES):
            return v
        raise ValueError(f"batch_size must be {_VALIDATED['batch_size']}; got {v!r}")

    @model_validator(mode="after")
    def _cohort_fits(self) -> "RunConfig":
        if self.cohort_size > self.num_clients:
            raise ValueError(
                f"cohort_size (K_c = {self.cohort_size}) must be <= num_clients (K = {self.num_clients})")
        return self

    @model_validator(mode="after")
    def _gn_groups_divide_widths(self) -> "RunConfig":
        # GroupNorm(g, C) needs g | C: ResNet-18's widths are 64..512, the small CNN's width and 2*width
        channels = 64 if self.model == "resnet18_gn" else self.width
        if channels % self.gn_groups:
            allowed = [g for g in range(1, channels + 1) if channels % g == 0]
            what = "ResNet-18's 64 channels" if self.model == "resnet18_gn" else f"width = {self.width}"
            raise ValueError(f"gn_groups = {self.gn_groups} must divide {what} (model {self.model}); "
                             f"allowed: {allowed}")
        return self

    @model_validator(mode="after")
    def _image_folder_needs_a_path(self) -> "RunConfig":
        if self.dataset == "image_folder" and self.data_path is None:
            raise ValueError(
                "dataset = 'image_folder' needs data_path: a train/<class>/ test/<class>/ folder or "
                "archive (the fallbacks, the shared archive and torchvision, are CIFAR-10: use "
                "dataset = 'cifar10' for those)")
        return self

    def key(self) -> str:
        """Stable hash of every field that can change a result (16 hex digits).

        Leaves out :data:`NOT_IN_KEY` (``checkpoint_every``: a resumed run gives the same numbers).
        """
        blob = json.dumps(self.model_dump(mode="json", exclude=set(NOT_IN_KEY)), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        """Readable run name, e.g. ``cifar10-small_cnn_gn-dirichlet-a100-bs32-t2-s0``."""
        conv = "-niid_bench" if self.partition == "dirichlet" and self.dirichlet_convention != "hsu" else ""
        return (f"{self.dataset}-{self.model}-{self.partition}{conv}-a{self.alpha:g}-bs{self.batch_size}"
                f"-t{self.local_epochs}" + (f"-p{self.mask_keep_prob:g}-{self.mask_mode}" if self.mask_keep_prob < 1 else "")
                + f"-s{self.seed}")


def make_run_config(**fields) -> RunConfig:
    """Build a :class:`RunConfig`, turning pydantic's errors into one clear :class:`ConfigError`.

    Raises:
        ConfigError: listing each bad parameter, its value and what is allowed.
    """
    try:
        return RunConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc)) from None


#: Allowed values that a field validator (not the annotation) enforces: the validators' messages
#: and :func:`allowed_values` both read them here.
_VALIDATED = {"alpha": "a finite number > 0", "local_epochs": f"an integer >= 1 and <= {MAX_LOCAL_EPOCHS}",
              "batch_size": f"a positive integer or 'full' (an integer at most {MAX_IMAGES})"}
#: How a constraint of ``Field(...)`` reads in :func:`allowed_values`.
_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _annotation(name: str) -> tuple[list, bool]:
    """The types a :class:`RunConfig` field's annotation allows, without None, and whether None is one."""
    annotation = RunConfig.model_fields[name].annotation
    union = typing.get_origin(annotation) in (Union, types.UnionType)
    args = typing.get_args(annotation) if union else (annotation,)
    return [a for a in args if a is not type(None)], type(None) in args


def accepts_none(name: str) -> bool:
    """Whether the :class:`RunConfig` field ``name`` takes None (``train_subset``: all images).

    Raises:
        KeyError: ``name`` is not a field.
    """
    return _annotation(name)[1]


def allowed_values(name: str) -> str:
    """The values the :class:`RunConfig` field ``name`` accepts, in words (``"an integer >= 100,
    or none"``), for the CLI's help of ``--<name>``.

    Raises:
        KeyError: ``name`` is not a field.
    """
    field = RunConfig.model_fields[name]
    args, optional = _annotation(name)
    if name in _VALIDATED:
        text = _VALIDATED[name]
    elif len(args) == 1 and typing.get_origin(args[0]) is Literal:
        text = "one of " + ", ".join(repr(v) for v in typing.get_args(args[0]))
    else:
        finite = any(getattr(m, "allow_inf_nan", True) is False for m in field.metadata)
        kind = {int: "an integer", float: "a finite number" if finite else "a number", bool: "true or false",
                str: "a path"}.get(args[0], str(args[0]))
        bounds = [f"{sym} {getattr(m, attr)}" for m in field.metadata for attr, sym in _BOUNDS if hasattr(m, attr)]
        text = kind + (" " + " and ".join(bounds) if bounds else "")
    return text + (", or none" if optional else "")


def describe_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            spec = {"table1": Table1Spec, "table2": Table2Spec}.get(str(err["loc"][0]), RunConfig)
            msg = f"unknown parameter; allowed: {', '.join(spec.model_fields)}"
        if len(err["loc"]) == 1 and name in RunConfig.model_fields and not err["type"].startswith("value_error"):
            msg += f" (allowed: {allowed_values(name)})"  # pydantic's own text; our validators say it already
        elif len(err["loc"]) == 2 and err["loc"][0] == "seeds" and not err["type"].startswith("value_error"):
            msg += f" (allowed: {allowed_values('seed')})"  # a profile's seeds.<i>
        lines.append(f"{name} = {err.get('input')!r}: {msg}" if err["loc"] else msg)  # model-level: msg names its fields
    return "invalid run configuration:\n  " + "\n  ".join(lines)


def make_settings(cls: type[BaseModel], defaults: dict, fields: dict, what: str) -> BaseModel:
    """A settings model ``cls`` from ``defaults`` with ``fields`` (None: not given) replacing them, for
    the studies' own settings (stage study, factor axes, centralised SGD); ``what`` names them in
    messages ("stage settings").

    Raises:
        ConfigError: unknown fields (listing the allowed ones) or invalid values, naming the parameter
            and what is allowed.
    """
    given = {k: v for k, v in fields.items() if v is not None}
    unknown = sorted(set(given) - set(cls.model_fields))
    if unknown:
        raise ConfigError(f"unknown {what} {unknown}; allowed: {', '.join(cls.model_fields)}")
    try:
        return cls(**{**defaults, **given})
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc).replace("run configuration", what)) from None


#: RunConfig fields that a setting never reads: field -> (unused when, why). A value given
#: explicitly for such a field is refused (it would be dropped without a word).
UNUSED_WHEN = {
    "alpha": (lambda c: c.partition in ("iid", "identical"),
              "partition = {c.partition!r} does not draw from a Dirichlet; alpha is read by partition = 'dirichlet'"),
    "data_path": (lambda c: c.dataset == "synthetic",
                  "dataset = 'synthetic' makes its images and reads no file; use dataset = 'cifar10'"),
    "synthetic_train": (lambda c: c.dataset != "synthetic",
                        "only dataset = 'synthetic' reads it; for a smaller CIFAR-10 use train_subset"),
    "synthetic_test": (lambda c: c.dataset != "synthetic",
                       "only dataset = 'synthetic' reads it; for a smaller CIFAR-10 use test_subset"),
    "mask_mode": (lambda c: c.mask_keep_prob == 1,
                  "mask_keep_prob = 1 masks nothing; mask_mode is read when mask_keep_prob < 1"),
    "hessian_batch": (lambda c: c.hessian_every == 0 and c.sharpness_iters == 0,
                      "hessian_every = 0 and sharpness_iters = 0 compute no Hessian; set one of them > 0"),
    "width": (lambda c: c.model == "resnet18_gn",
              "model = 'resnet18_gn' has fixed widths (64..512); width is read by model = 'small_cnn_gn'"),
}


def check_fields_used(cfg: RunConfig, given) -> None:
    """Refuse fields in ``given`` (names the user set explicitly) that ``cfg``'s other settings
    never read (:data:`UNUSED_WHEN`).

    Raises:
        ConfigError: naming each such field, its value and why it would be ignored.
    """
    lines = [f"{f} = {getattr(cfg, f)!r} would be ignored: " + why.format(c=cfg)
             for f, (unused, why) in UNUSED_WHEN.items() if f in given and unused(cfg)]
    if lines:
        raise ConfigError("settings that this run would not use:\n  " + "\n  ".join(lines))


class Table1Spec(BaseModel):
    """The local-protocol grid (Table I): batch size x local epochs at one α."""

    model_config = ConfigDict(extra="forbid")
    batch_sizes: list[BatchSize] = [32, 128, "full"]
    local_epochs: list[int] = [1, 2, 5]
    alpha: float = 100.0


class Table2Spec(BaseModel):
    """The heterogeneity sweep (Table II): Dirichlet α at a fixed local protocol."""

    model_config = ConfigDict(extra="forbid")
    alphas: list[float] = [100.0, 1.0, 0.1]
    batch_size: BatchSize = 32
    local_epochs: int = 2


class MaskedSpec(BaseModel):
    """A profile's masked-training comparison (limitation 3; ours): every protocol × keep probability
    p × mask mode × seed (:func:`maskfed.studies.masked_training.profile_configs`)."""

    model_config = ConfigDict(extra="forbid")
    protocols: dict[str, tuple[BatchSize, int]]  # name -> (batch size or "full", local epochs τ)
    keep_probs: list[float] = [1.0, 0.5]         # keep probabilities p of a block; 1: no mask
    modes: list[Literal["independent", "shared"]] = ["independent", "shared"]  # mask modes compared at each p < 1
    sharpness_iters: int = Field(20, ge=1, le=MAX_ITERS)  # power iterations and Hutchinson probes on the final model
    hessian_batch: int = Field(512, ge=1, le=MAX_IMAGES)  # training images in the fixed Hessian batch (seeded by the seed)
    hessian_every: int = Field(10, ge=0, le=MAX_ROUNDS)  # rounds between Hessian-weighted recovery factors (unmasked runs); 0: never


class Profile(BaseModel):
    """A named bundle of settings for the whole book (``profiles/<name>.yaml``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str                 # one line for README and the book
    scaled_down: bool                # True unless this is the paper's exact setting
    base: dict                       # RunConfig fields shared by every run
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field([0], min_length=1, max_length=MAX_SEEDS)  # one run per seed
    workers: int = Field(1, ge=1, le=MAX_WORKERS)  # worker processes for independent runs
    table1: Table1Spec = Table1Spec()
    table2: Table2Spec = Table2Spec()
    control: dict = {"partition": "identical", "identical_client_seeds": True}
    # what `maskfed sweep` and `maskfed archive` compute for this profile; the book's chapters need the first three
    experiments: list[Literal["table1", "table2", "control", "masked"]] = ["table1", "table2", "control"]
    masked: MaskedSpec | None = None  # the masked-training runs (experiment "masked"); None: none
    overrides: dict[str, Any] = {}   # base fields the user set explicitly (load_profile); never set in yaml

    @model_validator(mode="after")
    def _masked_needs_its_spec(self) -> "Profile":
        if "masked" in self.experiments and self.masked is None:
            raise ValueError("experiments include 'masked' but the profile has no masked: section "
                             "(protocols, keep_probs, modes, ...)")
        return self

    @property
    def builds_book(self) -> bool:
        """Whether the book can be built with this profile (its experiments include Tables I, II and
        the control)."""
        return {"table1", "table2", "control"} <= set(self.experiments)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):  # a repeated seed would be counted twice in every median
            raise ValueError(f"seeds must be distinct; got {v}")
        return v

    def run(self, seed: int, **overrides) -> RunConfig:
        """The base config with ``overrides`` applied, at ``seed``.

        Raises:
            ConfigError: invalid fields, or an explicitly given field (in ``self.overrides`` or
                ``overrides``) that this run never reads (:func:`check_fields_used`).
        """
        cfg = make_run_config(**{**self.base, **overrides, "seed": seed})
        check_fields_used(cfg, set(self.overrides) | set(overrides))
        return cfg

    def grid(self, experiment: str) -> dict[str, tuple[list, str | None]]:
        """The RunConfig fields an experiment sets for its runs: field -> (values, profile key or None).

        Table I varies batch size and τ at one α; Table II varies α at one protocol; the control
        fixes Table II's protocol and its own fields. A key of None: the experiment fixes the field.

        Raises:
            ValueError: unknown experiment.
        """
        t1, t2 = self.table1, self.table2
        grids = {
            "table1": {"batch_size": (t1.batch_sizes, "table1.batch_sizes"),
                       "local_epochs": (t1.local_epochs, "table1.local_epochs"),
                       "alpha": ([t1.alpha], "table1.alpha"), "partition": (["dirichlet"], None)},
            "table2": {"alpha": (t2.alphas, "table2.alphas"), "batch_size": ([t2.batch_size], "table2.batch_size"),
                       "local_epochs": ([t2.local_epochs], "table2.local_epochs"), "partition": (["dirichlet"], None)},
            "control": {"batch_size": ([t2.batch_size], "table2.batch_size"),
                        "local_epochs": ([t2.local_epochs], "table2.local_epochs"),
                        **{k: ([v], f"control.{k}") for k, v in self.control.items()}},
        }
        if experiment not in grids:
            raise ValueError(f"experiment must be one of {list(grids)}; got {experiment!r}")
        return grids[experiment]

    def experiment_configs(self, experiment: str) -> list[RunConfig]:
        """Every run of one experiment: the product of its :meth:`grid` values, times the seeds.

        Raises:
            ConfigError: the user set a field the experiment's grid sets (it would be ignored),
                naming the field, the experiment, its values and what to do instead.
        """
        grid = self.grid(experiment)
        self._refuse_grid_overrides(experiment, grid)
        names = list(grid)
        return [self.run(s, **dict(zip(names, combo)))
                for combo in itertools.product(*(grid[n][0] for n in names)) for s in self.seeds]

    def _refuse_grid_overrides(self, experiment: str, grid: dict) -> None:
        clash = [f for f in self.overrides if f in grid]
        if not clash:
            return
        given = make_run_config(**self.base)  # the values as validated (flags arrive as strings)
        lines = [f"{f} = {getattr(given, f)!r} would be ignored: experiment {experiment} sets {f} to "
                 f"{_show(grid[f][0])} for its runs" + (f" (profile key {grid[f][1]})" if grid[f][1] else "")
                 for f in clash]
        flags = " ".join(f"--{f.replace('_', '-')} {getattr(given, f)}" for f in clash)
        keys = [grid[f][1] for f in clash if grid[f][1]]
        lines.append(f"for one setting: maskfed run --profile {self.name} {flags}")
        if keys:
            lines.append(f"to change the experiment: edit {', '.join(keys)} in src/maskfed/profiles/{self.name}.yaml"
                         + (f", or load_profile({self.name!r}, {_spec_kwargs(keys)}) (a notebook's overrides "
                            f"take the same keys)" if all(k.startswith("table") for k in keys) else ""))
        raise ConfigError(f"experiment {experiment} cannot take these settings:\n  " + "\n  ".join(lines))

    def table1_configs(self) -> list[RunConfig]:
        """Every (batch size, τ, seed) run of Table I."""
        return self.experiment_configs("table1")

    def table2_configs(self) -> list[RunConfig]:
        """Every (α, seed) run of Table II."""
        return self.experiment_configs("table2")

    def control_configs(self) -> list[RunConfig]:
        """The identical-shards, identical-seeds control (one run per seed)."""
        return self.experiment_configs("control")


def _show(values: list) -> str:
    return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else repr(v) for v in values) + "]"


def _spec_kwargs(keys: list[str]) -> str:
    by_spec: dict[str, list[str]] = {}
    for k in keys:
        spec, field = k.split(".")
        by_spec.setdefault(spec, []).append(f"{field!r}: [...]" if field.endswith("s") else f"{field!r}: ...")
    return ", ".join(f"{spec}={{{', '.join(fs)}}}" for spec, fs in by_spec.items())


def load_profile(name: str, *, seeds: list[int] | None = None, table1: dict | None = None,
                 table2: dict | None = None, **base_overrides) -> Profile:
    """Load ``profiles/<name>.yaml``; ``base_overrides`` replace fields of its base config.

    Explicitly given base fields are kept in ``Profile.overrides``, so an experiment whose grid sets
    one refuses it (:meth:`Profile.experiment_configs`). A given value is applied or refused, None
    included, except ``data_path=None``: "no path given" (:func:`maskfed.engine.data.load_cifar10`).

    Args:
        name: one of :data:`PROFILES`.
        seeds: replace the profile's seeds.
        table1, table2: replace fields of the profile's Table I / Table II grid, e.g.
            ``table2={"alphas": [0.5]}``.
        base_overrides: RunConfig fields, e.g. ``rounds=50``.

    Raises:
        ConfigError: unknown profile name (listing the allowed ones), invalid fields, or ``seed``
            (each run's seed comes from ``seeds``).
    """
    if name not in PROFILES:
        raise ConfigError(f"profile must be one of {list(PROFILES)}; got {name!r}")
    given = {k: v for k, v in base_overrides.items() if not (k == "data_path" and v is None)}
    if "seed" in given:
        raise ConfigError(f"seed = {given['seed']!r}: each run's seed comes from the profile's seeds; "
                          f"give seeds=[{given['seed']!r}] (command line: --seeds {given['seed']})")
    text = resources.files("maskfed").joinpath(f"profiles/{name}.yaml").read_text()
    raw = yaml.safe_load(text)
    raw["base"] = {**raw.get("base", {}), **given}
    raw["overrides"] = given
    if seeds is not None:
        raw["seeds"] = seeds
    for key, spec in (("table1", table1), ("table2", table2)):
        if spec is not None:
            raw[key] = {**raw.get(key, {}), **spec}
    try:
        profile = Profile(**raw)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc)) from None
    make_run_config(**profile.base)  # validate the base now, before any compute
    return profile
