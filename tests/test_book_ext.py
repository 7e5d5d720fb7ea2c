"""The book's Sphinx extensions (book/_ext): the repository check behind the repository and launch
buttons, exercises numbered per chapter, punctuation kept with inline math, and the theme's
scripts without the duplicated live-code script. Each on tiny inputs; the built book is checked
in tests/test_book.py and by ``make book-check``."""

from __future__ import annotations

import sys

import pytest
from docutils import nodes
from sphinx.errors import ConfigError

from maskfed.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "book" / "_ext"))

import equation_links  # noqa: E402
import exercise_numbers  # noqa: E402
import figure_alt  # noqa: E402
import glossary_links  # noqa: E402
import math_punctuation  # noqa: E402
import page_scripts  # noqa: E402
import repository_buttons  # noqa: E402


# --- repository_buttons ------------------------------------------------------------------------


@pytest.mark.parametrize("url, remotes, shown", [
    ("", ["https://github.com/a/b.git"], False),                          # no URL: no buttons
    ("https://github.com/a/b", [], False),                                # nothing to check it against
    ("https://github.com/a/b", ["https://github.com/a/b.git"], True),      # the checkout's own remote
    ("https://github.com/A/B/", ["git@github.com:a/b.git"], True),         # ssh remote, case, slash
    ("https://github.com/a/b", ["ssh://git@github.com/a/b", "https://github.com/c/d"], True),
])
def test_buttons_only_for_a_url_that_is_a_remote_of_the_checkout(url, remotes, shown):
    assert repository_buttons.check_repository(url, remotes) is shown


@pytest.mark.parametrize("url, remotes, match", [
    ("https://github.com/maskfed/maskfed", ["https://github.com/someone/maskfed.git"], "not a git remote"),
    ("https://gitlab.com/a/b", [], "must be https://github.com/<owner>/<name>"),
    ("github.com/a/b", ["https://github.com/a/b"], "must be https://github.com/<owner>/<name>"),
])
def test_a_url_that_is_not_this_books_repository_stops_the_build(url, remotes, match):
    with pytest.raises(ConfigError, match=match):
        repository_buttons.check_repository(url, remotes)


def test_without_a_checked_url_the_theme_gets_no_buttons():
    # prepare: what Jupyter Book passes on for repository.url = "" and the launch buttons
    class App:
        confdir = "/"

    class Config:
        html_theme_options = {"repository_url": "", "use_repository_button": False,
                              "launch_buttons": {"binderhub_url": "https://mybinder.org", "colab_url": "x"}}

    # execute
    repository_buttons._drop_buttons(App(), Config)
    # assert
    assert Config.html_theme_options["launch_buttons"] == {}
    assert Config.html_theme_options["use_repository_button"] is False


# --- exercise_numbers ----------------------------------------------------------------------------


def test_exercises_are_numbered_per_chapter_in_book_order():
    # prepare: Sphinx's book-wide numbers (chapter 3's first exercise is Exercise 7)
    numbers = {"nb/ch1": {"exercise": {"e1": (1,), "e2": (2,)}, "figure": {"f": (4,)}},
               "nb/ch3": {"exercise": {"x9": (9,), "x7": (7,), "x8": (8,)}}}
    # execute
    exercise_numbers.renumber(numbers)
    # assert: numbered by chapter (ch3 is the second chapter with exercises: 2.1, 2.2, 2.3), each in its
    # original order; other kinds untouched
    assert numbers["nb/ch3"]["exercise"] == {"x7": (2, 1), "x8": (2, 2), "x9": (2, 3)}
    assert numbers["nb/ch1"]["exercise"] == {"e1": (1, 1), "e2": (1, 2)} and numbers["nb/ch1"]["figure"] == {"f": (4,)}


# --- math_punctuation ----------------------------------------------------------------------------


def test_punctuation_after_inline_math_is_wrapped_with_it():
    # prepare: "with $x$. Then $y$, and $z$ here"
    para = nodes.paragraph()
    para += [nodes.Text("with "), nodes.math(text="x"), nodes.Text(". Then "), nodes.math(text="y"),
             nodes.Text(", and "), nodes.math(text="z"), nodes.Text(" here")]
    text = para.astext()
    # execute
    wrapped = math_punctuation.keep_punctuation_with_math(para)
    # assert: two pairs wrapped, the text otherwise unchanged, z (followed by a space) left alone
    assert wrapped == 2
    boxes = [n for n in para.children if isinstance(n, nodes.inline)]
    assert [b["classes"] for b in boxes] == [["math-nowrap"], ["math-nowrap"]]
    assert [b.astext() for b in boxes] == ["x.", "y,"]
    assert para.astext() == text


def test_equal_text_elsewhere_in_the_paragraph_is_left_alone():
    # prepare: "a factor 190. Plugging ... at $x$." (a glued number renders as its own Text node,
    # so the paragraph holds two Text nodes "." that compare equal)
    para = nodes.paragraph()
    para += [nodes.Text("a factor "), nodes.inline(text="190"), nodes.Text("."), nodes.Text(" Plugging at "),
             nodes.math(text="x"), nodes.Text(".")]
    # execute
    wrapped = math_punctuation.keep_punctuation_with_math(para)
    # assert: the full stop after 190 stays, the one after x moves into the box, none is doubled
    assert wrapped == 1
    assert para.astext() == "a factor 190. Plugging at x."
    assert [n.astext() for n in para.children if isinstance(n, nodes.inline)] == ["190", "x."]


def test_an_opening_bracket_before_inline_math_is_wrapped_with_it():
    # prepare: "too low (when $g < 0$), and"
    para = nodes.paragraph()
    para += [nodes.Text("too low ("), nodes.math(text="g < 0"), nodes.Text("), and")]
    # execute
    assert math_punctuation.keep_punctuation_with_math(para) == 1
    # assert: "(" and ")," travel with the formula
    box = next(n for n in para.children if isinstance(n, nodes.inline))
    assert box.astext() == "(g < 0)," and para.astext() == "too low (g < 0), and"


# --- page_scripts --------------------------------------------------------------------------------


def test_the_live_code_scripts_are_left_out_when_thebe_is_off():
    # prepare: the scripts sphinx-thebe adds twice, and one of the theme's
    class JS(str):
        def __new__(cls, filename, body=""):
            obj = super().__new__(cls, filename or "")
            obj.filename, obj.attributes = filename, {"body": body} if body else {}
            return obj

    thebe_cfg = 'const THEBE_JS_URL = "https://unpkg.com/thebe@0.8.2/lib/index.js"'
    context = {"script_files": [JS(None, thebe_cfg), JS("_static/sphinx-thebe.js"), JS(None, thebe_cfg),
                                JS("_static/scripts/bootstrap.js")]}

    class App:
        class config:
            html_theme_options = {"launch_buttons": {"thebe": False}}

    # execute
    page_scripts._drop_thebe(App, "nb/x", "page.html", context, None)
    # assert
    assert [js.filename for js in context["script_files"]] == ["_static/scripts/bootstrap.js"]


def test_the_theme_gets_a_default_mode_and_one_search_field():
    class Config:
        html_theme_options = {"repository_url": ""}
        html_context = {}

    page_scripts._theme_options(None, Config)
    assert Config.html_context["default_mode"] == "auto"
    assert Config.html_theme_options["navbar_persistent"] == []


def test_equation_mentions_link_to_the_papers_equations_and_nothing_else():
    # prepare: a paragraph with four mentions (one of an equation no page marks), a code literal, a link
    para = nodes.paragraph()
    para += nodes.Text("By eq. (11) and eqs. 13-14, not eq. 99; Eq. 6 too (eq. 6). ")
    para += nodes.literal("", "eq. 3")
    para += nodes.reference("", "eq. 4", refuri="x.html")
    marked = {6: "p6.html#a", 11: "p11.html#b", 13: "p13.html#c"}
    text = para.astext()
    # execute
    n = equation_links.link_mentions(para, marked.get)
    # assert: three links, each to the first number's display; the rest untouched
    refs = [r for r in para.findall(nodes.reference) if "paper-eq" in r["classes"]]
    assert n == 4 and [(r.astext(), r["refuri"]) for r in refs] == [
        ("eq. (11)", "p11.html#b"), ("eqs. 13-14", "p13.html#c"), ("Eq. 6", "p6.html#a"), ("eq. 6", "p6.html#a")]
    assert para.astext() == text
    assert next(para.findall(nodes.literal)).astext() == "eq. 3"


def test_the_first_prose_use_of_each_glossary_term_links_to_it():
    # prepare: a title and a table mention "cohort" first, then prose uses three terms, one twice and in
    # the plural, one inside code; "T" is too short to link
    doc = nodes.section()
    doc += nodes.title("", "The cohort")
    table = nodes.table()
    table += nodes.Text("cohort")
    doc += table
    para = nodes.paragraph()
    para += nodes.Text("Each Cohort draws; the recovery factor of two cohorts; T steps, ")
    para += nodes.literal("", "protocol")
    para += nodes.Text(" and a protocol.")
    doc += para
    uri = {"cohort": "g.html#term-cohort", "recovery factor": "g.html#term-recovery-factor",
           "protocol": "g.html#term-protocol", "t": "g.html#term-T"}
    text = para.astext()
    # execute
    linked = glossary_links.link_first_uses(doc, uri)
    # assert: one link per term at its first prose use, the text unchanged
    refs = [(r.astext(), r["refuri"]) for r in doc.findall(nodes.reference)]
    assert linked == ["cohort", "recovery factor", "protocol"]
    assert refs == [("Cohort", "g.html#term-cohort"), ("recovery factor", "g.html#term-recovery-factor"),
                    ("protocol", "g.html#term-protocol")]
    assert para.astext() == text
    # a page that already links a term (by {term}) gets no second link to it
    again = nodes.paragraph()
    again += nodes.reference("", "cohort", refuri="g.html#term-cohort")
    again += nodes.Text(" then cohort")
    assert glossary_links.link_first_uses(again, {"cohort": "g.html#term-cohort"}) == []
    # a term the page links by hand only after an unlinked prose use still gets its first use linked
    late = nodes.paragraph()
    late += nodes.inline("", "the cohort draws")
    late += nodes.reference("", "cohort", refuri="g.html#term-cohort")
    assert glossary_links.link_first_uses(late, {"cohort": "g.html#term-cohort"}) == ["cohort"]
    assert [r.astext() for r in late.findall(nodes.reference)] == ["cohort", "cohort"]


def test_a_figure_gets_its_svg_title_as_alt_text_not_its_file_name(tmp_path):
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from maskfed.book import plots

    # prepare: a figure saved as plots.finish saves it, and the image node MyST-NB makes of it (no alt)
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    title = "the factor by round"
    ax.set(title=title, xlabel="round", ylabel="1/Δ_S")
    buf = io.StringIO()
    described = plots.describe(fig)
    fig.savefig(buf, format="svg", metadata={"Title": described})
    plt.close(fig)
    (tmp_path / "fig.svg").write_text(buf.getvalue())
    doc = nodes.document(None, None)
    doc += nodes.image(uri="fig.svg")
    doc += nodes.image(uri="other.png", alt="kept as written")

    class App:
        srcdir = str(tmp_path)

    # execute
    figure_alt._alt_from_svg(App(), doc, "index")
    # assert: the figure's own words, and an image that had alt text keeps it
    images = list(doc.findall(nodes.image))
    alt = images[0]["alt"]  # the title, then the y axis against the x axis
    assert alt == described and alt.startswith(f"{title}: ") and alt.endswith("1/Δ_S against round")
    assert images[1]["alt"] == "kept as written"
    assert figure_alt.svg_title(tmp_path / "missing.svg") is None
