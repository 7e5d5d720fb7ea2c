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


def test_every_citation_of_the_book_is_in_the_bibliography_and_every_entry_links():
    import re

    from pybtex.database import parse_file

    bib = parse_file(str(REPO_ROOT / "book" / "references.bib")).entries
    pages = [*(REPO_ROOT / "notebooks").glob("*.md"), REPO_ROOT / "book" / "references.md"]
    cited = {key.strip() for p in pages for keys in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", p.read_text())
             for key in keys.split(",")}
    assert cited and cited <= set(bib), f"cited but not in references.bib: {sorted(cited - set(bib))}"
    assert {"yan2026masking", "hsu2019noniid", "li2022niidbench", "newey1987hac"} <= cited
    unlinked = [k for k, e in bib.items() if not ({"url", "doi"} & {f.lower() for f in e.fields})]
    assert not unlinked, f"entries without a url or doi: {unlinked}"
    assert "2608.23286" in bib["yan2026masking"].fields["journal"]  # the paper's arXiv id, as CITATION.cff gives it


def test_every_glossary_link_of_the_book_names_a_defined_term():
    import re

    glossary = (REPO_ROOT / "book" / "glossary.md").read_text()
    body = glossary.split("```{glossary}")[1].split("```")[0]
    defined = {line.strip() for line in body.splitlines() if line and not line.startswith(" ")}
    assert {"cliff", "ladder", "profile", "run code", "protocol", "recovery factor", "seed range"} <= defined
    used = {m.split("<")[-1].rstrip(">").strip() for p in (REPO_ROOT / "notebooks").glob("*.md")
            for m in re.findall(r"\{term\}`([^`]+)`", p.read_text())}
    assert used and used <= defined, f"linked but not in the glossary: {sorted(used - defined)}"
