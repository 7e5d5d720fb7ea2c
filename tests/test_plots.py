"""Figure 1 draws one filled series per source (live, archived profiles) and the paper's hollow one."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from maskfed.plots import recovery_vs_accuracy  # noqa: E402
from maskfed.summary import paper_table  # noqa: E402


def _summary(rec: float) -> pd.DataFrame:
    idx = pd.MultiIndex.from_tuples([("32", 1), ("full", 1)], names=["batch_size", "local_epochs"])
    return pd.DataFrame({"recovery_unweighted": [rec, 2 * rec], "test_acc": [0.5, 0.4]}, index=idx)


def test_recovery_vs_accuracy_draws_archived_sources_in_their_own_colour():
    fig, ax = plt.subplots()
    recovery_vs_accuracy(_summary(1.5), paper_table("table1"), ax=ax, ours_label="cpu",
                         others={"cpu-long (archived)": _summary(1.2)})
    points = [(c.get_offsets()[0].tolist(), tuple(c.get_facecolor().ravel())) for c in ax.collections]
    assert len(points) == 2 + 2 + 9                          # live, archived, the paper's nine protocols
    live, archived = points[:2], points[2:4]
    assert [p for p, _ in live] == [[50.0, 1.5], [40.0, 3.0]]
    assert [p for p, _ in archived] == [[50.0, 1.2], [40.0, 2.4]]
    assert live[0][1] != archived[0][1] and live[0][1]       # a (filled) colour per source
    assert all(face == () for _, face in points[4:])          # the paper's markers stay hollow
    labels = ax.get_legend_handles_labels()[1]
    assert "cpu-long (archived), bs=32" in labels and "cpu, bs=32" in labels
    plt.close(fig)
