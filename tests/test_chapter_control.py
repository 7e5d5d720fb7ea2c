"""The control chapter's findings (maskfed.chapters.control) on hand-made control rounds."""

import pandas as pd
import pytest

from maskfed.chapters import control as chapter


def rounds(unw, w, sigma2, a, spread) -> pd.DataFrame:
    return pd.DataFrame({"seed": 0, "round": range(1, len(unw) + 1), "recovery_unweighted": unw,
                         "recovery_weighted": w, "sigma2_hat": sigma2, "A": a, "update_spread": spread,
                         "train_loss": 2.0, "test_acc": 0.1})


def test_perturbed_is_the_hand_computed_relative_change():
    # execute / assert: ε² (1/K_c − 1/K_c²) at ε = 1e-3: K_c = 10 gives 9e-8, K_c = 2 gives 2.5e-7
    assert chapter.perturbed(10) == pytest.approx(9e-8)
    assert chapter.perturbed(2) == pytest.approx(2.5e-7)


def test_values_of_an_exact_control_against_k_c_not_k():
    # prepare: K_c = 4 exact in the first round, 1e-14 off in the second
    m = rounds([4.0, 4.0 * (1 + 1e-14)], [4.0, 4.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0])
    # execute
    got = chapter.control_values(m, 4, 1e-12, ["cpu"], determinism=True)
    # assert: judged against K_c = 4 (a check against 100 clients would see a 96 % deviation)
    assert got["ctl_rel_unw"] == pytest.approx(1e-14, rel=1e-2)
    assert got["ctl_rel_w"] == 0.0 and got["ctl_sigma_rel"] == 0.0 and got["ctl_spread"] == 0.0
    assert got["ctl_kc"] == 4 and got["ctl_rounds"] == 2 and got["ctl_tol"] == 1e-12
    assert got["ctl_devices"] == "cpu" and got["ctl_determinism"] == "on"
    # ε² (1/K_c − 1/K_c²) = 1e-6 · 3/16 = 1.875e-7, to one significant digit as the text reads it
    assert got["ctl_perturbed"] == pytest.approx(2e-7)


def test_significant_rounds_as_a_reader_writes_a_deviation():
    # execute / assert: two significant digits of the float64 rounding; zero and NaN as they are
    assert chapter.significant(2.220446049250313e-16, 2) == pytest.approx(2.2e-16, rel=1e-12)
    assert chapter.significant(1.875e-7, 1) == pytest.approx(2e-7, rel=1e-12)
    assert chapter.significant(0.0, 2) == 0.0
    assert chapter.significant(float("nan"), 2) != chapter.significant(float("nan"), 2)


def test_a_control_off_by_more_than_the_tolerance_fails_the_chapter():
    # prepare: σ̂² = 1e-6 of A in round 2; a NaN spread
    off = rounds([4.0, 4.0], [4.0, 4.0], [0.0, 1e-6], [1.0, 1.0], [0.0, 0.0])
    nan = rounds([4.0], [4.0], [0.0], [1.0], [float("nan")])
    # execute / assert
    with pytest.raises(chapter.ControlFailed, match="sigma2_rel"):
        chapter.control_values(off, 4, 1e-12, ["cpu"], determinism=False)
    with pytest.raises(chapter.ControlFailed, match="update_spread"):
        chapter.control_values(nan, 4, 1e-12, ["cpu"], determinism=False)
    # a tolerance too loose to catch a 0.1 % difference between two clients fails too
    exact = rounds([4.0], [4.0], [0.0], [1.0], [0.0])
    with pytest.raises(chapter.ControlFailed, match="would let through"):
        chapter.control_values(exact, 4, 1e-6, ["cpu"], determinism=False)


def test_table_last_rounds_shows_each_rounds_deviation():
    # prepare: K_c = 4, 10 % over in the last round
    m = rounds([4.0, 4.0, 4.4], [4.0, 4.0, 4.0], [0.0, 0.0, 0.5], [1.0, 1.0, 2.0], [0.0, 0.0, 0.0])
    # execute
    t = chapter.table_last_rounds(m, 4, n=2)
    # assert: the last two rounds, deviations from K_c
    assert list(t["round"]) == [2, 3]
    assert t["dev_unweighted"].tolist() == pytest.approx([0.0, 0.1])
    assert t["sigma2_rel"].tolist() == pytest.approx([0.0, 0.25])
    assert set(chapter.LAST_ROUNDS_FORMATS) <= set(t.columns)
