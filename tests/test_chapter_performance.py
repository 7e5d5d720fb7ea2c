"""The performance appendix's helpers (maskfed.chapters.performance) on hand-made benchmark rows."""

import pandas as pd
import pytest

from maskfed.chapters import performance as chapter
from maskfed.perf import bench


def rows() -> pd.DataFrame:
    # one machine, two protocols (bs 32 τ 1: 16 steps; full τ 1: 1 step), four paths, seconds by hand
    out = []
    for bs, steps, sec in (("32", 16, {"ours_sequential": 2.2, "ours_batched": 4.4, "bare_sgd": 2.0,
                                       "typical_fedavg": 1.1}),
                           ("full", 1, {"ours_sequential": 0.5, "ours_batched": 1.0, "bare_sgd": 0.5,
                                        "typical_fedavg": 1.5})):
        for path, s in sec.items():
            out.append({"machine": "Xeon", "device": "cpu", "cuda_device": "", "torch": "2.14.1", "threads": 2,
                        "profile": "cpu", "model": "small_cnn_gn", "num_parameters": 62006, "precision": "fp32",
                        "batch_size": bs, "local_epochs": 1, "path": path, "clients": 10, "steps": steps,
                        "images": 100, "seconds": s, "images_per_s": 100 / s, "repeats": 3})
    return pd.DataFrame(out)


def test_targets_give_each_ratio_its_range():
    # prepare
    df = rows()
    # execute
    t = chapter.targets_table(bench.ratios(df))
    # assert: P2 = 2.2/2.0 = 1.10 at bs 32, 0.5/0.5 = 1 at full; P3 = 1.1/2.2 = 0.5 and 1.5/0.5 = 3;
    # batched 2.2/4.4 = 0.5/1.0 = 0.5 at both
    assert list(t.index) == list(chapter.TARGETS)
    assert (t.iloc[0]["lowest"], t.iloc[0]["highest"]) == pytest.approx((1.0, 1.1))
    assert (t.iloc[1]["lowest"], t.iloc[1]["highest"]) == pytest.approx((0.5, 3.0))
    assert (t.iloc[2]["lowest"], t.iloc[2]["highest"]) == pytest.approx((0.5, 0.5))


def test_ratio_values_name_the_worst_p2_protocol():
    # prepare
    df = rows()
    # execute
    got = chapter.ratio_values(df, bench.ratios(df))
    # assert: P2 is largest at bs 32, τ 1 (16 steps); the lowest P3 is 0.5; the CPU's auto engine is sequential
    assert (got["perf_p2_bs"], got["perf_p2_tau"], got["perf_p2_steps"]) == ("32", 1, 16)
    assert got["perf_p3_lo"] == 0.5 and got["perf_ours"] == "sequential"


def test_source_values_name_the_source_and_a_round_time():
    # execute
    real = chapter.source_values(rows(), "file.csv")
    tiny = chapter.source_values(rows(), None)
    # assert: a round's time is the median over the paths of a protocol: (2.0 + 2.2) / 2 s and (0.5 + 1.0) / 2 s
    assert (real["perf_source"], real["perf_file"]) == ("make bench", "file.csv")
    assert (tiny["perf_source"], tiny["perf_file"]) == ("tiny bench", "none")
    assert (real["perf_where"], real["perf_device"], real["perf_threads"], real["perf_torch"]) == (
        "Xeon", "cpu", 2, "2.14.1")
    assert (real["perf_model"], real["perf_n_params"], real["perf_profile"]) == ("small_cnn_gn", 62006, "cpu")
    assert (real["perf_ms_lo"], real["perf_ms_hi"]) == (750, 2100)
    assert (tiny["perf_batch_sizes"], tiny["perf_repeats"], tiny["perf_clients"]) == ("32 and full", 3, 10)


def test_ratios_formats_cover_the_ratio_columns():
    assert set(chapter.RATIOS) <= set(bench.ratios(rows()).columns)
    with pytest.raises(KeyError):
        chapter.targets_table(bench.ratios(rows()).drop(columns="P3_typical_over_ours"))


def test_findings_refuses_an_unknown_profile():
    with pytest.raises(ValueError, match=r"profile .*'nope'"):
        chapter.findings("nope")
