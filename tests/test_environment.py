"""pyproject.toml (pip users) and environment.yml (conda users) list the same packages."""

import tomllib

import yaml

from maskfed.paths import REPO_ROOT


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {r.replace(" ", "") for r in reqs}


def _environment_requirements() -> set[str]:
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {r.replace(" ", "") for r in pip if not r.startswith("-e")}


def test_environment_yml_matches_pyproject():
    # prepare / execute
    in_pyproject, in_env = _pyproject_requirements(), _environment_requirements()
    # assert: same requirement strings, both ways, with a readable diff on failure
    assert in_pyproject - in_env == set(), "in pyproject.toml only"
    assert in_env - in_pyproject == set(), "in environment.yml only"
    assert "torch==2.14.1" in in_env  # the pinned torch is really compared, not skipped


def test_environment_yml_python_matches_requires_python():
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == "python=3.11" and ">=3.11" in requires


def test_make_installs_every_extra():
    # prepare: the extras pyproject.toml defines, and the Makefile's install line
    extras = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    line = next(l for l in (REPO_ROOT / "Makefile").read_text().splitlines() if "pip install" in l)
    installed = set(line.split("'.[")[1].split("]'")[0].split(","))
    # assert: make test / make book install all of them, so the Ray and Flower tests run
    assert {"ray", "flower", "book", "test"} <= extras
    assert installed == extras
