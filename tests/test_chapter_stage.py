"""The stage-or-sampling chapter's findings (maskfed.chapters.stage) on small hand-made study tables."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from maskfed.chapters import stage as chapter

# median 1/Δ_S per (seed, stage) of full batch τ = 5, batch 128 τ = 1 and batch 128 τ = 2
RECOVERY = {(0, 0): (2.0, 1.0, 1.0), (0, 1): (3.0, 1.5, 2.0), (1, 0): (1.0, 2.0, 1.0), (1, 1): (4.0, 1.0, 4.0)}
PROTOCOLS = (("full", 5), ("128", 1), ("128", 2))


def t1_table(protocols=PROTOCOLS) -> pd.DataFrame:
    return pd.DataFrame([{"seed": s, "stage": st, "batch_size": bs, "local_epochs": tau, "recovery_unweighted": r}
                         for (s, st), values in RECOVERY.items()
                         for (bs, tau), r in zip(PROTOCOLS, values) if (bs, tau) in protocols])


def test_cliff_table_is_min_full_over_max_minibatch_at_each_checkpoint():
    # prepare: four checkpoints; the last one (seed 1, stage 1) has no checkpoint row
    checkpoints = pd.DataFrame({"seed": [0, 0, 1], "stage": [0, 1, 0], "round": [0, 7, 0],
                                "test_acc": [0.1, 0.4, 0.1]})
    # execute
    cliffs = chapter.cliff_table(t1_table(), checkpoints).set_index(["seed", "stage"])
    # assert: 2/1, 3/2 and 1/2; the checkpoint missing from the ladder is dropped; its round and accuracy joined
    assert cliffs["cliff"].to_dict() == pytest.approx({(0, 0): 2.0, (0, 1): 1.5, (1, 0): 0.5})
    assert cliffs.loc[(0, 1), "round"] == 7 and cliffs.loc[(0, 1), "test_acc"] == 0.4


def test_f5_ratios_skip_initialisation():
    # execute
    spans = chapter.f5_spans(t1_table())
    # assert: after stage 0 only, full τ = 5 over 128 τ = 1 is 3/1.5 and 4/1, over 128 τ = 2 it is 3/2 and 4/4
    assert sorted(spans["128_1"]) == pytest.approx([2.0, 4.0])
    assert sorted(spans["128_2"]) == pytest.approx([1.0, 1.5])


def test_f5_ratios_without_the_papers_protocols():
    # prepare: a study without full batch τ = 5
    spans = chapter.f5_spans(t1_table(protocols=PROTOCOLS[1:]))
    # execute / assert: no ratio (the page then shows "–")
    assert spans == {}


def test_half_values_round_as_the_text_reads_and_say_not_reached():
    # prepare: verdict_by_range's shape for one half
    half = {"verdict": "stage", "stage": 0.564, "sampling": 0.071, "protocol": 0.295, "seed": 0.0749,
            "sampling_effect": 1.1349, "stage_effect": 2.0812, "stages": [0, 1], "acc_min": 0.0693, "acc_max": 0.3213}
    # execute
    got = chapter.half_values("early", half)
    none = chapter.half_values("range", None)
    # assert: whole percentages, effects and accuracies to two decimals; an empty range reads "not reached"
    assert got == {"st_early_label": "stage", "st_early_stage": 56, "st_early_seed": 7, "st_early_sampling": 7,
                   "st_early_protocol": 30, "st_early_sampling_effect": 1.13, "st_early_stage_effect": 2.08,
                   "st_early_acc_min": 0.07, "st_early_acc_max": 0.32}
    assert none["st_range_label"] == "not reached"
    assert all(math.isnan(x) for k, x in none.items() if k != "st_range_label")


def test_percent_is_a_whole_number_and_keeps_nan():
    # execute / assert: 1/3 -> 33 (an int, glued as "33"), 0.566 -> 57, NaN stays NaN (glued as "–")
    assert chapter.percent(1 / 3) == 33 and isinstance(chapter.percent(1 / 3), int)
    assert chapter.percent(0.566) == 57
    assert math.isnan(chapter.percent(float("nan")))


def test_table_verdicts_one_column_per_half():
    # prepare: verdict_by_range's shape for two halves
    half = {"verdict": "stage", "stage": 0.5, "sampling": 0.1, "protocol": 0.3, "seed": 0.2, "sampling_effect": 1.1,
            "stage_effect": 2.5, "stages": [0, 1], "acc_min": 0.071, "acc_max": 0.3249}
    found = SimpleNamespace(by_range={"early": half, "late": half | {"verdict": "sampling", "stages": [2, 3]}})
    # execute
    table = chapter.table_verdicts(found)
    # assert: a column a half; shares in whole percent, effects to two decimals, stages listed
    assert list(table.columns) == ["early", "late"]
    assert table.loc["stage share (%)", "early"] == 50 and table.loc["between seeds (%)", "early"] == 20
    assert table.loc["full / minibatch (×)", "early"] == 1.1
    assert table.loc["highest / lowest checkpoint (×)", "early"] == 2.5
    assert table.loc["checkpoints (stage)", "late"] == "2, 3" and table.loc["verdict", "late"] == "sampling"
    assert table.loc["accuracy", "early"] == "0.07–0.32"
    assert set(chapter.VERDICT_ROWS) <= set(table.index)


def test_source_without_an_archived_profile_is_the_own_run():
    # execute: no ladder profile (ladder_from = None, or its archive keeps no θ)
    got = chapter.source_values(None, None)
    # assert: measured here, on no archived trajectory, with nothing archived to have changed
    assert got["st_origin"] == "own run" and got["st_measured"] == "this build"
    assert got["st_trajectories"] == "–" and got["st_changed"] == "none"
