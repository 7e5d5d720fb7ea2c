"""The book's notebook runner (maskfed.book.notebooks): hiding papermill's injected cell."""

import nbformat

from maskfed.book.notebooks import hide_injected_like_parameters


def _nb(param_tags):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile: str = 'cpu'", metadata={"tags": param_tags}),
                nbformat.v4.new_code_cell("# Parameters\nprofile = 'smoke'", metadata={"tags": ["injected-parameters"]}),
                nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["remove-input"]})]
    return nb


def test_injected_cell_is_hidden_like_the_parameters_cell():
    nb = _nb(["parameters", "remove-cell"])
    hide_injected_like_parameters(nb)
    assert nb.cells[1].metadata.tags == ["injected-parameters", "remove-cell"]
    assert nb.cells[2].metadata.tags == ["remove-input"]  # other cells untouched


def test_injected_cell_stays_visible_when_the_parameters_are_shown():
    nb = _nb(["parameters"])
    hide_injected_like_parameters(nb)
    assert nb.cells[1].metadata.tags == ["injected-parameters"]
