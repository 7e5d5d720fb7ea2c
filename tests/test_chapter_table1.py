"""The Table I chapter's findings (maskfed.chapters.table1) on small hand-made tables and the paper's own."""

import math

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
    assert v == {"t1_sigma_span": 4, "t1_mu_span": 2, "t1_eq12_dev": 20.0, "t1_wtd_gap": 1.0}


def test_steepest_fall_counts_the_significant_falls_only():
    # prepare: two falling runs (slopes of log 1/Δ_S per round) and a flat one with a steeper slope
    runs = pd.DataFrame({"slope": [-0.01, -0.02, -0.5], "verdict": ["falling", "falling", "flat"]})
    # execute / assert: 100 (1 - e^-0.02) = 1.98 %; the flat run's slope is not counted; none falling: 0
    assert chapter.steepest_fall(runs) == pytest.approx(100 * (1 - math.exp(-0.02)))
    assert chapter.steepest_fall(runs.assign(verdict="flat")) == 0.0


def test_live_values_give_the_live_profiles_cliff_and_ranges():
    # prepare: the live source's cliff is 3/2.5 = 1.2 (smallest full batch over largest minibatch)
    live = Source("smoke", t1_table({("full", 1): 3.0, ("full", 2): 3.5, ("32", 1): 2.5},
                                    {("full", 1): 0.1, ("full", 2): 0.2, ("32", 1): 0.15}), seeds=1, rounds=4)
    # execute
    v = chapter.live_values(live, live.table)
    # assert: its cliff, accuracy and full-batch ranges
    assert (v["t1_live"], v["t1_live_rounds"], v["t1_live_seeds"]) == ("smoke", 4, 1)
    assert v["t1_live_cliff"] == pytest.approx(1.2)
    assert (v["t1_live_acc_min"], v["t1_live_acc_max"]) == pytest.approx((0.1, 0.2))
    assert (v["t1_live_full_min"], v["t1_live_full_max"]) == pytest.approx((3.0, 3.5))


def test_ordering_values_count_falls_and_name_the_first_inversion():
    # prepare: full batch falls with τ (4 > 3) and lies above bs 32 (2, then 2.5: rising with τ, and with T)
    t = t1_table({("full", 1): 4.0, ("full", 2): 3.0, ("32", 1): 2.0, ("32", 2): 2.5},
                 {k: 0.5 for k in [("full", 1), ("full", 2), ("32", 1), ("32", 2)]})
    t["T_mean"] = [1.0, 2.0, 16.0, 32.0]
    # execute
    v = chapter.ordering_values(t, "x")
    # assert: every full-batch value above every minibatch one; 1 of 2 batch sizes falls; one inversion at bs 32
    assert (v["x_cliff_word"], v["x_n_falling"], v["x_n_groups"], v["x_n_inv"]) == ("every", 1, 2, 1)
    assert (v["x_inv_bs_a"], v["x_inv_tau_a"], v["x_inv_bs_b"], v["x_inv_tau_b"]) == ("32", 1, "32", 2)
    # a minibatch value above a full-batch one: "not every"
    t.loc[("32", 2), "recovery_unweighted"] = 3.5
    assert chapter.ordering_values(t, "x")["x_cliff_word"] == "not every"


def test_paper_values_read_the_papers_own_table():
    # prepare
    paper = summary.paper_table("table1")
    # execute
    v = chapter.paper_values(paper)
    # assert: 3 of 9 cells differ, most at bs 128, τ 2 (1.32 against 1.31: 0.76 %, up to 1.52 % before rounding);
    # every check the chapter's sentences rest on holds
    assert (v["t1_pgap_n"], v["t1_pgap_cells"], v["t1_pgap_bs"], v["t1_pgap_tau"]) == (3, 9, "128", 2)
    assert v["t1_pgap_max"] == pytest.approx(round(100 * 0.01 / 1.32, 2))
    assert v["t1_pgap_rounding_max"] == pytest.approx(round(100 * 0.02 / 1.32, 1))
    assert all(v[k] for k in ("t1_pgap_between", "t1_p3219_agree", "t1_mu_full_dips"))
    # the paper's one T inversion, bs 128 τ 5 (T 20) to bs 32 τ 2 (T 32), with the higher factor at more steps
    o = chapter.ordering_values(paper, "p")
    assert o["p_n_inv"] == 1 and (o["p_inv_bs_a"], o["p_inv_tau_a"], o["p_inv_T_a"]) == ("128", 5, 20)
    assert (o["p_inv_bs_b"], o["p_inv_tau_b"], o["p_inv_T_b"]) == ("32", 2, 32) and o["p_inv_v_a"] < o["p_inv_v_b"]


def test_paper_values_flag_a_table_the_prose_does_not_fit():
    # prepare: bs 32, τ 2 printed with different weighted and unweighted values
    paper = summary.paper_table("table1").copy()
    paper.loc[("32", 2), "recovery_weighted"] += 0.01
    # execute / assert: the chapter's check on that sentence fails
    assert not chapter.paper_values(paper)["t1_p3219_agree"]


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
