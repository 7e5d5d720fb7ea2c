"""Findings of the appendix "How fast one FedAvg round runs" (``notebooks/performance.md``): the newest
``make bench`` CSV (else a tiny benchmark), its images per second and three ratios against their targets."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from maskfed.engine.config import PROFILES
from maskfed.perf import bench

#: The ratio columns of :func:`maskfed.perf.bench.ratios`, each shown to 2 decimals.
RATIOS = ("P2_ours_over_bare", "P3_typical_over_ours", "batched_speedup")
#: Each ratio's target, by the name the targets table gives it (P3 and batched: on a GPU).
TARGETS = {"P2 (ours / bare)": "≤ 1.05", "P3 (typical / ours)": "≥ 3 (GPU)", "batched / sequential": "> 1 (GPU)"}


@dataclass(frozen=True)
class Findings:
    """``values`` (glue names), the benchmark rows, images per second per path, the targets table and the
    ratios per protocol."""

    values: dict
    df: pd.DataFrame
    throughput: pd.DataFrame
    targets: pd.DataFrame
    ratios: pd.DataFrame


def source_values(df: pd.DataFrame, file: str | None) -> dict:
    """Where, on what and with which model the benchmark ``df`` ran (read from ``file``; None: the
    tiny one), and a round's time in whole ms (min and max over the protocols' medians)."""
    first = df.iloc[0]
    round_ms = 1000 * df.groupby(["precision", "batch_size", "local_epochs"])["seconds"].median()
    return {"perf_source": "tiny bench" if file is None else "make bench", "perf_file": file or "none",
            "perf_where": first["cuda_device"] if first["device"] == "cuda" else first["machine"],
            "perf_device": first["device"], "perf_threads": int(first["threads"]), "perf_torch": first["torch"],
            "perf_model": first["model"], "perf_n_params": int(first["num_parameters"]),
            "perf_profile": first["profile"], "perf_clients": int(first["clients"]),
            "perf_batch_sizes": " and ".join(sorted(set(df["batch_size"].astype(str)))),
            "perf_repeats": int(first["repeats"]),
            "perf_ms_lo": round(float(round_ms.min())), "perf_ms_hi": round(float(round_ms.max()))}


def targets_table(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per ratio of :data:`TARGETS`: lowest and highest over the protocols, and its target.

    Raises:
        KeyError: ``ratios`` lacks a column of :data:`RATIOS`."""
    return pd.DataFrame({"ratio": list(TARGETS), "lowest": [ratios[r].min() for r in RATIOS],
                         "highest": [ratios[r].max() for r in RATIOS], "target": list(TARGETS.values())}
                        ).set_index("ratio")


def ratio_values(df: pd.DataFrame, ratios: pd.DataFrame) -> dict:
    """The protocol of the largest P2, its local steps, the engine ``auto`` picks, the lowest P3."""
    steps = df.groupby(["batch_size", "local_epochs"])["steps"].max()
    worst = ratios.loc[ratios["P2_ours_over_bare"].idxmax()]
    return {"perf_p2_bs": worst["batch_size"], "perf_p2_tau": int(worst["local_epochs"]),
            "perf_p2_steps": int(steps.loc[(worst["batch_size"], worst["local_epochs"])]),
            "perf_ours": ", ".join(sorted(set(ratios["ours"]))),
            "perf_p3_lo": round(float(ratios["P3_typical_over_ours"].min()), 2)}


def findings(profile: str = "smoke") -> Findings:
    """Read the newest benchmark (or run the tiny one); ``profile`` is checked but not read.

    Raises:
        ValueError: unknown profile; as :func:`maskfed.perf.bench.latest_or_tiny`."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {list(PROFILES)}; got {profile!r}")
    path = bench.latest_csv()
    df, _ = bench.latest_or_tiny()
    ratios = bench.ratios(df)
    table = df.pivot_table(index=["precision", "batch_size", "local_epochs", "steps"], columns="path",
                           values="images_per_s", sort=False)
    return Findings(values={**source_values(df, None if path is None else path.name), **ratio_values(df, ratios)},
                    df=df, throughput=table[[p for p in bench.PATHS if p in table.columns]],
                    targets=targets_table(ratios), ratios=ratios)
