"""Provenance of a run: code version, package versions, machine.

Recorded next to every run's numbers, so each value in the book traces to its code and environment.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
import subprocess
import sys
from functools import lru_cache
from importlib import metadata

from maskfed.paths import REPO_ROOT

PACKAGES = ("torch", "torchvision", "numpy", "pandas", "pydantic", "pillow")
#: The modules a FedAvg run or a stage measurement executes (``maskfed.engine.runner``, ``maskfed.studies.stage``
#: and what they import);
#: tests/test_provenance.py checks the list is complete.
#: Names are dotted paths under ``maskfed`` (``engine.runner`` is ``src/maskfed/engine/runner.py``).
RUN_MODULES = ("core.diversity", "core.masking", "core.penalty", "core.sharpness",
               "engine.checkpoint", "engine.cohort", "engine.config", "engine.data", "engine.determinism",
               "engine.fedavg", "engine.models", "engine.partition", "engine.runner", "paths", "provenance")


def module_source(name: str) -> bytes:
    """Source bytes of the ``maskfed`` module ``name``, a dotted path under the package (``"engine.runner"``).

    Raises:
        FileNotFoundError: no ``src/maskfed/<name with / for .>.py``.
    """
    return (REPO_ROOT / "src" / "maskfed" / f"{name.replace('.', '/')}.py").read_bytes()


@lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 (16 hex digits) over the source of the modules a run executes (:data:`RUN_MODULES`).

    Part of a run's cache key; computed once per process.
    """
    h = hashlib.sha256()
    for name in RUN_MODULES:
        h.update(name.encode())
        h.update(module_source(name))
    return h.hexdigest()[:16]


def code_hash_with(*modules: str) -> str:
    """:func:`code_hash` extended by the source of further ``maskfed`` modules (16 hex digits).

    For results cached outside run folders (the stage study, the limits chapter).

    Raises:
        FileNotFoundError: a module name (dotted, ``"studies.stage"``) with no source file.
    """
    h = hashlib.sha256(code_hash().encode())
    for name in modules:
        h.update(name.encode())
        h.update(module_source(name))
    return h.hexdigest()[:16]


def git_state() -> dict:
    """``{"commit": sha or "unknown", "dirty": bool or None}`` of the checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": "unknown", "dirty": None}
        status = git("status", "--porcelain", "--untracked-files=normal", "--", "src")
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def package_versions() -> dict:
    """Installed versions of the packages that shape the numbers, and Python's."""
    out = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`), or "unknown".

    Recorded because float32 results depend on it (oneDNN's summation order differs between CPUs)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags_hash(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """sha256 (12 hex digits) of the CPU's instruction-set flags (the first ``flags`` line of ``/proc/cpuinfo``,
    sorted), or "unknown": two machines with one model name may still differ in the kernels they can run."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                return hashlib.sha256(flags.encode()).hexdigest()[:12]
    except OSError:
        pass
    return "unknown"


def machine_identity(device: str = "cpu", cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """What decides a run's float32 rounding on this machine, beyond the code: the CPU model and a hash of its
    flags (:func:`cpu_flags_hash`), torch's CPU math instruction set (``torch.backends.cpu.get_cpu_capability()``,
    e.g. "AVX512"), torch's version and a hash (12 hex digits) of its build configuration
    (``torch.__config__.show()``), the CUDA device on a GPU; ``id``: a hash (12 hex digits) of all of them,
    equal on two machines only when every field is."""
    import torch

    ident = {"device": device, "cpu_model": cpu_model(cpuinfo), "cpu_flags": cpu_flags_hash(cpuinfo),
             "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
             "torch_config": hashlib.sha256(torch.__config__.show().encode()).hexdigest()[:12]}
    if device.startswith("cuda") and torch.cuda.is_available():
        ident["cuda_device"] = torch.cuda.get_device_name(0)
    ident["id"] = hashlib.sha256(repr(sorted(ident.items())).encode()).hexdigest()[:12]
    return ident


def machine(device: str) -> dict:
    """Device and host description (CPU model, threads, CUDA device name)."""
    import torch

    info = {"device": device, "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_model": cpu_model(), "torch_threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
    return info
