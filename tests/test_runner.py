"""Run folders: written atomically, reused when config, code and data are unchanged,
identical whether runs go through worker processes or not."""

import hashlib
import json

import pandas as pd
import pytest

from maskfed import provenance

from maskfed.engine import partition, runner
from maskfed.engine.config import make_run_config

TINY = dict(dataset="synthetic", synthetic_train=200, synthetic_test=50, num_clients=4, cohort_size=2, rounds=2,
            model="small_cnn_gn", width=2, batch_size=16, local_epochs=1, eval_every=1)


def _entries(runs) -> list[str]:
    """Names in a runs folder but the lock files' folder (``.locks``, kept on purpose)."""
    return [p.name for p in runs.iterdir() if p.name != ".locks"]


@pytest.fixture(autouse=True)
def results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    return tmp_path


def test_run_writes_complete_folder_and_reuses_it(results_in_tmp):
    cfg = make_run_config(**TINY)
    first = runner.run(cfg, progress=False)
    assert sorted(p.name for p in first.path.iterdir()) == [
        "config.json", "metrics.csv", "partition.json", "provenance.json"]
    assert first.path.parent == results_in_tmp / "runs"
    assert list(first.metrics["round"]) == [1, 2]
    prov = first.provenance
    for key in ("seed", "commit", "dirty", "code_hash", "packages", "machine", "data_source", "wall_s"):
        assert key in prov
    assert prov["packages"]["torch"] is not None
    # the fingerprint a run records says its kind (every byte), so the book compares like with like
    assert prov["data_fingerprint_kind"] == runner.FINGERPRINT_KIND == "sha256-all-bytes"
    assert runner.recorded_fingerprint(prov) == (runner.FINGERPRINT_KIND, runner.data_fingerprint(
        runner.load_images("synthetic", None, 200, 50)))
    assert prov["determinism"]["deterministic_algorithms"] is False  # only a control on CUDA switches it on
    assert json.loads((first.path / "config.json").read_text()) == cfg.model_dump(mode="json")
    images = runner.load_images("synthetic", None, 200, 50)
    expected = partition.make_partition("dirichlet", images.y_train.numpy(), 4, alpha=cfg.alpha, seed=cfg.seed)
    sizes = json.loads((first.path / "partition.json").read_text())["sizes"]
    assert sizes == [len(p) for p in expected] and sum(sizes) == 200  # the run's own seeded partition
    # a second call reuses the folder: same provenance (same finish time), nothing recomputed
    again = runner.run(cfg, progress=False)
    assert again.path == first.path
    assert again.provenance["finished_utc"] == prov["finished_utc"]
    assert not [p for p in (results_in_tmp / "runs").iterdir() if p.name.startswith(".tmp")]


@pytest.mark.parametrize("extra", [{}, {"cohort_size": 1}, {"hessian_every": 1, "hessian_batch": 16, "sharpness_iters": 2}])
@pytest.mark.slow
def test_load_run_expects_exactly_the_columns_a_run_writes(results_in_tmp, extra):
    cfg = make_run_config(**{**TINY, **extra})
    res = runner.run(cfg, progress=False)
    assert list(res.metrics.columns) == runner.expected_columns(cfg)


def test_a_damaged_folder_is_refused_naming_it_and_a_forced_run_replaces_it(results_in_tmp):
    cfg = make_run_config(**TINY)
    done = runner.run(cfg, progress=False)
    metrics = pd.read_csv(done.path / "metrics.csv")
    metrics.drop(columns="recovery_weighted").to_csv(done.path / "metrics.csv", index=False)
    with pytest.raises(runner.DamagedRun, match=r"column.s. recovery_weighted") as info:
        runner.find_run(cfg)
    assert info.value.path == done.path and str(done.path) in str(info.value)
    with pytest.raises(runner.DamagedRun):  # never used as a finished run, nor silently recomputed
        runner.run(cfg, progress=False)
    with pytest.raises(runner.DamagedRun):
        runner.run_many([cfg], progress=False)
    (done.path / "metrics.csv").write_text(metrics.to_csv(index=False).replace("\n1,", "\n7,", 1))
    with pytest.raises(runner.DamagedRun, match="rounds are not 1..2"):
        runner.find_run(cfg)
    (done.path / "config.json").write_text("[]")
    with pytest.raises(runner.DamagedRun, match="config.json holds list"):
        runner.find_run(cfg)
    fixed = runner.run_many([cfg], progress=False, force=True)[0]
    _same_metrics(fixed.metrics, done.metrics)


def test_a_folder_holding_another_runs_config_is_refused_not_reused(results_in_tmp):
    # prepare: two finished runs that differ in lr only (the same label), and the second's config.json
    # copied into the first's folder (the clean-clone finding)
    cfg, other = make_run_config(**TINY), make_run_config(**{**TINY, "lr": 0.02})
    first, second = runner.run(cfg, progress=False), runner.run(other, progress=False)
    assert first.path.name.rsplit("-", 1)[0] == second.path.name.rsplit("-", 1)[0]  # same label, other key
    (first.path / "config.json").write_text((second.path / "config.json").read_text())
    # execute / assert: every way of using the folder refuses it, naming the folder and what disagrees
    with pytest.raises(runner.RunMismatch) as info:
        runner.find_run(cfg)
    assert info.value.path == first.path and str(first.path) in str(info.value)
    assert any(d.startswith("config.json ") and second.config.key() in d for d in info.value.disagreements)
    assert any("provenance.json records" in d for d in info.value.disagreements)  # its recorded config key
    assert isinstance(info.value, runner.DamagedRun)  # handled as every damaged folder: named, exit status 2
    with pytest.raises(runner.RunMismatch):
        runner.load_run(first.path)  # read on its own, its files disagree with each other
    with pytest.raises(runner.RunMismatch):
        runner.run(cfg, progress=False)
    with pytest.raises(runner.RunMismatch):
        runner.run_many([cfg], progress=False)
    # --force recomputes it into a folder whose files agree again
    fixed = runner.run(cfg, progress=False, force=True)
    assert fixed.config == cfg and runner.find_run(cfg).path == first.path


def test_check_identity_compares_config_run_key_and_folder_name(results_in_tmp):
    # prepare: a finished run, then copies of it that disagree in one part each
    cfg = make_run_config(**TINY)
    done = runner.run(cfg, progress=False)
    key = runner.identify(cfg).key
    # execute / assert: the run itself agrees
    runner.check_identity(done, cfg, key)
    assert done.provenance["config_key"] == cfg.key()
    # a provenance.json of another key (a file copied from another run of the same config)
    with pytest.raises(runner.RunMismatch, match=r"run key.*0123456789abcdef, not " + key):
        runner.check_identity(runner.RunResult(cfg, done.path, done.metrics,
                                               {**done.provenance, "run_key": "0123456789abcdef"}), cfg, key)
    # a folder renamed to another name: used by its name, it is refused; read on its own, it is not
    moved = done.path.with_name(done.path.name[:-16] + "fedcba9876543210")
    done.path.rename(moved)
    with pytest.raises(runner.RunMismatch, match="folder name"):
        runner.check_identity(runner.load_run(moved), cfg)
    # an archived run of older code (no config_key recorded) is read as before
    prov = json.loads((moved / "provenance.json").read_text())
    del prov["config_key"]
    (moved / "provenance.json").write_text(json.dumps(prov))
    assert runner.load_run(moved).config == cfg


def test_a_finite_divergence_is_not_stored_as_finished_and_keeps_its_checkpoint(results_in_tmp, monkeypatch):
    # prepare: local training whose losses are finite but explode at round 2 (the lr 50 run: 2.3, 9.6e7)
    from maskfed.engine import checkpoint, fedavg
    import torch

    cfg = make_run_config(**{**TINY, "rounds": 3, "checkpoint_every": 1})
    losses = iter([2.3, 9.6e7, 12.0])

    def fake_train_cohort(model, theta, x, y, parts, **kw):
        loss = next(losses)
        return torch.zeros(len(parts), theta.numel()), [len(p) for p in parts], [1] * len(parts), [loss] * len(parts)

    monkeypatch.setattr(fedavg.cohort_mod, "train_cohort", fake_train_cohort)
    # execute
    with pytest.raises(fedavg.TrainingDiverged, match="round 2") as info:
        runner.run(cfg, progress=False)
    # assert: named, no finished folder, the round-1 checkpoint kept in the partial folder
    assert info.value.quantity == "train_loss"
    path = runner.identify(cfg).path
    assert not path.exists() and runner.find_run(cfg) is None
    assert checkpoint.load(checkpoint.partial_dir(path), runner.identify(cfg).key).rounds_done == 1


def test_key_changes_with_config_and_code(monkeypatch):
    a, b = make_run_config(**TINY), make_run_config(**{**TINY, "lr": 0.02})
    assert runner.identify(a).key != runner.identify(b).key
    before = runner.identify(a).key
    monkeypatch.setattr(provenance, "code_hash", lambda: "another-code-version")
    assert runner.identify(a).key != before


def test_data_fingerprint_depends_on_content_not_location():
    one = runner.load_images("synthetic", None, 200, 50)
    same = runner.data_mod.synthetic_image_data(n_train=200, n_test=50, seed=0)
    other = runner.data_mod.synthetic_image_data(n_train=200, n_test=50, seed=1)
    assert runner.data_fingerprint(one) == runner.data_fingerprint(same)
    assert runner.data_fingerprint(one) != runner.data_fingerprint(other)


def _with_train_images(images, x_train):
    return runner.data_mod.ImageData(x_train=x_train, y_train=images.y_train, x_test=images.x_test,
                                     y_test=images.y_test, classes=images.classes, source=images.source,
                                     source_kind=images.source_kind)


def test_data_fingerprint_covers_every_image_the_sampled_kind_missed_one():
    images = runner.data_mod.synthetic_image_data(n_train=200, n_test=50, seed=0)
    # its value: sha256 over kind, shapes and all bytes, first 16 hex digits
    h = hashlib.sha256(b"synthetic")
    for t in (images.x_train, images.y_train, images.x_test, images.y_test):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    assert runner.data_fingerprint(images) == h.hexdigest()[:16]

    changed = images.x_train.clone()
    changed[5, 0, 0, 0] ^= 1  # one value of image 5 (not a multiple of 97) changed in place
    edited = _with_train_images(images, changed)
    assert runner.data_fingerprint(edited) != runner.data_fingerprint(images)
    # the fingerprint recorded before hashed every 97th image only: it did not see the change
    assert runner.data_fingerprint_sampled(edited) == runner.data_fingerprint_sampled(images)

    at_97 = images.x_train.clone()
    at_97[97, 0, 0, 0] ^= 1
    assert runner.data_fingerprint_sampled(_with_train_images(images, at_97)) != runner.data_fingerprint_sampled(images)


def test_recorded_fingerprint_reads_the_kind_and_old_provenance_is_the_sampled_kind():
    images = runner.data_mod.synthetic_image_data(n_train=200, n_test=50, seed=0)
    archived = {"data_fingerprint": "07f6b2f267e5636d", "seed": 0}  # as results/archive/ recorded it
    assert runner.recorded_fingerprint(archived) == ("sha256-every-97th-image", "07f6b2f267e5636d")
    assert runner.recorded_fingerprint({"data_fingerprint": "ab", "data_fingerprint_kind": "sha256-all-bytes"}) == (
        "sha256-all-bytes", "ab")
    assert runner.fingerprint_of_kind(images, runner.SAMPLED_KIND) == runner.data_fingerprint_sampled(images)
    assert runner.fingerprint_of_kind(images, runner.FINGERPRINT_KIND) == runner.data_fingerprint(images)
    assert runner.data_fingerprint(images) != runner.data_fingerprint_sampled(images)
    with pytest.raises(ValueError, match=r"fingerprint kind 'md5'"):
        runner.fingerprint_of_kind(images, "md5")


@pytest.mark.slow
def test_worker_processes_give_the_same_numbers_as_one_process(results_in_tmp, monkeypatch):
    cfgs = [make_run_config(**{**TINY, "seed": s}) for s in (0, 1)]
    parallel = runner.run_many(cfgs, workers=2, progress=False)
    assert [r.config for r in parallel] == cfgs  # input order kept
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results_in_tmp / "sequential"))
    sequential = runner.run_many(cfgs, workers=1, progress=False)
    for p, s in zip(parallel, sequential):
        cols = ["recovery_unweighted", "recovery_weighted", "sigma2_hat", "train_loss", "test_acc"]
        pd.testing.assert_frame_equal(p.metrics[cols], s.metrics[cols], rtol=1e-6)
    assert parallel[0].metrics["recovery_unweighted"].iloc[0] != parallel[1].metrics["recovery_unweighted"].iloc[0]


def test_a_workers_round_counter_puts_each_round_and_a_resumed_runs_rounds_on_its_queue():
    # prepare: a list stands in for the multiprocessing queue
    class Queue(list):
        put = list.append

    q = Queue()
    # execute: one run resumed after 4 rounds, then 2 rounds; one from round 0, then 1 round
    with runner.RoundCounter(q).started(4) as bar:
        bar.update(1)
        bar.set_postfix(recovery="1.23")
        bar.update(1)
    runner.RoundCounter(q).started(0).update(1)
    # assert
    assert q == [4, 1, 1, 1]


@pytest.mark.slow
def test_worker_processes_report_every_round_to_one_bar(results_in_tmp, capsys):
    # two runs of TINY's rounds in two workers: the parent's bar counts all their rounds, and the runs finished
    cfgs = [make_run_config(**{**TINY, "seed": s}) for s in (0, 1)]
    runner.run_many(cfgs, workers=2, progress=True)
    err = capsys.readouterr().err
    total = 2 * cfgs[0].rounds
    assert f"{total}/{total}" in err and "finished=2/2" in err and "2 runs" in err


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.slow
def test_a_failing_run_keeps_the_finished_ones_and_raises_its_own_error(results_in_tmp, workers):
    bad = make_run_config(**{**TINY, "num_clients": 500, "cohort_size": 2})  # more clients than images
    good = make_run_config(**TINY)  # listed after the failing one: still runs
    with pytest.raises(ValueError, match=r"num_clients = 500 .*200 training") as info:
        runner.run_many([bad, good], workers=workers, progress=False)
    assert "1 of 2 run(s) failed" in "".join(info.value.__notes__)
    assert runner.find_run(good) is not None
    assert runner.find_run(bad) is None
    assert _entries(results_in_tmp / "runs") == [runner.find_run(good).path.name]  # no litter


def test_force_recomputes_and_replaces_the_folder(results_in_tmp):
    cfg = make_run_config(**TINY)
    first = runner.run(cfg, progress=False)
    forced = runner.run(cfg, force=True, progress=False)
    assert forced.path == first.path
    assert forced.provenance["wall_s"] != first.provenance["wall_s"]  # really recomputed and written
    assert runner.find_run(cfg).provenance["wall_s"] == forced.provenance["wall_s"]
    pd.testing.assert_frame_equal(first.metrics.drop(columns="wall_s"), forced.metrics.drop(columns="wall_s"))
    assert _entries(results_in_tmp / "runs") == [first.path.name]  # no leftovers


def test_control_on_cuda_runs_with_deterministic_algorithms(results_in_tmp, monkeypatch):
    # No GPU here: pretend the device is CUDA and record what the training loop sees.
    import torch

    from maskfed.engine import fedavg

    seen = {}
    real = fedavg.run_fedavg

    def spy(*args, **kwargs):
        seen["deterministic"] = torch.are_deterministic_algorithms_enabled()
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "resolve_device", lambda name: torch.device("cpu"))
    monkeypatch.setattr(runner.determinism, "needed", lambda control, device: control)
    monkeypatch.setattr(runner.determinism, "_AT_CUDA_START", {"value": ":4096:8"})  # as read when CUDA started
    monkeypatch.setattr(fedavg, "run_fedavg", spy)
    cfg = make_run_config(**{**TINY, "partition": "identical", "identical_client_seeds": True})
    res = runner.run(cfg, progress=False)
    assert seen["deterministic"] is True
    assert res.provenance["determinism"]["deterministic_algorithms"] is True
    assert res.provenance["determinism"]["cublas_workspace_config"] == ":4096:8"
    assert not torch.are_deterministic_algorithms_enabled()   # restored after the run
    # a CPU run never starts CUDA: nothing was read, and provenance says so
    plain = runner.run(make_run_config(**TINY), progress=False)
    assert make_run_config(**TINY).device == "auto"
    monkeypatch.setattr(runner.determinism, "_AT_CUDA_START", {})
    assert runner.determinism.state()["cublas_workspace_config"] is None
    assert plain.provenance["precision_flags"] == {"precision": "fp32", "device_type": "cpu", "autocast": None}


def test_a_run_resolves_its_identity_once(monkeypatch):
    # prepare: count how often a run reads its images, resolves its device and hashes its key
    calls = {"images_for": 0, "resolve_device": 0, "code_hash": 0}
    for name, module in (("images_for", runner), ("resolve_device", runner), ("code_hash", runner.provenance)):
        real = getattr(module, name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(module, name, counted)
    cfg = make_run_config(**TINY)
    # execute: a fresh run, then the same call finding it
    first = runner.run(cfg, progress=False)
    once = dict(calls)
    again = runner.run(cfg, progress=False)
    # assert: one resolution for the run that trained (its provenance records the code hash once more,
    # as written), one for the call that found it
    assert once == {"images_for": 1, "resolve_device": 1, "code_hash": 2}
    assert {k: calls[k] - once[k] for k in calls} == {"images_for": 1, "resolve_device": 1, "code_hash": 1}
    assert again.path == first.path == runner.identify(cfg).path


def test_key_tells_devices_and_engines_apart(monkeypatch):
    # a run with device auto and engine auto made on a CPU must never be found as the same run on a GPU
    import torch

    cfg = make_run_config(**TINY)  # device auto, engine auto
    assert (cfg.device, cfg.engine) == ("auto", "auto")
    monkeypatch.setattr(runner, "resolve_device", lambda name: torch.device("cpu"))
    on_cpu = runner.identify(cfg)
    assert (on_cpu.device.type, on_cpu.engine) == ("cpu", "sequential")
    monkeypatch.setattr(runner, "resolve_device", lambda name: torch.device("cuda"))
    on_gpu = runner.identify(cfg)
    assert (on_gpu.device.type, on_gpu.engine) == ("cuda", "batched")
    assert on_gpu.key != on_cpu.key
    # the same device type with another engine is another run too
    batched = cfg.model_copy(update={"engine": "batched"})
    monkeypatch.setattr(runner, "resolve_device", lambda name: torch.device("cpu"))
    assert runner.identify(batched).key != on_cpu.key
    assert on_cpu.path.name == f"{cfg.label()}-{on_cpu.key}"


# ----------------------------------------------------------------------------- checkpoints and resume

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from maskfed.engine import checkpoint  # noqa: E402
from maskfed.engine.models import build_model  # noqa: E402
from maskfed.paths import REPO_ROOT  # noqa: E402


def _same_metrics(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Every column but wall time, exactly (NaN where not evaluated counts as equal)."""
    pd.testing.assert_frame_equal(a.drop(columns="wall_s"), b.drop(columns="wall_s"), check_exact=True)


def _visible(runs: Path) -> list[Path]:
    return [p for p in runs.iterdir() if not p.name.startswith(".")] if runs.exists() else []


def test_checkpoint_every_is_recorded_but_left_out_of_the_key():
    a, b = make_run_config(**TINY, checkpoint_every=1), make_run_config(**TINY, checkpoint_every=0)
    assert a.key() == b.key() and runner.identify(a).key == runner.identify(b).key
    assert a.model_dump()["checkpoint_every"] == 1  # what config.json is written from
    assert make_run_config(**{**TINY, "rounds": 3}).key() != a.key()  # other fields still count
    with pytest.raises(Exception, match="checkpoint_every"):
        make_run_config(**TINY, checkpoint_every=-1)


@pytest.mark.parametrize("engine", ["sequential", "batched"])
@pytest.mark.slow
def test_a_run_killed_after_a_checkpoint_resumes_with_identical_numbers(results_in_tmp, monkeypatch, engine):
    cfg = make_run_config(**{**TINY, "rounds": 5, "checkpoint_every": 2, "engine": engine})
    real_save = checkpoint.save

    def save_then_die(folder, state, run_key):
        real_save(folder, state, run_key)
        if state.rounds_done == 4:
            raise KeyboardInterrupt  # killed right after the round-4 checkpoint

    monkeypatch.setattr(checkpoint, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, progress=False)
    runs = results_in_tmp / "runs"
    assert _visible(runs) == []  # no run folder, only the hidden partial one
    (partial,) = runs.glob(".partial-*")
    assert checkpoint.load(partial, runner.identify(cfg).key).rounds_done == 4

    monkeypatch.setattr(checkpoint, "save", real_save)
    resumed = runner.run(cfg, progress=False)
    assert resumed.provenance["resumed_after_round"] == 4
    assert not partial.exists()  # a finished run removes its checkpoint
    assert _entries(runs) == [resumed.path.name]

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results_in_tmp / "straight"))
    straight = runner.run(cfg.model_copy(update={"checkpoint_every": 0}), progress=False)
    assert straight.provenance["resumed_after_round"] == 0
    assert straight.path.name == resumed.path.name  # same key: checkpoint_every changes no result
    _same_metrics(straight.metrics, resumed.metrics)


def test_force_starts_from_round_1_despite_a_checkpoint(results_in_tmp, monkeypatch):
    cfg = make_run_config(**{**TINY, "rounds": 3, "checkpoint_every": 1})
    monkeypatch.setattr(runner.fedavg, "evaluate", _fail_at_last_round(cfg.rounds, runner.fedavg.evaluate))
    with pytest.raises(RuntimeError, match="injected"):
        runner.run(cfg, progress=False)
    monkeypatch.undo()
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results_in_tmp))
    forced = runner.run(cfg, force=True, progress=False)
    assert forced.provenance["resumed_after_round"] == 0
    assert not list((results_in_tmp / "runs").glob(".partial-*"))


def test_a_finished_run_tidies_a_partial_folder_left_by_a_late_kill(results_in_tmp):
    cfg = make_run_config(**TINY)
    done = runner.run(cfg, progress=False)
    stale = checkpoint.partial_dir(done.path)  # as if killed between the rename and the clean-up
    checkpoint.save(stale, checkpoint.RunState(1, torch.zeros(3), [{}]), run_key="k")
    assert runner.run(cfg, progress=False).path == done.path
    assert not stale.exists()


def _fail_at_last_round(rounds, evaluate):
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == rounds:  # TINY evaluates every round
            raise RuntimeError("injected failure")
        return evaluate(*args, **kwargs)
    return wrapped


def _foreground_sigint() -> None:
    """In the child before exec: SIGINT and SIGHUP at their defaults, as for a command typed at a
    terminal. A test suite started in the background of a script (``make test &``, nohup) inherits
    them ignored, and a child that ignores them would run on through the signal under test (seen in
    CI-like runs)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _cli(results: Path, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "MASKFED_RESULTS_DIR": str(results), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "maskfed", *args], env=env, cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_foreground_sigint, **popen)


#: smoke profile shrunk further (every flag is one no experiment grid varies): a round takes well under 1 s
SMALL = ["--profile", "smoke", "--synthetic-train", "200", "--num-clients", "4", "--cohort-size", "2",
         "--width", "2", "--checkpoint-every", "1"]


def _wait_for(condition, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"process ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting")
        time.sleep(0.1)


def _checkpoint_rounds(runs: Path) -> dict[str, int]:
    """Rounds done per unfinished run, from the checkpoints in the hidden partial folders."""
    out = {}
    for f in runs.glob(".partial-*/checkpoint.pt"):
        try:
            out[f.parent.name.removeprefix(".partial-")] = int(
                torch.load(f, map_location="cpu", weights_only=True)["rounds_done"])
        except Exception:  # noqa: BLE001 - replaced while we read it
            pass
    return out


@pytest.mark.slow
def test_a_cli_run_killed_with_sigkill_resumes_with_identical_numbers(tmp_path):
    args = ["run", *SMALL, "--rounds", "20"]
    runs = tmp_path / "killed" / "runs"
    proc = _cli(tmp_path / "killed", *args)
    _wait_for(lambda: any(n >= 3 for n in _checkpoint_rounds(runs).values()), 240, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _visible(runs) == []  # nothing but the hidden checkpoint folder
    (done_before,) = _checkpoint_rounds(runs).values()
    assert 3 <= done_before < 20

    again = _cli(tmp_path / "killed", *args)
    straight = _cli(tmp_path / "straight", *args)  # the same command, never interrupted
    for p in (again, straight):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    (resumed_path,) = _visible(runs)
    (straight_path,) = _visible(tmp_path / "straight" / "runs")
    resumed, reference = runner.load_run(resumed_path), runner.load_run(straight_path)
    assert resumed.provenance["resumed_after_round"] >= done_before
    assert reference.provenance["resumed_after_round"] == 0
    assert len(resumed.metrics) == 20
    _same_metrics(reference.metrics, resumed.metrics)
    assert not list(runs.glob(".partial-*"))


def _descendants(pid: int) -> set[int]:
    """Processes started by ``pid`` and by them (from /proc: Linux)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we read
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        found |= kids
        todo += list(kids)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status is left


@pytest.mark.parametrize("sig, status, says", [(signal.SIGINT, 130, "interrupted;"),
                                               (signal.SIGTERM, 143, "interrupted by SIGTERM;"),
                                               (signal.SIGHUP, 129, "interrupted by SIGHUP;")])
@pytest.mark.slow
def test_a_signal_stops_a_sweep_with_workers_keeps_finished_runs_and_resumes(tmp_path, monkeypatch, sig, status, says):
    # Ctrl-C (SIGINT), kill (SIGTERM) and a closed terminal (SIGHUP) end a sweep alike.
    # 4 runs (Table II's 3 alphas and the control) of 30 rounds on 2 worker processes
    args = ["sweep", *SMALL, "--rounds", "30", "--workers", "2", "--experiments", "table2", "control"]
    runs = tmp_path / "runs"
    proc = _cli(tmp_path, *args)
    # wait until a run has finished and another one is at most a quarter done (so it cannot finish first)
    # (a finished run's checkpoint can outlive its rename for a moment: count only unfinished runs')
    def one_done_one_early():
        done = {p.name for p in _visible(runs) if (p / "provenance.json").exists()}
        return bool(done) and any(n <= 7 for name, n in _checkpoint_rounds(runs).items() if name not in done)

    _wait_for(one_done_one_early, 400, proc)
    workers = _descendants(proc.pid)
    assert len(workers) >= 2  # the two workers (and multiprocessing's resource tracker)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)  # a guard against a hang, not a timing: no wall time is asserted
    assert proc.returncode == status, err[-2000:]
    assert says in err and "rerun" in err and "resume" in err and "Traceback" not in err
    deadline = time.monotonic() + 120  # the workers end themselves (watch_parent); wait for that, do not time it
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)], "a worker outlived its sweep"
    finished = _visible(runs)
    assert finished and all((p / "provenance.json").exists() for p in finished)  # no half-written run folder
    assert not list(runs.glob(".tmp-*"))
    # (a run killed between its rename and its clean-up may leave a stale checkpoint: not unfinished)
    unfinished = {n: r for n, r in _checkpoint_rounds(runs).items() if n not in {p.name for p in finished}}
    assert unfinished

    again = _cli(tmp_path, *args)
    out, err = again.communicate(timeout=400)
    assert again.returncode == 0, err[-2000:]
    results = {p.name: runner.load_run(p) for p in _visible(runs)}
    assert len(results) == 4 and not list(runs.glob(".partial-*"))
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "straight"))
    for name, rounds_done in unfinished.items():
        res = results[name]
        assert res.provenance["resumed_after_round"] >= rounds_done
        straight = runner.run(res.config.model_copy(update={"checkpoint_every": 0}), force=True, progress=False)
        _same_metrics(straight.metrics, res.metrics)


@pytest.mark.slow
def test_a_worker_whose_sweep_was_killed_ends_itself(tmp_path):
    # SIGKILL cannot be handled: the workers notice that their parent is gone and end within seconds
    args = ["sweep", *SMALL, "--rounds", "30", "--workers", "2", "--experiments", "table2"]
    proc = _cli(tmp_path, *args)
    _wait_for(lambda: bool(_checkpoint_rounds(tmp_path / "runs")), 400, proc)
    workers = _descendants(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)]


@pytest.mark.parametrize("command, delay", [("run", 0.5), ("run", 1.5), ("run", 4.0), ("sweep", 1.5)])
@pytest.mark.slow
def test_two_processes_asking_for_the_same_run_compute_it_once(tmp_path, command, delay):
    # the second one waits for the first (or finds its run finished) and reuses it, however the timing falls
    args = [command, *SMALL, "--rounds", "80", "--seeds", "0", "--workers", "1"]  # about 6 s of training here
    if command == "sweep":
        args += ["--experiments", "control"]
    first = _cli(tmp_path, *args)
    time.sleep(delay)
    second = _cli(tmp_path, *args)
    outs = [p.communicate(timeout=300) for p in (first, second)]
    for p, (out, err) in zip((first, second), outs):
        assert p.returncode == 0, err[-2000:]
    (folder,) = _visible(tmp_path / "runs")
    assert all(out.strip().splitlines()[-1] == str(folder) for out, _ in outs)  # both report the same folder
    # exactly one process computed it: the other said it waited for it or found it finished
    reused = [("waiting for it to finish" in err) or ("1 finished before and reused" in err) for _, err in outs]
    assert sum(reused) == 1, [err[-600:] for _, err in outs]
    assert not list((tmp_path / "runs").glob(".partial-*"))


def test_ctrl_c_in_a_one_process_sweep_says_what_was_kept_and_how_to_resume(results_in_tmp, monkeypatch):
    cfgs = [make_run_config(**{**TINY, "seed": s}) for s in (0, 1)]
    real_run = runner.run

    def interrupted_second(cfg, **kw):
        if cfg.seed == 1:
            raise KeyboardInterrupt
        return real_run(cfg, **kw)

    monkeypatch.setattr(runner, "run", interrupted_second)
    with pytest.raises(runner.Interrupted, match=r"1 of 2 run.s. finished.*rerun"):
        runner.run_many(cfgs, workers=1, progress=False)
    assert runner.find_run(cfgs[0]) is not None and runner.find_run(cfgs[1]) is None


# ---------------------------------------------------------------- θ snapshots (keep_every)

def test_kept_rounds_are_round_0_every_nth_and_the_last():
    assert runner.kept_rounds(5, 2) == [0, 2, 4, 5]
    assert runner.kept_rounds(4, 2) == [0, 2, 4]
    assert runner.kept_rounds(3, 10) == [0, 3]
    with pytest.raises(ValueError, match="keep_every"):
        runner.kept_rounds(3, 0)


def test_keep_every_refused_below_0_before_training(results_in_tmp):
    with pytest.raises(ValueError, match=r"keep_every must be >= 0"):
        runner.run(make_run_config(**TINY), keep_every=-1, progress=False)
    assert not (results_in_tmp / "runs").exists() or _visible(results_in_tmp / "runs") == []


@pytest.mark.slow
def test_snapshots_survive_a_resume_and_change_no_number(results_in_tmp, monkeypatch):
    # prepare: a 5-round run keeping θ every 2 rounds, killed right after its round-4 checkpoint
    cfg = make_run_config(**{**TINY, "rounds": 5, "checkpoint_every": 2})
    real_save = checkpoint.save

    def save_then_die(folder, state, run_key):
        real_save(folder, state, run_key)
        if state.rounds_done == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, keep_every=2, progress=False)
    monkeypatch.setattr(checkpoint, "save", real_save)
    # execute: resume it; run the same config straight through, with and without snapshots
    resumed = runner.run(cfg, keep_every=2, progress=False)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results_in_tmp / "straight"))
    straight = runner.run(cfg, keep_every=2, progress=False)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results_in_tmp / "plain"))
    plain = runner.run(cfg, progress=False)
    # assert: the resumed run kept rounds 0, 2, 4 before the kill and 5 after, equal to the straight
    # run's bit for bit; snapshots change no metric and no key; a run without them has no file
    assert resumed.provenance["resumed_after_round"] == 4
    kept, ref = runner.load_thetas(resumed.path), runner.load_thetas(straight.path)
    assert sorted(kept) == [0, 2, 4, 5]
    assert all(torch.equal(kept[r], ref[r]) for r in kept)
    assert not torch.equal(kept[0], kept[5])
    assert runner.load_thetas(plain.path) is None
    assert plain.path.name == straight.path.name == resumed.path.name
    _same_metrics(plain.metrics, resumed.metrics)
    _same_metrics(plain.metrics, straight.metrics)
    # θ_0 is the initial model and the last snapshot trains on from it to the run's own final θ
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, num_classes=len(runner.images_for(cfg).classes), gn_groups=cfg.gn_groups,
                        width=cfg.width)
    assert torch.equal(kept[0], torch.nn.utils.parameters_to_vector(model.parameters()).detach())
