"""Figure helpers (maskfed.book.plots): Figure 1 with one filled series per source, plain log ticks."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from maskfed.book.plots import (cohort_size, plain_log_ticks, recovery_vs_accuracy, recovery_vs_parameters,  # noqa: E402
                                step_size)
from maskfed.fl import factor_axes  # noqa: E402
from maskfed.fl.summary import paper_table  # noqa: E402


def _summary(rec: float) -> pd.DataFrame:
    idx = pd.MultiIndex.from_tuples([("32", 1), ("full", 1)], names=["batch_size", "local_epochs"])
    return pd.DataFrame({"recovery_unweighted": [rec, 2 * rec], "test_acc": [0.5, 0.4]}, index=idx)


def test_recovery_vs_accuracy_draws_archived_sources_in_their_own_colour():
    fig, ax = plt.subplots()
    recovery_vs_accuracy(_summary(1.5), paper_table("table1"), ax=ax, ours_label="cpu",
                         others={"cpu-long (archived)": _summary(1.2)})
    points = [(c.get_offsets()[0].tolist(), tuple(c.get_facecolor().ravel())) for c in ax.collections]
    assert len(points) == 2 + 2 + 9                          # live, archived, the paper's nine protocols
    live, archived = points[:2], points[2:4]
    # accuracy stays a fraction, as the tables and prose write it (not 50 %)
    assert [p for p, _ in live] == [[0.5, 1.5], [0.4, 3.0]]
    assert [p for p, _ in archived] == [[0.5, 1.2], [0.4, 2.4]]
    assert "fraction" in ax.get_xlabel()
    assert live[0][1] != archived[0][1] and live[0][1]       # a (filled) colour per source
    assert all(face == () for _, face in points[4:])          # the paper's markers stay hollow
    labels = ax.get_legend_handles_labels()[1]
    assert "cpu-long (archived), bs=32" in labels and "cpu, bs=32" in labels




def test_plain_log_ticks_writes_plain_numbers_on_a_short_log_axis():
    # prepare: a log axis spanning less than a decade, where matplotlib writes 3×10⁰
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.set_ylim(2, 7)
    # execute
    plain_log_ticks(ax, "y")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]
    plt.close(fig)
    # assert
    assert "3" in labels and "5" in labels
    assert not any("×" in t or "$" in t for t in labels)  # no 3×10⁰ (mathtext)


def test_plain_log_ticks_refuses_an_unknown_axis():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="axis must be 'x' or 'y'"):
        plain_log_ticks(ax, "z")
    plt.close(fig)


def test_against_stage_writes_plain_ticks_on_a_short_log_axis():
    from maskfed.book.plots import against_stage

    # prepare: recovery factors between 2.2 and 2.7 (less than a decade)
    table = pd.DataFrame({"stage_acc": [0.1, 0.4], "batch_size": ["32", "32"], "local_epochs": [1, 1],
                          "v": [2.2, 2.7], "v_q1": [2.1, 2.6], "v_q3": [2.3, 2.8]})
    fig, ax = plt.subplots()
    # execute
    against_stage(table, "v", ax=ax)
    fig.canvas.draw()
    # assert: no "×10⁰" labels
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels()]
    assert any(labels) and not any("10^" in t or "times" in t for t in labels), labels


def test_cohort_size_draws_measured_points_eq12_lines_and_the_ceiling():
    eq12 = {"full": pd.DataFrame({"k_c": [2, 10], "median": [1.9, 8.0], "q1": [1.8, 7.5], "q3": [2.0, 8.5],
                                  "share": [0.95, 0.8], "share_q1": [0.9, 0.75], "share_q3": [1.0, 0.85],
                                  "predicted": [1.95, 8.2], "predicted_share": [0.975, 0.82], "r": [5.0, 5.0]})}
    fig, axes = plt.subplots(1, 2)
    cohort_size(eq12, axes=axes)
    left, right = axes
    ys = [line.get_ydata().tolist() for line in left.get_lines()]
    assert [1.95, 8.2] in ys and [2, 10] in ys             # eq. 12 and the ceiling K_c
    assert left.get_xscale() == "log" and "K_c" in right.get_xlabel() and "share" in right.get_ylabel()
    assert any("r = 5" in t for t in left.get_legend_handles_labels()[1])
    plt.close(fig)


def test_step_size_and_parameters_figures_draw_one_series_per_protocol():
    def row(bs, tau, lr, rec, params=17034, source="centralised", model="small_cnn_gn"):
        return {"batch_size": bs, "local_epochs": tau, "lr": lr, "recovery_unweighted": rec,
                "recovery_unweighted_q1": rec * 0.9, "recovery_unweighted_q3": rec * 1.1, "params": params,
                "source": source, "model": model, "target": 0.45}
    lr_table = pd.DataFrame([row("full", 1, lr, 6.0) for lr in (0.01, 0.02, 0.04)] +
                            [row("32", 1, lr, 1.2) for lr in (0.01, 0.02, 0.04)] +
                            [row("128", 1, 0.01, 1.4), row("128", 1, 0.04, 1.25)])
    fig, ax = plt.subplots()
    step_size(lr_table, ax=ax)
    assert ax.get_legend_handles_labels()[1] == ["bs=full, τ=1", "bs=32, τ=1", "bs=128, τ=1"]
    plt.close(fig)
    models = pd.DataFrame([row("full", 1, 0.01, 6.0, p) for p in (17034, 66058)] +
                          [row("32", 2, 0.01, 1.2, p) for p in (17034, 66058)])
    fig, ax = plt.subplots()
    recovery_vs_parameters(models, ax=ax, target=0.45, paper=factor_axes.paper_overview().drop(columns="cliff").iloc[0])
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == sorted(["full, τ 1", "bs 32, τ 2", "paper's Table I (own trajectories)"])
    crosses = [c for c in ax.collections if len(c.get_offsets()) == 9]
    assert len(crosses) == 1 and set(crosses[0].get_offsets()[:, 0]) == {11173962}
    plt.close(fig)
