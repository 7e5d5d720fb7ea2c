"""The book's notebook runner (maskfed.book.notebooks): hiding papermill's injected cell, scrubbing
the build machine's paths from executed notebooks, and a refused parameter ending as one line."""

import json

import nbformat
import pytest

from maskfed.book import notebooks
from maskfed.book.notebooks import hide_injected_parameters, scrub_machine_paths
from maskfed.paths import REPO_ROOT


def _nb(param_tags):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile: str = 'cpu'", metadata={"tags": param_tags}),
                nbformat.v4.new_code_cell("# Parameters\nprofile = 'smoke'\n", metadata={"tags": ["injected-parameters"]}),
                nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["remove-input"]})]
    return nb


def test_injected_cell_is_hidden_like_the_parameters_cell():
    nb = _nb(["parameters", "remove-cell"])
    hide_injected_parameters(nb)
    assert nb.cells[1].metadata.tags == ["injected-parameters", "remove-cell"]
    assert nb.cells[0].source == "profile: str = 'cpu'"  # a hidden parameters cell is left alone
    assert nb.cells[2].metadata.tags == ["remove-input"]  # other cells untouched


def test_shown_parameters_cell_says_what_was_given_and_the_injected_cell_is_hidden():
    # prepare: a derivation chapter shows its parameters cell
    nb = _nb(["parameters"])
    # execute
    hide_injected_parameters(nb)
    # assert: one box shown, with the defaults and the values this build ran with
    assert nb.cells[1].metadata.tags == ["injected-parameters", "remove-cell"]
    assert nb.cells[0].source == ("profile: str = 'cpu'\n\n# given for this build (papermill):\n"
                                  "# profile = 'smoke'")


def _executed():
    """An executed-looking notebook with the machine's paths where papermill and libraries put them."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"input_path": "/tmp/tmpab12/intro.ipynb", "output_path": f"{REPO_ROOT}/book/nb/intro.ipynb",
                                "parameters": {"profile": "smoke", "data_path": "/data/x/cifar10-jpeg.tar.gz"}}
    warning = (f"{REPO_ROOT}/.venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found.\n"
               "  from .autonotebook import tqdm as notebook_tqdm\n")
    shown = nbformat.v4.new_code_cell("print(1)", metadata={"tags": ["remove-input"]}, outputs=[
        nbformat.v4.new_output("stream", name="stderr", text=warning),
        nbformat.v4.new_output("stream", name="stderr", text=f"reading {REPO_ROOT}/results/runs/a-1\n"),
        nbformat.v4.new_output("stream", name="stdout", text="1/Δ_S = 2.5\n"),
        nbformat.v4.new_output("display_data", data={"text/html": f"<td>{REPO_ROOT}/x</td></tr>"})])
    hidden = nbformat.v4.new_code_cell("run()", metadata={"tags": ["remove-cell"]}, outputs=[
        nbformat.v4.new_output("stream", name="stderr", text="\rruns:  5%| 1/20\n")])
    nb.cells = [shown, hidden]
    return nb


def test_scrub_leaves_no_path_of_the_build_machine():
    # prepare
    nb = _executed()
    # execute
    scrub_machine_paths(nb, name="intro")
    # assert: nothing names the repository root; parameters kept, paths reduced to the file name
    text = json.dumps(nb)
    assert str(REPO_ROOT) not in text and "/tmp/tmpab12" not in text and "/data/x" not in text
    assert nb.metadata.papermill["parameters"] == {"profile": "smoke", "data_path": "cifar10-jpeg.tar.gz"}
    assert nb.metadata.papermill["input_path"] == "notebooks/intro.md"
    shown, hidden = nb.cells
    # the warning-only stream is gone, the other stderr keeps its message, stdout and HTML are intact
    assert [o.get("text") for o in shown.outputs if o.output_type == "stream"] == ["reading a-1\n", "1/Δ_S = 2.5\n"]
    assert shown.outputs[-1]["data"]["text/html"] == "<td>x</td></tr>"
    assert hidden.outputs == []  # a hidden cell's progress bars never reach a page


def test_a_refused_parameter_ends_as_one_line_and_exit_2(monkeypatch, capsys):
    # prepare: the notebook's own check refuses the parameter in its first cell
    from papermill.exceptions import PapermillExecutionError

    def refuse(name, *, profile, parameters=None, **_):
        assert parameters == {"alpha": "0.5"}
        raise PapermillExecutionError(1, 1, "params.check_parameters(globals())", "ParameterError",
                                      "this notebook has no parameter 'alpha'", ["Traceback ...", "30 lines"])

    monkeypatch.setattr(notebooks, "execute", refuse)
    # execute
    code = notebooks.main(["--profile", "smoke", "table2_heterogeneity", "-p", "alpha", "0.5"])
    # assert
    err = capsys.readouterr().err
    assert code == 2
    assert "ParameterError: this notebook has no parameter 'alpha'" in err and "Traceback" not in err


def test_a_failed_notebook_never_replaces_the_books_page(tmp_path):
    # prepare: the book's page from an earlier run that finished
    from papermill.exceptions import PapermillExecutionError

    page = tmp_path / "theory_01_notation.ipynb"
    page.write_text("the page of the last finished run")
    # execute: the chapter's own parameter check stops it in its first cell
    with pytest.raises(PapermillExecutionError, match="ParameterError"):
        notebooks.execute("theory_01_notation", profile="smoke", out_dir=tmp_path, parameters={"alpha": "0.5"})
    # assert: the page is untouched; the failed notebook sits beside it, outside the table of contents
    assert page.read_text() == "the page of the last finished run"
    failed = notebooks.failed_path("theory_01_notation", tmp_path)
    assert "ParameterError" in failed.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [failed.name, page.name]


def test_glue_only_cells_are_hidden_and_cells_with_other_code_stay_shown():
    # prepare: a glue-only cell (plain and module glue, over two lines), a mixed one, a hidden one
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('glue("a", 1, display=False)\nbook.glue("b",\n          2)'),
                nbformat.v4.new_code_cell('x = 2\nglue("c", x)'),
                nbformat.v4.new_code_cell('glue("d", 3)', metadata={"tags": ["remove-cell"]}),
                nbformat.v4.new_code_cell(""),
                nbformat.v4.new_markdown_cell('glue("e", 4)')]
    # execute
    hidden = notebooks.hide_glue_only_cells(nb)
    # assert
    assert hidden == 1
    assert [c.metadata.get("tags", []) for c in nb.cells] == [["remove-cell"], [], ["remove-cell"], [], []]


def test_every_chapter_starts_with_the_hidden_figure_defaults():
    from maskfed.book import params

    # prepare: a chapter with its parameters cell first
    nb = _nb(["parameters"])
    # execute
    notebooks.add_book_setup(nb)
    # assert: the setup cell comes first, hidden, and binds no name the parameter check would see
    assert nb.cells[0].source == notebooks.SETUP_SOURCE and nb.cells[0].metadata.tags == ["remove-cell"]
    namespace = {}
    exec(notebooks.SETUP_SOURCE, namespace)
    assert params.user_names(namespace) == []
