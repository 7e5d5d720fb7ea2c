"""The chapter "What sets the recovery factor?" (``notebooks/what_sets_the_factor.md``): what it shows.

The chapter varies the three settings the paper holds fixed, each at a fixed model θ
(:mod:`maskfed.studies.factor_axes`): the cohort size K_c (against eq. 12,
1/Δ_S = (K_c r + 1)/(r + 1) with r = ‖μ‖²/σ²), the step size (the rule of
:func:`~maskfed.studies.factor_axes.lr_verdict`) and the model size (θ matched by test accuracy,
:func:`~maskfed.studies.factor_axes.model_study`, or archived studies). :func:`findings` runs or reads
all three and returns the values the chapter glues (:attr:`Findings.values`), the frames of its tables
(``table_...``) and its figures (``figure_...``). Every rule and phrase here is the chapter's own; the
quantities are the paper's (1/Δ_S, eq. 3, 8; σ̂², ‖μ̂‖², eq. 13-14).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch

from maskfed import book
from maskfed.analysis.summary import paper_table
from maskfed.book import evidence
from maskfed.book.plots import cohort_size, own_trajectory, recovery_vs_parameters, step_size
from maskfed.engine.config import load_profile, Profile
from maskfed.studies import archive, stage
from maskfed.studies import factor_axes as fa

#: θ sources and the paper's row as the tables name them (short: row labels do not wrap)
THETA_NAMES = {"fedavg": "FedAvg", "centralised": "centralised SGD", "ResNet-18-GN (paper's Table I)": "ResNet-18-GN",
               "FedAvg, own trajectory per protocol": "paper's Table I"}


@dataclass
class Findings:
    """What the chapter shows: ``glued`` (glue name -> number or phrase; read through :attr:`values`) and
    the inputs of its tables and figures (None / empty where the build has no model-size study,
    :attr:`mtable` None)."""

    glued: dict
    started: float                         # time.perf_counter() when findings() began (s)
    theta_profile: Profile                 # the profile whose trajectory gives the axes' θ (the banner's)
    eq12: dict[str, pd.DataFrame]          # protocol -> fa.eq12_table rows, one per K_c
    lr_table: pd.DataFrame                 # fa.lr_axis rows, one per (batch size, τ, lr) cell
    ref_label: str                         # the model-size trajectory's protocol, fa.protocol_label
    mtable: pd.DataFrame | None = None     # model-size study rows (live and archived parts together)
    mckpts: pd.DataFrame | None = None     # where each θ of the study came from
    overview: pd.DataFrame | None = None   # fa.model_overview(mtable)
    paper_row: pd.DataFrame | None = None  # fa.paper_overview()
    checks: dict = field(default_factory=dict)    # model label -> fa.path_check table
    matched: dict = field(default_factory=dict)   # "fedavg"/"centralised" -> fa.paper_at_matched_accuracy rows
    own: object = None                     # archived ResNet-18-GN own-trajectory study (with its trajectory), or None
    p32: pd.Series | None = None           # the paper's Table I row of the trajectory's protocol, or None
    own_thetas: list = field(default_factory=list)  # rounds of that trajectory kept as θ

    @property
    def values(self) -> dict:
        """Every value the chapter glues (:func:`maskfed.book.glue_all`): :attr:`glued` and ``wf_seconds``,
        the seconds since :func:`findings` began, at the moment this is read (glued at the end of the
        page, the whole page's time)."""
        return self.glued | {"wf_seconds": time.perf_counter() - self.started}

    @property
    def protocols(self) -> list[str]:
        """The model-size study's protocols, in the order measured (:func:`fa.protocol_label`)."""
        return [c for c in self.overview.columns if c != "cliff"] if self.overview is not None else []


def findings(profile: str, *, data_path=None, workers: int | None = None, theta_from: str = "auto",
             theta_accuracy: float | None = None, cohort_sizes=None, cohort_draws: int | None = None, lrs=None,
             lr_pool: int | None = None, models_from: str = "cpu-paper", models_live: bool | None = None) -> Findings:
    """Run or read everything the chapter shows (its parameters, as the parameters cell names them).

    The axes' θ is the first-seed trajectory of ``theta_from`` ("auto": the archived cpu-paper one
    where it exists and ``profile`` uses CIFAR-10; "own": this profile's run; or an archived profile's
    name), at the first kept round reaching ``theta_accuracy``; the cohort-size and step-size axes train
    at it (:func:`fa.cohort_axis`, :func:`fa.lr_axis`). The model-size study is computed in this build
    where ``models_live`` (None: at the smoke profile only) and otherwise read from the ``models_from``
    archive, part by part (:data:`fa.MODEL_PARTS`). Sets torch to one thread (the workers parallelise).

    Returns:
        :class:`Findings`; its ``values`` hold every ``wf_...`` name the chapter's Markdown uses, with
        ``wf_axes_seconds`` (the two axes' wall time, s) and ``wf_seconds`` (since this call began, s).

    Raises:
        ConfigError: axis settings the study does not accept (:func:`fa.make_axes_spec`), or a
            profile without a minibatch size for the step-size axis (:func:`fa.minibatches`).
    """
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    prof = load_profile(profile, data_path=data_path)
    workers = prof.workers if workers is None else workers
    # the θ of the two axes: an archived trajectory where one is asked for and exists, else this profile's own
    wanted = {"auto": "cpu-paper" if prof.base.get("dataset", "cifar10") == "cifar10" else None, "own": None}.get(
        theta_from, theta_from)
    trajectory = archive.ladder_trajectories(wanted).get(load_profile(wanted).seeds[0]) if wanted else None
    theta_prof = load_profile(wanted, data_path=data_path) if trajectory is not None else prof
    spec = fa.make_axes_spec(theta_prof.name, target=theta_accuracy, cohort_sizes=cohort_sizes,
                             cohort_draws=cohort_draws, lrs=lrs, lr_pool=lr_pool)
    ck, _ = fa.axes_theta(theta_prof, spec, trajectory=trajectory)
    base = stage.ladder_config(theta_prof)
    t_axes = time.perf_counter()
    cohorts = fa.cohort_axis(theta_prof, ck, spec, workers=workers)
    eq12 = {name: fa.eq12_table(g, spec.ref_kc) for name, g in cohorts.groupby("protocol", sort=False)}
    lr_table = fa.lr_axis(theta_prof, ck, spec, workers=workers)
    t_axes = time.perf_counter() - t_axes

    values = theta_values(theta_prof, ck, spec, base, trajectory)
    values |= cohort_values(eq12, spec.ref_kc, sorted(cohorts["k_c"].unique()))
    values["wf_draws"] = spec.cohort_draws
    values |= lr_values(lr_table, theta_prof, spec, base.lr)

    live = models_live if models_live is not None else profile == "smoke"
    study_base = stage.ladder_config(prof if live else load_profile(models_from, data_path=data_path))
    values |= {"wf_study_bs": study_base.batch_size, "wf_study_tau": study_base.local_epochs,
               "wf_study_lr": study_base.lr}
    parts, missing, unfinished = model_parts(prof if live else None, models_from, workers=workers)
    mtable = pd.concat([p[0] for p in parts.values()], ignore_index=True) if parts else None
    mckpts = pd.concat([p[1] for p in parts.values()], ignore_index=True) if parts else None
    values["wf_models_where"] = " ".join(f"{fa.PART_NAMES[k]}: {v[3].rstrip('.')}."
                                         for k, v in parts.items()) or "No model-size study was found."
    values["wf_models_missing"] = (("Not in this build: " + "; ".join(missing) + ". The page shows the rest.")
                                   if missing else "Every part of the study is shown.")
    ref_label = fa.protocol_label(study_base.batch_size, study_base.local_epochs)  # the trajectory's protocol
    found = Findings(glued=values, started=t_start, theta_profile=theta_prof, eq12=eq12, lr_table=lr_table,
                     mtable=mtable, mckpts=mckpts, ref_label=ref_label)
    if mtable is not None:
        found.overview, found.paper_row = fa.model_overview(mtable), fa.paper_overview()
        found.checks = fa.path_checks(mtable)
        matched = {src: fa.paper_at_matched_accuracy(mtable, paper_table("table1"), source=src)
                   for src in ("fedavg", "centralised")}
        found.matched = {src: m for src, m in matched.items() if len(m)}
    values |= model_values(found, missing, unfinished)
    values["wf_paper_text"] = (evidence.resnet_text([v[0] for v in parts.values()], protocol=ref_label, where="")
                               or "ResNet-18-GN is not in this build, so the paper's Table I has no counterpart here.")
    values["wf_paper_caption"] = evidence.paper_beside_caption(list(found.matched))

    own = None if live else archive.load_factor_study(models_from, "resnet-fedavg")
    found.own = own if own is not None and own.trajectory is not None else None
    t1 = paper_table("table1").reset_index()
    p32 = t1[(t1["batch_size"].astype(str) == str(study_base.batch_size))
             & (t1["local_epochs"] == study_base.local_epochs)]
    found.p32 = p32.iloc[0] if len(p32) else None  # the paper's Table I row of the trajectory's protocol
    if found.own is not None:
        found.own_thetas = found.own.checkpoints.loc[found.own.checkpoints["reached"], "when"].astype(int).tolist()
    values["wf_own_text"] = evidence.own_trajectory_paragraph(found.own, study_base, found.p32,
                                                              archive.how_to_make_factor(models_from, "resnet-fedavg"))
    values["wf_axes_seconds"] = t_axes
    return found


# --------------------------------------------------------------------------- the values, section by section

def theta_values(theta_prof: Profile, ck: fa.Checkpoint, spec: fa.AxesSpec, base, trajectory: Path | None) -> dict:
    """Where the axes' θ comes from: profile, round, test accuracy, how it was found (phrases), the
    reference run's setting (``base``: its :class:`~maskfed.engine.config.RunConfig`) and the sizes the
    axes use (clients K, parameters of θ, lr, K_c; the paper's ResNet-18-GN over the small CNN in
    parameters)."""
    return {
        "wf_theta_profile": theta_prof.name,
        "wf_theta_how": ("read from the archived run folder " + trajectory.name + " (the run kept θ as it trained)")
        if trajectory is not None else "this build's own run of it (" + ck.where + ")",
        "wf_theta_round": ck.when,
        "wf_theta_acc": ck.test_acc,
        "wf_theta_target": ("the first kept round whose test accuracy reaches " + f"{spec.target:.2f}") if ck.reached
        else f"its last kept round: the trajectory never reaches the asked-for {spec.target:.2f}",
        "wf_ref_bs": base.batch_size, "wf_ref_tau": base.local_epochs, "wf_ref_alpha": base.alpha,
        "wf_K": base.num_clients,
        "wf_params": int(ck.theta.numel()),
        "wf_lr0": base.lr,
        "wf_param_ratio": stage.parameter_ratio(base, "resnet18_gn"),
        "wf_kc0": base.cohort_size,
    }


def cohort_values(eq12: dict[str, pd.DataFrame], ref_kc: int, sizes: list[int]) -> dict:
    """The cohort-size section's numbers and phrases, from eq. 12 per protocol.

    Args:
        eq12: protocol -> :func:`fa.eq12_table` rows (``k_c``, ``median``, ``share``, ``r``,
            ``predicted``, ``rel_dev``, ``within_iqr``, ``ratio_of_means``), at least one K_c besides ``ref_kc``.
        ref_kc: the K_c whose cohorts gave r.
        sizes: the K_c drawn, ascending.

    Returns:
        ``wf_falls`` ("3 of 4": protocols whose share (1/Δ_S)/K_c falls at every step up in K_c), ``wf_dev_text``
        (largest |median / eq. 12 − 1| per protocol, %), ``wf_rom_dev`` (largest |ratio of means / eq. 12 − 1|, %),
        ``wf_within`` (cells with eq. 12 inside the interquartile range), ``wf_share_text``, ``wf_r_text``,
        ``wf_dev_where``, ``wf_skew_text`` and ``wf_cohort_summary`` (phrases and one sentence), ``wf_sizes``,
        ``wf_ref_kc``.
    """
    falls = {name: fa.share_falls(t) for name, t in eq12.items()}
    devs = pd.concat([t.assign(protocol=name) for name, t in eq12.items()], ignore_index=True)
    away = devs[devs["k_c"] != ref_kc]
    dev_by = away.groupby("protocol", sort=False)["rel_dev"].apply(lambda x: float(x.abs().max()))
    rom_dev = float((away["ratio_of_means"] / away["predicted"] - 1).abs().max())
    worst = away.loc[away["rel_dev"].abs().idxmax()] if len(away) else None
    first, last = sizes[0], sizes[-1]
    share_first = {n: float(t.loc[t.k_c == first, "share"].iloc[0]) for n, t in eq12.items()}
    share_last = {n: float(t.loc[t.k_c == last, "share"].iloc[0]) for n, t in eq12.items()}
    rises = {n: bool((t.sort_values("k_c")["median"].diff().dropna() > 0).all()) for n, t in eq12.items()}
    return {
        "wf_sizes": ", ".join(map(str, sizes)),
        "wf_ref_kc": ref_kc,
        "wf_falls": f"{sum(falls.values())} of {len(falls)}",
        "wf_dev_text": ", ".join(f"{100 * v:.1f}% ({n})" for n, v in dev_by.items()),
        "wf_rom_dev": 100 * rom_dev,
        "wf_skew_text": "so where the median departs from eq. 12, it is the skew of 1/Δ_S across cohorts (its median "
                        "is not its ratio of means) and not eq. 12's algebra" if rom_dev < 0.05 else
                        "so part of the departure is the finite number of cohorts drawn, not only their skew",
        "wf_dev_where": "–" if worst is None else f"{worst['protocol']} at K_c = {int(worst['k_c'])}",
        "wf_within": f"{int(away['within_iqr'].sum())} of {len(away)}",
        "wf_share_text": "; ".join(f"{n}: {share_first[n]:.2f} at K_c = {first}, {share_last[n]:.2f} at K_c = {last}"
                                   for n in eq12),
        "wf_r_text": ", ".join(f"{t['r'].iloc[0]:.3g} ({n})" for n, t in eq12.items()),
        "wf_cohort_summary": "A larger cohort recovers more of the penalty in absolute terms and a smaller share of "
                             "it, as eq. 12 says." if all(rises.values()) and all(falls.values()) else
                             "That is not the pattern eq. 12 leads one to expect for every protocol: the median rises "
                             f"with K_c for {sum(rises.values())} of {len(rises)} protocols and its share falls for "
                             f"{sum(falls.values())} of {len(falls)}.",
    }


def lr_values(lr_table: pd.DataFrame, theta_prof: Profile, spec: fa.AxesSpec, lr: float) -> dict:
    """The step-size section's numbers and phrases: the cells trained, the spreads across lr
    (:func:`fa.lr_spread`), the verdict of :func:`fa.lr_verdict` (its medians A, B, C as ``wf_v_reference``,
    ``wf_v_same_lr``, ``wf_v_same_ratio``, A's interquartile range ``wf_v_iqr``, the verdict ``wf_v_text``)
    and ``wf_full1_dev``, the largest relative move of the full-batch τ = 1 median across lr (float32
    rounding where under 1e-3, since one full-batch step scales every update alike).

    Raises:
        KeyError: a cell of the rule missing from ``lr_table``.
    """
    small_bs, large_bs = fa.minibatches(theta_prof)
    verdict = fa.lr_verdict(lr_table, small_bs=small_bs, large_bs=large_bs, lr=lr, factor=large_bs / small_bs)
    full1 = lr_table[(lr_table.batch_size == "full") & (lr_table.local_epochs == 1)]
    full1_dev = float((full1["recovery_unweighted"] / full1["recovery_unweighted"].iloc[0] - 1).abs().max())
    return {
        "wf_lrs": ", ".join(f"{v:g}" for v in spec.lrs),
        "wf_lr_pool": spec.lr_pool,
        "wf_lr_cohorts": spec.lr_cohorts,
        "wf_small_bs": small_bs,
        "wf_large_bs": large_bs,
        "wf_large_lr": lr * large_bs / small_bs,
        "wf_spread_full1": fa.lr_spread(lr_table, "full", 1),
        "wf_spread_full2": fa.lr_spread(lr_table, "full", 2),
        "wf_spread_small": fa.lr_spread(lr_table, str(small_bs), 1),
        "wf_small_shape": fa.lr_shape_text(lr_table, small_bs, spec.lrs),
        **{f"wf_v_{k}": verdict[k] for k in ("reference", "same_lr", "same_ratio", "iqr")},
        "wf_v_text": fa.LR_VERDICTS[(verdict["closer"], verdict["clear"])],
        "wf_full1_dev": full1_dev,
        "wf_full1_text": "float32 rounding of Δ_k = θ − θ_k" if full1_dev < 1e-3 else
        "more than float32 rounding would explain, so something other than the step size changed between those cells",
    }


def model_parts(live: Profile | None, models_from: str, *, workers: int = 1) -> tuple[dict, list, list]:
    """The parts of the model-size study (:data:`fa.MODEL_PARTS`) this build shows.

    Args:
        live: the profile whose small-CNN study is computed now (:func:`fa.model_study` with
            :func:`fa.model_spec`, on its first seed's ladder trajectory); None: every part is read.
        models_from: the archived profile the other parts are read from (:func:`archive.load_factor_study`).
        workers: worker processes of a live study.

    Returns:
        ``(parts, missing, unfinished)``: part -> (table, checkpoints, accuracy, one sentence of where it
        came from); one phrase per part not found, with the command that makes it; and (model, rounds
        done, its budget) of an own trajectory read while still going.
    """
    parts, missing, unfinished = {}, [], []
    if live is not None:
        mst = fa.model_study(live, fa.model_spec(live.name, "models"), workers=workers,
                             trajectory=archive.ladder_trajectories(live.name).get(live.seeds[0]))
        parts["models"] = (mst.table, mst.checkpoints, mst.accuracy,
                           f"computed in this build with the {live.name} profile's settings")
    for part in fa.MODEL_PARTS:
        if part in parts:
            continue
        found = archive.load_factor_study(models_from, part)
        if found is None:
            missing.append(f"{fa.PART_NAMES[part]} (make it with: {archive.how_to_make_factor(models_from, part)})")
        else:
            parts[part] = (found.table, found.checkpoints, found.accuracy,
                           f"read from the {models_from} archive, {found.text()}")
            m = found.spec.models[0]
            if found.trajectory is not None and len(found.trajectory) < m.rounds:
                unfinished.append((fa.model_label(m.model, m.width), len(found.trajectory), m.rounds))
    return parts, missing, unfinished


def cliff_text(found: Findings) -> str:
    """One clause: at how many θ a full-batch protocol recovers more than every minibatch one
    (:func:`fa.cliff_verdict`), its range and the paper's Table I cliff."""
    cv = fa.cliff_verdict(found.overview)
    return (f"a full-batch protocol recovers more than every minibatch one (cliff > 1) at {cv['holds']} of "
            f"the {cv['measured']} θ (cliff {cv['min']:.2f} to {cv['max']:.2f}; the paper's Table I: "
            f"{found.paper_row['cliff'].iloc[0]:.2f})" if cv["measured"] else
            "no θ was measured with both a full-batch and a minibatch protocol")


def model_values(found: Findings, missing: list[str], unfinished: list) -> dict:
    """The model-size section's captions and findings (sentences; "" captions without a study):
    ``wf_overview_caption``, ``wf_sn_caption``, ``wf_ckpt_caption``, ``wf_check_within`` ("2 of 27; 0 of 5":
    cells within the spread per model measured both ways), ``wf_check_text`` (:func:`fa.route_summary` per
    model) and ``wf_found_model`` (the chapter's summary, model by model; or what is missing)."""
    routes = {name: fa.route_summary(c) for name, c in found.checks.items() if len(c)}
    out = {
        "wf_check_within": "; ".join(f"{r['cells'] - r['beyond']} of {r['cells']}" for r in routes.values()) or "–",
        "wf_check_text": "; ".join(
            f"for the {name}, the way θ was reached changes the measurement by "
            + (f"less than its spread across cohorts ({r['cells']} of {r['cells']} (target, protocol) cells within)"
               if not r["beyond"] else f"more than its spread across cohorts in {r['beyond']} of {r['cells']} "
               f"(target, protocol) cells; centralised-SGD θ give {book.span(r['min'], r['max'])} times (median "
               f"{r['median']:.2f}) the value at FedAvg θ") for name, r in routes.items())
        or "not measured in this build (it needs one model at θ reached both ways)",
    }
    mtable, overview, ref_label = found.mtable, found.overview, found.ref_label
    if mtable is None:
        return out | {"wf_overview_caption": "", "wf_sn_caption": "", "wf_ckpt_caption": "",
                      "wf_found_model": "not measured in this build: " + "; ".join(missing)}
    ref_rows = overview[ref_label] if ref_label in overview else pd.Series(dtype=float)
    cliff = cliff_text(found)
    t1 = paper_table("table1")
    out["wf_overview_caption"] = (
        "One row per θ (model, parameters, how θ was reached, the accuracy aimed at and the test accuracy reached): "
        "the median 1/Δ_S over cohorts of each protocol, and the cliff (the smallest full-batch over the largest "
        "minibatch value; the Table I chapter's measure of the paper's finding). The last row is the paper's Table I, "
        "where each protocol is measured on its own 200-round trajectory, so at its own accuracy "
        f"({t1['test_acc'].min():.2f} to {t1['test_acc'].max():.2f}), not "
        f"at matched θ. Across the {overview.index.get_level_values('model').nunique()} models of this build "
        f"({int(mtable['params'].min()):,} to {int(mtable['params'].max()):,} parameters), {ref_label} recovers "
        + ((f"{ref_rows.min():.2f} ({ref_rows.idxmin()[0]}) to {ref_rows.max():.2f} ({ref_rows.idxmax()[0]})")
           if len(ref_rows.dropna()) else "–") + f", and {cliff}.")
    out["wf_sn_caption"] = ("The noise σ̂² and signal ‖μ̂‖² (eq. 13-14, medians over cohorts) behind each "
                            "recovery factor above; eq. 12 ties their ratio to 1/Δ_S.")
    out["wf_ckpt_caption"] = evidence.checkpoints_caption(found.mckpts, unfinished)
    check_short = ("the way θ was reached moves the measurement by more than its spread in " + "; ".join(
        f"{r['beyond']} of {r['cells']} cells ({name})" for name, r in routes.items())
        if routes else "the way θ was reached was not checked")
    out["wf_found_model"] = (
        f"over {overview.index.get_level_values('model').nunique()} models "
        f"({int(mtable['params'].min()):,} to {int(mtable['params'].max()):,} parameters) at matched "
        f"accuracy, {cliff}"
        + (f"; {ref_label} recovers {ref_rows.min():.2f} to {ref_rows.max():.2f}" if len(ref_rows.dropna()) else "")
        + "; " + check_short + ". Model by model: " + "; ".join(
            f"{r.Index} ({int(r.params):,} parameters), cliff > 1 at {int(r.holds)} of "
            f"{int(r.measured)} θ" + (f" ({book.span(r.cliff_min, r.cliff_max)})" if r.measured else "")
            + (f", {ref_label} recovers {book.span(r.ref_min, r.ref_max)}" if r.ref_min == r.ref_min else "")
            for r in fa.by_model(overview, ref_label).itertuples()))
    return out


# --------------------------------------------------------------------------- tables

#: Main columns of the cohort-size table (the others go to its details box).
COHORT_MAIN = ["1/Δ_S, median [IQR]", "share (1/Δ_S)/K_c", "eq. 12", "median / eq. 12 − 1", "eq. 12 within IQR"]


def table_cohort_size(found: Findings) -> tuple[pd.DataFrame, list[str]]:
    """Eq. 12 against the measurement, one row per (protocol, K_c), with reader headers; and
    :data:`COHORT_MAIN`, for :func:`maskfed.book.fitted`."""
    devs = pd.concat([t.assign(protocol=name) for name, t in found.eq12.items()], ignore_index=True)
    shown = devs.assign(**{"1/Δ_S, median [IQR]": [f"{m:.2f} [{a:.2f}, {b:.2f}]" for m, a, b in
                                                     zip(devs["median"], devs["q1"], devs["q3"])]})
    shown = shown[["protocol", "k_c", "1/Δ_S, median [IQR]", "share", "predicted", "rel_dev", "within_iqr",
                   "cohorts", "ratio_of_means", "predicted_share", "median", "q1", "q3"]].rename(columns={
        "k_c": "K_c", "share": "share (1/Δ_S)/K_c", "ratio_of_means": "K_c·mean B / mean A", "predicted": "eq. 12",
        "predicted_share": "eq. 12 share", "rel_dev": "median / eq. 12 − 1", "within_iqr": "eq. 12 within IQR",
        "median": "1/Δ_S median", "q1": "1/Δ_S lower quartile", "q3": "1/Δ_S upper quartile"})
    return shown.set_index(["protocol", "K_c"]), COHORT_MAIN


def table_step_size(found: Findings) -> tuple[pd.DataFrame, dict]:
    """One row per step-size cell (batch size, τ, lr): median 1/Δ_S [IQR] over cohorts, σ̂², ‖μ̂‖²
    and the percentage of cohorts below 1; and the formats, for :func:`maskfed.book.styled`."""
    t = found.lr_table
    shown = t.assign(**{"1/Δ_S, median [IQR]": [f"{m:.2f} [{a:.2f}, {b:.2f}]" for m, a, b in zip(
        t["recovery_unweighted"], t["recovery_unweighted_q1"], t["recovery_unweighted_q3"])]})
    shown = (shown.set_index(["batch_size", "local_epochs", "lr"])
             [["1/Δ_S, median [IQR]", "sigma2_hat", "mu2_hat", "pct_cohorts_below_one"]]
             .rename(columns={"pct_cohorts_below_one": "cohorts with 1/Δ_S < 1 (%)"}))
    return shown, {"sigma2_hat": book.scientific, "mu2_hat": book.scientific}


def table_models(found: Findings) -> tuple[pd.DataFrame, list]:
    """One row per θ of the model-size study and the paper's Table I row: parameters, accuracy
    reached, median 1/Δ_S per protocol and the cliff; and the main columns (the trajectory's protocol
    first, then as many as fit, :func:`maskfed.book.main_columns`). Needs :attr:`Findings.mtable`."""
    paper = found.paper_row[[c for c in found.overview.columns if c in found.paper_row.columns]]
    ov = pd.concat([found.overview, paper]).reset_index(["params", "test_acc"]).rename(index=THETA_NAMES)
    protocols = found.protocols
    main = book.main_columns(ov, ["params", "test_acc", "cliff"] + [p for p in [found.ref_label] if p in protocols],
                             protocols, {"cliff": "{:.2f}"})
    return ov, main


def table_signal_noise(found: Findings) -> tuple[pd.DataFrame, list, dict]:
    """σ̂² and ‖μ̂‖² (medians over cohorts) per protocol (side by side) at each θ, rows as
    :func:`table_models`; the main columns and the formats (scientific). Needs :attr:`Findings.mtable`."""
    protocols = found.protocols
    sn = fa.model_signal_noise(found.mtable).droplevel(["params", "test_acc"]).rename(index=THETA_NAMES)
    sn = sn.swaplevel(axis=1).reindex(columns=pd.MultiIndex.from_product([protocols, ["sigma2_hat", "mu2_hat"]]))
    sn = sn.rename(columns={"sigma2_hat": "σ̂²", "mu2_hat": "‖μ̂‖²"}, level=1)
    formats = {c: book.scientific for c in sn.columns}
    return sn, book.main_columns(sn, [p for p in [found.ref_label] if p in protocols], protocols, formats), formats


def tables_path_checks(found: Findings) -> dict[str, pd.DataFrame]:
    """Per model measured at θ reached both ways (its name, capitalised, as the heading): the
    :func:`fa.path_check` table with reader headers."""
    names = {"acc_fedavg": "acc, FedAvg θ", "acc_centralised": "acc, central θ", "fedavg": "1/Δ_S, FedAvg θ",
             "centralised": "1/Δ_S, central θ", "difference": "difference", "iqr_fedavg": "IQR, FedAvg θ",
             "within": "within IQR"}
    return {name[0].upper() + name[1:]: check.rename(columns=names) for name, check in found.checks.items()}


def table_model_thetas(found: Findings) -> pd.DataFrame | None:
    """Where each θ of the model-size study came from, one row per (model, source, target); None
    without a study. A target not reached shows "–" for its round or step and training images (the
    archive stores -1 there)."""
    c = found.mckpts
    if c is None:
        return None
    unreached = {col: [int(v) if r else "–" for v, r in zip(c[col], c["reached"])] for col in ("when", "images")}
    return (c.assign(model=[fa.model_label(m, w) for m, w in zip(c["model"], c["width"])], **unreached)
            .drop(columns=["width"]).rename(columns={"when": "round / step", "images": "training images",
                                                     "where": "from"}).set_index(["model", "source", "target"])
            .rename(index=THETA_NAMES))


def table_paper_beside(found: Findings) -> tuple[pd.DataFrame, dict]:
    """Each protocol of the paper's Table I beside ResNet-18-GN's θ nearest in test accuracy, per θ
    source (:attr:`Findings.matched`, not empty); and the formats (ratios to two decimals)."""
    names = {"fedavg": "FedAvg θ", "centralised": "central θ"}
    first = found.matched[next(iter(found.matched))]
    beside = [m[["acc", "measured", "ratio"]].rename(columns={
        "acc": f"acc, {names[k]}", "measured": f"1/Δ_S, {names[k]}", "ratio": f"ratio, {names[k]}"})
        for k, m in found.matched.items()]
    shown = pd.concat([first[["paper_acc", "paper"]].rename(columns={"paper_acc": "acc, paper",
                                                                     "paper": "1/Δ_S, paper"})] + beside, axis=1)
    return shown, {c: "{:.2f}" for c in shown.columns if c.startswith("ratio")}


# --------------------------------------------------------------------------- figures

def figure_cohort_size(found: Findings) -> plt.Figure:
    """1/Δ_S and its share against K_c per protocol, with eq. 12 (:func:`maskfed.book.plots.cohort_size`)."""
    fig, axes = plt.subplots(2, 1, figsize=(6.4, 8.4), sharex=True)
    cohort_size(found.eq12, axes=axes)
    axes[0].set_title("1/Δ_S against the cohort size K_c, at one θ")
    return fig


def figure_step_size(found: Findings) -> plt.Figure:
    """1/Δ_S against lr per cell (:func:`maskfed.book.plots.step_size`)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    step_size(found.lr_table, ax=ax, title="1/Δ_S against the step size, at one θ")
    return fig


def figure_models(found: Findings) -> plt.Figure:
    """1/Δ_S against the parameter count, one panel per target accuracy, the paper's Table I in the
    last (:func:`maskfed.book.plots.recovery_vs_parameters`). Needs :attr:`Findings.mtable`."""
    targets = sorted(found.mtable["target"].unique())
    fig, axes = plt.subplots(len(targets), 1, figsize=(6.4, 3.4 * len(targets) + 1.6), sharex=True, sharey=True,
                             squeeze=False)
    for ax, t in zip(axes[:, 0], targets):
        recovery_vs_parameters(found.mtable, ax=ax, target=t, legend=t == targets[-1],
                               paper=found.paper_row.drop(columns="cliff").iloc[0] if t == targets[-1] else None,
                               title=f"1/Δ_S against the model size, θ for target test accuracy {t:.2f}")
        ax.tick_params(labelbottom=True)  # every panel keeps its parameter-count labels
    return fig


def figure_own_trajectory(found: Findings) -> plt.Figure | None:
    """ResNet-18-GN's own FedAvg trajectory, 1/Δ_S round by round beside the paper's Table I value
    (:func:`maskfed.book.plots.own_trajectory`); None without that trajectory or without a Table I row."""
    if found.own is None or found.p32 is None:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    own_trajectory(found.own.trajectory, paper=float(found.p32["recovery_unweighted"]), thetas=found.own_thetas,
                   ax=ax, title="ResNet-18-GN, FedAvg at bs 32, τ 2: 1/Δ_S round by round")
    return fig
