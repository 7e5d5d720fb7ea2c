"""The what-sets-the-factor chapter's findings (maskfed.chapters.factor) on small hand-made tables."""

import pandas as pd
import pytest

from maskfed.chapters import factor as chapter


def eq12_rows(median, share, rel_dev, predicted, ratio_of_means, within, r) -> pd.DataFrame:
    """An :func:`maskfed.studies.factor_axes.eq12_table` of one protocol at K_c = 2, 5, 10 (the columns used)."""
    return pd.DataFrame({"k_c": [2, 5, 10], "median": median, "share": share, "rel_dev": rel_dev,
                         "predicted": predicted, "ratio_of_means": ratio_of_means, "within_iqr": within, "r": r,
                         "q1": [m - 0.1 for m in median], "q3": [m + 0.1 for m in median], "cohorts": 20,
                         "predicted_share": [p / k for p, k in zip(predicted, [2, 5, 10])]})


def test_cohort_values_count_protocols_and_take_the_largest_gaps_away_from_the_reference_k_c():
    # prepare: r from K_c = 5; "a"'s median rises and its share falls; "b"'s median falls from 5 to 10
    eq12 = {"a": eq12_rows([1.8, 3.0, 4.5], [0.9, 0.6, 0.45], [0.02, 0.9, -0.05], [2.0, 3.0, 4.0],
                           [2.02, 3.0, 4.04], [True, True, False], 2.0),
            "b": eq12_rows([1.9, 3.1, 3.0], [0.95, 0.62, 0.30], [0.01, 0.9, 0.03], [2.0, 3.0, 4.0],
                           [2.0, 9.0, 3.96], [True, False, True], 0.5)}
    # execute
    v = chapter.cohort_values(eq12, 5, [2, 5, 10])
    # assert: the K_c = 5 rows (rel_dev 0.9, ratio 9/3) are left out of every gap and count
    assert v["wf_falls"] == "2 of 2" and v["wf_within"] == "3 of 4" and v["wf_sizes"] == "2, 5, 10"
    assert v["wf_dev_text"] == "5.0% (a), 3.0% (b)" and v["wf_dev_where"] == "a at K_c = 10"
    assert v["wf_rom_dev"] == pytest.approx(1.0)            # |4.04/4 − 1| and |3.96/4 − 1|, in %
    assert v["wf_skew_text"].startswith("so where the median departs from eq. 12, it is the skew")
    assert v["wf_share_text"] == "a: 0.90 at K_c = 2, 0.45 at K_c = 10; b: 0.95 at K_c = 2, 0.30 at K_c = 10"
    assert v["wf_r_text"] == "2 (a), 0.5 (b)"
    # b's median does not rise at every step, so eq. 12's pattern is not met for every protocol
    assert v["wf_cohort_summary"].endswith("the median rises with K_c for 1 of 2 protocols and its share falls "
                                           "for 2 of 2.")


def test_cohort_values_name_the_finite_draw_where_the_ratio_of_means_departs_from_eq12():
    # prepare: one protocol whose share rises from 5 to 10 and whose ratio of means is 10% off eq. 12 at K_c = 2
    eq12 = {"a": eq12_rows([1.8, 3.0, 7.0], [0.9, 0.6, 0.7], [0.0, 0.0, 0.0], [2.0, 3.0, 7.0],
                           [2.2, 3.0, 7.0], [True, True, True], 2.0)}
    # execute
    v = chapter.cohort_values(eq12, 5, [2, 5, 10])
    # assert
    assert v["wf_falls"] == "0 of 1" and v["wf_rom_dev"] == pytest.approx(10.0)
    assert v["wf_skew_text"] == "so part of the departure is the finite number of cohorts drawn, not only their skew"
    assert v["wf_cohort_summary"].startswith("That is not the pattern")


def test_without_a_model_size_study_the_findings_say_what_is_missing():
    # prepare: no study table, no path checks, two parts missing
    found = chapter.Findings(glued={}, started=0.0, theta_profile=None, eq12={}, lr_table=pd.DataFrame(),
                             ref_label="bs 32, τ 2")
    # execute
    v = chapter.model_values(found, ["part A (make it with: x)", "part B (make it with: y)"], [])
    # assert: empty captions (the tables are not shown) and the missing parts named
    assert v["wf_found_model"] == "not measured in this build: part A (make it with: x); part B (make it with: y)"
    assert v["wf_overview_caption"] == v["wf_sn_caption"] == v["wf_ckpt_caption"] == ""
    assert v["wf_check_within"] == "–" and v["wf_check_text"].startswith("not measured in this build")
    assert found.protocols == [] and chapter.table_model_thetas(found) is None
    assert chapter.figure_own_trajectory(found) is None


def test_theta_table_shows_a_dash_where_a_target_was_not_reached():
    # prepare: one θ reached at round 32, one target never reached (the archive stores -1 for both numbers)
    ck = pd.DataFrame({"model": ["resnet18_gn"] * 2, "width": [None, None], "source": ["fedavg"] * 2,
                       "target": [0.45, 0.55], "reached": [True, False], "test_acc": [0.4529, float("nan")],
                       "when": [32, -1], "images": [320000, -1], "where": ["run", "run"], "theta": ["ab", ""]})
    found = chapter.Findings(glued={}, started=0.0, theta_profile=None, eq12={}, lr_table=pd.DataFrame(),
                             ref_label="bs 32, τ 2", mckpts=ck)
    # execute
    shown = chapter.table_model_thetas(found)
    # assert
    assert list(shown["round / step"]) == [32, "–"] and list(shown["training images"]) == [320000, "–"]


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
    # the glued values carry the page's running time, read when glued
    assert found.values["wf_x"] == 1 and found.values["wf_seconds"] > 0
