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


def test_spread_rounds_alike_or_gives_the_range():
    assert chapter.spread(pd.Series([1.001, 1.004])) == "1.00"
    assert chapter.spread(pd.Series([1.0, 1.1])) == "1.00 to 1.10"


def test_targets_name_the_worst_p2_protocol_and_p3_below_one():
    # prepare
    df = rows()
    # execute
    t = chapter.targets_table(df, bench.ratios(df))
    # assert: P2 = 2.2/2.0 = 1.10 at bs 32 (16 steps), 1.00 at full; P3 = 1.1/2.2 = 0.5 and 1.5/0.5 = 3
    assert t.loc["P2 = ours / bare SGD time", "here"] == "1.00 to 1.10"
    assert "largest for bs 32, τ 1 (16 local steps in the round, its 10 clients together)" in \
        t.loc["P2 = ours / bare SGD time", "why it is where it is"]
    assert t.loc["P3 = typical / ours time", "here"] == "0.50 to 3.00"
    assert "below 1 it was the faster of the two here" in t.loc["P3 = typical / ours time", "why it is where it is"]
    assert t.loc["batched / sequential speed", "here"] == "0.50"


def test_source_values_say_when_the_numbers_are_a_tiny_run():
    # execute
    real = chapter.source_values(rows(), "file.csv", tiny=False)
    tiny = chapter.source_values(rows(), "now", tiny=True)
    # assert: a round's time is the median over the paths of a protocol: (2.0 + 2.2) / 2 s and (0.5 + 1.0) / 2 s
    assert real["perf_machine"] == "Xeon (cpu, 2 torch thread(s), torch 2.14.1)"
    assert real["perf_model"] == "small_cnn_gn (62,006 parameters), profile cpu"
    assert real["perf_what"].endswith("a round takes 750 to 2100 ms there.")
    assert tiny["perf_what"].startswith("These numbers are not a measurement of this project's speed.")
    assert "batch sizes 32 and full with τ = 1" in tiny["perf_what"]


def test_ratios_formats_cover_the_ratio_columns():
    assert set(chapter.RATIOS) <= set(bench.ratios(rows()).columns)
    with pytest.raises(KeyError):
        chapter.targets_table(rows(), bench.ratios(rows()).drop(columns="P3_typical_over_ours"))
