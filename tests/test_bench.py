"""Tests for maskfed.perf.bench at tiny sizes: the CSV columns, and that bare SGD, the typical loop and
our round make the same number of local steps over the same images."""

from __future__ import annotations

import pytest

from maskfed.book.plots import throughput
from maskfed.engine import cohort as C
from maskfed.perf import bench


@pytest.mark.slow
def test_bench_columns_and_equal_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    # prepare / execute: two protocols of the smoke profile, every path, one timed round
    df = bench.bench("smoke", protocols=[(16, 2), ("full", 1)], repeats=1, device="cpu")
    # assert: the documented columns, one row per (protocol, path)
    assert list(df.columns) == bench.COLUMNS
    assert len(df) == 2 * len(bench.PATHS) and set(df["path"]) == set(bench.PATHS)
    assert (df["seconds"] > 0).all() and (df["device"] == "cpu").all() and df["machine"].nunique() == 1
    for (bs, tau), g in df.groupby(["batch_size", "local_epochs"]):
        # every path makes the same steps: Σ_k ceil(n_k/bs)·τ over round 0's cohort
        assert g["steps"].nunique() == 1, g[["path", "steps"]]
        assert g["images"].nunique() == 1
    # each engine's own work, for the device check's projection: the batched engine makes max_k T_k steps
    for (bs, tau), g in df.groupby(["batch_size", "local_epochs"]):
        by = g.set_index("path")
        assert by.loc["ours_sequential", "steps_computed"] == by.loc["ours_sequential", "steps"]
        assert by.loc["ours_batched", "steps_computed"] < by.loc["ours_batched", "steps"]
        assert by.loc["ours_batched", "images_computed"] >= by.loc["ours_batched", "images"]  # padding
    assert df["peak_mem_gib"].isna().all()  # GPU memory: none on the CPU
    r = bench.ratios(df)
    assert set(r.columns) >= {"P2_ours_over_bare", "P3_typical_over_ours", "batched_speedup"}
    assert r["P2_ours_over_bare"].notna().all() and (r["P2_ours_over_bare"] > 0).all()


@pytest.mark.slow
def test_round_bench_steps_match_local_steps():
    from maskfed.engine import runner
    from maskfed.engine.config import load_profile
    from maskfed.engine.models import build_model
    import torch

    cfg = load_profile("smoke").run(0, device="cpu", alpha=0.1)
    data = runner.prepare_data(cfg, runner.images_for(cfg), torch.device("cpu"))
    torch.manual_seed(0)
    rb = bench.RoundBench(build_model("small_cnn_gn", width=2), data, cohort_size=3, lr=0.01)
    expected = sum(C.local_steps(n, 16, 2) for n in rb.n_K)
    for path in bench.PATHS:
        assert rb.time_path(path, 16, 2)[1] == expected, path


def test_bench_rejects_bad_inputs_before_timing():
    with pytest.raises(ValueError, match="paths"):
        bench.bench("smoke", paths=("fast",), device="cpu")
    with pytest.raises(ValueError, match="precision"):
        bench.bench("smoke", precisions=("bf16",), device="cpu")
    with pytest.raises(ValueError, match="repeats"):
        bench.bench("smoke", repeats=0, device="cpu")


def test_paths_leave_theta_unchanged():
    # every path starts from the same θ: a path that trained θ in place would bias the next one
    import torch
    from maskfed.engine import runner
    from maskfed.engine.config import load_profile
    from maskfed.engine.models import build_model

    cfg = load_profile("smoke").run(0, device="cpu")
    data = runner.prepare_data(cfg, runner.images_for(cfg), torch.device("cpu"))
    torch.manual_seed(0)
    rb = bench.RoundBench(build_model("small_cnn_gn", width=2), data, cohort_size=3, lr=0.1)
    theta0 = rb.theta.clone()
    for path in bench.PATHS:
        rb.time_path(path, 16, 1)
        assert torch.equal(rb.theta, theta0), path


def test_figure_legend_names_the_paths_as_a_reader_does():
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    # prepare: one protocol, every path, hand-made speeds
    df = pd.DataFrame({"batch_size": "32", "local_epochs": 1, "precision": "fp32", "path": list(bench.PATHS),
                       "images_per_s": [100.0, 200.0, 110.0, 50.0]})
    # execute
    ax = throughput(df)
    # assert
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [bench.PATH_LABELS[p] for p in bench.PATHS]


def test_figure_follows_the_books_figure_rules_when_speeds_span_decades():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from maskfed.book.plots import STYLE, finish

    # prepare: bs 16 about 100 times slower than full batch, as at the smoke profile
    rows = [{"batch_size": bs, "local_epochs": 1, "precision": "fp32", "path": p, "images_per_s": v * f}
            for bs, v in (("16", 30.0), ("full", 3000.0)) for p, f in zip(bench.PATHS, (1.0, 0.8, 1.2, 0.9))]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        # execute
        throughput(pd.DataFrame(rows), ax=ax)
        # assert: a log axis (the slow bars stay visible) and every other rule
        assert ax.get_yscale() == "log"
        finish(fig)
    plt.close(fig)


def test_projection_check_compares_the_projection_with_the_runs_recorded_time(tmp_path, monkeypatch):
    # prepare: fabricated measurements, projection (2.6 s) and run (rounds of 0.5 + 1.5 s), no clock read
    import os
    import types

    import pandas as pd

    from maskfed.engine.config import load_profile

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "mine"))
    cfg = load_profile("smoke").run(0, alpha=0.1)
    asked = {}
    monkeypatch.setattr(bench, "bench", lambda profile, **kw: asked.setdefault("bench", kw) and pd.DataFrame())
    monkeypatch.setattr(bench, "eval_images_per_s", lambda profile, device: 1000.0)
    monkeypatch.setattr(bench, "project", lambda *a, **kw: pd.DataFrame(
        {"label": ["other", cfg.label()], "alpha": [100.0, 0.1], "partition": ["dirichlet"] * 2,
         "projected_s": [9.0, 2.6], "config": [None, cfg]}))

    def fake_run(c, progress):
        asked["results"] = os.environ["MASKFED_RESULTS_DIR"]
        return types.SimpleNamespace(metrics=pd.DataFrame({"wall_s": [0.5, 1.5]}))

    monkeypatch.setattr(bench.runner, "run", fake_run)
    # execute
    got = bench.projection_check("smoke")
    # assert: the α = 0.1 run's projection against its rounds' summed wall time, run in a scratch folder
    assert got["label"] == cfg.label()
    assert (got["projected_s"], got["measured_s"]) == (2.6, 2.0) and got["relative_error"] == pytest.approx(0.3)
    assert asked["bench"]["paths"] == ("ours_sequential",)
    assert asked["results"] != str(tmp_path / "mine") and os.environ["MASKFED_RESULTS_DIR"] == str(tmp_path / "mine")
