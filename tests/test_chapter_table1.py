"""The Table I chapter's findings (maskfed.chapters.table1) on small hand-made tables and the paper's own."""

import pandas as pd
import pytest

from maskfed.analysis import summary
from maskfed.book.tables import Source
from maskfed.chapters import table1 as chapter


def t1_table(rec: dict, acc: dict) -> pd.DataFrame:
    """A Table I summary indexed by (batch_size, local_epochs) with 1/Δ_S, σ̂² (its rank only) and accuracy."""
    index = pd.MultiIndex.from_tuples(list(rec), names=["batch_size", "local_epochs"])
    return pd.DataFrame({"recovery_unweighted": list(rec.values()), "sigma2_hat": range(1, len(rec) + 1),
                         "test_acc": [acc[k] for k in rec]}, index=index)


def test_estimator_values_spans_eq12_and_weighting():
    # prepare: K_c = 10; row 1 has r = 1, so eq. 12 gives 11/2 = 5.5 = its 1/Δ_S; row 2 has r = 0.5,
    # so eq. 12 gives 6/1.5 = 4 against 5 measured (20 %); the weighted factor is 1 % off in row 1
    table = pd.DataFrame({"mu2_hat": [1.0, 2.0], "sigma2_hat": [1.0, 4.0], "recovery_unweighted": [5.5, 5.0],
                          "recovery_weighted": [5.555, 5.0]})
    # execute
    v = chapter.estimator_values(table, k_c=10)
    # assert
    assert v == pytest.approx({"t1_sigma_span": 4.0, "t1_mu_span": 2.0, "t1_eq12_dev": 20.0, "t1_wtd_gap": 1.0})


def test_trend_phrase_names_the_steepest_significant_fall_only():
    # prepare: two falling runs (slopes of log 1/Δ_S per round) and a flat one with a steeper slope
    runs = pd.DataFrame({"slope": [-0.01, -0.02, -0.5], "verdict": ["falling", "falling", "flat"]})
    # execute / assert: 100 (1 - e^-0.02) = 1.98 %; the flat run's slope is not counted
    assert chapter.trend_phrase(runs) == "the steepest significant fall is 1.98% a round"
    assert chapter.trend_phrase(runs.assign(verdict="flat")) == "none falls significantly"


def test_live_text_compares_the_live_profile_with_the_closest():
    # prepare: the closest source has a cliff of 4/2 = 2, the live one 3/2.5 = 1.2
    closest = Source("cpu-paper (archived)", t1_table({("full", 1): 4.0, ("full", 2): 5.0, ("32", 1): 2.0},
                                                     {("full", 1): 0.5, ("full", 2): 0.6, ("32", 1): 0.55}),
                     seeds=3, rounds=200)
    live = Source("smoke", t1_table({("full", 1): 3.0, ("full", 2): 3.5, ("32", 1): 2.5},
                                    {("full", 1): 0.1, ("full", 2): 0.2, ("32", 1): 0.15}), seeds=1, rounds=4)
    # execute
    text = chapter.live_text(live, closest, closest.table, "smoke")
    # assert: one seed without a plural; both cliffs, accuracy ranges and full-batch ranges
    assert text.startswith("This build's live smoke profile (4 rounds, 1 seed) gives a cliff of 1.20 against 2.00 "
                           "for cpu-paper (archived): it stops at test accuracies 0.100–0.200 where cpu-paper "
                           "(archived) reaches 0.500–0.600")
    assert text.endswith("full-batch factors (3.00–3.50) are not yet where cpu-paper (archived)'s are (4.00–5.00).")
    assert chapter.live_text(live, live, closest.table, "smoke") == "This build's own profile is the closest evidence."


def test_paper_values_read_the_papers_own_table():
    # prepare
    paper = summary.paper_table("table1")
    # execute
    v = chapter.paper_values(paper)
    # assert: 3 of 9 cells differ, most at bs 128, τ 2 (1.32 against 1.31: 0.76 %, up to 1.52 % before rounding);
    # one T inversion, bs 128 τ 5 (T 20) to bs 32 τ 2 (T 32)
    assert (v["t1_pgap_n"], v["t1_pgap_cells"], v["t1_pgap_cell"]) == (3, 9, "bs = 128, τ = 2")
    assert v["t1_pgap_max"] == pytest.approx(100 * 0.01 / 1.32)
    assert v["t1_pgap_rounding_max"] == pytest.approx(100 * 0.02 / 1.32)
    assert (v["t1_inv_a"], v["t1_inv_b"]) == ("bs 128, τ = 5 (T = 20)", "bs 32, τ = 2 (T = 32)")
    assert v["t1_inv_va"] < v["t1_inv_vb"]


def test_paper_values_refuse_a_table_the_prose_does_not_fit():
    # prepare: bs 32, τ 2 printed with different weighted and unweighted values
    paper = summary.paper_table("table1").copy()
    paper.loc[("32", 2), "recovery_weighted"] += 0.01
    # execute / assert
    with pytest.raises(ValueError, match="bs 32, τ 2"):
        chapter.paper_values(paper)


def test_an_archived_run_breaking_eq12_is_named_by_its_folder_and_file(tmp_path):
    # prepare: two runs whose rounds satisfy eq. (12) (r = μ²/σ² = 1/2, K_c = 10: 1/Δ_S = 4), one edited by 1e-4
    from pathlib import Path
    from types import SimpleNamespace

    from maskfed.studies import archive

    def run(name, rec):
        m = pd.DataFrame({"mu2_hat": [1.0, 1.0], "sigma2_hat": [2.0, 2.0], "recovery_unweighted": rec})
        return SimpleNamespace(path=Path(tmp_path / name), metrics=m)

    good, bad = run("good-0123456789abcdef", [4.0, 4.0]), run("edited-0123456789abcdef", [4.0, 4.0004])
    # execute / assert
    assert chapter.eq12_round_gap([good], 10) == 0.0
    with pytest.raises(archive.InconsistentRun) as caught:
        chapter.eq12_round_gap([good, bad], 10)
    assert caught.value.folder.name == "edited-0123456789abcdef" and caught.value.file == "metrics.csv"
    assert "edited-0123456789abcdef" in str(caught.value) and "metrics.csv" in str(caught.value)
