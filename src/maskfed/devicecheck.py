"""The prepared GPU check (``make device-check``): correctness, throughput, projection, paper runs.

Four stages, all written under one output folder (``$OUT`` when set, else ``results/device-check/``):

1. **Correctness** on the target device: the identical-shards control (every client gets the same
   shard and the same shuffles, deterministic algorithms on) must give the recovery factor
   1/Δ_S = K_c to 1e-6 relative with either engine; the batched and sequential engines must give
   the same Δ_k per client (Dirichlet α = 0.1 cohort, bs 32, τ 1, fp32).
2. **Throughput**: :func:`maskfed.bench.bench` per protocol, path and precision (images/s).
3. **Projection**: the time of the profile's whole grid (every run of every experiment), from the
   best fp32 throughput per batch size (a round's time scales with its local steps), plus the
   test evaluations.
4. **Runs**: as many of the profile's runs as fit in the time left (seed 0 first, cheapest first),
   as run folders packed into ``runs.tar.gz``.

Sizes: ``full`` (the paper profile, ResNet-18-GN, CUDA; sized for at most 8 minutes on one H200) and
``tiny`` (the smoke profile on the CPU, well under a minute: checks this code end to end).
Output files (a few, flat, so a remote runner can send them back): ``summary.json``,
``throughput.csv``, ``projection.csv``, ``runs.tar.gz`` (:data:`OUTPUT_FILES`; a new check removes
the previous check's first, so a failed check never leaves older results beside its log).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; must precede CUDA init

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from maskfed import bench, provenance  # noqa: E402

from maskfed.fl import cohort, experiments, fedavg, runner
from maskfed.fl.config import load_profile  # noqa: E402
from maskfed.fl.models import build_model  # noqa: E402
from maskfed.paths import results_dir  # noqa: E402

#: What a check writes into its output folder (besides ``log.txt``, which ``make device-check`` tees).
OUTPUT_FILES = ("summary.json", "throughput.csv", "projection.csv", "runs.tar.gz")

#: Per size: profile, device, protocols and precisions of the throughput stage, timed repeats,
#: rounds of the control check, and the whole check's time budget (seconds).
SIZES = {
    "full": dict(profile="paper", device="cuda", protocols=[(32, 1), (128, 1), ("full", 1)],
                 precisions=("fp32", "tf32", "bf16"), repeats=2, control_rounds=2, budget_s=480.0),
    "tiny": dict(profile="smoke", device="cpu", protocols=[(16, 1), (64, 1), ("full", 1)],
                 precisions=("fp32",), repeats=1, control_rounds=2, budget_s=20.0),
}


def _log(msg: str) -> None:
    print(f"[device-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check_control(profile: str, device: str, rounds: int) -> list[dict]:
    """The identical-shards control for ``rounds`` rounds with each engine (deterministic algorithms on CUDA).

    Returns:
        One dict per engine: the largest relative deviation of 1/Δ_S from K_c over the rounds,
        and ``ok`` (≤ 1e-6).
    """
    prof = load_profile(profile)
    out = []
    for engine in ("sequential", "batched"):
        cfg = prof.control_configs()[0].model_copy(update={"rounds": rounds, "device": device, "engine": engine})
        dev = runner.resolve_device(device)
        data = runner.prepare_data(cfg, runner.images_for(cfg), dev)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width).to(dev)
        # identical_client_seeds also switches deterministic algorithms on (CUDA), as in a real control run
        recs = fedavg.run_fedavg(model, data, rounds=rounds, cohort_size=cfg.cohort_size,
                                 local_epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                 aggregation=cfg.aggregation, seed=cfg.seed, identical_client_seeds=True,
                                 eval_at=set(), engine=engine)
        dev_rel = max(abs(r["recovery_unweighted"] - cfg.cohort_size) / cfg.cohort_size for r in recs)
        out.append({"check": "control_recovery_equals_Kc", "engine": engine, "rounds": rounds,
                    "K_c": cfg.cohort_size, "max_rel_deviation": dev_rel, "tolerance": 1e-6, "ok": dev_rel <= 1e-6})
    return out


def check_engines_agree(profile: str, device: str, rtol: float = 1e-5) -> dict:
    """Batched vs sequential Δ_k for every client of round 1's cohort (Dirichlet α = 0.1, bs 32, τ 1, fp32).

    Returns:
        dict with the largest relative difference ‖Δ_k^batched − Δ_k^seq‖ / ‖Δ_k^seq‖ and ``ok`` (≤ rtol).
    """
    prof = load_profile(profile)
    cfg = prof.run(0, device=device, alpha=0.1, batch_size=32, local_epochs=1)
    dev = runner.resolve_device(device)
    data = runner.prepare_data(cfg, runner.images_for(cfg), dev)
    torch.manual_seed(0)
    model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width).to(dev)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    ids = fedavg.sample_cohort(len(data.parts), cfg.cohort_size, 0, 0)
    parts = [data.parts[k] for k in ids]
    res = {}
    for engine in ("sequential", "batched"):
        gens = [torch.Generator().manual_seed(fedavg.client_seed(0, 0, int(k))) for k in ids]
        res[engine] = cohort.train_cohort(model, theta, data.x_train, data.y_train, parts, lr=cfg.lr, batch_size=32,
                                          local_epochs=1, generators=gens, engine=engine)
    d_seq, d_bat = res["sequential"][0], res["batched"][0]
    rel = ((d_bat - d_seq).norm(dim=1) / d_seq.norm(dim=1)).max().item()
    return {"check": "batched_equals_sequential", "shard_sizes": res["sequential"][1], "max_rel_difference": rel,
            "tolerance": rtol, "ok": rel <= rtol}


def eval_images_per_s(profile: str, device: str) -> float:
    """Test-set images per second of :func:`maskfed.fl.fedavg.evaluate` (one timed pass after one untimed)."""
    prof = load_profile(profile)
    cfg = prof.run(0, device=device)
    dev = runner.resolve_device(device)
    data = runner.prepare_data(cfg, runner.images_for(cfg), dev)
    model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width).to(dev)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    fedavg.evaluate(model, theta, data.x_test, data.y_test)
    t0 = time.perf_counter()
    fedavg.evaluate(model, theta, data.x_test, data.y_test)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return len(data.y_test) / (time.perf_counter() - t0)


def project(profile: str, throughput: pd.DataFrame, eval_ips: float, precision: str = "fp32") -> pd.DataFrame:
    """Projected seconds of every run of ``profile``'s experiments at ``precision``.

    A run trains rounds × K_c × (N_train / K) × τ images (the expected cohort size) at the best
    measured images/s of its batch size among our two engines, and tests N_test images at each
    evaluation round at ``eval_ips``.

    Returns:
        One row per run: label, seed, batch size, τ, images, engine, images/s, projected seconds.
    """
    prof = load_profile(profile)
    ours = throughput[throughput["path"].str.startswith("ours_") & (throughput["precision"] == precision)]
    rows = []
    for cfg in experiments.all_configs(prof):
        images = runner.images_for(cfg)
        n_train = cfg.train_subset or len(images.y_train)
        n_test = cfg.test_subset or len(images.y_test)
        g = ours[ours["batch_size"].astype(str) == str(cfg.batch_size)]
        if g.empty:
            continue
        best = g.loc[g["images_per_s"].idxmax()]
        train_images = cfg.rounds * cfg.cohort_size * (n_train / cfg.num_clients) * cfg.local_epochs
        n_eval = len(fedavg.eval_rounds(cfg.rounds, cfg.eval_every, cfg.eval_every_tail))
        sec = train_images / best["images_per_s"] + n_eval * n_test / eval_ips
        rows.append({"label": cfg.label(), "seed": cfg.seed, "batch_size": str(cfg.batch_size),
                     "local_epochs": cfg.local_epochs, "alpha": cfg.alpha, "partition": cfg.partition,
                     "train_images": train_images, "engine": best["path"].removeprefix("ours_"),
                     "images_per_s": best["images_per_s"], "projected_s": sec, "config": cfg})
    return pd.DataFrame(rows)


def run_what_fits(projection: pd.DataFrame, budget_s: float, t_start: float, out: Path,
                  engine: str = "auto", precision: str = "fp32") -> list[dict]:
    """Run the projected runs (seed 0 first, cheapest first) while each is projected to fit the budget.

    The cheapest run always runs (so a small budget still checks the run path end to end).
    Run folders go to ``results_dir()/runs``; returns one dict per finished run.
    """
    done = []
    order = projection.sort_values(["seed", "projected_s"])
    for _, row in order.iterrows():
        left = budget_s - (time.perf_counter() - t_start)
        if done and row["projected_s"] * 1.2 > left:  # 20 % margin for the projection's error
            continue
        cfg = row["config"].model_copy(update={"engine": engine, "precision": precision})
        t0 = time.perf_counter()
        res = runner.run(cfg, progress=False)
        took = time.perf_counter() - t0
        _log(f"run {cfg.label()}: {took:.1f} s (projected {row['projected_s']:.1f} s)")
        done.append({"label": cfg.label(), "path": str(res.path), "seconds": took, "projected_s": row["projected_s"],
                     "final_test_acc": float(res.metrics["test_acc"].dropna().iloc[-1])})
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maskfed.devicecheck", description=__doc__.split("\n")[0])
    parser.add_argument("--size", default=os.environ.get("DEVICE_CHECK_SIZE", "full"), help="tiny | full (default full)")
    parser.add_argument("--out", default=os.environ.get("OUT") or None,
                        help="output folder (default $OUT, else results/device-check)")
    parser.add_argument("--budget-s", type=float, default=None, help="time budget of the whole check (default per size)")
    parser.add_argument("--precision", default="fp32", help="precision of the paper-profile runs (fp32 | tf32 | bf16)")
    args = parser.parse_args(argv)
    if args.size not in SIZES:
        print(f"device-check: error: size must be one of {list(SIZES)}; got {args.size!r}", file=sys.stderr)
        return 2
    size = SIZES[args.size]
    budget = args.budget_s or size["budget_s"]
    out = Path(args.out) if args.out else results_dir() / "device-check"
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES:  # a previous check's results must not pass as this one's
        (out / name).unlink(missing_ok=True)
    # run folders: beside the other outputs locally; with $OUT (a remote runner that sends back a few flat
    # files) in a scratch folder, and in both cases packed into runs.tar.gz
    runs_root = out / "results" if not os.environ.get("OUT") else Path(tempfile.mkdtemp(prefix="maskfed-runs-"))
    os.environ["MASKFED_RESULTS_DIR"] = str(runs_root)
    try:
        dev = runner.resolve_device(size["device"])
        cohort.check_precision(args.precision, dev)
    except ValueError as exc:
        hint = (f"size {args.size!r} needs a CUDA GPU and none is available here: run it on a GPU machine "
                "(README, 'Running on a GPU'), or DEVICE_CHECK_SIZE=tiny to check the code on this CPU"
                if size["device"] == "cuda" and not torch.cuda.is_available() else str(exc))
        print(f"device-check: error: {hint}", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 16 if dev.type == "cuda" else 1)))
    t_start = time.perf_counter()
    summary = {"size": args.size, "profile": size["profile"], "budget_s": budget,
               "machine": provenance.machine(str(dev)), "packages": provenance.package_versions(),
               **provenance.git_state(), "code_hash": provenance.code_hash()}
    _log(f"size {args.size}, profile {size['profile']}, device {dev}, budget {budget:.0f} s, out {out}")

    checks = check_control(size["profile"], size["device"], size["control_rounds"])
    checks.append(check_engines_agree(size["profile"], size["device"]))
    for c in checks:
        _log(f"{c['check']}" + (f" ({c['engine']})" if c.get("engine") else "") + f": {'ok' if c['ok'] else 'FAILED'} "
             f"{c.get('max_rel_deviation', c.get('max_rel_difference')):.3g}")
    summary["correctness"] = checks

    thr = bench.bench(size["profile"], protocols=size["protocols"], precisions=size["precisions"],
                      repeats=size["repeats"], device=size["device"])
    thr.to_csv(out / "throughput.csv", index=False)
    summary["ratios"] = bench.ratios(thr).to_dict(orient="records")
    _log("throughput (images/s):\n" + thr.pivot_table(index=["precision", "batch_size"], columns="path",
                                                       values="images_per_s", sort=False).round(0).to_string())

    eval_ips = eval_images_per_s(size["profile"], size["device"])
    proj = {p: project(size["profile"], thr, eval_ips, p) for p in size["precisions"]}
    proj[args.precision if args.precision in proj else "fp32"].drop(columns="config").to_csv(
        out / "projection.csv", index=False)
    summary["eval_images_per_s"] = eval_ips
    summary["projected_grid_s"] = {p: float(df["projected_s"].sum()) for p, df in proj.items()}
    _log(f"projected grid time (s): {summary['projected_grid_s']}")

    base = proj.get(args.precision, proj["fp32"])
    runs = run_what_fits(base, budget, t_start, out, precision=args.precision)
    summary["runs"] = runs
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for r in runs:
            tar.add(r["path"], arcname=Path(r["path"]).name)
    summary["runs_finished"] = len(runs)
    summary["runs_in_grid"] = len(base)
    summary["wall_s"] = time.perf_counter() - t_start
    summary["ok"] = all(c["ok"] for c in checks)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    _log(f"{len(runs)} of {len(base)} runs finished; correctness {'ok' if summary['ok'] else 'FAILED'}; "
         f"{summary['wall_s']:.0f} s; wrote {out}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
