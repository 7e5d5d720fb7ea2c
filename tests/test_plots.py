"""Figure helpers (maskfed.book.plots): Figure 1 with one filled series per source, plain log ticks."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from maskfed.book.plots import (cohort_size, ours_against_paper, own_trajectory, plain_log_ticks, recovery_vs_accuracy, recovery_vs_parameters,  # noqa: E402
                                step_size)
from maskfed.analysis.summary import paper_table  # noqa: E402
from maskfed.book import plots  # noqa: E402
from maskfed.studies import factor_axes  # noqa: E402


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


def test_recovery_vs_accuracy_gives_every_batch_size_its_marker_and_each_cohort_its_ceiling():
    from maskfed.book.plots import MARKERS, markers_for
    # prepare: a smoke-like run on bs 16 and 64 (K_c = 3) beside the paper's grid (K_c = 10)
    idx = pd.MultiIndex.from_tuples([("16", 1), ("64", 1), ("full", 1)], names=["batch_size", "local_epochs"])
    smoke = pd.DataFrame({"recovery_unweighted": [2.1, 2.4, 2.5], "test_acc": [1.0, 1.0, 1.0]}, index=idx)
    # execute
    fig, ax = plt.subplots()
    recovery_vs_accuracy(smoke, paper_table("table1"), ax=ax, ours_label="smoke", k_c={"smoke": 3, "paper": 10})
    # assert: five batch sizes, five markers (16 and 64 had shared one), the paper's three kept
    marks = markers_for(["16", "64", "32", "128", "full"])
    assert len(set(marks.values())) == 5 and all(marks[b] == MARKERS[b] for b in MARKERS)
    # assert: one dashed ceiling per cohort size, each named with its sources
    ceilings = sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--")
    assert ceilings == [3, 10]
    labels = ax.get_legend_handles_labels()[1]
    assert "ceiling K_c = 3 (smoke)" in labels and "ceiling K_c = 10 (the rest)" in labels
    plt.close(fig)




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
    with pytest.raises(ValueError, match=r"axis .*'x'.*'y'"):
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


def test_ours_against_paper_draws_each_setting_its_seed_range_and_the_line_of_agreement():
    # prepare: two Table I settings and one Table II setting
    table = pd.DataFrame({"paper": [8.96, 1.19, 1.5], "ours": [4.0, 1.16, 1.7], "low": [3.0, 1.1, 1.6],
                          "high": [5.0, 1.2, 1.8], "table": ["I", "I", "II"]},
                         index=["full, τ 1", "bs 32, τ 2", "α = 0.1"])
    fig, ax = plt.subplots(figsize=(6.4, 5.4))
    # execute
    ours_against_paper(table, ax=ax)
    # assert: the y = x line spans both axes' limits; one label per setting; log axes
    line = next(l for l in ax.get_lines() if l.get_label() == "ours = the paper's")
    assert list(line.get_xdata()) == list(line.get_ydata()) == list(ax.get_xlim())
    assert sorted(t.get_text() for t in ax.texts) == sorted(table.index)
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    plt.close(fig)


def test_own_trajectory_draws_each_round_its_rolling_median_the_paper_and_the_measured_theta():
    # prepare: 6 rounds, factor 4, 2, 8, 1, 1, 1; the paper's 1.19; θ measured at rounds 2 and 5
    metrics = pd.DataFrame({"round": range(1, 7), "recovery_unweighted": [4.0, 2.0, 8.0, 1.0, 1.0, 1.0]})
    fig, ax = plt.subplots()
    # execute
    own_trajectory(metrics, paper=1.19, thetas=[2, 5], window=3, summarised=(5, 6), ax=ax)
    # assert: the rolling median of 3 (min_periods 1) is 4, 3, 4, 2, 1, 1; one dashed line at 1.19; θ marked;
    # rounds 5 and 6 shaded from half a round before the first to half a round after the last
    (span,) = ax.patches
    assert span.get_x() == 4.5 and span.get_width() == 2.0
    lines = {l.get_label(): l for l in ax.get_lines()}
    (rolling,) = [line for label, line in lines.items() if label.startswith("rolling median") and " 3 " in label]
    assert list(rolling.get_ydata()) == [4.0, 3.0, 4.0, 2.0, 1.0, 1.0]
    assert list(lines["the paper's Table I (1.19)"].get_ydata()) == [1.19, 1.19]
    assert [l.get_xdata()[0] for l in ax.get_lines() if l.get_linestyle() == ":"] == [2, 5]
    assert ax.get_yscale() == "log"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"window .*>= 1 round; got 0"):
        own_trajectory(metrics, paper=1.19, window=0)


def _factor_rows(bs, tau, lr, rec, params=17034, source="centralised", target=0.45):
    """One row of the step-size or model-size table of maskfed.studies.factor_axes (IQR ±10 %)."""
    return {"batch_size": bs, "local_epochs": tau, "lr": lr, "recovery_unweighted": rec,
            "recovery_unweighted_q1": rec * 0.9, "recovery_unweighted_q3": rec * 1.1, "params": params,
            "source": source, "model": "small_cnn_gn", "target": target}


@pytest.mark.slow
def test_factor_figures_follow_the_rules_as_the_chapter_draws_them():
    from maskfed.book.plots import STYLE, finish

    # prepare: three protocols on the cohort-size axis (K_c 2 to 100), the step-size axis, and two
    # targets of the model-size study with the paper's crosses on the last
    eq12 = {}
    for i, name in enumerate(["bs 32, τ 1", "bs 32, τ 5", "full, τ 1"]):
        ks = pd.Series([2, 5, 10, 20, 50, 100])
        med = 1.2 + i * ks ** 0.5
        eq12[name] = pd.DataFrame({"k_c": ks, "median": med, "q1": med * 0.9, "q3": med * 1.1, "share": med / ks,
                                   "share_q1": 0.9 * med / ks, "share_q3": 1.1 * med / ks, "predicted": med * 1.02,
                                   "predicted_share": 1.02 * med / ks, "r": 0.1 + i})
    lr_table = pd.DataFrame([_factor_rows(bs, tau, lr, rec) for bs, tau, rec in (("full", 1, 6.0), ("full", 2, 4.0),
                                                                                ("32", 1, 1.2))
                             for lr in (0.0025, 0.005, 0.01, 0.02, 0.04)]
                            + [_factor_rows("128", 1, 0.01, 1.4), _factor_rows("128", 1, 0.04, 1.25)])
    models = pd.DataFrame([_factor_rows(bs, tau, 0.01, rec * (1 + p / 1e6), p, source, target)
                           for target in (0.3, 0.45) for p in (17034, 66058, 11173962)
                           for bs, tau, rec in (("full", 1, 6.0), ("32", 2, 1.2))
                           for source in (["fedavg", "centralised"] if p == 17034 else ["centralised"])])
    paper = factor_axes.paper_overview().drop(columns="cliff").iloc[0]
    with plt.rc_context(STYLE):
        # execute / assert: each figure as the chapter draws it passes finish (which raises on a breach)
        fig, axes = plt.subplots(2, 1, figsize=(6.4, 8.4), sharex=True)
        cohort_size(eq12, axes=axes)
        finish(fig)
        shown = axes[1].get_legend().get_texts()
        assert len(shown) == 2 * len(eq12) + 1 and shown[-1].get_text() == "ceiling K_c"   # both panels' series
        assert all(ax.get_title() for ax in axes)
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        step_size(lr_table, ax=ax, title="step size")
        finish(fig)
        assert ax.get_title() == "step size" and ax.get_legend() is not None
        # a plain tick at every step size measured (0.0025 and 0.04 are no 2 or 5 times a power of ten)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.0025", "0.005", "0.01", "0.02", "0.04"]
        fig, axes = plt.subplots(2, 1, figsize=(6.4, 8.0), sharex=True)
        for i, (ax, t) in enumerate(zip(axes, (0.3, 0.45))):
            recovery_vs_parameters(models, ax=ax, target=t, paper=paper if i == 1 else None, legend=i == 1,
                                   title=f"θ at test accuracy ≥ {t:.2f}")
        finish(fig)
        assert axes[0].get_legend() is None and any(
            t.get_text().startswith("paper's Table I") and "own" in t.get_text() for t in axes[1].get_legend().get_texts())
        y_ticks = [t.get_text() for ax in axes for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels()]
        assert "2" in y_ticks and not any("10^" in t or "times" in t for t in y_ticks), y_ticks   # plain numbers
    plt.close("all")


# --- the book's figure rules (plots.figure_problems / finish) --------------------------------------


def _good_figure():
    """A figure that follows every rule: 6.4 in, labelled, titled, legend outside, log axis."""
    from maskfed.book.plots import STYLE, legend_outside

    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ax.plot([1, 10, 100, 1000], [0.01, 0.03, 1, 10], "o-", label="data")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("x (units)")
        ax.set_ylabel("y (units)")
        ax.set_title("a title")
        legend_outside(ax, "below")
    return fig, ax


def test_a_figure_that_follows_the_rules_has_no_problem():
    from maskfed.book.plots import finish

    fig, _ = _good_figure()
    finish(fig)   # raises if anything is wrong
    plt.close(fig)


@pytest.mark.parametrize("breach, found", [
    (lambda fig, ax: fig.set_size_inches(10, 4), "10 in wide"),
    (lambda fig, ax: ax.text(10, 1, "tiny", fontsize=6), "'tiny' is 6 pt"),
    (lambda fig, ax: ax.set_ylabel(""), "no y label"),
    (lambda fig, ax: ax.set_title(""), "no title"),
    (lambda fig, ax: ax.legend(loc="lower left"), "legend hides"),
    (lambda fig, ax: ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02)), "legend covers"),
    (lambda fig, ax: (ax.annotate("τ=1", (10, 0.1)), ax.annotate("τ=2", (10, 0.1))), "'τ=1' and 'τ=2' overlap"),
    (lambda fig, ax: ax.set_yscale("linear"), "y values span 3.0 decades on a linear axis, 50% of them"),
])
@pytest.mark.slow
def test_each_figure_rule_names_its_breach(breach, found):
    from maskfed.book.plots import FigureError, figure_problems, finish

    # prepare: a good figure with one breach
    fig, ax = _good_figure()
    breach(fig, ax)
    # execute
    problems = figure_problems(fig)
    # assert: that breach is reported, and finish refuses the figure
    assert any(found in p for p in problems), problems
    with pytest.raises(FigureError, match="figure rules"):
        finish(fig)
    plt.close(fig)


def test_place_labels_keeps_labels_of_coinciding_points_apart():
    from maskfed.book.plots import figure_problems, place_labels

    fig, ax = _good_figure()
    # prepare: four labels on nearly the same point (Figure 1's τ labels of two sources)
    place_labels(ax, [(100, 1, f"τ={t}", {"fontsize": 9}) for t in (1, 2, 5, 10)])
    # execute / assert
    assert not [p for p in figure_problems(fig) if "overlap" in p]
    plt.close(fig)


def test_place_labels_ties_only_a_label_placed_away_from_its_point_to_it_by_a_line():
    from maskfed.book.plots import LEADER_PT, place_labels

    # prepare: eight labels of one point (the later ones placed further out) and one label alone
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot([1, 10, 100, 1000], [1, 3, 1, 5], "o")
    ax.set_xscale("log")
    # execute
    place_labels(ax, [(100, 1, f"τ={t}", {"fontsize": 9}) for t in (1, 2, 5, 10, 20, 50, 100, 200)] + [(10, 3, "alone", {"fontsize": 9})])
    # assert: a line exactly where the label's nearest edge is more than LEADER_PT from its point
    fig.canvas.draw()
    renderer, lim = fig.canvas.get_renderer(), LEADER_PT * fig.dpi / 72
    far = []
    for label in ax.texts:
        box, (px, py) = plots.text_box(label, renderer), ax.transData.transform(label.xy)
        far.append(np.hypot(max(box.x0 - px, 0, px - box.x1), max(box.y0 - py, 0, py - box.y1)) > lim)
    assert any(far) and not far[-1] and not far[0]
    assert [label.arrow_patch is not None for label in ax.texts] == far
    plt.close(fig)


def test_place_labels_ties_a_label_as_near_another_marker_as_its_own_to_its_point():
    from maskfed.book.plots import place_labels

    # prepare: a marker with neighbours up left and up right (its label's place lies as near one of them) and one
    # alone; the first label lands 17.6 px from its own marker and 11.8 px from a neighbour, within LEADER_PT
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot([5, 5.6, 4.4, 2], [5, 5.25, 5.25, 2], "o")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    # execute
    place_labels(ax, [(5, 5, "bs 32", {"fontsize": 9}), (2, 2, "alone", {"fontsize": 9})])
    # assert: the crowded label gets its line, the lone one none
    assert [label.arrow_patch is not None for label in ax.texts] == [True, False]
    plt.close(fig)


def test_place_labels_keeps_a_label_off_a_neighbours_error_bar():
    from maskfed.book.plots import place_labels

    # prepare: a point whose label's first place (up right) lies across the error bar of a neighbour below it
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.errorbar([5, 5.45], [5, 3], yerr=[[0, 0], [0, 4]], fmt="o")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    # execute
    place_labels(ax, [(5, 5, "bs 32", {"fontsize": 9})])
    # assert: the words keep off the bar (x = 5.45 from y = 3 to 7)
    fig.canvas.draw()
    box = plots.text_box(ax.texts[0], fig.canvas.get_renderer())
    (bx, by0), (_, by1) = ax.transData.transform([(5.45, 3), (5.45, 7)])
    assert not (box.x0 <= bx <= box.x1 and box.y1 >= by0 and box.y0 <= by1)
    plt.close(fig)


def test_gaps_are_the_distances_to_a_box_edge_and_zero_inside():
    from matplotlib.transforms import Bbox

    # prepare: a 2 x 1 box at (0, 0); points left of it, above a corner and inside
    box = Bbox([[0, 0], [2, 1]])
    # execute
    got = plots.box_gaps(box, np.array([[-3, 0.5], [5, 5], [1, 0.5]]))
    # assert: 3; the corner (2, 1) to (5, 5) is 5; 0
    assert np.allclose(got, [3, 5, 0])


def test_place_labels_with_drop_puts_a_label_nearest_its_own_point_or_leaves_it_out():
    from maskfed.book.plots import place_labels

    # prepare: three points piled on one spot (a smoke run's accuracy 1.0) and one apart, a ceiling line above
    fig, ax = plt.subplots(figsize=(4, 3))
    xs, ys = [1.0, 1.0, 1.0, 0.5], [2.0, 2.02, 1.98, 2.0]
    ax.scatter(xs, ys)
    ax.axhline(2.06, ls="--")
    ax.set(xlim=(0.4, 1.05), ylim=(1.5, 2.5))
    # execute
    place_labels(ax, [(x, y, f"p{i}", {"fontsize": 9}) for i, (x, y) in enumerate(zip(xs, ys))], drop=True)
    # assert: the lone point keeps its label; every label drawn is nearer its own point than any other
    texts = {t.get_text(): t for t in ax.texts}
    assert "p3" in texts
    fig.canvas.draw()
    points = ax.transData.transform(np.column_stack([xs, ys]))
    for name, t in texts.items():
        b = plots.text_box(t)
        centre = np.array([(b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2])
        assert np.argmin(np.hypot(*(points - centre).T)) == int(name[1:]), name
        line_y = ax.transData.transform((0, 2.06))[1]
        assert not b.y0 <= line_y <= b.y1, name          # off the ceiling line
    plt.close(fig)


@pytest.mark.slow
def test_book_figures_follow_the_rules():
    from maskfed.book.plots import STYLE, against_stage, branches, finish
    from maskfed.book.plots import trajectories

    paper = paper_table("table1")
    with plt.rc_context(STYLE):
        # Figure 1 as the Table I chapter draws it: this build, an archive and the paper, nine protocols each
        ours = paper.assign(recovery_unweighted=paper.recovery_unweighted * 0.5, test_acc=paper.test_acc * 0.4)
        fig, ax = plt.subplots(figsize=(6.4, 5.2))
        recovery_vs_accuracy(ours, paper, ax=ax, others={"cpu-long (archived)": ours.assign(test_acc=paper.test_acc * 0.5)})
        finish(fig)
        # the stage figures
        rows = [{"stage_acc": a, "batch_size": bs, "local_epochs": t, "v": v, "v_q1": v * 0.9, "v_q3": v * 1.1}
                for a in (0.1, 0.3, 0.5) for (bs, t, v) in (("32", 1, 1.2), ("32", 5, 1.1), ("full", 1, 5.0))]
        fig, ax = plt.subplots(figsize=(6.4, 5.0))
        against_stage(pd.DataFrame(rows), "v", ax=ax, label="1/Δ_S", title="stage")
        finish(fig)
        br = pd.DataFrame([{"round": r, "stage": s, "batch_size": bs, "local_epochs": 1, "recovery_unweighted": 1 + r}
                           for s in (0, 1) for r in (1, 2) for bs in ("32", "full")])
        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        branches(br, ax=ax)
        ax.set_title("branches")
        finish(fig)

        # the rolling-median figure of Table I
        class Run:   # the two attributes trajectories() reads
            def __init__(self, bs, tau):
                self.config = type("C", (), {"batch_size": bs, "local_epochs": tau})()
                self.metrics = pd.DataFrame({"round": range(1, 9), "recovery_unweighted": [3, 2.5, 2, 2, 1.8, 1.7, 1.6, 1.5]})

        fig, ax = plt.subplots(figsize=(6.4, 4.6))
        trajectories([Run("32", 1), Run("full", 2)], ax=ax)
        finish(fig)
    plt.close("all")


def test_use_book_style_sets_the_defaults_outside_ipython():
    from maskfed.book.plots import MIN_FONT_PT, use_book_style

    with plt.rc_context():
        use_book_style()
        sizes = [plt.rcParams[k] for k in ("font.size", "xtick.labelsize", "ytick.labelsize", "legend.fontsize")]
        assert min(float(s) for s in sizes) >= MIN_FONT_PT and plt.rcParams["svg.fonttype"] == "path"


def test_panels_sharing_an_axis_take_its_label_from_the_panel_with_the_ticks():
    from maskfed.book.plots import STYLE, figure_problems

    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True)
        for i, ax in enumerate(axes):
            ax.plot([1, 2, 3], [1, 2, 3])
            ax.set_ylabel("y")
            ax.set_title(f"panel {i}")
        # execute / assert: only the bottom panel shows x ticks, so only it needs the x label
        (problem,) = [p for p in figure_problems(fig) if "x label" in p]
        assert problem.startswith("panel 2 ('panel 1'):")  # the panel, by number and by title
        axes[1].set_xlabel("x")
        assert figure_problems(fig) == []
    plt.close(fig)


def test_concept_masks_share_one_mask_across_clients_and_keep_everything_at_p_one():
    import numpy as np

    # execute: a cohort of 4 over 6 blocks at p = 0.5, and at p = 1
    fig = plots.masks_across_clients(np.random.default_rng(1), k_c=4, blocks=6, p=0.5)
    own, shared = fig.axes[0].images[0].get_array(), fig.axes[1].images[0].get_array()
    full = plots.masks_across_clients(np.random.default_rng(1), k_c=4, blocks=6, p=1.0)
    # assert: the shared grid has one row repeated, the per-client one does not (at this seed); p = 1 keeps all
    assert own.shape == shared.shape == (4, 6)
    assert (shared == shared[0]).all() and not (own == own[0]).all()
    assert (full.axes[0].images[0].get_array() == 1).all()
    with pytest.raises(ValueError, match="p"):
        plots.masks_across_clients(np.random.default_rng(1), p=0.0)


def test_concept_addition_aligned_updates_reach_the_ceiling():
    import numpy as np

    # execute: no spread, so every update points the same way
    _, factors = plots.coherent_incoherent(np.random.default_rng(0), k_c=6, spread_deg=0.0)
    # assert: 1/Δ_S = K_c exactly for identical updates (the upper bound's equality case)
    assert factors["coherent"] == pytest.approx(6.0, rel=1e-12)
    assert 0 <= factors["incoherent"] <= 6


def test_phone_layout_stacks_a_row_of_panels_and_moves_a_right_legend_below():
    with plt.rc_context(plots.STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.0))
        for i, ax in enumerate(axes):
            ax.plot([1, 2, 3], [1, 2, 3], "o-", label="bs=32, τ=1")
            ax.set(xlabel="round", ylabel="1/Δ_S", title=f"panel {i}")
        plots.legend_outside(axes[1], "right")
        plots.finish(fig)
        assert plots.phone_layout(fig)
        renderer = fig.canvas.get_renderer()
        top, bottom = (ax.get_window_extent(renderer) for ax in axes)
        assert abs(top.x0 - bottom.x0) < 1 and bottom.y1 < top.y0   # one under the other
        assert axes[1].get_legend().get_window_extent(renderer).y1 < bottom.y0   # below its axes
        assert fig.get_tightbbox(renderer).width + 0.2 <= plots.PHONE_COLUMN_IN
    plt.close("all")


def test_figure_html_gives_a_phone_layout_only_where_one_passes_the_rules():
    with plt.rc_context(plots.STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 3.0))
        ax.plot([1, 2], [1, 2], "o")
        ax.set(xlabel="round", ylabel="1/Δ_S", title="fits")
        page = plots.figure_html(fig, "1/Δ_S&K_c")
        assert page.count("<img") == 2 and 'class="maskfed-fig maskfed-has-phone"' in page
        # the phone image, as saved, fits a 390 px phone's 358 px column (its width in points, 4/3 px each)
        import base64
        import re
        phone = base64.b64decode(re.search(r'maskfed-fig-phone"[^>]*base64,([^"]+)"', page)[1]).decode()
        assert float(re.search(r'<svg[^>]* width="([\d.]+)pt"', phone)[1]) * 4 / 3 <= 358
        assert page.count('alt="1/Δ_S&amp;K_c"') == 2   # escaped
        # six long labels on a line: apart at desktop width, not in a phone's column
        fig, ax = plt.subplots(figsize=(6.4, 3.0))
        xs = [i / 5 for i in range(6)]
        ax.plot(xs, [0.5] * 6, "o")
        ax.set(xlabel="x", ylabel="y", title="crowded", xlim=(-0.1, 1.1), ylim=(0.3, 0.7))
        plots.place_labels(ax, [(x, 0.5, f"bs=full, τ={i} (archived run)", {}) for i, x in enumerate(xs)])
        plots._lay_out(fig)
        assert not plots.figure_problems(fig)
        page = plots.figure_html(fig, "crowded")
        assert page.count("<img") == 1 and 'class="maskfed-fig"' in page
        fig2, ax2 = plt.subplots(figsize=(3.0, 3.0))   # narrow already: one layout
        ax2.plot([1, 2], [1, 2], "o")
        ax2.set(xlabel="x", ylabel="y", title="narrow")
        assert plots.figure_html(fig2, "narrow").count("<img") == 1
    plt.close("all")
