"""The command line refuses bad input before any compute and runs a tiny setting."""

import pytest

from maskfed import cli

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
    from maskfed.data import CIFAR10_CLASSES
    return CIFAR10_CLASSES


def test_cli_refuses_an_eleven_class_folder_as_cifar10(image_dirs, capsys):
    code = cli.main(["run", "--profile", "smoke", "--dataset", "cifar10", "--data-path", str(image_dirs["eleven"]),
                     *IMAGE_TINY])
    err = capsys.readouterr().err
    assert code == 2
    assert "data_path=" in err and "zebra" in err and "'truck'" in err and "--dataset image_folder" in err
    assert not (image_dirs["results"] / "runs").exists()  # nothing ran


def test_cli_image_folder_runs_under_its_own_label_and_class_count(image_dirs, capsys):
    import json

    code = cli.main(["run", "--profile", "smoke", "--dataset", "image_folder", "--data-path",
                     str(image_dirs["three"]), *IMAGE_TINY])
    out = capsys.readouterr().out
    assert code == 0
    runs = list((image_dirs["results"] / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("image_folder-small_cnn_gn-")
    assert "cifar10" not in runs[0].name and "image_folder" in out
    prov = json.loads((runs[0] / "provenance.json").read_text())
    assert "not CIFAR-10: 3 classes: a, b, c" in prov["data_source"]
    assert prov["dataset"] == "image_folder" and prov["classes"] == ["a", "b", "c"]
    # the classifier has 3 outputs: small CNN width 2 -> hidden 8, last layer 8*3 + 3 parameters
    from maskfed.models import build_model, num_parameters
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
