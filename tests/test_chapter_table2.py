"""The Table II chapter's findings (maskfed.chapters.table2) on small hand-made partitions and study tables."""

from types import SimpleNamespace

import pandas as pd
import pytest

from maskfed.book.tables import Source
from maskfed.chapters import table2 as chapter


def test_partition_row_keeps_the_fields_and_gives_the_cv_in_percent():
    # prepare: sizes 90, 100, 110: population std sqrt(200/3) = 8.165 about a mean of 100
    part = {"scheme": "dirichlet", "alpha": 0.1, "sizes": [90, 100, 110]}
    # execute
    row = chapter.partition_row(0.1, 2, part)
    # assert
    assert row["cv"] == pytest.approx(100 * (200 / 3) ** 0.5 / 100)
    assert {k: row[k] for k in ("alpha", "seed", "scheme")} == {"alpha": 0.1, "seed": 2, "scheme": "dirichlet"}
    assert "sizes" not in row


def spread(hsu_cv: float, niid_cv: float) -> pd.DataFrame:
    return pd.DataFrame([{"alpha": 100.0, "convention": "hsu", "min": 92, "max": 104, "cv": hsu_cv},
                         {"alpha": 100.0, "convention": "niid_bench", "min": 91, "max": 105, "cv": niid_cv},
                         {"alpha": 0.1, "convention": "hsu", "min": 10, "max": 300, "cv": 60.0},
                         {"alpha": 0.1, "convention": "niid_bench", "min": 10, "max": 100, "cv": 40.0}])


def test_convention_values_at_the_largest_alpha():
    # prepare: N = 1000 images over K = 10 clients (100 each on average); only Hsu et al. under 3 %
    # execute
    v = chapter.convention_values(spread(2.5, 4.0), 1000, 10)
    # assert: the range relative to N/K is (104 - 92) / 100 and (105 - 91) / 100; the α = 0.1 rows are not read
    assert (v["t2_conv_ahi"], v["t2_hsu_min"], v["t2_hsu_max"], v["t2_niid_bench_cv"]) == (100.0, 92, 104, 4.0)
    assert (v["t2_hsu_relrange"], v["t2_niid_bench_relrange"]) == (12, 14)
    assert v["t2_conv_under"] == "Hsu et al."


@pytest.mark.parametrize("under, word", [([], "neither"), (["hsu", "niid_bench"], "both"), (["niid_bench"], "NIID-Bench")])
def test_conventions_under_names_one_convention_or_says_both_or_neither(under, word):
    # execute / assert
    assert chapter.conventions_under(under) == word


def study(ratios_unw, ratios_w) -> SimpleNamespace:
    """A stage study of one seed: 1/Δ_S 2.0 (both conventions) at α = 100 at stages 0, 1, 2; at α = 0.1
    the given multiples of it after initialisation (and 1 at stage 0)."""
    rows = [{"experiment": "table1", "seed": 0, "stage": 1, "alpha": 100.0, "recovery_unweighted": 9.0,
             "recovery_weighted": 9.0}]
    for stage, (u, w) in enumerate(zip([1.0, *ratios_unw], [1.0, *ratios_w])):
        rows += [{"experiment": "table2", "seed": 0, "stage": stage, "alpha": 100.0, "recovery_unweighted": 2.0,
                  "recovery_weighted": 2.0},
                 {"experiment": "table2", "seed": 0, "stage": stage, "alpha": 0.1, "recovery_unweighted": 2.0 * u,
                  "recovery_weighted": 2.0 * w}]
    return SimpleNamespace(profile="cpu-paper", table=pd.DataFrame(rows))


def test_stage_values_ratios_after_initialisation_and_whether_the_rise_reappears():
    # execute: the unweighted factor at α = 0.1 is 1.5 and 2.5 times that at α = 100, the weighted 0.5 and 1
    v = chapter.stage_values(study([1.5, 2.5], [0.5, 1.0]))
    # assert: two checkpoints after stage 0 (stage 0 and the table1 row left out); the rise appears at the same θ
    assert (v["t2_st_n"], v["t2_st_lo_a"], v["t2_st_hi_a"]) == (2, 0.1, 100.0)
    assert (v["t2_st_u_min"], v["t2_st_u_max"], v["t2_st_u_med"]) == pytest.approx((1.5, 2.5, 2.0))
    assert (v["t2_st_w_min"], v["t2_st_w_max"], v["t2_st_w_med"]) == pytest.approx((0.5, 1.0, 0.75))
    assert v["t2_st_study"] and v["t2_st_rise"]


def test_stage_values_when_the_rise_does_not_reappear_or_there_is_no_study():
    # execute / assert: median unweighted ratio below 1
    assert not chapter.stage_values(study([0.5, 0.7], [0.5, 0.7]))["t2_st_rise"]
    assert chapter.stage_values(None) == {"t2_st_study": False}


def test_live_values_give_the_live_range_across_alpha():
    # prepare
    index = pd.Index([0.1, 100.0], name="alpha")
    live = Source("smoke", pd.DataFrame({"recovery_unweighted": [2.56, 1.22], "test_acc": [0.3, 0.51]}, index=index),
                  seeds=2, rounds=4)
    # execute / assert
    assert chapter.live_values(live) == {"t2_live": "smoke", "t2_live_rounds": 4, "t2_live_seeds": 2,
                                         "t2_live_min": 1.22, "t2_live_max": 2.56,
                                         "t2_live_acc_min": 0.3, "t2_live_acc_max": 0.51}


def _cross(ratio_by_traj):
    """An α-cross by hand: one seed, θ_0 and two checkpoints per trajectory α; at each θ the unweighted factor at
    α = 0.1 is ``ratio`` times that at α = 100 (θ_0: 1), the weighted one equal."""
    rows = []
    for traj, ratios in ratio_by_traj.items():
        for st, r in enumerate((1.0, *ratios)):
            for a in (100.0, 0.1):
                rows.append({"trajectory_alpha": traj, "seed": 0, "stage": st, "stage_acc": 0.1 + 0.1 * st, "alpha": a,
                             "recovery_unweighted": 2.0 * (r if a == 0.1 else 1.0), "recovery_weighted": 2.0})
    return pd.DataFrame(rows)


def test_cross_values_give_each_trajectorys_median_ratio_and_how_many_lie_above_1():
    # prepare: along α = 100 the ratio is 0.5 and 0.7 (median 0.6); along α = 0.1, 1.2 and 1.6 (median 1.4)
    cross = _cross({100.0: (0.5, 0.7), 0.1: (1.2, 1.6)})
    # execute
    v = chapter.cross_values(cross)
    # assert: largest trajectory α first; one of the two above 1
    assert (v["t2_cx_alphas"], v["t2_cx_lo"], v["t2_cx_hi"]) == ((100.0, 0.1), 0.1, 100.0)
    assert (v["t2_cx_med_0"], v["t2_cx_med_1"], v["t2_cx_above"]) == (pytest.approx(0.6), pytest.approx(1.4), 1)
    assert chapter.cross_values(_cross({100.0: (0.5, 0.7), 0.1: (0.8, 0.9)}))["t2_cx_above"] == 0
    assert chapter.cross_values(_cross({100.0: (1.1, 1.3), 0.1: (1.2, 1.6)}))["t2_cx_above"] == 2
    assert chapter.cross_values(None) == {"t2_cx_alphas": ()}
    t = chapter.cross_table(cross)
    assert t["trajectory α"].tolist() == ["100", "0.1"]
    assert t["unweighted ratio"].tolist() == ["0.60 (0.50–0.70)", "1.40 (1.20–1.60)"]
    assert t["accuracy of θ"].tolist() == ["0.20–0.30", "0.20–0.30"] and t["checkpoints"].tolist() == [2, 2]


def test_the_conventions_table_writes_shard_sizes_with_thousands_separators():
    # prepare: one α, both conventions; a largest shard of 2,276 samples
    spread = pd.DataFrame({"alpha": [0.1, 0.1], "convention": ["hsu", "niid_bench"], "min": [3, 18],
                           "max": [2276, 2514], "cv": [94.6, 86.9]})
    # execute
    shown, formats = chapter.table_conventions(SimpleNamespace(spread=spread))
    # assert: samples as every number of the book writes them, the CV with one decimal
    assert formats[("Hsu et al.", "largest")].format(shown.loc[0.1, ("Hsu et al.", "largest")]) == "2,276"
    assert formats[("NIID-Bench", "CV (%)")].format(shown.loc[0.1, ("NIID-Bench", "CV (%)")]) == "86.9"
