"""The command line refuses bad input before any compute and runs a tiny setting."""

import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from maskfed import cli

from maskfed.book import notebooks

from maskfed.engine import runner

TINY = ["--profile", "smoke", "--rounds", "2", "--num-clients", "4", "--cohort-size", "2", "--synthetic-train", "200",
        "--synthetic-test", "50", "--width", "2"]


@pytest.mark.parametrize("args, names", [
    (["--batch-size", "0"], ["batch_size", "0", "'full'"]),
    (["--batch-size", "half"], ["batch_size", "half"]),
    (["--alpha", "0"], ["alpha", "> 0"]),
    (["--local-epochs", "0"], ["local_epochs", ">= 1"]),
    (["--num-clients", "5", "--cohort-size", "10"], ["cohort_size", "num_clients"]),
    (["--model", "vgg11"], ["model", "vgg11", "resnet18_gn"]),
    (["--data-path", "/no/such/cifar", "--dataset", "cifar10"], ["data_path", "/no/such/cifar"]),
])
def test_bad_input_is_refused_with_a_named_parameter(args, names, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    code = cli.main(["run", "--profile", "smoke", *args])
    err = capsys.readouterr().err
    assert code == 2
    for name in names:
        assert name in err
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_help_names_each_flags_allowed_values(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    # what each flag means (its unit comment in RunConfig) and what it accepts
    def flag(name: str) -> str:  # the text of one flag's help entry, up to the next flag
        return out.split(f"{name} VALUE ", 1)[1].split(" --")[0]

    assert "[200]" in flag("--rounds") and ">= 1" in flag("--rounds")      # the paper's value, the bound
    assert "arithmetic" in flag("--precision") and all(f"'{p}'" in flag("--precision") for p in ("fp32", "tf32", "bf16"))
    assert ">= 100" in flag("--train-subset") and "<= 10000000" in flag("--train-subset") and "none" in flag("--train-subset")
    assert "Allowed: a number > 0 and <= 1" in out             # mask_keep_prob
    assert "positive integer" in flag("--batch-size") and "'full'" in flag("--batch-size")  # the validator's values
    assert "Allowed: a finite number > 0" in out               # lr, alpha
    assert "Literal" not in out and "Union" not in out
    assert set(cli.field_notes()) == set(cli.RunConfig.model_fields)  # every field has its comment


def test_an_unparsable_command_line_is_one_error_line(capsys):
    for argv, shown in ((["run", "--seeds", "x"], "argument --seeds: invalid int value: 'x' (see maskfed run --help)"),
                        (["archive"], "required: --profile (see maskfed archive --help)"),
                        (["sweep", "--backend", "dask"], "invalid choice: 'dask'")):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.startswith("maskfed: error: ") and shown in err, err
        assert "usage:" not in err and err.count("\n") == 1


def test_none_clears_an_optional_field_and_is_refused_for_others(capsys, tmp_path, monkeypatch):
    parser = cli.build_parser()
    given = cli._overrides(parser.parse_args(["run", "--train-subset", "None", "--data-path", "none", "--rounds", "3"]))
    assert given == {"train_subset": None, "data_path": None, "rounds": "3"}
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    assert cli.main(["run", "--profile", "smoke", "--rounds", "none"]) == 2
    assert "rounds = 'none'" in capsys.readouterr().err


def test_unknown_profile_and_experiment(capsys):
    assert cli.main(["sweep", "--profile", "laptop"]) == 2
    assert "smoke" in capsys.readouterr().err
    assert cli.main(["sweep", "--profile", "smoke", "--experiments", "table3"]) == 2
    assert "table1" in capsys.readouterr().err


def test_run_prints_a_summary_and_the_run_folders(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    assert cli.main(["run", *TINY, "--seeds", "0", "1", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "recovery_unweighted" in out
    assert out.count(str(tmp_path / "runs")) == 2
    assert cli.main(["run", *TINY, "--seeds", "0", "1", "2", "--workers", "1"]) == 0  # two of three finished
    err = capsys.readouterr().err
    assert "3 run(s)" in err and "2 finished" in err and "reused" in err and "--force" in err


# ----------------------------------------------------------------------------- errors after validation

def _noise_archive(tmp_path: Path) -> Path:
    """A small train/<class>/ test/<class>/ archive of noise PNGs (incompressible, so a cut is mid-stream)."""
    rng = np.random.default_rng(0)
    src = tmp_path / "imgs"
    for split in ("train", "test"):
        for cls in ("airplane", "automobile"):
            (src / split / cls).mkdir(parents=True)
            for i in range(6):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(src / split / cls / f"{i}.png")
    archive = tmp_path / "cifar10.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src, arcname="cifar10")
    return archive


def _refused(capsys, tmp_path, argv: list[str], names: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("maskfed: error: ")
    for name in names:
        assert name in err, (name, err)
    assert not (tmp_path / "runs").exists()  # nothing ran
    return err


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("MASKFED_CACHE_DIR", str(tmp_path / "cache"))
    runner.load_images.cache_clear()
    yield tmp_path
    runner.load_images.cache_clear()


def test_truncated_archive_is_one_message_naming_the_file(capsys, results):
    whole = _noise_archive(results).read_bytes()
    cut = results / "cut.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])  # like `head -c` of a partial download

    _refused(capsys, results, ["run", "--profile", "cpu", "--rounds", "2", "--data-path", str(cut)],
             [str(cut), "truncated", "train/<class>/"])


def test_hopeless_partition_is_one_message_naming_alpha(capsys, results):
    # the cpu profile's K = 100 clients over 10 classes at alpha = 1e-3, on smoke's synthetic images
    _refused(capsys, results, ["run", "--profile", "smoke", "--num-clients", "100", "--alpha", "1e-3"],
             ["alpha=0.001", "num_clients=100", "larger alpha", "synthetic-small_cnn_gn-dirichlet-a0.001"])


def test_more_clients_than_images_is_one_message(capsys, results):
    _refused(capsys, results, ["run", "--profile", "smoke", "--num-clients", "2000"],
             ["num_clients = 2000", "1000 training images"])
    _refused(capsys, results, ["run", "--profile", "smoke", "--train-subset", "5000"],
             ["train_subset = 5000", "1000"])


def test_an_input_error_during_the_runs_keeps_finished_runs(capsys, results, monkeypatch):
    real, calls = runner.prepare_data, []

    def fail_second(cfg, images, device):
        calls.append(cfg.seed)
        if len(calls) == 2:
            raise ValueError("num_clients = 4 exceeds the 3 training images (injected)")
        return real(cfg, images, device)

    monkeypatch.setattr(runner, "prepare_data", fail_second)
    code = cli.main(["run", *TINY, "--seeds", "0", "1", "--workers", "1"])
    err = capsys.readouterr().err

    assert code == 2 and "maskfed: error:" in err and "num_clients = 4" in err and "Traceback" not in err
    assert "kept" in err  # the finished run is said to be kept (and is, below)
    finished = [p for p in (results / "runs").iterdir() if (p / "provenance.json").exists()]
    assert len(finished) == 1 and finished[0].name.startswith("synthetic-small_cnn_gn-dirichlet-a100-bs32-t2-s0")


# ----------------------------------------------------------------------------- damaged folders, divergence, full disk

ONE_RUN = {"run": ["run", *TINY, "--seeds", "0", "--workers", "1"],
           "sweep": ["sweep", *TINY, "--experiments", "control", "--seeds", "0", "--workers", "1"]}


def _one_line_error(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("maskfed: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _cut_provenance(folder: Path) -> str:
    text = (folder / "provenance.json").read_text()
    (folder / "provenance.json").write_text(text[: len(text) // 2])
    return "provenance.json is not valid JSON"


def _header_only(folder: Path) -> str:
    text = (folder / "metrics.csv").read_text()
    (folder / "metrics.csv").write_text(text.splitlines()[0] + "\n")
    return "metrics.csv has 0 rows for a 2-round run"


def _no_metrics(folder: Path) -> str:
    (folder / "metrics.csv").unlink()
    return "metrics.csv missing"


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("damage", [_no_metrics, _header_only, _cut_provenance])
@pytest.mark.slow
def test_a_damaged_run_folder_is_named_with_the_reason_and_force_recomputes_it(capsys, results, command, damage):
    assert cli.main(ONE_RUN[command]) == 0
    (folder,) = [p for p in (results / "runs").iterdir() if not p.name.startswith(".")]
    before = runner.load_run(folder).metrics
    reason = damage(folder)
    line = _one_line_error(capsys, ONE_RUN[command])
    assert str(folder) in line and reason in line and "--force" in line
    assert cli.main([*ONE_RUN[command], "--force"]) == 0  # maskfed sweep takes --force too
    capsys.readouterr()
    again = runner.load_run(folder)  # whole again, the same numbers
    assert again.metrics.drop(columns="wall_s").equals(before.drop(columns="wall_s"))


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.slow
def test_diverging_training_is_one_error_line_and_never_stored(capsys, results, workers):
    line = _one_line_error(capsys, ["run", *TINY, "--lr", "1e6", "--seeds", "0", "1", "--workers", workers])
    assert "diverged" in line and "round 1:" in line and "lr = 1e+06" in line and "smaller lr" in line
    assert "2 of 2 run(s) failed" in line  # which runs: every one here
    assert not [p for p in (results / "runs").iterdir() if not p.name.startswith(".")]  # nothing stored as finished


def _full_disk_at(monkeypatch, method: str, when) -> None:
    """Path.<method> raises ENOSPC (after writing half) on the calls for which ``when(path)`` holds."""
    import errno

    real = getattr(Path, method)

    def full(self, data, *args, **kwargs):
        if when(self):
            real(self, data[: len(data) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, method, full)


def test_a_full_disk_at_a_checkpoint_is_one_error_line_and_keeps_the_previous_one(capsys, results, monkeypatch):
    from maskfed.engine import checkpoint

    argv = ["run", *TINY, "--rounds", "3", "--seeds", "0", "--workers", "1"]  # checkpoints after rounds 1 and 2
    saved = []
    _full_disk_at(monkeypatch, "write_bytes",
                  lambda p: p.name.startswith(".checkpoint.pt") and saved.append(p) is None and len(saved) == 2)
    line = _one_line_error(capsys, argv)
    (partial,) = (results / "runs").glob(".partial-*")
    assert "checkpoint" in line and f"{partial}:" in line and "errno 28" in line
    assert "intact" in line
    monkeypatch.undo()
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results))
    (cfg,) = cli._plan(cli.build_parser().parse_args(argv))[1]
    assert checkpoint.load(partial, runner.identify(cfg).key).rounds_done == 1  # whole
    assert [p.name for p in partial.iterdir() if p.name.endswith(".tmp")] == []
    assert cli.main(argv) == 0  # space again: the same command resumes
    assert runner.find_run(cfg).provenance["resumed_after_round"] == 1


def test_a_full_disk_when_writing_the_run_folder_is_one_error_line(capsys, results, monkeypatch):
    argv = ["run", *TINY, "--rounds", "3", "--seeds", "0", "--workers", "1"]
    _full_disk_at(monkeypatch, "write_bytes", lambda p: p.parent.name.startswith(".tmp-"))
    line = _one_line_error(capsys, argv)
    assert f"run's folder in {results / 'runs'}:" in line and "No space left" in line
    assert not [p for p in (results / "runs").iterdir() if not p.name.startswith(".partial-") and p.name != ".locks"]
    monkeypatch.undo()
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results))
    assert cli.main(argv) == 0
    (cfg,) = cli._plan(cli.build_parser().parse_args(argv))[1]
    assert runner.find_run(cfg).provenance["resumed_after_round"] == 2  # from the last checkpoint


# ----------------------------------------------------------------------------- nothing silently dropped

@pytest.mark.parametrize("flags, names", [
    (["--experiments", "table2", "--alpha", "0.5"], ["alpha = 0.5", "table2", "[100, 1, 0.1]", "maskfed run"]),
    (["--experiments", "table1", "--batch-size", "128"], ["batch_size = 128", "table1", "[16, 64, 'full']"]),
    (["--experiments", "table1", "--local-epochs", "3"], ["local_epochs = 3", "table1", "[1, 2, 5]"]),
    (["--experiments", "control", "--partition", "iid"], ["partition = 'iid'", "control"]),
    (["--experiments", "control", "--alpha", "0.5"], ["alpha = 0.5", "'identical'"]),
    (["--data-path", "/some/cifar"], ["data_path", "synthetic"]),
])
def test_sweep_refuses_a_flag_its_grid_would_ignore(flags, names, capsys, results):
    _refused(capsys, results, ["sweep", "--profile", "smoke", *flags], names)


def test_seeds_flag_reaches_every_run_and_force_on_ray_is_refused(capsys, results):
    _profile, cfgs = cli._plan(cli.build_parser().parse_args(
        ["sweep", "--profile", "smoke", "--experiments", "table2", "control", "--seeds", "5", "6"]))
    assert sorted({c.seed for c in cfgs}) == [5, 6] and len(cfgs) == (3 + 1) * 2

    _refused(capsys, results, ["sweep", "--profile", "smoke", "--force", "--backend", "ray"], ["--force", "ray"])
    for command in ("sweep", "run"):  # --seed is read as --seeds, not dropped
        _profile, cfgs = cli._plan(cli.build_parser().parse_args([command, "--profile", "smoke", "--seed", "3"]))
        assert {c.seed for c in cfgs} == {3}


def test_notebook_runner_refuses_bad_names_and_profiles_before_running(capsys):
    for argv, shown in ((["--profile", "smoke", "table1_local_protocol", "no_such_chapter"], "no_such_chapter"),
                        (["--profile", "laptop"], "laptop")):
        with pytest.raises(SystemExit) as exc:
            notebooks.main(argv)
        assert exc.value.code == 2
        assert shown in capsys.readouterr().err


def test_notebook_cell_failure_is_named():
    from papermill.exceptions import PapermillExecutionError

    message = "alpha = 0.5 would be ignored"  # the cell's exception message, passed through as it is
    err = PapermillExecutionError(3, 1, "ConfigError: alpha ...", "ConfigError", message, [])
    assert notebooks._cell_failure(err) == ("ConfigError", message)
    assert notebooks._cell_failure(RuntimeError("x")) is None


def test_notebook_runner_refuses_a_data_path_the_profile_would_not_read(capsys):
    with pytest.raises(SystemExit) as exc:
        notebooks.main(["--profile", "smoke", "--data-path", "/some/cifar", "table2_heterogeneity"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--data-path" in err and "synthetic" in err


def test_a_relative_data_path_means_the_same_file_to_the_cli_and_the_notebooks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _profile, cfgs = cli._plan(cli.build_parser().parse_args(["run", "--profile", "cpu", "--data-path", "data/c.tgz"]))
    assert cfgs[0].data_path == str(tmp_path / "data" / "c.tgz")  # not re-read from notebooks/ by papermill


# --- data that is not what it says, through the CLI ---

IMAGE_TINY = ["--rounds", "1", "--num-clients", "2", "--cohort-size", "2", "--width", "2", "--batch-size", "4",
              "--local-epochs", "1", "--eval-every", "1"]


@pytest.fixture
def image_dirs(tmp_path, monkeypatch):
    from test_data import write_image_folder

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_CACHE_DIR", str(tmp_path / "cache"))
    four = {"train": ["0000.jpg", "0001.jpg", "0002.jpg", "0003.jpg"], "test": ["0000.jpg"]}
    eleven = tmp_path / "eleven"
    write_image_folder(eleven, classes=(*cifar_classes(), "zebra"), names=four)
    three = tmp_path / "three"
    write_image_folder(three, classes=("a", "b", "c"), names=four)
    return {"eleven": eleven, "three": three, "results": tmp_path / "results"}


def cifar_classes():
    from maskfed.engine.data import CIFAR10_CLASSES
    return CIFAR10_CLASSES


def test_cli_refuses_an_eleven_class_folder_as_cifar10(image_dirs, capsys):
    code = cli.main(["run", "--profile", "smoke", "--dataset", "cifar10", "--data-path", str(image_dirs["eleven"]),
                     *IMAGE_TINY])
    err = capsys.readouterr().err
    assert code == 2
    assert "data_path=" in err and "11 class folders" in err and "extra: ['zebra']" in err
    assert "--dataset image_folder" in err and err.count("zebra") == 1  # the classes are not listed again
    assert not (image_dirs["results"] / "runs").exists()  # nothing ran


def test_cli_image_folder_runs_under_its_own_label_and_class_count(image_dirs, capsys):
    import json

    code = cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", "--data-path",
                     str(image_dirs["three"]), *IMAGE_TINY])
    out = capsys.readouterr().out
    assert code == 0
    runs = [p for p in (image_dirs["results"] / "runs").iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1 and runs[0].name.startswith("image_folder-small_cnn_gn-")
    assert "cifar10" not in runs[0].name and "image_folder" in out
    prov = json.loads((runs[0] / "provenance.json").read_text())
    assert "not CIFAR-10: 3 classes: a, b, c" in prov["data_source"]
    assert prov["dataset"] == "image_folder" and prov["classes"] == ["a", "b", "c"]
    # the classifier has 3 outputs: small CNN width 2 -> hidden 8, last layer 8*3 + 3 parameters
    from maskfed.engine.models import build_model, num_parameters
    assert prov["num_parameters"] == num_parameters(build_model("small_cnn_gn", num_classes=3, gn_groups=2, width=2))
    assert prov["num_parameters"] != num_parameters(build_model("small_cnn_gn", num_classes=10, gn_groups=2, width=2))


def test_cli_image_folder_without_a_path_and_a_test_only_class_are_refused(image_dirs, capsys, tmp_path):
    from test_data import write_image_folder

    assert cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", *IMAGE_TINY]) == 2
    assert "needs data_path" in capsys.readouterr().err
    write_image_folder(image_dirs["three"], classes=("d",), names={"test": ["0000.jpg"]})
    assert cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", "--data-path",
                     str(image_dirs["three"]), *IMAGE_TINY]) == 2
    err = capsys.readouterr().err
    assert "test/" in err and "['d']" in err and "train" in err
    assert not (image_dirs["results"] / "runs").exists()


def test_cli_refuses_images_the_small_cnn_cannot_take(tmp_path, monkeypatch, capsys):
    from test_data import write_image_folder

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_CACHE_DIR", str(tmp_path / "cache"))
    big = tmp_path / "big"
    write_image_folder(big, classes=("a", "b"), names={"train": ["0000.jpg", "0001.jpg"], "test": ["0000.jpg"]},
                       size=48)

    code = cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", "--data-path", str(big), *IMAGE_TINY])

    err = capsys.readouterr().err
    assert code == 2
    assert "small_cnn_gn" in err and "48x48" in err and "data_path" in err
    assert not (tmp_path / "results" / "runs").exists()


# ----------------------------------------------------------------------------- interrupting `maskfed archive`

REPO_ROOT = Path(__file__).resolve().parents[1]


def _foreground_signals() -> None:
    """In the child before exec: SIGINT and SIGHUP at their defaults, as for a command typed at a terminal
    (a suite started in the background of a script inherits them ignored; see test_runner)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _maskfed(tmp_path: Path, *args: str, **env):
    """``python -m maskfed ARGS`` with the results, the archive and TMPDIR in ``tmp_path``."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MASKFED_RESULTS_DIR": str(tmp_path / "results"), "MASKFED_ARCHIVE_DIR": str(tmp_path / "archive"),
           "TMPDIR": str(tmp_path / "tmp"), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT / "src"), **env}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "maskfed", *args], env=env, cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_foreground_signals)


def _wait_until(condition, proc, timeout: float = 240) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def _only_line(err: str) -> str:
    """The one line a stopped command printed, asserting that the rest of stderr is progress bars only."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "Warning" not in err, err[-2000:]
    bar = re.compile(r"(it|round)/s|s/(it|round)")  # a run's bar (iterations) or the workers' bar of rounds
    assert lines and not [line for line in lines[:-1] if not bar.search(line)], err[-2000:]
    return lines[-1]


# in this process (one run, --workers 1) and in two worker processes (two runs, --workers 2, the default)
@pytest.mark.parametrize("sig, status, says, workers", [("SIGINT", 130, "interrupted;", 1),
                                                        ("SIGTERM", 143, "interrupted by SIGTERM;", 2)])
@pytest.mark.slow
def test_archive_verify_stopped_by_a_signal_is_one_line_leaves_no_scratch_and_reruns(tmp_path, monkeypatch, sig, status,
                                                                                       says, workers):
    import json
    import signal

    from maskfed.studies import archive
    from maskfed.engine.config import make_run_config

    # prepare: a tiny archive of runs long enough (150 or 300 rounds, ~20 ms each) to be stopped while re-run
    # (recorded with one torch thread, as a sweep's workers run: --workers 2 then re-runs them in two workers)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(tmp_path / "archive"))
    cfgs = [make_run_config(dataset="synthetic", synthetic_train=200, synthetic_test=50, num_clients=4, cohort_size=2,
                            rounds=150 * workers, model="small_cnn_gn", width=2, batch_size=bs, local_epochs=1, eval_every=1,
                            checkpoint_every=1) for bs in (16, "full")[:workers]]
    archive.archive_runs(runner.run_many(cfgs, progress=False), "smoke")
    args = ["archive", "--profile", "smoke", "--verify", "--runs", *(c.label() for c in cfgs), "--workers", str(workers)]
    scratch = tmp_path / "tmp"
    # execute: stopped once every re-run has its first checkpoint in the scratch folder
    proc = _maskfed(tmp_path, *args)
    _wait_until(lambda: len(list(scratch.glob("maskfed-verify-*/runs/.partial-*/checkpoint.pt"))) == workers, proc)
    proc.send_signal(getattr(signal, sig))
    err = proc.communicate(timeout=60)[1]
    # assert: one line (not the scratch folder's resume hint), the signal's status, no scratch, nothing recorded
    assert proc.returncode == status, err[-2000:]
    line = _only_line(err)
    assert line.startswith(f"maskfed: {says}") and "scratch" in line and "rerun" in line and str(tmp_path) not in line
    assert list(scratch.glob("maskfed-verify-*")) == []
    assert not (tmp_path / "archive" / "smoke" / archive.VERIFIED).exists()
    # the same command again runs to its end and records its outcome
    again = _maskfed(tmp_path, *args)
    err = again.communicate(timeout=300)[1]
    assert again.returncode == 0, err[-2000:]
    (record,) = json.loads((tmp_path / "archive" / "smoke" / archive.VERIFIED).read_text())
    assert record["identical"] is True and [r["label"] for r in record["runs"]] == [c.label() for c in cfgs]
    assert list(scratch.glob("maskfed-verify-*")) == []


@pytest.mark.slow
def test_archive_stage_stopped_with_workers_ends_them_at_once_and_resumes(tmp_path, monkeypatch):
    import signal

    import pandas as pd

    from maskfed.studies import archive
    from maskfed.studies import stage
    from maskfed.engine.config import load_profile

    # prepare: the smoke profile's stage-ladder run, with θ snapshots, archived
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(tmp_path / "archive"))
    smoke = load_profile("smoke")
    ref = stage.ladder_config(smoke)
    archive.archive_runs(runner.run_many([ref], progress=False, keep_every=stage.ladder_snapshots(smoke, [ref])), "smoke")
    stages = tmp_path / "results" / "stages"
    protocols = [c for cs in stage.study_configs(smoke).values() for c in cs]  # Table II's α = 100 is in Table I
    # execute: SIGTERM once the two workers have finished three measurements
    proc = _maskfed(tmp_path, "archive", "--profile", "smoke", "--stage", "--workers", "2")
    _wait_until(lambda: len(list(stages.glob("measure-*/provenance.json"))) >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    # assert: the workers were ended, not left to measure every queued protocol and stage first
    assert proc.returncode == 143, err[-2000:]
    line = _only_line(err)
    assert line.startswith("maskfed:") and "SIGTERM;" in line and "rerun" in line and line.endswith(" computed")
    assert f" {stages} " in line  # where the finished measurements are kept
    kept = {p: p.stat().st_mtime_ns for p in stages.glob("measure-*/provenance.json")}
    assert not (tmp_path / "archive" / "smoke" / archive.STAGE_DIR).exists()
    # the same command again measures the missing ones only and archives the study
    again = _maskfed(tmp_path, "archive", "--profile", "smoke", "--stage", "--workers", "2")
    err = again.communicate(timeout=300)[1]
    assert again.returncode == 0, err[-2000:]
    (ladder,) = stages.glob("ladder-*/checkpoints.csv")
    n_stages = len(pd.read_csv(ladder))
    total = n_stages * len(set(protocols))  # measurements
    assert 3 <= len(kept) < total  # not every queued measurement ran before the stopped command ended
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # reused, not measured again
    assert len(list(stages.glob("measure-*/provenance.json"))) == total
    assert len(archive.load_stage_study("smoke").table) == n_stages * len(protocols)


@pytest.mark.parametrize("branch, target, then", [
    ([], "archive_profile", "every run folder archived so far is complete; rerun the same command to archive them all"),
    (["--verify"], "archive.verify_archive", "the verification recorded nothing and its scratch folder is removed"),
    (["--stage"], "archive.archive_stage_study", "rerun the same command to resume: every finished ladder and stage"),
    (["--factor", "models"], "archive.archive_factor_study", "rerun the same command to resume: every finished θ path"),
])
@pytest.mark.parametrize("signum", [2, 1, 15])  # SIGINT, SIGHUP, SIGTERM
def test_every_archive_form_stopped_says_what_is_kept_in_one_line(branch, target, then, signum, capsys, monkeypatch,
                                                                   tmp_path):
    import signal

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))

    def stopped(*args, **kwargs):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise runner.Stopped(signum)

    owner, _, name = target.rpartition(".")
    monkeypatch.setattr(getattr(cli, owner) if owner else cli, name, stopped)
    code = cli.main(["archive", "--profile", "smoke", *branch])
    err = capsys.readouterr().err
    assert code == 128 + signum
    lines = [line for line in err.splitlines() if line.strip()]
    which = "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"
    assert len(lines) == 1 and lines[0].startswith(f"maskfed: {which}; {then}"), err


def test_stop_on_signals_is_in_force_in_every_archive_form(monkeypatch, capsys, tmp_path):
    # a real SIGHUP inside the branch (not a raised exception): stop_on_signals turns it into Stopped
    import os
    import signal

    def not_stopped(signum, frame):  # the handler outside stop_on_signals (not SIG_IGN, which it would keep)
        raise AssertionError("SIGHUP reached the handler from before the command")

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    previous = signal.signal(signal.SIGHUP, not_stopped)
    try:
        for branch, name in (([], "archive_profile"), (["--verify"], "verify_archive"), (["--stage"], "archive_stage_study"),
                             (["--factor", "resnet"], "archive_factor_study")):
            def hang_up(*args, **kwargs):
                os.kill(os.getpid(), signal.SIGHUP)
                raise AssertionError("SIGHUP did not stop the command")

            monkeypatch.setattr(cli if name == "archive_profile" else cli.archive, name, hang_up)
            assert cli.main(["archive", "--profile", "smoke", *branch]) == 129, branch
            err = capsys.readouterr().err
            assert "maskfed: interrupted" in err and "SIGHUP;" in err
    finally:
        signal.signal(signal.SIGHUP, previous)


# ----------------------------------------------------------------------------- Ctrl-C while importing

def test_ctrl_c_while_maskfed_imports_is_one_line_and_exit_130(tmp_path):
    # a real SIGINT delivered when maskfed.cli starts importing pandas (a sitecustomize on PYTHONPATH sends it)
    import os

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "class Hook:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pandas':\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hook())\n")
    proc = _maskfed(tmp_path, "archive", "--profile", "smoke", "--verify",
                    PYTHONPATH=f"{hook}{os.pathsep}{REPO_ROOT / 'src'}")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert [line for line in err.splitlines() if line.strip()] == ["maskfed: interrupted"], err[-2000:]


def test_the_entry_point_reports_ctrl_c_in_the_import_and_later_as_one_line(monkeypatch, capsys):
    import builtins
    import tomllib

    from maskfed import entry

    real_import = builtins.__import__

    def interrupted_import(name, *args, **kwargs):
        if name == "maskfed" and args[2] and "cli" in args[2]:  # from maskfed import cli
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted_import)
    assert entry.main(["run"]) == 130
    assert capsys.readouterr().err.strip() == "maskfed: interrupted"
    monkeypatch.setattr(builtins, "__import__", real_import)
    # a Ctrl-C that cli.main does not report itself (e.g. while it checks the data)
    monkeypatch.setattr(cli, "main", lambda argv: (_ for _ in ()).throw(KeyboardInterrupt))
    assert entry.main(["run"]) == 130
    assert capsys.readouterr().err.strip() == "maskfed: interrupted"
    # the console script and python -m maskfed both go through it
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"maskfed": "maskfed.entry:main"}
    assert "from maskfed.entry import main" in (REPO_ROOT / "src" / "maskfed" / "__main__.py").read_text()


# ----------------------------------------------------------------------------- empty path variables, seeds

@pytest.mark.parametrize("var", ["MASKFED_RESULTS_DIR", "MASKFED_ARCHIVE_DIR", "MASKFED_CACHE_DIR",
                                 "MASKFED_SHARED_ARCHIVE"])
def test_a_path_variable_set_but_empty_is_refused_naming_it(var, capsys, monkeypatch, tmp_path):
    from maskfed import paths

    monkeypatch.chdir(tmp_path)  # where an empty path would have put results
    for other in paths.PATH_VARIABLES:  # the others elsewhere (never in the checkout, were this to fail)
        monkeypatch.setenv(other, str(tmp_path / "elsewhere" / other))
    monkeypatch.setenv(var, "")
    for argv in (["run", *TINY, "--seeds", "0", "--workers", "1"], ["archive", "--profile", "smoke"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        default = paths.DEFAULTS[var]
        what = "file" if var == "MASKFED_SHARED_ARCHIVE" else "folder"
        assert err.startswith(f"maskfed: error: {var} ") and err.endswith(f" {what}\n") and f" {default} " in err
        assert err.count("\n") == 1 and "empty" in err
    assert notebooks.main(["--profile", "smoke", "intro"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m maskfed.book.notebooks: error: {var} ") and err.endswith(f" {what}\n")
    assert f" {paths.DEFAULTS[var]} " in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written here
    monkeypatch.setenv(var, "   ")
    with pytest.raises(paths.EmptyPathVariable, match=var):
        paths.absolute_env()


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("seed", [2**63, 2**64, -1])
def test_a_seed_out_of_range_is_refused_naming_seeds_before_any_run(command, seed, capsys, results):
    code = cli.main([command, *TINY, "--seeds", "0", str(seed), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"maskfed: error: --seeds {seed}:") and err.count("\n") == 1
    assert "0 to 9223372036854775807" in err
    assert not (results / "runs").exists()  # nothing ran


def test_the_seed_bound_in_the_config_and_the_largest_seed_runs(capsys, results):
    from maskfed.engine.config import MAX_SEED, ConfigError, load_profile, make_run_config

    assert MAX_SEED == 2**63 - 1
    with pytest.raises(ConfigError, match=r"seeds.1 = 9223372036854775808: .*<= 9223372036854775807"):
        load_profile("smoke", seeds=[0, 2**63])
    with pytest.raises(ConfigError, match=r"seed = 9223372036854775808"):
        make_run_config(seed=2**63)
    assert cli.main(["run", *TINY, "--seeds", str(MAX_SEED), "--workers", "1"]) == 0
    (folder,) = [p for p in (results / "runs").iterdir() if not p.name.startswith(".")]  # not .locks
    assert f"-s{MAX_SEED}-" in folder.name
    assert runner.load_run(folder).config.seed == MAX_SEED
    assert "recovery_unweighted" in capsys.readouterr().out


@pytest.mark.parametrize("args, names", [
    (["--rounds", "12345678901234567890123"], ["rounds", "100000"]),          # the 23-digit rounds
    (["--num-clients", "12345678901234567890123"], ["num_clients", "1000000"]),
    (["--hessian-batch", "99999999999", "--hessian-every", "1"], ["hessian_batch", "10000000"]),
    (["--eval-every", "1000000"], ["eval_every", "100000"]),
    (["--workers", "100000"], ["--workers", "1 to 256"]),
])
def test_runaway_sizes_are_refused_naming_the_parameter_and_its_range(args, names, capsys, tmp_path, monkeypatch):
    # prepare: results in a scratch folder
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    # execute
    code = cli.main(["run", "--profile", "smoke", *args])
    # assert: refused with the parameter and its range, before any run (no run folder, no checkpoint)
    err = capsys.readouterr().err
    assert code == 2
    for name in names:
        assert name in err, err
    assert not (tmp_path / "runs").exists()


def test_archive_workers_and_seed_count_are_bounded(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    # execute / assert: maskfed archive's --workers, and more seeds than a command may run
    assert cli.main(["archive", "--profile", "smoke", "--verify", "--workers", "1000"]) == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "1 to 256" in err
    assert cli.main(["run", "--profile", "smoke", "--seeds", *map(str, range(1001))]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
