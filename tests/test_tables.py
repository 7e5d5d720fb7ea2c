"""Tables I and II as shown: closest source first, medians with seed ranges beside the paper's values."""

import numpy as np
import pandas as pd
import pytest

from maskfed.analysis import summary
from maskfed.book import tables
from maskfed.engine.config import make_run_config
from maskfed.engine.runner import RunResult
from maskfed.studies import archive, experiments


def fake(rec, *, seed, bs=32, tau=1, rounds=8, acc=0.5):
    cfg = make_run_config(batch_size=bs, local_epochs=tau, seed=seed, rounds=rounds, device="cpu")
    m = pd.DataFrame({"round": np.arange(1, rounds + 1), "T_mean": 16.0, "recovery_unweighted": rec,
                      "recovery_weighted": rec, "mu2_hat": 1e-3, "sigma2_hat": 1e-2, "test_acc": acc,
                      "train_loss": 1.0})
    return RunResult(cfg, None, m, {})


def test_with_range_writes_median_and_seed_range():
    assert tables.with_range(1.234, 1.2, 1.26) == "1.23 (1.20–1.26)"
    assert tables.with_range(0.5, None, None, ".3f") == "0.500"
    assert tables.with_range(float("nan"), 1, 2) == "–"


def test_sources_put_the_archive_first_and_main_table_shows_its_seed_range():
    # prepare: an "archived" profile with three seeds (1/Δ_S 1.1, 1.3, 1.2 at bs 32, τ 1) and a live one-seed run
    arch = [fake(v, seed=s) for s, v in enumerate((1.1, 1.3, 1.2))]
    found = [archive.ArchivedSummary("cpu-paper", arch, experiments.table1(arch), None, [])]
    live = [fake(2.0, seed=0, rounds=4)]
    # execute
    srcs = tables.sources("table1", "cpu", live, found)
    main = tables.main_table("table1", srcs[0], summary.paper_table("table1"))
    # assert: closest first, its median with the min-max over seeds, the paper's value beside it
    assert [s.name for s in srcs] == [archive.column_name("cpu-paper"), "cpu"] and [s.seeds for s in srcs] == [3, 1]
    assert srcs[1].low is None
    row = main.loc[("32", 1)]
    assert row[("1/Δ_S", archive.column_name("cpu-paper"))] == "1.20 (1.10–1.30)"
    assert row[("1/Δ_S", "paper")] == "1.24" and row[("T", archive.column_name("cpu-paper"))] == "16"
    assert row[("accuracy", "paper")] == "0.553"
    full = tables.full_table(srcs, summary.paper_table("table1"))
    assert len(full) == 9 and full[("recovery_unweighted", "cpu")].dropna().tolist() == [2.0]
    # a reader's run on another grid (bs 16) adds its row and keeps the paper's nine: nothing drops out
    own = tables.sources("table1", "smoke", [fake(2.5, seed=0, bs=16)], found, live_first=True)
    mine = tables.main_table("table1", own[0], summary.paper_table("table1"))
    assert mine.index[0] == ("16", 1) and len(mine) == 10
    assert mine.loc[("16", 1), ("1/Δ_S", "paper")] == "–" and mine.loc[("16", 1), ("T", own[0].name)] == "16"
    assert mine.loc[("128", 2), ("1/Δ_S", own[0].name)] == "–" and mine.loc[("128", 2), ("1/Δ_S", "paper")] == "1.32"
    assert tables.full_table(own, summary.paper_table("table1")).loc[
        ("32", 1), ("recovery_unweighted", archive.column_name("cpu-paper"))] == 1.2
    # a reader's own settings: their run leads, the archive beside it
    assert [s.name for s in tables.sources("table1", "cpu", live, found, live_first=True)] == [
        "cpu (your settings)", archive.column_name("cpu-paper")]
    with pytest.raises(ValueError, match="experiment"):
        tables.sources("table3", "cpu", live, found)


def test_matched_table_counts_each_claims_votes_or_says_there_is_no_stage_study(tmp_path, monkeypatch):
    # execute: the archived cpu-paper stage study (eight checkpoints after θ_0, six of them in the paper's accuracy
    # range) and its α-cross (the α split also along its two other trajectories)
    v = tables.matched_values("cpu-paper", ("cliff", "alpha_weighting"), "x")
    t = tables.matched_table("cpu-paper", ("cliff", "alpha_weighting"))
    # assert: the votes split into held, in part, within tolerance and against; the verdict follows the rule
    assert v["x_m_study"] and v["x_m_cross"] == (1.0, 0.1)
    assert list(t.index) == ["The cliff", "α = 0.1 split"]
    assert (t.loc["The cliff", "vote"], t.loc["The cliff", "before"]) == (6, 2)
    assert t.loc["α = 0.1 split", "vote"] + t.loc["α = 0.1 split", "before"] == 24
    for _, r in t.iterrows():
        assert r["hold"] + r["in part"] + r["within tolerance"] + r["against"] == r["vote"]
        assert r["verdict"] == ("holds" if r["hold"] == r["vote"] else "does not hold" if 2 * r["against"] > r["vote"]
                                else "partly")
    # without a stage study: only that
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(tmp_path))
    assert tables.matched_values("cpu-paper", ("cliff",), "x") == {"x_m_study": False, "x_m_cross": ()}
    assert tables.matched_table("cpu-paper", ("cliff",)) is None


def test_roles_name_the_live_source_the_one_it_is_compared_with_and_the_most_seeds():
    # prepare: an archived source of 5 seeds, another of 1, this build's of 1
    a, b, live = (tables.Source(n, None, None, None, k, 200) for n, k in (("a", 5), ("b", 1), ("cpu", 1)))
    # execute / assert: the live run last (the default build) or first (a reader's own run), compared with the
    # closest archived source either way; alone, it is compared with itself
    assert tables.roles([a, b, live], False) == (live, a, a)
    assert tables.roles([live, a, b], True) == (live, a, a)
    assert tables.roles([live], True) == (live, live, live)
