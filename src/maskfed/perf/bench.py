"""Throughput benchmark: one FedAvg round of ours against bare SGD and a typical FedAvg loop.

Same data, model, cohort, batches and local steps; per local protocol (batch size × τ) it times:

- ``ours_sequential`` / ``ours_batched``: :func:`maskfed.engine.cohort.train_cohort`, the aggregate
  and :func:`maskfed.engine.fedavg.round_metrics`;
- ``bare_sgd``: the same steps with ``torch.optim.SGD``, no FL bookkeeping (P2: ours/bare, target ≤ 1.05);
- ``typical_fedavg``: a DataLoader per client, ``copy.deepcopy`` per client, ``state_dict`` averaging
  (P3: typical/ours, target ≥ 3 on a GPU); its own shuffling, same number of steps and images.

``python -m maskfed.perf.bench`` (``make bench``) writes ``results/bench/bench-<utc>.csv`` (one machine
per CSV), prints the ratios, then :func:`projection_check` (reported, not asserted;
``--no-projection-check`` skips it). Rows carry the engine's steps and images
(:func:`maskfed.perf.projection.round_work`) and, on CUDA, peak GPU memory.
bf16 autocasts forward and loss only (:func:`maskfed.engine.cohort.forward_autocast`); TF32 settings are
:func:`maskfed.engine.cohort.precision_context`'s.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from maskfed import provenance
from maskfed.perf import projection

from maskfed.engine import cohort, fedavg, runner
from maskfed.engine.config import load_profile
from maskfed.engine.models import build_model
from maskfed.paths import results_dir
from maskfed.studies import experiments

PATHS = ("ours_sequential", "ours_batched", "bare_sgd", "typical_fedavg")
#: The paths as a reader names them (legends, table headers).
PATH_LABELS = {"ours_sequential": "ours, sequential", "ours_batched": "ours, batched", "bare_sgd": "bare SGD",
               "typical_fedavg": "typical FedAvg"}
COLUMNS = ["machine", "device", "cuda_device", "torch", "threads", "profile", "model", "num_parameters", "precision",
           "batch_size", "local_epochs", "path", "clients", "steps", "images", "seconds", "images_per_s",
           "repeats", "utc", "steps_computed", "images_computed", "peak_mem_gib"]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class RoundBench:
    """One round's fixed inputs (θ, cohort shards, generators' seeds) and the timed paths.

    ``cohort_size``: K_c (round 0's cohort of :func:`maskfed.engine.fedavg.sample_cohort`); ``model`` on ``data``'s device.
    """

    def __init__(self, model: nn.Module, data: fedavg.FedData, *, cohort_size: int, lr: float, seed: int = 0):
        self.model, self.data, self.lr, self.seed = model, data, lr, seed
        self.theta = parameters_to_vector(model.parameters()).detach().clone()
        self.cohort = fedavg.sample_cohort(len(data.parts), cohort_size, seed, 0)
        self.parts = [data.parts[k] for k in self.cohort]
        self.n_K = [len(p) for p in self.parts]

    def _gens(self):
        return [torch.Generator().manual_seed(fedavg.client_seed(self.seed, 0, int(k))) for k in self.cohort]

    def ours(self, engine: str, batch_size, local_epochs: int, precision: str = "fp32") -> int:
        """Our round (local training, aggregate, round metrics); returns the local steps made."""
        d = self.data
        deltas, n_K, T_K, _ = cohort.train_cohort(self.model, self.theta, d.x_train, d.y_train, self.parts, lr=self.lr,
                                                  batch_size=batch_size, local_epochs=local_epochs,
                                                  generators=self._gens(), engine=engine, precision=precision)
        theta = self.theta - fedavg.aggregate(deltas, fedavg.aggregation_weights(n_K))
        fedavg.round_metrics(deltas, n_K)
        _sync(theta.device)
        return sum(T_K)

    def bare_sgd(self, batch_size, local_epochs: int, precision: str = "fp32") -> int:
        """The same local steps on the same batches with torch.optim.SGD, no FL bookkeeping."""
        d, model, steps = self.data, self.model, 0
        amp = cohort.AUTOCAST_DTYPE[precision]
        with cohort.precision_context(precision, d.x_train.device):
            for idx_np, gen in zip(self.parts, self._gens()):
                vector_to_parameters(self.theta.clone(), model.parameters())  # clone: parameters become views
                opt = torch.optim.SGD(model.parameters(), lr=self.lr)
                shard = torch.as_tensor(idx_np, device=d.x_train.device)
                xk, yk = d.x_train[shard], d.y_train[shard]
                for b in cohort.client_batches(len(idx_np), batch_size, local_epochs, gen):
                    b = b.to(xk.device)
                    opt.zero_grad(set_to_none=True)
                    with cohort.forward_autocast(amp, xk.device.type):
                        loss = nn.functional.cross_entropy(model(xk[b]), yk[b])
                    loss.backward()
                    opt.step()
                    steps += 1
        _sync(d.x_train.device)
        return steps

    def typical_fedavg(self, batch_size, local_epochs: int, precision: str = "fp32") -> int:
        """A typical public FedAvg round: DataLoader per client, deepcopy per client, state_dict averaging."""
        from torch.utils.data import DataLoader, TensorDataset

        d, steps = self.data, 0
        vector_to_parameters(self.theta.clone(), self.model.parameters())  # clone: parameters become views
        global_model = self.model
        states, sizes = [], []
        amp = cohort.AUTOCAST_DTYPE[precision]
        with cohort.precision_context(precision, d.x_train.device):
            for k, idx_np in zip(self.cohort, self.parts):
                local = copy.deepcopy(global_model)
                local.train()
                opt = torch.optim.SGD(local.parameters(), lr=self.lr)
                shard = torch.as_tensor(idx_np, device=d.x_train.device)
                ds = TensorDataset(d.x_train[shard], d.y_train[shard])
                bs = len(idx_np) if batch_size == "full" else batch_size
                loader = DataLoader(ds, batch_size=bs, shuffle=True,
                                    generator=torch.Generator().manual_seed(int(k)))
                for _ in range(local_epochs):
                    for xb, yb in loader:
                        opt.zero_grad()
                        with cohort.forward_autocast(amp, xb.device.type):
                            loss = nn.functional.cross_entropy(local(xb), yb)
                        loss.backward()
                        opt.step()
                        steps += 1
                states.append(local.state_dict())
                sizes.append(len(idx_np))
        total = float(sum(sizes))
        avg = {name: sum(s[name] * (n / total) for s, n in zip(states, sizes)) for name in states[0]}
        global_model.load_state_dict(avg)
        _sync(d.x_train.device)
        return steps

    def time_path(self, path: str, batch_size, local_epochs: int, precision: str = "fp32") -> tuple[float, int]:
        """Seconds and local steps of one round along ``path`` (one of :data:`PATHS`)."""
        if path not in PATHS:
            raise ValueError(f"path must be one of {list(PATHS)}; got {path!r}")
        _sync(self.data.x_train.device)
        t0 = time.perf_counter()
        if path.startswith("ours_"):
            steps = self.ours(path.removeprefix("ours_"), batch_size, local_epochs, precision)
        else:
            steps = getattr(self, path)(batch_size, local_epochs, precision)
        return time.perf_counter() - t0, steps


def bench(profile: str = "cpu", *, protocols=None, paths=PATHS, precisions=("fp32",), repeats: int = 3,
          device: str | None = None, model: str | None = None, warmup: bool | None = None, **overrides) -> pd.DataFrame:
    """Time one round per (protocol, path, precision), ``repeats`` times interleaved; median seconds.

    ``warmup``: one untimed round per cell first (None: on CUDA only).

    Returns:
        One row per cell with :data:`COLUMNS` (images/s = τ · Σ n_k / seconds; ``steps_computed``,
        ``images_computed``: :func:`maskfed.perf.projection.round_work`; ``peak_mem_gib``: NaN on the CPU).

    Raises:
        ValueError / ConfigError: bad profile, path, precision or device (before any timing).
    """
    prof = load_profile(profile)
    fields = {**overrides, **({"device": device} if device else {}), **({"model": model} if model else {})}
    cfg = prof.run(prof.seeds[0], **fields)
    dev = runner.resolve_device(cfg.device)
    for p in paths:
        if p not in PATHS:
            raise ValueError(f"paths: {p!r} not allowed; choose from {list(PATHS)}")
    for p in precisions:
        cohort.check_precision(p, dev)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1; got {repeats}")
    protocols = protocols or [(bs, tau) for bs in prof.table1.batch_sizes for tau in prof.table1.local_epochs]
    images = runner.images_for(cfg)
    data = runner.prepare_data(cfg, images, dev)
    torch.manual_seed(cfg.seed)
    net = build_model(cfg.model, num_classes=len(images.classes), gn_groups=cfg.gn_groups,
                      width=cfg.width).to(dev)
    warmup = dev.type == "cuda" if warmup is None else warmup
    rb = RoundBench(net, data, cohort_size=cfg.cohort_size, lr=cfg.lr, seed=cfg.seed)
    mach = provenance.machine(str(dev))
    base = {"machine": cpu_model() + " | " + mach["platform"], "device": dev.type,
            "cuda_device": mach.get("cuda_device", ""), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "profile": profile, "model": cfg.model, "num_parameters": int(rb.theta.numel()),
            "clients": len(rb.cohort), "repeats": repeats}
    rows = []
    for precision in precisions:
        for bs, tau in protocols:
            if warmup:
                for path in paths:
                    rb.time_path(path, bs, tau, precision)
            times = {p: [] for p in paths}
            steps, peak = {}, {}
            for _ in range(repeats):
                for path in paths:
                    if dev.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(dev)
                    sec, steps[path] = rb.time_path(path, bs, tau, precision)
                    times[path].append(sec)
                    if dev.type == "cuda":  # GiB allocated at the peak of the cell's rounds
                        peak[path] = max(peak.get(path, 0.0), torch.cuda.max_memory_allocated(dev) / 2**30)
            n_img = tau * sum(rb.n_K)
            work = projection.round_work(rb.n_K, bs, tau)
            for path in paths:
                sec = statistics.median(times[path])
                kind = "batched" if path == "ours_batched" else "sequential"
                rows.append({**base, "precision": precision, "batch_size": str(bs), "local_epochs": tau, "path": path,
                             "steps": steps[path], "images": n_img, "seconds": sec, "images_per_s": n_img / sec,
                             "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "steps_computed": work[f"{kind}_steps"], "images_computed": work[f"{kind}_images"],
                             "peak_mem_gib": peak.get(path, float("nan"))})
    return pd.DataFrame(rows, columns=COLUMNS)


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per (precision, protocol): P2 = ours/bare time, P3 = typical/ours time, batched/sequential speed-up.

    "ours" is the engine ``engine="auto"`` picks on the bench's device (:data:`maskfed.engine.cohort.AUTO_ENGINE`).
    """
    out = []
    for (prec, bs, tau), g in df.groupby(["precision", "batch_size", "local_epochs"], sort=False):
        sec = dict(zip(g["path"], g["seconds"]))
        auto = "ours_" + cohort.AUTO_ENGINE.get(g["device"].iloc[0], "sequential")
        row = {"precision": prec, "batch_size": bs, "local_epochs": tau, "ours": auto.removeprefix("ours_")}
        ours = sec.get(auto)
        row["P2_ours_over_bare"] = ours / sec["bare_sgd"] if ours and "bare_sgd" in sec else np.nan
        row["P3_typical_over_ours"] = sec["typical_fedavg"] / ours if ours and "typical_fedavg" in sec else np.nan
        row["batched_speedup"] = (sec["ours_sequential"] / sec["ours_batched"]
                                  if {"ours_sequential", "ours_batched"} <= set(sec) else np.nan)
        out.append(row)
    return pd.DataFrame(out)


def latest_csv(folder: Path | None = None) -> Path | None:
    """The newest ``bench-*.csv`` under ``results/bench`` (or ``folder``), or None."""
    folder = folder or results_dir() / "bench"
    found = sorted(folder.glob("bench-*.csv"))
    return found[-1] if found else None


def latest_or_tiny(folder: Path | None = None) -> tuple[pd.DataFrame, str]:
    """The newest bench CSV's rows, or (none found) a tiny bench run now at the smoke profile on the CPU.

    Returns:
        (rows with :data:`COLUMNS`, a sentence naming where they come from).

    Raises:
        ValueError: a CSV whose rows come from more than one machine (never mixed).
    """
    path = latest_csv(folder)
    if path is not None:
        df = pd.read_csv(path, dtype={"batch_size": str, "cuda_device": str}).fillna({"cuda_device": ""})
        source = f"the newest “make bench” result, {path.name}"
    else:
        df = bench("smoke", protocols=[(16, 1), ("full", 1)], repeats=1, device="cpu")
        source = "no “make bench” result was found, so a tiny benchmark at the smoke profile ran now (its numbers mean little)"
    if df[["machine", "device", "cuda_device"]].drop_duplicates().shape[0] != 1:
        raise ValueError(f"bench rows come from more than one machine: {sorted(df['machine'].unique())}")
    return df, source


def projection_check(profile: str = "smoke", device: str = "cpu") -> dict:
    """The device check's projection of ``profile``'s Dirichlet α = 0.1 run against its measured time.

    Reported by ``make bench``, not asserted (wall time depends on load); ~10-20 s of one core on smoke.

    Returns:
        :func:`maskfed.perf.projection.compare` of the two times, with ``label`` (the run).
    """
    import os
    import tempfile

    prof = load_profile(profile)
    protocols = [(bs, 1) for bs in prof.table1.batch_sizes]
    thr = bench(profile, protocols=protocols, paths=("ours_sequential",), repeats=3, device=device)
    proj = project(profile, thr, eval_images_per_s(profile, device), device=device,
                               engine="sequential")
    row = proj[(proj["alpha"] == 0.1) & (proj["partition"] == "dirichlet")].iloc[0]
    before = os.environ.get("MASKFED_RESULTS_DIR")
    with tempfile.TemporaryDirectory(prefix="maskfed-projection-") as scratch:
        os.environ["MASKFED_RESULTS_DIR"] = scratch  # a fresh run, never one reused from results/
        try:
            res = runner.run(row["config"], progress=False)
        finally:
            if before is None:
                os.environ.pop("MASKFED_RESULTS_DIR", None)
            else:
                os.environ["MASKFED_RESULTS_DIR"] = before
    return {"label": row["label"], **projection.compare(float(row["projected_s"]), float(res.metrics["wall_s"].sum()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maskfed.perf.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="cpu", help="smoke | cpu | paper (default cpu)")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: the profile's)")
    parser.add_argument("--model", default=None, help="override the profile's model")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per cell (median reported)")
    parser.add_argument("--precisions", nargs="+", default=["fp32"], help="fp32 tf32 bf16 (CUDA for the last two)")
    parser.add_argument("--protocols", nargs="+", default=None,
                        help="BS:TAU pairs, e.g. 32:1 full:2 (default: the profile's Table I grid)")
    parser.add_argument("--data-path", default=None, help="CIFAR-10 archive or folder (default: found automatically)")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), help=f"any of {' '.join(PATHS)} (default all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", default=None, help="CSV path (default results/bench/bench-<utc>.csv)")
    parser.add_argument("--no-projection-check", action="store_true",
                        help="skip the projection check (the device check's projection of a smoke run against its "
                             "measured time, about 10 to 20 s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    protocols = None
    if args.protocols:
        protocols = []
        for item in args.protocols:
            bs, _, tau = item.partition(":")
            protocols.append((bs if bs == "full" else int(bs), int(tau or 1)))
    try:
        df = bench(args.profile, protocols=protocols, paths=tuple(args.paths), precisions=tuple(args.precisions), repeats=args.repeats,
                   device=args.device, model=args.model,
                   **({"data_path": args.data_path} if args.data_path else {}))
    except ValueError as exc:
        print(f"maskfed.perf.bench: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else results_dir() / "bench" / f"bench-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(df[["precision", "batch_size", "local_epochs", "path", "steps", "seconds", "images_per_s"]]
              .to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(ratios(df).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"machine: {df['machine'].iloc[0]} ({df['device'].iloc[0]}, {df['threads'].iloc[0]} thread(s))")
    print(out)
    if not args.no_projection_check:
        c = projection_check()
        print(f"projection check (smoke {c['label']}, sequential engine): projected {c['projected_s']:.3f} s, "
              f"measured {c['measured_s']:.3f} s, {c['relative_error']:+.1%} "
              f"({'within' if c['within_aim'] else 'outside'} the {projection.PROJECTION_AIM:.0%} aim; "
              "reported, not a gate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def eval_images_per_s(profile: str, device: str) -> float:
    """Test-set images per second of :func:`maskfed.engine.fedavg.evaluate` (one timed pass after one untimed)."""
    prof = load_profile(profile)
    cfg = prof.run(0, device=device)
    dev = runner.resolve_device(device)
    data = runner.prepare_data(cfg, runner.images_for(cfg), dev)
    model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width).to(dev)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    with cohort.precision_context("fp32", dev):
        fedavg.evaluate(model, theta, data.x_test, data.y_test)
        t0 = time.perf_counter()
        fedavg.evaluate(model, theta, data.x_test, data.y_test)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    return len(data.y_test) / (time.perf_counter() - t0)


def project(profile: str, throughput: pd.DataFrame, eval_ips: float, precision: str = "fp32",
            device: str | None = None, engine: str = "auto") -> pd.DataFrame:
    """Projected seconds of every run of ``profile``'s experiments at ``precision`` (:mod:`maskfed.perf.projection`).

    Costs: :func:`maskfed.perf.projection.costs_from_bench` for the engine each run will use; evaluations at ``eval_ips``.

    Returns:
        One row per run: label, seed, batch size, τ, α, partition, engine, steps, images, train, eval
        and projected seconds, and the config.

    Raises:
        ValueError: no measured rounds of that engine and precision.
    """
    prof = load_profile(profile)
    costs = projection.costs_from_bench(throughput)
    rows, sizes_of = [], {}
    for cfg in experiments.all_configs(prof):
        cfg = cfg.model_copy(update={"device": device}) if device else cfg
        eng = cohort.resolve_engine(engine, runner.resolve_device(cfg.device))
        if (eng, precision) not in costs:
            raise ValueError(f"no measured rounds of engine {eng!r} at precision {precision!r} to project from")
        images = runner.images_for(cfg)
        part_key = (cfg.partition, cfg.alpha, cfg.seed, cfg.num_clients, cfg.dirichlet_convention, cfg.train_subset)
        if part_key not in sizes_of:
            y_train = runner.split_images(cfg, images)[1]
            sizes_of[part_key] = [len(p) for p in runner.partition_for(cfg, y_train)]
        n_test = cfg.test_subset or len(images.y_test)
        p = projection.project_run(cfg, sizes_of[part_key], costs[eng, precision], eng, n_test=n_test,
                                   eval_images_per_s=eval_ips)
        rows.append({"label": cfg.label(), "seed": cfg.seed, "batch_size": str(cfg.batch_size),
                     "local_epochs": cfg.local_epochs, "alpha": cfg.alpha, "partition": cfg.partition,
                     "engine": eng, **p, "config": cfg})
    return pd.DataFrame(rows)
