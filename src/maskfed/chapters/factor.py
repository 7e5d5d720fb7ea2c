"""The chapter "What sets the recovery factor?" (``notebooks/what_sets_the_factor.md``): the cohort size K_c
(against eq. 12), the step size and the model size, each at a fixed θ (:mod:`maskfed.studies.factor_axes`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from maskfed import book, provenance
from maskfed.analysis import summary, uncertainty
from maskfed.analysis.summary import paper_table, tail_window
from maskfed.book.plots import cohort_size, own_trajectory, recovery_vs_parameters, step_size
from maskfed.engine.config import load_profile, Profile
from maskfed.names import CPU_PAPER, PAPER
from maskfed.chapters.control import significant
from maskfed.studies import archive, stage
from maskfed.studies import factor_axes as fa

#: The archived profile whose model-size studies the chapter reads unless told otherwise.
MODELS_FROM = CPU_PAPER
#: Test-accuracy gap (fraction) beyond which two θ are not at the same stage of training (ours).
STAGE_GAP = 0.05
#: Largest |ratio of means / eq. 12 − 1| (fraction) within which a departure of the median from eq. 12 is
#: put down to the skew of 1/Δ_S across cohorts alone (ours); beyond it, partly to the finite draw.
ROM_TOLERANCE = 0.05
#: Table cells of 1/Δ_S, its ratios and the cliff: two decimals, as the paper prints 1/Δ_S.
TWO_DECIMALS = "{:.2f}"
#: How the median 1/Δ_S of one cell moves as lr rises (:func:`fa.lr_shape`), in the chapter's words.
SHAPES = {"flat": "stays flat", "rises": "rises", "falls": "falls", "dips": "falls, then rises",
          "peaks": "rises, then falls"}


def theta_names() -> dict:
    """Short row labels of the model-size tables: θ sources and the paper's Table I row."""
    paper = fa.paper_overview().index[0]
    return {"fedavg": "FedAvg", "centralised": "centralised SGD", paper[0]: "ResNet-18-GN", paper[2]: "paper's Table I"}


@dataclass
class Findings:
    """``glued`` (glue name -> number or verdict word; read through :attr:`values`) and the inputs of the
    tables and figures (None / empty without a model-size study)."""

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
    checks: dict = field(default_factory=dict)    # fa.path_checks(mtable)
    matched: dict = field(default_factory=dict)   # "fedavg"/"centralised" -> fa.paper_at_matched_accuracy rows
    own: object = None                     # archived ResNet-18-GN own-trajectory study (with its trajectory), or None
    p32: pd.Series | None = None           # the paper's Table I row of the trajectory's protocol, or None
    own_thetas: list = field(default_factory=list)  # rounds of that trajectory kept as θ
    parts: pd.DataFrame | None = None      # where each part of the model-size study came from (model_parts)
    unfinished: list = field(default_factory=list)  # (model, rounds done, budget) of own trajectories still going
    cell: pd.DataFrame | None = None       # headline_cell: the paper's headline cell three ways

    @property
    def values(self) -> dict:
        """:attr:`glued` and ``wf_seconds``, whole seconds since :func:`findings` began."""
        return self.glued | {"wf_seconds": round(time.perf_counter() - self.started)}

    @property
    def protocols(self) -> list[str]:
        """The model-size study's protocols, in the order measured."""
        return [c for c in self.overview.columns if c != "cliff"] if self.overview is not None else []


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             archived: str | None = None, theta_from: str = "auto", theta_accuracy: float | None = None,
             cohort_sizes=None, cohort_draws: int | None = None, lrs=None, lr_pool: int | None = None,
             models_live: bool | None = None) -> Findings:
    """Run or read everything the chapter shows (its parameters cell names the arguments).

    The axes' θ is the first-seed trajectory of ``theta_from`` ("auto": the archived cpu-paper one where it exists
    and ``profile`` uses CIFAR-10; "own"; or an archived profile) at the first kept round reaching
    ``theta_accuracy``. The model-size study is computed live where ``models_live`` (None: at smoke only), else read
    from the ``archived`` profile's archive (None: :data:`MODELS_FROM`). Sets torch to one thread.

    Raises:
        ConfigError: axis settings the study does not accept, or a profile without a minibatch size."""
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    archived = archived or MODELS_FROM
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    workers = prof.workers if workers is None else workers
    # the θ of the two axes: an archived trajectory where one is asked for and exists, else this profile's own
    wanted = {"auto": CPU_PAPER if prof.base.get("dataset", "cifar10") == "cifar10" else None, "own": None}.get(
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
    study_base = stage.ladder_config(prof if live else load_profile(archived, data_path=data_path))
    values |= {"wf_study_bs": study_base.batch_size, "wf_study_tau": study_base.local_epochs,
               "wf_study_lr": study_base.lr, "wf_models_from": archived}
    parts, where, unfinished = model_parts(prof if live else None, archived, workers=workers)
    mtable = pd.concat([p[0] for p in parts.values()], ignore_index=True) if parts else None
    mckpts = pd.concat([p[1] for p in parts.values()], ignore_index=True) if parts else None
    ref_label = fa.protocol_label(study_base.batch_size, study_base.local_epochs)  # the trajectory's protocol
    found = Findings(glued=values, started=t_start, theta_profile=theta_prof, eq12=eq12, lr_table=lr_table,
                     mtable=mtable, mckpts=mckpts, ref_label=ref_label, parts=where, unfinished=unfinished)
    if mtable is not None:
        found.overview, found.paper_row = fa.model_overview(mtable), fa.paper_overview()
        found.checks = fa.path_checks(mtable)
        matched = {src: fa.paper_at_matched_accuracy(mtable, paper_table("table1"), source=src)
                   for src in ("fedavg", "centralised")}
        found.matched = {src: m for src, m in matched.items() if len(m)}
    values |= model_values(found)
    values |= resnet_values(found)

    own = None if live else archive.load_factor_study(archived, "resnet-fedavg")
    found.own = own if own is not None and own.trajectory is not None else None
    t1 = paper_table("table1").reset_index()
    p32 = t1[(t1["batch_size"].astype(str) == str(study_base.batch_size))
             & (t1["local_epochs"] == study_base.local_epochs)]
    found.p32 = p32.iloc[0] if len(p32) else None  # the paper's Table I row of the trajectory's protocol
    if found.own is not None:
        found.own_thetas = found.own.checkpoints.loc[found.own.checkpoints["reached"], "when"].astype(int).tolist()
    asked = fa.model_spec(archived, "resnet-fedavg").models[0].at_rounds if archived in fa.MODEL_DEFAULTS else ()
    values |= own_values(found.own, study_base, found.p32, asked)
    values |= {f"wf_cell_{k}": float("nan") for k in ("from", "to", "trend_p", "small_seeds", "paper_from", "paper_to")}
    values["wf_cell_trend"] = "not measured"  # without the trajectory: the table is not shown
    if found.own is not None and found.p32 is not None:
        small, protocol = archive.summaries("table1", profiles=[archived])[0], (str(study_base.batch_size),
                                                                              study_base.local_epochs)
        small_row = None if not small else small[0].table.loc[protocol].copy()
        if small:
            runs = [r for r in small[0].results if (str(r.config.batch_size), r.config.local_epochs) == protocol]
            small_row["seeds"], small_row["rounds"] = len({r.config.seed for r in runs}), runs[0].config.rounds
        paper = load_profile(PAPER)
        paper_row = found.p32.copy()
        paper_row["seeds"], paper_row["rounds"] = len(paper.seeds), paper.run(paper.seeds[0]).rounds
        found.cell, trend = headline_cell(found.own.trajectory, paper_row, small_row)
        values |= {"wf_cell_from": int(found.cell.loc["ResNet-18-GN", "from_round"]),
                   "wf_cell_to": int(found.cell.loc["ResNet-18-GN", "rounds"]),
                   "wf_cell_trend": trend["verdict"], "wf_cell_trend_p": round(float(trend["p"]), 3),
                   "wf_cell_small_seeds": int(small_row["seeds"]) if small_row is not None else 0,
                   "wf_cell_paper_from": int(found.cell.loc["paper", "from_round"]),
                   "wf_cell_paper_to": int(found.cell.loc["paper", "rounds"])}
    values["wf_axes_seconds"] = round(t_axes)
    return found


# --------------------------------------------------------------------------- the values, section by section

def theta_values(theta_prof: Profile, ck: fa.Checkpoint, spec: fa.AxesSpec, base, trajectory: Path | None) -> dict:
    """Where the axes' θ comes from, the reference run's setting (``base``) and the axes' sizes."""
    return {
        "wf_theta_profile": theta_prof.name,
        "wf_theta_origin": "the archived" if trajectory is not None else "this build's",
        "wf_theta_run": trajectory.name if trajectory is not None else ck.where.rsplit(" ", 1)[-1],
        "wf_theta_round": ck.when, "wf_theta_acc": round(ck.test_acc, 3), "wf_theta_target": round(spec.target, 2),
        "wf_theta_reached": "reached" if ck.reached else "not reached",
        "wf_ref_bs": base.batch_size, "wf_ref_tau": base.local_epochs, "wf_ref_alpha": base.alpha,
        "wf_K": base.num_clients, "wf_params": int(ck.theta.numel()), "wf_lr0": base.lr, "wf_kc0": base.cohort_size,
        "wf_param_ratio": round(stage.parameter_ratio(base, "resnet18_gn")),
    }


def cohort_values(eq12: dict[str, pd.DataFrame], ref_kc: int, sizes: list[int]) -> dict:
    """The cohort-size section's numbers from ``eq12`` (protocol -> :func:`fa.eq12_table`): protocols
    whose share falls / median rises with K_c; the largest |median / eq. 12 − 1| and |ratio of means / eq. 12 − 1|
    away from ``ref_kc`` (%, one decimal) and the departure's cause (:data:`ROM_TOLERANCE`); cells within the IQR."""
    devs = pd.concat(eq12.values(), ignore_index=True)
    away = devs[devs["k_c"] != ref_kc]
    rom_dev = float((away["ratio_of_means"] / away["predicted"] - 1).abs().max())
    return {
        "wf_sizes": ", ".join(map(str, sizes)), "wf_ref_kc": ref_kc, "wf_n_protocols": len(eq12),
        "wf_n_falls": sum(fa.share_falls(t) for t in eq12.values()),
        "wf_n_rises": sum(bool((t.sort_values("k_c")["median"].diff().dropna() > 0).all()) for t in eq12.values()),
        "wf_dev_max": round(100 * float(away["rel_dev"].abs().max()), 1),
        "wf_within": int(away["within_iqr"].sum()), "wf_cells_away": len(away),
        "wf_rom_dev": round(100 * rom_dev, 1),
        "wf_departure": "skew alone" if rom_dev < ROM_TOLERANCE else "skew and draw",
    }


def lr_values(lr_table: pd.DataFrame, theta_prof: Profile, spec: fa.AxesSpec, lr: float) -> dict:
    """The step-size section's numbers and verdict words (:func:`fa.lr_shape`, :func:`fa.lr_verdict`;
    KeyError: a cell missing)."""
    small_bs, large_bs = fa.minibatches(theta_prof)
    verdict = fa.lr_verdict(lr_table, small_bs=small_bs, large_bs=large_bs, lr=lr, factor=large_bs / small_bs)
    full1 = lr_table[(lr_table.batch_size == "full") & (lr_table.local_epochs == 1)]
    full1_dev = float((full1["recovery_unweighted"] / full1["recovery_unweighted"].iloc[0] - 1).abs().max())
    shape = fa.lr_shape(lr_table, str(small_bs), 1)
    by_lr = shape["values"]
    return {
        "wf_lrs": ", ".join(book.number(v) for v in spec.lrs), "wf_lr_pool": spec.lr_pool,
        "wf_lr_cohorts": spec.lr_cohorts, "wf_small_bs": small_bs, "wf_large_bs": large_bs,
        "wf_large_lr": lr * large_bs / small_bs,
        "wf_spread_full2": round(fa.lr_shape(lr_table, "full", 2)["spread"], 2),
        "wf_spread_small": round(shape["spread"], 2),
        "wf_small_shape": SHAPES[shape["shape"]],
        "wf_small_top_lr": float(by_lr.idxmax()), "wf_small_bottom_lr": float(by_lr.idxmin()),
        **{f"wf_v_{k}": round(float(verdict[k]), 2) for k in ("reference", "same_lr", "same_ratio", "iqr")},
        "wf_v_closer": verdict["closer"], "wf_v_clear": "clear" if verdict["clear"] else "not clear",
        "wf_full1_dev": significant(full1_dev, 2),
    }


def model_parts(live: Profile | None, models_from: str, *, workers: int = 1) -> tuple[dict, pd.DataFrame, list]:
    """(part -> (table, checkpoints); where each part of :data:`fa.MODEL_PARTS` came from; (model,
    rounds done, budget) of own trajectories still going): the small-CNN part of ``live`` computed now (None: every
    part read), the others read from ``models_from``'s archive."""
    parts, rows, unfinished = {}, {}, []
    for part in fa.MODEL_PARTS:
        key = (part, fa.PART_NAMES[part])
        if live is not None and part == "models":
            mst = fa.model_study(live, fa.model_spec(live.name, "models"), workers=workers,
                                 trajectory=archive.ladder_trajectories(live.name).get(live.seeds[0]))
            parts[part] = (mst.table, mst.checkpoints)
            rows[key] = {"from": "this build", "profile": live.name}
            continue
        found = archive.load_factor_study(models_from, part)
        if found is None:
            rows[key] = {"from": "missing", "profile": models_from}
            continue
        parts[part] = (found.table, found.checkpoints)
        p, machine = found.provenance, found.provenance["machine"]
        rows[key] = {"from": "archive", "profile": models_from, "computed": p["finished_utc"][:10],
                     "device": machine.get("device", "?"),
                     "processor": machine.get("cuda_device") or machine.get("cpu_model") or machine.get("processor"),
                     "commit": p["commit"], "run code": p["code_hash"],
                     "same code now": p["code_hash"] == provenance.code_hash(),
                     "compute (h)": round(p["compute_s"] / 3600, 1), "last command (h)": round(p["wall_s"] / 3600, 1),
                     "files changed": len(found.changed)}
        m = found.spec.models[0]
        if found.trajectory is not None and len(found.trajectory) < m.rounds:
            unfinished.append((fa.model_label(m.model, m.width), len(found.trajectory), m.rounds))
    where = pd.DataFrame.from_dict(rows, orient="index")
    where.index.names = ["part", "what it measures"]
    return parts, where, unfinished


def model_values(found: Findings) -> dict:
    """The model-size section's numbers (NaN without a study), two decimals."""
    t1, nan = paper_table("table1"), float("nan")
    unf = found.unfinished[0] if found.unfinished else ("–", nan, nan)
    out = {"wf_ref_label": found.ref_label, "wf_paper_cliff": round(float(fa.paper_overview()["cliff"].iloc[0]), 2),
           "wf_paper_acc_min": round(float(t1["test_acc"].min()), 2),
           "wf_paper_acc_max": round(float(t1["test_acc"].max()), 2),
           "wf_unf_model": unf[0], "wf_unf_done": unf[1], "wf_unf_budget": unf[2]}
    keys = ("n_models", "params_min", "params_max", "cliff_holds", "cliff_measured", "cliff_min", "cliff_max",
            "ckpt_kept", "ckpt_below")
    if found.mtable is None:
        return out | {f"wf_{k}": nan for k in keys}
    cv, kept = fa.cliff_verdict(found.overview), found.mckpts[found.mckpts["reached"]]
    return out | dict(zip((f"wf_{k}" for k in keys), (
        found.overview.index.get_level_values("model").nunique(), int(found.mtable["params"].min()),
        int(found.mtable["params"].max()), cv["holds"], cv["measured"], round(cv["min"], 2), round(cv["max"], 2),
        len(kept), int((kept["test_acc"] < kept["target"]).sum()))))


def resnet_values(found: Findings) -> dict:
    """The route to θ for the paper's model (:func:`fa.route_summary`), FedAvg against centralised θ
    beside the paper's Table I, and the minibatch protocols at FedAvg θ (NaN or 0 where not measured)."""
    nan, empty = float("nan"), pd.DataFrame(columns=["paper_acc", "paper", "acc", "measured", "ratio"], dtype=float)
    check = found.checks.get("ResNet-18-GN")
    route = fa.route_summary(check) if check is not None and len(check) else {"cells": 0, "beyond": 0}
    fed, cen = (found.matched.get(src, empty) for src in ("fedavg", "centralised"))
    both = [i for i in fed.index if i in cen.index]
    fed, cen = fed.loc[both], cen.loc[both]
    mini = found.matched.get("fedavg", empty)
    mini = mini.loc[[not str(i).startswith("full") for i in mini.index]]
    return {**{f"wf_rn_route_{k}": round(route.get(k, nan), 2) for k in ("min", "median", "max")},
            "wf_rn_beyond": route["beyond"], "wf_rn_cells": route["cells"], "wf_rn_both": len(both),
            "wf_rn_nearer": int((np.abs(np.log(fed["ratio"])) < np.abs(np.log(cen["ratio"]))).sum()),
            "wf_rn_fed_median": round(fed["ratio"].median(), 2), "wf_rn_cen_median": round(cen["ratio"].median(), 2),
            **{f"wf_rn_mini_{k}_{end}": round(getattr(mini[col], end)(), 2)
               for k, col in (("ratio", "ratio"), ("acc", "acc"), ("paper", "paper_acc")) for end in ("min", "max")}}


#: Columns of :func:`headline_cell`, in the order shown.
CELL_COLUMNS = ["recovery_unweighted", "recovery_weighted", "mu2_hat", "sigma2_hat", "pct_rounds_below_one", "test_acc",
                "from_round", "rounds", "seeds"]


def headline_cell(trajectory: pd.DataFrame, paper_row: pd.Series, small_row: pd.Series | None) -> tuple[pd.DataFrame, dict]:
    """The paper's headline cell (its protocol's Table I row, ``paper_row``) beside ResNet-18-GN's own FedAvg
    ``trajectory`` (per-round metrics of one seed) and the small CNN's (``small_row``: a row of
    :func:`maskfed.analysis.summary.summarize`, medians over seeds; None: left out).

    The trajectory's row: medians over its last quarter (:func:`~maskfed.analysis.summary.summarize_run`; at 200
    rounds the paper's last 50), the percent of those rounds with 1/Δ_S < 1, and the window's first round
    (``from_round``, also of the others: each row's ``rounds`` and ``seeds`` are given with it). Returns ``(table, trend)``: the table (rows: own trajectory, paper, small CNN; columns
    :data:`CELL_COLUMNS`, NaN where a source lacks one) and :func:`~maskfed.analysis.uncertainty.trend_test` of the
    trajectory's 1/Δ_S over the same window.

    Raises:
        ValueError: fewer than 8 rounds in the window (the trend test's minimum).
    """
    n = len(trajectory)
    window = tail_window(n)
    tail = trajectory.tail(window)
    own = summary.summarize_run(trajectory) | {
        "pct_rounds_below_one": 100 * float((tail["recovery_unweighted"] < 1).mean()),
        "rounds": int(trajectory["round"].iloc[-1]), "seeds": 1}
    rows = {"ResNet-18-GN": own, "paper": paper_row.to_dict()}
    if small_row is not None:
        rows["small CNN"] = small_row.to_dict()
    table = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=CELL_COLUMNS)
    table["from_round"] = [r - tail_window(int(r)) + 1 for r in table["rounds"]]
    table[["from_round", "rounds", "seeds"]] = table[["from_round", "rounds", "seeds"]].astype("Int64")
    return table, uncertainty.trend_test(trajectory, frac=window / n)


def own_values(own, base, paper_row: pd.Series | None, at_rounds=()) -> dict:
    """ResNet-18-GN's own FedAvg trajectory beside the paper's Table I row of its protocol (NaN where
    either is missing); medians over its last quarter (:func:`maskfed.analysis.summary.tail_window`).
    ``at_rounds``: the rounds whose θ the study measures whatever their accuracy
    (:attr:`maskfed.studies.factor_axes.ModelSpec.at_rounds`), as ``wf_own_late_asked`` ("none" without);
    ``wf_own_late_n`` of them are measured in the study read."""
    nan = float("nan")
    keys = ("rounds", "budget", "window", "median", "q1", "q3", "acc", "acc_round", "paper", "paper_acc", "gap",
            "at_round", "cohorts", "pool", "at_median")
    late = {"wf_own_late_asked": " and ".join(map(str, at_rounds)) or "none", "wf_own_late_n": 0}
    if own is None or paper_row is None:
        return {"wf_own_read": "not read"} | {f"wf_own_{k}": nan for k in keys} | late
    t = own.table
    if "target" in t:  # θ taken at a set round have no accuracy target
        late["wf_own_late_n"] = int(t.loc[t["target"].isna() & t["when"].isin(at_rounds), "when"].nunique())
    metrics = own.trajectory
    n = len(metrics)
    tail = metrics["recovery_unweighted"].iloc[n - tail_window(n):]
    acc = metrics["test_acc"].dropna()
    at = t[(t["source"] == "fedavg") & (t["batch_size"].astype(str) == str(base.batch_size))
           & (t["local_epochs"] == base.local_epochs)].sort_values("when")
    last = at.iloc[-1] if len(at) else None
    return late | {
        "wf_own_read": "read", "wf_own_rounds": n, "wf_own_budget": own.spec.models[0].rounds,
        "wf_own_window": len(tail), "wf_own_median": round(tail.median(), 2),
        "wf_own_q1": round(tail.quantile(0.25), 2), "wf_own_q3": round(tail.quantile(0.75), 2),
        "wf_own_acc": round(float(acc.iloc[-1]), 2), "wf_own_acc_round": int(metrics.loc[acc.index[-1], "round"]),
        "wf_own_paper": round(float(paper_row["recovery_unweighted"]), 2),
        "wf_own_paper_acc": round(float(paper_row["test_acc"]), 2),
        "wf_own_gap": float(acc.iloc[-1]) - float(paper_row["test_acc"]),
        "wf_own_at_round": int(last["when"]) if last is not None else nan,
        "wf_own_cohorts": int(own.spec.num_cohorts), "wf_own_pool": int(own.spec.pool_size),
        "wf_own_at_median": round(float(last["recovery_unweighted"]), 2) if last is not None else nan,
    }


# --------------------------------------------------------------------------- tables

MEDIAN_IQR = "1/Δ_S, median [IQR]"


def _median_iqr(med, q1, q3) -> list[str]:
    """``"median [q1, q3]"`` per row, two decimals."""
    return [f"{m:.2f} [{a:.2f}, {b:.2f}]" for m, a, b in zip(med, q1, q3)]


def table_cohort_size(found: Findings) -> tuple[pd.DataFrame, list[str]]:
    """Eq. 12 against the measurement per (protocol, K_c), and the main columns."""
    devs = pd.concat([t.assign(protocol=name) for name, t in found.eq12.items()], ignore_index=True)
    shown = devs.assign(**{MEDIAN_IQR: _median_iqr(devs["median"], devs["q1"], devs["q3"])})
    shown = shown[["protocol", "k_c", MEDIAN_IQR, "share", "predicted", "rel_dev", "within_iqr",
                   "cohorts", "ratio_of_means", "predicted_share", "median", "q1", "q3"]].rename(columns={
        "k_c": "K_c", "share": "share (1/Δ_S)/K_c", "ratio_of_means": "ratio of means", "predicted": "eq. 12",
        "predicted_share": "eq. 12 share", "rel_dev": "median / eq. 12 − 1", "within_iqr": "eq. 12 within IQR",
        "median": "1/Δ_S median", "q1": "1/Δ_S lower quartile", "q3": "1/Δ_S upper quartile"})
    main = [MEDIAN_IQR, "share (1/Δ_S)/K_c", "eq. 12", "median / eq. 12 − 1", "eq. 12 within IQR"]
    return shown.set_index(["protocol", "K_c"]), main


def table_cohort_protocols(found: Findings, ref_kc: int) -> tuple[pd.DataFrame, dict]:
    """Per protocol of the cohort-size axis: r, the share at both ends, the largest gap (%),
    whether the median rises and the share falls; and formats."""
    rows = {}
    for name, t in found.eq12.items():
        t = t.sort_values("k_c")
        rows[name] = {"r": float(t["r"].iloc[0]), "share, first K_c": float(t["share"].iloc[0]),
                      "share, last K_c": float(t["share"].iloc[-1]),
                      "largest gap (%)": 100 * float(t.loc[t["k_c"] != ref_kc, "rel_dev"].abs().max()),
                      "median rises": bool((t["median"].diff().dropna() > 0).all()), "share falls": fa.share_falls(t)}
    formats = {"r": lambda x: book.number(x, 3), "share, first K_c": TWO_DECIMALS, "share, last K_c": TWO_DECIMALS,
               "largest gap (%)": "{:.1f}"}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("protocol"), formats


def table_resnet(found: Findings) -> tuple[pd.DataFrame, dict]:
    """ResNet-18-GN per θ source: accuracy range, cliff and ratio to the paper's; and formats."""
    rows, t = {}, found.mtable if found.mtable is not None else pd.DataFrame(columns=["model", "source"])
    for src, name in (("fedavg", "FedAvg θ"), ("centralised", "centralised θ")):
        theta = t[(t["model"] == "resnet18_gn") & (t["source"] == src)]
        if len(theta) and src in found.matched:
            v, ratio = fa.cliff_verdict(fa.model_overview(theta)), found.matched[src]["ratio"]
            theta = theta.drop_duplicates("when")  # one row per θ (a target or a set round)
            rows[name] = {"rounds": ", ".join(str(int(r)) for r in theta["when"]) if src == "fedavg" else "–",
                          "acc min": theta["test_acc"].min(), "acc max": theta["test_acc"].max(),
                          "cliff > 1": v["holds"], "θ measured": v["measured"], "cliff min": v["min"],
                          "cliff max": v["max"], "ratio min": ratio.min(), "ratio max": ratio.max()}
    shown = pd.DataFrame.from_dict(rows, orient="index").rename_axis("ResNet-18-GN at")
    return shown, {c: TWO_DECIMALS for c in shown.columns if c.endswith(("min", "max"))}


def table_step_size(found: Findings) -> tuple[pd.DataFrame, dict]:
    """Per step-size cell: median 1/Δ_S [IQR], σ̂², ‖μ̂‖², % of cohorts below 1; and formats."""
    t = found.lr_table
    shown = t.assign(**{MEDIAN_IQR: _median_iqr(*(t[f"recovery_unweighted{q}"] for q in ("", "_q1", "_q3")))})
    shown = (shown.set_index(["batch_size", "local_epochs", "lr"])
             [[MEDIAN_IQR, "sigma2_hat", "mu2_hat", "pct_cohorts_below_one"]]
             .rename(columns={"pct_cohorts_below_one": "cohorts with 1/Δ_S < 1 (%)"}))
    return shown, {"sigma2_hat": book.scientific, "mu2_hat": book.scientific}


def table_models(found: Findings) -> tuple[pd.DataFrame, list]:
    """Per θ of the model-size study and the paper's row: parameters, accuracy, median 1/Δ_S per
    protocol and the cliff; and the main columns."""
    paper = found.paper_row[[c for c in found.overview.columns if c in found.paper_row.columns]]
    ov = pd.concat([found.overview, paper]).reset_index(["params", "test_acc"]).rename(index=theta_names())
    protocols = found.protocols
    main = book.main_columns(ov, ["params", "test_acc", "cliff"] + [p for p in [found.ref_label] if p in protocols],
                             protocols, {"cliff": TWO_DECIMALS})
    return ov, main


def table_by_model(found: Findings) -> tuple[pd.DataFrame, dict]:
    """Per model: :func:`fa.by_model` and :func:`fa.route_summary`; and formats."""
    by = fa.by_model(found.overview, found.ref_label).rename(columns={
        "holds": "cliff > 1", "measured": "θ measured", "cliff_min": "cliff min", "cliff_max": "cliff max",
        "ref_min": "reference min", "ref_max": "reference max"})
    routes = {name: fa.route_summary(c) for name, c in found.checks.items() if len(c)}
    route = pd.DataFrame.from_dict(routes, orient="index", columns=["cells", "beyond", "min", "median", "max"]).rename(
        columns={"cells": "cells both ways", "beyond": "cells beyond spread"} | {k: f"route {k}" for k in ("min", "median", "max")})
    shown = by.join(route).rename_axis("model")
    return shown, {c: TWO_DECIMALS for c in shown.columns if c.endswith(("min", "max", "median"))}


def table_signal_noise(found: Findings) -> tuple[pd.DataFrame, list, dict]:
    """σ̂² and ‖μ̂‖² per protocol at each θ; main columns and formats."""
    protocols = found.protocols
    sn = fa.model_signal_noise(found.mtable).droplevel(["params", "test_acc"]).rename(index=theta_names())
    sn = sn.swaplevel(axis=1).reindex(columns=pd.MultiIndex.from_product([protocols, ["sigma2_hat", "mu2_hat"]]))
    sn = sn.rename(columns={"sigma2_hat": "σ̂²", "mu2_hat": "‖μ̂‖²"}, level=1)
    formats = {c: book.scientific for c in sn.columns}
    return sn, book.main_columns(sn, [p for p in [found.ref_label] if p in protocols], protocols, formats), formats


def tables_path_checks(found: Findings) -> dict[str, pd.DataFrame]:
    """Per model measured both ways: :func:`fa.path_checks` with headers."""
    names = {"acc_fedavg": "acc, FedAvg θ", "acc_centralised": "acc, central θ", "fedavg": "1/Δ_S, FedAvg θ",
             "centralised": "1/Δ_S, central θ", "difference": "difference", "iqr_fedavg": "IQR, FedAvg θ",
             "within": "within IQR"}
    return {name[0].upper() + name[1:]: check.rename(columns=names) for name, check in found.checks.items()}


def table_model_thetas(found: Findings) -> pd.DataFrame | None:
    """Where each θ of the model-size study came from ("–" where not reached); None without."""
    c = found.mckpts
    if c is None:
        return None
    unreached = {col: [int(v) if r else "–" for v, r in zip(c[col], c["reached"])] for col in ("when", "images")}
    # a θ taken at a set round of the trajectory has no accuracy target: its round stands there instead
    aimed = [t if t == t else f"round {int(w)}" for t, w in zip(c["target"], c["when"])]
    return (c.assign(model=[fa.model_label(m, w) for m, w in zip(c["model"], c["width"])], target=aimed, **unreached)
            .drop(columns=["width"]).rename(columns={"when": "round / step", "images": "training images",
                                                     "where": "from"}).set_index(["model", "source", "target"])
            .rename(index=theta_names()))


def table_paper_beside(found: Findings) -> tuple[pd.DataFrame, dict]:
    """The paper's Table I beside ResNet-18-GN's nearest θ per source; and formats."""
    names = {"fedavg": "FedAvg θ", "centralised": "central θ"}
    first = found.matched[next(iter(found.matched))]
    beside = [m[["acc", "measured", "ratio"]].rename(columns={
        "acc": f"acc, {names[k]}", "measured": f"1/Δ_S, {names[k]}", "ratio": f"ratio, {names[k]}"})
        for k, m in found.matched.items()]
    shown = pd.concat([first[["paper_acc", "paper"]].rename(columns={"paper_acc": "acc, paper",
                                                                     "paper": "1/Δ_S, paper"})] + beside, axis=1)
    return shown, {c: TWO_DECIMALS for c in shown.columns if c.startswith("ratio")}


# --------------------------------------------------------------------------- figures (captions: the chapter's)

def figure_cohort_size(found: Findings) -> plt.Figure:
    """1/Δ_S and its share against K_c per protocol, with eq. 12."""
    fig, axes = plt.subplots(2, 1, figsize=(6.4, 8.4), sharex=True)
    cohort_size(found.eq12, axes=axes)
    return fig


def figure_step_size(found: Findings) -> plt.Figure:
    """1/Δ_S against lr per cell."""
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    step_size(found.lr_table, ax=ax, title="1/Δ_S against lr")
    return fig


def figure_models(found: Findings) -> plt.Figure:
    """1/Δ_S against the parameter count, a panel per target, the paper's in the last."""
    targets = sorted(found.mtable["target"].dropna().unique())  # θ taken at a set round: the paper's-model section
    fig, axes = plt.subplots(len(targets), 1, figsize=(6.4, 3.4 * len(targets) + 1.6), sharex=True, sharey=True,
                             squeeze=False)
    for ax, t in zip(axes[:, 0], targets):
        recovery_vs_parameters(found.mtable, ax=ax, target=t, legend=t == targets[-1],
                               paper=found.paper_row.drop(columns="cliff").iloc[0] if t == targets[-1] else None,
                               title=f"target accuracy {book.number(t)}")
        ax.tick_params(labelbottom=True)  # every panel keeps its parameter-count labels
    return fig


def figure_own_trajectory(found: Findings) -> plt.Figure | None:
    """ResNet-18-GN's own trajectory beside the paper's value, the window of :func:`headline_cell` shaded;
    None without either."""
    if found.own is None or found.p32 is None:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    own = found.cell.loc["ResNet-18-GN"] if found.cell is not None else None
    own_trajectory(found.own.trajectory, paper=float(found.p32["recovery_unweighted"]), thetas=found.own_thetas, ax=ax,
                   summarised=None if own is None else (int(own["from_round"]), int(own["rounds"])),
                   title=f"ResNet-18-GN, {found.ref_label}")
    return fig
