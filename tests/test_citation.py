"""CITATION.cff (Citation File Format 1.2.0) cites the paper as preferred-citation and the software
as maskfed contributors, with the package's version and license."""

import tomllib

import yaml

from maskfed.paths import REPO_ROOT


def _cff() -> dict:
    return yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text())


def test_citation_file_has_the_required_fields():
    cff = _cff()
    assert cff["cff-version"] == "1.2.0"
    assert {"cff-version", "message", "title", "authors"} <= set(cff)  # required by CFF 1.2.0
    assert cff["type"] == "software"
    assert cff["authors"] == [{"name": "maskfed contributors"}]


def test_software_version_and_license_are_the_packages():
    cff = _cff()
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert cff["version"] == project["version"]
    assert cff["license"] == project["license"]["text"]


def test_preferred_citation_is_the_paper():
    paper = _cff()["preferred-citation"]
    assert paper["type"] == "article"
    assert paper["title"] == "How Much Regularization Survives Averaging? Update Masking in Federated Learning"
    assert [a["family-names"] for a in paper["authors"]] == ["Yan", "Kuroda", "Jin", "Chen"]
    assert all(a.get("given-names") for a in paper["authors"])
    assert paper["year"] == 2026
    assert {"type": "other", "value": "arXiv:2608.23286", "description": "arXiv identifier"} in paper["identifiers"]
    assert paper["url"] == "https://arxiv.org/abs/2608.23286"
