"""Figure helpers (maskfed.plots)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from maskfed.plots import plain_log_ticks  # noqa: E402


def test_plain_log_ticks_writes_plain_numbers_on_a_short_log_axis():
    # prepare: a log axis spanning less than a decade, where matplotlib writes 3×10⁰
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.set_ylim(2, 7)
    # execute
    plain_log_ticks(ax, "y")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]
    plt.close(fig)
    # assert
    assert "3" in labels and "5" in labels
    assert not any("×" in t or "$" in t for t in labels)  # no 3×10⁰ (mathtext)


def test_plain_log_ticks_refuses_an_unknown_axis():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="axis must be 'x' or 'y'"):
        plain_log_ticks(ax, "z")
    plt.close(fig)
