"""The limit-penalty chapter's findings (maskfed.chapters.penalty) on a small hand-made limits table."""

import math

import pandas as pd
import pytest

from maskfed.chapters import penalty as chapter
from maskfed.derivation import limits


def limits_table() -> pd.DataFrame:
    # two cohorts; excess and R in nats
    return limits.second_order_error(pd.DataFrame({
        "round": [0, 1], "protocol": ["bs 16", "full"], "T": [4.0, 1.0],
        "r_ind": [1.0, 1.0], "excess_ind": [1.2, 0.5], "excess_ind_se": [0.1, 0.5],
        "r_shr": [2.0, 4.0], "excess_shr": [3.0, 4.0], "excess_shr_se": [0.1, math.nan],
        "ratio_measured": [3.0, 2.0], "recovery_h": [2.0, 2.5], "recovery_euclid": [4.0, 1.0]}))


def test_cases_hold_within_n_se_and_their_lists():
    # execute
    cases = chapter.cases_table(limits_table(), n_se=3.0)
    # assert: |1.2 - 1| <= 0.3 and |0.5 - 1| <= 1.5 hold; |3 - 2| > 0.3 misses; an undefined SE never holds
    assert list(cases["mode"]) == ["independent", "shared", "independent", "shared"]
    assert list(cases["holds"]) == [True, False, True, False]
    assert list(cases["miss"]) == pytest.approx([0.2, 0.5, -0.5, 0.0])


def test_table_cases_in_whole_percent():
    # prepare
    found = chapter.Findings({}, None, None, limits_table(), chapter.cases_table(limits_table(), 3.0), {}, 3.0)
    # execute
    t = chapter.table_cases(found)
    # assert: the misses of the cases above as whole percents, indexed by (t, protocol, masks)
    assert list(t["miss (%)"]) == [20, 50, -50, 0] and list(t["holds"]) == [True, False, True, False]
    assert t.index[1] == (0, "bs 16", "shared")


def test_norm_values_compare_the_two_norms():
    # execute
    got = chapter.norm_values(limits_table())
    # assert: gaps (1, 1) and (0.5, 1): closer in the block-Hessian norm only in the second cohort (strictly);
    # the norms differ by |2/4 - 1| = 50% and |2.5/1 - 1| = 150%
    assert got["lp_n_cohorts"] == 2 and got["lp_closer_h"] == 1
    assert got["lp_norm_gap_max_pct"] == 150 and got["lp_norm_gap_mean_pct"] == 100
    assert got["lp_gap_h_mean"] == 0.75 and got["lp_gap_e_mean"] == 1.0


def test_jump_in_block_lengths():
    # execute / assert: at p = 1/2 both kept and dropped blocks move by one block length; at p = 1/4 a kept one by 3
    assert chapter.jump(0.5) == 1.0 and chapter.jump(0.8) == 1.0
    assert chapter.jump(0.25) == pytest.approx(3.0)


def test_settings_fill_the_profile_defaults():
    # execute
    smoke = chapter.settings("smoke")
    given = chapter.settings("cpu", at_rounds=[2], protocols={"a": ("full", 1), "b": (8, 2)}, train_protocol="a",
                             n_draws=5, eval_size=7)
    # assert: the smoke defaults; given values kept; the last protocol trains by default
    assert smoke == {"protocols": {"full batch, τ=1": ("full", 1), "bs 16, τ=1": (16, 1)}, "train_protocol": "bs 16, τ=1",
                     "at_rounds": [0, 1], "n_draws": 8, "eval_size": 64}
    assert given == {"protocols": {"a": ("full", 1), "b": (8, 2)}, "train_protocol": "a", "at_rounds": [2],
                     "n_draws": 5, "eval_size": 7}
    assert chapter.settings("cpu", protocols={"a": 1, "b": 2})["train_protocol"] == "b"
