"""The prepared GPU check (``make device-check``): gates, throughput, projection, paper runs.

Stages, written under ``$OUT`` (else ``results/device-check/``):

1. **Gates** (:mod:`maskfed.perf.gates`): the identical-shards control (1/Δ_S = K_c, σ̂² = 0, spread 0
   at :func:`maskfed.analysis.summary.control_tolerance`) with each engine; batched and micro-batched
   Δ_k equal sequential Δ_k in float64 (α = 0.1, bs 32, τ 1); each precision's Δ_k within its
   tolerance. tf32/bf16 figures are reported only when their gates pass.
2. **Throughput**: :func:`maskfed.perf.bench.bench` (images/s, peak GPU memory).
3. **Projection** (:mod:`maskfed.perf.projection`): each run's steps and images from its own
   partition and cohorts, at the fitted per-step and per-image cost, plus evaluations.
4. **Runs**: the paper's headline cell first (Table I's α, Table II's protocol bs 32 τ 2, first seed:
   :func:`maskfed.studies.stage.ladder_config`), then seed 0 first, cheapest first, each only if its
   projection +20 % fits; ``runs.tar.gz``.

Sizes: ``full`` (paper profile, ResNet-18-GN, CUDA; ≤ 8 min on one H200) and ``tiny`` (smoke, CPU, < 1 min).
Output: :data:`OUTPUT_FILES` (``summary.json``, ``throughput.csv``, ``projection.csv``, ``runs.tar.gz``;
the previous check's are removed first).
Exit status: 0 when every required gate passed, else :func:`maskfed.perf.gates.exit_status` (4 control,
8 engines, 16 chunking, 32 precision, OR-ed); 2 when the size cannot run here.
"""

from __future__ import annotations

import argparse
import copy
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

from maskfed import provenance  # noqa: E402
from maskfed.engine import cohort, determinism, fedavg, runner
from maskfed.engine.config import load_profile  # noqa: E402
from maskfed.engine.models import build_model  # noqa: E402
from maskfed.paths import results_dir  # noqa: E402
from maskfed.perf import bench, gates
from maskfed.studies import stage

#: What a check writes into its output folder (besides ``log.txt``, which ``make device-check`` tees).
OUTPUT_FILES = ("summary.json", "throughput.csv", "projection.csv", "runs.tar.gz")

#: Per size: profile, device, protocols and precisions of the throughput stage, precisions gated
#: (the tiny size also gates bf16, through the CPU's autocast), timed repeats, rounds of the control
#: check, and the whole check's time budget (seconds).
SIZES = {
    "full": dict(profile="paper", device="cuda", protocols=[(32, 1), (128, 1), ("full", 1)],
                 precisions=("fp32", "tf32", "bf16"), gate_precisions=("fp32", "tf32", "bf16"), repeats=2,
                 control_rounds=2, budget_s=480.0),
    "tiny": dict(profile="smoke", device="cpu", protocols=[(16, 1), (64, 1), ("full", 1)],
                 precisions=("fp32",), gate_precisions=("fp32", "bf16"), repeats=1, control_rounds=2,
                 budget_s=20.0),
}

#: Share added to a run's projection before it is compared with the time left (the projection's error). Ours.
PROJECTION_MARGIN = 0.2


def _log(msg: str) -> None:
    print(f"[device-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check_control(profile: str, device: str, rounds: int) -> list[gates.Gate]:
    """The identical-shards control for ``rounds`` rounds with each engine, as a run makes it (deterministic
    algorithms on CUDA, fp32 with TF32 off), judged by :func:`maskfed.perf.gates.control_gates`."""
    prof = load_profile(profile)
    out = []
    for engine in ("sequential", "batched"):
        cfg = prof.control_configs()[0].model_copy(update={"rounds": rounds, "device": device, "engine": engine})
        dev = runner.resolve_device(device)
        data = runner.prepare_data(cfg, runner.images_for(cfg), dev)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width).to(dev)
        with determinism.deterministic(determinism.needed(True, dev)), cohort.precision_context("fp32", dev):
            recs = fedavg.run_fedavg(model, data, rounds=rounds, cohort_size=cfg.cohort_size,
                                     local_epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                     aggregation=cfg.aggregation, seed=cfg.seed, identical_client_seeds=True,
                                     eval_at=set(), engine=engine)
        out.extend(gates.control_gates(recs, cfg.cohort_size, dev.type, engine))
    return out


def _cohort_problem(profile: str, device: str, alpha: float):
    """Round 0's cohort of the profile's Dirichlet(``alpha``) partition on ``device``: (cfg, model, θ, data, parts,
    generator factory)."""
    cfg = load_profile(profile).run(0, device=device, alpha=alpha, batch_size=32, local_epochs=1)
    dev = runner.resolve_device(device)
    data = runner.prepare_data(cfg, runner.images_for(cfg), dev)
    torch.manual_seed(0)
    model = build_model(cfg.model, num_classes=10, gn_groups=cfg.gn_groups, width=cfg.width).to(dev)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    ids = fedavg.sample_cohort(len(data.parts), cfg.cohort_size, 0, 0)

    def gens():
        return [torch.Generator().manual_seed(fedavg.client_seed(0, 0, int(k))) for k in ids]

    return cfg, model, theta, data, [data.parts[k] for k in ids], gens


def _train(model, theta, data, parts, gens, *, engine, batch_size, dtype=torch.float32, precision="fp32",
           step_memory=None, lr=0.01):
    """One cohort's local training (τ 1) in ``dtype`` and ``precision`` (autocast dtype on any device;
    the TF32 settings on CUDA); returns Δ_KxP."""
    dev = data.x_train.device
    m = copy.deepcopy(model).to(dtype)
    th = theta.to(dtype)
    with cohort.precision_context(precision if dev.type == "cuda" else "fp32", dev):
        return cohort.local_training(m, th, data.x_train.to(dtype), data.y_train, parts, lr=lr, batch_size=batch_size,
                                     local_epochs=1, generators=gens(), engine=engine,
                                     autocast_dtype=cohort.AUTOCAST_DTYPE[precision], step_memory=step_memory)[0]


def check_engines(profile: str, device: str) -> list[gates.Gate]:
    """Batched vs sequential Δ_k, and chunked vs whole batched steps, in float64 (bs 32, τ 1, α = 0.1 cohort)."""
    cfg, model, theta, data, parts, gens = _cohort_problem(profile, device, alpha=0.1)
    kw = dict(batch_size=32, dtype=torch.float64, lr=cfg.lr)
    d_seq = _train(model, theta, data, parts, gens, engine="sequential", **kw)
    d_bat = _train(model, theta, data, parts, gens, engine="batched", step_memory=cohort.StepMemory(1e18, 1.0), **kw)
    # a budget of a third of a step's images forces micro-batches of every step
    third = max(1, len(parts) * 32 // 3)
    d_chk = _train(model, theta, data, parts, gens, engine="batched", step_memory=cohort.StepMemory(third, 1.0), **kw)
    tol = gates.ENGINE_RTOL["float64"]
    return [gates.agreement_gate("engines", "batched vs sequential (float64)", d_bat, d_seq, tol,
                                 shard_sizes=[len(p) for p in parts]),
            gates.agreement_gate("chunking", f"batched in micro-batches of {third} images vs whole steps (float64)",
                                 d_chk, d_bat, tol, max_images=third)]


def check_precisions(profile: str, device: str, precisions, required: set[str]) -> list[gates.Gate]:
    """:func:`maskfed.perf.gates.precision_gates` for each of ``precisions``, with each engine.

    fp32 against float64: one full-batch step (τ 1) of round 0's cohort at Table I's α (shards of
    about equal size, so a float64 full-batch step of one client fits the card). tf32 and bf16
    against fp32: bs 32, τ 1 on the α = 0.1 cohort (several steps, unequal shards)."""
    out = []
    cfg, model, theta, data, parts, gens = _cohort_problem(profile, device, alpha=load_profile(profile).table1.alpha)
    one_step = {(p, e): _train(model, theta, data, parts, gens, engine=e, batch_size="full", dtype=dt, lr=cfg.lr)
                for p, dt in (("fp32", torch.float32), ("float64", torch.float64)) for e in ("sequential", "batched")}
    if "fp32" in precisions:
        out += gates.precision_gates("fp32", one_step, [len(p) for p in parts], required=True)
    reduced = [p for p in precisions if p != "fp32"]
    if reduced:
        cfg, model, theta, data, parts, gens = _cohort_problem(profile, device, alpha=0.1)
        steps = {(p, e): _train(model, theta, data, parts, gens, engine=e, batch_size=32, precision=p, lr=cfg.lr)
                 for p in ("fp32", *reduced) for e in ("sequential", "batched")}
        out += [g for p in reduced for g in gates.precision_gates(p, steps, [len(k) for k in parts],
                                                                  required=p in required)]
    return out


def check_tf32_settings() -> list[gates.Gate]:
    """:func:`maskfed.engine.cohort.precision_context`'s TF32 settings through this torch's API (the settings
    exist without a GPU, so the tiny size checks them too): IEEE for fp32 and bf16, TF32 for tf32, and the
    settings before restored after. One gate: the number of wrong settings, tolerance 0."""
    before = cohort.tf32_settings()
    wrong = []
    for p in cohort.PRECISIONS:
        with cohort.precision_context(p, "cuda"):
            seen = cohort.tf32_settings()
        want = "tf32" if p == "tf32" else "ieee"
        wrong += [f"{p}: {k} = {seen[k]!r}" for k in ("matmul", "cudnn_conv") if seen[k] != want]
    if cohort.tf32_settings() != before:
        wrong.append(f"not restored: {cohort.tf32_settings()} after, {before} before")
    return [gates.Gate("precision", f"TF32 settings through torch's {before['api']} API", float(len(wrong)), 0.0,
                       not wrong, True, {"precision": "fp32", "wrong": wrong})]


def run_what_fits(projection_df: pd.DataFrame, budget_s: float, t_start: float,
                  engine: str = "auto", precision: str = "fp32", first: str | None = None) -> tuple[list[dict], list[str]]:
    """Run the projected runs whose projection + :data:`PROJECTION_MARGIN` fits the time left: the run labelled
    ``first`` before all others (the paper's headline cell, in :func:`main`), then seed 0 first, cheapest first.

    Returns:
        (one dict per finished run with measured and projected seconds, labels of runs skipped).
    """
    done, skipped = [], []
    order = projection_df.assign(_later=projection_df["label"] != first)
    for _, row in order.sort_values(["_later", "seed", "projected_s"], kind="stable").iterrows():
        left = budget_s - (time.perf_counter() - t_start)
        if row["projected_s"] * (1 + PROJECTION_MARGIN) > left:
            skipped.append(row["label"])
            continue
        cfg = row["config"].model_copy(update={"engine": engine, "precision": precision})
        t0 = time.perf_counter()
        res = runner.run(cfg, progress=False)
        took = time.perf_counter() - t0
        _log(f"run {cfg.label()}: {took:.1f} s (projected {row['projected_s']:.1f} s)")
        done.append({"label": cfg.label(), "path": str(res.path), "seconds": took, "projected_s": row["projected_s"],
                     "final_test_acc": float(res.metrics["test_acc"].dropna().iloc[-1])})
    return done, skipped


def _log_gate(g: gates.Gate) -> None:
    verdict = "ok" if g.ok else ("FAILED" if g.required else "failed (not required: its figures are withheld)")
    _log(f"gate {g.kind}: {g.name}: {verdict} {g.value:.3g} (tolerance {g.tolerance:.0e})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maskfed.perf.devicecheck", description=__doc__.split("\n")[0])
    parser.add_argument("--size", default=os.environ.get("DEVICE_CHECK_SIZE", "full"), help="tiny | full (default full)")
    parser.add_argument("--out", default=os.environ.get("OUT") or None,
                        help="output folder (default $OUT, else results/device-check)")
    parser.add_argument("--budget-s", type=float, default=None, help="time budget of the whole check (default per size)")
    parser.add_argument("--precision", default="fp32", help="precision of the paper-profile runs (fp32 | tf32 | bf16)")
    args = parser.parse_args(argv)
    if args.size not in SIZES:
        print(f"device-check: error: size must be one of {list(SIZES)}; got {args.size!r}", file=sys.stderr)
        return 2
    if args.budget_s is not None and not (args.budget_s > 0 and args.budget_s != float("inf")):
        print(f"device-check: error: --budget-s must be a positive, finite number of seconds; got {args.budget_s:g}",
              file=sys.stderr)
        return 2
    size = SIZES[args.size]
    budget = size["budget_s"] if args.budget_s is None else args.budget_s
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
                "(docs/operations.md, 'Running on a GPU'), or DEVICE_CHECK_SIZE=tiny to check the code on this CPU"
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
    checks += check_engines(size["profile"], size["device"])
    checks += check_precisions(size["profile"], size["device"], size["gate_precisions"], {"fp32", args.precision})
    checks += check_tf32_settings()
    for g in checks:
        _log_gate(g)
    summary["gates"] = [g.to_dict() for g in checks]
    summary["failed"] = gates.failures(checks)
    summary["determinism"] = {"cublas_workspace_config_at_cuda_start": determinism.cublas_workspace_in_force()}
    with cohort.precision_context("fp32", dev) as flags:
        summary["precision_flags_fp32"] = flags
    reported = [p for p in size["precisions"] if p == "fp32" or gates.passed(checks, p)]
    summary["precisions_reported"] = reported
    summary["precisions_withheld"] = [p for p in size["precisions"] if p not in reported]

    thr = bench.bench(size["profile"], protocols=size["protocols"], precisions=reported,
                      repeats=size["repeats"], device=size["device"])
    thr.to_csv(out / "throughput.csv", index=False)
    summary["ratios"] = bench.ratios(thr).to_dict(orient="records")
    summary["peak_mem_gib"] = (thr.groupby(["precision", "batch_size", "path"], sort=False)["peak_mem_gib"].max()
                               .reset_index().to_dict(orient="records"))
    _log("throughput (images/s):\n" + thr.pivot_table(index=["precision", "batch_size"], columns="path",
                                                       values="images_per_s", sort=False).round(0).to_string())

    eval_ips = bench.eval_images_per_s(size["profile"], size["device"])
    proj = {p: bench.project(size["profile"], thr, eval_ips, p, device=size["device"]) for p in reported}
    base = proj.get(args.precision, proj["fp32"])
    base.drop(columns="config").to_csv(out / "projection.csv", index=False)
    summary["eval_images_per_s"] = eval_ips
    summary["projected_grid_s"] = {p: float(df["projected_s"].sum()) for p, df in proj.items()}
    _log(f"projected grid time (s): {summary['projected_grid_s']}")

    status = gates.exit_status(checks)
    headline = stage.ladder_config(load_profile(size["profile"])).label()  # bs 32, τ 2, α 100, first seed
    runs, skipped = (run_what_fits(base, budget, t_start, precision=args.precision, first=headline)
                     if status == 0 else ([], []))
    summary["runs"] = runs
    summary["runs_skipped"] = skipped if status == 0 else "all: a required gate failed"
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for r in runs:
            tar.add(r["path"], arcname=Path(r["path"]).name)
    summary["runs_finished"] = len(runs)
    summary["runs_in_grid"] = len(base)
    summary["wall_s"] = time.perf_counter() - t_start
    summary["ok"] = status == 0
    summary["exit_status"] = status
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    failed = ", ".join(f"{f['name']} ({f['value']:.3g} > {f['tolerance']:.0e})" for f in summary["failed"] if f["required"])
    _log(f"{len(runs)} of {len(base)} runs finished; gates {'ok' if status == 0 else 'FAILED: ' + failed}; "
         f"{summary['wall_s']:.0f} s; wrote {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
