"""Notebook parameters are checked and coerced once, before any compute (maskfed.book.params), and
every notebook calls the check right after its parameters cell."""

import json
import os
import re
import shlex
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any, Optional

import pytest

from maskfed.book import notebooks, params
from maskfed.book.params import check_parameters, coerce, ParameterError
from maskfed.paths import REPO_ROOT


# --- coerce: one value against one annotation -------------------------------------------

@pytest.mark.parametrize("value, annotation, expected", [
    ("[4, 4, 4]", list[int], [4, 4, 4]),          # papermill -p hands a list over as text
    ("{rounds: 50}", dict, {"rounds": 50}),        # YAML flow mapping
    ("{'rounds': 50}", dict, {"rounds": 50}),      # Python literal
    ("None", int | None, None),
    ("7", Optional[int], 7),
    ("1e-3", float, 0.001),                        # not a YAML 1.1 float, but a Python literal
    (2, float, 2.0),                               # an int is a float
    ([1, 3, 1000], list[int | float], [1, 3, 1000]),  # ints stay ints where allowed
    ("smoke", str, "smoke"),                       # a string that is meant as one is left alone
    ("None", str | None, "None"),
])
def test_coerce_parses_text_and_keeps_good_values(value, annotation, expected):
    out = coerce("x", value, annotation)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize("value, annotation, says", [
    ("[4, x]", list[int], "x[1]: input should be a valid integer"),
    ("[1, 2", list[int], "neither a Python literal nor YAML"),
    (2.5, int, "must be int"),
    (True, int, "must be int"),                    # a bool is not a count
    (3, str, "must be str"),
    ("abc", float | None, "must be float | None"),
    ("[0.1, 'a']", list[float], "x[1]"),
    ("{rounds:0}", dict[str, Any], "as the key(s) ['rounds:0'] with no value; a YAML mapping needs a space after "
                                   "each colon (rounds: 0)"),
])
def test_coerce_refuses_wrong_types_naming_parameter_and_type(value, annotation, says):
    with pytest.raises(ParameterError) as err:
        coerce("x", value, annotation)
    assert "'x'" in str(err.value) and says in str(err.value)


# --- check_parameters: a whole namespace -------------------------------------------------

def test_check_parameters_rebinds_coerced_values():
    # prepare: a parameters cell's namespace after papermill injected two values as text
    ns = {"__annotations__": {"profile": str, "block_sizes": list[int], "p": float},
          "profile": "smoke", "block_sizes": "[4, 4, 4]", "p": 1, "__name__": "__main__"}
    # execute
    out = check_parameters(ns)
    # assert: returned in declaration order and rebound in the namespace
    assert out == {"profile": "smoke", "block_sizes": [4, 4, 4], "p": 1.0}
    assert ns["block_sizes"] == [4, 4, 4] and isinstance(ns["p"], float)


def test_check_parameters_refuses_undeclared_names_listing_the_declared_ones():
    ns = {"__annotations__": {"profile": str, "workers": Optional[int]}, "profile": "cpu", "workers": None,
          "alpha": 0.5, "params": params, "check_parameters": check_parameters, "_private": 1,
          "Optional": Optional}
    with pytest.raises(ParameterError) as err:
        check_parameters(ns)
    msg = str(err.value)
    assert "no parameter 'alpha'" in msg and "parameters are: " + ", ".join(["profile", "workers"]) in msg
    assert "params" not in msg.replace("parameters", "")  # modules and functions are not parameters


def test_check_parameters_reports_every_problem_at_once_and_binds_nothing():
    ns = {"__annotations__": {"seed": int, "p": float}, "seed": "zero", "p": "[1]", "beta": 2}
    with pytest.raises(ParameterError) as err:
        check_parameters(ns)
    msg = str(err.value)
    problems = msg.split("parameter ")  # one entry per problem: the parameter's name first, then its type
    assert "'beta'" in msg and any(p.startswith("'seed' ") and " int;" in p for p in problems)
    assert any(p.startswith("'p' ") and " float;" in p for p in problems)
    assert ns["seed"] == "zero"  # nothing rebound when anything is wrong


# --- every notebook: annotated parameters, checked right after ---------------------------

def _code_cells(name: str) -> list:
    import jupytext

    return [c for c in jupytext.read(notebooks.NOTEBOOK_DIR / f"{name}.md").cells if c.cell_type == "code"]


def _import_lines(source: str) -> set[int]:
    """1-based numbers of the lines that belong to import statements."""
    import ast

    return {n for node in ast.parse(source).body if isinstance(node, (ast.Import, ast.ImportFrom))
            for n in range(node.lineno, node.end_lineno + 1)}


@pytest.mark.parametrize("name", notebooks.book_order())
def test_every_notebook_checks_its_parameters_first(name):
    code = _code_cells(name)
    assert "parameters" in code[0].metadata.get("tags", []), "the parameters cell comes first"
    imports = _import_lines(code[0].source)
    for i, line in enumerate(code[0].source.splitlines(), 1):
        if line.strip() and not line.startswith("#") and i not in imports:
            assert re.match(r"^\w+: [^=]+ = .+#", line), f"parameter without a type or a comment: {line!r}"
    assert "params.check_parameters(globals()" in code[1].source
    assert " | " not in code[0].source.split("#")[0], "papermill --help-notebook cannot read X | Y"


# --- every parameter of every chapter: a range, checked; applied, never replaced ---------

ALL_CHAPTERS = sorted(p.stem for p in notebooks.NOTEBOOK_DIR.glob("*.md"))


def _valid_example(t):
    """A value of type ``t`` inside its range (for the other places of a tuple)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Annotated:
        bounds = [m for meta in args[1:] for m in getattr(meta, "metadata", [])]
        low = [getattr(m, "ge", None) for m in bounds] + [getattr(m, "gt", None) for m in bounds]
        low = [v for v in low if v is not None]
        return args[0](max(low) + 1) if low else _valid_example(args[0])
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        return _valid_example(args[0])
    return {int: 1, float: 1.0, str: "x"}[t]


def out_of_range(t) -> list:
    """Values that a parameter annotated ``t`` must refuse, derived from its declared range: one past
    each bound, NaN and inf where it must be finite, an unknown name for a choice, the values a type
    says it refuses (:class:`params.Refuses`), and the same inside a list, dict or tuple."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    found = []
    if origin is typing.Annotated:
        base, *meta = args
        step = 1 if base is int else 0.5
        for m in meta:
            found += list(getattr(m, "values", ()))
            for b in getattr(m, "metadata", []):
                for attr, bad in (("ge", lambda v: v - step), ("gt", lambda v: v), ("le", lambda v: v + step),
                                  ("lt", lambda v: v)):
                    if getattr(b, attr, None) is not None:
                        found.append(base(bad(getattr(b, attr))))
                if getattr(b, "allow_inf_nan", True) is False:
                    found += [float("nan"), float("inf")]
        found += out_of_range(base)
    elif origin is typing.Literal:
        found.append("no-such-value")
    elif origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        found = [v for a in members for v in out_of_range(a)]
        if len(members) > 1:  # (int >= 1) | "full": keep what no member takes
            from pydantic import TypeAdapter, ValidationError

            def refused(v):
                try:
                    TypeAdapter(t).validate_python(v, strict=True)
                except ValidationError:
                    return True
                return False
            found = [v for v in found if refused(v)]
    elif origin is list:
        found = [[v] for v in out_of_range(args[0])]
    elif origin is dict:
        found = [{"x": v} for v in out_of_range(args[1])]
    elif origin is tuple:
        found = [tuple(v if j == i else _valid_example(a) for j, a in enumerate(args))
                 for i in range(len(args)) for v in out_of_range(args[i])]
    return found


def _chapter_namespace(name: str) -> tuple[dict, str]:
    """The namespace after a chapter's parameters cell, and the source of its check cell."""
    code = _code_cells(name)
    ns = {"__name__": "__main__"}
    exec(code[0].source, ns)
    return ns, code[1].source


def _cases():
    for name in ALL_CHAPTERS:
        ns, _ = _chapter_namespace(name)
        for param, annotation in ns.get("__annotations__", {}).items():
            yield name, param, annotation


@pytest.mark.parametrize("name, param, annotation", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.slow
def test_every_chapter_parameter_out_of_range_is_refused_at_the_check_naming_it(name, param, annotation):
    bad_values = out_of_range(annotation)
    assert bad_values, f"{name}: parameter {param!r} declares no range ({annotation})"
    for bad in bad_values:
        ns, check = _chapter_namespace(name)
        ns[param] = bad
        with pytest.raises(ParameterError) as info:
            exec(check, ns)
        assert f"'{param}'" in str(info.value), (bad, str(info.value))


@pytest.mark.parametrize("name", ALL_CHAPTERS)
@pytest.mark.slow
def test_every_chapter_passes_its_own_defaults_and_reads_none_as_its_default(name):
    ns, check = _chapter_namespace(name)
    exec(check, ns)  # the defaults pass the check
    declared = ns.get("__annotations__", {})
    later = "\n".join(c.source for c in _code_cells(name)[2:])
    for param in declared:  # `x = x or default` would turn a given 0, [] or {} into the default
        assert not re.search(rf"\b{param} or\b", later), f"{name}: {param!r} is replaced when falsy"


@pytest.mark.parametrize("name, given, says", [
    ("theory_02_prop1", {"log10_scale_min": -1.0, "log10_scale_max": -2.0}, "log10_scale_min < log10_scale_max"),
    ("theory_07_other_noise", {"P": 21}, "sum(block_sizes) == P"),
    ("limit_penalty", {"protocols": {"a": ("full", 1)}, "train_protocol": "b"}, "train_protocol one of"),
    ("stage_or_sampling", {"stage_rounds": [0, 3], "target_accuracies": [0.5]}, "at most one of stages"),
    ("table2_heterogeneity", {"overrides": {"alpha": 0.5}}, "alpha = 0.5 would be ignored"),
    ("table1_local_protocol", {"profile": "smoke", "data_path": "."}, "data_path"),
    # the profile and data path alone pass: only the overrides are blamed (not all three of the rule's)
    ("table1_local_protocol", {"profile": "smoke", "overrides": {"lr": 0}}, "parameter 'overrides': need"),
])
def test_rules_tying_parameters_together_are_checked(name, given, says):
    ns, check = _chapter_namespace(name)
    ns.update(given)
    with pytest.raises(ParameterError, match=re.escape(says)):
        exec(check, ns)


# --- through papermill, as a user runs it -------------------------------------------------

def papermill(name: str, tmp_path: Path, *args: str, last_cell: str | None = None) -> subprocess.CompletedProcess:
    """``jupytext --to ipynb -o - notebooks/<name>.md | papermill - out.ipynb -p profile smoke ARGS``, with
    ``last_cell`` (code) appended to the notebook."""
    bindir = Path(sys.executable).parent
    env = {**os.environ, "MASKFED_RESULTS_DIR": str(tmp_path / "results")}
    ipynb = subprocess.run([str(bindir / "jupytext"), "--to", "ipynb", "-o", "-",
                            str(notebooks.NOTEBOOK_DIR / f"{name}.md")], capture_output=True, check=True).stdout
    if last_cell is not None:
        nb = json.loads(ipynb)
        nb["cells"].append({"cell_type": "code", "metadata": {}, "source": last_cell, "outputs": [],
                            "execution_count": None})
        ipynb = json.dumps(nb).encode()
    return subprocess.run([str(bindir / "papermill"), "-", str(tmp_path / "out.ipynb"), "--cwd",
                           str(notebooks.NOTEBOOK_DIR), "-k", "python3", "-p", "profile", "smoke", *args],
                          input=ipynb, capture_output=True, env=env, timeout=600)


def executed_cells(path: Path) -> list[dict]:
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code" and c.get("execution_count")]


@pytest.mark.slow
def test_papermill_list_parameter_given_as_text_runs(tmp_path):
    # prepare / execute: a block partition of four blocks (the default has three), as -p text
    # (outside the book build a glued value is a kernel variable, which the appended cell prints)
    proc = papermill("theory_02_prop1", tmp_path, "-p", "block_sizes", "[2, 4, 4, 2]", last_cell="print(t2_n_masks)")
    # assert: the chapter ran with the parsed list: 2^4 masks, not the default's 2^3
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    last = executed_cells(tmp_path / "out.ipynb")[-1]
    assert "".join(last["outputs"][0]["text"]).strip() == "16"


@pytest.mark.slow
def test_papermill_undeclared_parameter_stops_before_compute(tmp_path):
    proc = papermill("table2_heterogeneity", tmp_path, "-p", "alpha", "0.5")
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "ParameterError" in err and "no parameter 'alpha'" in err
    assert "parameters are: " + ", ".join(["profile", "data_path", "workers", "overrides"]) in err
    # nothing after the check ran, and no run folder was made
    cells = executed_cells(tmp_path / "out.ipynb")
    assert "check_parameters" in "".join(cells[-1]["source"])
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("name, given, says", [
    ("theory_02_prop1", ["block_sizes", "[4, four, 4]"], ["parameter 'block_sizes' must be list[int >= 1]", "block_sizes[1]"]),
    ("theory_02_prop1", ["n_scales", "0"], ["parameter 'n_scales' must be int >= 2"]),
    # "{rounds:0}" is valid YAML for {"rounds:0": None}: refused at the check, saying why
    ("table2_heterogeneity", ["overrides", "{rounds:0}"], ["needs a space after each colon (rounds: 0)"]),
])
@pytest.mark.slow
def test_papermill_a_wrong_value_is_refused_at_the_check_naming_the_parameter(name, given, says, tmp_path):
    proc = papermill(name, tmp_path, "-p", *given)
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "ParameterError" in err and all(s in err for s in says), err[-2000:]
    assert "check_parameters" in "".join(executed_cells(tmp_path / "out.ipynb")[-1]["source"])


def test_a_notebook_without_parameters_refuses_any_given_one():
    # prepare: a page whose parameters cell declares nothing (the citation page)
    assert params.check_parameters({"__annotations__": {}, "In": [], "Out": {}}) == {}
    # execute / assert: papermill injecting `profile` into it is refused, not ignored
    with pytest.raises(params.ParameterError, match=r"'profile'.*no parameters"):
        params.check_parameters({"__annotations__": {}, "profile": "cpu"})


def test_declared_in_reads_each_parameter_its_default_and_its_comment():
    # prepare: a parameters cell with an import, two annotated parameters (one without a comment)
    source = ('# Title\n\n```{code-cell} python\n:tags: [parameters, remove-cell]\nfrom typing import Optional\n'
              'profile: Profile = "cpu"  # the profile\nn: Optional[int] = None\n```\n\n```{code-cell} python\nx = 1\n```\n')
    # execute / assert: the import is skipped, the comment is the meaning
    assert params.declared_in(source) == [{"name": "profile", "default": '"cpu"', "meaning": "the profile"},
                                          {"name": "n", "default": "None", "meaning": ""}]
    with pytest.raises(ValueError, match=r"code cell .*'parameters'"):
        params.declared_in("```{code-cell} python\nx = 1\n```\n")


def test_run_command_and_parameter_table_give_this_builds_parameters():
    # prepare: a chapter's namespace after check_parameters, with one parameter changed from its default
    ns = {"__annotations__": {"profile": params.Profile, "n_rounds": params.PositiveInt}}
    ns[params.GIVEN] = {"profile": "smoke", "n_rounds": 7}
    declared = params.declared_in((REPO_ROOT / "notebooks" / "theory_06_signal_noise.md").read_text())
    # execute
    command = params.run_command("theory_06_signal_noise", ns)
    table = params.parameter_table("theory_06_signal_noise", ns)
    # assert: the command names the profile and the changed parameter only; the table has every parameter
    assert command == ".venv/bin/python -m maskfed.book.notebooks --profile smoke theory_06_signal_noise -p n_rounds 7"
    ns[params.GIVEN]["K_c_grid"] = [2, 5]  # a list is written as JSON and quoted for the shell
    assert "-p K_c_grid '[2, 5]'" in params.run_command("theory_06_signal_noise", ns)
    assert shlex.split(params.run_command("theory_06_signal_noise", ns)).count("[2, 5]") == 1
    assert list(table["parameter"]) == [d["name"] for d in declared]
    row = table.set_index("parameter").loc["n_rounds"]
    assert (row["type and range"], row["default"], row["this build"]) == ("int >= 1", "None", "7")
    assert params.run_command("cite", {}) == ".venv/bin/python -m maskfed.book.notebooks cite"
    assert params.parameter_table("cite", {}).empty  # its parameters cell declares none


@pytest.mark.parametrize("name, value, limit", [
    ("rounds", 12345678901234567890123, "100000"), ("rounds", "12345678901234567890123", "100000"),
    ("cohort_size", 10**7, "1000000"), ("hessian_batch", 10**9, "10000000"), ("workers", 1000, "256")])
def test_a_chapter_size_named_like_a_run_setting_takes_its_bound(name, value, limit):
    # prepare: a chapter declaring the size as a plain PositiveInt (any int >= 1), given a runaway value
    ns = {"__annotations__": {name: Optional[params.PositiveInt]}, name: value}
    # execute
    with pytest.raises(ParameterError) as exc:
        check_parameters(ns)
    # assert: refused at the check, naming the parameter and RunConfig's (or the profile's) upper bound
    assert repr(name) in str(exc.value) and limit in str(exc.value)


def test_size_twins_read_their_bounds_from_the_run_configuration():
    from maskfed.engine import config

    # execute / assert: one home for each bound; in-range values and None pass
    assert params.type_name(params.SIZE_TWINS["rounds"]) == f"int >= 1 and <= {config.MAX_ROUNDS}"
    assert params.type_name(params.SIZE_TWINS["workers"]) == f"int >= 1 and <= {config.MAX_WORKERS}"
    assert "seed" not in params.SIZE_TWINS  # a seed is not a size (its own bound is 2**63 - 1)
    ns = {"__annotations__": {"rounds": Optional[params.PositiveInt], "workers": Optional[params.PositiveInt],
                              "seeds": Optional[list[params.NonNegativeInt]]},
          "rounds": config.MAX_ROUNDS, "workers": None, "seeds": [0, 1]}
    assert check_parameters(ns)["rounds"] == config.MAX_ROUNDS
    ns.update(seeds=list(range(config.MAX_SEEDS + 1)), rounds=1)
    with pytest.raises(ParameterError, match="'seeds'"):
        check_parameters(ns)


def test_a_second_check_in_the_same_kernel_ignores_what_later_cells_bound():
    # prepare: a parameters cell declaring rounds; a first check; a later cell binds found and prof
    from maskfed.book import params

    ns = {"__annotations__": {"rounds": params.PositiveInt}, "rounds": 3}
    params.check_parameters(ns)
    ns |= {"found": object(), "prof": 1}
    # execute: the chapter run again (JupyterLab's Run All a second time)
    checked = params.check_parameters(ns)
    # assert: the declared value is checked again, the later names are not refused; a bad value still is
    assert checked == {"rounds": 3}
    ns["rounds"] = 0
    with pytest.raises(params.ParameterError, match="rounds"):
        params.check_parameters(ns)
    # a fresh namespace with an undeclared name is refused at its first check
    with pytest.raises(params.ParameterError, match="no parameter 'alpha'"):
        params.check_parameters({"__annotations__": {"rounds": params.PositiveInt}, "rounds": 3, "alpha": 0.5})


def test_a_chapters_profile_is_one_the_book_is_built_with():
    # cpu-masked only computes runs to archive (the runner refuses it for a chapter): the profile parameter too
    from maskfed.engine.config import PROFILES

    assert "cpu-masked" in PROFILES
    assert "cpu-masked" not in params.type_name(params.BookProfile)
    assert params.coerce("profile", "cpu-paper", params.BookProfile) == "cpu-paper"
    with pytest.raises(params.ParameterError, match="profile"):
        params.coerce("profile", "cpu-masked", params.BookProfile)
