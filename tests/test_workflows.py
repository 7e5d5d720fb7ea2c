"""The publishing workflow (.github/workflows/book.yml) builds the book with the README's command,
at the smoke profile on a push to main and at the cpu profile on a schedule or by hand, and deploys
book/_build/html to GitHub Pages."""

import re

import yaml

from maskfed.engine.config import load_profile, PROFILES
from maskfed.paths import REPO_ROOT

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "book.yml"


def _workflow() -> dict:
    wf = yaml.safe_load(WORKFLOW.read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def _profile_for(expression: str, event: str) -> str:
    # the workflow's `cond && 'a' || 'b'` idiom, evaluated for one event name
    m = re.fullmatch(r"\$\{\{\s*github\.event_name == '(\w+)' && '(\w+)' \|\| '(\w+)'\s*\}\}", expression)
    assert m, f"unexpected PROFILE expression: {expression}"
    return m.group(2) if event == m.group(1) else m.group(3)


def test_triggers_are_push_to_main_schedule_and_by_hand():
    on = _workflow()["on"]
    assert on["push"]["branches"] == ["main"]
    assert on["schedule"][0]["cron"].count(" ") == 4
    assert "workflow_dispatch" in on


def test_build_command_is_the_readmes_with_the_profile_per_event():
    # prepare: the build job's `make book` step and the README's documented commands
    build = _workflow()["jobs"]["build"]
    runs = [s["run"] for s in _steps(build) if "make book" in s.get("run", "")]
    readme = (REPO_ROOT / "README.md").read_text()
    # assert: exactly one build step, the README's command with PROFILE from the event
    assert runs == ["make book PROFILE=${{ env.PROFILE }}"]
    book_profiles = [p for p in PROFILES if load_profile(p).builds_book]  # cpu-masked computes runs to archive only
    assert f"make book PROFILE={'|'.join(book_profiles)}" in readme and "make book    #" in readme
    expression = build["env"]["PROFILE"]
    assert _profile_for(expression, "push") == "smoke"
    assert _profile_for(expression, "schedule") == "cpu"
    assert _profile_for(expression, "workflow_dispatch") == "cpu"


def test_pages_deploy_uploads_the_books_html_and_not_on_push():
    jobs = _workflow()["jobs"]
    upload = next(s for s in _steps(jobs["build"]) if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "book/_build/html"
    assert upload["if"] == "github.event_name != 'push'"
    deploy = jobs["deploy"]
    assert deploy["needs"] == "build" and deploy["if"] == "github.event_name != 'push'"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in _steps(deploy))
    assert deploy["environment"]["name"] == "github-pages"


def test_launch_buttons_branch_is_the_one_the_workflow_pushes():
    config = yaml.safe_load((REPO_ROOT / "book" / "_config.yml").read_text())
    pushes = " ".join(s.get("run", "") for s in _steps(_workflow()["jobs"]["notebooks-branch"]))
    assert f"git push -f origin {config['repository']['branch']}" in pushes
    assert config["repository"]["path_to_book"] == "book"
