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
    assert (v["t2_hsu_relrange"], v["t2_niid_bench_relrange"]) == pytest.approx((12.0, 14.0))
    assert v["t2_conv_under"] == "only the Hsu et al. partition convention has"
    assert v["t2_conv_points"].endswith("points to the Hsu et al. convention")


@pytest.mark.parametrize("under, subject", [([], "neither partition convention has"),
                                            (["hsu", "niid_bench"], "both partition conventions have")])
def test_convention_phrases_without_a_single_convention(under, subject):
    # execute / assert
    assert chapter.convention_phrases(under) == {"t2_conv_under": subject,
                                                 "t2_conv_points": "the figure does not single out either"}


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


def test_stage_text_ratios_after_initialisation_and_its_conclusion():
    # execute: the unweighted factor at α = 0.1 is 1.5 and 2.5 times that at α = 100, the weighted 0.5 and 1
    text = chapter.stage_text(study([1.5, 2.5], [0.5, 1.0]))
    # assert: two checkpoints after stage 0 (stage 0 and the table1 row left out); the rise appears at the same θ
    assert "at α = 100; 2 checkpoints after initialisation" in text
    assert "at α = 0.1 is 1.50 to 2.50 times that at α = 100 (median 2.00)" in text
    assert "the n_k-weighted one 0.50 to 1.00 times (median 0.75)" in text
    assert text.endswith("is not a training-stage effect: it appears at the same θ.")


def test_stage_text_when_the_rise_does_not_reappear_or_there_is_no_study():
    # execute / assert: median unweighted ratio below 1
    text = chapter.stage_text(study([0.5, 0.7], [0.5, 0.7]))
    assert text.endswith("part of it is where the α runs are in training.")
    assert chapter.stage_text(None).startswith("No archived stage study is available in this build")


def test_live_text_names_the_live_range_across_alpha():
    # prepare
    index = pd.Index([0.1, 100.0], name="alpha")
    closest = Source("cpu-paper (archived)", pd.DataFrame({"recovery_unweighted": [1.7, 1.2],
                                                           "test_acc": [0.46, 0.6]}, index=index), seeds=3)
    live = Source("smoke", pd.DataFrame({"recovery_unweighted": [2.56, 1.22], "test_acc": [0.3, 0.51]}, index=index),
                  seeds=2, rounds=4)
    # execute / assert: two seeds, a plural
    assert chapter.live_text(live, closest, "smoke") == (
        "This build's live smoke profile (4 rounds, 2 seeds) gives 1.22–2.56 across α at test accuracies "
        "0.300–0.510, far earlier in training than cpu-paper (archived) (0.460–0.600).")
    assert chapter.live_text(live, live, "smoke") == "This build's own profile is the closest evidence."


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


def test_cross_text_says_along_which_trajectories_low_alpha_recovers_more():
    # along α = 100 the ratio is 0.5 and 0.7 (median 0.6); along α = 0.1, 1.2 and 1.6 (median 1.4)
    text = chapter.cross_text(_cross({100.0: (0.5, 0.7), 0.1: (1.2, 1.6)}), "p")
    assert "0.60 along the α = 100 trajectory; 1.40 along the α = 0.1 trajectory" in text
    assert text.endswith("It lies above 1 along the α = 0.1 trajectories only: whether low α raises the factor "
                         "depends on which α trained θ.")
    assert chapter.cross_text(_cross({100.0: (0.5, 0.7), 0.1: (0.8, 0.9)}), "p").endswith(
        "so the rise in the table comes from where the α runs are in training.")
    assert "survives once the route to θ is varied" in chapter.cross_text(_cross({100.0: (1.1, 1.3), 0.1: (1.2, 1.6)}), "p")
    assert "--stage-cross" in chapter.cross_text(None, "p")
    t = chapter.cross_table(_cross({100.0: (0.5, 0.7), 0.1: (1.2, 1.6)}))
    assert t["θ from the trajectory at α"].tolist() == ["100", "0.1"]
    assert t["unweighted ratio"].tolist() == ["0.60 (0.50–0.70)", "1.40 (1.20–1.60)"]
    assert t["test accuracy of θ"].tolist() == ["0.20–0.30", "0.20–0.30"] and t["checkpoints"].tolist() == [2, 2]
