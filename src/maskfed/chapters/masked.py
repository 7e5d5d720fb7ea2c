"""What ``notebooks/masked_training.md`` shows: masked FedAvg against unmasked runs (limitation 3).

:func:`findings` runs (or reuses) the chapter's grid of :mod:`maskfed.studies.masked_training` runs
(protocol × keep probability p × mask mode × seed; eq. 2 masks, independent as in Prop. 2 or shared as
in Prop. 3), summarises the final models' test accuracy and sharpness (top Hessian eigenvalue and
Hutchinson trace, :mod:`maskfed.core.sharpness`), applies the chapter's disjoint-range rule (ours,
:func:`maskfed.studies.masked_training.verdicts`), collects the unmasked runs' recovery factor
1/Δ_S in the Euclidean and the block-Hessian inner product (eq. 3 and 8), and reads the same
comparison from the archived runs of a longer profile (``cpu-masked``). The pure helpers
(:func:`live_values`, :func:`comparison_values`, :func:`trajectory_values`, :func:`archived_values`)
turn those frames into the glued values; :func:`table_final`, :func:`figure_final` and
:func:`figure_trajectory` draw the page's tables and figures.
"""

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

#: Axis labels (with units) of the per-seed figure, by final metric (:data:`mt.FINAL_METRICS`).
UNITS = {"test_acc": "test accuracy (fraction)", "sharpness_top_eig": "top eigenvalue (nats / param. unit²)",
         "sharpness_trace": "Hessian trace (nats / param. unit²)"}

#: Caption of the archived runs' second table (shown only when the archive holds those runs).
MODE_CAPTION = ("Shared against independent masks at the same p and protocol (shared minus independent; the verdict "
                "by the rule above)")
#: Glue names of the archived section, each "–" when the section is not shown.
LONG_KEYS = ("mt_long_intro", "mt_long_answer", "mt_long_acc", "mt_long_mode", "mt_long_mode_answer")


@dataclass(frozen=True)
class Findings:
    """The chapter's values.

    Attributes:
        values: glue name -> number or short text (:func:`maskfed.book.glue_all`).
        profile: the shrunk profile the live runs used (for the banner).
        banner_changes: what the page sets differently from the profile (rounds, K_c, seeds).
        protocols: protocol name -> (batch size or "full", local epochs τ), in the page's order.
        cohort_size: K_c of the live runs (the ceiling line of the trajectory figure).
        final: one row per (setting, seed): the last round's test accuracy and sharpness.
        summary: median, min and max across seeds per setting (:func:`mt.summary`).
        verdicts: each masked setting and metric against p = 1 (:func:`mt.verdicts`).
        trajectory: the unmasked runs' logged recovery factors in both norms (:func:`mt.recovery_trajectory`).
        long_summary, long_mode: the archived profile's summary and its shared-against-independent
            verdicts (:func:`mt.shared_vs_independent`); None when the section is left out.
    """

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
    long_mode: Optional[pd.DataFrame]


def _given(value, default):
    """A parameter's value, or the chapter's default where it is None."""
    return default if value is None else value


def findings(profile: str, *, data_path=None, overrides: dict | None = None, keep_probs=(1.0, 0.75, 0.5),
             modes=("independent", "shared"), protocols: dict | None = None, rounds: int | None = None,
             cohort_size: int | None = None, seeds: list | None = None, sharpness_iters: int | None = None,
             hessian_batch: int | None = None, hessian_every: int | None = None, workers: int | None = None,
             archived_from: str | None = "cpu-masked") -> Findings:
    """Run (or reuse) the chapter's masked-training runs and gather what the page shows.

    Arguments are the chapter's parameters (see its parameters cell); None picks the chapter's
    default for the profile: seeds [0, 1] (smoke) / [0, 1, 2]; rounds 4 / 15 / the profile's (paper);
    K_c 3 / 5 / the profile's; protocols full batch and bs 16 (smoke) / 32, one local epoch each;
    3 / 10 / 50 sharpness iterations; Hessian batch 32 / 128 / 1024 images; the Hessian-weighted
    factor every 2 / 5 / 10 rounds. ``overrides`` replace the profile's base after the chapter's
    own rounds and K_c.

    Raises:
        ValueError, ConfigError: a bad parameter (:func:`mt.configs`, :func:`maskfed.engine.config.load_profile`).
        RuntimeError: the unmasked runs logged no Hessian-weighted recovery factor.
        FileNotFoundError, DataUnavailableError: the data cannot be found (:func:`runner.run_many`).
    """
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
    first = list(protocols)[0]
    values = {**live_values(cfg0, base.base.get("rounds"), base.base.get("cohort_size"), len(seeds), len(cfgs),
                            sharpness_iters, hessian_batch),
              **comparison_values(summ, verd, list(protocols), median_steps(metrics, first)),
              **trajectory_values(traj, hessian_every)}
    long_values, lsumm, lmode = archived(archived_from)
    return Findings(values={**values, **long_values}, profile=prof,
                    banner_changes={"rounds": cfg0.rounds, "cohort_size (K_c)": cfg0.cohort_size, "seeds": list(seeds)},
                    protocols=protocols, cohort_size=cfg0.cohort_size, final=final, summary=summ, verdicts=verd,
                    trajectory=traj, long_summary=lsumm, long_mode=lmode)


def live_values(cfg0: RunConfig, prof_rounds: int, prof_kc: int, n_seeds: int, n_runs: int,
                sharpness_iters: int, hessian_batch: int) -> dict:
    """The glued facts of the live runs: rounds, K_c of how many clients, seeds, runs, the sharpness
    settings, and ``mt_shrink``, the sentence saying whether the rounds and K_c are the profile's own
    (``prof_rounds``, ``prof_kc``) or cut by this chapter (when either is below the profile's)."""
    shrunk = cfg0.rounds < prof_rounds or cfg0.cohort_size < prof_kc
    return {"mt_rounds": cfg0.rounds, "mt_kc": cfg0.cohort_size, "mt_seeds": n_seeds, "mt_runs": n_runs,
            "mt_iters": sharpness_iters, "mt_hbatch": hessian_batch, "mt_clients": cfg0.num_clients,
            "mt_shrink": (f"Our shrinking, not the paper's setting: the profile's own runs have {prof_rounds} rounds "
                          f"and K_c = {prof_kc}; this chapter cuts them to fit its share of the book's time on two "
                          "CPU cores") if shrunk else
                         f"The rounds and K_c are the profile's own ({prof_rounds} and {prof_kc})"}


def median_steps(metrics: dict, protocol: str) -> float:
    """Median over every round of every run of ``protocol`` of T_mean, the local steps a client takes
    in a round (``metrics``: (setting, seed) -> metrics.csv frame).

    Raises:
        ValueError: no run of ``protocol`` in ``metrics``.
    """
    frames = [m["T_mean"] for (s, _), m in metrics.items() if s.protocol == protocol]
    if not frames:
        raise ValueError(f"no run of protocol {protocol!r}")
    return float(pd.concat(frames).median())


def comparison_values(summ: pd.DataFrame, verd: pd.DataFrame, protocols: list, full_steps: float) -> dict:
    """The glued answer of "does the recovered penalty buy flatness or accuracy?".

    Args:
        summ: :func:`mt.summary` of the live runs (each protocol with its p = 1 row).
        verd: :func:`mt.verdicts` of ``summ``.
        protocols: the protocol names in the page's order; the first and the last are quoted.
        full_steps: local steps a round of the first protocol (:func:`median_steps`).

    Returns:
        ``mt_answer`` (:func:`mt.answer`), the comparison counts (``mt_n_cmp``, ``mt_n_better``,
        ``mt_n_worse``, ``mt_n_within``), ``mt_worse_list`` (the worse settings, or "none"), the
        unmasked median accuracies of the first and last protocol with their names, the first's
        steps (``mt_full_steps``, and ``mt_full_steps_unit``: "step" or "steps") and ``mt_scale``, the
        clause placing the training stage (far from trained when no unmasked median reaches 0.5).

    Raises:
        KeyError: a protocol without its p = 1 row.
    """
    n_better = int((verd.verdict == "better").sum())
    n_worse = int((verd.verdict == "worse").sum())
    worse_list = "; ".join(f"{r.metric} at p = {r.p:g}, {r['mode']}, {r.protocol}"
                           for _, r in verd[verd.verdict == "worse"].iterrows()) or "none"
    acc1 = summ[summ.p == 1.0].set_index("protocol")
    best_acc = float(acc1.test_acc_median.max())
    return {"mt_answer": mt.answer(verd), "mt_n_cmp": len(verd), "mt_n_better": n_better, "mt_n_worse": n_worse,
            "mt_n_within": len(verd) - n_better - n_worse, "mt_worse_list": worse_list,
            "mt_acc_full": float(acc1.loc[protocols[0], "test_acc_median"]),
            "mt_acc_mini": float(acc1.loc[protocols[-1], "test_acc_median"]),
            "mt_full_name": protocols[0], "mt_full_steps": full_steps,
            "mt_full_steps_unit": "step" if full_steps == 1 else "steps", "mt_mini_name": protocols[-1],
            "mt_scale": ("so these models are far from trained (no protocol reaches 50% without masks); a regularizer "
                         "that acts on curvature may only show once the training loss is low") if best_acc < 0.5 else
                        "past the first phase of training, though still short of the paper's 200 rounds"}


def trajectory_values(traj: pd.DataFrame, hessian_every: int) -> dict:
    """The glued summary of the two-norm recovery factors (``traj``: :func:`mt.recovery_trajectory`):
    the logging interval, median and largest magnitude of the gap (Hessian − Euclidean, dimensionless),
    how many logged (run, round) pairs there are, and in how many the Hessian-weighted factor is below
    the Euclidean one and below 1."""
    return {"mt_every": hessian_every, "mt_gap_median": float(traj.gap.median()),
            "mt_gap_abs_max": float(traj.gap.abs().max()), "mt_h_below_e": int((traj.gap < 0).sum()),
            "mt_n_logged": len(traj), "mt_h_below_1": int((traj.hessian < 1).sum())}


def archived(archived_from: str | None) -> tuple[dict, Optional[pd.DataFrame], Optional[pd.DataFrame]]:
    """The archived section: (glued values, summary, shared-against-independent verdicts) of the
    ``archived_from`` profile's masked runs (:func:`mt.profile_configs`, :func:`archive.select_keyed`);
    the frames are None, and the values "–" with ``mt_long_missing`` saying why, when ``archived_from``
    is None or its archive holds none of the runs.

    Raises:
        ValueError: unknown profile name. ConfigError: the profile defines no masked runs.
    """
    if archived_from is not None:
        lprof = load_profile(archived_from)
        lcfgs = mt.profile_configs(lprof)
        lruns = archive.select_keyed(archive.require_complete(archived_from), lcfgs)
        if lruns:
            lsumm = mt.summary(mt.final_table({k: r.metrics for k, r in lruns.items()}))
            lmode = mt.shared_vs_independent(lsumm)
            missing = [c.label() for k, c in lcfgs.items() if k not in lruns]
            return (archived_values(archived_from, lsumm, lmode, next(iter(lruns.values())).config,
                                    len({s for _, s in lruns}), archive.label(list(lruns.values()), archived_from).text(),
                                    missing), lsumm, lmode)
    why = ("this build was asked to leave it out (archived_from = None)" if archived_from is None else
           f"the archive holds no run of the {archived_from} profile; make them with: "
           f"maskfed sweep --profile {archived_from} && maskfed archive --profile {archived_from}")
    return {**{key: "–" for key in LONG_KEYS}, "mt_long_missing": f"Not shown in this build: {why}."}, None, None


def archived_values(archived_from: str, lsumm: pd.DataFrame, lmode: pd.DataFrame, lcfg: RunConfig, n_seeds: int,
                    where: str, missing: list[str]) -> dict:
    """The glued text of the archived section.

    Args:
        archived_from: the archived profile's name.
        lsumm: its :func:`mt.summary`; lmode: :func:`mt.shared_vs_independent` of it.
        lcfg: one of its runs' configuration (K_c, clients, rounds, sharpness settings).
        n_seeds: how many seeds it holds.
        where: :func:`archive.label` text (machine, dates, commits).
        missing: labels of the profile's masked runs not archived.

    Returns:
        ``mt_long_intro`` (where the numbers come from), ``mt_long_answer`` (:func:`mt.answer` against
        p = 1), ``mt_long_acc`` (unmasked median accuracy per protocol), ``mt_long_mode`` (each
        shared-against-independent verdict), ``mt_long_mode_answer`` (whether a shared mask differs
        beyond the seed spread) and an empty ``mt_long_missing``.
    """
    lacc1 = lsumm[lsumm.p == 1.0].set_index("protocol")["test_acc_median"]
    shared_beyond = lmode[lmode.verdict != "within seed spread"]
    return {
        "mt_long_intro": (f"The numbers of this section are not this page's: they are the archived {archived_from} "
                          f"runs, the same comparison at K_c = {lcfg.cohort_size} of {lcfg.num_clients} clients, "
                          f"{lcfg.rounds} rounds and {n_seeds} seeds. Where they were made: {where}"
                          + (f" Not yet archived: {', '.join(missing)}." if missing else "")
                          + f" Sharpness there uses {lcfg.sharpness_iters} power iterations and probes on "
                          f"{lcfg.hessian_batch} training images."),
        "mt_long_answer": mt.answer(mt.verdicts(lsumm)),
        "mt_long_acc": ", ".join(f"{a:.3f} ({n})" for n, a in lacc1.items()),
        "mt_long_mode": "; ".join(f"{r.metric} at p = {r.p:g}, {r.protocol}: {r.verdict} "
                                  f"(shared minus independent {r['median difference']:+.3g})"
                                  for _, r in lmode.iterrows()) or "no setting has both modes archived",
        "mt_long_mode_answer": ("choosing one shared mask instead of a mask per client changes nothing beyond the "
                                "spread across seeds" if shared_beyond.empty else
                                "a shared mask differs from independent masks beyond the spread across seeds in "
                                + "; ".join(f"{r.metric} ({r.verdict}, {r.protocol})"
                                            for _, r in shared_beyond.iterrows())),
        "mt_long_missing": ""}


def _cell(r: pd.Series, k: str, fmt: str) -> str:
    """``median [min, max]`` of metric ``k`` in summary row ``r``, each number in ``fmt``."""
    return f"{fmt.format(r[k + '_median'])} [{fmt.format(r[k + '_min'])}, {fmt.format(r[k + '_max'])}]"


def table_final(summ: pd.DataFrame) -> pd.DataFrame:
    """The page's table of a :func:`mt.summary`: protocol, p, mask and, per final metric, the median
    across seeds with the range in brackets (accuracy to 3 decimals, sharpness to 3 significant digits)."""
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
    """Each final metric per seed (dots) and its median over seeds (bar), one panel per metric
    (sharpness on a log axis), settings along x, one colour per protocol."""
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
                        label=f"{name} (line: median over seeds)" if j == 0 else None)
        ax.set_xticks(range(len(keys)), [f"p={p_:g}\n{'no mask' if m_ == 'none' else m_}" for p_, m_ in keys])
        ax.set_title(label[0].upper() + label[1:] + " of the final model, per seed")
        ax.set_ylabel(UNITS[k])
        if k != "test_acc":
            ax.set_yscale("log")
            plots.plain_log_ticks(ax, "y")
    axes[-1].set_xlabel("keep probability p and mask")
    plots.legend_outside(axes[-1], "below")
    return fig


def figure_trajectory(found: Findings) -> plt.Figure:
    """The unmasked runs' recovery factor in the Euclidean and the block-Hessian norm by round (each
    seed faint, the median over seeds joined), their gap, and the ceiling K_c; one panel per protocol."""
    traj, protocols = found.trajectory, found.protocols
    tmed = traj.groupby(["protocol", "round"], sort=False)[["euclidean", "hessian", "gap"]].median().reset_index()
    fig, axes = plt.subplots(len(protocols), 1, figsize=(6.4, 3.4 * len(protocols) + 1.2), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], protocols):
        t = traj[traj.protocol == name]
        m = tmed[tmed.protocol == name]
        ax.plot(t["round"], t.euclidean, "^", color="C2", alpha=0.35, ms=4)
        ax.plot(t["round"], t.hessian, "D", color="C3", alpha=0.35, ms=4)
        ax.plot(m["round"], m.euclidean, "-^", color="C2", label="1/Δ_S, Euclidean (the paper's); faint: each seed")
        ax.plot(m["round"], m.hessian, "-D", color="C3", label="1/Δ_S, block-Hessian norm; faint: each seed")
        ax.plot(m["round"], m.gap, ":", color="k", label="gap (Hessian − Euclidean), median over seeds")
        ax.axhline(found.cohort_size, color="grey", ls=":", lw=1, label=f"ceiling K_c = {found.cohort_size}")
        ax.set_title(f"{name}: the recovery factor in two norms, unmasked runs")
        ax.set_ylabel("recovery factor (dimensionless)")
    axes[-1, 0].set_xlabel("round")
    plots.legend_outside(axes[-1, 0], "below", ncol=1)
    return fig
