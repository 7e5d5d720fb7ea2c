"""Findings of the chapter "Measuring 1/Δ_S inside Flower" (``notebooks/flower.md``): the unmasked 1/Δ_S
(eq. 3, 8) that :class:`maskfed.integrations.flower.RecoveryFedAvg` logs in Flower's simulation engine against the
same rounds computed with no Flower, to float32 rounding (:func:`check_agreement`)."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from maskfed import book
from maskfed.book import plots
from maskfed.chapters.control import significant
from maskfed.engine.config import Profile, RunConfig, load_profile
from maskfed.integrations import flower

#: Largest relative gap allowed between the strategy's unmasked 1/Δ_S and run_fedavg's (float32 rounding).
AGREEMENT = 1e-5


class FlowerDisagrees(AssertionError):
    """The strategy's recovery factor and the independent computation's differ beyond :data:`AGREEMENT`."""


def check_agreement(table: pd.DataFrame, reference: pd.DataFrame, rounds: int, mask_keep_prob) -> float:
    """The largest relative gap between the strategy's and run_fedavg's unmasked 1/Δ_S.

    Raises:
        FlowerDisagrees: not ``rounds`` rounds in both, a gap of :data:`AGREEMENT` or more (or NaN), or the unmasked
            updates not "received" (no mask) or from "client metrics" (a mask)."""
    gaps = (table["recovery_unweighted"] / reference["recovery_unweighted"] - 1).abs()
    if len(gaps) != rounds or not gaps.max() < AGREEMENT:
        raise FlowerDisagrees(f"the strategy's 1/Δ_S and run_fedavg's differ: relative gaps {gaps.tolist()}")
    expected = "received" if mask_keep_prob is None else "client metrics"
    if list(table["unmasked_from"]) != [expected] * rounds:
        raise FlowerDisagrees(f"unmasked updates from {list(table['unmasked_from'])}, expected {expected!r} each round")
    return float(gaps.max())


@dataclass(frozen=True)
class Findings:
    """``values`` (glue names) and what the table and the figure are drawn from."""

    values: dict
    profile: Profile            # the profile whose first seed's run configuration was simulated
    cfg: RunConfig              # that run configuration
    table: pd.DataFrame         # the strategy's rounds (flower.history_table)
    reference: pd.DataFrame     # run_fedavg's rounds (flower.maskfed_reference; index: round)


def simulate_rounds(cfg: RunConfig, mask_keep_prob) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the strategy's rounds in Flower's simulation engine, :func:`flower.history_table`;
    run_fedavg's same rounds with no Flower, index: round)."""
    sim = flower.simulate(cfg, mask_keep_prob=mask_keep_prob, keep_updates=True)
    reference = pd.DataFrame(flower.maskfed_reference(cfg, mask_keep_prob=mask_keep_prob)).set_index("round")
    return flower.history_table(sim.strategy), reference


def findings(profile: str, *, data_path=None, overrides: dict | None = None, mask_keep_prob=None) -> Findings:
    """Simulate the first seed's run of ``profile`` in Flower and check it (:func:`check_agreement`);
    ``mask_keep_prob``: p of the clients' shared block mask (eq. 2), None: no mask.

    Raises:
        FlowerDisagrees: as :func:`check_agreement`."""
    prof = load_profile(profile, data_path=data_path, **(overrides or {}))
    cfg = prof.run(prof.seeds[0])
    table, reference = simulate_rounds(cfg, mask_keep_prob)
    gap = check_agreement(table, reference, cfg.rounds, mask_keep_prob)
    values = {"fl_rounds": cfg.rounds, "fl_kc": cfg.cohort_size, "fl_k": cfg.num_clients, "fl_gap": significant(gap, 2),
              "fl_p": "none" if mask_keep_prob is None else mask_keep_prob}
    return Findings(values, prof, cfg, table, reference)


def sources_table(table: pd.DataFrame, reference: pd.DataFrame, mask_keep_prob) -> pd.DataFrame:
    """Each round's 1/Δ_S (both conventions), σ̂² and ‖μ̂‖² per source (unmasked, masked under a
    mask, run_fedavg's); columns (metric, source)."""
    metrics = list(flower.METRICS)
    unmasked = "unmasked (received)" if mask_keep_prob is None else "unmasked (sent)"
    sources = {unmasked: table[metrics]}
    if mask_keep_prob is not None:
        sources["masked (received)"] = table[list(flower.MASKED_METRICS)].set_axis(metrics, axis=1)
    sources["run_fedavg (unmasked)"] = reference[metrics]
    return pd.concat(sources, axis=1).swaplevel(axis=1)[metrics]


def figure_rounds(table: pd.DataFrame, mask_keep_prob, cohort_size: int) -> plt.Figure:
    """The strategy's 1/Δ_S by round (and the masked updates' under a mask), with K_c and 1."""
    curves = ["recovery_unweighted", "recovery_weighted"] + ([] if mask_keep_prob is None
                                                             else ["masked_recovery_unweighted"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    table[curves].rename(columns={**book.HEADERS, "masked_recovery_unweighted": "masked (received), unwtd."}).plot(
        ax=ax, marker="o")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    ax.axhline(cohort_size, color="0.5", ls=":", label="$K_c$ (ceiling)")
    ax.axhline(1, color="0.5", ls="--", label="1")
    ax.set_xlabel("round")
    ax.set_ylabel("recovery factor $1/\\Delta_S$")
    ax.set_title("1/Δ_S per round")
    plots.legend_outside(ax, "below")
    return fig
