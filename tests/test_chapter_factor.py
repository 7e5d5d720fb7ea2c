"""The what-sets-the-factor chapter's findings (maskfed.chapters.factor) on small hand-made tables."""

import math

import pandas as pd
import pytest

from maskfed.chapters import factor as chapter


def eq12_rows(median, share, rel_dev, predicted, ratio_of_means, within, r) -> pd.DataFrame:
    """An :func:`maskfed.studies.factor_axes.eq12_table` of one protocol at K_c = 2, 5, 10 (the columns used)."""
    return pd.DataFrame({"k_c": [2, 5, 10], "median": median, "share": share, "rel_dev": rel_dev,
                         "predicted": predicted, "ratio_of_means": ratio_of_means, "within_iqr": within, "r": r,
                         "q1": [m - 0.1 for m in median], "q3": [m + 0.1 for m in median], "cohorts": 20,
                         "predicted_share": [p / k for p, k in zip(predicted, [2, 5, 10])]})


def found_with(eq12=None, **kw) -> chapter.Findings:
    return chapter.Findings(glued={}, started=0.0, theta_profile=None, eq12=eq12 or {}, lr_table=pd.DataFrame(),
                            ref_label="bs 32, τ 2", **kw)


def test_cohort_values_count_protocols_and_take_the_largest_gaps_away_from_the_reference_k_c():
    # prepare: r from K_c = 5; "a"'s median rises and its share falls; "b"'s median falls from 5 to 10
    eq12 = {"a": eq12_rows([1.8, 3.0, 4.5], [0.9, 0.6, 0.45], [0.02, 0.9, -0.05], [2.0, 3.0, 4.0],
                           [2.02, 3.0, 4.04], [True, True, False], 2.0),
            "b": eq12_rows([1.9, 3.1, 3.0], [0.95, 0.62, 0.30], [0.01, 0.9, 0.03], [2.0, 3.0, 4.0],
                           [2.0, 9.0, 3.96], [True, False, True], 0.5)}
    # execute
    v = chapter.cohort_values(eq12, 5, [2, 5, 10])
    # assert: the K_c = 5 rows (rel_dev 0.9, ratio 9/3) are left out of every gap and count
    assert (v["wf_n_falls"], v["wf_n_rises"], v["wf_n_protocols"]) == (2, 1, 2)
    assert (v["wf_within"], v["wf_cells_away"], v["wf_sizes"]) == (3, 4, "2, 5, 10")
    assert v["wf_dev_max"] == 5.0                           # |−0.05| of "a" at K_c = 10, in %
    assert v["wf_rom_dev"] == pytest.approx(1.0)            # |4.04/4 − 1| and |3.96/4 − 1|, in %
    assert v["wf_departure"] == "skew alone"                # 1 % is within ROM_TOLERANCE (5 %)
    # the per-protocol table: r, the shares at the first and last K_c, the largest gap in %
    table, _ = chapter.table_cohort_protocols(found_with(eq12), 5)
    assert list(table["r"]) == [2.0, 0.5] and list(table["share, last K_c"]) == [0.45, 0.30]
    assert list(table["largest gap (%)"]) == pytest.approx([5.0, 3.0]) and list(table["median rises"]) == [True, False]


def test_cohort_values_name_the_finite_draw_where_the_ratio_of_means_departs_from_eq12():
    # prepare: one protocol whose share rises from 5 to 10 and whose ratio of means is 10% off eq. 12 at K_c = 2
    eq12 = {"a": eq12_rows([1.8, 3.0, 7.0], [0.9, 0.6, 0.7], [0.0, 0.0, 0.0], [2.0, 3.0, 7.0],
                           [2.2, 3.0, 7.0], [True, True, True], 2.0)}
    # execute
    v = chapter.cohort_values(eq12, 5, [2, 5, 10])
    # assert
    assert v["wf_n_falls"] == 0 and v["wf_rom_dev"] == pytest.approx(10.0)
    assert v["wf_departure"] == "skew and draw"


def test_without_a_model_size_study_the_findings_glue_dashes():
    # prepare: no study table, no path checks
    found = found_with()
    # execute
    v = chapter.model_values(found) | chapter.resnet_values(found)
    # assert: nothing measured, nothing claimed
    assert math.isnan(v["wf_n_models"]) and math.isnan(v["wf_cliff_holds"]) and v["wf_rn_cells"] == 0
    assert math.isnan(v["wf_cliff_min"]) and math.isnan(v["wf_rn_fed_median"]) and v["wf_unf_model"] == "–"
    assert chapter.table_resnet(found)[0].empty
    assert found.protocols == [] and chapter.table_model_thetas(found) is None
    assert chapter.figure_own_trajectory(found) is None


def test_own_values_without_the_trajectory_are_not_read():
    # prepare: the trajectory's setting only
    base = type("Base", (), {"batch_size": 32, "local_epochs": 2, "alpha": 100.0, "seed": 0})()
    # execute
    v = chapter.own_values(None, base, None)
    # assert
    assert v["wf_own_read"] == "not read" and math.isnan(v["wf_own_median"])


def test_own_values_read_the_last_quarter_and_the_last_evaluated_accuracy():
    # prepare: 8 rounds (last quarter: rounds 7, 8), accuracy evaluated at rounds 4 and 8; a budget of 80 rounds;
    # the study measured the protocol at the round-8 θ
    metrics = pd.DataFrame({"round": range(1, 9), "recovery_unweighted": [1, 1, 1, 1, 1, 1, 2.0, 3.0],
                            "test_acc": [None, None, None, 0.3, None, None, None, 0.4]})
    spec = type("Spec", (), {"models": [type("M", (), {"rounds": 80})()], "num_cohorts": 100, "pool_size": 12})()
    # (a target's θ), and at the round-4 θ asked for by at_rounds (no target; rounds 8 and 12 asked as well)
    table = pd.DataFrame({"source": ["fedavg"] * 3, "batch_size": ["32", "full", "32"], "local_epochs": [2, 1, 2],
                          "target": [0.35, float("nan"), float("nan")], "when": [8, 4, 4],
                          "recovery_unweighted": [1.48, 7.0, 2.0]})
    own = type("Own", (), {"trajectory": metrics, "spec": spec, "table": table})()
    base = type("Base", (), {"batch_size": 32, "local_epochs": 2, "alpha": 100.0, "seed": 0})()
    paper = pd.Series({"recovery_unweighted": 1.19, "test_acc": 0.68})
    # execute
    v = chapter.own_values(own, base, paper, at_rounds=(4, 8, 12))
    # assert: median of (2, 3) = 2.5, quartiles 2.25 and 2.75 (two decimals), accuracy 0.4 at round 8
    assert (v["wf_own_window"], v["wf_own_rounds"], v["wf_own_budget"]) == (2, 8, 80)
    assert (v["wf_own_median"], v["wf_own_q1"], v["wf_own_q3"]) == (2.5, 2.25, 2.75)
    assert (v["wf_own_acc"], v["wf_own_acc_round"]) == (0.4, 8)
    assert abs(v["wf_own_gap"]) > chapter.STAGE_GAP             # 0.4 against 0.68: not the same stage
    assert (v["wf_own_at_round"], v["wf_own_at_median"], v["wf_own_cohorts"]) == (8, 1.48, 100)
    # one of the three set rounds measured (round 4, two protocols): round 8 is the target's θ, 12 not reached
    assert (v["wf_own_late_asked"], v["wf_own_late_n"]) == ("4 and 8 and 12", 1)
    assert chapter.own_values(None, base, None)["wf_own_late_asked"] == "none"


def test_theta_table_shows_a_dash_where_a_target_was_not_reached_and_the_round_of_a_set_round_theta():
    # prepare: one θ reached at round 32, one target never reached (the archive stores -1 for both numbers)
    # and the θ of set rounds 100 (reached) and 200 (not yet), which have no accuracy target
    nan = float("nan")
    ck = pd.DataFrame({"model": ["resnet18_gn"] * 4, "width": [None] * 4, "source": ["fedavg"] * 4,
                       "target": [0.45, 0.55, nan, nan], "reached": [True, False, True, False],
                       "test_acc": [0.4529, nan, 0.61, nan], "when": [32, -1, 100, 200],
                       "images": [320000, -1, 1000000, -1], "where": ["run"] * 4, "theta": ["ab", "", "cd", ""]})
    found = found_with(mckpts=ck)
    # execute
    shown = chapter.table_model_thetas(found)
    # assert: the set round stands where the target would, also where the run has not got there yet
    assert list(shown["round / step"]) == [32, "–", 100, "–"]
    assert list(shown["training images"]) == [320000, "–", 1000000, "–"]
    assert list(shown.index.get_level_values("target")) == [0.45, 0.55, "round 100", "round 200"]


def test_cohort_size_table_shows_median_and_quartiles_per_protocol_and_k_c():
    # prepare
    eq12 = {"a": eq12_rows([1.8, 3.0, 4.5], [0.9, 0.6, 0.45], [0.02, 0.0, -0.05], [2.0, 3.0, 4.0],
                           [2.0, 3.0, 4.0], [True, True, False], 2.0)}
    found = chapter.Findings(glued={"wf_x": 1}, started=0.0, theta_profile=None, eq12=eq12, lr_table=pd.DataFrame(),
                             ref_label="bs 32, τ 2")
    # execute
    shown, main = chapter.table_cohort_size(found)
    # assert: indexed by (protocol, K_c), the summary column "median [q1, q3]", the main columns present
    assert shown.loc[("a", 10), "1/Δ_S, median [IQR]"] == "4.50 [4.40, 4.60]"
    assert shown.loc[("a", 2), "eq. 12 share"] == pytest.approx(1.0)
    assert set(main) <= set(shown.columns)
    # the glued values carry the page's running time in whole seconds, read when glued
    assert found.values["wf_x"] == 1 and isinstance(found.values["wf_seconds"], int)


def test_headline_cell_summarises_the_trajectory_over_its_last_quarter_beside_the_paper():
    # prepare: 40 rounds (window: rounds 31-40); 1/Δ_S 3.0 before the window, then 0.5 twice and 2.0 eight times
    import numpy as np
    import pandas as pd

    from maskfed.chapters.factor import headline_cell

    rec = np.r_[np.full(30, 3.0), 0.5, 0.5, np.full(8, 2.0)]
    traj = pd.DataFrame({"round": np.arange(1, 41), "T_mean": 32.0, "recovery_unweighted": rec,
                         "recovery_weighted": rec + 0.1, "mu2_hat": 1e-3, "sigma2_hat": 0.05,
                         "test_acc": np.where(np.arange(1, 41) % 4 == 0, np.linspace(0.1, 0.5, 40), np.nan),
                         "train_loss": 1.0})
    paper = pd.Series({"recovery_unweighted": 1.19, "recovery_weighted": 1.19, "mu2_hat": 0.0041,
                       "sigma2_hat": 0.19, "pct_rounds_below_one": 0.0, "test_acc": 0.68, "seeds": 3, "rounds": 200})
    # execute
    table, trend = headline_cell(traj, paper, None)
    # assert: medians over rounds 31-40 only; 2 of its 10 rounds below 1; the paper's window 151-200
    own = table.iloc[0]
    assert list(table.index) == ["ResNet-18-GN", "paper"]
    assert (own["recovery_unweighted"], own["recovery_weighted"], own["pct_rounds_below_one"]) == (2.0, 2.1, 20.0)
    assert (own["from_round"], own["rounds"], own["seeds"]) == (31, 40, 1)
    assert own["test_acc"] == pytest.approx(np.median(np.linspace(0.1, 0.5, 40)[[31, 35, 39]]))
    assert (table.iloc[1]["from_round"], table.iloc[1]["rounds"]) == (151, 200)
    assert trend["n"] == 10 and trend["verdict"] in ("falling", "flat", "rising")
