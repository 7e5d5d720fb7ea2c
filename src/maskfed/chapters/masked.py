"""What ``notebooks/masked_training.md`` shows: masked FedAvg against unmasked runs (limitation 3).

:func:`findings` runs the chapter's grid of :mod:`maskfed.studies.masked_training` runs (protocol × keep
probability p × mask mode (eq. 2; Prop. 2 independent, Prop. 3 shared) × seed), compares the final models' test
accuracy and sharpness with p = 1 (:func:`maskfed.studies.masked_training.verdicts`), logs the unmasked runs'
1/Δ_S in the Euclidean and the block-Hessian norm, and reads the same comparison from an archived profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import matplotlib.pyplot as plt
import pandas as pd

from maskfed.book import plots
from maskfed.derivation import theory
from maskfed.engine import runner
from maskfed.engine.config import Profile, RunConfig, load_profile
from maskfed.studies import archive
from maskfed.studies import masked_training as mt

#: Axis labels (with units) of the per-seed figure, by final metric (:data:`mt.FINAL_METRICS`); sharpness is
#: in nats per squared parameter unit.
UNITS = {"test_acc": "test accuracy (fraction)", "sharpness_top_eig": "top eigenvalue (nats/unit²)",
         "sharpness_trace": "Hessian trace (nats/unit²)"}


@dataclass(frozen=True)
class Findings:
    """The chapter's values (``values``: glue name -> number or short word) and frames; ``long_*`` are the
    archived profile's (:func:`archived_section`; None when left out); ``protocols``: name -> (batch size, τ)."""

    values: dict
    profile: Profile
    banner_changes: dict
    protocols: dict
    cohort_size: int
    final: pd.DataFrame
    summary: pd.DataFrame
    verdicts: pd.DataFrame
    trajectory: pd.DataFrame
    long_summary: Optional[pd.DataFrame]
    long_verdicts: Optional[pd.DataFrame]
    long_mode: Optional[pd.DataFrame]
    long_label: Optional[archive.ArchiveLabel]


def _given(value, default):
    """A parameter's value, or the chapter's default where it is None."""
    return default if value is None else value


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             archived: str | None = "cpu-masked", keep_probs=(1.0, 0.75, 0.5), modes=("independent", "shared"),
             protocols: dict | None = None, rounds: int | None = None, cohort_size: int | None = None,
             seeds: list | None = None, sharpness_iters: int | None = None, hessian_batch: int | None = None,
             hessian_every: int | None = None) -> Findings:
    """Run (or reuse) the chapter's masked-training runs and gather what the page shows.

    Arguments are the chapter's parameters (``archived``: its ``archived_from``, None to leave the section out);
    None picks the chapter's default for smoke / cpu / paper (seeds, rounds, K_c, protocols, sharpness iterations,
    Hessian batch and interval). ``overrides`` replace the profile's base after the chapter's own rounds and K_c.

    Raises:
        ValueError, ConfigError: a bad parameter. RuntimeError: no Hessian-weighted recovery factor logged.
        FileNotFoundError, DataUnavailableError: the data cannot be found."""
    overrides = overrides or {}

    def pv(smoke, cpu, paper=None):
        return theory.profile_value(profile, smoke=smoke, cpu=cpu, paper=paper)

    seeds = _given(seeds, pv([0, 1], [0, 1, 2]))
    base = load_profile(profile, data_path=data_path, seeds=seeds, **overrides)
    rounds = _given(rounds, pv(4, 15, base.base.get("rounds")))
    cohort_size = _given(cohort_size, pv(3, 5, base.base.get("cohort_size")))
    small_bs = pv(16, 32)
    protocols = _given(protocols, {"full batch, τ=1": ("full", 1), f"bs {small_bs}, τ=1": (small_bs, 1)})
    sharpness_iters = _given(sharpness_iters, pv(3, 10, 50))
    hessian_batch = _given(hessian_batch, pv(32, 128, 1024))
    hessian_every = _given(hessian_every, pv(2, 5, 10))
    # the chapter's own shrinking (ours): fewer rounds and clients per round, test only after the last round
    prof = load_profile(profile, data_path=data_path, seeds=seeds,
                        **{"rounds": rounds, "cohort_size": cohort_size, "eval_every": rounds,
                           "eval_every_tail": rounds, **overrides})
    cfgs = mt.configs(prof, protocols, keep_probs, modes, sharpness_iters=sharpness_iters,
                      hessian_every=hessian_every, hessian_batch=hessian_batch)
    results = runner.run_many(list(cfgs.values()), workers=_given(workers, prof.workers))
    metrics = {key: res.metrics for key, res in zip(cfgs, results)}
    final = mt.final_table(metrics)
    summ = mt.summary(final)
    verd = mt.verdicts(summ)
    cfg0 = next(iter(cfgs.values()))
    traj = mt.recovery_trajectory(metrics)
    if traj.empty:
        raise RuntimeError("the unmasked runs log the Hessian-weighted recovery factor; none was logged")
    values = {**live_values(cfg0, base.base.get("rounds"), base.base.get("cohort_size"), len(seeds), len(cfgs),
                            sharpness_iters, hessian_batch),
              **{f"mt_{k}": v for k, v in verdict_values(summ, verd).items()},
              "mt_full_steps": median_steps(metrics, list(protocols)[0]),
              **trajectory_values(traj, hessian_every)}
    long_values, lsumm, lverd, lmode, llabel = archived_section(archived)
    return Findings(values={**values, **long_values}, profile=prof,
                    banner_changes={"rounds": cfg0.rounds, "cohort_size (K_c)": cfg0.cohort_size, "seeds": list(seeds)},
                    protocols=protocols, cohort_size=cfg0.cohort_size, final=final, summary=summ, verdicts=verd,
                    trajectory=traj, long_summary=lsumm, long_verdicts=lverd, long_mode=lmode, long_label=llabel)


def live_values(cfg0: RunConfig, prof_rounds: int, prof_kc: int, n_seeds: int, n_runs: int,
                sharpness_iters: int, hessian_batch: int) -> dict:
    """The live runs' settings (``mt_...``), the profile's own rounds and K_c, and ``mt_shrink``: "fewer"
    when this chapter runs fewer rounds or a smaller K_c than the profile, else "as many"."""
    shrunk = cfg0.rounds < prof_rounds or cfg0.cohort_size < prof_kc
    return {"mt_rounds": cfg0.rounds, "mt_kc": cfg0.cohort_size, "mt_seeds": n_seeds, "mt_runs": n_runs,
            "mt_iters": sharpness_iters, "mt_hbatch": hessian_batch, "mt_clients": cfg0.num_clients,
            "mt_prof_rounds": prof_rounds, "mt_prof_kc": prof_kc, "mt_shrink": "fewer" if shrunk else "as many"}


def median_steps(metrics: dict, protocol: str) -> float:
    """Median T_mean (local steps a round) over every round of every run of ``protocol``.

    Raises:
        ValueError: no run of ``protocol`` in ``metrics``."""
    frames = [m["T_mean"] for (s, _), m in metrics.items() if s.protocol == protocol]
    if not frames:
        raise ValueError(f"no run of protocol {protocol!r}")
    return float(pd.concat(frames).median())


def verdict_values(summ: pd.DataFrame, verd: pd.DataFrame) -> dict:
    """The verdicts' counts (``n_cmp``, ``n_better``, ``n_worse``, ``n_within``), ``n_protocols``,
    the first and last protocol's ``full_name``, ``mini_name`` and unmasked median accuracy (``acc_full``,
    ``acc_mini``, 3 decimals), and ``stage`` ("far from trained" below 0.5 accuracy, else "partly trained"); unprefixed."""
    n_better, n_worse = int((verd.verdict == "better").sum()), int((verd.verdict == "worse").sum())
    acc1 = summ[summ.p == 1.0].set_index("protocol").test_acc_median
    return {"n_cmp": len(verd), "n_better": n_better, "n_worse": n_worse, "n_within": len(verd) - n_better - n_worse,
            "n_protocols": len(acc1), "full_name": acc1.index[0], "mini_name": acc1.index[-1],
            "acc_full": round(float(acc1.iloc[0]), 3), "acc_mini": round(float(acc1.iloc[-1]), 3),
            "stage": "far from trained" if float(acc1.max()) < 0.5 else "partly trained"}


def trajectory_values(traj: pd.DataFrame, hessian_every: int) -> dict:
    """The two-norm factors' gap (Hessian − Euclidean, median and largest magnitude, 2 decimals),
    the logged (run, round) pairs and how many have the Hessian-weighted factor below the Euclidean one and below 1."""
    return {"mt_every": hessian_every, "mt_gap_median": round(float(traj.gap.median()), 2),
            "mt_gap_abs_max": round(float(traj.gap.abs().max()), 2), "mt_h_below_e": int((traj.gap < 0).sum()),
            "mt_n_logged": len(traj), "mt_h_below_1": int((traj.hessian < 1).sum())}


#: Glue names of the archived section (:func:`archived_section`; "–" when it is not shown).
LONG_KEYS = ("mt_long_kc", "mt_long_clients", "mt_long_rounds", "mt_long_seeds", "mt_long_iters", "mt_long_hbatch",
             "mt_long_n_missing", "mt_long_n_cmp", "mt_long_n_better", "mt_long_n_worse", "mt_long_n_within",
             "mt_long_n_protocols", "mt_long_full_name", "mt_long_mini_name", "mt_long_acc_full", "mt_long_acc_mini",
             "mt_long_stage", "mt_long_n_mode", "mt_long_n_mode_within")


def archived_section(archived: str | None) -> tuple:
    """(values :data:`LONG_KEYS`, summary, verdicts, shared-against-independent verdicts, label) of
    the ``archived`` profile's masked runs; ``mt_long_status`` "shown", "left out" (None) or "not archived" (frames
    and label None, values "–").

    Raises:
        ValueError: unknown profile name. ConfigError: the profile defines no masked runs."""
    if archived is not None:
        lcfgs = mt.profile_configs(load_profile(archived))
        lruns = archive.select_keyed(archive.require_complete(archived), lcfgs)
        if lruns:
            lsumm = mt.summary(mt.final_table({k: r.metrics for k, r in lruns.items()}))
            lverd, lmode = mt.verdicts(lsumm), mt.shared_vs_independent(lsumm)
            c = next(iter(lruns.values())).config
            values = {"mt_long_from": archived, "mt_long_status": "shown", "mt_long_kc": c.cohort_size,
                      "mt_long_clients": c.num_clients, "mt_long_rounds": c.rounds, "mt_long_iters": c.sharpness_iters,
                      "mt_long_hbatch": c.hessian_batch, "mt_long_seeds": len({s for _, s in lruns}),
                      "mt_long_n_missing": sum(k not in lruns for k in lcfgs), "mt_long_n_mode": len(lmode),
                      "mt_long_n_mode_within": int((lmode.verdict == "within seed spread").sum()),
                      **{f"mt_long_{k}": v for k, v in verdict_values(lsumm, lverd).items()}}
            return values, lsumm, lverd, lmode, archive.label(list(lruns.values()), archived)
    return ({**dict.fromkeys(LONG_KEYS, "–"), "mt_long_from": archived or "none",
             "mt_long_status": "left out" if archived is None else "not archived"}, None, None, None, None)


def _cell(r: pd.Series, k: str, fmt: str) -> str:
    """``median [min, max]`` of metric ``k`` in summary row ``r``, each number in ``fmt``."""
    return f"{fmt.format(r[k + '_median'])} [{fmt.format(r[k + '_min'])}, {fmt.format(r[k + '_max'])}]"


def table_final(summ: pd.DataFrame) -> pd.DataFrame:
    """Per setting of a :func:`mt.summary`: median across seeds [range] of each final metric."""
    return pd.DataFrame({
        "protocol": summ.protocol, "p": summ.p.map("{:g}".format), "mask": summ["mode"],
        "test accuracy": [_cell(r, "test_acc", "{:.3f}") for _, r in summ.iterrows()],
        "top eigenvalue": [_cell(r, "sharpness_top_eig", "{:.3g}") for _, r in summ.iterrows()],
        "Hessian trace": [_cell(r, "sharpness_trace", "{:.3g}") for _, r in summ.iterrows()],
    })


def table_long(lsumm: pd.DataFrame) -> pd.DataFrame:
    """:func:`table_final` of the archived summary, indexed by (protocol, p, mask) for :func:`maskfed.book.fitted`."""
    return table_final(lsumm).set_index(["protocol", "p", "mask"])


def figure_final(found: Findings) -> plt.Figure:
    """Each final metric per seed (dots) and its median (bar), one panel per metric."""
    final, summ = found.final, found.summary
    fig, axes = plt.subplots(3, 1, figsize=(6.4, 9.0), sharex=True)
    for ax, (k, (label, _)) in zip(axes, mt.FINAL_METRICS.items()):
        for i, name in enumerate(found.protocols):
            sub = final[final.protocol == name]
            keys = list(dict.fromkeys(zip(summ.p[summ.protocol == name], summ["mode"][summ.protocol == name])))
            for j, (p_, m_) in enumerate(keys):
                vals = sub[(sub.p == p_) & (sub["mode"] == m_)][k]
                x = j + 0.15 * (2 * i - 1)
                ax.plot([x] * len(vals), vals, "o", color=f"C{i}", alpha=0.5, ms=4)
                ax.plot([x - 0.1, x + 0.1], [vals.median()] * 2, "-", color=f"C{i}", lw=2,
                        label=name if j == 0 else None)
        ax.set_xticks(range(len(keys)), [f"p={p_:g}\n{'no mask' if m_ == 'none' else m_}" for p_, m_ in keys])
        ax.set_title(label[0].upper() + label[1:])
        ax.set_ylabel(UNITS[k])
        if k != "test_acc":
            ax.set_yscale("log")
            plots.plain_log_ticks(ax, "y")
    axes[-1].set_xlabel("p and mask")
    plots.legend_outside(axes[-1], "below")
    return fig


def figure_trajectory(found: Findings) -> plt.Figure:
    """The unmasked runs' 1/Δ_S in both norms by round, their gap and K_c; a panel per protocol."""
    traj, protocols = found.trajectory, found.protocols
    tmed = traj.groupby(["protocol", "round"], sort=False)[["euclidean", "hessian", "gap"]].median().reset_index()
    fig, axes = plt.subplots(len(protocols), 1, figsize=(6.4, 3.4 * len(protocols) + 1.2), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], protocols):
        t = traj[traj.protocol == name]
        m = tmed[tmed.protocol == name]
        ax.plot(t["round"], t.euclidean, "^", color="C2", alpha=0.35, ms=4)
        ax.plot(t["round"], t.hessian, "D", color="C3", alpha=0.35, ms=4)
        ax.plot(m["round"], m.euclidean, "-^", color="C2", label="Euclidean (paper's)")
        ax.plot(m["round"], m.hessian, "-D", color="C3", label="block-Hessian")
        ax.plot(m["round"], m.gap, ":", color="k", label="gap (Hessian − Euclidean)")
        ax.axhline(found.cohort_size, color="grey", ls=":", lw=1, label=f"ceiling K_c = {found.cohort_size}")
        ax.set_title(name)
        ax.set_ylabel("recovery factor (dimensionless)")
    axes[-1, 0].set_xlabel("round")
    plots.legend_outside(axes[-1, 0], "below", ncol=1)
    return fig
