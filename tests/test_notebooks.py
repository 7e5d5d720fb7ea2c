"""The book's notebook runner (maskfed.book.notebooks): hiding papermill's injected cell, scrubbing
the build machine's paths from executed notebooks, and a refused parameter ending as one line."""

import json
from pathlib import Path

import nbformat
import pytest

from maskfed.book import notebooks
from maskfed.book.notebooks import hide_injected_parameters, scrub_machine_paths
from maskfed.paths import REPO_ROOT


def _nb(param_tags):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile: str = 'cpu'", metadata={"tags": param_tags}),
                nbformat.v4.new_code_cell("# Parameters\nprofile = 'smoke'\n", metadata={"tags": ["injected-parameters"]}),
                nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["remove-input"]})]
    return nb


def test_injected_cell_is_hidden_like_the_parameters_cell():
    nb = _nb(["parameters", "remove-cell"])
    hide_injected_parameters(nb)
    assert nb.cells[1].metadata.tags == ["injected-parameters", "remove-cell"]
    assert nb.cells[0].source == "profile: str = 'cpu'"  # a hidden parameters cell is left alone
    assert nb.cells[2].metadata.tags == ["remove-input"]  # other cells untouched


def test_shown_parameters_cell_says_what_was_given_and_the_injected_cell_is_hidden():
    # prepare: a derivation chapter shows its parameters cell
    nb = _nb(["parameters"])
    # execute
    hide_injected_parameters(nb)
    # assert: one box shown, with the defaults and the values this build ran with
    assert nb.cells[1].metadata.tags == ["injected-parameters", "remove-cell"]
    assert nb.cells[0].source == ("profile: str = 'cpu'\n\n# given for this build:\n"
                                  "# profile = 'smoke'")


def _executed():
    """An executed-looking notebook with the machine's paths where papermill and libraries put them."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"input_path": "/tmp/tmpab12/intro.ipynb", "output_path": f"{REPO_ROOT}/book/nb/intro.ipynb",
                                "parameters": {"profile": "smoke", "data_path": "/data/x/cifar10-jpeg.tar.gz"}}
    warning = (f"{REPO_ROOT}/.venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found.\n"
               "  from .autonotebook import tqdm as notebook_tqdm\n")
    shown = nbformat.v4.new_code_cell("print(1)", metadata={"tags": ["remove-input"]}, outputs=[
        nbformat.v4.new_output("stream", name="stderr", text=warning),
        nbformat.v4.new_output("stream", name="stderr", text=f"reading {REPO_ROOT}/results/runs/a-1\n"),
        nbformat.v4.new_output("stream", name="stdout", text="1/Δ_S = 2.5\n"),
        nbformat.v4.new_output("display_data", data={"text/html": f"<td>{REPO_ROOT}/x</td></tr>"})])
    hidden = nbformat.v4.new_code_cell("run()", metadata={"tags": ["remove-cell"]}, outputs=[
        nbformat.v4.new_output("stream", name="stderr", text="\rruns:  5%| 1/20\n")])
    nb.cells = [shown, hidden]
    return nb


def test_scrub_leaves_no_path_of_the_build_machine():
    # prepare
    nb = _executed()
    # execute
    scrub_machine_paths(nb, name="intro")
    # assert: nothing names the repository root; parameters kept, paths reduced to the file name
    text = json.dumps(nb)
    assert str(REPO_ROOT) not in text and "/tmp/tmpab12" not in text and "/data/x" not in text
    assert nb.metadata.papermill["parameters"] == {"profile": "smoke", "data_path": "cifar10-jpeg.tar.gz"}
    assert nb.metadata.papermill["input_path"] == "notebooks/intro.md"
    shown, hidden = nb.cells
    # the warning-only stream is gone, the other stderr keeps its message, stdout and HTML are intact
    assert [o.get("text") for o in shown.outputs if o.output_type == "stream"] == ["reading a-1\n", "1/Δ_S = 2.5\n"]
    assert shown.outputs[-1]["data"]["text/html"] == "<td>x</td></tr>"
    assert hidden.outputs == []  # a hidden cell's progress bars never reach a page


def test_a_refused_parameter_ends_as_one_line_and_exit_2(monkeypatch, capsys):
    # prepare: the notebook's own check refuses the parameter in its first cell
    from papermill.exceptions import PapermillExecutionError

    def refuse(name, *, profile, parameters=None, **_):
        assert parameters == {"alpha": "0.5"}
        raise PapermillExecutionError(1, 1, "params.check_parameters(globals())", "ParameterError",
                                      "this notebook has no parameter 'alpha'", ["Traceback ...", "30 lines"])

    monkeypatch.setattr(notebooks, "execute", refuse)
    # execute
    code = notebooks.main(["--profile", "smoke", "table2_heterogeneity", "-p", "alpha", "0.5"])
    # assert
    err = capsys.readouterr().err
    assert code == 2
    assert "ParameterError:" in err and "no parameter 'alpha'" in err and "Traceback" not in err


@pytest.mark.slow
def test_a_failed_notebook_never_replaces_the_books_page(tmp_path):
    # prepare: the book's page from an earlier run that finished
    from papermill.exceptions import PapermillExecutionError

    page = tmp_path / "theory_01_notation.ipynb"
    earlier = "the page of the last finished run"
    page.write_text(earlier)
    # execute: the chapter's own parameter check stops it in its first cell
    with pytest.raises(PapermillExecutionError, match="ParameterError"):
        notebooks.execute("theory_01_notation", profile="smoke", out_dir=tmp_path, parameters={"alpha": "0.5"})
    # assert: the page is untouched; the failed notebook sits beside it, outside the table of contents
    assert page.read_text() == earlier
    failed = notebooks.failed_path("theory_01_notation", tmp_path)
    assert "ParameterError" in failed.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [failed.name, page.name]


@pytest.mark.slow
def test_a_readers_own_settings_lead_table_i_and_pass_its_checks(tmp_path, monkeypatch):
    # the box's command with two changed settings (3 rounds at smoke): every hidden check of the chapter passes
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    out = notebooks.execute("table1_local_protocol", profile="smoke", out_dir=tmp_path,
                            parameters={"overrides": {"rounds": 3, "lr": 0.02}})
    glued = {o["metadata"]["scrapbook"]["name"]: next(iter(o["data"].values())).strip("'")
             for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", [])
             if "scrapbook" in o.get("metadata", {})}
    # the reader's run leads the page, named as such; 3 rounds, not the profile's own
    assert glued["t1_first"] == glued["t1_live"] == "smoke (your settings)" and glued["t1_rounds"] == "3"


def test_the_runs_a_chapter_trains_are_the_experiments_its_parameter_check_names():
    assert notebooks.experiments_of("verdict") == ("table1", "table2", "control")
    assert notebooks.experiments_of("table1_local_protocol") == ("table1",)
    assert notebooks.experiments_of("masked_training") == ()  # its own study, not an experiment's runs
    assert notebooks.experiments_of("theory_01_notation") == ()


def test_parameters_the_notebook_would_refuse_train_nothing(monkeypatch):
    # prepare: any training would fail the test
    monkeypatch.setattr("maskfed.studies.experiments.run", lambda *a, **k: pytest.fail("trained"))
    # execute / assert: an undeclared name, an override out of range, a workers count of 0
    for given in ({"alpha": "0.5"}, {"overrides": "{rounds: 0}"}, {"workers": "0"}):
        notebooks.train_first("table1_local_protocol", "smoke", given)


@pytest.mark.slow
def test_a_chapter_run_from_the_command_line_trains_its_runs_with_bars_before_the_notebook(tmp_path, monkeypatch,
                                                                                          capsys):
    # prepare: the notebook itself is replaced by a probe that looks at the result store when it starts
    from maskfed.engine.config import load_profile
    from maskfed.studies import experiments

    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    seen = {}

    def probe(name, *, profile, parameters=None, out_dir, **_):
        runs = (tmp_path / "results" / "runs").iterdir()
        seen["finished"] = sorted(p.name for p in runs if not p.name.startswith("."))
        return out_dir / f"{name}.ipynb"

    monkeypatch.setattr(notebooks, "execute", probe)
    # execute: the run box's command, two settings changed
    code = notebooks.main(["--profile", "smoke", "--out-dir", str(tmp_path / "nb"), "--force",
                           "table1_local_protocol", "-p", "overrides", "{rounds: 2, lr: 0.02}"])
    # assert: every Table I run of those settings was finished before the notebook started, with a bar each
    err = capsys.readouterr().err
    cfgs = experiments.configs(load_profile("smoke", rounds=2, lr=0.02), "table1")
    assert code == 0 and len(seen["finished"]) == len(cfgs) == 9
    assert all(c.label() in err for c in cfgs) and "2/2" in err


# --- a diverged run, Ctrl-C, and relative folders, as the book's runner meets them ---

@pytest.mark.slow
def test_a_chapter_meeting_a_diverged_run_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    code = notebooks.main(["--profile", "smoke", "--out-dir", str(tmp_path / "nb"), "table2_heterogeneity",
                           "-p", "overrides", "{lr: 1000000.0}"])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "table2_heterogeneity stopped: TrainingDiverged:" in err and "round 1:" in err
    assert "smaller lr" in err and "Traceback" not in err and "AssertionError" not in err
    runs = tmp_path / "results" / "runs"
    assert not [p for p in runs.iterdir() if not p.name.startswith(".")]  # nothing stored as a finished run


def test_execute_hands_the_kernel_absolute_folders(tmp_path, monkeypatch):
    # a relative MASKFED_RESULTS_DIR means the caller's directory, also to a kernel running in notebooks/
    import papermill

    seen = {}

    def fake(input_path, output_path, **kw):
        import os
        seen.update({k: os.environ[k] for k in ("MASKFED_RESULTS_DIR", "MASKFED_CACHE_DIR")}, cwd=kw["cwd"])
        raise RuntimeError("stop here")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", "res")
    monkeypatch.setenv("MASKFED_CACHE_DIR", "~/cache")
    monkeypatch.setattr(papermill, "execute_notebook", fake)
    with pytest.raises(RuntimeError, match="stop here"):
        notebooks.execute("intro", profile="smoke", out_dir=tmp_path / "nb")
    assert seen == {"MASKFED_RESULTS_DIR": str(tmp_path / "res"), "MASKFED_CACHE_DIR": str(Path.home() / "cache"),
                    "cwd": str(notebooks.NOTEBOOK_DIR)}


@pytest.mark.slow
@pytest.mark.parametrize("how, name, phase", [
    ("ctrl-c", "masked_training", "executing"),           # its runs train in the kernel
    ("sigterm", "table1_local_protocol", "training"),     # its runs train first, in the runner
])
def test_ctrl_c_or_sigterm_on_the_notebook_runner_is_one_line_and_the_signals_exit_status(tmp_path, how, name, phase):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "MASKFED_RESULTS_DIR": str(tmp_path / "results"), "PYTHONPATH": str(REPO_ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "maskfed.book.notebooks", "--profile", "smoke", "--out-dir",
                             str(tmp_path / "nb"), name], env=env, cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    runs = tmp_path / "results" / "runs"
    deadline = time.monotonic() + 300
    while not (runs.exists() and any(p.name.startswith(".partial-") for p in runs.iterdir())):  # training
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal: the whole foreground process group
    else:
        proc.terminate()                    # `timeout` or `kill`: SIGTERM to the runner alone
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if how == "ctrl-c" else 143), err[-3000:]
    import re

    shown = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", err).replace("\r", "\n")   # what a terminal shows, bars aside
    lines = [line for line in shown.splitlines() if line.strip() and "|" not in line]
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("maskfed.book.notebooks:") and "interrupted" in lines[0] and name in lines[0]
    assert ("SIGTERM" in lines[0]) == (how == "sigterm")
    assert lines[0].split(" while ", 1)[1].split()[0] == phase   # what it was doing when stopped
    assert not (tmp_path / "nb" / f"{name}.ipynb").exists()  # no page from a stopped chapter


@pytest.mark.slow
def test_ctrl_c_inside_the_runner_silences_what_a_dying_kernel_logs_and_still_interrupts():
    import functools
    import os
    import signal
    import subprocess
    import sys

    # prepare: the two messages a kernel killed by the same Ctrl-C left behind (a flaky clean-clone
    # run of the test above printed both after the one line): nbclient's error log and asyncio's
    # "Task exception was never retrieved", which comes when the failed task is collected

    code = """
import asyncio, gc, logging, os, signal
from maskfed.book.notebooks import interrupt_silences_logging
class DeadKernelError(RuntimeError): pass
async def dies(): raise DeadKernelError("Kernel died")
loop = asyncio.new_event_loop()
before = signal.getsignal(signal.SIGINT)
try:
    with interrupt_silences_logging():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100): pass
except KeyboardInterrupt:
    print("interrupted", flush=True)
task = loop.create_task(dies())
loop.run_until_complete(asyncio.sleep(0.01))
logging.getLogger("nbclient").error("Kernel died while waiting for execute reply.")
del task; gc.collect()
assert signal.getsignal(signal.SIGINT) == before  # the handler put back as it was
"""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    # SIGINT as at a terminal, also where pytest itself runs in the background (SIGINT ignored)
    run = functools.partial(subprocess.run, env=env, capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # execute
    quiet = run([sys.executable, "-c", code])
    loud = run([sys.executable, "-c", code.replace("os.kill(os.getpid(), signal.SIGINT)", "raise KeyboardInterrupt")])
    ignored = run([sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + code])
    # assert: after a real SIGINT nothing but our own line; without one the same messages do appear
    assert quiet.returncode == 0 and quiet.stdout == "interrupted\n" and quiet.stderr == "", quiet.stderr
    assert loud.returncode == 0 and "Task exception" in loud.stderr  # asyncio's and jupyter_client's own messages
    assert "Kernel died" in loud.stderr
    # where SIGINT is ignored (a background job) it stays ignored: the signal interrupts nothing
    assert ignored.returncode == 0 and ignored.stdout == "", ignored.stderr


def test_a_profile_that_only_computes_runs_to_archive_is_refused_before_any_notebook(monkeypatch, capsys):
    monkeypatch.setattr(notebooks, "execute", lambda *a, **k: pytest.fail("no notebook may run"))
    with pytest.raises(SystemExit) as exit_info:
        notebooks.main(["--profile", "cpu-masked"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'cpu-masked'" in err and "archive" in err and "experiments: masked" in err and "'cpu'" in err


def test_glue_only_cells_are_hidden_and_cells_with_other_code_stay_shown():
    # prepare: a glue-only cell (plain and module glue, over two lines), a mixed one, a hidden one
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('glue("a", 1, display=False)\nbook.glue("b",\n          2)'),
                nbformat.v4.new_code_cell('x = 2\nglue("c", x)'),
                nbformat.v4.new_code_cell('glue("d", 3)', metadata={"tags": ["remove-cell"]}),
                nbformat.v4.new_code_cell(""),
                nbformat.v4.new_markdown_cell('glue("e", 4)')]
    # execute
    hidden = notebooks.hide_glue_only_cells(nb)
    # assert
    assert hidden == 1
    assert [c.metadata.get("tags", []) for c in nb.cells] == [["remove-cell"], [], ["remove-cell"], [], []]


def test_every_chapter_starts_with_the_hidden_figure_defaults():
    from maskfed.book import params

    # prepare: a chapter with its parameters cell first
    nb = _nb(["parameters"])
    # execute
    notebooks.add_book_setup(nb)
    # assert: the setup cell comes first, hidden, and binds no name the parameter check would see
    assert nb.cells[0].source == notebooks.SETUP_SOURCE and nb.cells[0].metadata.tags == ["remove-cell"]
    namespace = {}
    exec(notebooks.SETUP_SOURCE, namespace)
    assert params.user_names(namespace) == []


# --- several notebooks at once (make book's --jobs 2) ---

def _fake_children(monkeypatch, codes: dict):
    """subprocess.run replaced: each child "executes" its notebook (the last argument) and exits with codes[name]."""
    import subprocess
    import threading

    started, lock = [], threading.Lock()

    def run(cmd, *, env, **_):
        name = cmd[-1]
        with lock:
            started.append((name, cmd, env))
        return subprocess.CompletedProcess(cmd, codes.get(name, 0), stdout=f"executed {name}\n")

    monkeypatch.setattr(subprocess, "run", run)
    return started


def test_jobs_gives_each_notebook_a_one_thread_child_with_the_same_arguments(monkeypatch, capsys, tmp_path):
    # prepare
    started = _fake_children(monkeypatch, {})
    # execute
    code = notebooks.main(["--profile", "smoke", "--jobs", "2", "--out-dir", str(tmp_path), "-p", "seeds", "[0]",
                           "intro", "cite", "provenance"])
    # assert: three children, one notebook each, all given the profile, folder and parameter, one thread each
    err = capsys.readouterr().err
    assert code == 0
    assert sorted(n for n, _, _ in started) == ["cite", "intro", "provenance"]
    for name, cmd, env in started:
        assert cmd[1:4] == ["-m", "maskfed.book.notebooks", "--child"] and cmd[-1] == name
        assert cmd[cmd.index("--profile") + 1] == "smoke" and cmd[cmd.index("--out-dir") + 1] == str(tmp_path)
        assert cmd[cmd.index("-p"):cmd.index("-p") + 3] == ["-p", "seeds", "[0]"]
        assert env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
        assert f"executed {name}" in err


def test_jobs_starts_nothing_after_a_failure_and_returns_its_status(monkeypatch, capsys):
    # prepare: with one job at a time the order is the book's, and the second notebook stops on bad input
    started = _fake_children(monkeypatch, {"cite": 2, "provenance": 1})
    # execute: jobs 1 child at a time through run_parallel itself
    code = notebooks.run_parallel(["intro", "cite", "provenance"], ["--profile", "smoke"], jobs=1)
    # assert: provenance never started, and the status is cite's (2), not 0 or provenance's
    assert code == 2
    assert [n for n, _, _ in started] == ["intro", "cite"]


def test_jobs_outside_its_range_is_refused_before_any_notebook_runs(monkeypatch, capsys):
    from maskfed.engine.config import MAX_WORKERS

    started = _fake_children(monkeypatch, {})
    for jobs in (0, MAX_WORKERS + 1):
        with pytest.raises(SystemExit) as exc:
            notebooks.main(["--profile", "smoke", "--jobs", str(jobs), "intro", "cite"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "--jobs" in err and f"1 to {MAX_WORKERS}; got {jobs}" in err
    assert not started
    with pytest.raises(ValueError, match=r"jobs .*>= 1; got 0"):
        notebooks.run_parallel(["intro"], [], jobs=0)


@pytest.mark.slow
def test_jobs_two_executes_real_notebooks_to_their_end(tmp_path):
    # execute: two light pages at once, in their own processes
    code = notebooks.main(["--profile", "smoke", "--jobs", "2", "--out-dir", str(tmp_path), "intro", "cite"])
    # assert: both pages written, each ran to its end (no failed copy)
    assert code == 0
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == ["cite.ipynb", "intro.ipynb"]
    assert nbformat.read(tmp_path / "intro.ipynb", as_version=4).cells


def test_an_out_dir_that_is_a_file_or_read_only_is_one_line_and_exit_status_2(tmp_path, capsys, monkeypatch):
    import errno

    # prepare: a file where the folder should be
    f = tmp_path / "a-file"
    f.write_text("x")
    # execute / assert: one line on stderr, exit status 2, no traceback
    assert notebooks.main(["--profile", "smoke", "--out-dir", str(f), "intro"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out-dir" in err and str(f) in err and "Traceback" not in err
    # a read-only mount (the test may run as root, who writes anywhere: the write is refused by hand)
    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(notebooks.tempfile, "NamedTemporaryFile", refuse)
    assert notebooks.main(["--profile", "smoke", "--out-dir", str(tmp_path / "ro"), "intro"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Read-only file system" in err


def _chapter_dir(tmp_path, monkeypatch):
    """A notebooks/ folder with one chapter declaring ``profile`` and ``rounds``, and an empty results folder."""
    nbdir, results = tmp_path / "notebooks", tmp_path / "results"
    nbdir.mkdir()
    results.mkdir()
    (nbdir / "ch.md").write_text("# A chapter\n\n```{code-cell} python\n:tags: [parameters]\nprofile = 'cpu'\n"
                                 "rounds = 5\n```\n")
    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", nbdir)
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(results))
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(results / "archive"))
    return nbdir, results


def test_a_chapter_is_up_to_date_until_its_source_parameters_or_results_change(tmp_path, monkeypatch):
    # prepare: one chapter executed (its page exists) with its key kept
    nbdir, results = _chapter_dir(tmp_path, monkeypatch)
    out = tmp_path / "nb"
    out.mkdir()
    (out / "ch.ipynb").write_text("{}")
    given = {"profile": "smoke"}
    notebooks._keep_keys(["ch"], given, out)
    # execute / assert: nothing changed -> up to date
    assert notebooks.up_to_date(["ch"], given, out) == ["ch"]
    # another profile, or a parameter the chapter declares -> executed again
    assert notebooks.up_to_date(["ch"], {"profile": "cpu"}, out) == []
    assert notebooks.up_to_date(["ch"], given | {"rounds": "50"}, out) == []
    # a book-wide parameter it does not declare (data_path) is not given to it, so it does not count
    assert notebooks.up_to_date(["ch"], given | {"data_path": "/x"}, out) == ["ch"]
    # a new run folder under the results -> executed again; a hidden one (a run in progress) does not count
    (results / ".partial-run").mkdir()
    (results / ".partial-run" / "checkpoint.pt").write_text("x")
    assert notebooks.up_to_date(["ch"], given, out) == ["ch"]
    (results / "run-a").mkdir()
    (results / "run-a" / "metrics.csv").write_text("round\n1\n")
    assert notebooks.up_to_date(["ch"], given, out) == []
    notebooks._keep_keys(["ch"], given, out)
    assert notebooks.up_to_date(["ch"], given, out) == ["ch"]
    # the chapter's source edited -> executed again; its page missing -> executed again
    (nbdir / "ch.md").write_text((nbdir / "ch.md").read_text() + "\nA new sentence.\n")
    assert notebooks.up_to_date(["ch"], given, out) == []
    notebooks._keep_keys(["ch"], given, out)
    (out / "ch.ipynb").unlink()
    assert notebooks.up_to_date(["ch"], given, out) == []


def test_main_skips_an_up_to_date_chapter_unless_forced(tmp_path, monkeypatch, capsys):
    # prepare: the chapter's page and key exist; execute would record its calls
    _chapter_dir(tmp_path, monkeypatch)
    out = tmp_path / "nb"
    out.mkdir()
    (out / "ch.ipynb").write_text("{}")
    notebooks._keep_keys(["ch"], {"profile": "smoke"}, out)
    ran = []
    monkeypatch.setattr(notebooks, "execute", lambda name, **k: ran.append(name) or out / f"{name}.ipynb")
    monkeypatch.setattr(notebooks, "report_damaged_archive", lambda: None)
    # execute: without and with --force
    assert notebooks.main(["--profile", "smoke", "--out-dir", str(out), "ch"]) == 0
    assert notebooks.main(["--profile", "smoke", "--out-dir", str(out), "--force", "ch"]) == 0
    # assert: executed only when forced, and the skip is said
    assert ran == ["ch"]
    err = capsys.readouterr().err
    assert "up to date" in err and "again: ch" in err


def test_the_toc_of_a_book_built_before_every_chapter_ran_lists_what_ran(tmp_path, monkeypatch):
    # prepare: the book's table of contents, two of its chapters executed, the glossary a page of its own
    book = tmp_path / "book"
    (book / "nb").mkdir(parents=True)
    (book / "_toc.yml").write_text("format: jb-book\nroot: nb/intro\nparts:\n"
                                   "  - caption: A\n    chapters:\n      - file: nb/verdict\n      - file: nb/table1\n"
                                   "  - caption: B\n    chapters:\n      - file: nb/theory\n      - file: glossary\n")
    for name in ("table1", "theory"):
        (book / "nb" / f"{name}.ipynb").write_text("{}")
    (book / "glossary.md").write_text("# Glossary\n")
    monkeypatch.setattr(notebooks, "REPO_ROOT", tmp_path)
    # execute
    toc = notebooks.toc_of_pages(book / "nb")
    # assert: the first executed chapter is the root; unexecuted chapters and empty parts are gone
    assert toc["root"] == "nb/table1"
    assert [[c["file"] for c in p["chapters"]] for p in toc["parts"]] == [["nb/theory", "glossary"]]
    (book / "nb" / "intro.ipynb").write_text("{}")
    assert notebooks.toc_of_pages(book / "nb")["root"] == "nb/intro"
    for name in ("intro", "table1", "theory"):
        (book / "nb" / f"{name}.ipynb").unlink()
    with pytest.raises(FileNotFoundError, match="no executed chapter"):
        notebooks.toc_of_pages(book / "nb")
