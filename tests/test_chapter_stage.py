"""The stage-or-sampling chapter's findings (maskfed.chapters.stage) on small hand-made study tables."""

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


def test_f5_ratios_skip_initialisation_and_their_clause():
    # execute
    spans = chapter.f5_spans(t1_table())
    text = chapter.f5_text(spans)
    # assert: after stage 0 only, full τ = 5 over 128 τ = 1 is 3/1.5 and 4/1, over 128 τ = 2 it is 3/2 and 4/4
    assert sorted(spans["128_1"]) == pytest.approx([2.0, 4.0])
    assert sorted(spans["128_2"]) == pytest.approx([1.0, 1.5])
    assert "recovers 2.00 to 4.00 times as much as batch 128, τ = 1, and 1.00 to 1.50 times" in text


def test_f5_clause_without_the_papers_protocols():
    # prepare: a study without full batch τ = 5
    spans = chapter.f5_spans(t1_table(protocols=PROTOCOLS[1:]))
    # execute / assert: no ratio, and the clause says the comparison is not made
    assert spans == {}
    assert chapter.f5_text(spans).endswith("so that comparison is not made here")


def test_branch_phrases_follow_the_study():
    # execute: no branches at the settings' default; branches from the page's parameter
    none = chapter.branch_phrases(0, False, from_parameter=False, settings_of="cpu-paper", seed=0)
    some = chapter.branch_phrases(3, True, from_parameter=True, settings_of="cpu-paper", seed=2)
    # assert
    assert none == {"st_M": 0, "st_M_origin": "the default of the cpu-paper stage settings",
                    "st_branches_shown": "branches were not run, so there is no figure here; run the chapter with "
                                         "branch_rounds = 5 to add them"}
    assert some["st_M_origin"] == "this page's branch_rounds parameter"
    assert some["st_branches_shown"].endswith("checkpoints of seed 2")
    with pytest.raises(ValueError, match="branch_rounds = 0"):
        chapter.branch_phrases(0, True, from_parameter=False, settings_of="smoke", seed=0)


def test_table_verdicts_one_column_per_half():
    # prepare: verdict_by_range's shape for two halves
    half = {"verdict": "stage", "stage": 0.5, "sampling": 0.1, "protocol": 0.3, "seed": 0.2, "sampling_effect": 1.1,
            "stage_effect": 2.5, "stages": [0, 1], "acc_min": 0.071, "acc_max": 0.3249}
    found = SimpleNamespace(by_range={"early": half, "late": half | {"verdict": "sampling", "stages": [2, 3]}})
    # execute
    table = chapter.table_verdicts(found)
    # assert: a column a half; shares in percent without decimals, effects to two decimals, stages listed
    assert list(table.columns) == ["early", "late"]
    assert table.loc["stage share (%)", "early"] == "50" and table.loc["of which between seeds (%)", "early"] == "20"
    assert table.loc["full / minibatch (×)", "early"] == "1.10"
    assert table.loc["highest / lowest checkpoint (×)", "early"] == "2.50"
    assert table.loc["checkpoints (stage)", "late"] == "2, 3" and table.loc["verdict", "late"] == "sampling"
    assert table.loc["accuracy", "early"] == "0.07–0.32"
    assert set(chapter.VERDICT_FORMATS) <= set(table.index)