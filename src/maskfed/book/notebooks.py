"""Execute the book's notebooks (jupytext MyST files) with papermill.

papermill cannot read jupytext text files, so each ``notebooks/<name>.md`` is
converted in memory to ``.ipynb`` and executed into ``book/nb/<name>.ipynb``
with the given profile (and any other parameters).

    python -m maskfed.book.notebooks --profile cpu                 # all, in book order
    python -m maskfed.book.notebooks --profile smoke table1_local_protocol
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

from maskfed.fl.config import PROFILES, ConfigError, load_profile
from maskfed.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
OUT_DIR = REPO_ROOT / "book" / "nb"


def book_order() -> list[str]:
    """Notebook names in the order of ``book/_toc.yml`` (the root first)."""
    toc = yaml.safe_load((REPO_ROOT / "book" / "_toc.yml").read_text())
    files = [toc["root"]] + [ch["file"] for part in toc.get("parts", []) for ch in part["chapters"]]
    return [Path(f).name for f in files if (NOTEBOOK_DIR / f"{Path(f).name}.md").exists()]


def hide_injected_like_parameters(nb) -> None:
    """Give papermill's injected-parameters cell the ``remove-*`` tags of the notebook's parameters
    cell, in place, so a chapter whose parameters are hidden does not show the injected ones as a
    stray code box (a chapter that shows its parameters keeps showing both).

    Args:
        nb: an executed notebook (``nbformat.NotebookNode``).
    """
    def tags(cell):
        return cell.setdefault("metadata", {}).setdefault("tags", [])

    params = next((c for c in nb.cells if "parameters" in tags(c)), None)
    if params is None:
        return
    hide = [t for t in tags(params) if t.startswith("remove-")]
    for cell in nb.cells:
        if "injected-parameters" in tags(cell):
            cell["metadata"]["tags"] = tags(cell) + [t for t in hide if t not in tags(cell)]


#: Parameters ``make book`` gives every notebook; a notebook that does not declare one is not given it.
BOOK_WIDE = ("profile", "data_path")


def execute(name: str, *, profile: str, out_dir: Path = OUT_DIR, parameters: dict | None = None) -> Path:
    """Execute ``notebooks/<name>.md`` into ``out_dir/<name>.ipynb``.

    Args:
        name: notebook stem, e.g. "table1_local_protocol".
        profile: one of :data:`maskfed.fl.config.PROFILES`.
        out_dir: where the executed notebook goes.
        parameters: further papermill parameters (e.g. ``{"data_path": "..."}``). ``profile`` and
            ``data_path`` (:data:`BOOK_WIDE`) reach only the notebooks that declare them.

    Raises:
        ValueError: unknown profile or notebook (before anything runs);
        papermill.PapermillExecutionError: a cell failed (e.g. a live check's assert).
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
    out = out_dir / f"{name}.ipynb"
    with tempfile.TemporaryDirectory() as tmp:
        ipynb = Path(tmp) / f"{name}.ipynb"
        jupytext.write(jupytext.read(src), ipynb)
        declared = papermill.inspect_notebook(str(ipynb))
        given = {"profile": profile, **(parameters or {})}
        # the book-wide parameters go to the notebooks that read them (a page that computes nothing,
        # like the citation page, declares none); any other parameter goes as given, and the
        # notebook's own check refuses it if it does not declare it
        given = {k: v for k, v in given.items() if k in declared or k not in BOOK_WIDE}
        papermill.execute_notebook(str(ipynb), str(out), parameters=given,
                                   kernel_name="python3", language="python", progress_bar=False,
                                   cwd=str(NOTEBOOK_DIR))
    nb = nbformat.read(out, as_version=4)
    hide_injected_like_parameters(nb)
    nbformat.write(nb, out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Execute notebooks; bad input (profile, notebook name) or a failed cell ends as one message.

    Exit status: 0 all executed; 2 a bad profile or notebook name (checked before any runs), or a
    cell stopped on bad input (ConfigError, ValueError, ...); 1 a cell failed otherwise.
    """
    parser = argparse.ArgumentParser(prog="python -m maskfed.book.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (default: all, in book order)")
    parser.add_argument("--profile", default="cpu", help=f"one of {', '.join(PROFILES)}")
    parser.add_argument("--data-path", default=None, help="CIFAR-10 archive or folder")
    args = parser.parse_args(argv)
    if args.profile not in PROFILES:
        parser.error(f"--profile must be one of {list(PROFILES)}; got {args.profile!r}")
    known = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.md"))
    unknown = [n for n in args.names if n not in known]
    if unknown:  # all names checked before the first notebook runs
        parser.error(f"notebook(s) {unknown} not found in {NOTEBOOK_DIR.name}/; choose from {known}")
    if args.data_path:  # papermill runs each notebook in notebooks/: a relative path must not move with it
        args.data_path = str(Path(args.data_path).expanduser().absolute())
    params = {"data_path": args.data_path} if args.data_path else {}
    if args.data_path:  # e.g. a synthetic profile reads no data: refuse before any notebook runs
        try:
            prof = load_profile(args.profile, data_path=args.data_path)
            prof.run(prof.seeds[0])
        except ConfigError as exc:
            parser.error(f"--data-path: {exc}")
    for name in args.names or book_order():
        t0 = time.perf_counter()
        try:
            out = execute(name, profile=args.profile, parameters=params)
        except Exception as exc:
            failed = _cell_failure(exc)
            if failed is None:
                raise
            ename, evalue = failed
            print(f"maskfed.book.notebooks: error: {name} stopped: {ename}: {evalue}\n"
                  f"  (the executed notebook, up to the failing cell, is {OUT_DIR / (name + '.ipynb')})",
                  file=sys.stderr)
            return 2 if ename in _INPUT_ERROR_NAMES else 1
        print(f"executed {name} ({args.profile}) in {time.perf_counter() - t0:.1f} s -> {out.name}", file=sys.stderr)
    return 0


#: Exception names raised inside a notebook that mean bad input rather than a bug.
_INPUT_ERROR_NAMES = ("ConfigError", "ValueError", "FileNotFoundError", "DataUnavailableError", "DataReadError")


def _cell_failure(exc: BaseException) -> tuple[str, str] | None:
    """(exception name, message) of a papermill cell failure, else None."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        return exc.ename, exc.evalue
    return None


if __name__ == "__main__":
    sys.exit(main())
