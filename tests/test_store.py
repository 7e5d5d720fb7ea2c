"""The result store (maskfed.engine.store): one key, finished test and provenance record for every
cached computation that is not a run."""

import hashlib
import json

import pytest

from maskfed import provenance
from maskfed.engine import runner, store
from maskfed.engine.config import load_profile


@pytest.fixture(scope="module")
def images():
    return runner.images_for(load_profile("smoke").run(0))


def test_key_hashes_settings_code_and_data(images):
    # prepare: the key by hand, from its three parts
    settings = {"cfg": "abc", "pool": [3, 1]}
    by_hand = hashlib.sha256(json.dumps(
        {"cfg": "abc", "pool": [3, 1], "code": provenance.code_hash_with("studies.stage"),
         "data": runner.data_fingerprint(images)}, sort_keys=True).encode()).hexdigest()[:16]
    # execute
    key = store.result_key(settings, ("studies.stage",), images)
    # assert: the hand value; another setting or another module gives another key
    assert key == by_hand and len(key) == 16
    assert store.result_key({**settings, "pool": [1, 3]}, ("studies.stage",), images) != key
    assert store.result_key(settings, ("studies.stage", "studies.central"), images) != key


def test_key_refuses_settings_that_would_shadow_code_or_data(images):
    with pytest.raises(ValueError, match="'code' or 'data'"):
        store.result_key({"code": "x"}, (), images)
    with pytest.raises(FileNotFoundError):
        store.result_key({}, ("studies.nonexistent",), images)


def test_finished_means_provenance_written(tmp_path):
    assert not store.is_finished(tmp_path)
    (tmp_path / "provenance.json").write_text("{}")
    assert store.is_finished(tmp_path)


def test_provenance_record_names_code_data_machine_and_adds_earlier_attempts(images, monkeypatch):
    # prepare: a clock that reads 103.5 s, for an attempt that started at 100 s, after 5 s of earlier attempts
    monkeypatch.setattr(store.time, "perf_counter", lambda: 103.5)
    # execute
    rec = store.result_provenance(modules=("studies.stage",), code_field="stage_code_hash", device="cpu",
                                  images=images, t0=100.0, wall_before=5.0, seed=2, key="k")
    # assert
    assert rec["seed"] == 2 and rec["key"] == "k"
    assert rec["code_hash"] == provenance.code_hash()
    assert rec["stage_code_hash"] == provenance.code_hash_with("studies.stage")
    assert rec["data_fingerprint"] == runner.data_fingerprint(images) and rec["data_source"] == images.source
    assert rec["wall_s"] == 8.5  # 5 s before + 3.5 s of this attempt
    assert {"packages", "machine", "finished_utc"} <= set(rec)
