"""The experiment chapters stay thin (issue 25): their code cells are no longer than their prose, glue
in one call (maskfed.book.glue_all) and assemble no sentence (no f-string) in a code cell; what they
compute lives in maskfed.chapters, one module each."""

import re

import pytest

from maskfed.paths import REPO_ROOT

#: The experiment chapters and the module of maskfed.chapters that computes each one's findings.
CHAPTERS = {"table1_local_protocol": "table1", "table2_heterogeneity": "table2", "stage_or_sampling": "stage",
            "limit_penalty": "penalty", "what_sets_the_factor": "factor", "control_identical_shards": "control",
            "masked_training": "masked", "verdict": "verdict", "flower": "flower", "performance": "performance"}

CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.S)


def split(text: str) -> tuple[list[str], list[str]]:
    """(code lines, prose lines) of a MyST notebook: non-blank lines outside the front matter; code lines
    leave out cell options (``:tags:``) and comments."""
    body = text.split("\n---\n", 1)[1] if text.startswith("---\n") else text
    code = [ln for c in CELL.findall(body) for ln in c.splitlines()
            if ln.strip() and not ln.startswith(":") and not ln.strip().startswith("#")]
    prose = [ln for ln in CELL.sub("", body).splitlines() if ln.strip() and not ln.startswith("```")]
    return code, prose


def test_split_counts_code_and_prose_by_hand():
    # prepare: two prose lines, one cell of two code lines, one option and one comment
    text = "---\nkernelspec: x\n---\n# Title\n\n```{code-cell} python\n:tags: [remove-cell]\n# note\na = 1\nb = 2\n```\nText.\n"
    # execute
    code, prose = split(text)
    # assert
    assert code == ["a = 1", "b = 2"] and prose == ["# Title", "Text."]


def sentence(line: str) -> bool:
    """Whether a code line builds words into text: an f-string whose literal part (outside braces and HTML
    tags) holds two words or more."""
    for lit in re.findall(r"\bf\"([^\"]*)\"|\bf'([^']*)'", line):
        words = re.sub(r"<[^>]*>|\{[^}]*\}", " ", "".join(lit)).split()  # markup and fields are no words
        if len([w for w in words if re.search(r"[A-Za-z]{2}", w)]) >= 2:
            return True
    return False


def test_sentence_tells_words_from_markup():
    glued = 'glue("x", f"the run took {s} s, more than {t}")'  # code, read as the scan reads a cell
    assert sentence(glued)
    assert not sentence('display(Markdown(f"**{title}**"))')
    assert not sentence('HTML(f"<li><b>{name}</b>: {text}</li>")')
    plain = 'x = "plain text, not built"'  # no f-string: nothing is built
    assert not sentence(plain)


@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_experiment_chapter_is_thin(name):
    text = (REPO_ROOT / "notebooks" / f"{name}.md").read_text()
    code, prose = split(text)
    assert len(code) <= len(prose), f"{name}: {len(code)} code lines against {len(prose)} of prose"
    assert [ln for ln in code if sentence(ln)] == [], f"{name} builds text in a code cell"
    assert not re.search(r"(?<![\w.])glue\(|book\.glue\(", "\n".join(code)), f"{name} glues value by value"
    assert f"maskfed.chapters import {CHAPTERS[name]}" in text, name


@pytest.mark.parametrize("name", ["intro", "cite", "provenance"])
def test_support_page_builds_no_sentence_in_a_code_cell(name):
    code, _ = split((REPO_ROOT / "notebooks" / f"{name}.md").read_text())
    assert [ln for ln in code if sentence(ln)] == [], f"{name} builds text in a code cell"


def sentences(prose: str) -> list[str]:
    """The sentences of Markdown prose (an {eval} role read as one word): pieces ending in . ! or ? before a
    capital, with four or more words."""
    text = re.sub(r"\{eval\}`[^`]*`", "N", re.sub(r"\$\$.*?\$\$", "", prose, flags=re.S))
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z“(*])", text) if len(re.findall(r"[A-Za-z]{2,}", s)) >= 4]


def test_sentences_by_hand():
    found = sentences("The cliff is {eval}`v_cliff` here. It holds at {eval}`n` of {eval}`m` seeds. Ok.")
    assert [len(s.split()) for s in found] == [5, 7] and found[1].count("N") == 2


def test_the_verdict_page_reads_as_an_argument_more_sentences_than_placeholders():
    text = (REPO_ROOT / "notebooks" / "verdict.md").read_text()
    prose = "\n".join(split(text)[1])
    assert len(sentences(prose)) > len(re.findall(r"\{eval\}", prose)) >= 50
