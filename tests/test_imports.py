"""The package's import rules, read from the code's own import statements (issue 25): no module imports
another module's private (``_name``) helpers, the module-level imports form no circle, and no import
(at module level or inside a function) climbs the layers of :data:`LAYERS`."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: The package's layers, lowest first: a module may import from its own layer and the layers below.
LAYERS = (
    ("paths", "provenance", "names"),        # where things live; what a run's code and packages are; profiles' names
    ("core",),                               # the paper's equations on tensors, no I/O
    ("engine",),                             # config, data, partition, models, cohort, FedAvg, runner
    ("analysis",),                           # summaries, intervals, claims
    ("studies",),                            # experiment grids, stage, factor axes, archive
    ("derivation", "integrations", "perf"),  # theory chapters' helpers; Flower, Ray; bench, device check
    ("book",),                               # rendering only
    ("chapters",),                           # each experiment chapter's findings, for its notebook
    ("cli", "entry", "__main__"),            # the command line
)


def _modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        name = ".".join(f.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]):
    """(module-level maskfed modules imported, private names used from other maskfed modules, every maskfed
    module imported anywhere in the file)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top, private, alias, every = set(), set(), {}, set()
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
                if target in modules and target != name:
                    every.add(target)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    alias[a.asname or a.name] = a.name
                    if node in tree.body and a.name != name:
                        top.add(a.name)
                    if a.name != name:
                        every.add(a.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in alias
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            private.add(f"{alias[node.value.id]}.{node.attr}")
    return top, private, every


def _layer(module: str) -> int:
    """Index in :data:`LAYERS` of a ``maskfed.<part>...`` module (the package itself: -1, below all)."""
    part = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    return -1 if not part else len(LAYERS)


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


def test_every_module_has_a_layer_and_no_import_climbs():
    modules = _modules()
    unplaced = sorted(m for m in modules if _layer(m) == len(LAYERS))
    climbs = sorted(f"{name} (layer {_layer(name)}) imports {t} (layer {_layer(t)})" for name, path in modules.items()
                    for t in _imports(name, path, modules)[2] if _layer(t) > _layer(name))
    assert unplaced == [] and climbs == []


def test_no_layer_holds_more_than_30_percent_of_the_lines():
    lines = {}
    for name, path in _modules().items():
        part = name.split(".")[1] if "." in name else ""
        folder = part if (SRC / "maskfed" / part).is_dir() else "(top-level modules)"
        lines[folder] = lines.get(folder, 0) + len(path.read_text().splitlines())
    total = sum(lines.values())
    assert {f: round(n / total, 2) for f, n in lines.items() if n > 0.30 * total} == {}


def test_the_rules_catch_a_private_import_and_a_circle(tmp_path):
    # prepare: a tiny package in which a imports b's private helper and b imports a back
    pkg = tmp_path / "maskfed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from maskfed.b import _helper\n")
    (pkg / "b.py").write_text("import maskfed.a\n\ndef _helper():\n    pass\n")
    modules = {"maskfed": pkg / "__init__.py", "maskfed.a": pkg / "a.py", "maskfed.b": pkg / "b.py"}
    # execute / assert
    assert _imports("maskfed.a", modules["maskfed.a"], modules) == ({"maskfed.b"}, {"maskfed.b._helper"}, {"maskfed.b"})
    assert _imports("maskfed.b", modules["maskfed.b"], modules) == ({"maskfed.a"}, set(), {"maskfed.a"})


def test_the_layer_rule_reads_a_function_level_import_that_climbs(tmp_path):
    # prepare: an engine module that imports a study inside a function
    for part in ("engine", "studies"):
        (tmp_path / "maskfed" / part).mkdir(parents=True)
    run = tmp_path / "maskfed" / "engine" / "run.py"
    run.write_text("def go():\n    from maskfed.studies import stage\n")
    (tmp_path / "maskfed" / "studies" / "stage.py").write_text("")
    modules = {"maskfed.engine.run": run, "maskfed.studies.stage": tmp_path / "maskfed" / "studies" / "stage.py"}
    # execute
    top, _, every = _imports("maskfed.engine.run", run, modules)
    # assert: not a module-level import, but an import all the same, and it climbs
    assert top == set() and every == {"maskfed.studies.stage"}
    assert _layer("maskfed.studies.stage") > _layer("maskfed.engine.run") > _layer("maskfed.core.masking")
    assert _layer("maskfed.cli") == len(LAYERS) - 1 and _layer("maskfed.nowhere") == len(LAYERS)
