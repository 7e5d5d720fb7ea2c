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
