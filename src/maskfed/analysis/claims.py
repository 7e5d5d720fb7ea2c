"""Does the paper hold? Each of its claims, a criterion fixed in advance, and a verdict per profile.

A claim (:data:`CLAIMS`) is one testable statement of the paper's Sec. IV. Its criterion (words: the table
"The claims and their criteria" in ``notebooks/verdict.md``; thresholds, ours: :attr:`Claim.measure`) gives
one of :data:`VERDICTS` per source (:class:`Evidence`): the paper's tables (:func:`paper_evidence`) or a
profile's runs with bootstrap intervals (:mod:`maskfed.analysis.uncertainty`). At matched stage each
checkpoint votes (:func:`checkpoint_vote`) and the votes in the paper's accuracy range decide (:func:`over_checkpoints`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from maskfed.analysis import summary, uncertainty
from maskfed.analysis.uncertainty import Interval

#: The verdicts, strongest first: a criterion gives the first three or "not measured here"; "confounded by stage"
#: is an overall verdict only (:func:`with_matched_view`).
VERDICTS = ("holds", "partly", "does not hold", "confounded by stage", "not measured here")
#: Each verdict as a sentence writes it after a subject ("the headline holds in part").
VERDICT_WORDS = {"holds": "holds", "partly": "holds in part", "does not hold": "does not hold",
                 "confounded by stage": "is confounded by stage", "not measured here": "is not measured here"}


@dataclass
class Evidence:
    """One source of numbers for the verdicts: a profile's runs, or the paper's own tables."""

    name: str                                 # column header, e.g. "cpu-paper (archived)"
    table1: pd.DataFrame | None = None        # Table I summary (maskfed.studies.experiments.table1)
    table2: pd.DataFrame | None = None        # Table II summary
    reps1: list[pd.DataFrame] | None = None   # bootstrap replicates (uncertainty.replicate_tables); None: no interval
    reps2: list[pd.DataFrame] | None = None
    control: dict | None = None               # {"deviation": worst |1/Δ_S / K_c - 1|, "tolerance": allowed}
    stage: dict | None = None                 # maskfed.book.evidence.stage_evidence
    note: str = ""                            # what this source is, shown beside its column
    #: a printed table's last-digit unit (the paper's: :data:`PAPER_PRINT_UNIT`): a comparison decided by one unit
    #: or less is "within rounding"; None for our own, unrounded values
    print_unit: float | None = None


@dataclass(frozen=True)
class Finding:
    """A claim measured on one :class:`Evidence`: ``value`` (the verdict table's short cell), ``verdict`` (one of
    :data:`VERDICTS`, else ValueError) and ``numbers`` (every number behind them, by name)."""

    value: str
    verdict: str
    numbers: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")


NOT_MEASURED = Finding("–", "not measured here")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper (in words: ``notebooks/verdict.md``) with its measurement."""

    key: str
    title: str                                  # a few words, for a table row
    where: str                                  # section / table of the paper
    measure: Callable[[Evidence], Finding] = field(repr=False)

    def evaluate(self, ev: Evidence) -> Finding:
        """The :class:`Finding` on ``ev``; "not measured here" when ``ev`` lacks what it needs."""
        try:
            return self.measure(ev)
        except _Missing:
            return NOT_MEASURED


class _Missing(Exception):
    """The evidence lacks a table or study the claim needs."""


# --------------------------------------------------------------------------- statistics of tables

def _need(x):
    if x is None:
        raise _Missing
    return x


def _is_full(t: pd.DataFrame) -> np.ndarray:
    return (t.index.get_level_values("batch_size").astype(str) == "full")


def cliff(t1: pd.DataFrame) -> float:
    """Smallest full-batch over largest minibatch recovery factor."""
    full, rec = _is_full(t1), t1["recovery_unweighted"]
    return float(rec[full].min() / rec[~full].max())


def _log_span(values) -> float:
    v = np.asarray(values, dtype=float)
    return float(np.log(v.max() / v.min()))


def span_ratio(t1: pd.DataFrame, t2: pd.DataFrame) -> float:
    """Log-span of unweighted 1/Δ_S over Table II's α over its log-span over Table I's protocols (inf if that is 0)."""
    protocols = _log_span(t1["recovery_unweighted"])
    return _log_span(t2["recovery_unweighted"]) / protocols if protocols > 0 else math.inf


def _spearman(a, b) -> float:
    return summary.rank_correlation(pd.Series(np.asarray(a, float)), pd.Series(np.asarray(b, float)))


def majority(passed: int, groups: int) -> bool:
    """More than half of ``groups`` passed: what "partly" asks of a claim about every group."""
    return groups > 0 and 2 * passed > groups


def interval_of(stat, tables, reps) -> Interval:
    """``stat`` with its bootstrap interval, or with NaN ends when a table has no replicates."""
    if any(r is None for r in reps):
        return Interval(stat(*tables), math.nan, math.nan)
    return uncertainty.bootstrap(stat, tables, reps)


def _text(iv: Interval, fmt: str = ".2f") -> str:
    return f"{iv.estimate:{fmt}}" if math.isnan(iv.low) else iv.text(fmt)


def _bound(iv: Interval, side: str) -> float:
    """The interval's ``side`` ("low" or "high") end, or the estimate without an interval."""
    v = iv.low if side == "low" else iv.high
    return iv.estimate if math.isnan(v) else v


def _proto(p) -> str:
    return f"full batch, τ {p[1]}" if str(p[0]) == "full" else f"bs {p[0]}, τ {p[1]}"


def _numbers(iv: Interval, prefix: str = "") -> dict:
    return {f"{prefix}estimate": iv.estimate, f"{prefix}low": iv.low, f"{prefix}high": iv.high}


def _three_way(n: int, groups: int) -> str:
    """"holds" when all ``groups`` pass, "partly" for a majority, else "does not hold"."""
    return "holds" if n == groups else "partly" if majority(n, groups) else "does not hold"


# --------------------------------------------------------------------------- the claims

def _cliff(ev: Evidence) -> Finding:
    iv = interval_of(cliff, [_need(ev.table1)], [ev.reps1])
    lo = _bound(iv, "low")
    return Finding(_text(iv), "holds" if lo >= 2 else "partly" if lo > 1 else "does not hold", _numbers(iv))


def _floor(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    mini = lambda t: t[~_is_full(t)]["recovery_unweighted"]  # noqa: E731
    hi = interval_of(lambda t: float(mini(t).max()), [t1], [ev.reps1])
    lo = float(mini(t1).min())
    verdict = ("holds" if _bound(hi, "high") <= 1.5 and lo >= 1 else
               "partly" if hi.estimate <= 2 and lo >= 0.9 else "does not hold")
    return Finding(f"{lo:.2f}–{hi.estimate:.2f}", verdict, {"lowest": lo, **_numbers(hi, "largest_")})


def _falling(t1: pd.DataFrame, column: str = "recovery_unweighted") -> tuple[int, int]:
    """(batch sizes whose ``column`` falls strictly as τ grows, batch sizes with two or more τ)."""
    return tuple(summary.protocol_orderings(t1, column)[k] for k in ("n_falling", "n_groups"))


def _tau(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    n, groups = _falling(t1)
    # the share of bootstrap replicates in which every batch size falls (percent; NaN without replicates)
    share = math.nan if ev.reps1 is None else 100 * float(np.mean([_falling(r)[0] == groups for r in ev.reps1]))
    return Finding(f"{n} of {groups} batch sizes", _three_way(n, groups),
                   {"n_falling": n, "groups": groups, "pct_all_falling": share})


def _monotone_t(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    inv = summary.t_inversions(t1)
    # a rise of one printed unit can come from true values any small distance apart: "within rounding"
    beyond = inv if ev.print_unit is None else [(a, b) for a, b in inv if t1.loc[b, "recovery_unweighted"]
                                                 - t1.loc[a, "recovery_unweighted"] > ev.print_unit * (1 + 1e-9)]
    if not beyond:
        return Finding(f"{len(inv)} within rounding" if inv else "no inversion", "holds",
                       {"inversions": 0, "within_rounding": len(inv), "clear": 0})
    inv = beyond
    clear = inv
    if ev.reps1 is not None:  # an inversion within the bootstrap spread of the two cells is not clear
        def cell(p):
            return uncertainty.interval(t1.loc[p, "recovery_unweighted"],
                                        [r.loc[p, "recovery_unweighted"] for r in ev.reps1])
        clear = [(a, b) for a, b in inv if cell(b).low > cell(a).high]
    return Finding(f"{len(inv)} inversion{'s' if len(inv) > 1 else ''}", "does not hold" if clear else "partly",
                   {"inversions": len(inv), "within_rounding": 0, "clear": len(clear)})


def _signal_steps(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    n = _falling(t1.assign(minus_mu2=-t1["mu2_hat"]), "minus_mu2")[0]  # ‖μ̂‖² rising strictly with τ
    groups = t1.index.get_level_values("batch_size").astype(str).nunique()
    return Finding(f"{n} of {groups} batch sizes", _three_way(n, groups), {"n_rising": n, "groups": groups})


def _alpha_span(ev: Evidence) -> Finding:
    t1, t2 = _need(ev.table1), _need(ev.table2)
    iv = interval_of(span_ratio, [t1, t2], [ev.reps1, ev.reps2])
    verdict = "holds" if _bound(iv, "high") < 0.5 else "partly" if iv.estimate < 1 else "does not hold"
    return Finding(_text(iv), verdict, {**_numbers(iv), "alpha_lo": float(t2["recovery_unweighted"].min()),
                                        "alpha_hi": float(t2["recovery_unweighted"].max()),
                                        "proto_lo": float(t1["recovery_unweighted"].min()),
                                        "proto_hi": float(t1["recovery_unweighted"].max())})


#: "Flat" for the n_k-weighted factor across α: its ratio α = 0.1 / α = 100 within [1/FLAT, FLAT] (interval
#: included). Ours: the paper calls 1.19, 1.17, 1.18 "flat", a spread under 2 %.
FLAT = 1.05


def _alpha_weighting(ev: Evidence) -> Finding:
    t2 = _need(ev.table2)
    lo_a, hi_a = min(t2.index), max(t2.index)
    iv_u, iv_w = (interval_of(lambda t, c=col: float(t.loc[lo_a, c] / t.loc[hi_a, c]), [t2], [ev.reps2])
                  for col in ("recovery_unweighted", "recovery_weighted"))
    lu, lw = math.log(iv_u.estimate), abs(math.log(iv_w.estimate))
    flat = 1 / FLAT <= _bound(iv_w, "low") and _bound(iv_w, "high") <= FLAT
    verdict = ("holds" if _bound(iv_u, "low") > 1 and flat else
               "partly" if lu > 0 and lw < abs(lu) / 2 else "does not hold")
    return Finding(f"×{_text(iv_u)} vs ×{_text(iv_w)}", verdict,
                   {**_numbers(iv_u, "unweighted_"), **_numbers(iv_w, "weighted_"), "alpha_low": float(lo_a),
                    "alpha_high": float(hi_a)})


def _below_one(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    pct = t1["pct_rounds_below_one"]
    noisiest = t1["sigma2_hat"].nlargest(3).index
    mini = t1[~_is_full(t1)]
    rho = _spearman(mini["sigma2_hat"], mini["pct_rounds_below_one"]) if mini["pct_rounds_below_one"].nunique() > 1 else 0.0
    exists, declines = bool((pct > 0).any()), rho < 0
    zeros = int((pct[noisiest] == 0).sum())
    verdict = ("holds" if exists and declines and zeros == 3 else
               "partly" if exists and declines and majority(zeros, 3) else "does not hold")
    worst = pct.idxmax()
    return Finding(f"max {pct.max():.1f}% ({_proto(worst)}); noisiest 3: {', '.join(f'{v:.1f}' for v in pct[noisiest])}%",
                   verdict, {"max_pct": float(pct.max()), "max_batch_size": str(worst[0]), "max_tau": int(worst[1]),
                             "noisiest_zeros": zeros, "rho": rho})


def _spans(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    dec_s = _log_span(t1["sigma2_hat"]) / math.log(10)
    dec_m = _log_span(t1["mu2_hat"]) / math.log(10)
    rho = _spearman(t1["mu2_hat"], t1["recovery_unweighted"])
    verdict = ("holds" if dec_s >= 2 and dec_m <= dec_s / 2 and rho < 0 else
               "partly" if dec_m < dec_s else "does not hold")
    return Finding(f"σ̂² {dec_s:.1f}, ‖μ̂‖² {dec_m:.1f} decades; r_s(‖μ̂‖², 1/Δ_S) = {rho:+.2f}", verdict,
                   {"decades_sigma": dec_s, "decades_mu": dec_m, "rho": rho})


def _tradeoff(ev: Evidence) -> Finding:
    iv = interval_of(lambda t: _spearman(t["recovery_unweighted"], t["test_acc"]), [_need(ev.table1)], [ev.reps1])
    verdict = ("holds" if iv.estimate <= -0.5 and _bound(iv, "high") < 0 else
               "partly" if iv.estimate < 0 else "does not hold")
    return Finding(_text(iv, "+.2f"), verdict, _numbers(iv))


def _stage(ev: Evidence) -> Finding:
    st = _need(ev.stage)
    by_range = st["by_range"]
    part = sum(v in ("sampling", "both") for v in by_range.values())
    verdict = ("holds" if set(by_range.values()) == {"sampling"} else
               "partly" if majority(part, len(by_range)) else "does not hold")
    value = "; ".join(f"{k}: {v}" for k, v in by_range.items())
    if st.get("before"):  # shown apart, not counted (the protocols have not separated yet there)
        value += "; not counted, " + "; ".join(f"{k}: {v}" for k, v in st["before"].items())
    return Finding(value, verdict, {"ranges": len(by_range), "n_sampling": part})


def _control(ev: Evidence) -> Finding:
    c = _need(ev.control)
    return Finding(f"{c['deviation']:.1e} (≤ {c['tolerance']:.0e})",
                   "holds" if c["deviation"] <= c["tolerance"] else "does not hold",
                   {"deviation": float(c["deviation"]), "tolerance": float(c["tolerance"])})


def paper_numbers() -> dict:
    """The paper's numbers its claims quote, read from its tables: the minibatch range of 1/Δ_S (``mini_lo``,
    ``mini_hi``), its range over the protocols (``proto_*``) and over α (``alpha_*``), unweighted; the largest share
    of rounds below 1 (``below_max``, percent) and its protocol (``below_bs`` as text, ``below_tau``)."""
    t1, t2 = summary.paper_table("table1"), summary.paper_table("table2")
    rec, mini = t1["recovery_unweighted"], t1[~_is_full(t1)]["recovery_unweighted"]
    pct = t1["pct_rounds_below_one"]
    bs, tau = pct.idxmax()
    return {"mini_lo": float(mini.min()), "mini_hi": float(mini.max()), "proto_lo": float(rec.min()),
            "proto_hi": float(rec.max()), "alpha_lo": float(t2["recovery_unweighted"].min()),
            "alpha_hi": float(t2["recovery_unweighted"].max()), "below_max": float(pct.max()),
            "below_bs": str(bs), "below_tau": int(tau)}


# The claims in the paper's words and their criteria are notebooks/verdict.md's table, which glues paper_numbers().
CLAIMS: tuple[Claim, ...] = (
    Claim("cliff", "The cliff", "Sec. IV-B, Table I", _cliff),
    Claim("floor", "Minibatch floor", "Sec. IV-B", _floor),
    Claim("tau", "Falls with τ", "Sec. IV-B", _tau),
    Claim("monotone_t", "Monotone in T", "Sec. IV-B", _monotone_t),
    Claim("alpha_span", "Protocol, not α", "Sec. IV-E, Tables I and II", _alpha_span),
    Claim("alpha_weighting", "α = 0.1 split", "Sec. IV-E, Table II", _alpha_weighting),
    Claim("below_one", "Rounds below 1", "Sec. IV-B", _below_one),
    Claim("spans", "Noise, not signal", "Sec. IV-C", _spans),
    Claim("signal_steps", "Signal grows with τ", "Sec. IV-C", _signal_steps),
    Claim("tradeoff", "Accuracy trade-off", "Sec. IV-D, Fig. 1", _tradeoff),
    Claim("stage", "Sampling, not stage", "Sec. IV-C", _stage),
)

#: Checks of the code, judged like a claim, never counted among the verdicts: the control's 1/Δ_S = K_c holds by
#: construction when the code is right.
CODE_CHECKS: tuple[Claim, ...] = (Claim("control", "Control", "Sec. IV-A", _control),)

#: The claims a run still falling at its end bears on (issue 27): each compares Table I cells a further fall could
#: reorder.
TREND_CLAIMS = ("cliff", "tau", "monotone_t")
#: |t| of a drift beyond which a gap is moving (ours: the trend test's own threshold), and the false discovery rate
#: over every pair the trend claims compare (Benjamini-Hochberg; ours).
DRIFT_T, TREND_FDR = 2.0, 0.05


def not_settled(bearing: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    """Which verdicts (:func:`verdict_table`) a longer run could still change (issue 40), by :func:`trend_bearing`:
    one that holds, at least in part, with a gap moving against it, or one that does not hold with a gap moving
    toward it. Index ``claim``; ``settled``, ``rate`` (percent of the gap per round) and ``meet`` (rounds until a
    closing gap meets, for a claim that holds); NaN where settled.
    """
    rows = []
    for key, b in bearing.iterrows():
        fails = verdicts.loc[key, "verdict"] == "does not hold"
        rate = b["toward_rate"] if fails else b["against_rate"]
        moving = not math.isnan(rate) and verdicts.loc[key, "verdict"] != "not measured here"
        rows.append({"claim": key, "settled": not moving, "rate": rate if moving else math.nan,
                     "meet": b["meet"] if moving and not fails else math.nan})
    return pd.DataFrame(rows).set_index("claim")


def trend_pairs(t1: pd.DataFrame, key: str) -> list[tuple]:
    """The Table I cell pairs a :data:`TREND_CLAIMS` claim compares, each (cell wanted larger, the other): cliff,
    smallest full-batch vs largest minibatch; "tau", adjacent in τ within a batch size; "monotone_t", adjacent in
    T within full batch and within minibatch. ValueError: ``key`` not in :data:`TREND_CLAIMS`.
    """
    full, rec = _is_full(t1), t1["recovery_unweighted"]
    bs = t1.index.get_level_values("batch_size").astype(str)
    if key == "cliff":
        return [(rec[full].idxmin(), rec[~full].idxmax())] if full.any() and (~full).any() else []
    if key == "tau":
        groups = [list(t1[bs == b].sort_index(level="local_epochs").index) for b in bs.unique()]
    elif key == "monotone_t":
        groups = [list(t1[m].sort_values("T_mean").index) for m in (full, ~full)]
    else:
        raise ValueError(f"key must be one of {TREND_CLAIMS}; got {key!r}")
    return [(g[i], g[i + 1]) for g in groups for i in range(len(g) - 1)]


def trend_bearing(t1: pd.DataFrame, trends: pd.DataFrame) -> pd.DataFrame:
    """Would a longer run change the claims of :data:`TREND_CLAIMS`? Per pair (:func:`trend_pairs`): gap
    g = log(larger-wanted / other) of 1/Δ_S, drift d = difference of the cells' ``slope``
    (:func:`maskfed.book.evidence.cell_trends`): "toward" (d > 0) or "against" where |d| / se(d) > :data:`DRIFT_T`
    survives Benjamini-Hochberg at :data:`TREND_FDR`; a closing gap meets in g / |d| rounds (straight in log; ours).

    Returns:
        Index ``claim``; ``n_still`` of ``n_cells`` (cells most of whose runs still fall; ``still`` as text),
        ``way`` ("against", "toward", "both ways", "steady"), ``meet`` (fewest rounds), ``against_rate`` /
        ``toward_rate`` (fastest drift, percent of the gap per round) and ``pairs`` (as text).

    Raises:
        ValueError: ``trends`` lacks a cell of ``t1``.
    """
    missing = [p for p in t1.index if p not in trends.index]
    if missing:
        raise ValueError(f"trends lacks the cells {missing}")
    rec = t1["recovery_unweighted"]

    def drift(a, b) -> tuple[float, float]:
        return (float(trends.loc[a, "slope"] - trends.loc[b, "slope"]),
                math.hypot(float(trends.loc[a, "se"]), float(trends.loc[b, "se"])))

    every = list(dict.fromkeys(p for key in TREND_CLAIMS for p in trend_pairs(t1, key)))
    stats = [drift(a, b) for a, b in every]
    pvals = [math.erfc(abs(d) / se / math.sqrt(2)) if se > 0 else 1.0 for d, se in stats]  # two-sided normal
    moving = {pair for pair, (d, se), keep in zip(every, stats, uncertainty.benjamini_hochberg(pvals, TREND_FDR))
              if keep and se > 0 and abs(d) / se > DRIFT_T}
    rows = []
    for key in TREND_CLAIMS:
        pairs = trend_pairs(t1, key)
        cells = {p for pair in pairs for p in pair}
        still = sum(2 * int(trends.loc[p, "falling"]) > int(trends.loc[p, "runs"]) for p in cells)
        ways, meets, texts, rates = set(), [], [], {"against": [], "toward": []}
        for a, b in (pair for pair in pairs if pair in moving):
            g = math.log(rec[a] / rec[b])
            d = drift(a, b)[0]
            way = "toward" if d > 0 else "against"
            ways.add(way)
            rates[way].append(100 * abs(d))
            meet = g / -d if way == "against" and g > 0 else math.nan
            meets.append(meet)
            texts.append(f"{_proto(a)} over {_proto(b)}: ×{math.exp(g):.2f}, moving {way} it by {100 * abs(d):.2f} % a round"
                         + (f", meeting in about {meet:.0f} rounds" if not math.isnan(meet) else ""))
        rows.append({"claim": key, "n_still": still, "n_cells": len(cells), "still": f"{still} of {len(cells)} cells",
                     "way": "steady" if not ways else ways.pop() if len(ways) == 1 else "both ways",
                     "meet": min([m for m in meets if not math.isnan(m)], default=math.nan),
                     "against_rate": max(rates["against"], default=math.nan),
                     "toward_rate": max(rates["toward"], default=math.nan),
                     "pairs": "; ".join(texts)})
    return pd.DataFrame(rows).set_index("claim")


#: One unit of the last digit the paper prints 1/Δ_S with (Tables I and II: two decimals).
PAPER_PRINT_UNIT = 0.01


def paper_evidence() -> Evidence:
    """The paper's own Tables I and II as :class:`Evidence`, compared at :data:`PAPER_PRINT_UNIT`."""
    return Evidence("paper's tables", *map(summary.paper_table, ("table1", "table2")), print_unit=PAPER_PRINT_UNIT)


def verdict_table(evidence: list[Evidence], claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One row per claim (index: its key): ``title``, ``where``, ``paper`` and ``paper_verdict`` (on the paper's
    tables), ``<name>`` and ``<name> verdict`` per evidence, ``verdict`` and ``from`` (the first source in
    ``evidence``, closest first, that measures the claim)."""
    paper = paper_evidence()
    rows = []
    for c in claims:
        p = c.evaluate(paper)
        row = {"claim": c.key, "title": c.title, "where": c.where, "paper": p.value, "paper_verdict": p.verdict}
        overall, source = "not measured here", "–"
        for ev in evidence:
            f = c.evaluate(ev)
            row[ev.name], row[f"{ev.name} verdict"] = f.value, f.verdict
            if overall == "not measured here" and f.verdict != "not measured here":
                overall, source = f.verdict, ev.name
        rows.append({**row, "verdict": overall, "from": source})
    return pd.DataFrame(rows).set_index("claim")


def counts(table: pd.DataFrame) -> dict[str, int]:
    """How many claims got each overall verdict (:data:`VERDICTS` order)."""
    vc = table["verdict"].value_counts()
    return {v: int(vc.get(v, 0)) for v in VERDICTS}


def with_matched_view(verdicts: pd.DataFrame, matched: pd.DataFrame | None) -> pd.DataFrame:
    """``verdicts`` (:func:`verdict_table`) once the matched-stage view (``matched``:
    :func:`maskfed.book.evidence.matched_stage_verdicts`, or None) is weighed (issue 40): ``protocol_verdict`` keeps
    the verdict at the paper's protocols, and ``verdict`` becomes "confounded by stage" where the two views disagree
    in direction (one holds at least in part, the other does not hold)."""
    out = verdicts.copy()
    out["protocol_verdict"] = out["verdict"]
    if matched is None:
        return out
    ok = {"holds", "partly"}
    for key in out.index:
        if key in matched.index:
            p, m = out.loc[key, "verdict"], matched.loc[key, "verdict"]
            if (p in ok and m == "does not hold") or (p == "does not hold" and m in ok):
                out.loc[key, "verdict"] = "confounded by stage"
    return out


# --------------------------------------------------------------------------- the matched-stage vote (issue 40, item 5)

#: Claims not judged at matched stage: the stage study draws cohorts at a fixed θ, not rounds along a trajectory
#: (below_one); every protocol is at the same θ, so the same accuracy (tradeoff); stage is judged from the study.
NOT_AT_MATCHED_STAGE = ("below_one", "tradeoff", "stage")

#: The claims whose criterion orders pairs of cells, voted pair by pair (:func:`pair_votes`): claim key ->
#: (the recipe of :func:`trend_pairs`, the column, whether the claim wants the value to rise along the pair).
PAIR_CLAIMS = {"tau": ("tau", "recovery_unweighted", False),
               "monotone_t": ("monotone_t", "recovery_unweighted", False),
               "signal_steps": ("tau", "mu2_hat", True)}

_RANK = {"holds": 0, "partly": 1, "does not hold": 2}


def pair_votes(median: pd.DataFrame, seeds: list[pd.DataFrame], key: str) -> pd.DataFrame:
    """Each :data:`PAIR_CLAIMS` pair in a checkpoint's median Table I, d = log(cell wanted larger / other).

    Columns: ``d``; ``d_low``, ``d_high`` (range over ``seeds``' tables); ``vote`` "for" where d > 0, "against"
    only where every seed has d ≤ 0 (or no seeds), else "within tolerance"; ``larger``, ``smaller``
    (index tuples); ``group`` (batch size, or "full"/"minibatch" for T).
    """
    recipe, column, rising = PAIR_CLAIMS[key]
    rows = []
    for a, b in trend_pairs(median, recipe):
        if rising:
            a, b = b, a
        d = float(np.log(median.loc[a, column] / median.loc[b, column]))
        ds = [float(np.log(s.loc[a, column] / s.loc[b, column])) for s in seeds if a in s.index and b in s.index]
        lo, hi = (min(ds), max(ds)) if ds else (math.nan, math.nan)
        vote = "for" if d > 0 else "against" if not ds or hi <= 0 else "within tolerance"
        group = ("full" if str(a[0]) == "full" else "minibatch") if recipe == "monotone_t" else str(a[0])
        rows.append({"larger": a, "smaller": b, "group": group, "d": d, "d_low": lo, "d_high": hi, "vote": vote})
    return pd.DataFrame(rows, columns=["larger", "smaller", "group", "d", "d_low", "d_high", "vote"])


def _lenient_pairs(median: pd.DataFrame, seeds: list[pd.DataFrame], key: str) -> str:
    """The claim's criterion on :func:`pair_votes` with only the "against" pairs breaking a group."""
    votes = pair_votes(median, seeds, key)
    broken = set(votes.loc[votes["vote"] == "against", "group"])
    if key == "monotone_t":
        return "does not hold" if broken else "holds"
    sizes = median.index.get_level_values("batch_size").astype(str).value_counts()
    groups = sizes.index if key == "signal_steps" else sizes[sizes >= 2].index
    return _three_way(sum(g not in broken and sizes[g] >= 2 for g in groups), len(groups))


def checkpoint_vote(claim: Claim, median: Evidence, seeds: list[Evidence]) -> str:
    """A claim's vote at one matched-stage checkpoint: its criterion on the median over seeds (``median``) decides
    "holds" and "partly"; where that does not hold, "does not hold" only if the seeds (``seeds``, each its own
    tables; none: the median decides) exclude the claim's side too, else "within tolerance": pair by pair for
    :data:`PAIR_CLAIMS` (:func:`pair_votes`), otherwise when the criterion fails on every seed."""
    strict = claim.evaluate(median).verdict
    if strict != "does not hold" or not seeds:
        return strict
    if claim.key in PAIR_CLAIMS:
        lenient = _lenient_pairs(_need(median.table1), [s.table1 for s in seeds if s.table1 is not None], claim.key)
    else:
        found = [claim.evaluate(s).verdict for s in seeds]
        lenient = min((v for v in found if v in _RANK), key=_RANK.get, default="does not hold")
    return "does not hold" if lenient == "does not hold" else "within tolerance"


def over_checkpoints(votes: pd.Series, weights: pd.Series | None = None) -> dict:
    """A claim's matched-stage verdict from its checkpoints' votes (:func:`checkpoint_vote`) and weights (None: 1
    each; 0: shown, not counted): "holds" if every counted checkpoint holds; "does not hold" if those voting so carry
    more than half the counted weight; else "partly" ("within tolerance" counts for neither). Returns the verdict
    with the counted ``weight``, ``n``, ``n_holds``, ``n_partly``, ``n_tolerance``, ``n_fail`` and ``fail_share``.
    """
    w = pd.Series(1.0, index=votes.index) if weights is None else weights.reindex(votes.index).astype(float)
    counted = (w > 0) & (votes != "not measured here")
    v, w = votes[counted], w[counted]
    total = float(w.sum())
    n = {k: int((v == word).sum()) for k, word in (("n_holds", "holds"), ("n_partly", "partly"),
                                                 ("n_tolerance", "within tolerance"), ("n_fail", "does not hold"))}
    against = float(w[v == "does not hold"].sum())
    verdict = ("not measured here" if total == 0 else "holds" if n["n_holds"] == len(v) else
               "does not hold" if 2 * against > total else "partly")
    return {"verdict": verdict, "weight": total, "n": int(len(v)), **n,
            "fail_share": against / total if total > 0 else math.nan}
