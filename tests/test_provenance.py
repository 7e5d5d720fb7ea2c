"""Provenance: the code hash covers every module a run executes, and only those."""

import platform
import subprocess
import sys

import pytest

from maskfed import provenance


@pytest.mark.slow
def test_run_modules_cover_what_a_run_imports():
    # prepare / execute: import the runner in a fresh interpreter and list maskfed modules
    code = "import sys, maskfed.engine.runner; print(' '.join(sorted(m for m in sys.modules if m.startswith('maskfed.'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    imported = {m.removeprefix("maskfed.") for m in out} - {"engine", "core"}   # the packages themselves: a docstring each
    # assert: every imported module is hashed
    assert imported <= set(provenance.RUN_MODULES), imported - set(provenance.RUN_MODULES)


def test_code_hash_changes_when_a_run_module_changes(tmp_path, monkeypatch):
    src = tmp_path / "src" / "maskfed"
    src.mkdir(parents=True)
    for name in provenance.RUN_MODULES:
        path = src / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    provenance.code_hash.cache_clear()
    before = provenance.code_hash()
    (src / "studies").mkdir()
    (src / "studies" / "stage.py").write_text("# not a run module\n")
    provenance.code_hash.cache_clear()
    assert provenance.code_hash() == before
    (src / "engine" / "fedavg.py").write_text("# fedavg, edited\n")
    provenance.code_hash.cache_clear()
    assert provenance.code_hash() != before
    provenance.code_hash.cache_clear()


def test_git_state_and_versions_have_the_documented_keys():
    state = provenance.git_state()
    assert set(state) == {"commit", "dirty"}
    versions = provenance.package_versions()
    assert versions["torch"].startswith("2.") and versions["python"].count(".") == 2


def test_machine_records_the_cpu_model(tmp_path):
    # float32 trajectories differ between CPU models, so the model is part of every record
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B14\nflags\t: fpu\n")
    assert provenance.cpu_model(info) == "AMD EPYC 9B14"
    assert provenance.cpu_model(tmp_path / "missing") == (platform.processor() or "unknown")
    assert provenance.machine("cpu")["cpu_model"] == provenance.cpu_model()
