"""Check and coerce a notebook's papermill parameters, once, before any compute.

Each notebook's parameters cell declares its parameters with type annotations that carry their
allowed range (the types below), e.g. ``n_draws: Optional[PositiveInt] = None`` (papermill reads
``Optional[int]``, not ``int | None``), and the cell after it calls ``params.check_parameters(globals())``,
with ``rules=[Rule(...)]`` for what ties parameters together. A chapter reads ``None`` as "the default",
never ``n_draws or ...``, which would turn a given 0 into the default.

``papermill -p`` passes lists, dicts and some numbers as strings; those are parsed as a Python literal or
else as YAML and validated with pydantic in strict mode (an int is accepted for a float). A bad value, a
failed rule or an undeclared name stops the notebook with one :class:`ParameterError` naming each.
"""

from __future__ import annotations

import ast
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

import pandas as pd
import yaml
from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

from maskfed.core.masking import GRANULARITIES
from maskfed.engine.config import load_profile, Profile as ProfileSettings, PROFILES, RunConfig

#: Names an IPython kernel puts in a notebook's namespace that are not parameters
#: (IPython's own ``user_ns_hidden`` is used as well when running in a kernel).
KERNEL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})


class ParameterError(ValueError):
    """A notebook parameter has the wrong type or a value outside its range, or is not declared by the notebook."""


class Refuses:
    """Metadata of a type whose range a plain bound cannot say: values it refuses, for ``tests/test_params.py``."""

    def __init__(self, *values: Any):
        self.values = values


def _existing_path(value: str) -> str:
    if not Path(value).expanduser().exists():
        raise ValueError(f"no file or folder {value!r} (from {Path.cwd()})")
    return value


def _pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value  # YAML and JSON have no tuples


# The chapters' parameter types: each names its range, and a value outside it is refused.
#: An integer >= 1 (a count, a size, a number of draws, rounds or workers).
PositiveInt = Annotated[int, Field(ge=1)]
#: An integer >= 2 (Monte Carlo draws or rounds whose mean has a standard error; a fit's points).
TwoOrMore = Annotated[int, Field(ge=2)]
#: An integer >= 0 (a seed, a 0-based round).
NonNegativeInt = Annotated[int, Field(ge=0)]
#: A finite number > 0 (a scale, a tolerance, a signal-to-noise ratio).
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A finite number.
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
#: A keep probability p in (0, 1].
Probability = Annotated[float, Field(gt=0, le=1)]
#: A fraction in [0, 1] (a test accuracy).
Fraction = Annotated[float, Field(ge=0, le=1)]
#: A correlation in [0, 1).
Correlation = Annotated[float, Field(ge=0, lt=1)]
#: A condition number, a finite number >= 1.
ConditionNumber = Annotated[float, Field(ge=1, allow_inf_nan=False)]
#: A switch: True or False (text such as "maybe" is refused, never read as a truth value).
Flag = Annotated[bool, Refuses("maybe", 2)]
#: Bootstrap replicates: an integer >= 100 (fewer give unstable 5 % and 95 % percentiles).
Replicates = Annotated[int, Field(ge=100)]
#: A profile, one of :data:`maskfed.engine.config.PROFILES` (e.g. an archived profile a chapter reads).
Profile = Literal[PROFILES]
#: A profile the book is built with (its experiments include Tables I, II and the control): a chapter's ``profile``.
BookProfile = Literal[tuple(p for p in PROFILES if load_profile(p).builds_book)]
#: A mask mode: "independent" (a mask per client) or "shared" (one per round), as RunConfig's ``mask_mode``.
MaskMode = RunConfig.model_fields["mask_mode"].annotation
#: Blocks of a mask: one per parameter "tensor" or per output "channel" (:data:`maskfed.core.masking.GRANULARITIES`).
Granularity = Literal[GRANULARITIES]
#: A batch size: an integer >= 1 or "full".
BatchSize = Union[PositiveInt, Literal["full"]]
#: A local protocol: (batch size, local epochs τ >= 1), given as a pair or a two-item list.
Protocol = Annotated[tuple[BatchSize, PositiveInt], BeforeValidator(_pair)]
#: The name of one of a chapter's protocols (checked by a :class:`Rule` against them).
ProtocolName = Annotated[str, Refuses("no such protocol")]
#: A file or folder that exists (relative: to the notebook's working directory).
ExistingPath = Annotated[str, AfterValidator(_existing_path), Refuses("/no/such/data")]
#: RunConfig fields (and ``seeds``, ``table1``, ``table2``) replacing a profile's: checked with the
#: profile by :func:`run_settings_rule`.
RunOverrides = Annotated[dict[str, Any], Refuses({"rounds": 0}, {"no_such_field": 1})]


def _field_type(model: type, name: str) -> Any:
    """The annotation of ``model``'s field ``name`` with its ``Field(...)`` bounds, as a type."""
    field = model.model_fields[name]
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


#: A chapter parameter named like a bounded RunConfig integer field (``rounds``, ``cohort_size`` ...) or the
#: profile's ``workers`` and ``seeds`` is checked against that field's range too (one home for the bounds).
SIZE_TWINS: dict[str, Any] = {
    **{name: _field_type(RunConfig, name) for name, f in RunConfig.model_fields.items()
       if f.annotation in (int, int | None) and any(hasattr(m, "le") for m in f.metadata) and name != "seed"},
    "workers": _field_type(ProfileSettings, "workers"), "seeds": _field_type(ProfileSettings, "seeds")}


def _bounds(meta: Any) -> list[str]:
    found = []
    for m in getattr(meta, "metadata", [meta]):
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                found.append(f"{sym} {getattr(m, attr)}")
        if getattr(m, "allow_inf_nan", True) is False:
            found.append("finite")
    return found


def type_name(annotation: Any) -> str:
    """A reader's name for a type annotation with its range: ``list[int >= 1]``, ``one of 'smoke', 'cpu'``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        base, *meta = args
        if base is str and any(getattr(m, "func", None) is _existing_path for m in meta):
            return "existing path"
        bounds = [b for m in meta for b in _bounds(m)]
        finite = "finite " if "finite" in bounds else ""
        bounds = [b for b in bounds if b != "finite"]
        return finite + type_name(base) + (" " + " and ".join(bounds) if bounds else "")
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


@dataclass
class Rule:
    """A condition tying parameters together, checked after each has passed its own range: ``holds(*values)`` of
    the named parameters returns True when they fit (or raises ValueError); ``says`` is the condition in words."""

    names: tuple[str, ...]
    holds: Callable[..., bool]
    says: str

    def problem(self, checked: dict[str, Any]) -> str | None:
        """The message if the rule fails for ``checked`` (name -> value), else None."""
        if any(n not in checked for n in self.names):  # one of them is bad already: said there
            return None
        values, blamed = [checked[n] for n in self.names], self.names
        try:
            ok, reason = self.holds(*values), ""
        except Blame as exc:  # the rule knows which of its parameters is at fault
            ok, reason, blamed = False, f": {exc.__cause__ or exc}", exc.names
        except (ValueError, TypeError) as exc:  # TypeError: e.g. an override named like an argument
            ok, reason = False, f": {exc}"
        if ok:
            return None
        given = ", ".join(f"{n} = {checked[n]!r}" for n in blamed)
        return f"parameter{'s' * (len(blamed) > 1)} {', '.join(map(repr, blamed))}: need {self.says}; got {given}{reason}"


class Blame(ValueError):
    """Raised by a :class:`Rule`'s ``holds`` (``from`` the error) to name the parameters at fault, when they are
    fewer than the rule's."""

    def __init__(self, *names: str):
        super().__init__(", ".join(names))
        self.names = names


def run_settings_rule(*experiments: str) -> Rule:
    """The rule of a chapter with ``profile``, ``data_path`` and ``overrides``: the profile loads with them and
    builds its first run and the runs of ``experiments`` ("table1", "table2", "control")."""
    def check(profile: str, data_path: str | None, overrides: dict) -> None:
        prof = load_profile(profile, data_path=data_path, **overrides)  # ConfigError (a ValueError) names the field
        prof.run(prof.seeds[0])  # a field the runs would not read is refused too
        for experiment in experiments:
            prof.experiment_configs(experiment)

    def holds(profile: str, data_path: str | None, overrides: dict) -> bool:
        check(profile, data_path, {})   # the profile and data path alone
        try:
            check(profile, data_path, overrides)
        except (ValueError, TypeError) as exc:   # they passed: the overrides are at fault
            raise Blame("overrides") from exc
        return True

    return Rule(("profile", "data_path", "overrides"), holds,
                "overrides that the profile's runs accept (RunConfig fields with allowed values)")


def parse_text(name: str, text: str, annotation: Any) -> Any:
    """``text`` read as a Python literal (``"[4, 4, 4]"``, ``"None"``, ``"1e-3"``), else as YAML
    (``"{rounds: 50}"``, ``"true"``).

    Raises:
        ParameterError: neither reading works, naming the parameter and its type.
    """
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParameterError(f"parameter {name!r} must be {type_name(annotation)}; got {text!r}, which is "
                             f"neither a Python literal nor YAML ({getattr(exc, 'problem', None) or exc})") from None
    glued = [k for k, v in value.items() if isinstance(k, str) and ":" in k and v is None] if isinstance(value, dict) else []
    if glued:  # "{rounds:0}" is YAML for {"rounds:0": None}: say so rather than pass on an odd key
        fixed = ", ".join(k.replace(":", ": ", 1) for k in glued)
        raise ParameterError(f"parameter {name!r}: YAML reads {text!r} as the key(s) {glued} with no value; "
                             f"a YAML mapping needs a space after each colon ({fixed})")
    return value


def coerce(name: str, value: Any, annotation: Any) -> Any:
    """``value`` of parameter ``name`` checked against ``annotation`` (pydantic, strict); a string it does not
    accept is first parsed (:func:`parse_text`). Returns the value, converted where lossless (int to float).

    Raises:
        ParameterError: the value (after parsing, for a string) does not have the declared type.
    """
    adapter = TypeAdapter(annotation)
    try:
        return adapter.validate_python(value, strict=True)
    except ValidationError as first:
        error = first
    if isinstance(value, str):
        parsed = parse_text(name, value, annotation)
        try:
            return adapter.validate_python(parsed, strict=True)
        except ValidationError as second:
            error = second
    details = dict.fromkeys(f"{name}{''.join(f'[{i}]' for i in e['loc'] if isinstance(i, int))}: "
                            f"{e['msg'].lower().removeprefix('value error, ')}"
                            for e in error.errors())
    where = "; ".join(list(details)[:3])
    raise ParameterError(f"parameter {name!r} must be {type_name(annotation)}; got {value!r} "
                         f"({type(value).__name__}) [{where}]") from None


def user_names(namespace: dict) -> list[str]:
    """Names in ``namespace`` that a parameters cell or papermill could have bound: not private, not the kernel's,
    and not modules, functions, classes or ``typing`` names (papermill injects only literals)."""
    from IPython import get_ipython

    shell = get_ipython()
    hidden = set(KERNEL_NAMES) | (set(shell.user_ns_hidden) if shell is not None else set())
    return sorted(k for k, v in namespace.items()
                  if not k.startswith("_") and k not in hidden and type(v).__module__ != "typing"
                  and not isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)))


def check_parameters(namespace: dict, rules: list[Rule] = ()) -> dict[str, Any]:
    """Check a notebook's parameters (``namespace``: its globals, whose ``__annotations__`` declare them) and
    rebind the coerced values; ``rules`` (:class:`Rule`) are checked once each parameter passed its own range.
    The first call in a kernel also refuses every bound name the parameters cell does not declare.

    Returns:
        The checked parameters, name to value, in declaration order.

    Raises:
        ParameterError: undeclared names, values of the wrong type or range, or failed rules, all in one message.
    """
    declared = dict(namespace.get("__annotations__") or {})
    problems = []
    # undeclared names are looked for at the first check only: run again in JupyterLab ("Run All" twice), the
    # namespace also holds what the chapter's later cells bound, which are not parameters
    first = CHECKED not in namespace
    unknown = [k for k in user_names(namespace) if k not in declared] if first else []
    if unknown:
        problems.append(f"this notebook has no parameter{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}; "
                        + (f"its parameters are: {', '.join(declared)}" if declared else "it takes no parameters"))
    checked = {}
    for name, annotation in declared.items():
        if name not in namespace:
            problems.append(f"parameter {name!r} is declared but has no value")
            continue
        try:
            checked[name] = coerce(name, namespace[name], annotation)
            if name in SIZE_TWINS and checked[name] is not None:  # a run's size: its RunConfig range too
                coerce(name, checked[name], SIZE_TWINS[name])
        except ParameterError as exc:
            problems.append(str(exc))
    problems += [msg for rule in rules if (msg := rule.problem(checked)) is not None]
    if problems:
        raise ParameterError("; ".join(problems) if len(problems) == 1 else
                             "bad notebook parameters:\n  - " + "\n  - ".join(problems))
    namespace.update(checked)
    namespace[CHECKED] = True
    namespace[GIVEN] = dict(checked)  # the values this run was given, kept for the chapter's "Run this chapter" box
    return checked


#: Name under which :func:`check_parameters` keeps the checked values in the notebook's namespace (private:
#: never taken for a parameter).
GIVEN = "_maskfed_parameters"
#: Set in a notebook's namespace by its first :func:`check_parameters` (private: no parameter can clash with it).
CHECKED = "_maskfed_parameters_checked"


#: A jupytext MyST notebook's code cell tagged ``parameters``; group 1: its source.
PARAMETERS_CELL = re.compile(r"```\{code-cell\}[^\n]*\n:tags: \[[^\]]*\bparameters\b[^\]]*\]\n(.*?)\n?```", re.S)


def declared_in(source: str) -> list[dict]:
    """The parameters a chapter's parameters cell declares, read from its MyST source text: one dict per
    annotated assignment, in order, with ``name``, ``default`` (the value's source text) and ``meaning``
    (the line's comment, "" without one).

    Raises:
        ValueError: the text has no code cell tagged ``parameters``.
    """
    import io
    import tokenize

    match = PARAMETERS_CELL.search(source)
    if match is None:
        raise ValueError("the notebook has no code cell tagged 'parameters'")
    cell = match.group(1)
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(cell + "\n").readline) if tok.type == tokenize.COMMENT}
    return [{"name": node.target.id, "default": ast.get_source_segment(cell, node.value),
             "meaning": comments.get(node.lineno, "")}
            for node in ast.parse(cell).body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None]


def _given(name: str, namespace: dict | None) -> tuple[list[dict], dict, dict]:
    """The rows of :func:`declared_in` for chapter ``name`` (each with ``shown``, its default as source text,
    and ``build``, this build's value as ``repr``), the values given where they differ from the defaults
    (``profile`` aside), and the notebook's annotations."""
    from maskfed.paths import REPO_ROOT

    rows = declared_in((REPO_ROOT / "notebooks" / f"{name}.md").read_text())
    namespace = namespace or {}
    values = namespace.get(GIVEN, {})  # what check_parameters was given, before any cell changed it
    given = {}
    for r in rows:
        try:
            default = ast.literal_eval(r["default"])
        except (ValueError, SyntaxError):
            default = r["default"]
        value = values.get(r["name"], default)
        r["shown"], r["build"] = (repr(default) if default is not r["default"] else r["default"]), repr(value)
        if r["name"] in values and value != default and r["name"] != "profile":
            given[r["name"]] = value
    return rows, given, namespace.get("__annotations__", {})


def run_command(name: str, namespace: dict | None = None) -> str:
    """The shell command that executes chapter ``name`` with this build's parameters (from ``namespace``, the
    executed notebook's globals; None: the defaults) where they differ from the chapter's defaults.

    Raises:
        FileNotFoundError: no such chapter.
    """
    import json
    import shlex

    _, given, _ = _given(name, namespace)
    profile = (namespace or {}).get(GIVEN, {}).get("profile")
    argv = [".venv/bin/python", "-m", "maskfed.book.notebooks", *(["--profile", profile] if profile else []), name]
    for k, v in given.items():  # a list or a dict as JSON, which the chapter's check reads back (parse_text)
        try:
            text = json.dumps(v) if isinstance(v, (list, tuple, dict)) else str(v)
        except TypeError:
            text = str(v)
        argv += ["-p", k, text]
    return shlex.join(argv)


def parameter_table(name: str, namespace: dict | None = None) -> pd.DataFrame:
    """The parameters chapter ``name`` declares in its parameters cell, one row each: ``parameter``, ``type and
    range`` (:func:`type_name` of its annotation, "" when ``namespace`` has none), ``default`` (source text),
    ``this build`` (the value this build was given, as ``repr``) and ``meaning`` (the line's comment); no rows
    for a chapter without parameters.

    Raises:
        FileNotFoundError: no such chapter.
    """
    rows, _, kinds = _given(name, namespace)
    return pd.DataFrame([{"parameter": r["name"], "type and range": type_name(kinds[r["name"]]) if r["name"] in kinds
                          else "", "default": r["shown"], "this build": r["build"], "meaning": r["meaning"]}
                         for r in rows], columns=["parameter", "type and range", "default", "this build", "meaning"])
