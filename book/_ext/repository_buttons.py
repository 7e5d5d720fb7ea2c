"""Sphinx extension of the maskfed book: the repository button and the Binder and Colab launch
buttons appear only when ``repository.url`` (book/_config.yml) names a real repository.

"Real" means checkable here: a GitHub repository URL (``https://github.com/<owner>/<name>``; the
launch buttons are built for GitHub) that is a git remote of the checkout the book is built from
(as on GitHub Actions, whose checkout's ``origin`` is the repository itself). The build then
shows the buttons. An empty URL, or a checkout with no git remote to check it against, gives a
book without them. A URL that is malformed, or that is not among the checkout's remotes (a
placeholder, a typo, a fork's URL in another fork), stops the build with a message.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sphinx.errors import ConfigError
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: A GitHub repository as the launch buttons need it.
GITHUB_REPO = re.compile(r"^https://github\.com/(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)/"
                         r"(?P<name>[A-Za-z0-9._-]+?)(?:\.git)?/?$")
#: A git remote in the forms git prints (https, ssh URL, scp-like ``git@github.com:owner/name``).
_REMOTE = re.compile(r"^(?:https?://(?:[^@/]+@)?|ssh://git@|git@)github\.com[:/](?P<owner>[^/\s]+)/"
                     r"(?P<name>[^/\s]+?)(?:\.git)?/?$")


def normalise(url: str) -> str | None:
    """``owner/name`` (lower case) of a GitHub repository URL or git remote, else None."""
    m = GITHUB_REPO.match(url.strip()) or _REMOTE.match(url.strip())
    return f"{m['owner']}/{m['name']}".lower() if m else None


def git_remotes(folder: Path) -> list[str]:
    """The fetch URLs of the git remotes of the checkout holding ``folder`` (empty when it is
    not in a git checkout or git is missing)."""
    try:
        out = subprocess.run(["git", "-C", str(folder), "remote", "-v"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({line.split()[1] for line in out.splitlines() if line.endswith("(fetch)")})


def check_repository(url: str, remotes: list[str]) -> bool:
    """Whether the book shows the repository and launch buttons for ``url``.

    Args:
        url: ``repository.url`` of book/_config.yml ("" for none).
        remotes: the checkout's git remote URLs (:func:`git_remotes`).

    Returns:
        True when ``url`` is a GitHub repository among ``remotes``; False when ``url`` is empty
        or there is no remote to check it against.

    Raises:
        sphinx.errors.ConfigError: ``url`` is not a GitHub repository URL, or is not among
            ``remotes`` (the message lists them).
    """
    url = (url or "").strip()
    if not url:
        return False
    repo = normalise(url)
    if repo is None or not GITHUB_REPO.match(url):
        raise ConfigError(f"repository.url in book/_config.yml must be https://github.com/<owner>/<name> "
                          f"or empty (no repository or launch buttons); got {url!r}")
    if not remotes:
        return False
    if repo not in {normalise(r) for r in remotes}:
        raise ConfigError(f"repository.url in book/_config.yml is {url!r}, which is not a git remote of this "
                          f"checkout ({', '.join(remotes)}): set it to this book's repository, or empty it "
                          "for a book without repository and launch buttons")
    return True


def _drop_buttons(app, config) -> None:
    opts = dict(config.html_theme_options or {})
    url = opts.get("repository_url", "")
    if check_repository(url, git_remotes(Path(app.confdir))):
        opts["use_repository_button"] = True
        config.html_theme_options = opts
        return
    if url:
        logger.info(f"[repository_buttons] {url} is not checked against a git remote here (the checkout has "
                    "none): no repository or launch buttons")
    for key in ("repository_url", "repository_branch", "path_to_docs"):
        opts[key] = ""
    opts["use_repository_button"] = opts["use_issues_button"] = opts["use_edit_page_button"] = False
    opts["launch_buttons"] = {}
    config.html_theme_options = opts


def setup(app):
    app.connect("config-inited", _drop_buttons, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
