"""How sure is a comparison? Seed ranges, bootstrap intervals and trend tests for the book's tables.

The paper reports the median over 3 seeds of each run's last-50-round median, with no uncertainty.
Here each cell gets its seed range (:func:`seed_range`) and bootstrap replicates of the whole table
(:func:`replicate_tables`: seeds redrawn jointly, window rounds by a moving-block bootstrap, Künsch 1989),
giving percentile intervals (:func:`bootstrap`, :func:`interval`). :func:`trend_test`: a series is
"still falling" when its second-half log-slope is significantly negative with a Newey-West (HAC)
standard error (Newey & West 1987, via statsmodels).

These choices (percentile intervals, block length, HAC lag rule, two-sided 5 % test) are ours.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from maskfed.analysis.summary import METRICS, tail_window
from maskfed.engine.runner import RunResult

#: Rounds per block of the moving-block bootstrap over a run's summary window (ours: a few rounds,
#: longer than the lag at which the per-round recovery factor of the archived runs decorrelates).
BLOCK = 5
#: Bootstrap replicates (ours: enough for stable 5 % and 95 % percentiles of a smooth statistic).
N_BOOT = 1000
#: Coverage of the reported intervals (ours).
LEVEL = 0.9
#: |t| beyond which a trend counts as significant (two-sided 5 %, normal approximation).
T_CRITICAL = 1.96


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap percentile interval."""

    estimate: float
    low: float
    high: float
    level: float = LEVEL

    def text(self, fmt: str = ".2f") -> str:
        """The estimate and the interval as ``"<estimate> [<low>, <high>]"``."""
        return f"{self.estimate:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def interval(estimate: float, replicates: Iterable[float], level: float = LEVEL) -> Interval:
    """A percentile interval: the ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the replicates (NaN dropped).

    Raises:
        ValueError: ``level`` outside (0, 1), or no finite replicate.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    reps = np.asarray(list(replicates), dtype=float)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        raise ValueError("no finite bootstrap replicate to form an interval from")
    low, high = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(estimate), float(low), float(high), level)


def _key(r: RunResult, by: list[str]):
    vals = tuple(str(getattr(r.config, f)) if f == "batch_size" else getattr(r.config, f) for f in by)
    return vals if len(vals) > 1 else vals[0]




def _block_indices(n: int, block: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices of ``n_boot`` moving-block bootstrap samples of a series of length ``n``, [n_boot, n]."""
    if n <= block:
        return rng.integers(0, n, size=(n_boot, n))
    starts = rng.integers(0, n - block + 1, size=(n_boot, math.ceil(n / block)))
    return (starts[:, :, None] + np.arange(block)).reshape(n_boot, -1)[:, :n]


def _run_rng(seed: int, r: RunResult) -> np.random.Generator:
    """Generator of one run's round resamples, keyed by its label: the same draw in every table."""
    digest = hashlib.sha256(r.config.label().encode()).digest()
    return np.random.default_rng([seed, 7920, *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def replicate_tables(results: list[RunResult], by: list[str], columns=METRICS, *, n_boot: int = N_BOOT,
                     block: int = BLOCK, seed: int = 0) -> list[pd.DataFrame]:
    """Bootstrap replicates of a summary table (:func:`maskfed.analysis.summary.summarize` layout).

    Seeds are drawn with replacement once per replicate for every setting (shared across a profile's
    protocols); each drawn seed's window rounds by a moving-block bootstrap from a generator keyed by
    the run, so a run in two tables gets the same draw in both, and tables built with the same ``seed``
    resample jointly (ratios of their cells are valid).

    Returns:
        ``n_boot`` DataFrames indexed like ``summarize(results, by)`` with ``columns``.

    Raises:
        ValueError: ``n_boot`` or ``block`` < 1, or no results.
    """
    settings, cells = _replicate_cells(results, by, columns, n_boot=n_boot, block=block, seed=seed)
    names = list(settings)
    index = pd.MultiIndex.from_tuples(names, names=by) if len(by) > 1 else pd.Index(names, name=by[0])
    return [pd.DataFrame(cells[b], index=index, columns=list(columns)) for b in range(n_boot)]


def _replicate_cells(results: list[RunResult], by: list[str], columns, *, n_boot: int, block: int,
                     seed: int) -> tuple[dict, np.ndarray]:
    """:func:`replicate_tables`' work: ``({setting: runs}, cells [n_boot, settings, columns])``."""
    if n_boot < 1 or block < 1:
        raise ValueError(f"n_boot and block must be >= 1; got n_boot = {n_boot}, block = {block}")
    if not results:
        raise ValueError("results must hold at least one run")
    settings: dict = {}
    for r in results:
        settings.setdefault(_key(r, by), []).append(r)
    all_seeds = sorted({r.config.seed for r in results})
    drawn_BxS = np.random.default_rng([seed, 7919]).integers(0, len(all_seeds), size=(n_boot, len(all_seeds)))
    cells = np.full((n_boot, len(settings), len(columns)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column with no value in a resample stays NaN
        for j, runs in enumerate(settings.values()):
            runs = sorted(runs, key=lambda r: r.config.seed)
            n_seeds = len(runs)
            if [r.config.seed for r in runs] == all_seeds:
                drawn = drawn_BxS
            else:  # other seeds than the rest: a draw of its own
                drawn = np.random.default_rng([seed, 7919, j]).integers(0, n_seeds, size=(n_boot, n_seeds))
            # meds[k][s]: run k's window medians [n_boot, C] for slot s, from its own generator
            meds = []
            for r in runs:
                w = r.metrics.tail(tail_window(len(r.metrics)))[list(columns)].to_numpy(float)
                rng = _run_rng(seed, r)
                meds.append(np.stack([np.nanmedian(w[_block_indices(len(w), block, n_boot, rng)], axis=1)
                                      for _ in range(n_seeds)]))
            meds_KxSxBxC = np.stack(meds)
            slots = [meds_KxSxBxC[drawn[:, s], s, np.arange(n_boot)] for s in range(n_seeds)]
            cells[:, j] = np.nanmedian(np.stack(slots), axis=0)
    return settings, cells


def bootstrap(statistic: Callable[..., float], tables: list[pd.DataFrame],
              replicates: list[list[pd.DataFrame]], level: float = LEVEL) -> Interval:
    """``statistic(*tables)`` with its bootstrap interval; replicate b of every table enters the b-th value together.

    Raises:
        ValueError: replicate lists of different lengths (or as :func:`interval`).
    """
    if len({len(r) for r in replicates}) != 1 or len(replicates) != len(tables):
        raise ValueError("give one list of replicates per table, all of the same length")
    values = [statistic(*reps) for reps in zip(*replicates)]
    return interval(statistic(*tables), values, level)


def seed_range(results: list[RunResult], by: list[str], columns=METRICS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Min and max over seeds of each run's window median, per setting.

    Returns:
        ``(low, high)``, each indexed like :func:`maskfed.analysis.summary.summarize` with ``columns``.
    """
    from maskfed.analysis.summary import summarize_run

    rows = [{**dict(zip(by, _key(r, by) if len(by) > 1 else (_key(r, by),))), **summarize_run(r.metrics)}
            for r in results]
    per_run = pd.DataFrame(rows)
    grouped = per_run.groupby(by, sort=False)[list(columns)]
    return grouped.min(), grouped.max()


def seed_range_coverage(n_seeds: int) -> float:
    """Probability that [min, max] of ``n_seeds`` independent draws of a continuous distribution covers its
    median: 1 - 2 (1/2)^n, distribution-free (0.75 for 3 seeds, 0.9375 for 5).

    Raises:
        ValueError: ``n_seeds`` < 1.
    """
    if n_seeds < 1:
        raise ValueError(f"n_seeds must be >= 1; got {n_seeds}")
    return 1 - 2 * 0.5 ** n_seeds


def window_noise(results: list[RunResult], column: str = "recovery_unweighted") -> dict:
    """One setting's noise for :func:`simulated_coverage`.

    Returns ``between_sd`` (sd of seeds' window medians), ``within_sd`` and ``phi`` (sd and lag-1
    autocorrelation of rounds about their run's window mean, pooled), ``window``, ``n_seeds``.

    Raises:
        ValueError: fewer than 2 runs, or a window under 3 rounds.
    """
    wins = [r.metrics.tail(tail_window(len(r.metrics)))[column].to_numpy(float) for r in results]
    if len(wins) < 2 or min(len(w) for w in wins) < 3:
        raise ValueError("window_noise needs at least 2 runs with windows of 3 or more rounds")
    dev = [w - w.mean() for w in wins]
    lag = np.concatenate([d[1:] for d in dev]), np.concatenate([d[:-1] for d in dev])
    return {"between_sd": float(np.std([np.median(w) for w in wins], ddof=1)),
            "within_sd": float(np.std(np.concatenate(dev), ddof=1)), "phi": float(np.corrcoef(*lag)[0, 1]),
            "window": int(min(len(w) for w in wins)), "n_seeds": len(wins)}


def simulated_coverage(noise: dict, *, n_sims: int = 400, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """How often one cell's intervals cover the true median, on data drawn like ``noise`` (ours).

    Each data set: ``n_seeds`` window medians = truth + N(0, between_sd²), rounds with AR(1) noise
    (``phi``, ``within_sd``); intervals as :func:`replicate_tables` and :func:`interval`, seed range [min, max].

    Returns:
        ``{"bootstrap": share covered by the bootstrap interval, "seed_range": the same for the seed range, "n_sims"}``.

    Raises:
        ValueError: ``n_sims`` < 1, or a ``noise`` without two seeds.
    """
    from maskfed.engine.config import RunConfig

    if n_sims < 1 or noise["n_seeds"] < 2:
        raise ValueError(f"n_sims must be >= 1 and noise must hold >= 2 seeds; got {n_sims}, {noise['n_seeds']}")
    n, w = int(noise["n_seeds"]), int(noise["window"])
    rounds = 4 * w  # the summary window is the last quarter of the rounds: every round is in the window below
    configs = [RunConfig(seed=s, rounds=rounds) for s in range(n)]
    rng = np.random.default_rng([seed, 104729])
    phi = float(np.clip(noise["phi"], -0.99, 0.99))
    innov = noise["within_sd"] * math.sqrt(1 - phi ** 2)
    hit_boot = hit_range = 0
    for i in range(n_sims):
        runs, medians = [], []
        for cfg in configs:
            e = np.empty(rounds)
            e[0] = rng.normal(0, noise["within_sd"])
            for t in range(1, rounds):
                e[t] = phi * e[t - 1] + rng.normal(0, innov)
            x = rng.normal(0, noise["between_sd"]) + e
            runs.append(RunResult(cfg, None, pd.DataFrame({"recovery_unweighted": x}), {}))
            medians.append(float(np.median(x[-tail_window(rounds):])))
        _, cells = _replicate_cells(runs, ["alpha"], ["recovery_unweighted"], n_boot=n_boot, block=BLOCK,
                                    seed=seed * 1_000_003 + i)  # replicate_tables' draws, without its DataFrames
        iv = interval(float(np.median(medians)), cells[:, 0, 0])
        hit_boot += iv.low <= 0 <= iv.high
        hit_range += min(medians) <= 0 <= max(medians)
    return {"bootstrap": hit_boot / n_sims, "seed_range": hit_range / n_sims, "n_sims": n_sims}




def median_at_lowest_seed(n_seeds: int) -> float:
    """Probability that the median of a with-replacement draw of ``n_seeds`` distinct values (odd) is the
    lowest of them: Σ_{k > n/2} C(n, k) (1/n)^k (1 - 1/n)^(n-k); 7/27 for 3 seeds, 0.058 for 5. Above
    (1 - LEVEL)/2 the seed bootstrap's percentiles are extreme seeds, so its interval covers about as
    often as the seed range (:func:`seed_range_coverage`), not LEVEL.

    Raises:
        ValueError: ``n_seeds`` not a positive odd integer.
    """
    if n_seeds < 1 or n_seeds % 2 == 0:
        raise ValueError(f"n_seeds must be a positive odd integer; got {n_seeds}")
    q = 1 / n_seeds
    return sum(math.comb(n_seeds, k) * q ** k * (1 - q) ** (n_seeds - k) for k in range(n_seeds // 2 + 1, n_seeds + 1))


def hac_maxlags(n: int) -> int:
    """Newey-West lag truncation for ``n`` observations: floor(4 (n/100)^(2/9)) (Newey & West 1994)."""
    return int(math.floor(4 * (n / 100) ** (2 / 9)))


def trend_test(metrics: pd.DataFrame, column: str = "recovery_unweighted", frac: float = 0.5,
               lag_factor: float = 1.0) -> dict:
    """Is a per-round quantity still moving at the end of a run?

    Least-squares slope of log(column) on the round over the last ``frac`` of rounds, Newey-West (HAC)
    standard error; ``lag_factor`` scales :func:`hac_maxlags` (ours).

    Returns:
        ``slope`` (per round, natural-log units), ``se``, ``t``, ``p`` (two-sided, normal), ``n`` (rounds
        used), ``lags`` and ``verdict``: "falling" (t < -:data:`T_CRITICAL`), "rising" (t > :data:`T_CRITICAL`)
        or "flat".

    Raises:
        ValueError: ``frac`` outside (0, 1], ``lag_factor`` not positive, or fewer than 8 positive values in
            the window.
    """
    import statsmodels.api as sm

    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1]; got {frac}")
    if not lag_factor > 0:
        raise ValueError(f"lag_factor must be > 0; got {lag_factor}")
    tail = metrics.tail(max(8, int(round(len(metrics) * frac))))
    tail = tail[tail[column] > 0]
    if len(tail) < 8:
        raise ValueError(f"need at least 8 rounds with positive {column} in the window; got {len(tail)}")
    lags = int(round(lag_factor * hac_maxlags(len(tail))))
    y = np.log(tail[column].to_numpy(float))
    if np.ptp(y) == 0:  # a constant series has no trend (least squares would return a slope of rounding noise)
        return {"slope": 0.0, "se": 0.0, "t": 0.0, "p": 1.0, "n": len(tail), "lags": lags, "verdict": "flat"}
    x = sm.add_constant(tail["round"].to_numpy(float))
    fit = sm.OLS(y, x).fit(cov_type="HAC", cov_kwds={"maxlags": lags})
    slope, se = float(fit.params[1]), float(fit.bse[1])
    t = slope / se if se > 0 else (0.0 if slope == 0 else math.copysign(math.inf, slope))
    verdict = "falling" if t < -T_CRITICAL else "rising" if t > T_CRITICAL else "flat"
    return {"slope": slope, "se": se, "t": t, "p": math.erfc(abs(t) / math.sqrt(2)), "n": len(tail), "lags": lags,
            "verdict": verdict}


def benjamini_hochberg(pvalues, q: float = 0.05) -> np.ndarray:
    """Benjamini-Hochberg step-up rejections at false discovery rate ``q`` (Benjamini & Hochberg 1995).

    Rejects the k smallest p-values, k the largest rank with p_(k) <= k q / m; NaN never rejected, still counted.

    Returns:
        Boolean array [m], in the order given.

    Raises:
        ValueError: ``q`` outside (0, 1).
    """
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1); got {q}")
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable")
    below = np.nonzero(p[order] <= q * np.arange(1, m + 1) / m)[0]
    reject = np.zeros(m, dtype=bool)
    if len(below):
        reject[order[: below[-1] + 1]] = True
    return reject


def trend_counts(results: list[RunResult], column: str = "recovery_unweighted") -> dict:
    """How many runs are still falling, flat or rising (:func:`trend_test`), and the runs of each.

    Returns:
        ``{"falling": n, "flat": n, "rising": n, "too short": n, "runs": DataFrame (label, slope,
        t, verdict)}``; a run with fewer than 8 usable rounds in its second half is "too short".
    """
    rows = []
    for r in results:
        try:
            rows.append({"run": r.config.label(), **trend_test(r.metrics, column)})
        except ValueError:
            rows.append({"run": r.config.label(), "verdict": "too short"})
    table = pd.DataFrame(rows, columns=["run", "slope", "se", "t", "n", "verdict"])
    counts = table["verdict"].value_counts()
    return {**{v: int(counts.get(v, 0)) for v in ("falling", "flat", "rising", "too short")}, "runs": table}
