"""Run configurations and profiles, validated before any compute starts.

A :class:`RunConfig` is one FedAvg run (one seed). A profile (``profiles/*.yaml``)
bundles a base config with the experiments of the book: the local-protocol
grid of Table I, the Dirichlet-α sweep of Table II and the identical-shards
control. Validation uses pydantic; every error names the parameter, the value
and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from typing import Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

BatchSize = Union[int, Literal["full"]]
PROFILES = ("smoke", "cpu", "paper")
#: RunConfig fields that change no result and so stay out of :meth:`RunConfig.key`.
NOT_IN_KEY = ("checkpoint_every",)


class ConfigError(ValueError):
    """A parameter outside its allowed values (raised before any compute)."""


class RunConfig(BaseModel):
    """One FedAvg run. Units in the comments; paper values in brackets (§IV-A)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # data
    dataset: Literal["cifar10", "synthetic"] = "cifar10"  # "synthetic": class-conditional noise images (smoke)
    data_path: str | None = None          # CIFAR-10 archive/folder; None: ../shared archive, then torchvision
    train_subset: int | None = Field(None, ge=100)  # images kept from the train split (None: all 50,000)
    test_subset: int | None = Field(None, ge=10)    # test images used for evaluation (None: all 10,000)
    synthetic_train: int = Field(2000, ge=100)      # images, synthetic dataset only
    synthetic_test: int = Field(500, ge=10)         # images, synthetic dataset only
    # partition
    num_clients: int = Field(100, ge=1)             # K, clients in the population [100]
    partition: Literal["dirichlet", "iid", "identical"] = "dirichlet"
    alpha: float = 100.0                            # Dirichlet concentration α [100, 1, 0.1]
    identical_client_seeds: bool = False            # control: every client shuffles with the same seed
    # FedAvg
    cohort_size: int = Field(10, ge=1)              # K_c, clients per round [10]
    rounds: int = Field(200, ge=1)                  # communication rounds [200]
    local_epochs: int = 2                           # τ, passes over the client's shard per round [1, 2, 5]
    batch_size: BatchSize = 32                      # images per SGD step, or "full" (one step per epoch) [32, 128, full]
    lr: float = Field(0.01, gt=0)                   # SGD learning rate, no momentum [0.01]
    aggregation: Literal["weighted", "uniform"] = "weighted"  # n_k-weighted mean [weighted]
    # model
    model: Literal["resnet18_gn", "small_cnn_gn"] = "resnet18_gn"
    gn_groups: int = Field(2, ge=1)                 # GroupNorm groups [2]
    width: int = Field(16, ge=1)                    # small CNN first-layer channels
    # evaluation and run
    eval_every: int = Field(10, ge=1)               # rounds between test evaluations
    eval_every_tail: int = Field(1, ge=1)           # rounds between evaluations in the last quarter (the summary window)
    seed: int = Field(0, ge=0)                      # model init, partition, cohorts, shuffling
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # bookkeeping only: changes no result, so RunConfig.key() leaves it out (config.json keeps it)
    checkpoint_every: int = Field(10, ge=0)         # rounds between checkpoints of a running run; 0: none.
    # Our default, not the paper's: 10 rounds keep at most about 2 minutes of work at risk wherever a
    # round takes under 12 s; the profiles set their own (smoke 1, cpu 5, paper 10).

    @field_validator("alpha")
    @classmethod
    def _alpha_positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"alpha (Dirichlet concentration) must be > 0; got {v}")
        return v

    @field_validator("local_epochs", mode="before")
    @classmethod
    def _tau_positive(cls, v) -> int:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"local_epochs (τ) must be an integer >= 1; got {v}")
        return v

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, v):
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if v == "full" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"batch_size must be a positive integer or 'full'; got {v!r}")

    @model_validator(mode="after")
    def _cohort_fits(self) -> "RunConfig":
        if self.cohort_size > self.num_clients:
            raise ValueError(
                f"cohort_size (K_c = {self.cohort_size}) must be <= num_clients (K = {self.num_clients})")
        return self

    def key(self) -> str:
        """Stable hash of every field that can change a result (16 hex digits).

        Leaves out :data:`NOT_IN_KEY` (``checkpoint_every``): a run resumed from a
        checkpoint gives the same numbers as one that never stopped, so how often it
        saved one must not split the cache.
        """
        blob = json.dumps(self.model_dump(mode="json", exclude=set(NOT_IN_KEY)), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        """Readable run name, e.g. ``cifar10-small_cnn_gn-dirichlet-a100-bs32-t2-s0``."""
        return (f"{self.dataset}-{self.model}-{self.partition}-a{self.alpha:g}-bs{self.batch_size}"
                f"-t{self.local_epochs}-s{self.seed}")


def make_run_config(**fields) -> RunConfig:
    """Build a :class:`RunConfig`, turning pydantic's errors into one clear :class:`ConfigError`.

    Raises:
        ConfigError: listing each bad parameter, its value and what is allowed.
    """
    try:
        return RunConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown parameter; allowed: {', '.join(RunConfig.model_fields)}"
        lines.append(f"{name} = {err.get('input')!r}: {msg}")
    return "invalid run configuration:\n  " + "\n  ".join(lines)


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


class Profile(BaseModel):
    """A named bundle of settings for the whole book (``profiles/<name>.yaml``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str                 # one line for README and the book
    scaled_down: bool                # True unless this is the paper's exact setting
    base: dict                       # RunConfig fields shared by every run
    seeds: list[int] = [0]
    workers: int = Field(1, ge=1)    # worker processes for independent runs
    table1: Table1Spec = Table1Spec()
    table2: Table2Spec = Table2Spec()
    control: dict = {"partition": "identical", "identical_client_seeds": True}

    def run(self, seed: int, **overrides) -> RunConfig:
        """The base config with ``overrides`` applied, at ``seed``."""
        return make_run_config(**{**self.base, **overrides, "seed": seed})

    def table1_configs(self) -> list[RunConfig]:
        """Every (batch size, τ, seed) run of Table I."""
        t = self.table1
        return [self.run(s, batch_size=bs, local_epochs=tau, alpha=t.alpha, partition="dirichlet")
                for bs in t.batch_sizes for tau in t.local_epochs for s in self.seeds]

    def table2_configs(self) -> list[RunConfig]:
        """Every (α, seed) run of Table II."""
        t = self.table2
        return [self.run(s, batch_size=t.batch_size, local_epochs=t.local_epochs, alpha=a, partition="dirichlet")
                for a in t.alphas for s in self.seeds]

    def control_configs(self) -> list[RunConfig]:
        """The identical-shards, identical-seeds control (one run per seed)."""
        t = self.table2
        return [self.run(s, batch_size=t.batch_size, local_epochs=t.local_epochs, **self.control)
                for s in self.seeds]


def load_profile(name: str, **base_overrides) -> Profile:
    """Load ``profiles/<name>.yaml``; ``base_overrides`` replace fields of its base config.

    Raises:
        ConfigError: unknown profile name (listing the allowed ones) or invalid fields.
    """
    if name not in PROFILES:
        raise ConfigError(f"profile must be one of {list(PROFILES)}; got {name!r}")
    text = resources.files("maskfed").joinpath(f"profiles/{name}.yaml").read_text()
    raw = yaml.safe_load(text)
    raw["base"] = {**raw.get("base", {}), **{k: v for k, v in base_overrides.items() if v is not None}}
    try:
        profile = Profile(**raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    make_run_config(**profile.base)  # validate the base now, before any compute
    return profile
