"""Findings of the chapter "Does the paper hold?" (``notebooks/verdict.md``): every claim of the paper's Sec. IV
(:data:`maskfed.analysis.claims.CLAIMS`) judged on every source this build has (:mod:`maskfed.book.evidence`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from maskfed import book, provenance
from maskfed.analysis import claims, summary, uncertainty
from maskfed.book import evidence, plots
from maskfed.chapters.control import significant
from maskfed.engine.config import Profile, load_profile
from maskfed.names import CPU_PAPER
from maskfed.engine.models import build_model, num_parameters
from maskfed.studies import archive, experiments, factor_axes as fa, stage


@dataclass(frozen=True)
class Findings:
    """What the chapter shows: ``values`` (glue name -> number or verdict word) and the frames the page displays."""

    values: dict
    profile: Profile                 # this build's profile (the banner's)
    verdicts: pd.DataFrame           # claims.verdict_table of every source, closest first
    sources: list                    # claims.Evidence per source, closest first, the live one last
    matched: Optional[pd.DataFrame]  # evidence.matched_stage_verdicts (None without a stage study)
    matched_from: str                # the profile whose stage study gave the matched view ("none")
    stable: pd.DataFrame             # evidence.stability of the closest source
    bottom: dict                     # bottom_line(): the numbers and verdict words of the "In short" box
    against: pd.DataFrame            # evidence.against_paper of the closest source's runs
    trend: Optional[pd.DataFrame] = None  # claims.trend_bearing of the closest source's Table I runs
    facts: Optional[pd.DataFrame] = None  # source_facts: what each source's runs are
    sizes: Optional[pd.DataFrame] = None  # evidence.variant_sizes of the closest source's runs
    archives: Optional[pd.DataFrame] = None  # archive_facts: where and when the archived runs were made
    reruns: Optional[pd.DataFrame] = None  # archive_facts: where each re-run of an archived run first differed
    prints: Optional[pd.DataFrame] = None  # fingerprint_table: the archived runs' data against this build's
    routes: Optional[pd.DataFrame] = None  # route_table: centralised over FedAvg θ, per model measured both ways
    resnet: Optional[pd.DataFrame] = None  # resnet_ways: the paper's model at FedAvg and centralised θ

    def table(self) -> pd.DataFrame:
        return verdict_table(self.verdicts, self.matched, self.stable, self.trend)

    def details(self) -> pd.DataFrame:
        return verdict_table(self.verdicts, self.matched, self.stable, self.trend, details=True)

    def trends(self) -> pd.DataFrame:
        """``still``, ``way`` and ``pairs`` of :func:`maskfed.analysis.claims.trend_bearing` by title."""
        if self.trend is None:
            return pd.DataFrame(columns=["still", "way", "pairs"])
        cols = [c for c in ("still", "way", "pairs") if c in self.trend]
        return self.trend[cols].rename(index=self.verdicts["title"]).rename_axis("claim")

    def by_source(self) -> pd.DataFrame:
        return source_table(self.verdicts, self.sources)


def cross_range_values(cross: pd.DataFrame | None, min_acc: float) -> dict:
    """The α = 0.1 split at the same θ: the α-cross's unweighted 1/Δ_S at the smallest α over that at the largest
    (median over seeds, :func:`maskfed.studies.stage.cross_ratios`) at every checkpoint of every trajectory whose
    accuracy is at least ``min_acc``: ``v_ax_lo``, ``v_ax_hi``, ``v_ax_n`` (checkpoints), ``v_ax_small`` and
    ``v_ax_large`` (the α compared); ``v_ax_n`` 0 without a cross or such a checkpoint."""
    if cross is None:
        return {"v_ax_n": 0}
    r = stage.cross_ratios(cross)
    r = r.loc[r["acc"] >= min_acc, "unweighted"]
    return {"v_ax_lo": r.min(), "v_ax_hi": r.max(), "v_ax_n": len(r),
            "v_ax_small": cross["alpha"].min(), "v_ax_large": cross["alpha"].max()}


def coverage_values(n_seeds: int) -> dict:
    """What a seed interval is worth with ``n_seeds`` seeds (percent): the seed range's coverage
    (``v_cov_range``; ``v_cov_other`` at ``v_other_seeds``), the chance a redraw's median is the lowest seed
    (``v_p_lowest``, NaN for an even count) against ``v_end`` at each end (``v_ends_at_seeds``).

    Raises:
        ValueError: ``n_seeds`` < 1."""
    other = 5 if n_seeds == 3 else 3
    cov = uncertainty.seed_range_coverage(n_seeds)
    odd = n_seeds % 2 == 1 and n_seeds > 1
    p = 100 * uncertainty.median_at_lowest_seed(n_seeds) if odd else math.nan
    end = 100 * (1 - uncertainty.LEVEL) / 2
    return {"v_n_seeds": n_seeds, "v_cov_range": round(100 * cov, 2), "v_other_seeds": other,
            "v_cov_other": round(100 * uncertainty.seed_range_coverage(other), 2),
            "v_p_lowest": round(p, 1) if odd else math.nan, "v_end": end, "v_seeds_odd": odd,
            "v_ends_at_seeds": bool(odd and p > end)}


def paper_breaks(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The claims the paper's own tables break in part or whole (index ``claim``)."""
    own = verdicts[verdicts["paper_verdict"].isin(["partly", "does not hold"])]
    return pd.DataFrame({"paper": own["paper"].to_numpy(), "verdict": own["paper_verdict"].to_numpy()},
                        index=pd.Index(own["title"].to_numpy(), name="claim"))


def verdict_table(verdicts: pd.DataFrame, matched: pd.DataFrame | None = None, stable: pd.DataFrame | None = None,
                  trend: pd.DataFrame | None = None, details: bool = False) -> pd.DataFrame:
    """One short row per claim (index: title): ``paper``, ``ours`` (the deciding source's value),
    ``matched``, ``verdict`` and ``marks`` ("stable"/"fragile", "not settled"). With ``details``: ``where``, ``paper
    verdict``, ``from``, ``protocols``, the matched-stage votes, ``fragile under``, ``cannot test``, and for a verdict
    not settled its ``drift`` (% of a gap a round) and ``meet`` (rounds)."""
    unsettled = None if trend is None else claims.not_settled(trend, verdicts)
    rows = []
    for key, r in verdicts.iterrows():
        m = matched.loc[key] if matched is not None and key in matched.index else None
        st = stable.loc[key] if stable is not None and key in stable.index else None
        u = unsettled.loc[key] if unsettled is not None and key in unsettled.index else None
        moving = u is not None and not u["settled"]
        if details:
            rows.append({"claim": r["title"], "where": r["where"], "paper verdict": r["paper_verdict"], "from": r["from"],
                         "protocols": r.get("protocol_verdict", r["verdict"]),
                         **{col: 0 if m is None else int(m.get(n, 0)) for col, n in (
                             ("votes", "n"), ("hold", "n_holds"), ("in part", "n_partly"),
                             ("within tolerance", "n_tolerance"), ("not", "n_fail"))},
                         "fragile under": "" if st is None else st["flips"],
                         "cannot test": "" if st is None else st.get("cannot_test", ""),
                         "drift": round(float(u["rate"]), 2) if moving else math.nan,
                         "meet": float(round(u["meet"])) if moving and u["meet"] == u["meet"] else math.nan})
            continue
        marks = [st["mark"]] if st is not None and st["mark"] != "–" else []
        rows.append({"claim": r["title"], "paper": r["paper"], "ours": "–" if r["from"] == "–" else r[r["from"]],
                     "matched": "–" if m is None else m["verdict"], "verdict": r["verdict"],
                     "marks": " · ".join(marks + (["not settled"] if moving else []))})
    return pd.DataFrame(rows).set_index("claim")


def source_table(verdicts: pd.DataFrame, sources: list) -> pd.DataFrame:
    """Each source's value and ``<name> verdict`` per claim, in the order of ``sources``."""
    cols = [c for ev in sources for c in (ev.name, f"{ev.name} verdict")]
    return verdicts.set_index("title")[cols].rename_axis("claim")


#: The headline cell of the paper (Sec. IV-B, Table I): bs 32, τ 2 at α = 100, "out of a possible" K_c = 10.
HEADLINE_SETTING = "bs 32, τ 2"


def where_in(value: float, low: float, high: float) -> str:
    """"inside", "below" or "above" [``low``, ``high``]."""
    return "below" if value < low else "above" if value > high else "inside"


def resnet_cliffs(tables, reference: str | None = None) -> dict:
    """The cliff of ResNet-18-GN over its θ in the model-size ``tables`` (None skipped): ``n_theta``,
    ``cliff_low``/``_high``, ``acc_low``/``_high``; and at the latest θ of its FedAvg trajectory, the one
    nearest the paper's stage: ``late_round``, ``late_acc``, ``late_cliff`` and ``late_ref``, the median 1/Δ_S
    of the protocol ``reference`` (a :func:`~maskfed.studies.factor_axes.protocol_label`) there. 0 and NaN
    without such θ."""
    nan = math.nan
    empty = {"n_theta": 0, "cliff_low": nan, "cliff_high": nan, "acc_low": nan, "acc_high": nan,
             "late_round": 0, "late_acc": nan, "late_cliff": nan, "late_ref": nan}
    tables = [t[t["model"] == "resnet18_gn"] for t in tables if t is not None and len(t)]
    if not any(len(t) for t in tables):
        return empty
    table = pd.concat([t for t in tables if len(t)], ignore_index=True)
    c = fa.model_overview(table)["cliff"].dropna()
    acc = table.drop_duplicates(["source", "target", "when"])["test_acc"]
    out = empty | {"n_theta": int(len(c)), "cliff_low": float(c.min()) if len(c) else nan,
                   "cliff_high": float(c.max()) if len(c) else nan, "acc_low": float(acc.min()), "acc_high": float(acc.max())}
    fed = table[table["source"] == "fedavg"]
    if len(fed):
        late = fed[fed["when"] == fed["when"].max()]
        row = fa.model_overview(late).iloc[0]
        out |= {"late_round": int(late["when"].iloc[0]), "late_acc": float(late["test_acc"].iloc[0]),
                "late_cliff": float(row["cliff"]), "late_ref": float(row.get(reference, nan))}
    return out


#: Data sets the verdict page's coverage simulation draws (:func:`headline_coverage`); its time: docs/measurements.md.
COVERAGE_SIMS = 400


def headline_coverage(table1_runs: list, *, n_sims: int = COVERAGE_SIMS, seed: int = 0) -> dict:
    """How often the page's intervals cover the true median (%), simulated on data drawn like the
    headline cell's runs, and the noise fitted to them.

    Raises:
        ValueError: fewer than two runs of the headline cell."""
    cell = [r for r in table1_runs if str(r.config.batch_size) == "32" and r.config.local_epochs == 2]
    noise = uncertainty.window_noise(cell)
    cov = uncertainty.simulated_coverage(noise, n_sims=n_sims, seed=seed)
    return {"b_cov_boot": 100 * cov["bootstrap"], "b_cov_range": 100 * cov["seed_range"], "b_sim_n": n_sims,
            "b_sim_between": noise["between_sd"], "b_sim_within": noise["within_sd"]}


def bottom_line(verdicts: pd.DataFrame, closest: claims.Evidence, against: pd.DataFrame, *, n_seeds: int,
                rounds: int, model: str, resnet: dict) -> dict:
    """The numbers and verdict words of the "In short" box (``b_...``; ``b_rn_*`` from ``resnet``).

    Raises:
        KeyError: ``against`` lacks the headline cell (:data:`HEADLINE_SETTING`)."""
    head = against.loc[HEADLINE_SETTING]
    cl = claims.interval_of(claims.cliff, [closest.table1], [closest.reps1])
    cl_low, cl_high = (cl.estimate, cl.estimate) if math.isnan(cl.low) else (cl.low, cl.high)  # no replicates: the point
    paper_cliff = claims.cliff(summary.paper_table("table1"))
    inside = sum(where_in(p, lo, hi) == "inside" for p, lo, hi in zip(against["paper"], against["low"], against["high"]))
    n = claims.counts(verdicts)
    return {
        "b_headline": claims.VERDICT_WORDS[evidence.headline_verdict(verdicts)],
        "b_head_paper": float(head["paper"]), "b_head_ours": float(head["ours"]),
        "b_head_low": float(head["low"]), "b_head_high": float(head["high"]),
        "b_head_where": where_in(float(head["paper"]), float(head["low"]), float(head["high"])),
        "b_cliff": cl.estimate, "b_cliff_low": cl_low, "b_cliff_high": cl_high, "b_cliff_paper": paper_cliff,
        "b_cliff_where": where_in(paper_cliff, cl_low, cl_high),
        "b_inside": int(inside), "b_settings": int(len(against)),
        "b_n_claims": int(sum(n.values())), "b_n_holds": n["holds"], "b_n_partly": n["partly"],
        "b_n_fail": n["does not hold"], "b_n_confounded": n["confounded by stage"],
        "b_n_unmeasured": n["not measured here"],
        "b_source": closest.name, "b_seeds": int(n_seeds), "b_rounds": int(rounds), "b_is_resnet": model == "resnet18_gn",
        "b_cov": 100 * uncertainty.seed_range_coverage(n_seeds),
        **{f"b_rn_{k}": v for k, v in resnet.items()},
    }


def source_facts(sources: list, runs_of: dict) -> pd.DataFrame:
    """Per source with runs (``runs_of``: name -> runs), closest first: seeds, rounds ("/"-joined),
    model, parameters."""
    rows = [{"source": ev.name, "seeds": len({r.config.seed for r in rs}),
             "rounds": "/".join(map(str, sorted({r.config.rounds for r in rs}))),
             "model": rs[0].config.model, "parameters": rs[0].provenance.get("num_parameters")}
            for ev in sources if (rs := runs_of.get(ev.name))]
    return pd.DataFrame(rows, columns=["source", "seeds", "rounds", "model", "parameters"]).set_index("source")


def archive_facts(archived_runs: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per archive: where and when its runs were made and what re-running some gave, relative
    differences to three significant digits, NaN where bit-identical; per re-run that differed, where it first did)."""
    rows, diffs = [], []
    for name, runs in archived_runs.items():
        if not runs:
            continue
        lab = archive.label(runs, name)
        v = lab.verification or {}
        done = v.get("runs", [])
        worst = max((r["summary_max_rel_diff"] for r in done if "summary_max_rel_diff" in r), default=math.nan)
        factor = max((abs(r["summary_rerun"]["recovery_unweighted"] / r["summary_archived"]["recovery_unweighted"] - 1)
                      for r in done if r.get("summary_archived") and r.get("summary_rerun")), default=math.nan)
        bit = lab.outcome == "bit-identical"
        rows.append({"archive": archive.column_name(name), "runs": lab.runs, "devices": ", ".join(lab.devices),
                     "first": lab.first_utc[:10], "last": lab.last_utc[:10], "commits": ", ".join(lab.commits),
                     "run code": ", ".join(lab.code_hashes), "changed": len(lab.changed), "re-run": lab.outcome or "–",
                     "re-runs": len(done), "re-run on": archive.machine_text(v) if v else "–",
                     "re-run date": v.get("utc", "–")[:10],
                     "summary off": math.nan if bit else significant(worst, 3),
                     "1/Δ_S off": math.nan if bit else significant(factor, 3),
                     "tolerance": v.get("summary_rtol", archive.SUMMARY_RTOL)})
        for r in done:
            d = r.get("first_difference") or {}
            if r["identical"] or d.get("round") is None:
                continue
            a, b = float(d["archived"]), float(d["rerun"])
            diffs.append({"run": r["label"], "metric": d["column"], "round": int(d["round"]),
                          "archived": significant(a, 4), "off": significant(abs(b - a) / abs(a) if a else abs(b - a), 2)})
    return (pd.DataFrame(rows).set_index("archive") if rows else pd.DataFrame(),
            pd.DataFrame(diffs, columns=["run", "metric", "round", "archived", "off"]).set_index("run"))


def fingerprint_table(runs: list, images) -> pd.DataFrame:
    """The data fingerprints archived ``runs`` recorded against this build's ``images`` of the
    same kind: ``kind``, ``archived``, ``this build``, ``same``."""
    from maskfed.engine.runner import fingerprint_of_kind, recorded_fingerprint

    prints = sorted({recorded_fingerprint(r.provenance) for r in runs})
    ours = {kind: fingerprint_of_kind(images, kind) for kind in {kind for kind, _ in prints}}
    return pd.DataFrame([{"kind": kind, "archived": value, "this build": ours[kind], "same": value == ours[kind]}
                         for kind, value in prints], columns=["kind", "archived", "this build", "same"])


def resnet_values(tables, paper: pd.DataFrame | None = None) -> dict:
    """ResNet-18-GN on this CPU per way θ was reached (``r_fedavg_*``, ``r_centralised_*``: accuracy,
    cliff, ratio to the paper's 1/Δ_S at the nearest accuracy) and, with both ways, ``r_nearer`` of ``r_both``, the
    median ratios and the minibatch protocols at FedAvg θ (``r_mini_*``); two decimals; ``r_ways`` (0: nothing else)."""
    tables = [t for t in tables if t is not None and len(t)]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame({"model": []})
    table = table[table["model"] == "resnet18_gn"]
    if not len(table):
        return {"r_ways": 0}
    paper = summary.paper_table("table1") if paper is None else paper
    out = {"r_paper_cliff": round(float(fa.paper_overview()["cliff"].iloc[0]), 2)}
    m = {}
    for way in ("fedavg", "centralised"):
        t = table[table["source"] == way]
        if not len(t):
            continue
        v = fa.cliff_verdict(fa.model_overview(t))
        m[way] = fa.paper_at_matched_accuracy(t, paper, source=way)
        theta = t.drop_duplicates("when")  # one row per θ (a target or a set round)
        out.update({f"r_{way}_acc_low": round(float(theta["test_acc"].min()), 2),
                    f"r_{way}_acc_high": round(float(theta["test_acc"].max()), 2),
                    f"r_{way}_holds": int(v["holds"]), f"r_{way}_measured": int(v["measured"]),
                    f"r_{way}_cliff_low": round(float(v["min"]), 2), f"r_{way}_cliff_high": round(float(v["max"]), 2),
                    f"r_{way}_ratio_low": round(float(m[way]["ratio"].min()), 2),
                    f"r_{way}_ratio_high": round(float(m[way]["ratio"].max()), 2)})
        if way == "fedavg":
            out["r_fedavg_rounds"] = ", ".join(str(int(r)) for r in theta["when"])
    out["r_ways"] = len(m)
    both = [i for i in m.get("fedavg", pd.DataFrame()).index if len(m) == 2 and i in m["centralised"].index]
    out["r_both"] = len(both)
    if both:
        fed, cen = m["fedavg"].loc[both], m["centralised"].loc[both]
        out.update({"r_nearer": int((np.abs(np.log(fed["ratio"])) < np.abs(np.log(cen["ratio"]))).sum()),
                    "r_fed_median": round(float(fed["ratio"].median()), 2),
                    "r_cen_median": round(float(cen["ratio"].median()), 2)})
        mini = fed[[not str(i).startswith("full") for i in fed.index]]
        if len(mini):
            out.update({f"r_mini_{k}_{end}": round(float(getattr(mini[k], fn)()), 2)
                        for k in ("acc", "paper_acc", "ratio") for end, fn in (("low", "min"), ("high", "max"))})
            out["r_mini_low"], out["r_mini_high"] = out.pop("r_mini_ratio_low"), out.pop("r_mini_ratio_high")
    return out


def resnet_ways(r: dict) -> pd.DataFrame:
    """:func:`resnet_values` per way θ was reached ("–" where missing; empty without either)."""
    cols = {"acc_low": "accuracy from", "acc_high": "to", "rounds": "rounds", "holds": "cliff holds",
            "measured": "θ", "cliff_low": "cliff from", "cliff_high": "cliff to", "ratio_low": "× paper from",
            "ratio_high": "× paper to"}
    rows = [{"θ from": name, **{c: r.get(f"r_{way}_{k}", "–") for k, c in cols.items()}}
            for way, name in (("fedavg", "FedAvg"), ("centralised", "centralised SGD")) if f"r_{way}_holds" in r]
    return pd.DataFrame(rows, columns=["θ from", *cols.values()]).set_index("θ from")


def route_table(tables) -> pd.DataFrame:
    """Centralised over FedAvg θ's 1/Δ_S per model measured both ways
    (:func:`maskfed.studies.factor_axes.route_summary`, two decimals)."""
    tables = [t for t in tables if t is not None and len(t)]
    checks = fa.path_checks(pd.concat(tables, ignore_index=True)) if tables else {}
    rows = [{"model": name, "low": round(r["min"], 2), "median": round(r["median"], 2), "high": round(r["max"], 2),
             "beyond": int(r["beyond"]), "cells": int(r["cells"])}
            for name, r in ((n, fa.route_summary(c)) for n, c in checks.items())]
    return pd.DataFrame(rows, columns=["model", "low", "median", "high", "beyond", "cells"]).set_index("model")


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             archived: list[str] | None = None, n_boot: int = uncertainty.N_BOOT) -> Findings:
    """Judge every claim on every source this build has (``archived``: None:
    :data:`maskfed.studies.archive.BOOK_PROFILES` less the live one).

    Raises:
        ValueError, ConfigError: a bad parameter. FileNotFoundError, DataUnavailableError: no data for the live runs.
        RuntimeError: the closest source lacks the headline cell."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    names = archived if archived is not None else [p for p in archive.BOOK_PROFILES if p != prof.name]
    studies = {name: archive.load_stage_study(name) for name in names}
    sources, profile_of = [], {}  # profile_of: evidence name -> the profile it measures
    for name in names:
        ev = evidence.archived_evidence(name, stage_table=getattr(studies[name], "table", None), n_boot=n_boot)
        if ev is not None:
            sources.append(ev)
            profile_of[ev.name] = name
    live = {e: experiments.run(prof, e, workers=workers, progress=not book.IN_BOOK_BUILD) for e in evidence.EXPERIMENTS}
    sources.append(evidence.profile_evidence(f"{prof.name} (this build)", *live.values(), n_boot=n_boot))
    profile_of[sources[-1].name] = prof.name
    verdicts = claims.verdict_table(sources)
    # the matched-stage view: every claim at the stage study's checkpoints in the paper's accuracy range (issue 40)
    matched_from = next((n for n in names if studies[n] is not None), None)
    stage_table = getattr(studies.get(matched_from), "table", None)
    matched_steps = next((ev.table1["T_mean"] for ev in sources if profile_of[ev.name] == matched_from), None)
    cross_table = getattr(archive.load_alpha_cross(matched_from) if matched_from else None, "table", None)
    floor = evidence.paper_accuracy_floor()
    matched = evidence.matched_stage_verdicts(stage_table, matched_steps, cross=cross_table,
                                              main_alpha=load_profile(matched_from).table1.alpha if matched_from else 100.0,
                                              min_acc=floor)
    matched_from = matched_from or "none"
    closest = sources[0]
    closest_prof = load_profile(profile_of[closest.name])
    closest_runs = evidence.source_runs(profile_of[closest.name], live)
    # the verdicts again under the analysis's own choices; the stage verdict on the subsets of its stage study
    stage_from = stage_table if verdicts.loc["stage", "from"] == archive.column_name(matched_from) else None
    stable = evidence.stability(verdicts, closest_runs, n_boot=n_boot, stage_table=stage_from)
    against = evidence.against_paper(closest_runs["table1"], closest_runs["table2"])
    trends = evidence.cell_trends(closest_runs["table1"]) if closest_runs["table1"] else None
    trend = None if trends is None else claims.trend_bearing(experiments.table1(closest_runs["table1"]), trends)
    n_seeds = len(closest_prof.seeds)
    archived_runs = {name: archive.require_complete(name) for name in names}
    runs_of = {ev.name: archived_runs.get(profile_of[ev.name]) or live["table1"] for ev in sources}
    measured = verdicts[verdicts["from"] != "–"]
    checks = claims.verdict_table(sources, claims.CODE_CHECKS).iloc[0]
    mcp = evidence.matched_checkpoints(stage_table, floor)
    factor_tables = {p: getattr(archive.load_factor_study(CPU_PAPER, p), "table", None)
                     for p in ("models", "resnet", "resnet-fedavg")}
    # claims whose verdict at matched stage differs from the one at the paper's protocols (both measured)
    differ = [k for k in verdicts.index if "not measured here" not in (verdicts.loc[k, "verdict"], matched.loc[k, "verdict"])
              and verdicts.loc[k, "verdict"] != matched.loc[k, "verdict"]]
    values = {
        "v_closest": closest.name, "v_n_measured": int(len(measured)),
        "v_n_from_closest": int((measured["from"] == closest.name).sum()),
        **{f"v_{k}": v for k, v in evidence.stability_counts(stable).items()},
        "v_n_runs": 0 if trends is None else int(trends["runs"].sum()),
        "v_n_tested": 0 if trends is None else int(trends["tested"].sum()),
        "v_n_falling": 0 if trends is None else int(trends["falling"].sum()),
        "v_matched_from": matched_from, "v_m_n": mcp["n"], "v_m_acc_low": round(mcp["acc_low"], 2),
        "v_m_acc_high": round(mcp["acc_high"], 2), "v_m_floor": round(floor, 3), "v_m_n_differ": len(differ),
        "v_m_cross": " and ".join(book.number(a) for a in evidence.cross_alphas(cross_table)),
        "v_check_title": checks["title"], "v_check_where": checks["where"],
        "v_check_word": {"holds": "passes", "does not hold": "FAILS"}.get(checks["verdict"], checks["verdict"]),
        "v_check_from": checks["from"], "v_check_value": checks[checks["from"]] if checks["from"] != "–" else "–",
        **coverage_values(n_seeds),
        "v_block": uncertainty.BLOCK, "v_level": round(100 * uncertainty.LEVEL), "v_n_boot": n_boot,
        # the parameter count of the closest evidence's own model (its runs' provenance), not the live profile's
        "v_n_params": f"{(closest_runs['table1'] or live['table1'])[0].provenance['num_parameters']:,}",
        "v_n_resnet": f"{num_parameters(build_model('resnet18_gn', num_classes=10)):,}",
        **{f"v_{k}": v for k, v in book.data_source(prof).items()},  # v_data, v_fingerprint
        "v_n_breaks": int(verdicts["paper_verdict"].isin(["partly", "does not hold"]).sum()),
        "v_code": provenance.code_hash(),
        **resnet_values(factor_tables.values()),
        "v_protocol": fa.trajectory_protocol(load_profile(CPU_PAPER)),
    }
    prints = fingerprint_table([r for runs in archived_runs.values() for r in runs],
                               book.images_for(prof.run(prof.seeds[0])))
    values["v_prints"] = "the same" if len(prints) and prints["same"].all() else "not the same"
    values |= cross_range_values(cross_table, floor)
    # where the matched-stage view disagrees in direction with the protocol view, it decides: "confounded by stage"
    verdicts = claims.with_matched_view(verdicts, matched)
    closest_run = closest_prof.run(closest_prof.seeds[0])
    resnet = resnet_cliffs([factor_tables["resnet"], factor_tables["resnet-fedavg"]], values["v_protocol"])
    own = getattr(archive.load_factor_study(CPU_PAPER, "resnet-fedavg"), "trajectory", None)
    resnet["rounds"] = int(own["round"].max()) if own is not None and len(own) else 0  # its trajectory's rounds so far
    if HEADLINE_SETTING not in against.index:
        raise RuntimeError(f"the closest source, {closest.name}, lacks the paper's headline cell ({HEADLINE_SETTING} "
                           "at α = 100), which the page's bottom line reports")
    bottom = {**bottom_line(verdicts, closest, against, n_seeds=n_seeds, rounds=closest_run.rounds,
                            model=closest_run.model, resnet=resnet),
              "b_paper_ran": "paper" in profile_of.values(),
              **headline_coverage(closest_runs["table1"]),
              **{f"b_pair_{k}": v for k, v in evidence.paper_pair(
                  closest.table1, stage_table if matched_from == profile_of[closest.name] else None, floor).items()},
              "b_n_unsettled": 0 if trend is None else int((~claims.not_settled(trend, verdicts)["settled"]).sum())}
    archives, reruns = archive_facts(archived_runs)
    return Findings(values=values, profile=prof, verdicts=verdicts, sources=sources, matched=matched,
                    matched_from=matched_from, stable=stable, bottom=bottom, against=against, trend=trend,
                    facts=source_facts(sources, runs_of), sizes=evidence.variant_sizes(closest_runs),
                    archives=archives, reruns=reruns, prints=prints, routes=route_table(factor_tables.values()),
                    resnet=resnet_ways(values))


def figure_against(found: Findings) -> plt.Figure | None:
    """The closest source's 1/Δ_S against the paper's per setting; None when none is in both."""
    if not len(found.against):
        return None
    plots.use_book_style()
    fig, ax = plt.subplots(figsize=(7.6, 6.4))  # the minibatch settings cluster near 1: room for their labels
    plots.ours_against_paper(found.against, source=found.sources[0].name, ax=ax,
                             title="Recovery factor 1/Δ_S")  # the caption says the rest
    return fig
