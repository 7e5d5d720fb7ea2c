"""The ``maskfed`` command's entry point (the console script and ``python -m maskfed``).

:mod:`maskfed.cli` imports torch, pandas and the rest, a second or more; Ctrl-C meanwhile would end
in a KeyboardInterrupt traceback from somewhere inside them. Here it ends as one line,
``maskfed: interrupted``, with exit status 130 (nothing has started then: nothing to keep or resume),
as does a Ctrl-C that :func:`maskfed.cli.main` does not report itself (while it checks its input).
"""

from __future__ import annotations

import signal
import sys


def main(argv: list[str] | None = None) -> int:
    """Import :mod:`maskfed.cli` and run :func:`maskfed.cli.main`; Ctrl-C in either is one line, exit 130."""
    try:
        from maskfed import cli

        return cli.main(argv)
    except KeyboardInterrupt as exc:
        print("\nmaskfed: interrupted", file=sys.stderr)  # on its own line, after whatever was printed
        return 128 + int(getattr(exc, "signum", signal.SIGINT))
