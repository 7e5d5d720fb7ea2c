"""The seven derivation chapters (notebooks/theory_0*.md) are well-formed.

(Their execution at profile smoke is tested with the rest of the book in tests/test_book.py.)

Static checks (fast): a first code cell tagged ``parameters`` with ``profile: BookProfile = "cpu"`` (a typed profile name),
sphinx-proof statements with proofs, two or more exercises with hidden solutions, and
every ``{eval}`` name used in the prose glued in the same notebook.

"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMES = [
    "theory_01_notation",
    "theory_02_prop1",
    "theory_03_prop2",
    "theory_04_prop3",
    "theory_05_corollary1",
    "theory_06_signal_noise",
    "theory_07_other_noise",
]


def _read(name):
    jupytext = pytest.importorskip("jupytext")
    return jupytext.read(ROOT / "notebooks" / f"{name}.md")


@pytest.mark.parametrize("name", NAMES)
def test_notebook_structure(name):
    nb = _read(name)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["jupytext"]["text_representation"]["format_name"] == "myst"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert re.search(r'^profile: BookProfile = "cpu"', code[0].source, re.M)
    text = (ROOT / "notebooks" / f"{name}.md").read_text()
    assert re.search(r"```\{prf:(proposition|corollary|lemma)\}", text)
    assert "```{prf:proof}" in text
    n_ex = len(re.findall(r"```\{exercise\}", text))
    n_sol = len(re.findall(r"```\{solution\} [\w-]+\n:class: dropdown", text))
    assert 2 <= n_ex <= 3 and n_sol == n_ex
    assert "torch.set_num_threads(1)" in text
    assert "assert " in "".join(c.source for c in code)


@pytest.mark.parametrize("name", NAMES)
def test_glue_keys_are_defined_in_the_same_notebook(name):
    text = (ROOT / "notebooks" / f"{name}.md").read_text()
    used = set(re.findall(r'\{eval\}`(?:f"\{)?([A-Za-z0-9_]+)', text))
    defined = set(re.findall(r"glue\(\"([A-Za-z0-9_]+)\"", text))
    defined |= set(re.findall(r"\"(t\d_[A-Za-z0-9_]+)\"\s*:", text))  # keys of a dict glued at once (book.glue_numbers)
    prefix = "t" + name.split("_")[1][-1] + "_"
    assert used, "the prose should show at least one live number"
    assert used <= defined, f"glued in prose but never defined: {sorted(used - defined)}"
    assert all(k.startswith(prefix) for k in defined), f"glue keys must start with {prefix!r}"


@pytest.mark.slow
def test_run_top_to_bottom_as_jupyterlab_does_every_eval_role_shows_its_value(tmp_path):
    """The chapter as JupyterLab runs it (no book build: the glued values are kernel variables), then every
    ``{eval}`` role of its text evaluated in that kernel, as jupyterlab-myst does: a value, never a NameError."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    from maskfed.book import notebooks

    nb = jupytext.read(ROOT / "notebooks" / "theory_04_prop3.md")
    roles = [m[0][len("{eval}`"):-1] for c in nb.cells if c.cell_type == "markdown"
             for m in notebooks.EVAL_ROLE.finditer(c.source)]
    nb.cells.append(nbformat.v4.new_code_cell(f"print(repr([str(eval(r)) for r in {roles!r}]))"))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    shown = eval(nb.cells[-1].outputs[0]["text"])
    assert len(shown) == len(roles) >= 10
    # the mean penalty with a shared mask, and its standard error, as two decimals (f"{t4_mc:.2f}")
    mc = roles.index('f"{t4_mc:.2f}"')
    assert re.fullmatch(r"\d+\.\d\d", shown[mc])
    assert not any(s.startswith("'") or "Error" in s for s in shown)
