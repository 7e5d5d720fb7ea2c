"""Findings of the chapter "Stage or sampling? Every protocol at the same checkpoints"
(``notebooks/stage_or_sampling.md``): does the spread of 1/Δ_S (eq. 3, 8) follow the checkpoint ("stage") or
exact against sampled local gradients ("sampling")? (:mod:`maskfed.studies.stage`)"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd

from maskfed import provenance
from maskfed.analysis import summary
from maskfed.book import evidence, number, plots
from maskfed.book.plots import against_stage, branches
from maskfed.engine.config import load_profile, Profile
from maskfed.names import CPU_PAPER
from maskfed.studies import archive, stage

#: The paper's argument for sampling (Sec. IV-C): full batch τ = 5 against batch 128 with τ = 1 and 2.
F5_PAIRS = {"128_1": ("128", 1), "128_2": ("128", 2)}

#: The rows of :func:`table_verdicts` that are numbers, each with its value's name in :func:`half_values`.
VERDICT_ROWS = {"stage share (%)": "stage", "between seeds (%)": "seed", "sampling share (%)": "sampling",
                "protocol share (%)": "protocol", "full / minibatch (×)": "sampling_effect",
                "highest / lowest checkpoint (×)": "stage_effect"}


@dataclass(frozen=True)
class Findings:
    """``values`` (glue name ``st_...`` -> number, verdict word or truth value) and what the tables and
    figures are drawn from."""

    values: dict
    study: evidence.BookStudy   # the stage study (table, checkpoints, branches)
    shown_profile: Profile      # the profile whose trajectories were measured (for the banner)
    t1: pd.DataFrame            # study rows of Table I's protocols
    t2: pd.DataFrame            # study rows of Table II's protocol under each α
    seeds: list                 # the ladders' seeds, sorted
    cliffs: pd.DataFrame        # seed, stage, cliff, round, test_acc (see cliff_table)
    by_range: dict              # stage.verdict_by_range of t1: {"early": {...}, "late": {...}}
    paper_cliff: float          # the paper's Table I cliff

    @property
    def has_branches(self) -> bool:  # M > 0 rounds of real FedAvg from each checkpoint
        return not self.study.branches.empty


def percent(share: float) -> float | int:
    """A fraction as a whole percentage (``0.564`` -> ``56``); NaN stays NaN."""
    return share if math.isnan(share) else int(round(100 * share))


def cliff_table(t1: pd.DataFrame, checkpoints: pd.DataFrame) -> pd.DataFrame:
    """The cliff (:func:`maskfed.studies.stage.cliff_by_stage`) per (seed, stage) of ``t1`` with the
    checkpoint's round and test accuracy."""
    cliffs = pd.concat([stage.cliff_by_stage(g.drop(columns="seed")).rename("cliff").to_frame().assign(seed=s)
                        for s, g in t1.groupby("seed")]).reset_index()
    return cliffs.merge(checkpoints[["seed", "stage", "round", "test_acc"]], on=["seed", "stage"])


def f5_spans(t1: pd.DataFrame) -> dict[str, pd.Series]:
    """Full batch τ = 5 over batch 128 with τ = 1 (``"128_1"``) and τ = 2 (``"128_2"``), median 1/Δ_S per
    (seed, stage) after θ_0 (Sec. IV-C's pair at the same θ); a key is missing without either protocol."""
    pivot = t1.pivot_table(index=["seed", "stage"], columns=["batch_size", "local_epochs"],
                           values="recovery_unweighted")
    pairs = {k: pivot[("full", 5)] / pivot[(b, t)] for k, (b, t) in F5_PAIRS.items()
             if ("full", 5) in pivot and (b, t) in pivot}
    return {k: ratio.drop(index=0, level="stage") for k, ratio in pairs.items()}


def half_values(name: str, v: dict | None) -> dict:
    """The glued values of one range of :func:`maskfed.studies.stage.verdict_by_range` (None: "not
    reached", NaN): ``st_<name>_label``, shares as whole percentages, effects and accuracies to two decimals."""
    shares, rest = ("stage", "seed", "sampling", "protocol"), ("sampling_effect", "stage_effect", "acc_min", "acc_max")
    v = v or {"verdict": "not reached", **dict.fromkeys(shares + rest, float("nan"))}
    return {f"st_{name}_label": v["verdict"], **{f"st_{name}_{k}": percent(v[k]) for k in shares},
            **{f"st_{name}_{k}": round(v[k], 2) for k in rest}}


def source_values(spec: stage.StageSpec, source_profile: str | None) -> dict:
    """Where the study comes from: ``st_origin`` ("archived", "archived trajectories" or "own run"),
    ``st_measured``, ``st_code``, ``st_trajectories`` and ``st_changed``."""
    arch = archive.load_stage_study(source_profile) if source_profile else None
    if arch is not None and arch.spec == spec and not spec.branch_rounds:
        return {"st_origin": "archived", "st_measured": arch.provenance["finished_utc"][:10],
                "st_code": arch.provenance["code_hash"],
                "st_trajectories": ", ".join(arch.provenance["trajectories"].values()),
                "st_changed": "; ".join(arch.changed) or "none"}
    traj = archive.ladder_trajectories(source_profile) if source_profile else {}
    return {"st_origin": "archived trajectories" if source_profile else "own run", "st_measured": "this build",
            "st_code": provenance.code_hash(), "st_trajectories": ", ".join(p.name for p in traj.values()) or "–",
            "st_changed": "none"}


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             ladder_from: str | None = CPU_PAPER, stages: int | None = None, stage_rounds: list | None = None,
             target_accuracies: list | None = None, extra_rounds: list | None = None, pool_size: int | None = None,
             num_cohorts: int | None = None, branch_rounds: int | None = None) -> Findings:
    """The chapter's findings from its parameters: the ladders are ``ladder_from``'s archived
    trajectories where archived, else ``profile``'s own run; the study is read from the archive where it holds one
    with these settings, else measured (cached)."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    source_profile = evidence.stage_source(ladder_from)
    spec = stage.make_spec(source_profile or profile, stages=stages, rounds=stage_rounds,
                           target_accuracies=target_accuracies, extra_rounds=extra_rounds, pool_size=pool_size,
                           num_cohorts=num_cohorts, branch_rounds=branch_rounds)
    study = evidence.stage_study(prof, spec, ladder_from=source_profile, workers=workers)
    ref = study.ref
    t1 = study.table[study.table.experiment == "table1"]
    t2 = study.table[study.table.experiment == "table2"]
    ckpts = study.checkpoints
    seeds = sorted(ckpts["seed"].unique())
    by_range = stage.verdict_by_range(t1)
    p_cliff = float(stage.cliff_by_stage(summary.paper_table("table1").reset_index().assign(stage=0)).iloc[0])
    cliffs = cliff_table(t1, ckpts)
    later = cliffs[cliffs["stage"] > 0]  # θ_0 is the same untrained model's accuracy in every seed
    last_acc = ckpts.groupby("seed")["test_acc"].last()
    paper_t1 = summary.paper_table("table1")
    paper_ref = load_profile("paper").table2  # the paper's reference protocol (bs 32, τ 2)
    spans = f5_spans(t1)
    values = {
        "st_profile": study.profile, "st_settings_of": source_profile or profile,
        "st_ref_bs": ref.batch_size, "st_ref_tau": ref.local_epochs, "st_ref_alpha": ref.alpha,
        "st_rounds": ref.rounds, "st_n_seeds": len(seeds), "st_seeds": ", ".join(map(str, seeds)),
        "st_S": int(ckpts.groupby("seed").size().max()), "st_pool": spec.pool_size, "st_K": ref.num_clients,
        "st_cohorts": spec.num_cohorts, "st_kc": ref.cohort_size,
        "st_acc_last_min": round(last_acc.min(), 3), "st_acc_last_max": round(last_acc.max(), 3),
        "st_ladder_from": ladder_from or "none",
        **source_values(spec, source_profile),
        "st_threshold": percent(stage.EXPLAINS), "st_effect_min": stage.EFFECT_MIN,
        # the rule's effect threshold (added after the archived study had been seen) changes no label
        "st_labels_without_effect": all(stage.verdict(v, effect_min=0) == v["verdict"] for v in by_range.values()),
    }
    for name in ("early", "late"):
        values |= half_values(name, by_range.get(name))
    # the split the verdict page judges the claim on: the paper's accuracy range (from its Table I's lowest) and
    # before; a range no checkpoint reaches (a short smoke ladder stays below the paper's range) is "not reached"
    floor = evidence.paper_accuracy_floor()
    in_range = stage.verdict_by_range(t1, split_acc=floor)
    values |= half_values("range", in_range.get("late")) | half_values("before", in_range.get("early"))
    values |= {
        "st_paper_floor": round(floor, 3),
        "st_paper_floor_full_1": paper_t1["test_acc"].idxmin() == ("full", 1),
        "st_paper_cliff": round(p_cliff, 2),
        "st_cliff_min": round(later["cliff"].min(), 2), "st_cliff_max": round(later["cliff"].max(), 2),
        "st_cliff_init": round(cliffs[cliffs["stage"] == 0]["cliff"].median(), 2),
        "st_cliff_above_one": int((later["cliff"] > 1).sum()), "st_cliff_n": len(later),
        # the paper's pair at the same θ (two decimals; NaN where the study lacks it)
        **{f"st_f5_{k[-1]}_{m}": round(getattr(spans[k], m)(), 2) if k in spans else float("nan")
           for k in F5_PAIRS for m in ("min", "max")},
        "st_below_one": int(round(t1["pct_cohorts_below_one"].max())),
        "st_param_ratio": int(round(stage.parameter_ratio(ref, "resnet18_gn"))),
        "st_paper_acc": round(paper_t1.loc[(str(paper_ref.batch_size), paper_ref.local_epochs), "test_acc"], 2),
        "st_M": spec.branch_rounds, "st_M_origin": "parameter" if branch_rounds is not None else "default",
        "st_seed0": seeds[0],
    }
    return Findings(values, study, load_profile(study.profile, data_path=data_path), t1, t2, seeds, cliffs, by_range,
                    p_cliff)


# --------------------------------------------------------------------------- tables

def table_checkpoints(f: Findings) -> pd.DataFrame:
    """The checkpoints by (seed, stage): round, test accuracy, test loss (nats)."""
    return (f.study.checkpoints.set_index(["seed", "stage"])[["round", "test_acc", "test_loss"]]
            .rename(columns={"test_acc": "test accuracy", "test_loss": "test loss (nats)"}))


def table_cliffs(f: Findings) -> pd.DataFrame:
    """The cliff at each checkpoint by (seed, stage), with its round and accuracy."""
    return (f.cliffs.set_index(["seed", "stage"])[["round", "test_acc", "cliff"]]
            .rename(columns={"test_acc": "checkpoint accuracy", "cliff": "cliff, these measurements"}))


def table_verdicts(f: Findings) -> pd.DataFrame:
    """The verdict per half of training, a column a half, a row per quantity."""
    def column(k: str, v: dict) -> dict:
        h = half_values(k, v)
        return {"checkpoints (stage)": ", ".join(map(str, v["stages"])),
                "accuracy": number(h[f"st_{k}_acc_min"]) + "–" + number(h[f"st_{k}_acc_max"]),
                **{row: h[f"st_{k}_{name}"] for row, name in VERDICT_ROWS.items()}, "verdict": v["verdict"]}

    return pd.DataFrame({k: column(k, v) for k, v in f.by_range.items()})


def table_alpha(f: Findings) -> pd.DataFrame:
    """Median 1/Δ_S (both conventions) of Table II's protocol per α (largest first) by (seed, stage)."""
    tab = f.t2.pivot_table(index=["seed", "stage"], columns="alpha", values=["recovery_unweighted", "recovery_weighted"])
    tab = tab.reindex(columns=sorted(tab.columns, key=lambda c: (c[0], -c[1])))
    return (tab.rename(columns={"recovery_unweighted": "1/Δ_S", "recovery_weighted": "1/Δ_S (n_k-wtd.)"}, level=0)
            .rename(columns=lambda a: f"α = {a:g}", level=1))


# --------------------------------------------------------------------------- figures (finish them with plots.finish)

def figure_recovery(f: Findings) -> plt.Figure:
    """One panel per seed: 1/Δ_S of each protocol against the checkpoint's accuracy, and K_c."""
    fig, axes = plt.subplots(len(f.seeds), 1, figsize=(6.4, 2.9 * len(f.seeds) + 1.6), sharex=True, squeeze=False)
    for i, (ax, s) in enumerate(zip(axes[:, 0], f.seeds)):
        against_stage(f.t1[f.t1.seed == s], ax=ax, k_c=f.study.ref.cohort_size, legend=i == len(f.seeds) - 1,
                      title=f"seed {s}")
    return fig


def figure_noise_signal(f: Findings) -> plt.Figure:
    """σ̂² (eq. 13) above and ‖μ̂‖² (eq. 14) below, at the first seed's checkpoints."""
    fig, axes = plt.subplots(2, 1, figsize=(6.4, 7.4), sharex=True)
    s0 = f.seeds[0]
    rows = f.t1[f.t1.seed == s0]
    against_stage(rows, "sigma2_hat", ax=axes[0], label="σ̂² (eq. 13)", legend=False, title=f"σ̂², seed {s0}")
    against_stage(rows, "mu2_hat", ax=axes[1], label="‖μ̂‖² (eq. 14)", title=f"‖μ̂‖², seed {s0}")
    return fig


def figure_cliff(f: Findings) -> plt.Figure:
    """The cliff against the checkpoint's accuracy per seed, the paper's value and 1."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for s, g in f.cliffs.groupby("seed"):
        ax.plot(g["test_acc"], g["cliff"], marker="o", label=f"seed {s}")
    ax.axhline(f.paper_cliff, color="0.45", ls="--", lw=1, label="paper's Table I")
    ax.axhline(1, color="0.6", ls=":", lw=1)
    ax.set(xlabel="checkpoint test accuracy", ylabel="cliff", title="cliff along training")
    plots.legend_outside(ax, "below", ncol=4)
    return fig


def figure_branches(f: Findings) -> plt.Figure:
    """The first seed's branches of Table I's protocols."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    b1 = f.study.branches[f.study.branches.experiment == "table1"]
    branches(b1[b1.seed == f.seeds[0]], ax=ax)
    ax.set_title(f"seed {f.seeds[0]}")
    return fig
