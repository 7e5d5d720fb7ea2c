"""Check and coerce a notebook's papermill parameters, once, before any compute.

Each notebook's parameters cell declares its parameters with type annotations,

    from typing import Optional       # papermill --help-notebook reads Optional[int], not int | None
    profile: str = "cpu"              # smoke | cpu | paper
    block_sizes: list[int] = [3, 4, 5]
    n_draws: Optional[int] = None

and the cell right after it (after the cell papermill injects) calls

    from maskfed.book import params
    params.check_parameters(globals())

``papermill -p`` passes lists, dicts and numbers it cannot parse itself as strings
(``-p block_sizes "[4, 4, 4]"`` arrives as the string ``"[4, 4, 4]"``); those are parsed
as a Python literal or else as YAML (``yaml.safe_load``) and validated against the annotation with pydantic in strict
mode (an int is accepted for a float; nothing else is converted). A value of the wrong
type, or a name papermill injected that the notebook does not declare, stops the notebook
with one :class:`ParameterError` naming every bad parameter and what is allowed.
"""

from __future__ import annotations

import ast
import types
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

#: Names an IPython kernel puts in a notebook's namespace that are not parameters
#: (IPython's own ``user_ns_hidden`` is used as well when running in a kernel).
KERNEL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})


class ParameterError(ValueError):
    """A notebook parameter has the wrong type, or is not declared by the notebook."""


def type_name(annotation: Any) -> str:
    """A reader's name for a type annotation: ``int``, ``list[int]``, ``float | None``."""
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("NoneType", "None")


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
    """``value`` checked against ``annotation``; a string the annotation does not accept is
    first parsed (:func:`parse_text`; this is how ``papermill -p`` hands over lists, dicts and
    some numbers).

    Args:
        name: the parameter's name (for the message).
        value: the value found in the notebook's namespace.
        annotation: the declared type, e.g. ``int``, ``list[int]``, ``float | None``,
            ``dict[str, Any]``.

    Returns:
        The value, converted where the type allows it losslessly (int to float; a parsed string).

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
    details = dict.fromkeys(f"{name}{''.join(f'[{i}]' for i in e['loc'] if isinstance(i, int))}: {e['msg'].lower()}"
                            for e in error.errors())
    where = "; ".join(list(details)[:3])
    raise ParameterError(f"parameter {name!r} must be {type_name(annotation)}; got {value!r} "
                         f"({type(value).__name__}) [{where}]") from None


def _hidden_names() -> set[str]:
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: no kernel names to hide
        return set(KERNEL_NAMES)
    shell = get_ipython()
    return set(KERNEL_NAMES) | (set(shell.user_ns_hidden) if shell is not None else set())


def user_names(namespace: dict) -> list[str]:
    """Names in ``namespace`` that a parameters cell or papermill could have bound: not private
    (``_x``), not kernel names, and not modules, functions, classes or ``typing`` names such as
    ``Optional`` (imported for the annotations; papermill injects only literals)."""
    hidden = _hidden_names()
    return sorted(k for k, v in namespace.items()
                  if not k.startswith("_") and k not in hidden and type(v).__module__ != "typing"
                  and not isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)))


def check_parameters(namespace: dict) -> dict[str, Any]:
    """Check a notebook's parameters against its parameters cell and rebind the coerced values.

    Call it first thing in the cell after the parameters cell, before any import that binds
    a plain value or any compute, as ``params.check_parameters(globals())``. It sees every name
    bound so far, so in an interactive session rerun it only from a fresh kernel ("Restart and
    run all"): run again after later cells, it refuses their variables as undeclared.

    Args:
        namespace: the notebook's globals. The declared parameters are its ``__annotations__``
            (the annotated assignments of the parameters cell); their current values are those
            of the parameters cell or, where given, papermill's injected cell.

    Returns:
        The checked parameters, name to value, in declaration order (also rebound in ``namespace``).

    Raises:
        ParameterError: a name bound in the namespace that the
            parameters cell does not declare (e.g. ``papermill -p alpha 0.5`` on a notebook without
            ``alpha``), with the list of declared parameters; or values of the wrong type, each
            with its name and expected type. All problems are reported in one message.
    """
    declared = dict(namespace.get("__annotations__") or {})
    problems = []
    unknown = [k for k in user_names(namespace) if k not in declared]
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
        except ParameterError as exc:
            problems.append(str(exc))
    if problems:
        raise ParameterError("; ".join(problems) if len(problems) == 1 else
                             "bad notebook parameters:\n  - " + "\n  - ".join(problems))
    namespace.update(checked)
    return checked
