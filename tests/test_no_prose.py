"""Code computes, Markdown speaks (issue 39): no function of ``src/maskfed`` builds prose for the book.

The scan reads every module's syntax tree and reports each string literal or f-string of four words or
more (a word: a run of characters holding a letter; an f-string's fields count as no word) that is not
an error or warning message, a log line, a command-line help text, an assertion message or a docstring.
A sentence about the results belongs in a chapter's Markdown, with its numbers glued; what remains in
code is a short, named exception (:data:`ALLOWED`, each with its reason).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from maskfed.paths import REPO_ROOT

SRC = REPO_ROOT / "src" / "maskfed"

#: Calls whose text is for the user at the terminal, not the book: messages, logs, help, output.
MESSAGE_CALLS = {"warn", "debug", "info", "warning", "error", "exception", "critical", "fail", "exit",
                 "add_argument", "ArgumentParser", "add_parser", "add_argument_group", "print", "SystemExit"}
#: A figure's own text (titles, axis labels, legend entries, annotations): a figure is what src returns.
FIGURE_CALLS = {"set_title", "set_xlabel", "set_ylabel", "suptitle", "text", "annotate", "legend", "set"}
#: Keyword arguments that label a figure's element.
FIGURE_KEYWORDS = {"label", "title", "xlabel", "ylabel"}

#: (module path relative to src/maskfed, top-level function, class or constant, or "*" for the whole module) -> why its
#: text stays. The list may only shrink (test_the_allow_list_only_shrinks): what is left is terminal output, error
#: messages assembled before they are raised, markup in other languages, labels, and the prose still to move.
ALLOWED: dict[tuple[str, str], str] = {
    # the terminal, not the book
    ("cli.py", "*"): "the command line's help and its messages at the terminal",
    ("perf/devicecheck.py", "*"): "the GPU check's log at the terminal",
    ("engine/datacache.py", "*"): "the listing `maskfed cache --list` prints",
    ("engine/data.py", "*"): "the data loaders' error messages, and the data source a run records in provenance.json",
    ("engine/config.py", "*"): "the configuration's error messages, assembled by its validators",
    ("engine/runner.py", "*"): "the run store's identity errors and its resume hint",
    ("book/notebooks.py", "*"): "the runner's messages and the setup cell it injects (code)",
    ("book/params.py", "*"): "the parameter check's error messages",
    ("integrations/ray_backend.py", "INSTALL_HINT"): "an error message",
    ("engine/determinism.py", "STARTED_BEFORE"): "a provenance record of the CUDA state",
    ("engine/cohort.py", "precision_state"): "a provenance record of the precision",
    ("derivation/limits.py", "measure_limits"): "what a failed write names (an error message)",
    ("studies/central.py", "_train"): "what a failed write names (an error message)",
    ("studies/pool_gram.py", "measure_gram"): "what a failed write names (an error message)",
    ("studies/stage.py", "measure"): "what a failed write names (an error message)",
    ("book/plots.py", "figure_problems"): "the figure check's breaches, raised as one FigureError",
    # markup, not words
    ("book/explorer.py", "explorer_html"): "the explorer widget's HTML",
    ("book/__init__.py", "styled"): "the tables' CSS",
    ("book/__init__.py", "_BLANK"): "a regular expression over pandas' HTML",
    ("book/__init__.py", "csv_link"): "the CSV link's HTML",
    ("book/__init__.py", "fitted"): "the toggle's HTML",
    # labels: column headers, verdict words, sources' names
    ("book/__init__.py", "HEADERS"): "column headers",
    ("analysis/claims.py", "VERDICT_WORDS"): "verdict words",
    ("analysis/claims.py", "CLAIMS"): "where the paper makes each claim (section and table)",
    ("studies/factor_axes.py", "PART_NAMES"): "the names of the study's parts",
    ("studies/factor_axes.py", "paper_overview"): "a row label",
    ("book/plots.py", "recovery_vs_accuracy"): "a figure's title and legend entry, built before they are set",
    ("book/plots.py", "trajectories"): "a figure's title, built before it is set",
    # prose still to move into the chapters
    ("analysis/claims.py", "trend_bearing"): "the pairs column of the trend table: to become numbers",
    ("perf/bench.py", "latest_or_tiny"): "the benchmark's source as a sentence: to become a word",
}


def words(text: str) -> int:
    """How many words ``text`` has: whitespace-separated runs holding at least two letters ("Sec. IV-B, Table I"
    has three: a numeral or a symbol such as τ is no word)."""
    return sum(sum(c.isalpha() for c in w) >= 2 for w in text.split())


def exception_names(trees: list[ast.Module]) -> set[str]:
    """The names of the exception classes defined in ``trees`` (a class whose base is an exception, by fixpoint
    from the builtin names ending in Error, Exception or Warning)."""
    known = {n for n in dir(__builtins__) if isinstance(n, str)} if isinstance(__builtins__, dict) else set(dir(__builtins__))
    names = {n for n in known if n.endswith(("Error", "Exception", "Warning"))}
    classes = [c for t in trees for c in ast.walk(t) if isinstance(c, ast.ClassDef)]
    changed = True
    while changed:
        changed = False
        for c in classes:
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in c.bases}
            if c.name not in names and (bases & names or any(b.endswith(("Error", "Exception")) for b in bases)):
                names.add(c.name)
                changed = True
    return names


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def prose_strings(tree: ast.Module, exceptions: set[str]) -> list[tuple[int, str, str]]:
    """(line, enclosing function or constant name, text) of every prose string in ``tree``.

    Exempt: docstrings; everything inside ``raise``, ``assert`` messages, calls of :data:`MESSAGE_CALLS`, of
    :data:`FIGURE_CALLS` or of an exception class (``exceptions``), an exception class's own body (its message),
    and a figure element's label (:data:`FIGURE_KEYWORDS`). An f-string's fields are no words (``f"{a} {b} {c} {d}"`` is none).
    """
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        exempt = (isinstance(node, ast.Raise)
                  or (isinstance(node, ast.Call) and (_call_name(node) in MESSAGE_CALLS | FIGURE_CALLS
                                                      or _call_name(node) in exceptions))
                  or (isinstance(node, ast.ClassDef) and node.name in exceptions))   # an exception's own message
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in FIGURE_KEYWORDS:
                    skip.update(id(m) for m in ast.walk(kw.value))
        if isinstance(node, ast.Assert) and node.msg is not None:
            skip.update(id(m) for m in ast.walk(node.msg))
        if exempt:
            skip.update(id(m) for m in ast.walk(node))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    owner: dict[int, str] = {}

    def mark(node, name):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                mark(child, f"{name}.{child.name}" if name else child.name)
            else:
                if isinstance(child, (ast.Assign, ast.AnnAssign)) and not name:
                    target = child.targets[0] if isinstance(child, ast.Assign) else child.target
                    mark_all(child, getattr(target, "id", ""))
                else:
                    mark(child, name)
                owner.setdefault(id(child), name)

    def mark_all(node, name):
        for sub in ast.walk(node):
            owner.setdefault(id(sub), name)

    mark(tree, "")
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else " " for v in node.values)
        else:
            continue
        if words(text) >= 4:
            out.append((node.lineno, owner.get(id(node), ""), text))
    return sorted(out)


def scan(root: Path = SRC) -> list[tuple[str, int, str, str]]:
    """(module path, line, owner, text) of every prose string under ``root``."""
    files = sorted(root.rglob("*.py"))
    trees = {p: ast.parse(p.read_text(), filename=str(p)) for p in files}
    exceptions = exception_names(list(trees.values()))
    return [(p.relative_to(root).as_posix(), line, owner, text)
            for p, tree in trees.items() for line, owner, text in prose_strings(tree, exceptions)]


def test_words_count_runs_with_a_letter():
    assert words("the cliff is 1.67 against 2.91") == 4
    assert words("1/Δ_S unwtd. (param.²)") == 3 and words("Sec. IV-B, Table I") == 3 and words("bs 32, τ 2") == 1


def test_the_scan_finds_prose_and_passes_messages_by_hand():
    # prepare: one function of each kind
    source = '''
"""A module docstring of many words here."""
class Stop(ValueError):
    pass
def f(x):
    """A docstring of many words here."""
    if x < 0:
        raise ValueError(f"x must be at least zero; got {x}")
    if x > 9:
        raise Stop("x is far too large here")
    assert x != 3, "three is not allowed here"
    print("a line for the terminal only")
    return f"the factor is {x} against the paper"
def g(a, b, c, d):
    return f"{a} {b} {c} {d}"
LABEL = "rounds with 1/Δ_S < 1 (%)"
SENTENCE = "This build has run every setting."
'''
    # execute
    tree = ast.parse(source)
    found = prose_strings(tree, exception_names([tree]))
    # assert: the returned sentence and the constant sentence, nothing else
    assert [(owner, text) for _, owner, text in found] == [
        ("f", "the factor is   against the paper"), ("SENTENCE", "This build has run every setting.")]


def test_src_builds_no_prose_for_the_book():
    found = scan()
    outside = [f"{path}:{line} {owner}: {text[:60]!r}" for path, line, owner, text in found
               if (path, owner.split(".")[0]) not in ALLOWED and (path, "*") not in ALLOWED]
    assert outside == [], f"{len(outside)} prose strings in src/ (write them in the chapter's Markdown):\n" + "\n".join(outside)


def test_the_allow_list_only_shrinks_and_every_entry_is_still_needed():
    found = {(path, owner.split(".")[0]) for path, _, owner, _ in scan()} | {(path, "*") for path, *_ in scan()}
    assert len(ALLOWED) <= 31   # 2026-12-06: lower this bound as entries go; the aim is a dozen at most
    assert [k for k in ALLOWED if k not in found] == []


# ----------------------------------------------------------------------------- the tests assert values, not wording
TESTS = REPO_ROOT / "tests"
#: Asserts that may still compare a string of four words or more: fixed text that is not prose about results (a shell
#: command, the paper's title, a code line, a table's row label, a legend entry, the scanner's own inputs). Only lower it.
MAX_PROSE_ASSERTS = 11   # 2026-12-06: 101 before issue 39's tests were rewritten
#: ``match=`` patterns of four words or more (pytest.raises, pytest.warns). Only lower it.
MAX_PROSE_MATCHES = 0    # 2026-12-06: 75 before


def scan_words(text: str) -> int:
    """Words as the tests' scan counts them: whitespace-separated tokens holding two ASCII letters in a row."""
    return sum(bool(re.search(r"[A-Za-z]{2}", w)) for w in text.split())


def _strings(node: ast.AST) -> list[str]:
    """Each string literal's text under ``node``, an f-string as its literal parts (its fields are no words)."""
    out = []
    for c in ast.walk(node):
        if isinstance(c, ast.JoinedStr):
            out.append("".join(v.value for v in c.values if isinstance(v, ast.Constant)))
        elif isinstance(c, ast.Constant) and isinstance(c.value, str):
            out.append(c.value)
    return out


def prose_in_tests(root: Path = TESTS) -> tuple[list[str], list[str]]:
    """(asserts, match patterns) under ``root`` that hold a string of four words or more, as ``file:line`` each.

    An assert counts when any string in its test (not its message) has four words; a ``match=`` keyword when its
    pattern does (implicitly concatenated literals are one pattern).
    """
    asserts, matches = [], []
    for path in sorted(root.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Assert) and any(scan_words(s) >= 4 for s in _strings(node.test)):
                asserts.append(where)
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "match" and any(scan_words(s) >= 4 for s in _strings(kw.value)):
                        matches.append(where)
    return asserts, matches


def test_the_scan_of_tests_counts_sentences_not_values(tmp_path):
    # prepare: one assert and one pattern of each kind
    source = '''
def test_x(err, exc):
    assert "--workers" in err and "1 to 256" in err, "a message of many words is no assert's test"
    assert "--workers must be an integer from 1 to 256" in err
    assert err == f"{exc} is set but empty here"
    with pytest.raises(ValueError, match=r"num_clients.*4 .*200 training"):
        pass
    with pytest.raises(ValueError, match='num_clients = 4 exceeds the 200 training images'):
        pass
'''
    (tmp_path / "test_case.py").write_text(source)
    # execute
    asserts, matches = prose_in_tests(tmp_path)
    # assert: the two sentences and the one sentence-long pattern, by line
    assert asserts == ["test_case.py:4", "test_case.py:5"] and matches == ["test_case.py:8"]


def test_tests_assert_values_not_sentences():
    asserts, matches = prose_in_tests()
    assert len(asserts) <= MAX_PROSE_ASSERTS, "asserts that pin a sentence (assert its values):\n" + "\n".join(asserts)
    assert len(matches) <= MAX_PROSE_MATCHES, "match= patterns that pin a sentence:\n" + "\n".join(matches)
