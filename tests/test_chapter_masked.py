"""The masked-training chapter's findings (maskfed.chapters.masked) on hand-made summaries."""

import pandas as pd
import pytest

from maskfed.chapters import masked as chapter
from maskfed.studies import masked_training as mt


def final(rows) -> pd.DataFrame:
    # rows: (protocol, p, mode, seed, test_acc, top_eig, trace)
    return pd.DataFrame(rows, columns=["protocol", "p", "mode", "seed", "test_acc", "sharpness_top_eig",
                                       "sharpness_trace"])


def table():
    # two protocols; "mini" at p = 0.5 shared: accuracy wholly below the unmasked range (worse)
    return final([("full", 1.0, "none", 0, 0.30, 5.0, 50.0), ("full", 1.0, "none", 1, 0.32, 6.0, 60.0),
                  ("full", 0.5, "shared", 0, 0.31, 5.5, 55.0), ("full", 0.5, "shared", 1, 0.33, 5.8, 58.0),
                  ("mini", 1.0, "none", 0, 0.60, 9.0, 90.0), ("mini", 1.0, "none", 1, 0.62, 10.0, 95.0),
                  ("mini", 0.5, "shared", 0, 0.50, 9.5, 91.0), ("mini", 0.5, "shared", 1, 0.52, 9.7, 92.0),
                  ("mini", 0.5, "independent", 0, 0.55, 9.1, 93.0),
                  ("mini", 0.5, "independent", 1, 0.57, 9.2, 94.0)])


def test_comparison_values_count_and_name_the_worse_settings():
    # prepare
    summ = mt.summary(table())
    verd = mt.verdicts(summ)
    # execute
    got = chapter.comparison_values(summ, verd, ["full", "mini"], full_steps=1.0)
    # assert: 3 masked settings × 3 metrics; accuracy of mini at p = 0.5 is worse under both modes
    assert got["mt_n_cmp"] == 9 and got["mt_n_worse"] == 2 and got["mt_n_better"] == 0
    assert got["mt_n_within"] == 7
    assert got["mt_worse_list"] == ("test accuracy at p = 0.5, shared, mini; "
                                    "test accuracy at p = 0.5, independent, mini")
    assert got["mt_acc_full"] == pytest.approx(0.31) and got["mt_acc_mini"] == pytest.approx(0.61)
    assert got["mt_full_steps_unit"] == "step"
    # the best unmasked median is 0.61 >= 0.5: past the first phase
    assert got["mt_scale"].startswith("past the first phase")
    assert chapter.comparison_values(summ, verd, ["full", "mini"], 4.0)["mt_full_steps_unit"] == "steps"


def test_archived_values_compare_shared_with_independent():
    # prepare
    summ = mt.summary(table())
    mode = mt.shared_vs_independent(summ)

    class Cfg:
        cohort_size, num_clients, rounds, sharpness_iters, hessian_batch = 10, 100, 200, 50, 1024

    # execute
    got = chapter.archived_values("cpu-masked", summ, mode, Cfg, 2, "machine X.", ["a-run"])
    # assert: shared accuracy 0.51 lies wholly below independent 0.55-0.57 (worse); eigenvalue 9.5-9.7 above
    # 9.1-9.2 (worse); trace 91-92 below 93-94 (better)
    assert got["mt_long_mode_answer"] == ("a shared mask differs from independent masks beyond the spread across "
                                          "seeds in test accuracy (worse, mini); top Hessian eigenvalue (worse, "
                                          "mini); Hessian trace (better, mini)")
    assert "K_c = 10 of 100 clients, 200 rounds and 2 seeds" in got["mt_long_intro"]
    assert "Not yet archived: a-run." in got["mt_long_intro"]
    assert got["mt_long_acc"] == "0.310 (full), 0.610 (mini)"
    assert got["mt_long_missing"] == ""


def test_median_steps_and_missing_protocol():
    # prepare: two runs of "full" (T = 1, 1, 3) and one of another protocol
    s_full, s_other = mt.Setting("full", 1.0, "none"), mt.Setting("mini", 1.0, "none")
    metrics = {(s_full, 0): pd.DataFrame({"T_mean": [1.0, 1.0]}), (s_full, 1): pd.DataFrame({"T_mean": [3.0]}),
               (s_other, 0): pd.DataFrame({"T_mean": [50.0]})}
    # execute / assert
    assert chapter.median_steps(metrics, "full") == 1.0
    with pytest.raises(ValueError, match="no run of protocol 'x'"):
        chapter.median_steps(metrics, "x")


def test_left_out_archive_says_why():
    # execute
    values, lsumm, lmode = chapter.archived(None)
    # assert
    assert lsumm is None and lmode is None
    assert values["mt_long_missing"] == "Not shown in this build: this build was asked to leave it out (archived_from = None)."
    assert all(values[k] == "–" for k in chapter.LONG_KEYS)


def test_table_final_cells_are_median_and_range():
    # execute
    t = chapter.table_final(mt.summary(table()))
    # assert
    assert t.iloc[0]["test accuracy"] == "0.310 [0.300, 0.320]"
    assert t.iloc[0]["top eigenvalue"] == "5.5 [5, 6]"
