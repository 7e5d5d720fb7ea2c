"""The Flower chapter's helpers (maskfed.chapters.flower) on hand-made round tables (no Flower run)."""

import pandas as pd
import pytest

from maskfed.chapters import flower as chapter


def tables(gap: float, unmasked_from: str):
    # two rounds; the strategy's 1/Δ_S off run_fedavg's by a relative ``gap`` in round 2
    ref = pd.DataFrame({"round": [1, 2], "recovery_unweighted": [2.0, 1.5], "recovery_weighted": [2.0, 1.5],
                        "sigma2_hat": [1.0, 1.0], "mu2_hat": [0.1, 0.1]}).set_index("round")
    table = ref.copy()
    table.loc[2, "recovery_unweighted"] *= 1 + gap
    table["unmasked_from"] = unmasked_from
    for m in ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat"):
        table[f"masked_{m}"] = 3.0
    return table, ref


def found(monkeypatch, gap: float, unmasked_from: str, mask_keep_prob):
    # the smoke profile's first run, two rounds, with the hand-made tables in place of the Flower simulation
    monkeypatch.setattr(chapter, "simulate_rounds", lambda cfg, p: tables(gap, unmasked_from))
    return chapter.findings("smoke", overrides={"rounds": 2}, mask_keep_prob=mask_keep_prob)


def test_findings_glue_the_largest_gap_and_the_mask(monkeypatch):
    # execute
    got = found(monkeypatch, 4.04e-6, "client metrics", 0.5)
    # assert: the gap to two significant digits, the smoke setting's K_c of K, p as given
    assert got.values["fl_gap"] == pytest.approx(4e-6)
    assert got.values["fl_p"] == 0.5 and got.values["fl_rounds"] == 2
    assert (got.values["fl_kc"], got.values["fl_k"]) == (got.cfg.cohort_size, got.cfg.num_clients)
    assert found(monkeypatch, 0.0, "received", None).values["fl_p"] == "none"


def test_a_gap_beyond_float32_rounding_or_the_wrong_source_fails_the_page(monkeypatch):
    with pytest.raises(chapter.FlowerDisagrees, match="differ"):
        found(monkeypatch, 2e-5, "client metrics", 0.5)
    # without a mask the unmasked updates are the received ones, not client metrics
    with pytest.raises(chapter.FlowerDisagrees, match="expected 'received'"):
        found(monkeypatch, 0.0, "client metrics", None)


def test_sources_table_has_a_masked_column_only_under_a_mask():
    table, ref = tables(0.0, "client metrics")
    masked = chapter.sources_table(table, ref, 0.5)
    plain = chapter.sources_table(table, ref, None)
    assert list(masked["recovery_unweighted"].columns) == ["unmasked (sent)", "masked (received)",
                                                           "run_fedavg (unmasked)"]
    assert masked[("recovery_unweighted", "masked (received)")].tolist() == [3.0, 3.0]
    assert list(plain["recovery_unweighted"].columns) == ["unmasked (received)", "run_fedavg (unmasked)"]
