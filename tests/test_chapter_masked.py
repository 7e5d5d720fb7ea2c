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


def test_verdict_values_count_the_verdicts_and_place_the_stage():
    # prepare
    summ = mt.summary(table())
    verd = mt.verdicts(summ)
    # execute
    got = chapter.verdict_values(summ, verd)
    # assert: 3 masked settings × 3 metrics; accuracy of mini at p = 0.5 is worse under both modes
    assert (got["n_cmp"], got["n_better"], got["n_worse"], got["n_within"]) == (9, 0, 2, 7)
    assert (got["n_protocols"], got["full_name"], got["mini_name"]) == (2, "full", "mini")
    assert (got["acc_full"], got["acc_mini"]) == (0.31, 0.61)
    # the best unmasked median is 0.61 >= 0.5: partly trained; below 0.5 (full alone, 0.31): far from trained
    assert got["stage"] == "partly trained"
    only_full = summ[summ.protocol == "full"]
    assert chapter.verdict_values(only_full, mt.verdicts(only_full))["stage"] == "far from trained"


def test_archived_section_reads_the_archived_runs():
    # execute: the repository's archive of the cpu-masked runs
    values, lsumm, lverd, lmode, label = chapter.archived_section("cpu-masked")
    # assert: every glue name of the section is set, from 18 runs of K_c 10, 200 rounds, 3 seeds
    assert set(chapter.LONG_KEYS) <= set(values) and values["mt_long_status"] == "shown"
    assert (values["mt_long_kc"], values["mt_long_rounds"], values["mt_long_seeds"]) == (10, 200, 3)
    assert values["mt_long_n_missing"] == 0 and label.runs == 18
    assert values["mt_long_n_cmp"] == len(lverd) and values["mt_long_n_mode"] == len(lmode) > 0


def test_median_steps_and_missing_protocol():
    # prepare: two runs of "full" (T = 1, 1, 3) and one of another protocol
    s_full, s_other = mt.Setting("full", 1.0, "none"), mt.Setting("mini", 1.0, "none")
    metrics = {(s_full, 0): pd.DataFrame({"T_mean": [1.0, 1.0]}), (s_full, 1): pd.DataFrame({"T_mean": [3.0]}),
               (s_other, 0): pd.DataFrame({"T_mean": [50.0]})}
    # execute / assert
    assert chapter.median_steps(metrics, "full") == 1.0
    with pytest.raises(ValueError, match=r"protocol 'x'"):
        chapter.median_steps(metrics, "x")


def test_left_out_archive_is_a_status_word():
    # execute
    values, lsumm, lverd, lmode, label = chapter.archived_section(None)
    # assert
    assert lsumm is None and lverd is None and lmode is None and label is None
    assert (values["mt_long_status"], values["mt_long_from"]) == ("left out", "none")
    assert all(values[k] == "–" for k in chapter.LONG_KEYS)


def test_live_values_say_whether_the_chapter_cut_the_profile():
    # prepare: a run of 4 rounds and K_c 3 against a profile of 4 rounds and K_c 3, then of 200 and 10
    class Cfg:
        rounds, cohort_size, num_clients = 4, 3, 10

    # execute / assert
    assert chapter.live_values(Cfg, 4, 3, 2, 20, 3, 32)["mt_shrink"] == "as many"
    got = chapter.live_values(Cfg, 200, 10, 2, 20, 3, 32)
    assert got["mt_shrink"] == "fewer" and (got["mt_prof_rounds"], got["mt_prof_kc"]) == (200, 10)


def test_trajectory_values_round_the_gap_as_the_page_writes_it():
    # prepare: gaps -0.126, 0.5, -0.2 (Hessian minus Euclidean); the Hessian factor below 1 once
    traj = pd.DataFrame({"euclidean": [2.0, 1.5, 1.0], "hessian": [1.874, 2.0, 1.2 - 0.4]})
    traj["gap"] = traj.hessian - traj.euclidean
    # execute
    got = chapter.trajectory_values(traj, 5)
    # assert: median of (-0.126, 0.5, -0.2) is -0.126 -> -0.13; largest magnitude 0.5
    assert got["mt_gap_median"] == -0.13 and got["mt_gap_abs_max"] == 0.5
    assert (got["mt_n_logged"], got["mt_h_below_e"], got["mt_h_below_1"], got["mt_every"]) == (3, 2, 1, 5)


def test_table_final_cells_are_median_and_range():
    # execute
    t = chapter.table_final(mt.summary(table()))
    # assert
    assert t.iloc[0]["test accuracy"] == "0.310 [0.300, 0.320]"
    assert t.iloc[0]["top eigenvalue"] == "5.5 [5, 6]"
