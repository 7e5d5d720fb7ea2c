"""Does the paper hold? Each of its claims, a criterion fixed in advance, and a verdict per profile.

A claim is one statement of the paper's Sec. IV that our measurements can test (:data:`CLAIMS`). Each has

* the paper's number, computed by the same code from the paper's own tables
  (:func:`maskfed.analysis.summary.paper_table`);
* a criterion written before any number was seen (its words: the table "The claims and their criteria" in
  ``notebooks/verdict.md``; its thresholds and decision: :attr:`Claim.measure`), giving one of :data:`VERDICTS`;
* a :class:`Finding` per profile (:class:`Evidence`): the measured value with its bootstrap interval over
  seeds and window rounds (:mod:`maskfed.analysis.uncertainty`) and the verdict.

The thresholds are ours (the paper states its claims in words); each criterion states its own. At matched stage
(every protocol at the same θ) each checkpoint votes with its seed range (:func:`checkpoint_vote`) and the votes in
the paper's accuracy range decide (:func:`over_checkpoints`; the checkpoints' tables:
:func:`maskfed.studies.stage.matched_votes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from maskfed.analysis import summary, uncertainty
from maskfed.analysis.uncertainty import Interval

#: The verdicts a claim can get, strongest first. A criterion gives the first three or "not measured here";
#: "confounded by stage" is an overall verdict only (:func:`with_matched_view`).
VERDICTS = ("holds", "partly", "does not hold", "confounded by stage", "not measured here")
#: Each verdict as a sentence writes it after a subject ("the headline holds in part").
VERDICT_WORDS = {"holds": "holds", "partly": "holds in part", "does not hold": "does not hold",
                 "confounded by stage": "is confounded by stage", "not measured here": "is not measured here"}


@dataclass
class Evidence:
    """One source of numbers for the verdicts: a profile's runs, or the paper's own tables.

    Attributes:
        name: column header (e.g. ``"cpu-paper (archived)"``, ``"paper's tables"``).
        table1, table2: Table I / Table II summaries (:func:`maskfed.studies.experiments.table1`), or None.
        reps1, reps2: their bootstrap replicates (:func:`maskfed.analysis.uncertainty.replicate_tables`),
            or None (no intervals, as for the paper's tables).
        control: ``{"deviation": worst |1/Δ_S / K_c - 1| over rounds and runs, "tolerance": allowed}`` or None.
        stage: ``{"by_range": {range: verdict of maskfed.studies.stage.verdict}, "cliffs": [cliff at each
            checkpoint], "text": one sentence}`` or None.
        note: what this source is (rounds, seeds, model), shown beside its column ("" for the paper's tables).
        print_unit: for a table printed at fixed precision (the paper's, two decimals), one unit of its last
            digit: each printed value is within half a unit of the true one, so a comparison decided by one
            unit or less is "within rounding" (:data:`PAPER_PRINT_UNIT`); None for our own, unrounded values.
    """

    name: str
    table1: pd.DataFrame | None = None
    table2: pd.DataFrame | None = None
    reps1: list[pd.DataFrame] | None = None
    reps2: list[pd.DataFrame] | None = None
    control: dict | None = None
    stage: dict | None = None
    note: str = ""
    print_unit: float | None = None  # the last printed digit of a printed table's 1/Δ_S (the paper's: 0.01); None: exact


@dataclass(frozen=True)
class Finding:
    """A claim measured on one :class:`Evidence`.

    Attributes:
        value: the verdict table's cell (the deciding numbers, short; read by the verdict page's table).
        verdict: one of :data:`VERDICTS`.
        numbers: every number behind the value and the verdict, by name (e.g. ``{"estimate", "low", "high"}``;
            NaN ends where there is no interval); the claims' table in ``notebooks/verdict.md`` says what each is.
    """

    value: str
    verdict: str
    numbers: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")


NOT_MEASURED = Finding("–", "not measured here")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper with its criterion and its measurement."""

    key: str
    title: str                                  # a few words, for a table row
    # the claim in our words and the criterion that decides it are notebooks/verdict.md's table
    # "The claims and their criteria"
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
    """Smallest full-batch over largest minibatch recovery factor (:func:`maskfed.analysis.summary.table1_contrast`)."""
    full = _is_full(t1)
    rec = t1["recovery_unweighted"]
    return float(rec[full].min() / rec[~full].max())


def log_span(values) -> float:
    """log(max / min) of positive values (natural log)."""
    v = np.asarray(values, dtype=float)
    return float(np.log(v.max() / v.min()))


def span_ratio(t1: pd.DataFrame, t2: pd.DataFrame) -> float:
    """Log-span of unweighted 1/Δ_S over Table II's α divided by its log-span over Table I's protocols;
    infinite when the protocols do not move it."""
    protocols = log_span(t1["recovery_unweighted"])
    return log_span(t2["recovery_unweighted"]) / protocols if protocols > 0 else math.inf


def spearman(a, b) -> float:
    """Spearman rank correlation of two aligned series (:func:`maskfed.analysis.summary.rank_correlation`)."""
    return summary.rank_correlation(pd.Series(np.asarray(a, float)), pd.Series(np.asarray(b, float)))


def falling_groups(t1: pd.DataFrame, column: str = "recovery_unweighted") -> tuple[int, int]:
    """(batch sizes whose value falls strictly as τ grows, batch sizes with two or more τ)."""
    o = summary.protocol_orderings(t1, column)
    return o["n_falling"], o["n_groups"]


def majority(passed: int, groups: int) -> bool:
    """True when more than half of ``groups`` passed: what "partly" asks of a claim about every group."""
    return groups > 0 and 2 * passed > groups


def interval_of(stat, tables, reps) -> Interval:
    """``stat`` with its interval, or a degenerate interval when there are no replicates."""
    if any(r is None for r in reps):
        v = stat(*tables)
        return Interval(v, math.nan, math.nan)
    return uncertainty.bootstrap(stat, tables, reps)


def _text(iv: Interval, fmt: str = ".2f") -> str:
    return f"{iv.estimate:{fmt}}" if math.isnan(iv.low) else iv.text(fmt)


def _bound(iv: Interval, side: str) -> float:
    """The interval's lower or upper end, or the estimate when there is no interval."""
    v = iv.low if side == "low" else iv.high
    return iv.estimate if math.isnan(v) else v


def _proto(p) -> str:
    return f"full batch, τ {p[1]}" if str(p[0]) == "full" else f"bs {p[0]}, τ {p[1]}"


# --------------------------------------------------------------------------- the claims

def _numbers(iv: Interval, prefix: str = "") -> dict:
    """An interval's estimate and ends by name (``estimate``, ``low``, ``high``, each after ``prefix``)."""
    return {f"{prefix}estimate": iv.estimate, f"{prefix}low": iv.low, f"{prefix}high": iv.high}


def _cliff(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    iv = interval_of(cliff, [t1], [ev.reps1])
    lo = _bound(iv, "low")
    verdict = "holds" if lo >= 2 else "partly" if lo > 1 else "does not hold"
    return Finding(_text(iv), verdict, _numbers(iv))


def _floor(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    mini = lambda t: t[~_is_full(t)]["recovery_unweighted"]  # noqa: E731
    hi = interval_of(lambda t: float(mini(t).max()), [t1], [ev.reps1])
    lo = float(mini(t1).min())
    verdict = ("holds" if _bound(hi, "high") <= 1.5 and lo >= 1 else
               "partly" if hi.estimate <= 2 and lo >= 0.9 else "does not hold")
    return Finding(f"{lo:.2f}–{hi.estimate:.2f}", verdict, {"lowest": lo, **_numbers(hi, "largest_")})


def _tau(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    n, groups = falling_groups(t1)
    # the share of bootstrap replicates in which every batch size falls (percent; NaN without replicates)
    share = math.nan if ev.reps1 is None else 100 * float(np.mean([falling_groups(r)[0] == groups for r in ev.reps1]))
    verdict = "holds" if n == groups else "partly" if majority(n, groups) else "does not hold"
    return Finding(f"{n} of {groups} batch sizes", verdict, {"n_falling": n, "groups": groups, "pct_all_falling": share})


def _monotone_t(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    inv = summary.t_inversions(t1)
    if not inv:
        return Finding("no inversion", "holds", {"inversions": 0, "within_rounding": 0, "clear": 0})
    # printed values: a rise of one printed unit can come from true values any small distance apart (1.18 and 1.19
    # are 1.175-1.185 and 1.185-1.195), too small to decide the claim: "within rounding", not an inversion
    if ev.print_unit is not None:
        rec = t1["recovery_unweighted"]
        beyond = [(a, b) for a, b in inv if rec.loc[b] - rec.loc[a] > ev.print_unit * (1 + 1e-9)]
        if not beyond:
            return Finding(f"{len(inv)} within rounding", "holds",
                           {"inversions": 0, "within_rounding": len(inv), "clear": 0})
        inv = beyond
    clear = inv
    if ev.reps1 is not None:  # an inversion within the bootstrap spread of the two cells is not clear
        def cell(p):
            return uncertainty.interval(t1.loc[p, "recovery_unweighted"],
                                        [r.loc[p, "recovery_unweighted"] for r in ev.reps1])
        clear = [(a, b) for a, b in inv if cell(b).low > cell(a).high]
    verdict = "does not hold" if clear else "partly"
    return Finding(f"{len(inv)} inversion{'s' if len(inv) > 1 else ''}", verdict,
                   {"inversions": len(inv), "within_rounding": 0, "clear": len(clear)})


def rising_groups(t1: pd.DataFrame, column: str = "mu2_hat") -> list[str]:
    """Batch sizes (as text) whose ``column`` rises strictly as τ grows."""
    bs = t1.index.get_level_values("batch_size").astype(str)
    out = []
    for b, g in t1[column].groupby(bs, sort=False):
        g = g.sort_index(level="local_epochs")
        if len(g) >= 2 and (g.diff().dropna() > 0).all():
            out.append(b)
    return out


def _signal_steps(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    rising = rising_groups(t1)
    groups = t1.index.get_level_values("batch_size").astype(str).unique()
    verdict = ("holds" if len(rising) == len(groups) else "partly" if majority(len(rising), len(groups))
               else "does not hold")
    return Finding(f"{len(rising)} of {len(groups)} batch sizes", verdict,
                   {"n_rising": len(rising), "groups": len(groups)})


def _alpha_span(ev: Evidence) -> Finding:
    t1, t2 = _need(ev.table1), _need(ev.table2)
    iv = interval_of(span_ratio, [t1, t2], [ev.reps1, ev.reps2])
    verdict = "holds" if _bound(iv, "high") < 0.5 else "partly" if iv.estimate < 1 else "does not hold"
    return Finding(_text(iv), verdict, {**_numbers(iv), "alpha_lo": float(t2["recovery_unweighted"].min()),
                                        "alpha_hi": float(t2["recovery_unweighted"].max()),
                                        "proto_lo": float(t1["recovery_unweighted"].min()),
                                        "proto_hi": float(t1["recovery_unweighted"].max())})


def _alpha_weighting(ev: Evidence) -> Finding:
    t2 = _need(ev.table2)
    lo_a, hi_a = min(t2.index), max(t2.index)

    def rise(t, col="recovery_unweighted"):
        return float(t.loc[lo_a, col] / t.loc[hi_a, col])

    iv_u = interval_of(rise, [t2], [ev.reps2])
    iv_w = interval_of(lambda t: rise(t, "recovery_weighted"), [t2], [ev.reps2])
    lu, lw = math.log(iv_u.estimate), abs(math.log(iv_w.estimate))
    flat = 1 / FLAT <= _bound(iv_w, "low") and _bound(iv_w, "high") <= FLAT
    verdict = ("holds" if _bound(iv_u, "low") > 1 and flat else
               "partly" if lu > 0 and lw < abs(lu) / 2 else "does not hold")
    return Finding(f"×{_text(iv_u)} vs ×{_text(iv_w)}", verdict,
                   {**_numbers(iv_u, "unweighted_"), **_numbers(iv_w, "weighted_"), "alpha_low": float(lo_a),
                    "alpha_high": float(hi_a)})


#: "Flat" for the n_k-weighted factor across α: its ratio α = 0.1 / α = 100 within [1/FLAT, FLAT]
#: (interval included). Ours: the paper calls 1.19, 1.17, 1.18 "flat", a spread under 2 %.
FLAT = 1.05


def _below_one(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    pct = t1["pct_rounds_below_one"]
    noisiest = t1["sigma2_hat"].nlargest(3).index
    mini = t1[~_is_full(t1)]
    rho = spearman(mini["sigma2_hat"], mini["pct_rounds_below_one"]) if mini["pct_rounds_below_one"].nunique() > 1 else 0.0
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
    dec_s = log_span(t1["sigma2_hat"]) / math.log(10)
    dec_m = log_span(t1["mu2_hat"]) / math.log(10)
    rho = spearman(t1["mu2_hat"], t1["recovery_unweighted"])
    verdict = ("holds" if dec_s >= 2 and dec_m <= dec_s / 2 and rho < 0 else
               "partly" if dec_m < dec_s else "does not hold")
    return Finding(f"σ̂² {dec_s:.1f}, ‖μ̂‖² {dec_m:.1f} decades; r_s(‖μ̂‖², 1/Δ_S) = {rho:+.2f}", verdict,
                   {"decades_sigma": dec_s, "decades_mu": dec_m, "rho": rho})


def _tradeoff(ev: Evidence) -> Finding:
    t1 = _need(ev.table1)
    stat = lambda t: spearman(t["recovery_unweighted"], t["test_acc"])  # noqa: E731
    iv = interval_of(stat, [t1], [ev.reps1])
    verdict = ("holds" if iv.estimate <= -0.5 and _bound(iv, "high") < 0 else
               "partly" if iv.estimate < 0 else "does not hold")
    return Finding(_text(iv, "+.2f"), verdict, _numbers(iv))


def _stage(ev: Evidence) -> Finding:
    st = _need(ev.stage)
    by_range = st["by_range"]
    verdicts = set(by_range.values())
    part = sum(v in ("sampling", "both") for v in by_range.values())
    verdict = ("holds" if verdicts == {"sampling"} else
               "partly" if majority(part, len(by_range)) else "does not hold")
    value = "; ".join(f"{k}: {v}" for k, v in by_range.items())
    if st.get("before"):  # shown apart, not counted (the protocols have not separated yet there)
        value += "; not counted, " + "; ".join(f"{k}: {v}" for k, v in st["before"].items())
    return Finding(value, verdict, {"ranges": len(by_range), "n_sampling": part})


def _control(ev: Evidence) -> Finding:
    c = _need(ev.control)
    verdict = "holds" if c["deviation"] <= c["tolerance"] else "does not hold"
    return Finding(f"{c['deviation']:.1e} (≤ {c['tolerance']:.0e})", verdict,
                   {"deviation": float(c["deviation"]), "tolerance": float(c["tolerance"])})


def paper_numbers() -> dict:
    """The paper's numbers its claims quote (``notebooks/verdict.md``'s table of the claims glues them), read from
    its tables (``paper/*.csv``), not typed: the minibatch range of 1/Δ_S (``mini_lo``, ``mini_hi``), its range over
    the protocols (``proto_lo``, ``proto_hi``) and over α (``alpha_lo``, ``alpha_hi``), unweighted; the largest share
    of rounds below 1 (``below_max``, percent) and its protocol (``below_bs``, batch size as text; ``below_tau``)."""
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

#: Checks of the code, not claims of the paper: judged like a claim, never counted among the verdicts.
#: The control's 1/Δ_S = K_c holds by construction when the code is right, so it tests the measurement.
CODE_CHECKS: tuple[Claim, ...] = (
    Claim("control", "Control", "Sec. IV-A", _control),
)

#: The claims a run still falling at its end bears on (issue 27): each compares Table I cells whose order a
#: further fall could change.
TREND_CLAIMS = ("cliff", "tau", "monotone_t")

#: |t| of a drift (difference of two cells' slopes over its standard error) beyond which the gap between the
#: two cells is said to be moving (ours: the trend test's own threshold, 2).
DRIFT_T = 2.0
#: False discovery rate of the drifts over every pair the trend claims compare (Benjamini-Hochberg; ours).
TREND_FDR = 0.05


def not_settled(bearing: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    """Which verdicts a longer run could still change (issue 40: "not settled"): a claim that holds, in whole or in
    part, with a gap moving against it, or one that does not hold with a gap moving toward it; the drift moves
    it toward its criterion's boundary.

    Args:
        bearing: :func:`trend_bearing` of the source that gave the verdicts.
        verdicts: :func:`verdict_table` (column ``verdict``).

    Returns:
        Index ``claim`` (those of ``bearing``); columns ``settled`` (bool), ``rate`` (the drift toward the
        boundary, percent of the gap per round; NaN when settled) and ``meet`` (rounds until a closing gap meets,
        for a claim that holds; NaN otherwise).
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
    """The pairs of Table I cells a claim of :data:`TREND_CLAIMS` compares, each as (the cell the claim wants
    larger, the cell it wants smaller): the cliff's smallest full-batch and largest minibatch cell; for "falls
    with τ" the cells adjacent in τ within each batch size; for "monotone in T" the cells adjacent in local
    steps T within the full-batch and the minibatch group.

    Raises:
        ValueError: ``key`` not in :data:`TREND_CLAIMS`.
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
    """Would a longer run change the claims of :data:`TREND_CLAIMS`? Per pair of cells a claim compares
    (:func:`trend_pairs`), the gap g = log(larger-wanted / smaller-wanted) of their 1/Δ_S and its drift
    d = slope(larger-wanted) − slope(smaller-wanted), the slopes of log 1/Δ_S per round at the runs' end.

    A drift is "against" the claim when d < 0 with |d| / se(d) > :data:`DRIFT_T` (the gap closes, or an
    inversion widens), "toward" it when d > 0 likewise, else steady. Where a drift against the claim
    closes a gap that holds, the rounds until the two cells meet at that rate are g / |d| (a straight-line
    extrapolation in log, ours; a slowing fall meets later or never).

    Args:
        t1: a Table I summary (:func:`maskfed.studies.experiments.table1`), index (batch_size as text,
            local_epochs), columns ``recovery_unweighted`` and ``T_mean``.
        trends: same index, columns ``falling`` and ``runs`` (runs still falling, runs tested), ``slope``
            (mean over runs, natural-log units per round) and ``se`` (its standard error).

    A drift counts only where Benjamini-Hochberg at :data:`TREND_FDR` over every pair of every claim keeps it.

    Returns:
        Index ``claim``; columns ``n_still`` and ``n_cells`` (cells still falling, most of their runs, and cells
        compared), ``still`` (the two as read by the verdict page, e.g. "7 of 9 cells"),
        ``way`` ("against", "toward", "both ways" or "steady"), ``meet`` (fewest rounds until a pair that holds
        meets, NaN if none closes), ``against_rate`` / ``toward_rate`` (the fastest drift each way, percent of the
        gap per round; NaN where none) and ``pairs`` (the moving pairs as text).

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

    # every pair any claim compares, tested together: |d| / se beyond DRIFT_T and kept by Benjamini-Hochberg at
    # TREND_FDR over all of them (a two-sided normal p-value per pair), so that many pairs do not make moving gaps
    every = list(dict.fromkeys(p for key in TREND_CLAIMS for p in trend_pairs(t1, key)))
    stats = [drift(a, b) for a, b in every]
    pvals = [math.erfc(abs(d) / se / math.sqrt(2)) if se > 0 else 1.0 for d, se in stats]
    moving = {pair for pair, (d, se), keep in zip(every, stats, uncertainty.benjamini_hochberg(pvals, TREND_FDR))
              if keep and se > 0 and abs(d) / se > DRIFT_T}
    rows = []
    for key in TREND_CLAIMS:
        pairs = trend_pairs(t1, key)
        cells = {p for pair in pairs for p in pair}
        still = sum(2 * int(trends.loc[p, "falling"]) > int(trends.loc[p, "runs"]) for p in cells)
        ways, meets, texts, rates = set(), [], [], {"against": [], "toward": []}
        for a, b in pairs:
            g = math.log(rec[a] / rec[b])
            d, se = drift(a, b)
            if (a, b) not in moving:
                continue
            way = "toward" if d > 0 else "against"
            ways.add(way)
            rates[way].append(100 * abs(d))
            meet = g / -d if way == "against" and g > 0 else math.nan
            meets.append(meet)
            texts.append(f"{_proto(a)} over {_proto(b)}: ×{math.exp(g):.2f}, {way} at {100 * d:+.2f} % a round"
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
    """The paper's own Tables I and II as :class:`Evidence` (no intervals, no control or stage data; compared at
    their printing precision, :data:`PAPER_PRINT_UNIT`)."""
    return Evidence("paper's tables", summary.paper_table("table1"), summary.paper_table("table2"),
                    print_unit=PAPER_PRINT_UNIT)


def verdict_table(evidence: list[Evidence], claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One row per claim: the paper's own number, then each evidence's value and verdict.

    Args:
        evidence: the sources, closest to the paper's setting first; the first that measures a claim
            gives its overall verdict.
        claims: the claims (default :data:`CLAIMS`).

    Returns:
        Index ``claim`` (its key); columns ``title``, ``statement``, ``where``, ``paper`` (value on the
        paper's tables), ``paper_verdict``, ``<name>`` and ``<name> verdict`` per evidence, and
        ``verdict`` / ``from`` (the overall verdict and the evidence that gave it).
    """
    paper = paper_evidence()
    rows = []
    for c in claims:
        p = c.evaluate(paper)
        row = {"claim": c.key, "title": c.title, "where": c.where, "paper": p.value,
               "paper_verdict": p.verdict}
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


def confounded(protocol: str, matched: str) -> bool:
    """Whether the verdict at the paper's protocols and the one at matched stage (the same θ for every protocol or
    α: :func:`maskfed.book.evidence.matched_stage_verdicts`) disagree in direction: one holds, at least in part,
    and the other does not hold."""
    ok = {"holds", "partly"}
    return (protocol in ok and matched == "does not hold") or (protocol == "does not hold" and matched in ok)


def with_matched_view(verdicts: pd.DataFrame, matched: pd.DataFrame | None) -> pd.DataFrame:
    """The overall verdicts once the matched-stage view is weighed (issue 40): where it disagrees in direction
    with the verdict at the paper's protocols (:func:`confounded`), the matched view decides and the claim is
    "confounded by stage": what separates the protocols there is where they are in training, not the protocol.

    Args:
        verdicts: :func:`verdict_table` (column ``verdict``).
        matched: :func:`maskfed.book.evidence.matched_stage_verdicts` (column ``verdict``), or None.

    Returns:
        ``verdicts`` with ``protocol_verdict`` (the verdict before the matched view was weighed) and ``verdict``
        set to "confounded by stage" where the two views disagree in direction.
    """
    out = verdicts.copy()
    out["protocol_verdict"] = out["verdict"]
    if matched is None:
        return out
    for key in out.index:
        if key in matched.index and confounded(out.loc[key, "verdict"], matched.loc[key, "verdict"]):
            out.loc[key, "verdict"] = "confounded by stage"
    return out


# --------------------------------------------------------------------------- the matched-stage vote (issue 40, item 5)

#: Claims not judged at matched stage: the stage study draws cohorts at a fixed θ, not rounds along a trajectory
#: (below_one); every protocol is measured at the same θ, so at the same accuracy (tradeoff); the stage claim is
#: itself judged from the stage study (stage).
NOT_AT_MATCHED_STAGE = ("below_one", "tradeoff", "stage")

#: The claims whose criterion orders pairs of cells, voted pair by pair (:func:`pair_votes`): claim key ->
#: (the pairs' recipe of :func:`trend_pairs`, the column, whether the claim wants the value to rise along the pair).
PAIR_CLAIMS = {"tau": ("tau", "recovery_unweighted", False),
               "monotone_t": ("monotone_t", "recovery_unweighted", False),
               "signal_steps": ("tau", "mu2_hat", True)}

#: A checkpoint's votes (:func:`checkpoint_vote`), strongest first: "within tolerance" fails on the median over
#: seeds but not on the interval, so it counts neither for nor against the claim.
VOTES = ("holds", "partly", "within tolerance", "does not hold", "not measured here")

_RANK = {"holds": 0, "partly": 1, "does not hold": 2}


def pair_votes(median: pd.DataFrame, seeds: list[pd.DataFrame], key: str) -> pd.DataFrame:
    """Each pair of cells a claim of :data:`PAIR_CLAIMS` orders, judged with its interval: the difference
    d = log(cell the claim wants larger / the other) on the median table and on each seed's own table (paired:
    both cells measured at that seed's θ).

    A pair votes "for" where d > 0 on the median table; otherwise "against" only where the seed range of d
    excludes the claim's side (every seed has d ≤ 0), else "within tolerance".

    Args:
        median: a Table I at one checkpoint (median over seeds; index batch size as text, τ; ``T_mean`` for
            "monotone_t").
        seeds: the same table for each seed alone (may be empty: then no tolerance, the median decides).
        key: a key of :data:`PAIR_CLAIMS`.

    Returns:
        One row per pair: ``larger``, ``smaller`` (the cells, as index tuples: the claim wants the first larger),
        ``group`` (batch size for τ, "full"/"minibatch" for T), ``d``, ``d_low``, ``d_high`` (NaN without seeds)
        and ``vote`` ("for", "within tolerance", "against").
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
    """The claim's criterion on :func:`pair_votes` with every pair "within tolerance" given the benefit of the
    doubt: only the "against" pairs break a group."""
    votes = pair_votes(median, seeds, key)
    broken = set(votes.loc[votes["vote"] == "against", "group"])
    if key == "monotone_t":
        return "does not hold" if broken else "holds"
    bs = median.index.get_level_values("batch_size").astype(str)
    sizes = bs.value_counts()
    groups = sizes.index if key == "signal_steps" else sizes[sizes >= 2].index
    ok = sum(g not in broken and sizes[g] >= 2 for g in groups)
    return "holds" if ok == len(groups) else "partly" if majority(ok, len(groups)) else "does not hold"


def checkpoint_vote(claim: Claim, median: Evidence, seeds: list[Evidence]) -> str:
    """A claim's vote at one matched-stage checkpoint, with its interval (:data:`VOTES`).

    The claim's criterion on the median over seeds decides "holds" and "partly". Where it does not hold, the
    checkpoint votes "does not hold" only when the interval excludes the claim's side too, else "within
    tolerance": for the claims of :data:`PAIR_CLAIMS` pair by pair (:func:`pair_votes`: an inversion counts only
    where every seed shows it); for the others when the criterion fails on every seed's own tables (the seed
    range of its statistic lies on the failing side).

    Args:
        claim: one of :data:`CLAIMS`.
        median: the checkpoint's tables, medians over seeds, as :class:`Evidence` (no replicates).
        seeds: each seed's tables at that checkpoint, as :class:`Evidence` (may be empty: the median decides).
    """
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
    """A claim's matched-stage verdict from its checkpoints' votes (:func:`checkpoint_vote`), each weighted:
    "holds" if every counted checkpoint votes "holds"; "does not hold" if those voting "does not hold" carry more
    than half the counted weight; else "partly" ("within tolerance" counts neither for nor against). A checkpoint
    of weight 0 (before the paper's accuracy range) is shown, not counted.

    Args:
        votes: one vote per checkpoint (:data:`VOTES`).
        weights: same index, ≥ 0 (None: 1 each).

    Returns:
        ``{"verdict", "weight" (counted weight), "n" (checkpoints counted), "n_holds", "n_partly", "n_tolerance",
        "n_fail" (voting "does not hold"), "fail_share" (their weight over the counted weight; NaN when none)}``.
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
