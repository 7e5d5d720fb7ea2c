"""The masked-training chapter's helpers: settings, summaries and the stated verdict rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from maskfed.fl import masked_training as M
from maskfed.fl.config import load_profile

PROTOCOLS = {"full": ("full", 1), "bs16": (16, 1)}


def test_settings_run_p1_once_per_protocol():
    s = M.settings(PROTOCOLS, [1, 0.5], ["independent", "shared"])
    assert s == [M.Setting("full", 1.0, "none"), M.Setting("full", 0.5, "independent"), M.Setting("full", 0.5, "shared"),
                 M.Setting("bs16", 1.0, "none"), M.Setting("bs16", 0.5, "independent"), M.Setting("bs16", 0.5, "shared")]
    with pytest.raises(ValueError, match="p"):
        M.settings(PROTOCOLS, [0.0], ["shared"])
    with pytest.raises(ValueError, match="modes must be among"):
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


def test_verdict_rule_needs_disjoint_ranges():
    v = M.verdicts(M.summary(_final())).set_index("metric")
    assert v.loc["test accuracy", "verdict"] == "better"                   # [0.60, 0.62] above [0.50, 0.52]
    assert v.loc["test accuracy", "median difference"] == pytest.approx(0.10)
    assert v.loc["top Hessian eigenvalue", "verdict"] == "within seed spread"  # [4, 12] overlaps [10, 12]
    assert v.loc["Hessian trace", "verdict"] == "within seed spread"        # [100, 102] touches 100
    assert "test accuracy at p = 0.5, shared masks, full" in M.answer(v.reset_index())
    worse = _final().assign(test_acc=lambda d: d.test_acc.where(d.p == 1.0, 0.1))
    assert M.verdicts(M.summary(worse)).set_index("metric").loc["test accuracy", "verdict"] == "worse"
    assert M.answer(M.verdicts(M.summary(worse))).startswith("no masked setting")


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
