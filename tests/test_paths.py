"""Where the project keeps its cache, results and the shared archive, and how to move each."""

from maskfed import paths


def test_each_location_moves_with_its_environment_variable(tmp_path, monkeypatch):
    for var in ("MASKFED_CACHE_DIR", "MASKFED_RESULTS_DIR", "MASKFED_SHARED_ARCHIVE"):
        monkeypatch.delenv(var, raising=False)
    assert paths.cache_dir() == paths.REPO_ROOT / ".cache"
    assert paths.results_dir() == paths.REPO_ROOT / "results"
    assert paths.shared_archive() == paths.REPO_ROOT.parent / "shared" / "data" / "cifar10-jpeg.tar.gz"
    monkeypatch.setenv("MASKFED_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "r"))
    monkeypatch.setenv("MASKFED_SHARED_ARCHIVE", str(tmp_path / "a.tar.gz"))
    assert (paths.cache_dir(), paths.results_dir(), paths.shared_archive()) == (
        tmp_path / "c", tmp_path / "r", tmp_path / "a.tar.gz")


def test_a_relative_folder_means_the_callers_directory_everywhere(tmp_path, monkeypatch):
    import os

    from maskfed.studies import archive

    monkeypatch.chdir(tmp_path)
    for var, rel in (("MASKFED_CACHE_DIR", "c"), ("MASKFED_RESULTS_DIR", "r"), ("MASKFED_ARCHIVE_DIR", "a"),
                     ("MASKFED_SHARED_ARCHIVE", "s.tgz")):
        monkeypatch.setenv(var, rel)
    assert (paths.cache_dir(), paths.results_dir(), archive.archive_dir(), paths.shared_archive()) == (
        tmp_path / "c", tmp_path / "r", tmp_path / "a", tmp_path / "s.tgz")
    # the commands write them absolute into the environment of what they start (workers, kernels in notebooks/)
    paths.absolute_env()
    monkeypatch.chdir(paths.REPO_ROOT / "notebooks")
    assert os.environ["MASKFED_RESULTS_DIR"] == str(tmp_path / "r")
    assert paths.results_dir() == tmp_path / "r" and archive.archive_dir() == tmp_path / "a"


def test_a_location_set_to_the_empty_string_is_refused_naming_its_variable(monkeypatch):
    # MASKFED_RESULTS_DIR= would otherwise mean the current directory, without a word
    import re

    import pytest

    from maskfed.studies import archive

    for var, where in (("MASKFED_CACHE_DIR", paths.cache_dir), ("MASKFED_RESULTS_DIR", paths.results_dir),
                       ("MASKFED_ARCHIVE_DIR", archive.archive_dir), ("MASKFED_SHARED_ARCHIVE", paths.shared_archive)):
        for empty in ("", "  "):
            monkeypatch.setenv(var, empty)
            with pytest.raises(paths.EmptyPathVariable,
                               match=f"^{var} .*empty.* {re.escape(str(paths.DEFAULTS[var]))} "):
                where()
            with pytest.raises(ValueError, match=var):  # what the commands report as one line
                paths.absolute_env()
        monkeypatch.delenv(var)
        assert where() == paths.DEFAULTS[var]  # unset: the default the message names
