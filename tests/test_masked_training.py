"""The masked-training chapter's helpers: settings, summaries and the stated verdict rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from maskfed.engine.config import load_profile
from maskfed.studies import masked_training as M

PROTOCOLS = {"full": ("full", 1), "bs16": (16, 1)}


def test_settings_run_p1_once_per_protocol():
    s = M.settings(PROTOCOLS, [1, 0.5], ["independent", "shared"])
    assert s == [M.Setting("full", 1.0, "none"), M.Setting("full", 0.5, "independent"), M.Setting("full", 0.5, "shared"),
                 M.Setting("bs16", 1.0, "none"), M.Setting("bs16", 0.5, "independent"), M.Setting("bs16", 0.5, "shared")]
    with pytest.raises(ValueError, match="p"):
        M.settings(PROTOCOLS, [0.0], ["shared"])
    with pytest.raises(ValueError, match=r"modes .*'blockwise'"):
        M.settings(PROTOCOLS, [0.5], ["blockwise"])


def test_configs_set_masks_and_hessian_logging_only_where_read():
    prof = load_profile("smoke", seeds=[0, 1])
    cfgs = M.configs(prof, PROTOCOLS, [1, 0.5], ["shared"], sharpness_iters=3, hessian_every=2, hessian_batch=32,
                     rounds=3)
    assert len(cfgs) == 2 * 2 * 2
    plain = cfgs[(M.Setting("bs16", 1.0, "none"), 1)]
    masked = cfgs[(M.Setting("bs16", 0.5, "shared"), 1)]
    assert (plain.mask_keep_prob, plain.hessian_every, plain.batch_size, plain.rounds, plain.seed) == (1.0, 2, 16, 3, 1)
    assert (masked.mask_keep_prob, masked.mask_mode, masked.hessian_every, masked.sharpness_iters) == (0.5, "shared", 0, 3)


def _final():
    rows = []
    for seed, (a1, a2, e1, e2) in enumerate([(0.50, 0.60, 10.0, 5.0), (0.52, 0.61, 11.0, 12.0), (0.51, 0.62, 12.0, 4.0)]):
        rows += [{"protocol": "full", "p": 1.0, "mode": "none", "seed": seed, "test_acc": a1,
                  "sharpness_top_eig": e1, "sharpness_trace": 100.0},
                 {"protocol": "full", "p": 0.5, "mode": "shared", "seed": seed, "test_acc": a2,
                  "sharpness_top_eig": e2, "sharpness_trace": 100.0 + seed}]
    return pd.DataFrame(rows)


def test_summary_medians_and_ranges_hand_case():
    s = M.summary(_final())
    masked = s[s.p == 0.5].iloc[0]
    assert masked.seeds == 3
    assert (masked.test_acc_median, masked.test_acc_min, masked.test_acc_max) == (0.61, 0.60, 0.62)
    assert (masked.sharpness_top_eig_median, masked.sharpness_top_eig_min, masked.sharpness_top_eig_max) == (5.0, 4.0, 12.0)




def test_recovery_trajectory_keeps_the_logged_rounds_of_unmasked_runs():
    m = pd.DataFrame({"round": [1, 2, 3], "recovery_unweighted": [2.0, 3.0, 4.0],
                      "recovery_hessian_unweighted": [math.nan, 5.0, math.nan]})
    t = M.recovery_trajectory({(M.Setting("full", 1.0, "none"), 0): m, (M.Setting("full", 0.5, "shared"), 0): m})
    assert t.to_dict("records") == [{"protocol": "full", "seed": 0, "round": 2, "euclidean": 3.0, "hessian": 5.0,
                                     "gap": 2.0}]


def test_shared_against_independent_uses_the_same_rule():
    # prepare: at p = 0.5 the shared runs reach [0.60, 0.62], the independent ones [0.40, 0.45]
    final = _final()
    indep = final[final.p == 0.5].assign(mode="independent", test_acc=[0.40, 0.45, 0.42],
                                         sharpness_top_eig=[4.0, 5.0, 12.0])
    summ = M.summary(pd.concat([final, indep], ignore_index=True))
    # execute
    v = M.shared_vs_independent(summ).set_index("metric")
    # assert: accuracy beyond the spread, the rest within it, one row per metric
    assert v.loc["test accuracy", "verdict"] == "better"
    assert v.loc["test accuracy", "median difference"] == pytest.approx(0.61 - 0.42)
    assert v.loc["top Hessian eigenvalue", "verdict"] == "within seed spread"
    assert len(v) == len(M.FINAL_METRICS) and set(v["protocol"]) == {"full"}
    assert M.shared_vs_independent(M.summary(final)).empty  # no independent runs: nothing to compare


@pytest.mark.slow
def test_the_chapter_stops_when_the_archive_contradicts_its_text(tmp_path, monkeypatch):
    # prepare: an archive of the cpu-masked runs (written by hand: the shared mask reaches a higher accuracy
    # in every seed, sharpness the same), which contradicts what the chapter says of the real archive, and
    # the chapter's own live runs at the smoke profile
    import json

    import nbformat
    import numpy as np

    from maskfed import provenance
    from maskfed.studies import archive
    from maskfed.book import notebooks
    from maskfed.engine import runner
    from maskfed.engine.config import load_profile

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(tmp_path / "archive"))
    for (s, seed), cfg in M.profile_configs(load_profile("cpu-masked")).items():
        folder = tmp_path / "archive" / "cpu-masked" / cfg.label()
        folder.mkdir(parents=True)
        acc = 0.6 + 0.01 * seed + (0.1 if s.mode == "shared" else 0.0)
        last = lambda v: [np.nan] * (cfg.rounds - 1) + [v]  # noqa: E731
        given = {"round": range(1, cfg.rounds + 1), "recovery_unweighted": 1.2, "recovery_weighted": 1.2,
                 "mu2_hat": 1.0, "sigma2_hat": 2.0, "test_acc": acc, "sharpness_top_eig": last(10.0 + seed),
                 "sharpness_trace": last(100.0 + seed)}
        # every column a run of this config writes (runner.expected_columns), the others filled with 1.0
        pd.DataFrame({c: given.get(c, 1.0) for c in runner.expected_columns(cfg)}).to_csv(folder / "metrics.csv",
                                                                                          index=False)
        (folder / "config.json").write_text(cfg.model_dump_json())
        (folder / "partition.json").write_text(json.dumps({"sizes": [1], "min": 1, "max": 1}))
        (folder / "provenance.json").write_text(json.dumps({
            "seed": seed, "code_hash": provenance.code_hash(), "commit": "a" * 40, "dirty": False,
            "machine": {"device": "cpu", "cpu_model": "test CPU"}, "finished_utc": "2026-12-02T10:00:00+00:00"}))
    assert len(archive.load_archive("cpu-masked")) == 18
    # execute
    with pytest.raises(Exception, match="no longer matches"):
        notebooks.execute("masked_training", profile="smoke", out_dir=tmp_path / "nb")
    # assert: the archived section read the hand-made runs, and the check named the sentences they contradict
    failed = nbformat.read(notebooks.failed_path("masked_training", tmp_path / "nb"), as_version=4)
    glued, errors = {}, []
    for cell in failed.cells:
        for o in cell.get("outputs", []):
            if "scrapbook" in o.get("metadata", {}):
                glued[o["metadata"]["scrapbook"]["name"]] = next(iter(o["data"].values())).strip("'")
            if o.get("output_type") == "error":
                errors.append(o["evalue"])
    assert glued["mt_long_status"] == "shown" and glued["mt_long_seeds"] == "3" and glued["mt_long_n_missing"] == "0"
    assert glued["mt_long_n_mode"] == "6" and glued["mt_long_n_mode_within"] == "4"  # accuracy beyond the spread, twice
    assert "shared-against-independent" in errors[0] and "seed spread" in errors[0]  # the two sentences contradicted
    assert "masked setting" in errors[0] and "unmasked runs" in errors[0]
