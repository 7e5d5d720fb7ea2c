"""Findings of the chapter "Measuring 1/Δ_S inside Flower" (``notebooks/flower.md``).

:func:`findings` checks that the unmasked recovery factor 1/Δ_S (eq. 3, 8) that
:class:`maskfed.integrations.flower.RecoveryFedAvg` logged in Flower's simulation engine
(:func:`maskfed.integrations.flower.simulate`, run in the chapter's visible cell) agrees with the one of
the same rounds computed again with no Flower (:func:`maskfed.integrations.flower.maskfed_reference`) to
float32 rounding (:func:`check_agreement`) and returns the page's glued values; :func:`sources_table` and
:func:`figure_rounds` draw the page's table and figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from maskfed import book
from maskfed.book import plots
from maskfed.engine.config import RunConfig
from maskfed.integrations import flower

#: Largest relative gap allowed between the strategy's unmasked 1/Δ_S and run_fedavg's (float32 rounding).
AGREEMENT = 1e-5


class FlowerDisagrees(AssertionError):
    """The strategy's recovery factor and the independent computation's differ beyond :data:`AGREEMENT`."""


def check_agreement(table: pd.DataFrame, reference: pd.DataFrame, rounds: int, mask_keep_prob) -> float:
    """The largest relative gap between the strategy's and run_fedavg's unmasked 1/Δ_S over the rounds.

    Raises:
        FlowerDisagrees: not ``rounds`` rounds in both, a gap of :data:`AGREEMENT` or more (or NaN), or
            the strategy's unmasked updates not from where they must be ("received" without a mask,
            "client metrics" under one).
    """
    gaps = (table["recovery_unweighted"] / reference["recovery_unweighted"] - 1).abs()
    if len(gaps) != rounds or not gaps.max() < AGREEMENT:
        raise FlowerDisagrees(f"the strategy's 1/Δ_S and run_fedavg's differ: relative gaps {gaps.tolist()}")
    expected = "received" if mask_keep_prob is None else "client metrics"
    if list(table["unmasked_from"]) != [expected] * rounds:
        raise FlowerDisagrees(f"unmasked updates from {list(table['unmasked_from'])}, expected {expected!r} each round")
    return float(gaps.max())


def masked_note(mask_keep_prob) -> str:
    """The clause the page adds under a mask: the received (masked) updates' values are not the paper's quantity."""
    return ("" if mask_keep_prob is None else
            "; the masked updates the server received give other values (the columns “masked (received)”, "
            "the strategy's masked_ metrics), which are not the paper's quantity")


def findings(cfg: RunConfig, table: pd.DataFrame, reference: pd.DataFrame, mask_keep_prob) -> dict:
    """The page's glued values, after :func:`check_agreement`.

    Args:
        cfg: the simulated run configuration (K_c, K and the rounds).
        table: the strategy's rounds (:func:`maskfed.integrations.flower.history_table`).
        reference: run_fedavg's rounds (:func:`maskfed.integrations.flower.maskfed_reference`, index: round).
        mask_keep_prob: keep probability p of the shared block mask (eq. 2); None: no mask.

    Returns:
        ``fl_rounds``, ``fl_kc``, ``fl_k``, ``fl_gap`` (largest relative gap, dimensionless), ``fl_p``
        (the mask in words) and ``fl_masked_note`` (:func:`masked_note`).

    Raises:
        FlowerDisagrees: as :func:`check_agreement`.
    """
    gap = check_agreement(table, reference, cfg.rounds, mask_keep_prob)
    return {"fl_rounds": cfg.rounds, "fl_kc": cfg.cohort_size, "fl_k": cfg.num_clients, "fl_gap": gap,
            "fl_p": "no mask" if mask_keep_prob is None else f"a shared block mask with p = {mask_keep_prob}",
            "fl_masked_note": masked_note(mask_keep_prob)}


def sources_table(table: pd.DataFrame, reference: pd.DataFrame, mask_keep_prob) -> pd.DataFrame:
    """Each round's 1/Δ_S (both conventions), σ̂² and ‖μ̂‖² from every source: the unmasked updates (received,
    or sent by the clients under a mask), the masked ones received (under a mask) and run_fedavg's;
    columns (metric, source)."""
    metrics = list(flower.METRICS)
    unmasked = "unmasked (received)" if mask_keep_prob is None else "unmasked (sent by the clients)"
    sources = {unmasked: table[metrics]}
    if mask_keep_prob is not None:
        sources["masked (received)"] = table[list(flower.MASKED_METRICS)].set_axis(metrics, axis=1)
    sources["run_fedavg (unmasked)"] = reference[metrics]
    return pd.concat(sources, axis=1).swaplevel(axis=1)[metrics]


def figure_rounds(table: pd.DataFrame, mask_keep_prob, cohort_size: int) -> plt.Figure:
    """The strategy's 1/Δ_S round by round (unweighted, weighted, and the masked updates' under a mask),
    with the ceiling K_c and 1."""
    curves = ["recovery_unweighted", "recovery_weighted"] + ([] if mask_keep_prob is None
                                                             else ["masked_recovery_unweighted"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    table[curves].rename(columns={**book.HEADERS, "masked_recovery_unweighted":
                                        "masked updates (received), unweighted"}).plot(ax=ax, marker="o")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    ax.axhline(cohort_size, color="0.5", ls=":", label="$K_c$ (ceiling)")
    ax.axhline(1, color="0.5", ls="--", label="1")
    ax.set_xlabel("round")
    ax.set_ylabel("recovery factor $1/\\Delta_S$")
    ax.set_title("1/Δ_S logged by the strategy, round by round")
    plots.legend_outside(ax, "below")
    return fig
