"""The package's import rules, read from the code's own import statements (issue 25): no module imports
another module's private (``_name``) helpers, and the module-level imports form no circle."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        name = ".".join(f.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]):
    """(module-level maskfed modules imported, private names used from other maskfed modules)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top, private, alias = set(), set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if not base.startswith("maskfed"):
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if a.name.startswith("_") and not a.name.startswith("__"):
                    private.add(full)
                target = full if full in modules else base
                if full in modules:
                    alias[a.asname or a.name] = full
                if node in tree.body and target in modules and target != name:
                    top.add(target)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    alias[a.asname or a.name] = a.name
                    if node in tree.body and a.name != name:
                        top.add(a.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in alias
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            private.add(f"{alias[node.value.id]}.{node.attr}")
    return top, private


def test_no_module_uses_another_modules_private_names():
    modules = _modules()
    found = sorted(f"{name} uses {p}" for name, path in modules.items()
                   for p in _imports(name, path, modules)[1])
    assert found == []


def test_module_level_imports_form_no_circle():
    modules = _modules()
    graph = {name: _imports(name, path, modules)[0] for name, path in modules.items()}
    state, circles = {}, []

    def visit(u, stack):
        state[u] = "open"
        for v in sorted(graph.get(u, ())):
            if state.get(v) == "open":
                circles.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif v not in state:
                visit(v, stack + [v])
        state[u] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_the_rules_catch_a_private_import_and_a_circle(tmp_path):
    # prepare: a tiny package in which a imports b's private helper and b imports a back
    pkg = tmp_path / "maskfed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from maskfed.b import _helper\n")
    (pkg / "b.py").write_text("import maskfed.a\n\ndef _helper():\n    pass\n")
    modules = {"maskfed": pkg / "__init__.py", "maskfed.a": pkg / "a.py", "maskfed.b": pkg / "b.py"}
    # execute / assert
    assert _imports("maskfed.a", modules["maskfed.a"], modules) == ({"maskfed.b"}, {"maskfed.b._helper"})
    assert _imports("maskfed.b", modules["maskfed.b"], modules) == ({"maskfed.a"}, set())
