"""What sets the recovery factor? Cohort size, step size and model size, each at a fixed θ.

As in :mod:`maskfed.studies.stage`: at fixed θ a seeded pool trains once per protocol, nothing aggregated,
the same cohorts for every protocol (paired). Each (θ, protocol) keeps G_kl = ⟨Δ_k, Δ_l⟩ (float64,
:mod:`maskfed.studies.pool_gram`), so 1/Δ_S (eq. 3, 8), σ̂², ‖μ̂‖² (eq. 13-14) of any cohort need only G's
submatrix and the shard sizes. Axes: cohort size (:func:`eq12_table`, vs eq. 12), step size
(:func:`lr_verdict`), model size (:func:`model_study`). Design, rules and thresholds ours; quantities the paper's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from maskfed.core import diversity
from maskfed.engine import checkpoint, fedavg, runner
from maskfed.engine.config import BatchSize, ConfigError, load_profile, make_settings, Profile, RunConfig
from maskfed.names import CPU_PAPER
from maskfed.paths import results_dir
from maskfed.studies import central, stage
from maskfed.studies.pool_gram import measure_many, parameter_count, protocol_config, Task, task_cost, theta_digest

#: Extra SeedSequence entry of the cohorts drawn for each K_c. Ours.
COHORT_STREAM = 1299709
#: Per-cohort metrics read from a Gram matrix (the stage study's, plus the two moments A and B).
METRICS = ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat")


# --------------------------------------------------------------------------- pure pieces

def cohort_metrics(gram_PxP, n_P, cohorts_CxK) -> pd.DataFrame:
    """Per-cohort measurements from the pool's Gram matrix ``gram_PxP`` ([pool, pool], float64; shard sizes
    ``n_P``, [pool]) of ``cohorts_CxK`` (pool positions, [C, K_c >= 2]), equal to
    :func:`maskfed.engine.fedavg.round_metrics` on the cohort's updates: one row per cohort, ``k_c``,
    ``cohort`` (positions, space-separated), :data:`METRICS`, ``A``, ``B``. ValueError: a cohort of fewer than
    2 clients or a position outside the pool."""
    g = torch.as_tensor(gram_PxP, dtype=torch.float64)
    n = np.asarray(n_P, dtype=np.float64)
    c = np.asarray(cohorts_CxK)
    if c.ndim != 2 or c.shape[1] < 2:
        raise ValueError(f"cohorts_CxK must have shape [C, K_c] with K_c >= 2; got shape {c.shape}")
    if c.min() < 0 or c.max() >= g.shape[0]:
        raise ValueError(f"cohort positions must lie in 0..{g.shape[0] - 1} (the pool); got {c.min()}..{c.max()}")
    rows = []
    for cohort in c:
        idx = torch.as_tensor(cohort, dtype=torch.long)
        sub = g[idx][:, idx]
        sn = diversity.signal_noise_from_gram(sub)
        rows.append({"k_c": len(cohort), "cohort": " ".join(map(str, cohort)),
                     "recovery_unweighted": diversity.recovery_factor_from_gram(sub),
                     "recovery_weighted": diversity.recovery_factor_from_gram(sub, n[cohort]),
                     "sigma2_hat": sn.sigma2_hat, "mu2_hat": sn.mu2_hat, "A": sn.A, "B": sn.B})
    return pd.DataFrame(rows)


def draw_cohorts(pool_size: int, k_c: int, num_cohorts: int, seed: int) -> np.ndarray:
    """``num_cohorts`` cohorts of ``k_c`` distinct pool positions (sorted), seeded by (seed, :data:`COHORT_STREAM`,
    k_c); the whole pool once. ValueError: ``k_c`` outside 2..pool_size."""
    if not 2 <= k_c <= pool_size:
        raise ValueError(f"k_c (K_c = {k_c}) must be between 2 and the pool size {pool_size}")
    if k_c == pool_size:
        return np.arange(pool_size)[None, :]
    rng = np.random.default_rng([seed, COHORT_STREAM, k_c])
    return np.stack([np.sort(rng.choice(pool_size, size=k_c, replace=False)) for _ in range(num_cohorts)])


def cohort_size_table(gram_PxP, n_P, sizes, num_cohorts: int, seed: int) -> pd.DataFrame:
    """:func:`cohort_metrics` of cohorts of every size in ``sizes`` (:func:`draw_cohorts`)."""
    pool = torch.as_tensor(gram_PxP).shape[0]
    return pd.concat([cohort_metrics(gram_PxP, n_P, draw_cohorts(pool, int(k), num_cohorts, seed)) for k in sizes],
                     ignore_index=True)


def signal_to_noise(cohorts: pd.DataFrame) -> float:
    """r̂ = mean ‖μ̂‖² / mean σ̂² over the cohorts given (eq. 12's r from the estimators of eq. 13-14).

    A ratio of means: for cohorts drawn without replacement from a pool of N clients, E[σ̂²] = S² (the
    pool's variance) and E[‖μ̂‖²] = ‖Δ̄‖² − S²/N at every K_c, so eq. 12 with this r gives K_c·E[B]/E[A]
    exactly (1/Δ_S itself at K_c = N). Derivation ours (tests/test_factor_axes.py checks it by enumeration).
    """
    return float(cohorts["mu2_hat"].mean() / cohorts["sigma2_hat"].mean())


def eq12_table(cohorts: pd.DataFrame, ref_kc: int) -> pd.DataFrame:
    """Measured 1/Δ_S at each K_c of ``cohorts`` (:func:`cohort_size_table` rows of one protocol at one θ)
    against eq. 12 with r̂ (:func:`signal_to_noise`) from the cohorts of size ``ref_kc`` (ValueError: none).

    One row per K_c: ``k_c``, ``cohorts``, ``median``/``q1``/``q3`` of unweighted 1/Δ_S, ``share``
    (median/K_c; ``share_q1``, ``share_q3``), ``predicted`` (K_c r̂ + 1)/(r̂ + 1), ``predicted_share``,
    ``ratio_of_means`` (K_c·mean B / mean A), ``rel_dev`` (median/predicted − 1), ``within_iqr``, ``r``."""
    ref = cohorts[cohorts["k_c"] == ref_kc]
    if ref.empty:
        raise ValueError(f"ref_kc = {ref_kc} has no cohorts; sizes measured: {sorted(cohorts['k_c'].unique())}")
    r = signal_to_noise(ref)
    rows = []
    for k, g in cohorts.groupby("k_c"):
        q1, med, q3 = np.quantile(g["recovery_unweighted"], [0.25, 0.5, 0.75])
        pred = float(diversity.predicted_recovery_factor(r, k)) if r > -1 else float("nan")
        rows.append({"k_c": int(k), "cohorts": len(g), "median": med, "q1": q1, "q3": q3, "share": med / k,
                     "share_q1": q1 / k, "share_q3": q3 / k, "predicted": pred, "predicted_share": pred / k,
                     "ratio_of_means": k * g["B"].mean() / g["A"].mean(), "rel_dev": med / pred - 1,
                     "within_iqr": bool(q1 <= pred <= q3), "r": r})
    return pd.DataFrame(rows)


def share_falls(eq12: pd.DataFrame) -> bool:
    """Whether the measured share (1/Δ_S)/K_c falls at every step up in K_c (eq. 12's expectation for any r < ∞)."""
    s = eq12.sort_values("k_c")["share"].to_numpy()
    return bool(np.all(np.diff(s) < 0))


def lr_verdict(table: pd.DataFrame, *, small_bs: int, large_bs: int, lr: float, factor: float) -> dict:
    """Is it the batch size or the step size that sets 1/Δ_S? A stated rule, ours.

    Minibatch cells at τ = 1: A (``small_bs``, ``lr``), B (``large_bs``, ``lr``), C (``large_bs``, ``factor``·lr).
    The closest pair of medians names the cause (A ≈ B "step size", A ≈ C "lr/bs", B ≈ C "batch size"); "clear"
    when its difference is within A's IQR and the others' are not. Returns ``reference``, ``same_lr``,
    ``same_ratio`` (medians of A, B, C), ``differences``, ``iqr`` (A's), ``closer``, ``clear``; KeyError: a missing cell.
    """
    t = table[table["local_epochs"] == 1].set_index(["batch_size", "lr"])

    def cell(bs, step):
        hit = [i for i in t.index if i[0] == str(bs) and math.isclose(i[1], step, rel_tol=1e-9)]
        if not hit:
            raise KeyError(f"no τ = 1 cell with batch size {bs} at lr {step:g}; cells: {list(t.index)}")
        return t.loc[hit[0]]

    ref, same_lr, same_ratio = cell(small_bs, lr), cell(large_bs, lr), cell(large_bs, lr * factor)
    a, b, c = (x["recovery_unweighted"] for x in (ref, same_lr, same_ratio))
    diffs = {"step size": abs(a - b), "lr/bs": abs(a - c), "batch size": abs(b - c)}
    iqr = ref["recovery_unweighted_q3"] - ref["recovery_unweighted_q1"]
    closer = min(diffs, key=diffs.get)
    others = [d for k, d in diffs.items() if k != closer]
    return {"reference": a, "same_lr": b, "same_ratio": c, "differences": diffs, "iqr": iqr, "closer": closer,
            "clear": bool(diffs[closer] <= iqr and all(d > iqr for d in others))}


def lr_shape(table: pd.DataFrame, batch_size: str, local_epochs: int) -> dict:
    """How one cell's median 1/Δ_S moves as lr rises (:func:`lr_axis` rows): ``values`` (Series, lr ->
    median), ``spread`` (largest over smallest; 1: lr changes nothing) and ``shape``: "flat" (within 1 % of
    its first value), "rises", "falls", else "dips" (lowest at an inner lr) or "peaks". ValueError: fewer
    than two step sizes."""
    g = table[(table["batch_size"].astype(str) == str(batch_size)) & (table["local_epochs"] == local_epochs)]
    if len(g) < 2:
        raise ValueError(f"batch size {batch_size}, τ {local_epochs} has {len(g)} step size(s); need 2 or more")
    v = g.sort_values("lr").set_index("lr")["recovery_unweighted"]
    steps = np.sign(np.diff(v.to_numpy()))
    if (np.abs(v / v.iloc[0] - 1) <= 0.01).all():
        shape = "flat"
    elif (steps > 0).all() or (steps < 0).all():
        shape = "rises" if steps[0] > 0 else "falls"
    else:
        shape = "dips" if v.idxmin() not in (v.index[0], v.index[-1]) else "peaks"
    return {"values": v, "shape": shape, "spread": float(v.max() / v.min())}


def cliff(table: pd.DataFrame) -> float:
    """Smallest full-batch over largest minibatch median 1/Δ_S of one θ's protocols (the Table I
    chapter's cliff; :func:`maskfed.studies.stage.cliff_by_stage`)."""
    return float(stage.cliff_by_stage(table.assign(stage=0)).iloc[0])


def path_checks(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Does the way θ was reached change the measurement? A stated rule, ours: for a model of ``table``
    (:attr:`ModelStudy.table`) at FedAvg and centralised-SGD θ of the same targets, it does not where the
    medians of 1/Δ_S differ by at most the FedAvg θ's IQR. Per model measured both ways (:func:`model_label`,
    in the table's order), one row per (target, batch_size, local_epochs) measured both ways:
    ``acc_fedavg``, ``acc_centralised``, ``fedavg``, ``centralised``, ``difference``, ``iqr_fedavg``, ``within``."""
    keys, out = ["target", "batch_size", "local_epochs"], {}
    for (model, width), t in table.groupby(["model", "width"], dropna=False, sort=False):
        if t["source"].nunique() < 2:
            continue
        f = t[t["source"] == "fedavg"].set_index(keys)
        c = t[t["source"] == "centralised"].set_index(keys)
        both = f.index.intersection(c.index)
        check = pd.DataFrame({"acc_fedavg": f.loc[both, "test_acc"], "acc_centralised": c.loc[both, "test_acc"],
                              "fedavg": f.loc[both, "recovery_unweighted"],
                              "centralised": c.loc[both, "recovery_unweighted"]})
        check["difference"] = check["centralised"] - check["fedavg"]
        check["iqr_fedavg"] = f.loc[both, "recovery_unweighted_q3"] - f.loc[both, "recovery_unweighted_q1"]
        check["within"] = check["difference"].abs() <= check["iqr_fedavg"]
        out[model_label(model, width)] = check.reset_index()
    return out


def route_summary(check: pd.DataFrame) -> dict:
    """How much the way θ was reached moves 1/Δ_S in one :func:`path_checks` table: ``min``, ``median``,
    ``max`` of the ratio centralised / FedAvg over its cells, ``cells``, and ``beyond`` (cells whose
    difference exceeds the FedAvg θ's interquartile range)."""
    ratio = check["centralised"] / check["fedavg"]
    return {"min": float(ratio.min()), "median": float(ratio.median()), "max": float(ratio.max()),
            "cells": int(len(check)), "beyond": int((~check["within"]).sum())}


# --------------------------------------------------------------------------- θ at a target accuracy

@dataclass
class Checkpoint:
    """A θ at (or after) a target test accuracy, and how it was reached."""

    model: str
    width: int | None           # None for ResNet-18-GN
    source: str                 # "fedavg" (a trajectory's kept θ) or "centralised" (centralised SGD)
    target: float               # the test accuracy aimed at (fraction); NaN for a θ taken at a set round
    reached: bool               # False: the source never reached it (θ is then None)
    test_acc: float             # accuracy of θ on the test set (fraction; NaN when not reached)
    when: int                   # FedAvg round or SGD step of θ (-1 for a target not reached; a set round's own)
    images: int                 # training images passed to reach θ (FedAvg: over every client of every round)
    where: str                  # folder the θ was read from
    theta: torch.Tensor | None = field(default=None, repr=False)

    def row(self) -> dict:
        """The checkpoint as a table row (θ as its digest)."""
        return vars(self) | {"theta": theta_digest(self.theta) if self.theta is not None else ""}


def _missed(cfg: RunConfig, source: str, target: float, where: str) -> Checkpoint:
    """The :class:`Checkpoint` of a target never reached."""
    return Checkpoint(cfg.model, _width(cfg), source, target, False, float("nan"), -1, -1, where)


def fedavg_checkpoints(cfg: RunConfig, targets, candidates, *, trajectory: Path | None = None,
                       last_if_unreached: bool = False, progress: bool = False) -> tuple[list[Checkpoint], pd.DataFrame]:
    """θ of ``cfg``'s FedAvg trajectory (the folder ``trajectory``, else its run in ``results/runs``, trained
    when missing, keeping θ at ``candidates``: rounds, or every n-th as an int) at the first kept round
    reaching each target, tested by :func:`maskfed.studies.stage.build_ladder`; and the accuracy of every
    kept round (round, test_acc, test_loss). ``last_if_unreached``: see :func:`_first_reaching`."""
    if trajectory is None and runner.find_run(cfg) is None:
        runner.run(cfg, progress=progress, keep_every=candidates)
    every = candidates if isinstance(candidates, int) else 1
    rounds = None if isinstance(candidates, int) else tuple(candidates)
    spec = stage.StageSpec(target_accuracies=tuple(targets), candidate_every=every, candidate_rounds=rounds)
    ladder = stage.build_ladder(cfg, spec, progress=progress, trajectory=trajectory)
    acc = ladder.accuracy.set_index("round")["test_acc"]
    where = (Path(trajectory).name if trajectory is not None else
             json.loads((ladder.path / "provenance.json").read_text())["trajectory"])
    rounds = ladder.checkpoints["round"].to_numpy()
    return _first_reaching(cfg, targets, acc, where, lambda r, t: ladder.theta(int(np.flatnonzero(rounds == r)[0])),
                           last_if_unreached), ladder.accuracy


def _first_reaching(cfg: RunConfig, targets, acc: pd.Series, where: str, theta_of, last_if_unreached: bool = False
                    ) -> list[Checkpoint]:
    """Per target, the FedAvg :class:`Checkpoint` at the first round of ``acc`` (round -> test accuracy) reaching
    it, θ ``theta_of(round, target)``; an unreached target gets the last round (``last_if_unreached``; pick_rounds
    keeps it as a checkpoint) or none."""
    out = []
    for t in targets:
        hit = acc.index[acc.to_numpy() >= t]
        r = int(hit[0]) if len(hit) else int(acc.index.max()) if last_if_unreached else None
        out.append(_missed(cfg, "fedavg", t, where) if r is None else Checkpoint(
            cfg.model, _width(cfg), "fedavg", t, bool(len(hit)), float(acc.loc[r]), r, _fedavg_images(cfg, r), where,
            theta_of(r, t).clone()))
    return out


def _model_config(base: RunConfig, m: "ModelSpec", **fields) -> RunConfig:
    """``base`` with ``m``'s model (and width) and ``fields``."""
    return protocol_config(base, model=m.model, **({} if m.width is None else {"width": m.width}), **fields)


def trajectory_config(base: RunConfig, m: "ModelSpec") -> RunConfig:
    """Run configuration of model ``m``'s own FedAvg trajectory (``m.rounds`` set): ``base`` (the stage-ladder
    run) with ``m``'s model, rounds and evaluation interval (also in the last quarter)."""
    # a checkpoint every 2 rounds at most, so an interruption loses little (not part of the key)
    return _model_config(base, m, rounds=m.rounds, eval_every=m.eval_every, eval_every_tail=m.eval_every,
                         checkpoint_every=min(m.keep_every, 2))


def trajectory_protocol(profile: Profile) -> str:
    """The protocol of ``profile``'s stage-ladder run (the model-size study's θ), as :func:`protocol_label`."""
    base = stage.ladder_config(profile)
    return protocol_label(base.batch_size, base.local_epochs)


def evaluated_checkpoints(cfg: RunConfig, targets, folder: Path, at_rounds=()) -> tuple[list[Checkpoint], pd.DataFrame]:
    """θ of a finished FedAvg run ``folder`` of ``cfg`` at the first evaluated round whose test accuracy (its
    own ``metrics.csv``) reaches each target, θ from its ``thetas.pt``; then one at each of ``at_rounds`` that
    no target took (target NaN; not reached where the run has not got there yet); and the accuracy at every
    evaluated round (round, test_acc, test_loss). ValueError: the folder holds another configuration, or
    keeps no θ at a round that reached a target or is asked for."""
    folder = Path(folder)
    if not stage.holds(folder, cfg):
        raise ValueError(f"trajectory {folder} holds another run than {cfg.label()}")
    metrics = pd.read_csv(folder / "metrics.csv")
    acc = metrics.loc[metrics["test_acc"].notna(), ["round", "test_acc", "test_loss"]].reset_index(drop=True)
    thetas = {}

    def theta_of(r: int, t: float) -> torch.Tensor:
        if not thetas:
            thetas.update(runner.load_thetas(folder) or {})
        if r not in thetas:
            why = f"first reaching {t}" if t == t else "in at_rounds"
            raise ValueError(f"trajectory {folder} keeps no θ at round {r} ({why}); it keeps {sorted(thetas)}")
        return thetas[r]

    by_round = acc.set_index("round")["test_acc"]
    got = _first_reaching(cfg, targets, by_round, folder.name, theta_of)
    taken = {c.when for c in got if c.reached}
    for r in (r for r in at_rounds if r not in taken):
        there = r in by_round.index  # an unfinished run may not have got there yet
        got.append(Checkpoint(cfg.model, _width(cfg), "fedavg", math.nan, there,
                              float(by_round.loc[r]) if there else math.nan, r, _fedavg_images(cfg, r) if there else -1,
                              folder.name, theta_of(r, math.nan).clone() if there else None))
    return got, acc


def _fedavg_images(cfg: RunConfig, rounds: int) -> int:
    """Training images passed in ``rounds`` FedAvg rounds (K_c clients of about N/K images, τ epochs each)."""
    images = runner.images_for(cfg)
    n = cfg.train_subset or len(images.y_train)
    return int(round(rounds * cfg.cohort_size * cfg.local_epochs * n / cfg.num_clients))


def _width(cfg: RunConfig) -> int | None:
    return None if cfg.model == "resnet18_gn" else cfg.width


def central_checkpoints(cfg: RunConfig, spec: central.CentralSpec, *, progress: bool = False
                        ) -> tuple[list[Checkpoint], pd.DataFrame]:
    """θ of centralised SGD (:func:`maskfed.studies.central.train`, cached) at each target, and the path's
    accuracy log (step, epochs, images, test_acc, test_loss)."""
    res = central.train(cfg, spec, progress=progress)
    out = []
    for _, r in res.checkpoints.iterrows():
        t = float(r["target"])
        out.append(Checkpoint(cfg.model, _width(cfg), "centralised", t, True, float(r["test_acc"]), int(r["step"]),
                              int(r["images"]), res.path.name, res.thetas[t].clone()) if bool(r["reached"])
                   else _missed(cfg, "centralised", t, res.path.name))
    return out, res.accuracy


# --------------------------------------------------------------------------- cohort and step-size axes

Protocol = tuple[BatchSize, int]


class AxesSpec(BaseModel):
    """Settings of the cohort-size and step-size axes at one θ (ours). Units in the comments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: float = Field(0.45, gt=0, le=1)        # test accuracy (fraction) of the one θ: first kept round reaching it
    cohort_sizes: tuple[int, ...] = (2, 5, 10, 20, 50, 100)  # K_c of the cohort-size axis (those up to K are kept)
    ref_kc: int = Field(10, ge=2)                  # K_c whose cohorts give eq. 12's r (the paper's K_c)
    cohort_draws: int = Field(200, ge=1)           # cohorts drawn per K_c from the pool of every client
    lrs: tuple[float, ...] = (0.0025, 0.005, 0.01, 0.02, 0.04)  # SGD step sizes of the step-size axis
    lr_pool: int = Field(20, ge=2)                 # clients trained per step-size cell (a seeded pool)
    lr_cohorts: int = Field(100, ge=1)             # cohorts of K_c drawn from that pool

    @model_validator(mode="after")
    def _positive(self) -> "AxesSpec":
        if not self.cohort_sizes or min(self.cohort_sizes) < 2:
            raise ValueError(f"cohort_sizes must be K_c values >= 2; got {list(self.cohort_sizes)}")
        if not self.lrs or min(self.lrs) <= 0:
            raise ValueError(f"lrs must be step sizes > 0; got {list(self.lrs)}")
        return self


#: Our defaults per profile whose trajectory gives the θ (the target is one its trajectory reaches).
AXES_DEFAULTS = {
    "smoke": {"target": 0.3, "cohort_sizes": (2, 5, 10), "cohort_draws": 20, "lr_pool": 6, "lr_cohorts": 20, "ref_kc": 5},
    "cpu": {"target": 0.35},
    "cpu-long": {"target": 0.45},
    CPU_PAPER: {"target": 0.45},
    "paper": {"target": 0.45, "lr_pool": 12},
}


def make_axes_spec(profile: str, **fields) -> AxesSpec:
    """:data:`AXES_DEFAULTS` of ``profile`` with ``fields`` (None: not given) replacing them; ConfigError on
    unknown fields or invalid values."""
    return make_settings(AxesSpec, AXES_DEFAULTS.get(profile, {}), fields, "axis settings")


def minibatches(profile: Profile) -> tuple[int, int]:
    """(small, large) minibatch sizes of the axes: Table II's batch size and 4 times it; ConfigError if "full"."""
    small = profile.table2.batch_size
    if small == "full":
        raise ConfigError("the step-size axis needs a minibatch size in table2.batch_size; got 'full'")
    return small, 4 * small


def _kept(profile: Profile):
    """The rounds of ``profile``'s stage-ladder trajectory whose θ it keeps (a list, or every n-th as an int)."""
    sspec = stage.make_spec(profile.name)
    return sspec.candidate_rounds if sspec.candidate_rounds is not None else sspec.candidate_every


def axes_theta(profile: Profile, spec: AxesSpec, *, trajectory: Path | None = None,
               progress: bool = False) -> tuple[Checkpoint, pd.DataFrame]:
    """The one θ of the cohort-size and step-size axes (:func:`fedavg_checkpoints` of the profile's stage-ladder
    run at ``spec.target``, else its last kept round) and the accuracy of every kept round."""
    (ck,), acc = fedavg_checkpoints(stage.ladder_config(profile), [spec.target], _kept(profile),
                                    trajectory=trajectory, last_if_unreached=True, progress=progress)
    return ck, acc


def cohort_protocols(profile: Profile) -> dict[str, Protocol]:
    """The cohort-size axis's protocols: full batch τ 1, the large minibatch τ 1 and Table II's protocol."""
    small, large = minibatches(profile)
    t2 = profile.table2
    return {"full batch, τ = 1": ("full", 1), f"bs {large}, τ = 1": (large, 1),
            f"bs {small}, τ = {t2.local_epochs}": (small, t2.local_epochs)}


def cohort_axis(profile: Profile, ck: Checkpoint, spec: AxesSpec, *, workers: int = 1,
                progress: bool = False) -> pd.DataFrame:
    """:func:`cohort_size_table` rows (with a ``protocol`` column) at every cohort size of ``spec`` up to K
    for :func:`cohort_protocols`, at θ of ``ck``, with a pool of every client."""
    base = stage.ladder_config(profile)
    pool = list(range(base.num_clients))
    sizes = [k for k in spec.cohort_sizes if k <= base.num_clients]
    protos = cohort_protocols(profile)
    tasks = [Task(protocol_config(base, batch_size=bs, local_epochs=tau), ck.theta, pool, _label(ck),
                  cost=len(pool) * tau * (1 if bs == "full" else 3)) for bs, tau in protos.values()]
    grams = measure_many(tasks, workers=workers, progress=progress)
    return pd.concat([cohort_size_table(g.gram, g.n, sizes, spec.cohort_draws, base.seed).assign(protocol=name)
                      for name, g in zip(protos, grams)], ignore_index=True)


def lr_cells(profile: Profile, spec: AxesSpec) -> list[tuple[BatchSize, int, float]]:
    """The step-size axis's cells (batch size, τ, lr): for every lr of ``spec``, full batch at τ = 1 and 2
    and the small minibatch at τ = 1; the large minibatch at τ = 1 at the base lr and at
    (large/small) × base lr."""
    small, large = minibatches(profile)
    lr0 = stage.ladder_config(profile).lr
    cells = [(bs, tau, lr) for lr in spec.lrs for bs, tau in (("full", 1), ("full", 2), (small, 1))]
    return cells + [(large, 1, lr0), (large, 1, lr0 * large / small)]


def lr_axis(profile: Profile, ck: Checkpoint, spec: AxesSpec, *, workers: int = 1,
            progress: bool = False) -> pd.DataFrame:
    """1/Δ_S, σ̂² and ‖μ̂‖² (medians and quartiles over cohorts of K_c from a seeded pool of
    ``spec.lr_pool`` clients) in every cell of :func:`lr_cells`, at θ of ``ck``: one row per cell,
    ``batch_size`` (text), ``local_epochs``, ``lr`` and :func:`maskfed.studies.stage.summarise_cohorts`."""
    base = stage.ladder_config(profile)
    pool, cohorts = stage.pool_and_cohorts(base.num_clients, spec.lr_pool, min(base.cohort_size, spec.lr_pool),
                                           spec.lr_cohorts, base.seed)
    cells = lr_cells(profile, spec)
    tasks = [Task(protocol_config(base, batch_size=bs, local_epochs=tau, lr=lr), ck.theta, list(pool), _label(ck),
                  cost=tau * (1 if bs == "full" else 3)) for bs, tau, lr in cells]
    grams = measure_many(tasks, workers=workers, progress=progress)
    return pd.DataFrame([{"batch_size": str(bs), "local_epochs": tau, "lr": lr,
                          **stage.summarise_cohorts(cohort_metrics(g.gram, g.n, cohorts))}
                         for (bs, tau, lr), g in zip(cells, grams)])


def _label(ck: Checkpoint) -> str:
    return f"{ck.source} θ at {ck.when} ({ck.where})"


# --------------------------------------------------------------------------- model size

class ModelSpec(BaseModel):
    """One model of the model-size study and where its θ come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Literal["small_cnn_gn", "resnet18_gn"]              # network
    width: int | None = Field(None, ge=1)                      # small CNN first-layer channels; None for ResNet-18-GN
    source: Literal["fedavg", "centralised"] = "centralised"   # θ from the FedAvg trajectory or centralised SGD
    # A FedAvg trajectory of the model's own, shorter than the profile's (ours: a budget, for a model whose
    # run at the profile's rounds costs too much here). None: the profile's stage-ladder run and its kept θ.
    rounds: int | None = Field(None, ge=1)        # FedAvg rounds of that trajectory
    eval_every: int | None = Field(None, ge=1)    # rounds between its test evaluations (every test image), last quarter too
    keep_from: int = Field(0, ge=0)               # first round (after 0, θ_0) whose θ it keeps
    keep_every: int = Field(1, ge=1)              # rounds between kept θ from keep_from on
    # Rounds of that trajectory whose θ is measured too, whatever its accuracy (ours: the paper reports Table I
    # after 200 rounds); each a round it keeps. Such a θ has no accuracy target (target NaN in the tables).
    at_rounds: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if (self.model == "small_cnn_gn") != (self.width is not None):
            raise ValueError(f"width is given for model 'small_cnn_gn' only; got model {self.model!r}, width {self.width}")
        if self.rounds is not None and (self.source != "fedavg" or self.eval_every is None):
            raise ValueError("rounds (a trajectory of the model's own) needs source 'fedavg' and eval_every; got "
                             f"source {self.source!r}, eval_every {self.eval_every}")
        if self.rounds is None and (self.eval_every is not None or self.keep_from or self.keep_every != 1
                                    or self.at_rounds):
            raise ValueError("eval_every, keep_from, keep_every and at_rounds describe a trajectory of the model's own: "
                             "give rounds too")
        unkept = [r for r in self.at_rounds if r not in self.kept() or r not in self.evaluated()]
        if unkept:
            raise ValueError(f"at_rounds must be rounds the trajectory tests and keeps (every {self.eval_every} up to "
                             f"{self.rounds}, kept: {self.kept()}); got {unkept}")
        return self

    def evaluated(self) -> list[int]:
        """Rounds (1-based) after which the model's own trajectory reads the test set
        (:func:`maskfed.engine.fedavg.eval_rounds`, the last quarter at the same interval); [] without one."""
        if self.rounds is None:
            return []
        return sorted(r + 1 for r in fedavg.eval_rounds(self.rounds, self.eval_every, self.eval_every))

    def kept(self) -> list[int]:
        """Rounds whose θ the model's own trajectory (``rounds`` set) keeps: 0, every ``keep_every`` from
        ``keep_from``, and the last (:func:`maskfed.engine.runner.kept_rounds`)."""
        return runner.kept_rounds(self.rounds, [0, *range(max(self.keep_from, 1), self.rounds + 1, self.keep_every)])


class ModelStudySpec(BaseModel):
    """Settings of a model-size study (ours). Units in the comments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: tuple[ModelSpec, ...]                  # models, each with its θ source
    targets: tuple[float, ...]                     # common test accuracies (fractions) of the θ
    protocols: tuple[tuple[BatchSize, int], ...]   # (batch size, τ) measured at every θ, in order of priority
    pool_size: int = Field(20, ge=2)               # clients trained per (θ, protocol)
    num_cohorts: int = Field(100, ge=1)            # cohorts of K_c drawn from the pool
    eval_every: int = Field(50, ge=1)              # centralised SGD: steps between test evaluations
    max_steps: int = Field(40000, ge=1)            # centralised SGD: steps at most
    eval_images: int | None = Field(None, ge=10)   # centralised SGD: test images while searching; None: all


NINE: tuple[Protocol, ...] = (("full", 1), ("full", 5), (128, 1), (32, 2), (32, 5), ("full", 2), (128, 2), (128, 5), (32, 1))
#: Our defaults. The first five protocols are the issue's minimum (full batch τ 1 and 5, bs 128 τ 1,
#: bs 32 τ 2 and 5); ResNet-18-GN measures those five (``all_protocols`` adds the other four).
MODEL_DEFAULTS = {
    "smoke": {
        "models": ModelStudySpec(models=(ModelSpec(model="small_cnn_gn", width=4, source="fedavg"),
                                         ModelSpec(model="small_cnn_gn", width=4),
                                         ModelSpec(model="small_cnn_gn", width=2)),
                                 targets=(0.3,), protocols=(("full", 1), (64, 1), (16, 2)), pool_size=6,
                                 num_cohorts=20, eval_every=5, max_steps=200),
        "resnet": ModelStudySpec(models=(ModelSpec(model="resnet18_gn"),), targets=(0.2,),
                                 protocols=(("full", 1), (64, 1)), pool_size=3, num_cohorts=3, eval_every=5,
                                 max_steps=30, eval_images=50),
        "resnet-fedavg": ModelStudySpec(models=(ModelSpec(model="resnet18_gn", source="fedavg", rounds=2, eval_every=1,
                                                          at_rounds=(2,)),),
                                        targets=(0.05, 0.99), protocols=(("full", 1), (64, 1)), pool_size=3,
                                        num_cohorts=3),
    },
    CPU_PAPER: {
        "models": ModelStudySpec(models=(ModelSpec(model="small_cnn_gn", width=8, source="fedavg"),
                                         ModelSpec(model="small_cnn_gn", width=8),
                                         ModelSpec(model="small_cnn_gn", width=16),
                                         ModelSpec(model="small_cnn_gn", width=32)),
                                 targets=(0.35, 0.45, 0.55), protocols=NINE, pool_size=20, num_cohorts=100,
                                 eval_every=50, max_steps=40000),
        "resnet": ModelStudySpec(models=(ModelSpec(model="resnet18_gn"),), targets=(0.35, 0.45, 0.55),
                                 protocols=NINE[:5], pool_size=12, num_cohorts=100, eval_every=250,
                                 max_steps=12000, eval_images=2000),
        # ResNet-18-GN's own FedAvg trajectory (issues 29, 41): the paper's 200 rounds (about 8 h on 2 cores:
        # docs/studies.md); the test set is read every 4 rounds, θ kept at every evaluated round (45 MB each);
        # measured at the θ of rounds 100 and 200 too (the paper's Table I is read after 200 rounds)
        "resnet-fedavg": ModelStudySpec(models=(ModelSpec(model="resnet18_gn", source="fedavg", rounds=200, eval_every=4,
                                                          keep_from=4, keep_every=4, at_rounds=(100, 200)),),
                                        targets=(0.35, 0.45, 0.55), protocols=NINE[:5], pool_size=12, num_cohorts=100),
    },
}
MODEL_PARTS = ("models", "resnet", "resnet-fedavg")
#: What each part measures, as the book names it.
PART_NAMES = {"models": "The small-CNN study", "resnet": "ResNet-18-GN at centralised-SGD θ",
              "resnet-fedavg": "ResNet-18-GN at θ of its own FedAvg trajectory"}


def model_spec(profile: str, part: str, *, all_protocols: bool = False) -> ModelStudySpec:
    """The default :class:`ModelStudySpec` of a profile's ``part`` (:data:`MODEL_PARTS`); ``all_protocols`` adds
    the profile's Table I grid. ConfigError: a profile or part without defaults."""
    if profile not in MODEL_DEFAULTS:
        raise ConfigError(f"no model-size study is defined for profile {profile!r}; defined for: "
                          f"{', '.join(MODEL_DEFAULTS)}")
    if part not in MODEL_DEFAULTS[profile]:
        raise ConfigError(f"part must be one of {list(MODEL_DEFAULTS[profile])}; got {part!r}")
    spec = MODEL_DEFAULTS[profile][part]
    if all_protocols:
        t1 = load_profile(profile).table1
        grid = [(bs, tau) for bs in t1.batch_sizes for tau in t1.local_epochs]
        spec = spec.model_copy(update={"protocols": tuple(dict.fromkeys([*spec.protocols, *grid]))})
    return spec


@dataclass
class ModelStudy:
    """A model-size study: one summary row per (model, source, target, protocol) and where each θ came from."""

    # model, width, params, source, target, test_acc, when, images, batch_size, local_epochs, train_s (seconds
    # training the pool's clients, summed over clients, when first measured), summaries
    table: pd.DataFrame
    checkpoints: pd.DataFrame  # Checkpoint.row() of every (model, source, target)
    accuracy: pd.DataFrame     # model, width, source, when, images, test_acc: each θ path's accuracy log
    spec: ModelStudySpec
    compute_s: float           # seconds spent training every client of every measurement and every θ path (all attempts)
    own_trajectories: list[Path] = field(default_factory=list)  # run folders of the models' own FedAvg trajectories


def model_study(profile: Profile, spec: ModelStudySpec, *, trajectory: Path | None = None, workers: int = 1,
                progress: bool = False, own_trajectories: Sequence[Path] = ()) -> ModelStudy:
    """Every protocol of ``spec`` at θ of every model of ``spec`` at every target accuracy reached.

    "fedavg" θ: the profile's stage-ladder run with the model replaced (:func:`fedavg_checkpoints`) or a model's
    own run (:func:`find_own_trajectory`, else trained); "centralised": :func:`central_checkpoints`. Same seeded
    pool and cohorts for every (θ, protocol); cached, resumable. ConfigError (before training): a pool larger
    than K or an invalid protocol.
    """
    base = stage.ladder_config(profile)
    try:
        pool, cohorts = stage.pool_and_cohorts(base.num_clients, spec.pool_size, base.cohort_size, spec.num_cohorts,
                                               base.seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    cspec = central.make_spec(targets=spec.targets, eval_every=spec.eval_every, max_steps=spec.max_steps,
                              eval_images=spec.eval_images)
    cfgs = {m: _model_config(base, m) for m in spec.models}
    # every protocol validated before any training
    pcfgs = {(m, bs, tau): protocol_config(cfgs[m], batch_size=bs, local_epochs=tau)
             for m in spec.models for bs, tau in spec.protocols}
    threads = torch.get_num_threads()
    ckpts, logs, own_wall, own_folders, owner = [], [], 0.0, [], {}
    try:
        for m in spec.models:
            if m.source == "fedavg":
                if m.rounds is not None:
                    cfg = trajectory_config(base, m)
                    folder = find_own_trajectory(cfg, own_trajectories)
                    if folder is None:
                        folder = runner.run(cfg, progress=progress, keep_every=m.kept()).path
                    own_folders.append(folder)
                    own_wall += json.loads((folder / "provenance.json").read_text())["wall_s"]
                    got, acc = evaluated_checkpoints(cfg, spec.targets, folder, m.at_rounds)
                else:
                    # the archived trajectory is the base run's; another width trains (or reads) its own run
                    cfg = cfgs[m]
                    own = trajectory if (m.model, m.width or base.width) == (base.model, base.width) else None
                    got, acc = fedavg_checkpoints(cfg, spec.targets, _kept(profile), trajectory=own, progress=progress)
                acc = acc.rename(columns={"round": "when"}).assign(images=[_fedavg_images(cfg, r) for r in acc["round"]])
            else:
                # one path at a time; ResNet-18-GN on every thread the workers would use, the small CNNs on
                # one (faster there); float sums depend on the count, which provenance.json records
                torch.set_num_threads(max(1, workers) if m.model == "resnet18_gn" else 1)
                got, acc = central_checkpoints(cfgs[m], cspec, progress=progress)
                torch.set_num_threads(threads)
                acc = acc.rename(columns={"step": "when"})
            ckpts += got
            owner.update({id(c): m for c in got})
            logs.append(acc[["when", "images", "test_acc"]].assign(model=m.model, width=m.width, source=m.source))
    finally:
        torch.set_num_threads(threads)
    reached = [c for c in ckpts if c.reached]
    keys = [(c, bs, tau) for bs, tau in spec.protocols for c in reached]  # in order of priority: the first finish first
    tasks = [Task(cfg, c.theta, list(pool), _label(c), cost=task_cost(cfg, len(pool)))
             for c, bs, tau in keys for cfg in [pcfgs[owner[id(c)], bs, tau]]]
    grams = measure_many(tasks, workers=workers, progress=progress)
    rows = [{"model": c.model, "width": c.width, "params": int(g.provenance["num_parameters"]), "source": c.source,
             "target": c.target, "test_acc": c.test_acc, "when": c.when, "images": c.images, "batch_size": str(bs),
             "local_epochs": tau, "train_s": float(g.provenance["train_s"]),
             **stage.summarise_cohorts(cohort_metrics(g.gram, g.n, cohorts))}
            for (c, bs, tau), g in zip(keys, grams)]
    compute = own_wall + sum(g.provenance["train_s"] for g in grams) + sum(
        json.loads((results_dir() / "central" / c.where / "provenance.json").read_text())["wall_s"]
        for c in {c.where: c for c in ckpts if c.source == "centralised"}.values())
    return ModelStudy(pd.DataFrame(rows), pd.DataFrame([c.row() for c in ckpts]),
                      pd.concat(logs, ignore_index=True), spec, compute, own_folders)


def unfinished_trajectory(partial: Path, cfg: RunConfig, dest: Path) -> Path:
    """A run folder at ``dest`` (replaced) of what ``cfg``'s unfinished run has done so far, read without change
    from its ``.partial-<run folder>`` folder ``partial`` (:func:`maskfed.engine.checkpoint.partial_dir`):
    ``config.json``, ``metrics.csv`` and ``thetas.pt`` up to the last checkpoint, and ``provenance.json``
    (``unfinished``, ``rounds_done``, ``rounds``, run key, wall time so far). ValueError: no checkpoint in
    ``partial``, or one of another run."""
    import shutil

    partial = Path(partial)
    if not (partial / "checkpoint.pt").is_file():
        raise ValueError(f"{partial} holds no checkpoint.pt: not the partial folder of a running run")
    key = partial.name.rsplit("-", 1)[-1]
    state = checkpoint.load(partial, key)  # checks its format and that its run key is the folder's
    if state is None:
        raise ValueError(f"{partial}/checkpoint.pt is not a usable checkpoint of run key {key}")
    done = state.rounds_done
    snaps = sorted(int(f.stem[1:]) for f in (partial / "thetas").glob("r*.pt") if int(f.stem[1:]) <= done)
    dest = Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    (dest / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))
    pd.DataFrame(state.records).to_csv(dest / "metrics.csv", index=False)
    torch.save({"rounds": snaps, "thetas_RxP": torch.stack(
        [torch.load(partial / "thetas" / f"r{r:05d}.pt", weights_only=True) for r in snaps])},
        dest / runner.THETAS)
    (dest / "provenance.json").write_text(json.dumps(
        {"unfinished": True, "rounds_done": done, "rounds": cfg.rounds, "run_key": key, "label": cfg.label(),
         "wall_s": state.wall_s, "read_from": partial.name}, indent=2))
    return dest


def find_own_trajectory(cfg: RunConfig, folders: Sequence[Path]) -> Path | None:
    """The folder among ``folders`` whose ``config.json`` holds ``cfg`` (up to where it ran), else None.
    A running run's partial folder named with ``cfg``'s label is read up to its last checkpoint
    (:func:`unfinished_trajectory`, into ``results/unfinished/``)."""
    for f in map(Path, folders):
        if (f / "config.json").is_file():
            if stage.holds(f, cfg):
                return f
        elif (f / "checkpoint.pt").is_file() and f.name.startswith(f".partial-{cfg.label()}-"):
            return unfinished_trajectory(f, cfg, results_dir() / "unfinished" / f.name.removeprefix(".partial-"))
    return None


# --------------------------------------------------------------------------- the model-size tables

def model_label(model: str, width) -> str:
    """A reader's name for a model: ``"small CNN, width 8"`` or ``"ResNet-18-GN"``."""
    return "ResNet-18-GN" if model == "resnet18_gn" else f"small CNN, width {int(width)}"


def protocol_label(batch_size, local_epochs) -> str:
    """``"full, τ 1"`` / ``"bs 32, τ 2"``."""
    return f"{'full' if str(batch_size) == 'full' else f'bs {batch_size}'}, τ {int(local_epochs)}"


#: The index of :func:`model_overview` and :func:`model_signal_noise`: one row per θ.
THETA_KEYS = ["model", "params", "source", "target", "test_acc"]


def _labelled(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with :func:`model_label` as ``model`` and a :func:`protocol_label` column ``protocol``."""
    return table.assign(model=[model_label(m, w) for m, w in zip(table["model"], table["width"])],
                        protocol=[protocol_label(b, e) for b, e in zip(table["batch_size"], table["local_epochs"])])


def _per_theta(table: pd.DataFrame, values: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``table`` labelled (:func:`_labelled`) with a column ``theta`` numbering its θ (:data:`THETA_KEYS`) in
    order of first appearance, and ``values`` per θ and protocol: index :data:`THETA_KEYS` in that order,
    two-level columns (value, protocol) in the order measured. A θ taken at a set round (target NaN) is
    kept, as pivot_table would drop it."""
    t = _labelled(table)
    t["theta"] = t.groupby(THETA_KEYS, sort=False, dropna=False).ngroup()
    wide = t.groupby(["theta", *THETA_KEYS, "protocol"], dropna=False)[values].mean().unstack("protocol")
    columns = pd.MultiIndex.from_product([values, list(dict.fromkeys(t["protocol"]))])
    return t, wide.droplevel("theta").reindex(columns=columns)


def model_overview(table: pd.DataFrame) -> pd.DataFrame:
    """One row per θ of a model-size study (index :data:`THETA_KEYS`, target NaN for a θ taken at a set round):
    the median 1/Δ_S over cohorts of every protocol (in the order measured) and the :func:`cliff` (NaN without
    both a full-batch and a minibatch protocol). ``table``: :attr:`ModelStudy.table` (or archived ones, several
    studies allowed)."""
    t, wide = _per_theta(table, ["recovery_unweighted"])
    wide = wide["recovery_unweighted"].rename_axis(columns="protocol")
    wide["cliff"] = [cliff(g) if (g["batch_size"] == "full").any() and (g["batch_size"] != "full").any()
                     else float("nan") for _, g in t.groupby("theta")]
    return wide


def model_signal_noise(table: pd.DataFrame) -> pd.DataFrame:
    """σ̂² and ‖μ̂‖² (medians over cohorts) of every protocol at every θ: two-level columns
    (quantity, protocol), rows as :func:`model_overview`."""
    return _per_theta(table, ["sigma2_hat", "mu2_hat"])[1]


def paper_overview() -> pd.DataFrame:
    """The paper's Table I as one row of :func:`model_overview`, its cliff included (ResNet-18-GN; each
    protocol on its own 200-round trajectory, so ``test_acc`` is NaN)."""
    from maskfed.analysis.summary import paper_table

    p = paper_table("table1").reset_index()
    row = {protocol_label(b, e): r for b, e, r in zip(p["batch_size"], p["local_epochs"], p["recovery_unweighted"])}
    row["cliff"] = cliff(p)
    params = parameter_count("resnet18_gn", 2, 16)
    index = pd.MultiIndex.from_tuples([("ResNet-18-GN (paper's Table I)", params, "FedAvg, own trajectory per protocol",
                                        float("nan"), float("nan"))], names=THETA_KEYS)
    return pd.DataFrame([row], index=index)


def by_model(overview: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per model (index: its name, in order of parameter count): :func:`cliff_verdict` over its θ
    (``holds``, ``measured``, ``cliff_min``, ``cliff_max``), ``params``, and the range ``ref_min``,
    ``ref_max`` of the ``reference`` protocol's (a :func:`protocol_label` column of the :func:`model_overview`
    rows ``overview``) median 1/Δ_S (NaN where not measured).
    """
    rows = {}
    for (model, params), g in overview.groupby(level=["model", "params"], sort=False):
        v = cliff_verdict(g)
        ref = g[reference].dropna() if reference in g else pd.Series(dtype=float)
        rows[model] = {"params": int(params), "holds": v["holds"], "measured": v["measured"],
                       "cliff_min": v["min"], "cliff_max": v["max"],
                       "ref_min": float(ref.min()), "ref_max": float(ref.max())}
    return pd.DataFrame.from_dict(rows, orient="index").sort_values("params", kind="stable")


def paper_at_matched_accuracy(table: pd.DataFrame, paper: pd.DataFrame, *, model: str = "resnet18_gn",
                              source: str | None = None) -> pd.DataFrame:
    """The paper's Table I (``paper``, :func:`maskfed.analysis.summary.paper_table`) beside the θ of ``model``
    in ``table`` (reached by ``source``; None: any) nearest each row's test accuracy (ties: the lower). Ours.
    One row per protocol in the paper's order (index :func:`protocol_label`): ``paper_acc``, ``paper``,
    ``acc``, ``measured`` (median 1/Δ_S) and ``ratio`` (measured / paper); empty without ``model``."""
    t = table[(table["model"] == model) & ((table["source"] == source) if source is not None else True)]
    rows = {}
    for (bs, tau), p in paper.iterrows():
        got = t[(t["batch_size"].astype(str) == str(bs)) & (t["local_epochs"] == int(tau))]
        if not len(got):
            continue
        gap = (got["test_acc"] - float(p["test_acc"])).abs()
        best = got.assign(gap=gap).sort_values(["gap", "test_acc"], kind="stable").iloc[0]
        rows[protocol_label(bs, tau)] = {"paper_acc": float(p["test_acc"]), "paper": float(p["recovery_unweighted"]),
                                         "acc": float(best["test_acc"]), "measured": float(best["recovery_unweighted"]),
                                         "ratio": float(best["recovery_unweighted"]) / float(p["recovery_unweighted"])}
    return pd.DataFrame.from_dict(rows, orient="index",
                                  columns=["paper_acc", "paper", "acc", "measured", "ratio"])


def cliff_verdict(overview: pd.DataFrame) -> dict:
    """Does the paper's cliff hold? A stated rule, ours: at a θ whose :func:`cliff` exceeds 1. ``{"holds",
    "measured"}`` (θ with cliff > 1, with a cliff) and the cliff's ``min``, ``max`` over ``overview``."""
    c = overview["cliff"].dropna()
    return {"holds": int((c > 1).sum()), "measured": int(len(c)), "min": float(c.min()), "max": float(c.max())}
