"""Findings of the chapter "Does the paper hold?" (``notebooks/verdict.md``).

Each claim of the paper's Sec. IV (:data:`maskfed.analysis.claims.CLAIMS`) is judged by its stated
criterion on every source this build has: the paper's own Tables I and II, each archived profile and
the live profile. :func:`findings` gathers the sources (:mod:`maskfed.book.evidence`), the overall
verdict table (closest source first), the matched-stage view from the archived stage study, the
stability marks under the analysis's own variants, and the glued values of the page's prose. The
pure helpers (:func:`coverage_values`, :func:`criteria_html`, :func:`changes_table`,
:func:`paper_self_text`) compute one paragraph each; :func:`figure_against`
draws the summary figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Optional

import matplotlib.pyplot as plt
import pandas as pd

from maskfed import book
from maskfed.analysis import claims, summary, uncertainty
from maskfed.book import evidence, plots
from maskfed.engine.config import Profile, load_profile
from maskfed.engine.models import build_model, num_parameters
from maskfed.studies import archive, experiments, factor_axes as fa

#: The live experiments every verdict reads (Table I, Table II and the control).
EXPERIMENTS = ("table1", "table2", "control")


@dataclass(frozen=True)
class Findings:
    """What the chapter shows.

    ``values`` maps each glue name (``v_...``) to a number or a short phrase; the rest are the frames
    and HTML blocks the page displays.
    """

    values: dict
    profile: Profile                 # this build's profile (the banner's)
    verdicts: pd.DataFrame           # claims.verdict_table of every source, closest first
    sources: list                    # claims.Evidence per source, closest first, the live one last
    matched: Optional[pd.DataFrame]  # evidence.matched_stage_verdicts (None without a stage study)
    matched_from: str                # the profile whose stage study gave the matched view ("none")
    stable: pd.DataFrame             # evidence.stability of the closest source
    bottom: dict                     # bottom_line(): the numbers and verdict words of the page's "In short" box
    against: pd.DataFrame            # evidence.against_paper of the closest source's runs
    trend: Optional[pd.DataFrame] = None  # claims.trend_bearing of the closest source's Table I runs

    def verdict_html(self) -> str:
        """The verdict table with its matched-stage and stability columns (:func:`evidence.verdict_html`)."""
        return evidence.verdict_html(self.verdicts, self.sources, self.matched, self.matched_from, self.stable,
                                     self.trend)


def coverage_values(n_seeds: int) -> dict:
    """What a seed interval is worth with ``n_seeds`` seeds a setting (:mod:`maskfed.analysis.uncertainty`).

    Returns:
        ``v_n_seeds``; ``v_cov_range``: the percent of the time the seed range [min, max] covers the median
        (1 − 2 (1/2)^n, up to two decimals, trailing zeros dropped); ``v_p_lowest``: the percent probability
        that the median of a redraw of the seeds is the lowest seed, one decimal ("–" for an even count,
        whose median is no single seed); ``v_cov_text``: the page's paragraph saying so, which compares
        that probability with the (1 − LEVEL)/2 at each end of the interval and names the range's coverage
        at the paper's 3 seeds (or, with 3, at 5).

    Raises:
        ValueError: ``n_seeds`` < 1.
    """
    def pct(x: float) -> str:
        return f"{100 * x:.2f}".rstrip("0").rstrip(".")

    cov = pct(uncertainty.seed_range_coverage(n_seeds))
    other = 5 if n_seeds == 3 else 3
    other_text = f"{pct(uncertainty.seed_range_coverage(other))} % with {other} seeds" + (
        ", the paper's count" if other == 3 else "")
    tail = (f"[min, max] covers the median {cov} % of the time (it misses only when every seed falls on one side "
            f"of the median, probability 2·(1/2)ⁿ; {other_text}).")
    end = 100 * (1 - uncertainty.LEVEL) / 2
    if n_seeds == 1:
        text = "With one seed a setting, the intervals redraw its rounds only and say nothing of the spread between seeds."
        lowest = "–"
    elif n_seeds % 2 == 0:
        text = (f"With {n_seeds} seeds a setting the median of a redraw is the mean of the two seeds drawn, and the seed range "
                + tail)
        lowest = "–"
    else:
        p = 100 * uncertainty.median_at_lowest_seed(n_seeds)
        lowest = f"{p:.1f}"
        head = (f"What that nominal level is worth with {n_seeds} seeds a setting: the median of a redraw of the "
                f"seeds is the lowest seed with probability {lowest} % (and the highest as often), ")
        if p > end:
            text = (head + f"more than the {end:g} % at each end, so the interval's ends sit near the extreme seeds and it "
                    f"covers the true median about as often as the seed range does: " + tail)
        else:
            text = (head + f"no more than the {end:g} % at each end, so the interval can end inside the seed range; "
                    f"the seed range itself " + tail)
    return {"v_n_seeds": n_seeds, "v_cov_range": cov, "v_p_lowest": lowest, "v_cov_text": text}


def paper_self_text(verdicts: pd.DataFrame) -> str:
    """The claims the paper's own tables break in part or whole: "title (verdict: value)" joined by
    "; ", or "none" (``verdicts``: :func:`maskfed.analysis.claims.verdict_table`)."""
    own = verdicts[verdicts["paper_verdict"].isin(["partly", "does not hold"])]
    return "; ".join(f"{t} ({v}: {x})" for t, v, x in zip(own["title"], own["paper_verdict"], own["paper"])) or "none"


def _sentence(text: str) -> str:
    """``text`` HTML-escaped, its first character capitalised when it is ASCII (a Greek symbol such as
    σ̂² keeps its case: σ and Σ are different quantities)."""
    return escape((text[0].upper() if text[0].isascii() else text[0]) + text[1:])


def criteria_html(items: tuple = claims.CLAIMS, checks: tuple = claims.CODE_CHECKS) -> str:
    """Every claim's title, where the paper makes it, its statement and its criterion, as an HTML list,
    then the checks of the code (not counted) as a paragraph."""
    return ("<ol>" + "".join(f"<li><b>{escape(c.title)}</b> ({escape(c.where)}). <em>{escape(c.statement)}.</em> "
                             f"{_sentence(c.criterion)}.</li>" for c in items) + "</ol>"
            + "<p>Code check, not counted: " + "".join(f"<b>{escape(c.title)}</b>: <em>{escape(c.statement)}.</em> "
                                                       f"{_sentence(c.criterion)}." for c in checks) + "</p>")


def changes_table(changes: tuple = claims.CRITERIA_CHANGES, items: tuple = claims.CLAIMS + claims.CODE_CHECKS
                  ) -> pd.DataFrame:
    """The criteria changed since they were first written (:data:`maskfed.analysis.claims.CRITERIA_CHANGES`): one
    row each, columns ``date``, ``claim`` (its title), ``change`` and ``data in view`` (whether the archived runs
    had been seen when it was set).

    Raises:
        KeyError: a change names a claim key that ``items`` lacks.
    """
    title = {c.key: c.title for c in items}
    return pd.DataFrame([{"date": d, "claim": title[k], "change": what, "data in view": seen}
                         for d, k, what, seen in changes])


#: The headline cell of the paper (Sec. IV-B, Table I): bs 32, τ 2 at α = 100, "out of a possible" K_c = 10.
HEADLINE_SETTING = "bs 32, τ 2"


def where_in(value: float, low: float, high: float) -> str:
    """Where ``value`` falls against the range [``low``, ``high``]: "inside", "below" or "above"."""
    return "below" if value < low else "above" if value > high else "inside"


def resnet_cliffs(tables) -> dict:
    """The cliff (:func:`maskfed.studies.factor_axes.cliff`) of the paper's ResNet-18-GN measured on this CPU, over
    every θ of the archived model-size studies that hold it (FedAvg and centralised θ together).

    Args:
        tables: model-size study tables (:attr:`maskfed.studies.factor_axes.ModelStudy.table`); None entries skipped.

    Returns:
        ``{"n_theta", "cliff_low", "cliff_high", "acc_low", "acc_high"}`` (test accuracy of those θ as fractions);
        ``n_theta`` 0 and NaN bounds when no table holds ResNet-18-GN with both a full-batch and a minibatch protocol.
    """
    nan = float("nan")
    tables = [t[t["model"] == "resnet18_gn"] for t in tables if t is not None and len(t)]
    tables = [t for t in tables if len(t)]
    if not tables:
        return {"n_theta": 0, "cliff_low": nan, "cliff_high": nan, "acc_low": nan, "acc_high": nan}
    table = pd.concat(tables, ignore_index=True)
    ov = fa.model_overview(table)
    c = ov["cliff"].dropna()
    acc = table.drop_duplicates(["source", "target", "when"])["test_acc"]
    return {"n_theta": int(len(c)), "cliff_low": float(c.min()) if len(c) else nan,
            "cliff_high": float(c.max()) if len(c) else nan,
            "acc_low": float(acc.min()), "acc_high": float(acc.max())}


#: Data sets the verdict page's coverage simulation draws (:func:`headline_coverage`); its time: docs/measurements.md.
COVERAGE_SIMS = 400


def headline_coverage(table1_runs: list, *, n_sims: int = COVERAGE_SIMS, seed: int = 0) -> dict:
    """How often the page's intervals cover the true median, measured by simulation on data drawn like the headline
    cell's runs (:data:`HEADLINE_SETTING`; :func:`maskfed.analysis.uncertainty.simulated_coverage`).

    Returns:
        ``b_cov_boot`` and ``b_cov_range`` (percent: the bootstrap interval, the seed range), ``b_sim_n`` (data sets),
        ``b_sim_between`` / ``b_sim_within`` (the fitted standard deviations between seeds and between rounds).

    Raises:
        ValueError: fewer than two runs of the headline cell.
    """
    cell = [r for r in table1_runs if str(r.config.batch_size) == "32" and r.config.local_epochs == 2]
    noise = uncertainty.window_noise(cell)
    cov = uncertainty.simulated_coverage(noise, n_sims=n_sims, seed=seed)
    return {"b_cov_boot": 100 * cov["bootstrap"], "b_cov_range": 100 * cov["seed_range"], "b_sim_n": n_sims,
            "b_sim_between": noise["between_sd"], "b_sim_within": noise["within_sd"]}


def bottom_line(verdicts: pd.DataFrame, closest: claims.Evidence, against: pd.DataFrame, *, n_seeds: int,
                rounds: int, model: str, resnet: dict) -> dict:
    """The numbers and verdict words of the verdict page's bottom line (the page writes the sentences).

    Args:
        verdicts: :func:`maskfed.analysis.claims.verdict_table` of the claims, closest source first.
        closest: the source closest to the paper's setting (its Table I and bootstrap replicates give the cliff).
        against: :func:`maskfed.book.evidence.against_paper` of the closest source's runs (1/Δ_S per setting, ours
            with its seed range beside the paper's).
        n_seeds, rounds, model: the closest source's seeds per setting, rounds and model name.
        resnet: :func:`resnet_cliffs` of the archived ResNet-18-GN measurements.

    Returns:
        ``b_headline`` (:func:`maskfed.book.evidence.headline_verdict`'s word, "partly" written "holds in part");
        the headline cell (:data:`HEADLINE_SETTING`): ``b_head_paper``, ``b_head_ours``, ``b_head_low``,
        ``b_head_high`` (seed range), ``b_head_where`` (the paper's value against that range: :func:`where_in`);
        the cliff (smallest full-batch over largest minibatch 1/Δ_S): ``b_cliff`` with its bootstrap interval
        ``b_cliff_low`` / ``b_cliff_high``, the paper's ``b_cliff_paper`` and ``b_cliff_where``; ``b_inside`` of
        ``b_settings`` settings whose paper value lies in our seed range; the claim counts ``b_n_claims``,
        ``b_n_holds``, ``b_n_partly``, ``b_n_fail``, ``b_n_confounded``, ``b_n_unmeasured``; ``b_source``, ``b_seeds``, ``b_rounds``,
        ``b_is_resnet`` (the closest source trains the paper's model); ``b_cov`` (percent of the time the seed
        range covers the median, :func:`maskfed.analysis.uncertainty.seed_range_coverage`); ``b_rn_*`` (``resnet``).

    Raises:
        KeyError: ``against`` lacks the headline cell.
    """
    head = against.loc[HEADLINE_SETTING]
    t1 = closest.table1
    cl = claims.interval_of(claims.cliff, [t1], [closest.reps1])
    cl_low, cl_high = (cl.estimate, cl.estimate) if math.isnan(cl.low) else (cl.low, cl.high)  # no replicates: the point
    paper_cliff = claims.cliff(summary.paper_table("table1"))
    inside = sum(where_in(p, lo, hi) == "inside" for p, lo, hi in zip(against["paper"], against["low"], against["high"]))
    n = claims.counts(verdicts)
    head_word = evidence.headline_verdict(verdicts)
    return {
        "b_headline": claims.VERDICT_WORDS[head_word],
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


def findings(profile: str, *, data_path=None, overrides: dict | None = None, workers: int | None = None,
             archived: list[str] | None = None, n_boot: int = uncertainty.N_BOOT) -> Findings:
    """Judge every claim on every source this build has.

    Args:
        profile: the live profile's name; data_path, overrides: as :func:`maskfed.engine.config.load_profile`.
        workers: worker processes for the live runs (None: the profile's).
        archived: archived profiles to read (None: :data:`maskfed.studies.archive.BOOK_PROFILES` less the live one).
        n_boot: bootstrap replicates per source (:func:`maskfed.analysis.uncertainty`).

    Raises:
        ValueError, ConfigError: a bad parameter. FileNotFoundError, DataUnavailableError: no data for the
        live runs (:func:`maskfed.studies.experiments.run`).
    """
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    names = archived if archived is not None else [p for p in archive.BOOK_PROFILES if p != prof.name]
    sources, profile_of = [], {}  # profile_of: evidence name -> the profile it measures
    for name in names:
        study = archive.load_stage_study(name)
        ev = evidence.archived_evidence(name, stage_table=None if study is None else study.table, n_boot=n_boot)
        if ev is not None:
            sources.append(ev)
            profile_of[ev.name] = name
    live = {e: experiments.run(prof, e, workers=workers, progress=False) for e in EXPERIMENTS}
    sources.append(evidence.profile_evidence(f"{prof.name} (this build)", live["table1"], live["table2"],
                                             live["control"], n_boot=n_boot, note=evidence.describe(live["table1"])))
    profile_of[sources[-1].name] = prof.name
    verdicts = claims.verdict_table(sources)
    if sum(claims.counts(verdicts).values()) != len(claims.CLAIMS):
        raise RuntimeError(f"the verdict table counts {claims.counts(verdicts)}, not {len(claims.CLAIMS)} claims")
    # the matched-stage view: every claim at the stage study's checkpoints (protocols and α at the same θ)
    matched_from = next((n for n in names if archive.load_stage_study(n) is not None), None)
    matched_study = archive.load_stage_study(matched_from) if matched_from else None
    stage_table = None if matched_study is None else matched_study.table
    matched_steps = next((ev.table1["T_mean"] for ev in sources if profile_of[ev.name] == matched_from), None)
    cross = archive.load_alpha_cross(matched_from) if matched_from else None
    cross_table = None if cross is None else cross.table
    # checkpoints in the paper's accuracy range vote (issue 40): early training, before the protocols separate, does not
    floor = evidence.paper_accuracy_floor()
    matched = evidence.matched_stage_verdicts(stage_table, matched_steps, cross=cross_table,
                                              main_alpha=load_profile(matched_from).table1.alpha if matched_from else 100.0,
                                              min_acc=floor)
    matched_from = matched_from or "none"
    closest = sources[0]
    closest_runs = evidence.source_runs(profile_of[closest.name], live)
    # the overall verdicts again under the analysis's own choices, from the closest source's runs; the stage
    # verdict on protocol subsets of the stage study it came from
    stage_from = stage_table if verdicts.loc["stage", "from"] == archive.column_name(matched_from) else None
    stable = evidence.stability(verdicts, closest_runs, n_boot=n_boot, stage_table=stage_from)
    against = evidence.against_paper(closest_runs["table1"], closest_runs["table2"])
    # the trend test reaches the claims it bears on: their cells still falling, and which way that moves them
    trend, trend_sentence = evidence.trend_view(closest_runs["table1"], closest.name)
    n_seeds = len(load_profile(profile_of[closest.name]).seeds)  # seeds per setting of the closest source
    # the parameter count of the closest evidence's own model (its runs' provenance), not the live profile's
    n_small = (closest_runs["table1"] or live["table1"])[0].provenance["num_parameters"]
    n_resnet = num_parameters(build_model("resnet18_gn", num_classes=10))
    archived_runs = {name: archive.require_complete(name) for name in names}
    by_source = verdicts["from"].value_counts()
    values = {
        "v_closest": closest.name, "v_closest_note": closest.note,
        "v_sources": "; ".join(f"{n} of them from {s}" for s, n in by_source.items() if s != "–"),
        **{f"v_{k}": v for k, v in evidence.stability_counts(stable).items()},
        "v_trend": trend_sentence,
        "v_matched": evidence.matched_text(verdicts, matched, matched_from, stage_table, cross_table, min_acc=floor),
        "v_checks": evidence.code_checks_text(claims.verdict_table(sources, claims.CODE_CHECKS)),
        "v_frozen": claims.CRITERIA_FROZEN, **coverage_values(n_seeds),
        "v_block": uncertainty.BLOCK, "v_level": round(100 * uncertainty.LEVEL), "v_n_boot": n_boot,
        "v_against_caption": evidence.against_caption(against, closest.name),
        "v_n_params": f"{n_small:,}", "v_n_resnet": f"{n_resnet:,}",
        "v_sources_list": "; ".join(f"{ev.name}: {ev.note}" for ev in sources),
        "v_data": book.data_note(prof),
        "v_provenance": " ".join(f"{archive.column_name(n)}: {archive.label(r, n).text()}"
                                 for n, r in archived_runs.items() if r) or "every column was computed by this build.",
        "v_archived_data": evidence.data_comparison_text([r for runs in archived_runs.values() for r in runs],
                                                         book.images_for(prof.run(prof.seeds[0]))),
        "v_none_paper": evidence.paper_setting_text(profile_of.values()),
        "v_paper_ran": ("Its runs are the closest evidence above." if "paper" in profile_of.values()
                        else "It has not run: no GPU has been available to this project."),
        # the paper's model measured on CPU: at FedAvg θ, at centralised θ, and the small CNN both ways
        "v_resnet_fixed": evidence.resnet_text([getattr(archive.load_factor_study("cpu-paper", p), "table", None)
                                                for p in ("models", "resnet", "resnet-fedavg")],
                                               protocol=fa.trajectory_protocol(load_profile("cpu-paper"))),
        "v_self": paper_self_text(verdicts),
    }
    # where the matched-stage view disagrees in direction with the protocol view, it decides: "confounded by stage"
    verdicts = claims.with_matched_view(verdicts, matched)
    closest_prof = load_profile(profile_of[closest.name])
    closest_run = closest_prof.run(closest_prof.seeds[0])
    resnet = resnet_cliffs([getattr(archive.load_factor_study("cpu-paper", p), "table", None)
                            for p in ("resnet", "resnet-fedavg")])
    own = getattr(archive.load_factor_study("cpu-paper", "resnet-fedavg"), "trajectory", None)
    resnet["rounds"] = int(own["round"].max()) if own is not None and len(own) else 0  # its trajectory's rounds so far
    if HEADLINE_SETTING not in against.index:
        raise RuntimeError(f"the closest source, {closest.name}, lacks the paper's headline cell ({HEADLINE_SETTING} "
                           "at α = 100), which the page's bottom line reports")
    bottom = {**bottom_line(verdicts, closest, against, n_seeds=n_seeds, rounds=closest_run.rounds,
                            model=closest_run.model, resnet=resnet),
              "b_paper_ran": "paper" in profile_of.values(),
              **headline_coverage(closest_runs["table1"]),
              # the paper's own pair (full batch τ 5 against bs 128 τ 1) at the protocols and at matched θ
              **{f"b_pair_{k}": v for k, v in evidence.paper_pair(
                  closest.table1, stage_table if matched_from == profile_of[closest.name] else None, floor).items()},
              # verdicts a longer run could still change (claims.not_settled), from the closest source's trends
              "b_n_unsettled": 0 if trend is None else int((~claims.not_settled(trend, verdicts)["settled"]).sum())}
    return Findings(values=values, profile=prof, verdicts=verdicts, sources=sources, matched=matched,
                    matched_from=matched_from, stable=stable, bottom=bottom, against=against,
                    trend=trend)


def figure_against(found: Findings) -> plt.Figure | None:
    """The summary figure: the closest source's 1/Δ_S against the paper's per setting, with seed ranges
    and y = x (:func:`maskfed.book.plots.ours_against_paper`); None when no setting is in both."""
    if not len(found.against):
        return None
    plots.use_book_style()
    fig, ax = plt.subplots(figsize=(7.6, 6.4))  # the minibatch settings cluster near 1: room for their labels
    plots.ours_against_paper(found.against, ax=ax, title="Recovery factor 1/Δ_S: ours against the paper's")
    return fig
