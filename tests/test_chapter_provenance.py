"""The provenance page's helpers (maskfed.chapters.provenance) on hand-made runs."""

from types import SimpleNamespace

from maskfed.chapters import provenance as chapter
from maskfed.engine.config import make_run_config


def test_configurations_split_shared_from_varying_fields():
    # prepare: two runs that differ only in their seed and batch size
    runs = [SimpleNamespace(config=make_run_config(seed=0, batch_size=32)),
            SimpleNamespace(config=make_run_config(seed=1, batch_size="full"))]
    # execute
    shared, varying = chapter.configurations(runs)
    # assert
    assert set(varying.columns) == {"batch_size", "seed"}
    assert varying["batch_size"].tolist() == [32, "full"]
    assert '"lr": 0.01' in shared and '"seed"' not in shared


def test_settings_table_says_who_states_each_setting():
    table = chapter.settings_table("cpu")
    assert set(table["stated by"]) == {"paper", "ours"}
    assert "cpu profile" in table.columns and "paper profile" in table.columns


def test_environment_json_names_the_code_and_data_without_paths():
    prov = {"commit": "abc", "dirty": False, "code_hash": "h", "packages": {"torch": "2"}, "machine": {"device": "cpu"},
            "data_source": "/home/me/data/cifar10-jpeg.tar.gz", "data_fingerprint": "f", "data_fingerprint_kind": "content"}
    text = chapter.environment_json(prov)
    assert '"code_hash": "h"' in text and "/home/me" not in text and '"data_fingerprint_kind"' in text


def test_archived_sections_leave_out_the_live_profile_and_mark_an_empty_archive(monkeypatch):
    # prepare: two archived profiles, neither with a run
    from maskfed.studies import archive

    monkeypatch.setattr(archive, "BOOK_PROFILES", ("paper", "cpu-long"))
    monkeypatch.setattr(archive, "require_complete", lambda name: [])
    # execute
    sections = chapter.archived_sections("cpu-long")
    # assert: only the other profile, under its column name, with no table
    assert sections == [("paper", archive.column_name("paper"), "no archived run", None)]
