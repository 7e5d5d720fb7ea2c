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


def test_machine_identity_tells_apart_two_machines_with_one_cpu_model_name(tmp_path):
    # prepare: two /proc/cpuinfo files, one model name, one flag apart (and the first in another order)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_text("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse avx2 avx512f\n")
    b.write_text("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse avx2\n")
    c.write_text("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: avx512f avx2 sse fpu\n")
    # execute
    ia, ib, ic = (provenance.machine_identity("cpu", cpuinfo=p) for p in (a, b, c))
    # assert: the model names agree, the flags and the identity do not; the flags' order does not matter
    assert ia["cpu_model"] == ib["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert ia["cpu_flags"] != ib["cpu_flags"] and ia["id"] != ib["id"]
    assert ia == ic and len(ia["id"]) == 12 and len(ia["torch_config"]) == 12
    assert ia["cpu_capability"] and ia["torch"]
    assert provenance.cpu_flags_hash(tmp_path / "absent") == "unknown"
