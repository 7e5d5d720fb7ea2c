"""The book's evidence for the verdict page: every profile the build has, closest to the paper first.

Each source becomes a :class:`maskfed.analysis.claims.Evidence` (Table I and II summaries with bootstrap
replicates, the control's worst deviation, the stage verdict where a stage study exists). Archived profiles come
from ``results/archive/`` (:mod:`maskfed.studies.archive`), the live one from this build's runs; never pooled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from maskfed.analysis import claims, summary, uncertainty
from maskfed.engine.runner import RunResult
from maskfed.studies import archive, experiments, factor_axes as fa, stage

#: The settings that name a Table I / Table II row.
BY = {"table1": ["batch_size", "local_epochs"], "table2": ["alpha"]}
EXPERIMENTS = ("table1", "table2", "control")


def control_evidence(results: list[RunResult]) -> dict | None:
    """The control's worst deviation over runs and rounds (:func:`maskfed.analysis.summary.control_deviations`)
    with the loosest tolerance of the devices it ran on, or None without runs."""
    if not results:
        return None
    dev = summary.control_deviations(pd.concat([r.metrics for r in results]), results[0].config.cohort_size)
    tol = max(summary.control_tolerance(r.provenance["machine"]["device"]) for r in results)
    return {"deviation": max(dev.values()), "tolerance": tol}


def paper_accuracy_floor() -> float:
    """The lowest test accuracy of the paper's Table I (a fraction): where the range the paper measures begins."""
    return float(summary.paper_table("table1")["test_acc"].min())


#: The pair the paper compares for "sampling, not stage" (Sec. IV-C): full batch τ 5 against bs 128 τ 1.
PAPER_PAIR = (("full", 5), ("128", 1))


def paper_pair(table1: pd.DataFrame, stage_table: pd.DataFrame | None, min_acc: float) -> dict:
    """The ratio of :data:`PAPER_PAIR`'s 1/Δ_S at the protocols (``protocol``, in ``table1``) and at matched θ
    (``matched_low`` / ``_median`` / ``_high`` over the stage study's ``n`` checkpoints from ``min_acc`` on, each the
    median over seeds), and ``stage_share`` (1 − log(matched median) / log(protocol)); NaN where a part is missing."""
    nan = float("nan")
    a, b = PAPER_PAIR
    rec = pd.Series(table1["recovery_unweighted"].to_numpy(), index=pd.MultiIndex.from_arrays(
        [table1.index.get_level_values(0).astype(str), table1.index.get_level_values(1)]))
    protocol = float(rec.loc[a] / rec.loc[b]) if a in rec.index and b in rec.index else nan
    out = {"protocol": protocol, "matched_low": nan, "matched_median": nan, "matched_high": nan, "n": 0,
           "stage_share": nan}
    if stage_table is None or not len(stage_table):
        return out
    t = stage_table[stage_table["stage"] > 0]
    t = t[t["experiment"] == "table1"] if "experiment" in t else t
    t = t.assign(bs=t["batch_size"].astype(str))
    ratios = []
    for _, g in t.groupby("stage"):
        if float(g.drop_duplicates("seed")["stage_acc"].median()) < min_acc:
            continue
        cells = (s.groupby(["bs", "local_epochs"])["recovery_unweighted"].first() for _, s in g.groupby("seed"))
        per_seed = [float(r[a] / r[b]) for r in cells if a in r.index and b in r.index]
        if per_seed:
            ratios.append(float(np.median(per_seed)))
    if not ratios:
        return out
    med = float(np.median(ratios))
    share = 1 - math.log(med) / math.log(protocol) if protocol > 0 and protocol != 1 else nan
    return {**out, "matched_low": min(ratios), "matched_median": med, "matched_high": max(ratios), "n": len(ratios),
            "stage_share": share}


def stage_evidence(table: pd.DataFrame) -> dict | None:
    """The stage-or-sampling verdict of a stage study's Table I rows (:func:`maskfed.studies.stage.verdict_by_range`
    split at :func:`paper_accuracy_floor`), or None without rows: ``{"by_range": {range: verdict}, "before": {range:
    verdict} below the paper's range (not counted)}``, each range named by its accuracy ("accuracy 0.31–0.55")."""
    t1 = table[table["experiment"] == "table1"] if "experiment" in table else table
    if t1.empty:
        return None
    named = {k: (f"accuracy {v['acc_min']:.2f}–{v['acc_max']:.2f}", v["verdict"])
             for k, v in stage.verdict_by_range(t1, split_acc=paper_accuracy_floor()).items()}
    counted = dict(v for k, v in named.items() if k == "late")
    before = dict(v for k, v in named.items() if k == "early")
    return {"by_range": counted or before, "before": before if counted else {}}


def profile_evidence(name: str, table1: list[RunResult], table2: list[RunResult], control: list[RunResult],
                     *, stage_table: pd.DataFrame | None = None, n_boot: int = uncertainty.N_BOOT,
                     note: str = "") -> claims.Evidence:
    """One profile's :class:`maskfed.analysis.claims.Evidence` from its runs (an empty list: that part is not
    measured); ``stage_table``: a stage study's table on its trajectories, or None."""
    def part(results, experiment):
        if not results:
            return None, None
        return (getattr(experiments, experiment)(results),
                uncertainty.replicate_tables(results, BY[experiment], n_boot=n_boot))

    (t1, r1), (t2, r2) = part(table1, "table1"), part(table2, "table2")
    return claims.Evidence(name, t1, t2, r1, r2, control=control_evidence(control),
                           stage=None if stage_table is None else stage_evidence(stage_table), note=note)


def archived_evidence(profile_name: str, *, stage_table: pd.DataFrame | None = None,
                      n_boot: int = uncertainty.N_BOOT) -> claims.Evidence | None:
    """The :class:`maskfed.analysis.claims.Evidence` of one archived profile, or None when it has no archive."""
    if not archive.require_complete(profile_name):
        return None
    parts = source_runs(profile_name)
    return profile_evidence(archive.column_name(profile_name), *(parts[e] for e in EXPERIMENTS),
                            stage_table=stage_table, n_boot=n_boot)


@dataclass
class BookStudy:
    """The stage study a chapter shows, wherever it came from."""

    profile: str               # whose trajectories (and protocols) were measured
    table: pd.DataFrame        # StageStudy.table (with a seed column)
    checkpoints: pd.DataFrame  # seed, stage, round, test_acc, test_loss
    spec: "stage.StageSpec"
    origin: str                # "archive", "archived trajectories" or "own trajectory"
    ref: "stage.RunConfig"     # the first seed's trajectory configuration
    branches: pd.DataFrame     # StageStudy.branches (empty for an archived study)


def stage_source(ladder_from: str | None) -> str | None:
    """``ladder_from`` when its archive holds stage-ladder runs with θ snapshots
    (:func:`maskfed.studies.archive.ladder_trajectories`), else None."""
    return ladder_from if ladder_from is not None and archive.ladder_trajectories(ladder_from) else None


def stage_study(profile, spec, *, ladder_from: str | None, workers: int | None = None) -> BookStudy:
    """The stage study of the book's chapter: ``ladder_from``'s archived study with settings ``spec``, else one
    measured here on its archived trajectories, else on ``profile``'s own (:func:`maskfed.studies.stage.run_study`)."""
    from maskfed.engine.config import load_profile

    def measured(prof, origin, **kw):
        st = stage.run_study(prof, spec, workers=workers, progress=False, **kw)
        checkpoints = pd.concat([ld.checkpoints.assign(seed=s) for s, ld in st.ladders.items()])
        return BookStudy(prof.name, st.table, checkpoints, spec, origin, stage.ladder_config(prof), st.branches)

    if ladder_from is not None:
        arch = archive.load_stage_study(ladder_from)
        src_prof = load_profile(ladder_from, data_path=profile.base.get("data_path"))
        if arch is not None and arch.spec == spec and not spec.branch_rounds:
            return BookStudy(ladder_from, arch.table, arch.checkpoints, spec, "archive", stage.ladder_config(src_prof),
                             pd.DataFrame())
        traj = archive.ladder_trajectories(ladder_from)
        if traj:
            return measured(src_prof, "archived trajectories", seeds=sorted(traj), trajectories=traj)
    return measured(profile, "own trajectory")


# --------------------------------------------------------------------------- the bottom line

#: The claims that make up the paper's headline (ours: its abstract's finding).
HEADLINE = ("floor", "cliff", "spans", "alpha_span", "stage")


def headline_verdict(verdicts: pd.DataFrame) -> str:
    """The headline's verdict from its measured claims' overall verdicts (:func:`maskfed.analysis.claims.verdict_table`;
    our rule): "holds" when all hold, "does not hold" when more than half do not, else "partly"; "not measured
    here" when none is measured."""
    got = verdicts.loc[[k for k in HEADLINE if k in verdicts.index], "verdict"]
    got = got[got != "not measured here"]
    if not len(got):
        return "not measured here"
    if (got == "holds").all():
        return "holds"
    return "does not hold" if (got == "does not hold").sum() > len(got) / 2 else "partly"


def against_paper(table1_runs: list[RunResult], table2_runs: list[RunResult]) -> pd.DataFrame:
    """Each setting of the paper's Tables I and II these runs measure, ours beside the paper's 1/Δ_S: index "bs 32,
    τ 2", ..., "α = 1"; columns ``paper``, ``ours`` (median over seeds), ``low`` / ``high`` (seed range), ``table``
    ("I" or "II"); Table II's α = 100 is left out where Table I has it."""
    rows = {}
    for runs, name, table in ((table1_runs, "table1", "I"), (table2_runs, "table2", "II")):
        if not runs:
            continue
        ours = getattr(experiments, name)(runs)["recovery_unweighted"]
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
    """``{"table1": [...], "table2": [...], "control": [...]}`` of a source: from the profile's archive where it has
    one, else from ``live`` (this build's runs by experiment); empty lists when neither."""
    from maskfed.engine.config import load_profile

    runs = archive.require_complete(profile_name)
    if runs:
        prof = load_profile(profile_name)
        return {e: archive.select(runs, experiments.configs(prof, e)) for e in EXPERIMENTS}
    return {e: list((live or {}).get(e, [])) for e in EXPERIMENTS}


# --------------------------------------------------------------------------- claims at matched stage

def matched_stage_verdicts(table: pd.DataFrame | None, steps: pd.Series | None,
                           claim_list: tuple = claims.CLAIMS, cross: pd.DataFrame | None = None,
                           main_alpha: float = 100.0, min_acc: float | None = None) -> pd.DataFrame:
    """Each claim judged at matched stage: :func:`maskfed.studies.stage.matched_verdicts` of the
    :func:`maskfed.studies.stage.matched_votes` of a stage study's ``table`` (None: none) and the rest."""
    if table is None or steps is None or not len(table):
        votes = pd.DataFrame(columns=["claim", "vote", "weight"])
    else:
        votes = stage.matched_votes(table, steps, claim_list, cross=cross, main_alpha=main_alpha, min_acc=min_acc)
    return stage.matched_verdicts(votes, claim_list)


def matched_checkpoints(table: pd.DataFrame | None, min_acc: float | None = None) -> dict:
    """The checkpoints that vote in :func:`matched_stage_verdicts`: ``n``, ``acc_low`` / ``acc_high`` (their median
    accuracies' range; NaN when none)."""
    if table is None or not len(table):
        return {"n": 0, "acc_low": math.nan, "acc_high": math.nan}
    acc = table[table["stage"] > 0].groupby("stage")["stage_acc"].median()
    acc = acc if min_acc is None else acc[acc >= min_acc]
    return {"n": int(len(acc)), "acc_low": float(acc.min()) if len(acc) else math.nan,
            "acc_high": float(acc.max()) if len(acc) else math.nan}


def cross_alphas(cross: pd.DataFrame | None, main_alpha: float = 100.0) -> list[float]:
    """The α-cross's trajectory α other than ``main_alpha``, largest first ([] without a cross)."""
    if cross is None or not len(cross):
        return []
    return sorted({float(a) for a in cross["trajectory_alpha"]} - {float(main_alpha)}, reverse=True)


# --------------------------------------------------------------------------- verdicts under the analysis's choices

#: The analysis choices each verdict is recomputed under (ours): the summary window halved, and the runs still
#: falling (:func:`maskfed.analysis.uncertainty.trend_test`) left out by three tests.
VARIANTS = ("half window", "falling out", "falling out, 3× lag", "falling out, BH 5 %")
LAG_FACTOR, FDR = 3.0, 0.05

#: The stage claim judged again on subsets of the stage study's Table I protocols (batch size as text, τ; ours).
STAGE_SUBSETS = {"paper's pair only": {("full", 5), ("128", 1)}, "τ = 5 only": {("full", 5), ("128", 5), ("32", 5)}}


def variant_runs(runs: list[RunResult], variant: str) -> list[RunResult]:
    """``runs`` as one analysis variant of :data:`VARIANTS` sees them.

    Raises:
        ValueError: an unknown variant.
    """
    if variant == VARIANTS[0]:  # the summary window is the last quarter of what a run holds: keep its last half
        return [replace(r, metrics=r.metrics.tail(max(1, len(r.metrics) // 2)).reset_index(drop=True)) for r in runs]
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}; got {variant!r}")
    tests = []
    for r in runs:
        try:
            tests.append(uncertainty.trend_test(r.metrics, lag_factor=LAG_FACTOR if variant == VARIANTS[2] else 1.0))
        except ValueError:  # too short to test: kept
            tests.append({"t": 0.0, "p": float("nan"), "verdict": "flat"})
    if variant == VARIANTS[3]:
        reject = uncertainty.benjamini_hochberg([t["p"] for t in tests], FDR)
        falling = [bool(rej and t["t"] < 0) for rej, t in zip(reject, tests)]
    else:
        falling = [t["verdict"] == "falling" for t in tests]
    return [r for r, f in zip(runs, falling) if not f]


def cell_trends(runs: list[RunResult]) -> pd.DataFrame:
    """Per Table I cell, its runs' trend at their end (:func:`maskfed.analysis.uncertainty.trend_test`; too short:
    flat): columns ``falling``, ``runs``, ``tested``, ``slope`` (mean, log 1/Δ_S per round) and ``se``."""
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
    """The stage claim judged on each subset of :data:`STAGE_SUBSETS` of a stage study's rows: name -> verdict."""
    key = list(zip(stage_table["batch_size"].astype(str), stage_table["local_epochs"].astype(int)))
    subs = {name: stage_table[[k in protocols for k in key]] for name, protocols in STAGE_SUBSETS.items()}
    return {name: claim.evaluate(claims.Evidence(name, stage=stage_evidence(sub) if len(sub) else None)).verdict
            for name, sub in subs.items()}


def loses_test(claim: claims.Claim, table1: pd.DataFrame | None, table2: pd.DataFrame | None, lost: set) -> bool:
    """Whether leaving the settings ``lost`` (as :func:`_settings` names them) out of these summaries already
    changes the claim's value or verdict: a variant that drops them then cannot test the claim."""
    def value(t1, t2):
        try:
            f = claim.evaluate(claims.Evidence("tables", t1, t2))
        except ValueError:  # too little of a table to judge
            return None
        return None if f.verdict == "not measured here" else (f.value, f.verdict)

    def without(table, name):
        if table is None:
            return None
        rest = table.drop(index=[k for k in table.index
                                 if (name, (str(k[0]), int(k[1])) if name == "table1" else float(k)) in lost])
        return rest if len(rest) else None

    return bool(lost) and value(without(table1, "table1"), without(table2, "table2")) != value(table1, table2)


def _settings(runs: list[RunResult], experiment: str) -> set:
    """The settings of ``runs``: ``("table1", (batch size as text, τ))`` or ``("table2", α)``."""
    return {(experiment, (str(r.config.batch_size), r.config.local_epochs) if experiment == "table1"
             else float(r.config.alpha)) for r in runs}


def stability(verdicts: pd.DataFrame, runs: dict[str, list[RunResult]], *, n_boot: int = uncertainty.N_BOOT,
              claim_list: tuple = claims.CLAIMS, stage_table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Is each claim's verdict stable under the analysis variants (:data:`VARIANTS`) of the closest source's ``runs``
    (the stage claim: under :data:`STAGE_SUBSETS` of ``stage_table``)? A variant that cannot test a claim
    (:func:`loses_test`) never counts as a flip.

    Returns:
        Index ``claim``; columns ``mark`` ("stable", "fragile", or "–" where the base is not measured), ``flips``
        (e.g. "falling out: does not hold", joined by "; ") and ``cannot_test`` (the untestable variants, joined).
    """
    base = {e: runs.get(e, []) for e in ("table1", "table2")}
    summaries = {e: getattr(experiments, e)(rs) if rs else None for e, rs in base.items()}
    judged, lost = {}, {}
    for v in VARIANTS:
        kept = {e: variant_runs(rs, v) for e, rs in base.items()}
        lost[v] = set().union(*(_settings(base[e], e) - _settings(kept[e], e) for e in base))
        ev = profile_evidence(v, kept["table1"], kept["table2"], runs.get("control", []), n_boot=n_boot)
        judged[v] = {}
        for c in claim_list:  # a variant can leave a claim without the settings it compares
            try:
                judged[v][c.key] = c.evaluate(ev).verdict
            except ValueError:
                judged[v][c.key] = "not measured here"
    rows = []
    for c in claim_list:
        was, untestable = verdicts.loc[c.key, "verdict"], []
        if c.key == "stage":  # judged again on the stage study's protocol subsets, not on the runs
            subsets = {} if stage_table is None or was == "not measured here" else stage_subset_verdicts(stage_table, c)
            flips, marked = [f"{name}: {v}" for name, v in subsets.items() if v != was], bool(subsets)
        else:
            marked = was != "not measured here"
            untestable = [v for v in VARIANTS if marked and loses_test(c, *summaries.values(), lost[v])]
            flips = [f"{v}: {judged[v][c.key]}" for v in VARIANTS
                     if marked and v not in untestable and judged[v][c.key] != was]
        rows.append({"claim": c.key, "mark": ("fragile" if flips else "stable") if marked else "–",
                     "flips": "; ".join(flips), "cannot_test": "; ".join(untestable)})
    return pd.DataFrame(rows).set_index("claim")


def variant_sizes(runs: dict[str, list[RunResult]]) -> pd.DataFrame:
    """What each variant of :data:`VARIANTS` keeps of a source's Table I and II runs: columns ``runs``, ``of_runs``,
    ``settings`` and ``of_settings`` (a run in both tables counts once)."""
    every = runs.get("table1", []) + runs.get("table2", [])

    def count(rs):
        return len({r.config.key() for r in rs}), len({(r.config.batch_size, r.config.local_epochs, r.config.alpha)
                                                      for r in rs})

    rows = [(v, *count(variant_runs(runs.get("table1", []), v) + variant_runs(runs.get("table2", []), v)), *count(every))
            for v in VARIANTS]
    return pd.DataFrame(rows, columns=["variant", "runs", "settings", "of_runs", "of_settings"]).set_index(
        "variant")[["runs", "of_runs", "settings", "of_settings"]]


def stability_counts(stable: pd.DataFrame) -> dict:
    """The counts of :func:`stability` the verdict page glues: ``n_variants``, ``n_judged``, ``n_fragile``,
    ``n_untestable`` and ``stage_subsets``."""
    judged = stable[stable["mark"] != "–"]
    return {"n_variants": len(VARIANTS), "n_judged": int(len(judged)), "n_fragile": int((judged["mark"] == "fragile").sum()),
            "n_untestable": int((judged["cannot_test"] != "").sum()),
            "stage_subsets": bool("stage" in stable.index and stable.loc["stage", "mark"] != "–")}
