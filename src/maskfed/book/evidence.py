"""The book's evidence for the verdict page: every profile the build has, closest to the paper first.

Each source becomes a :class:`maskfed.analysis.claims.Evidence`: its Table I and Table II summaries with
bootstrap replicates (:mod:`maskfed.analysis.uncertainty`), the identical-shards control's worst
deviation, and, where a stage study exists for it, the stage-or-sampling verdict by stage range.
Archived profiles come from ``results/archive/`` (:mod:`maskfed.studies.archive`), the live profile
from the runs of this build; profiles are never pooled.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np
import pandas as pd

from maskfed.analysis import claims, summary, uncertainty
from maskfed.engine.runner import RunResult
from maskfed.studies import archive, experiments, factor_axes as fa, stage

#: The settings that name a Table I / Table II row.
BY = {"table1": ["batch_size", "local_epochs"], "table2": ["alpha"]}


def control_evidence(results: list[RunResult]) -> dict | None:
    """The control's worst deviation over its runs and rounds (the largest of |1/Δ_S / K_c - 1| in
    both conventions, |σ̂²| / A and the update spread: :func:`maskfed.analysis.summary.control_deviations`)
    with the tolerance of the device it ran on, or None without runs."""
    if not results:
        return None
    m = pd.concat([r.metrics for r in results])
    dev = summary.control_deviations(m, results[0].config.cohort_size)
    tol = max(summary.control_tolerance(r.provenance["machine"]["device"]) for r in results)
    return {"deviation": max(dev.values()), "tolerance": tol}


def paper_accuracy_floor() -> float:
    """The lowest test accuracy of the paper's Table I (a fraction; full batch, τ 1): where the range the paper
    measures begins."""
    return float(summary.paper_table("table1")["test_acc"].min())


#: The pair the paper compares when it says sampling, not stage, separates the protocols (Sec. IV-C): full batch
#: τ 5 against bs 128 τ 1, close in accuracy in its Table I (0.493 and 0.449).
PAPER_PAIR = (("full", 5), ("128", 1))


def paper_pair(table1: pd.DataFrame, stage_table: pd.DataFrame | None, min_acc: float) -> dict:
    """The paper's own pair (:data:`PAPER_PAIR`) at the protocols and at matched θ: ``protocol`` (the ratio of their
    1/Δ_S in a Table I summary), ``matched_low`` / ``matched_median`` / ``matched_high`` (the same ratio at each
    stage-study checkpoint from ``min_acc`` on, median over seeds, then its range and median over checkpoints),
    ``n`` (those checkpoints) and ``stage_share`` (the share of the protocol-level gap, on a log scale, that the
    matched θ remove: 1 − log(matched median) / log(protocol); 0 when the gap is all sampling, 1 when all stage).
    NaN where a part is missing.

    Args:
        table1: a Table I summary (index batch size as text, τ); stage_table: a stage study's table, or None;
        min_acc: the lowest checkpoint accuracy counted (:func:`paper_accuracy_floor`).
    """
    nan = float("nan")
    (a, b) = PAPER_PAIR
    rec = table1["recovery_unweighted"]
    rec.index = pd.MultiIndex.from_arrays([rec.index.get_level_values(0).astype(str), rec.index.get_level_values(1)])
    protocol = float(rec.loc[a] / rec.loc[b]) if a in rec.index and b in rec.index else nan
    out = {"protocol": protocol, "matched_low": nan, "matched_median": nan, "matched_high": nan, "n": 0,
           "stage_share": nan}
    if stage_table is None or not len(stage_table):
        return out
    t = stage_table[(stage_table["experiment"] == "table1") & (stage_table["stage"] > 0)] \
        if "experiment" in stage_table else stage_table[stage_table["stage"] > 0]
    t = t.assign(bs=t["batch_size"].astype(str))
    ratios = []
    for _, g in t.groupby("stage"):
        if float(g.drop_duplicates("seed")["stage_acc"].median()) < min_acc:
            continue
        per_seed = [float(s.loc[(s["bs"] == a[0]) & (s["local_epochs"] == a[1]), "recovery_unweighted"].iloc[0]
                          / s.loc[(s["bs"] == b[0]) & (s["local_epochs"] == b[1]), "recovery_unweighted"].iloc[0])
                    for _, s in g.groupby("seed")
                    if ((s["bs"] == a[0]) & (s["local_epochs"] == a[1])).any() and ((s["bs"] == b[0]) & (s["local_epochs"] == b[1])).any()]
        if per_seed:
            ratios.append(float(np.median(per_seed)))
    if not ratios:
        return out
    med = float(np.median(ratios))
    share = 1 - math.log(med) / math.log(protocol) if protocol > 0 and protocol != 1 else nan
    return {**out, "matched_low": min(ratios), "matched_median": med, "matched_high": max(ratios), "n": len(ratios),
            "stage_share": share}


def stage_evidence(table: pd.DataFrame) -> dict | None:
    """The stage-or-sampling verdict of a stage study's Table I rows for :class:`maskfed.analysis.claims.Evidence`,
    judged where the paper measures (issue 40): on the checkpoints at or above the lowest accuracy of the paper's
    Table I (:func:`paper_accuracy_floor`); the checkpoints below it (θ_0 and the first rounds, where the
    protocols have not separated yet) are judged apart and shown, not counted
    (:func:`maskfed.studies.stage.verdict_by_range` with ``split_acc``). None without rows.

    Returns:
        ``{"by_range": {name: verdict} of the paper's range, "before": {name: verdict} of the checkpoints below
        it}``, each range named by its test accuracy (``"accuracy 0.31–0.55"``); the verdict page says which is which.
    """
    t1 = table[table["experiment"] == "table1"] if "experiment" in table else table
    if t1.empty:
        return None
    by_range = stage.verdict_by_range(t1, split_acc=paper_accuracy_floor())
    named = {k: (f"accuracy {v['acc_min']:.2f}–{v['acc_max']:.2f}", v["verdict"]) for k, v in by_range.items()}
    counted = dict(v for k, v in named.items() if k == "late")
    before = dict(v for k, v in named.items() if k == "early")
    return {"by_range": counted or before, "before": before if counted else {}}


def profile_evidence(name: str, table1: list[RunResult], table2: list[RunResult], control: list[RunResult],
                     *, stage_table: pd.DataFrame | None = None, n_boot: int = uncertainty.N_BOOT,
                     note: str = "") -> claims.Evidence:
    """One profile's :class:`maskfed.analysis.claims.Evidence` from its runs (any of the lists may be empty:
    that part is then "not measured here").

    Args:
        name: column header.
        table1, table2, control: the runs of each experiment.
        stage_table: a stage study's table (:attr:`maskfed.studies.stage.StageStudy.table`) on this
            profile's trajectories, or None.
        n_boot: bootstrap replicates.
        note: what the source is, shown beside it.
    """
    def part(results, experiment):
        if not results:
            return None, None
        table = {"table1": experiments.table1, "table2": experiments.table2}[experiment](results)
        return table, uncertainty.replicate_tables(results, BY[experiment], n_boot=n_boot)

    t1, r1 = part(table1, "table1")
    t2, r2 = part(table2, "table2")
    return claims.Evidence(name, t1, t2, r1, r2, control=control_evidence(control),
                           stage=None if stage_table is None else stage_evidence(stage_table), note=note)


def run_facts(results: list[RunResult]) -> dict:
    """What a profile's runs are: ``{"seeds": 3, "rounds": "200", "model": "small_cnn_gn", "parameters": 17034}``
    (``rounds`` joined by "/" where runs differ; ``parameters`` None where the provenance lacks it)."""
    c = results[0]
    return {"seeds": len({r.config.seed for r in results}),
            "rounds": "/".join(map(str, sorted({r.config.rounds for r in results}))),
            "model": c.config.model, "parameters": c.provenance.get("num_parameters")}


def archived_evidence(profile_name: str, *, stage_table: pd.DataFrame | None = None,
                      n_boot: int = uncertainty.N_BOOT) -> claims.Evidence | None:
    """The :class:`maskfed.analysis.claims.Evidence` of one archived profile, or None when it has no archive."""
    runs = archive.require_complete(profile_name)
    if not runs:
        return None
    parts = source_runs(profile_name)
    return profile_evidence(archive.column_name(profile_name), parts["table1"], parts["table2"], parts["control"],
                            stage_table=stage_table, n_boot=n_boot)


@dataclass
class BookStudy:
    """The stage study a chapter shows, wherever it came from."""

    profile: str               # whose trajectories (and protocols) were measured
    table: pd.DataFrame        # StageStudy.table (with a seed column)
    checkpoints: pd.DataFrame  # seed, stage, round, test_acc, test_loss
    spec: "stage.StageSpec"
    origin: str                # where the measurements came from: "archive", "archived trajectories" or "own trajectory"
    ref: "stage.RunConfig"     # the first seed's trajectory configuration
    branches: pd.DataFrame     # StageStudy.branches (empty without branches; an archived study keeps none)


def stage_source(ladder_from: str | None) -> str | None:
    """The archived profile whose trajectories the stage chapter measures: ``ladder_from`` when its
    archive holds stage-ladder runs with θ snapshots (:func:`maskfed.studies.archive.ladder_trajectories`),
    else None (the chapter then measures its own profile's run)."""
    return ladder_from if ladder_from is not None and archive.ladder_trajectories(ladder_from) else None


def stage_study(profile, spec, *, ladder_from: str | None, workers: int | None = None) -> BookStudy:
    """The stage study of the book's chapter.

    With ``ladder_from`` (an archived profile, e.g. "cpu-paper"): its archived stage study when one
    exists with the same settings ``spec`` (:func:`maskfed.studies.archive.load_stage_study`); else the
    study measured here (cached) on its archived trajectories, one per seed
    (:func:`maskfed.studies.archive.ladder_trajectories`). Without ``ladder_from``, or when that profile
    has no archived trajectory: the study of ``profile`` itself on its first seed, as
    :func:`maskfed.studies.stage.run_study` computes it.

    Args:
        profile: the book's profile (a :class:`maskfed.engine.config.Profile`).
        spec: stage settings (:func:`maskfed.studies.stage.make_spec` of the profile the study is for).
        ladder_from: archived profile whose trajectories to use, or None.
        workers: worker processes for what is measured here.
    """
    from maskfed.engine.config import load_profile

    if ladder_from is not None:
        arch = archive.load_stage_study(ladder_from)
        src_prof = load_profile(ladder_from, data_path=profile.base.get("data_path"))
        if arch is not None and arch.spec == spec and not spec.branch_rounds:
            return BookStudy(ladder_from, arch.table, arch.checkpoints, spec,
                             "archive",
                             stage.ladder_config(src_prof), pd.DataFrame())
        traj = archive.ladder_trajectories(ladder_from)
        if traj:
            st = stage.run_study(src_prof, spec, workers=workers, progress=False, seeds=sorted(traj), trajectories=traj)
            checkpoints = pd.concat([ld.checkpoints.assign(seed=s) for s, ld in st.ladders.items()])
            return BookStudy(ladder_from, st.table, checkpoints, spec,
                             "archived trajectories", stage.ladder_config(src_prof),
                             st.branches)
    st = stage.run_study(profile, spec, workers=workers, progress=False)
    checkpoints = pd.concat([ld.checkpoints.assign(seed=s) for s, ld in st.ladders.items()])
    return BookStudy(profile.name, st.table, checkpoints, spec,
                     "own trajectory", stage.ladder_config(profile), st.branches)






#: Test-accuracy gap (fraction) beyond which two runs are said not to be at the same stage of training (ours).
STAGE_GAP = 0.05










# --------------------------------------------------------------------------- the bottom line

#: The claims that make up the paper's headline (ours: its abstract's finding, that the recovery factor sits near
#: its floor of 1 under minibatch sampling and far above it with exact gradients, set by sampling noise rather than
#: by heterogeneity or training stage, split into the claims of :data:`maskfed.analysis.claims.CLAIMS` that test it).
HEADLINE = ("floor", "cliff", "spans", "alpha_span", "stage")


def headline_verdict(verdicts: pd.DataFrame) -> str:
    """The headline's verdict from its claims' overall verdicts (a rule of ours): "holds" when every measured
    headline claim holds, "does not hold" when more than half of them do not, else "partly";
    "not measured here" when none is measured.

    Args:
        verdicts: :func:`maskfed.analysis.claims.verdict_table` (index: claim keys; column ``verdict``).
    """
    got = verdicts.loc[[k for k in HEADLINE if k in verdicts.index], "verdict"]
    got = got[got != "not measured here"]
    if not len(got):
        return "not measured here"
    if (got == "holds").all():
        return "holds"
    return "does not hold" if (got == "does not hold").sum() > len(got) / 2 else "partly"


def against_paper(table1_runs: list[RunResult], table2_runs: list[RunResult]) -> pd.DataFrame:
    """Each setting of the paper's Tables I and II that ``runs`` measure, ours beside the paper's: one row per
    setting (index: "bs 32, τ 2", ..., "α = 1"), columns ``paper`` (the paper's 1/Δ_S, unweighted), ``ours`` (median
    over seeds of the per-run window medians), ``low`` / ``high`` (the seed range) and ``table`` ("I" or "II").
    Table II's α = 100 row is left out where Table I has its protocol (it is the same runs).

    Args:
        table1_runs, table2_runs: the runs of each experiment (either may be empty).
    """
    rows = {}
    for runs, name, table in ((table1_runs, "table1", "I"), (table2_runs, "table2", "II")):
        if not runs:
            continue
        ours = {"table1": experiments.table1, "table2": experiments.table2}[name](runs)["recovery_unweighted"]
        low, high = uncertainty.seed_range(runs, BY[name], ["recovery_unweighted"])
        paper = summary.paper_table(name)["recovery_unweighted"]
        for key in ours.index:
            label = fa.protocol_label(key[0], key[1]) if name == "table1" else f"α = {float(key):g}"
            pkey = (str(key[0]), int(key[1])) if name == "table1" else float(key)
            if pkey not in paper.index or (name == "table2" and float(key) == 100 and rows):
                continue
            rows[label] = {"paper": float(paper.loc[pkey]), "ours": float(ours.loc[key]),
                           "low": float(low.loc[key, "recovery_unweighted"]),
                           "high": float(high.loc[key, "recovery_unweighted"]), "table": table}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["paper", "ours", "low", "high", "table"])


def source_runs(profile_name: str, live: dict[str, list[RunResult]] | None = None) -> dict[str, list[RunResult]]:
    """The Table I, Table II and control runs of a source: the profile's archive where it has one, else ``live``
    (this build's runs, ``{experiment: runs}``); ``{"table1": [...], "table2": [...], "control": [...]}``, empty
    lists when neither."""
    from maskfed.engine.config import load_profile

    runs = archive.require_complete(profile_name)
    if runs:
        prof = load_profile(profile_name)
        return {e: archive.select(runs, experiments.configs(prof, e)) for e in ("table1", "table2", "control")}
    live = live or {}
    return {e: list(live.get(e, [])) for e in ("table1", "table2", "control")}


# --------------------------------------------------------------------------- claims at matched stage

NOT_AT_MATCHED_STAGE = claims.NOT_AT_MATCHED_STAGE  # the claims not judged at matched stage (claims.py says why)
#: Values of the stage table carried into each checkpoint's tables (medians over seeds).
_STAGE_VALUES = ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat")


def stage_evidence_at(table: pd.DataFrame, steps: pd.Series, min_acc: float | None = None) -> dict[int, claims.Evidence]:
    """One :class:`maskfed.analysis.claims.Evidence` per checkpoint of a stage study after θ_0: Table I's
    protocols and Table II's α all measured at that checkpoint's θ (median over seeds of the cohort
    medians), so every claim evaluated on it compares protocols at matched stage. No replicates:
    the point values decide.

    Args:
        table: a stage study's table (:attr:`maskfed.studies.stage.StageStudy.table`, with ``seed``,
            ``experiment``, ``stage``, ``round``, ``batch_size``, ``local_epochs``, ``alpha``).
        steps: local steps T of each protocol (index ``batch_size`` as text, ``local_epochs``), e.g. the
            protocol-level Table I's ``T_mean``.
        min_acc: only the checkpoints whose median test accuracy over seeds reaches it (None: every one after θ_0).

    Returns:
        ``{stage: Evidence}`` named "checkpoint <s>" (only checkpoints whose median test accuracy over seeds reaches
        ``min_acc``: each seed's checkpoints are placed by accuracy, so their rounds differ).
    """
    t = table.assign(batch_size=table["batch_size"].astype(str))
    steps = steps.copy()
    steps.index = pd.MultiIndex.from_arrays([steps.index.get_level_values(0).astype(str),
                                             steps.index.get_level_values(1)], names=["batch_size", "local_epochs"])
    out = {}
    for s, g in t[t["stage"] > 0].groupby("stage"):
        t1 = g[g["experiment"] == "table1"].groupby(["batch_size", "local_epochs"], sort=False)[list(_STAGE_VALUES)].median()
        t1["T_mean"] = steps.reindex(t1.index).to_numpy()
        t2 = g[g["experiment"] == "table2"].groupby("alpha", sort=False)[list(_STAGE_VALUES)].median()
        acc = float(g.drop_duplicates("seed")["stage_acc"].median())
        if min_acc is not None and acc < min_acc:
            continue
        out[int(s)] = claims.Evidence(f"checkpoint {int(s)}", t1 if len(t1) else None, t2 if len(t2) else None)
    return out


def cross_evidence_at(cross: pd.DataFrame | None, main_alpha: float,
                      min_acc: float | None = None) -> dict[tuple, claims.Evidence]:
    """One Table II-only :class:`maskfed.analysis.claims.Evidence` per checkpoint of each α-cross trajectory
    other than ``main_alpha``'s (the stage study has those): every α measured at θ from that trajectory (median
    over seeds). ``cross``: :attr:`maskfed.studies.archive.ArchivedCross.table`, or None (no cross: ``{}``)."""
    if cross is None or not len(cross):
        return {}
    out = {}
    for (a, s), g in cross[(cross["trajectory_alpha"] != main_alpha) & (cross["stage"] > 0)].groupby(
            ["trajectory_alpha", "stage"]):
        t2 = g.groupby("alpha", sort=False)[list(_STAGE_VALUES)].median()
        acc = float(g.drop_duplicates("seed")["stage_acc"].median())
        if min_acc is not None and acc < min_acc:  # as stage_evidence_at
            continue
        out[(float(a), int(s))] = claims.Evidence(f"cross {a:g}/{int(s)}", None, t2)
    return out


def matched_stage_verdicts(table: pd.DataFrame | None, steps: pd.Series | None,
                           claim_list: tuple = claims.CLAIMS, cross: pd.DataFrame | None = None,
                           main_alpha: float = 100.0, min_acc: float | None = None) -> pd.DataFrame:
    """Each claim judged at matched stage: at every checkpoint of the stage study (:func:`stage_evidence_at`)
    and, for the claims on Table II alone, at every checkpoint of the α-cross's other trajectories
    (:func:`cross_evidence_at`), with the claim's own criterion and the seeds' range as its tolerance
    (:func:`maskfed.studies.stage.matched_votes`); then over the checkpoints that vote
    (:func:`maskfed.studies.stage.matched_verdicts`): "holds" if it holds at every one, "does not hold" if the
    checkpoints against it are more than half, else "partly"; "within tolerance" counts for neither.

    Args:
        table: a stage study's table, or None (no stage study: every claim "not measured here").
        steps: local steps T per protocol (see :func:`stage_evidence_at`).
        cross: the α-cross's table (:attr:`maskfed.studies.archive.ArchivedCross.table`), or None.
        main_alpha: the stage study's trajectories' α (Table I's).
        min_acc: only checkpoints whose median accuracy reaches it vote (the verdict page: the paper's accuracy
            range, :func:`paper_accuracy_floor`, so that early training, where the protocols have not separated,
            does not decide); None: every checkpoint after θ_0.

    Returns:
        Index ``claim``; columns ``verdict``, ``n_holds``, ``n_partly``, ``n_tolerance``, ``n_fail`` (checkpoints where
        the claim holds, holds in part, fails within the seeds' range, fails beyond it), ``n`` (checkpoints that vote;
        0 for a claim of :data:`NOT_AT_MATCHED_STAGE`, or without a stage study), ``fail_share``, ``weight`` and
        ``n_before`` (checkpoints below ``min_acc``, shown but not counted).
    """
    judged = tuple(c for c in claim_list if c.key not in NOT_AT_MATCHED_STAGE)
    if table is None or steps is None or not len(table):
        votes = pd.DataFrame(columns=["claim", "vote", "weight"])
    else:
        votes = stage.matched_votes(table, steps, judged, cross=cross, main_alpha=main_alpha, min_acc=min_acc)
    out = stage.matched_verdicts(votes, claim_list)
    out.loc[[c.key for c in claim_list if c.key in NOT_AT_MATCHED_STAGE], "verdict"] = "not measured here"
    return out


def matched_checkpoints(table: pd.DataFrame | None, min_acc: float | None = None) -> dict:
    """The stage study's checkpoints that vote in :func:`matched_stage_verdicts`: ``n`` (checkpoints after θ_0 whose
    median test accuracy reaches ``min_acc``), ``acc_low`` / ``acc_high`` (their lowest and highest median accuracy;
    NaN when none)."""
    nan = float("nan")
    if table is None or not len(table):
        return {"n": 0, "acc_low": nan, "acc_high": nan}
    acc = table[table["stage"] > 0].groupby("stage")["stage_acc"].median()
    acc = acc if min_acc is None else acc[acc >= min_acc]
    return {"n": int(len(acc)), "acc_low": float(acc.min()) if len(acc) else nan,
            "acc_high": float(acc.max()) if len(acc) else nan}


def cross_alphas(cross: pd.DataFrame | None, main_alpha: float = 100.0) -> list[float]:
    """The α-cross's trajectory α other than ``main_alpha``, largest first ([] without a cross)."""
    if cross is None or not len(cross):
        return []
    return sorted({float(a) for a in cross["trajectory_alpha"]} - {float(main_alpha)}, reverse=True)






# --------------------------------------------------------------------------- verdicts under the analysis's choices

#: The analysis choices each verdict is recomputed under (ours; issue: "verdicts under the analysis's own
#: choices"): the summary window halved, and the runs whose recovery factor is still falling over their second
#: half (:func:`maskfed.analysis.uncertainty.trend_test`) left out, by the plain test, with 3× its HAC lag, and by
#: Benjamini-Hochberg at 5 % across the runs (the verdict page describes each by these names).
VARIANTS = ("half window", "falling out", "falling out, 3× lag", "falling out, BH 5 %")

#: Lag factor of the trend test in the third variant, and the false discovery rate of the fourth (ours).
LAG_FACTOR, FDR = 3.0, 0.05

#: The stage claim judged again on subsets of the stage study's Table I protocols (batch size as text, τ):
#: the pair the paper compares (full batch τ 5 against bs 128 τ 1) and the protocols with τ = 5 (ours).
STAGE_SUBSETS = {"paper's pair only": {("full", 5), ("128", 1)}, "τ = 5 only": {("full", 5), ("128", 5), ("32", 5)}}


def variant_runs(runs: list[RunResult], variant: str) -> list[RunResult]:
    """``runs`` as one analysis variant sees them (:data:`VARIANTS`).

    Raises:
        ValueError: an unknown variant.
    """
    from dataclasses import replace

    if variant == VARIANTS[0]:  # the summary window is the last quarter of what a run holds: keep its last half
        return [replace(r, metrics=r.metrics.tail(max(1, len(r.metrics) // 2)).reset_index(drop=True)) for r in runs]
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}; got {variant!r}")
    lag = LAG_FACTOR if variant == VARIANTS[2] else 1.0
    tests = []
    for r in runs:
        try:
            tests.append(uncertainty.trend_test(r.metrics, lag_factor=lag))
        except ValueError:  # too short to test: kept
            tests.append({"t": 0.0, "p": float("nan"), "verdict": "flat"})
    if variant == VARIANTS[3]:  # falling where Benjamini-Hochberg rejects "no trend" across these runs
        reject = uncertainty.benjamini_hochberg([t["p"] for t in tests], FDR)
        falling = [bool(rej and t["t"] < 0) for rej, t in zip(reject, tests)]
    else:
        falling = [t["verdict"] == "falling" for t in tests]
    return [r for r, f in zip(runs, falling) if not f]


def cell_trends(runs: list[RunResult]) -> pd.DataFrame:
    """Per Table I cell, its runs' trend at their end (:func:`maskfed.analysis.uncertainty.trend_test`, last half
    of the rounds; a run too short to test counts as flat, slope 0).

    Returns:
        Index (``batch_size`` as text, ``local_epochs``) as :func:`maskfed.studies.experiments.table1`; columns
        ``falling`` (runs still falling), ``runs``, ``tested`` (runs long enough to test), ``slope`` (mean of the runs' slopes of log 1/Δ_S, per round)
        and ``se`` (its standard error, sqrt(Σ se²) / runs, the runs taken as independent).
    """
    rows = []
    for r in runs:
        try:
            t = uncertainty.trend_test(r.metrics)
        except ValueError:
            t = {"verdict": "too short", "slope": 0.0, "se": 0.0}
        rows.append({"batch_size": str(r.config.batch_size), "local_epochs": r.config.local_epochs,
                     "falling": int(t["verdict"] == "falling"), "tested": int(t["verdict"] != "too short"),
                     "slope": t["slope"], "var": t["se"] ** 2})
    df = pd.DataFrame(rows, columns=["batch_size", "local_epochs", "falling", "tested", "slope", "var"])
    out = df.groupby(["batch_size", "local_epochs"], sort=False).agg(
        falling=("falling", "sum"), runs=("falling", "size"), tested=("tested", "sum"), slope=("slope", "mean"),
        var=("var", "sum"))
    out["se"] = np.sqrt(out.pop("var")) / out["runs"]
    return out






def stage_subset_verdicts(stage_table: pd.DataFrame, claim: claims.Claim) -> dict[str, str]:
    """The stage claim judged on each subset of :data:`STAGE_SUBSETS` of a stage study's rows (the other
    experiments' rows kept out as in :func:`stage_evidence`): subset name -> verdict ("not measured here"
    where the subset has no rows)."""
    out = {}
    for name, protocols in STAGE_SUBSETS.items():
        key = list(zip(stage_table["batch_size"].astype(str), stage_table["local_epochs"].astype(int)))
        sub = stage_table[[k in protocols for k in key]]
        st = stage_evidence(sub) if len(sub) else None
        out[name] = ("not measured here" if st is None else
                     claims.verdict_table([claims.Evidence(name, stage=st)], (claim,)).loc[claim.key, "verdict"])
    return out


def loses_test(claim: claims.Claim, table1: pd.DataFrame | None, table2: pd.DataFrame | None, lost: set) -> bool:
    """Whether leaving the settings ``lost`` out of these tables, with every other value as it is, already changes
    the claim's value or verdict: a variant that drops them cannot then test the claim (whatever it gives could
    come from the dropped settings alone, as a claim about every protocol is easier to pass on fewer).

    Args:
        claim: a :class:`maskfed.analysis.claims.Claim`.
        table1, table2: Table I / Table II summaries (:func:`maskfed.studies.experiments.table1`), or None.
        lost: settings as :func:`_settings` names them (``("table1", (batch size as text, τ))``, ``("table2", α)``).
    """
    def value(t1, t2):
        try:
            f = claim.evaluate(claims.Evidence("tables", t1, t2))
        except ValueError:  # too little of a table to judge
            return None
        return None if f.verdict == "not measured here" else (f.value, f.verdict)

    def without(table, name):
        if table is None:
            return None
        keys = [k for k in table.index
                if (name, (str(k[0]), int(k[1])) if name == "table1" else float(k)) in lost]
        rest = table.drop(index=keys)
        return rest if len(rest) else None

    if not lost:
        return False
    return value(without(table1, "table1"), without(table2, "table2")) != value(table1, table2)


def _settings(runs: list[RunResult], experiment: str) -> set:
    """The settings of ``runs``: ``("table1", (batch size as text, τ))`` or ``("table2", α)``."""
    if experiment == "table1":
        return {("table1", (str(r.config.batch_size), r.config.local_epochs)) for r in runs}
    return {("table2", float(r.config.alpha)) for r in runs}


def stability(verdicts: pd.DataFrame, runs: dict[str, list[RunResult]], *, n_boot: int = uncertainty.N_BOOT,
              claim_list: tuple = claims.CLAIMS, stage_table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Is each claim's verdict stable under the analysis variants (:data:`VARIANTS`)? The source's runs are
    re-summarised under each variant and every claim judged again with its criterion; the stage claim is
    judged again on the protocol subsets of :data:`STAGE_SUBSETS` of ``stage_table``.

    Args:
        verdicts: :func:`maskfed.analysis.claims.verdict_table` (column ``verdict``: the overall verdicts).
        runs: the closest source's runs, ``{"table1": [...], "table2": [...], "control": [...]}``.
        n_boot: bootstrap replicates per variant.
        stage_table: the stage study behind the stage verdict (:attr:`maskfed.studies.stage.StageStudy.table`),
            or None (the stage claim then gets no mark).

    A variant that leaves out every run of a setting (a whole protocol of Table I, a whole α of Table II) whose
    absence alone changes the claim on the full tables (:func:`loses_test`) cannot test that claim: it is listed in ``cannot_test`` and never
    counts as a flip (removing a protocol can make a claim about every protocol easier to pass).

    Returns:
        Index ``claim``; columns ``mark`` ("stable", "fragile", or "–" where the base is not measured here),
        ``flips`` (the variants or stage subsets that change it, each with the verdict it gives, e.g.
        "falling out: does not hold", joined by "; "; "" when stable) and ``cannot_test`` (the variants that drop a
        setting the claim needs, joined by "; "); :func:`variant_sizes` counts what each variant keeps.
    """
    base_runs = {e: runs.get(e, []) for e in ("table1", "table2")}
    summaries = {e: ({"table1": experiments.table1, "table2": experiments.table2}[e](rs) if rs else None)
                 for e, rs in base_runs.items()}
    judged, lost = {}, {}
    for v in VARIANTS:
        t1, t2 = variant_runs(runs.get("table1", []), v), variant_runs(runs.get("table2", []), v)
        lost[v] = set().union(*(_settings(base_runs[e], e) - _settings(rs, e) for e, rs in (("table1", t1), ("table2", t2))))
        ev = profile_evidence(v, t1, t2, runs.get("control", []), n_boot=n_boot)
        judged[v] = {}
        for c in claim_list:  # a variant can leave a claim without the settings it compares
            try:
                judged[v][c.key] = claims.verdict_table([ev], (c,)).loc[c.key, "verdict"]
            except ValueError:
                judged[v][c.key] = "not measured here"
    rows = []
    for c in claim_list:
        base = verdicts.loc[c.key, "verdict"]
        if c.key == "stage":  # judged again on the stage study's protocol subsets, not on the runs
            subsets = {} if stage_table is None or base == "not measured here" else stage_subset_verdicts(stage_table, c)
            flips = [f"{name}: {v}" for name, v in subsets.items() if v != base]
            rows.append({"claim": c.key, "mark": ("fragile" if flips else "stable") if subsets else "–",
                         "flips": "; ".join(flips), "cannot_test": ""})
            continue
        if base == "not measured here":
            rows.append({"claim": c.key, "mark": "–", "flips": "", "cannot_test": ""})
            continue
        untestable = [v for v in VARIANTS if loses_test(c, summaries["table1"], summaries["table2"], lost[v])]
        flips = [f"{v}: {judged[v][c.key]}" for v in VARIANTS
                 if v not in untestable and judged[v][c.key] != base]
        rows.append({"claim": c.key, "mark": "fragile" if flips else "stable", "flips": "; ".join(flips),
                     "cannot_test": "; ".join(untestable)})
    return pd.DataFrame(rows).set_index("claim")


def variant_sizes(runs: dict[str, list[RunResult]]) -> pd.DataFrame:
    """What each analysis variant (:data:`VARIANTS`) keeps of a source's Table I and Table II runs: index
    ``variant``; columns ``runs`` and ``settings`` (kept) and ``of_runs`` / ``of_settings`` (all; a run in both tables,
    bs 32, τ 2 at α = 100, is one run, a setting one (batch size, τ, α))."""
    every = runs.get("table1", []) + runs.get("table2", [])

    def setting(r):
        return (r.config.batch_size, r.config.local_epochs, r.config.alpha)

    rows = []
    for v in VARIANTS:
        kept = variant_runs(runs.get("table1", []), v) + variant_runs(runs.get("table2", []), v)
        rows.append({"variant": v, "runs": len({r.config.key() for r in kept}),
                     "of_runs": len({r.config.key() for r in every}), "settings": len({setting(r) for r in kept}),
                     "of_settings": len({setting(r) for r in every})})
    return pd.DataFrame(rows, columns=["variant", "runs", "of_runs", "settings", "of_settings"]).set_index("variant")


def stability_counts(stable: pd.DataFrame) -> dict:
    """The counts behind the verdict page's sentence on :func:`stability`: ``n_variants`` (:data:`VARIANTS`),
    ``n_judged`` (verdicts with a mark), ``n_fragile``, ``n_untestable`` (claims that at least one variant
    cannot test) and ``stage_subsets`` (whether the stage verdict was judged on :data:`STAGE_SUBSETS`)."""
    judged = stable[stable["mark"] != "–"]
    return {"n_variants": len(VARIANTS), "n_judged": int(len(judged)), "n_fragile": int((judged["mark"] == "fragile").sum()),
            "n_untestable": int((judged["cannot_test"] != "").sum()),
            "stage_subsets": bool("stage" in stable.index and stable.loc["stage", "mark"] != "–")}
