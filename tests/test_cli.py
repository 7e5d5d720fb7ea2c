"""The command line refuses bad input before any compute and runs a tiny setting."""

import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from maskfed import cli

from maskfed.book import notebooks

from maskfed.fl import runner

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
    assert "--rounds VALUE communication rounds [200]. Allowed: an integer >= 1" in out
    assert "--precision VALUE arithmetic of local training" in out and "Allowed: one of 'fp32', 'tf32', 'bf16'" in out
    assert "Allowed: an integer >= 100, or none" in out        # train_subset
    assert "Allowed: a number > 0 and <= 1" in out             # mask_keep_prob
    assert "Allowed: a positive integer or 'full'" in out      # batch_size (the validator's own words)
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
    assert "3 run(s), 2 finished before and reused (--force recomputes)" in capsys.readouterr().err


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

    assert code == 2 and "maskfed: error: num_clients = 4 exceeds" in err and "Traceback" not in err
    assert "finished runs are kept" in err
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
def test_diverging_training_is_one_error_line_and_never_stored(capsys, results, workers):
    line = _one_line_error(capsys, ["run", *TINY, "--lr", "1e6", "--seeds", "0", "1", "--workers", workers])
    assert "training diverged at round 1: client" in line and "lr = 1e+06" in line and "smaller lr" in line
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
    from maskfed.fl import checkpoint

    argv = ["run", *TINY, "--rounds", "3", "--seeds", "0", "--workers", "1"]  # checkpoints after rounds 1 and 2
    saved = []
    _full_disk_at(monkeypatch, "write_bytes",
                  lambda p: p.name.startswith(".checkpoint.pt") and saved.append(p) is None and len(saved) == 2)
    line = _one_line_error(capsys, argv)
    (partial,) = (results / "runs").glob(".partial-*")
    assert f"cannot write the run's checkpoint in {partial}: No space left on device (errno 28)" in line
    assert "intact" in line
    monkeypatch.undo()
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results))
    (cfg,) = cli._plan(cli.build_parser().parse_args(argv))[1]
    assert checkpoint.load(partial, runner.run_key(cfg, runner.images_for(cfg))).rounds_done == 1  # whole
    assert [p.name for p in partial.iterdir() if p.name.endswith(".tmp")] == []
    assert cli.main(argv) == 0  # space again: the same command resumes
    assert runner.find_run(cfg).provenance["resumed_after_round"] == 1


def test_a_full_disk_when_writing_the_run_folder_is_one_error_line(capsys, results, monkeypatch):
    argv = ["run", *TINY, "--rounds", "3", "--seeds", "0", "--workers", "1"]
    _full_disk_at(monkeypatch, "write_text", lambda p: p.parent.name.startswith(".tmp-"))
    line = _one_line_error(capsys, argv)
    assert f"cannot write the finished run's folder in {results / 'runs'}: No space left on device" in line
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

    err = PapermillExecutionError(3, 1, "ConfigError: alpha ...", "ConfigError", "alpha = 0.5 would be ignored", [])
    assert notebooks._cell_failure(err) == ("ConfigError", "alpha = 0.5 would be ignored")
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
    from maskfed.fl.data import CIFAR10_CLASSES
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
    from maskfed.fl.models import build_model, num_parameters
    assert prov["num_parameters"] == num_parameters(build_model("small_cnn_gn", num_classes=3, gn_groups=2, width=2))
    assert prov["num_parameters"] != num_parameters(build_model("small_cnn_gn", num_classes=10, gn_groups=2, width=2))


def test_cli_image_folder_without_a_path_and_a_test_only_class_are_refused(image_dirs, capsys, tmp_path):
    from test_data import write_image_folder

    assert cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", *IMAGE_TINY]) == 2
    assert "needs data_path" in capsys.readouterr().err
    write_image_folder(image_dirs["three"], classes=("d",), names={"test": ["0000.jpg"]})
    assert cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", "--data-path",
                     str(image_dirs["three"]), *IMAGE_TINY]) == 2
    assert "test/ has classes the train split lacks: ['d']" in capsys.readouterr().err
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
