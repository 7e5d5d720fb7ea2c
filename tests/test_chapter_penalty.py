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
    assert chapter.describe(cases[cases.holds]) == "independent, bs 16, round 0 (+20%); independent, full, round 1 (-50%)"
    assert chapter.describe(cases[cases.predicted > 10]) == "none"


def test_norm_values_compare_the_two_norms():
    # execute
    got = chapter.norm_values(limits_table())
    # assert: gaps (1, 1) and (0.5, 1): closer in the block-Hessian norm only in the second cohort (strictly);
    # the norms differ by |2/4 - 1| = 50% and |2.5/1 - 1| = 150%
    assert got["lp_n_cohorts"] == 2 and got["lp_closer_h"] == 1
    assert got["lp_norm_gap_max_pct"] == pytest.approx(150.0) and got["lp_norm_gap_mean_pct"] == pytest.approx(100.0)
    assert got["lp_gap_h_mean"] == pytest.approx(0.75) and got["lp_gap_e_mean"] == pytest.approx(1.0)


def test_phrases_for_the_remainder():
    # execute / assert: at p = 1/2 both kept and dropped blocks move by one block length; at p = 1/4 a kept one by 3
    assert chapter.jump_phrase(0.5) == "as far as the update itself is long"
    assert chapter.jump_phrase(0.8) == "as far as the update itself is long"
    assert chapter.jump_phrase(0.25) == "up to 3 times as far as the update is long"
    assert chapter.kinks_text("m", ["ReLU", "max-pooling"]).startswith("this network (m) uses ReLU and max-pooling,")
    assert chapter.kinks_text("m", []).startswith("none of this network's (m) layers is piecewise linear")


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
