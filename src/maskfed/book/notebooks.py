"""Execute the book's notebooks (jupytext MyST files) with papermill.

papermill cannot read jupytext text files, so each ``notebooks/<name>.md`` is
converted in memory to ``.ipynb`` and executed into ``book/nb/<name>.ipynb``
with the given profile (and any other parameters).

    python -m maskfed.book.notebooks --profile cpu                 # all, in book order
    python -m maskfed.book.notebooks --profile smoke table1_local_protocol
    python -m maskfed.book.notebooks --profile smoke stage_or_sampling -p branch_rounds 0
    python -m maskfed.book.notebooks --profile smoke --out-dir /tmp/nb theory_02_prop1 -p n_scales 5
    python -m maskfed.book.notebooks --profile cpu --jobs 2          # two at a time, as make book runs them

A chapter is executed again only when something it depends on has changed (:func:`execution_key`);
``--force`` executes it anyway. Bad input ends as one error line (exit status 2), Ctrl-C as one line (130).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import sys
import threading
import tempfile
import time
from pathlib import Path

import yaml

from maskfed.engine.config import ConfigError, load_profile, PROFILES
from maskfed.engine.config import MAX_WORKERS
from maskfed.paths import absolute_env, REPO_ROOT, results_dir

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
OUT_DIR = REPO_ROOT / "book" / "nb"
#: Where the runner keeps each chapter's :func:`execution_key` from its last successful execution (in the out dir).
KEYS_FILE = ".execution-keys.json"


def _tree_digest(root: Path, pattern: str = "*") -> str:
    """SHA-256 over the relative path, size and modification time of every file under ``root`` matching
    ``pattern``, hidden files and folders left out."""
    h = hashlib.sha256()
    if root.is_dir():
        for path in sorted(root.rglob(pattern)):
            rel = path.relative_to(root)
            if path.is_file() and not any(part.startswith(".") for part in rel.parts):
                st = path.stat()
                h.update(f"{rel.as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _results_digest() -> str:
    """:func:`_tree_digest` of the run folders and the run archive (where it lies outside them)."""
    from maskfed.studies.archive import archive_dir

    roots = [results_dir()] + [r for r in [archive_dir()] if not r.is_relative_to(results_dir())]
    return "".join(_tree_digest(r) for r in roots)


def execution_key(name: str, parameters: dict, *, results: str | None = None) -> str:
    """What a chapter's executed page depends on, as one SHA-256 (hex): its source, the ``parameters`` it is
    given, the package's code and the installed versions of the packages, and the results on disk (``results``:
    a precomputed :func:`_results_digest`; None: computed now)."""
    from maskfed import provenance

    h = hashlib.sha256()
    h.update((NOTEBOOK_DIR / f"{name}.md").read_bytes())
    h.update(json.dumps(parameters, sort_keys=True, default=str).encode())
    h.update(_tree_digest(REPO_ROOT / "src" / "maskfed", "*.py").encode())
    h.update(json.dumps(provenance.package_versions(), sort_keys=True).encode())
    h.update((results if results is not None else _results_digest()).encode())
    return h.hexdigest()


def read_keys(out_dir: Path) -> dict:
    """The execution keys kept in ``out_dir`` (:data:`KEYS_FILE`); {} when absent or unreadable."""
    try:
        return json.loads((out_dir / KEYS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def up_to_date(names: list[str], given: dict, out_dir: Path) -> list[str]:
    """The chapters of ``names`` whose executed page in ``out_dir`` was made from what they depend on now
    (their :func:`execution_key` with parameters ``given`` equals the one kept at their last execution)."""
    keys, results = read_keys(out_dir), _results_digest()
    return [n for n in names if (out_dir / f"{n}.ipynb").exists()
            and keys.get(n) == execution_key(n, _given_to(n, given), results=results)]


def _given_to(name: str, given: dict) -> dict:
    """The parameters a chapter is given: ``given`` less the book-wide ones (:data:`BOOK_WIDE`) the chapter does
    not declare (read from its parameters cell, :data:`maskfed.book.params.PARAMETERS_CELL`, without executing it)."""
    from maskfed.book.params import PARAMETERS_CELL

    cell = PARAMETERS_CELL.search((NOTEBOOK_DIR / f"{name}.md").read_text())
    declared = set(re.findall(r"^(\w+)\s*[:=]", cell.group(1), re.M)) if cell else set()
    return {k: v for k, v in given.items() if k in declared or k not in BOOK_WIDE}


def _toc_files() -> tuple[dict, list[str]]:
    """``book/_toc.yml`` and its files in order, the root first."""
    toc = yaml.safe_load((REPO_ROOT / "book" / "_toc.yml").read_text())
    return toc, [toc["root"]] + [ch["file"] for part in toc.get("parts", []) for ch in part["chapters"]]


def toc_of_pages(out_dir: Path = OUT_DIR) -> dict:
    """``book/_toc.yml`` cut to the chapters executed so far (the book's other pages stay), its root the first
    executed chapter where the book's own has not run.

    Raises:
        FileNotFoundError: no chapter of the table of contents has been executed.
    """
    toc, files = _toc_files()
    book = REPO_ROOT / "book"

    def present(f: str) -> bool:
        return (book / f"{f}.ipynb").exists() or (book / f"{f}.md").exists()

    executed = [f for f in files if f.startswith("nb/") and present(f)]
    if not executed:
        raise FileNotFoundError(f"no executed chapter in {_shown(out_dir)}: run one first")
    root = toc["root"] if present(toc["root"]) else executed[0]
    parts = [{**part, "chapters": [ch for ch in part["chapters"] if present(ch["file"]) and ch["file"] != root]}
             for part in toc.get("parts", [])]
    return {**toc, "root": root, "parts": [p for p in parts if p["chapters"]]}


def build_html(out_dir: Path = OUT_DIR) -> Path:
    """Build the book's HTML from the chapters executed so far (:func:`toc_of_pages`); returns the HTML folder.

    Raises:
        FileNotFoundError: no executed chapter; subprocess.CalledProcessError: the build failed.
    """
    import subprocess

    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=REPO_ROOT / "book", prefix="._toc-", delete=False) as f:
        yaml.safe_dump(toc_of_pages(out_dir), f, sort_keys=False, allow_unicode=True)
    try:
        jb = Path(sys.executable).with_name("jupyter-book")
        subprocess.run([str(jb), "build", str(REPO_ROOT / "book"), "--toc", f.name, "--quiet"], check=True)
    finally:
        Path(f.name).unlink(missing_ok=True)
    return REPO_ROOT / "book" / "_build" / "html"


def book_order() -> list[str]:
    """Notebook names in the order of ``book/_toc.yml`` (the root first)."""
    return [Path(f).name for f in _toc_files()[1] if (NOTEBOOK_DIR / f"{Path(f).name}.md").exists()]


def hide_injected_parameters(nb) -> None:
    """Tag papermill's injected-parameters cell of ``nb`` (an ``nbformat.NotebookNode``) ``remove-cell``, in place;
    where the chapter shows its parameters cell, append the values given for this build to it as a comment."""
    def tags(cell):
        return cell.setdefault("metadata", {}).setdefault("tags", [])

    params = next((c for c in nb.cells if "parameters" in tags(c)), None)
    for cell in nb.cells:
        if "injected-parameters" not in tags(cell):
            continue
        if "remove-cell" not in tags(cell):
            cell["metadata"]["tags"] = tags(cell) + ["remove-cell"]
        given = [line for line in cell["source"].splitlines() if line.strip() and not line.startswith("#")]
        shown = params is not None and not any(t in tags(params) for t in ("remove-cell", "remove-input"))
        if shown and given:
            params["source"] = (params["source"].rstrip("\n") + "\n\n# given for this build:\n"
                                + "\n".join(f"# {line}" for line in given))


#: The hidden first cell of every chapter the runner executes: the figure defaults, and the flag that tells
#: :func:`maskfed.book.glue_all` the chapter is being built into the book (so it shows no table of its values).
SETUP_SOURCE = ("from maskfed.book.plots import use_book_style as _use_book_style\n_use_book_style()\n"
                "import maskfed.book as _book\n_book.IN_BOOK_BUILD = True")


def add_book_setup(nb) -> None:
    """Insert, in place, the hidden :data:`SETUP_SOURCE` cell before a chapter's first cell."""
    import nbformat

    nb.cells.insert(0, nbformat.v4.new_code_cell(SETUP_SOURCE, metadata={"tags": ["remove-cell"]}))


#: A chapter's inline number: ``{eval}`name``` or ``{eval}`f"{name:spec}"``` (jupyterlab-myst evaluates it in the
#: kernel; the book build reads it as ``{glue:text}`name``` or ``{glue:text}`name:spec```).
EVAL_ROLE = re.compile(r'\{eval\}`(?:(?P<name>[A-Za-z_]\w*)|f"\{(?P<fname>[A-Za-z_]\w*):(?P<spec>[^}"`]+)\}")`')


def evals_to_glue(nb, *, name: str) -> int:
    """Turn, in place, each Markdown cell's ``{eval}`` roles (:data:`EVAL_ROLE`) into ``{glue:text}`` and insert
    after the cell a hidden check that the chapter has glued those names by then (:func:`maskfed.book.glued_before`);
    returns how many roles.

    Raises:
        ValueError: an ``{eval}`` role of another form (the book cannot build it), naming the chapter and the role.
    """
    import nbformat

    count, cells = 0, []
    for cell in nb.cells:
        cells.append(cell)
        if cell.get("cell_type") != "markdown" or "{eval}" not in cell["source"]:
            continue
        names = [m["name"] or m["fname"] for m in EVAL_ROLE.finditer(cell["source"])]
        first = f"{name}: the text " + repr(cell["source"].strip().splitlines()[0][:60] + "...")
        cell["source"] = EVAL_ROLE.sub(lambda m: "{glue:text}`" + (m["name"] or f"{m['fname']}:{m['spec']}") + "`",
                                       cell["source"])
        if "{eval}" in cell["source"]:
            bad = cell["source"][cell["source"].index("{eval}"):][:60]
            raise ValueError(f"{name}: an {{eval}} role must read a glued name, {{eval}}`name` or "
                             f'{{eval}}`f"{{name:spec}}"`; got {bad!r}')
        cells.append(nbformat.v4.new_code_cell(f"_book.glued_before({sorted(set(names))!r}, {first!r})",
                                               metadata={"tags": ["remove-cell"]}))
        count += len(names)
    nb.cells = cells
    return count


def _only_glue(source: str) -> bool:
    """True when every statement of a code cell's source is a ``glue(...)`` or ``x.glue(...)`` call; False for an
    empty or unparsable cell."""
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
                              and getattr(st.value.func, "id", getattr(st.value.func, "attr", None)) == "glue"
                              for st in body)


def hide_glue_only_cells(nb) -> int:
    """Tag, in place, every code cell made only of ``glue(...)`` calls ``remove-cell``; returns how many."""
    hidden = 0
    for cell in nb.cells:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if cell.get("cell_type") == "code" and "remove-cell" not in tags and _only_glue(cell["source"]):
            tags.append("remove-cell")
            hidden += 1
    return hidden


#: Tags under which a cell's outputs never reach a page.
_HIDDEN_OUTPUT_TAGS = ("remove-cell", "remove-output", "remove_cell", "remove_output")
#: A line of a Python warning as the warnings module writes it to stderr (``path:line: XWarning: ...``).
_WARNING_LINE = re.compile(r"^\S.*:\d+: \w*Warning: ")


def _only_warnings(text: str) -> bool:
    """True when every line of a stderr text is a Python warning or the source line under it."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and _WARNING_LINE.match(lines[0]) is not None and all(
        _WARNING_LINE.match(line) or line.startswith((" ", "\t")) for line in lines)


def scrub_machine_paths(nb, *, name: str) -> None:
    """Remove from an executed notebook ``nb`` (chapter ``name``), in place, what tells where the building machine
    keeps its files: paths in papermill's parameters, stream and error outputs go to their last component
    (:func:`maskfed.book.without_paths`); stderr of hidden cells, or holding only Python warnings, is dropped; any
    other mention of the repository root becomes a relative path."""
    from maskfed.book import without_paths

    meta = nb.metadata.get("papermill")
    if meta is not None:
        meta["input_path"] = f"notebooks/{name}.md"
        meta["output_path"] = f"book/nb/{name}.ipynb"
        for key in ("parameters", "default_parameters"):
            if isinstance(meta.get(key), dict):
                meta[key] = {k: without_paths(v) for k, v in meta[key].items()}
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        hidden = any(t in _HIDDEN_OUTPUT_TAGS for t in cell.get("metadata", {}).get("tags", []))
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                if out.get("name") == "stderr" and (hidden or _only_warnings(out["text"])):
                    continue
                out["text"] = without_paths(out["text"])
            elif out.get("output_type") == "error":
                out["evalue"] = without_paths(out.get("evalue", ""))
                out["traceback"] = [without_paths(t) for t in out.get("traceback", [])]
            kept.append(out)
        cell["outputs"] = kept

    root = str(REPO_ROOT)

    def relative(value):
        if isinstance(value, str):
            return value.replace(root + "/", "").replace(root, ".")
        if isinstance(value, list):
            return [relative(v) for v in value]
        if isinstance(value, dict):
            return type(value)({k: relative(v) for k, v in value.items()})
        return value

    nb.metadata = relative(nb.metadata)
    nb.cells = relative(nb.cells)


#: Parameters ``make book`` gives every notebook; a notebook that does not declare one is not given it.
BOOK_WIDE = ("profile", "data_path")


def execute(name: str, *, profile: str, out_dir: Path = OUT_DIR, parameters: dict | None = None,
            progress: bool = False) -> Path:
    """Execute ``notebooks/<name>.md`` with ``profile`` and further papermill ``parameters`` (:func:`_given_to`)
    into ``out_dir/<name>.ipynb``; ``progress``: papermill's bar of the cells executed.

    Raises:
        ValueError: unknown profile or notebook (before anything runs);
        papermill.PapermillExecutionError: a cell failed (e.g. a live check's assert); the notebook,
            up to that cell, is then at :func:`failed_path` and ``out_dir/<name>.ipynb`` is unchanged.
    """
    import jupytext
    import nbformat
    import papermill

    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {list(PROFILES)}; got {profile!r}")
    src = NOTEBOOK_DIR / f"{name}.md"
    if not src.exists():
        known = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.md"))
        raise ValueError(f"notebook must be one of {known}; got {name!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    absolute_env()  # the kernel runs in notebooks/: a relative MASKFED_RESULTS_DIR must keep meaning this directory
    out, failed = out_dir / f"{name}.ipynb", failed_path(name, out_dir)
    running = out_dir / f".{name}.running.ipynb"
    with tempfile.TemporaryDirectory() as tmp:
        ipynb = Path(tmp) / f"{name}.ipynb"
        nb = jupytext.read(src)
        evals_to_glue(nb, name=name)
        add_book_setup(nb)
        hide_glue_only_cells(nb)
        jupytext.write(nb, ipynb)
        # any parameter but the book-wide ones goes as given: the notebook's own check refuses an undeclared one
        given = _given_to(name, {"profile": profile, **(parameters or {})})
        ok = False
        kernel_log = Path(tmp) / "kernel-stderr.log"
        try:
            with open(kernel_log, "wb") as log:
                papermill.execute_notebook(str(ipynb), str(running), parameters=given,
                                           kernel_name="python3", language="python", progress_bar=progress,
                                           cwd=str(NOTEBOOK_DIR), kernel_manager_class=_kernel_manager(log))
            ok = True
        finally:  # a notebook that stopped in a cell is written up to it: scrub that one too
            if running.exists():
                nb = nbformat.read(running, as_version=4)
                hide_injected_parameters(nb)
                scrub_machine_paths(nb, name=name)
                nbformat.write(nb, running)
                # only a notebook that ran to its end replaces the book's page; a failed one is kept
                # beside it (not in the table of contents, so never published)
                os.replace(running, out if ok else failed)
                if ok:
                    failed.unlink(missing_ok=True)
    return out


def _kernel_manager(log):
    """A kernel manager whose kernel writes its own log lines to the open file ``log``, not this process's stderr."""
    from jupyter_client.manager import AsyncKernelManager, KernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw.setdefault("stderr", log)
            return await KernelManager._async_start_kernel(self, **kw)

    return QuietKernelManager


def failed_path(name: str, out_dir: Path = OUT_DIR) -> Path:
    """Where :func:`execute` keeps a notebook that stopped in a cell (the book's page stays as it was)."""
    return out_dir / f"{name}.failed.ipynb"


def main(argv: list[str] | None = None) -> int:
    """Execute notebooks; bad input or a failed cell ends as one message. Exit status: 0 all executed; 2 bad input
    (checked before any runs: profile, names, paths, ``--out-dir``, :func:`incomplete_archives`) or a cell stopped on
    bad input (:data:`_INPUT_ERROR_NAMES`); 1 a cell failed otherwise; 130 Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m maskfed.book.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (default: all, in book order)")
    parser.add_argument("--profile", default="cpu", help=f"one of {', '.join(PROFILES)}")
    parser.add_argument("--data-path", default=None, help="CIFAR-10 archive or folder")
    parser.add_argument("--out-dir", default=str(OUT_DIR), help="where the executed notebooks go (default: book/nb)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a further notebook parameter, as papermill's -p (the value as text: the "
                             "notebook's own check parses and refuses it)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="notebooks executed at once, each in a process of its own with one torch thread "
                             "(default 1; make book gives 2, one per core of the 2-core machine it was timed on)")
    parser.add_argument("--html", action="store_true",
                        help="then build the book's HTML from the chapters executed so far and print the page's path "
                             "(with the default --out-dir)")
    parser.add_argument("--force", action="store_true",
                        help="execute every named chapter, even one whose page is up to date (execution_key)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one notebook of a --jobs run
    args = parser.parse_args(argv)
    if not 1 <= args.jobs <= MAX_WORKERS:
        parser.error(f"--jobs must be an integer from 1 to {MAX_WORKERS}; got {args.jobs}")
    try:
        absolute_env()  # also refuses MASKFED_RESULTS_DIR= and the like, before any notebook runs
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.profile not in PROFILES:
        parser.error(f"--profile must be one of {list(PROFILES)}; got {args.profile!r}")
    if not load_profile(args.profile).builds_book:
        book = [p for p in PROFILES if load_profile(p).builds_book]
        parser.error(f"profile {args.profile!r} only computes runs to archive (its experiments: "
                     f"{', '.join(load_profile(args.profile).experiments)}); build the book with one of {book}")
    known = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.md"))
    unknown = [n for n in args.names if n not in known]
    if unknown:  # all names checked before the first notebook runs
        parser.error(f"notebook(s) {unknown} not found in {NOTEBOOK_DIR.name}/; choose from {known}")
    if args.data_path:  # papermill runs each notebook in notebooks/: a relative path must not move with it
        args.data_path = str(Path(args.data_path).expanduser().absolute())
    params = {"data_path": args.data_path} if args.data_path else {}
    params |= dict(args.parameter)
    # papermill warns "Passed unknown parameter" itself; the notebook's own check then says it in full
    logging.getLogger("papermill").setLevel(logging.ERROR)
    if args.data_path:  # e.g. a synthetic profile reads no data: refuse before any notebook runs
        try:
            prof = load_profile(args.profile, data_path=args.data_path)
            prof.run(prof.seeds[0])
        except ConfigError as exc:
            parser.error(f"--data-path: {exc}")
    out_dir = Path(args.out_dir).expanduser().absolute()
    unwritable = out_dir_problem(out_dir)
    if unwritable:
        print(f"{parser.prog}: error: --out-dir {out_dir}: {unwritable}", file=sys.stderr)
        return 2
    names = args.names or book_order()
    given = {"profile": args.profile, **params}
    if not args.force and not args.child:
        fresh = up_to_date(names, given, out_dir)
        if fresh:
            print(f"up to date, not executed again: {', '.join(fresh)} (--force executes them)", file=sys.stderr)
        names = [n for n in names if n not in fresh]
        if not names:
            return _html(args, fresh) if args.html else 0
    if not args.child:  # a --jobs child's parent has named them already
        report_damaged_archive()
        if any(n in ARCHIVE_CHAPTERS for n in names):
            incomplete = incomplete_archives(args.profile)
            for exc in incomplete:
                print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            if incomplete:
                return 2
    if args.jobs > 1 and len(names) > 1:
        child_args = ["--profile", args.profile, "--out-dir", str(out_dir),
                      *(["--data-path", args.data_path] if args.data_path else []),
                      *(x for k, v in args.parameter for x in ("-p", k, v))]
        status = run_parallel(names, child_args, jobs=args.jobs)
        if status == 0:
            _keep_keys(names, given, out_dir)
            if args.html:
                return _html(args, names)
        return status
    from maskfed.engine import runner  # SIGTERM (``timeout``, ``kill``) and SIGHUP stop a chapter as Ctrl-C does

    for name in names:
        doing = "executing"
        try:
            with runner.stop_on_signals(), interrupt_silences_logging():
                if not args.child:  # the runs first, here, with their bars: in the kernel they would train silently
                    doing = "training the runs of"
                    train_first(name, args.profile, params)
                    doing = "executing"
                    print(f"executing {name} ({args.profile})", flush=True)
                t0 = time.perf_counter()  # the notebook's own time, its runs' training aside
                out = execute(name, profile=args.profile, parameters=params, out_dir=out_dir,
                              progress=not args.child and sys.stderr.isatty())
        except KeyboardInterrupt as exc:
            logging.disable(logging.CRITICAL)  # what a dying kernel logs would follow the one line
            print(f"\nmaskfed.book.notebooks: {runner.interrupted_message(exc)} while {doing} {name}; the book's "
                  f"page {name}.ipynb is unchanged (finished runs are kept: run the same command again to go on)",
                  file=sys.stderr)
            return runner.exit_status(exc)
        except Exception as exc:
            if (failed := _cell_failure(exc)) is None:
                if type(exc).__name__ not in _INPUT_ERROR_NAMES:
                    raise
                print(f"maskfed.book.notebooks: error: {name} stopped: {type(exc).__name__}: {exc}\n"
                      f"  (while training its runs; the book's page {name}.ipynb is unchanged)", file=sys.stderr)
                return 2
            ename, evalue = failed
            print(f"maskfed.book.notebooks: error: {name} stopped: {ename}: {evalue}\n"
                  f"  (the notebook up to the failing cell is {_shown(failed_path(name, out_dir))}; "
                  f"the book's page {name}.ipynb is unchanged)",
                  file=sys.stderr)
            return 2 if ename in _INPUT_ERROR_NAMES else 1
        print(f"executed {name} ({args.profile}) in {time.perf_counter() - t0:.1f} s -> {out.name}", file=sys.stderr)
    if not args.child:
        _keep_keys(names, given, out_dir)
        if args.html:
            return _html(args, names)
    return 0


def experiments_of(name: str) -> tuple[str, ...]:
    """The experiments chapter ``name`` runs: those its parameter check names (``params.run_settings_rule(...)``)."""
    rule = re.search(r"run_settings_rule\(([^)]*)\)", (NOTEBOOK_DIR / f"{name}.md").read_text())
    return tuple(re.findall(r'"(\w+)"', rule.group(1))) if rule else ()


def train_first(name: str, profile: str, given: dict) -> None:
    """Train (or reuse) the runs of chapter ``name`` (:func:`experiments_of`) in this process, with progress bars,
    before the notebook executes (in the kernel they would train without a word on the terminal); the notebook then
    reuses them. ``given``: the papermill parameters, checked here as the notebook's own first cell checks them;
    parameters it would refuse train nothing (the notebook then names them).

    Raises:
        what :func:`maskfed.studies.experiments.run` raises (e.g. ``TrainingDiverged``, ``DataUnavailableError``).
    """
    from maskfed.book import params
    from maskfed.studies import experiments

    wanted = experiments_of(name)
    if not wanted:
        return
    namespace: dict = {}
    cell = params.PARAMETERS_CELL.search((NOTEBOOK_DIR / f"{name}.md").read_text()).group(1)
    exec(compile(cell, name, "exec", dont_inherit=True), namespace)  # annotations evaluated, as in the kernel
    namespace |= {"profile": profile, **given}
    try:
        values = params.check_parameters(namespace, rules=[params.run_settings_rule(*wanted)])
    except params.ParameterError:
        return
    prof = load_profile(profile, data_path=values.get("data_path"), **values.get("overrides", {}))
    n_runs = len({c.key() for e in wanted for c in prof.experiment_configs(e)})  # a run two of them share, once
    print(f"{name}: training its runs first ({n_runs} in all; finished runs are reused)", flush=True)
    for experiment in wanted:
        experiments.run(prof, experiment, workers=values.get("workers"), progress=True)


def _html(args, names: list[str]) -> int:
    """``--html``: build the pages executed so far (:func:`build_html`) and print where ``names``' pages are."""
    if Path(args.out_dir).expanduser().absolute() != OUT_DIR:
        print(f"maskfed.book.notebooks: error: --html builds the book from {_shown(OUT_DIR)}; drop --out-dir",
              file=sys.stderr)
        return 2
    html = build_html(OUT_DIR)
    for name in names:
        print(f"open {_shown(html / 'nb' / f'{name}.html')}", file=sys.stderr)
    return 0


def _keep_keys(names: list[str], given: dict, out_dir: Path) -> None:
    """Merge the execution keys of the chapters just executed, from the results as they are once all have
    finished, into ``out_dir``'s :data:`KEYS_FILE` (written whole, then renamed)."""
    results = _results_digest()
    merged = read_keys(out_dir) | {n: execution_key(n, _given_to(n, given), results=results) for n in names}
    tmp = out_dir / (KEYS_FILE + ".tmp")
    tmp.write_text(json.dumps(merged, indent=1, sort_keys=True))
    os.replace(tmp, out_dir / KEYS_FILE)


def run_parallel(names: list[str], child_args: list[str], *, jobs: int) -> int:
    """Execute ``names`` with up to ``jobs`` at once, each by ``python -m maskfed.book.notebooks <child_args> <name>``
    in a process of its own with one torch and BLAS thread; its lines reach stderr when it ends. After a failure no
    further one starts, and the first failure's exit status (:func:`main`'s) is returned.

    Raises:
        ValueError: ``jobs`` below 1.
    """
    import concurrent.futures
    import subprocess

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1; got {jobs}")
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    failed: list[int] = []

    def one(name: str) -> int:
        if failed:  # after a failure nothing new starts
            return 0
        done = subprocess.run([sys.executable, "-m", "maskfed.book.notebooks", "--child", *child_args, name],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stderr.write(done.stdout)
        sys.stderr.flush()
        if done.returncode != 0:
            failed.append(done.returncode)
        return done.returncode

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            list(pool.map(one, names))
        except KeyboardInterrupt:  # Ctrl-C reached the children too: each says which notebook it stopped
            failed.insert(0, 130)
            pool.shutdown(wait=True, cancel_futures=True)
    return failed[0] if failed else 0


@contextlib.contextmanager
def interrupt_silences_logging():
    """While inside, Ctrl-C (SIGINT) first turns all logging off (what nbclient and asyncio log of the kernel's
    death would follow :func:`main`'s one line), then raises KeyboardInterrupt; nothing outside the main thread or
    where SIGINT is ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        yield
        return

    def on_sigint(signum, frame):
        logging.disable(logging.CRITICAL)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (as the book's pages are named), else as it is."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


#: Exception names raised inside a notebook that mean bad input rather than a bug (a diverged run:
#: too large an lr; a damaged run folder; a write that failed for lack of space).
_INPUT_ERROR_NAMES = ("ParameterError", "ConfigError", "ValueError", "FileNotFoundError", "DataUnavailableError",
                      "DataReadError", "TrainingDiverged", "DamagedRun", "RunMismatch", "WriteFailed",
                      "IncompleteArchive", "InconsistentRun")


def out_dir_problem(out_dir: Path) -> str | None:
    """Why executed notebooks cannot be written into ``out_dir`` (made if absent); None when they can."""
    if out_dir.exists() and not out_dir.is_dir():
        return "not a folder"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        return f"cannot write there ({exc.strerror or type(exc).__name__})"
    return None


#: The chapters that read the run archive (:func:`incomplete_archives` is checked before they run).
ARCHIVE_CHAPTERS = ("verdict", "table1_local_protocol", "table2_heterogeneity", "provenance", "masked_training")


def incomplete_archives(live: str) -> list:
    """:class:`maskfed.studies.archive.IncompleteArchive` of every archive the book reads (but ``live``'s) that
    holds some of its profile's runs but not all."""
    from maskfed.studies import archive

    out = []
    for profile in [p for p in archive.BOOK_PROFILES if p != live] + ["cpu-masked"]:
        try:
            archive.require_complete(profile)
        except archive.IncompleteArchive as exc:
            out.append(exc)
    return out


def report_damaged_archive() -> None:
    """Name on stderr every malformed folder of the run archive the book reads, with the reason."""
    from maskfed.studies import archive

    for profile in archive.BOOK_PROFILES:
        for d in archive.damaged_folders(profile):
            print(f"maskfed.book.notebooks: warning: archived run folder {d.folder} is damaged ({d.reason}); "
                  f"the chapters that read the archive stop until it is re-archived with: "
                  f"{archive.how_to_make(profile)}", file=sys.stderr)


def _cell_failure(exc: BaseException) -> tuple[str, str] | None:
    """(exception name, message) of a papermill cell failure, else None."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        return exc.ename, exc.evalue
    return None


if __name__ == "__main__":
    sys.exit(main())
