"""Sphinx extension of the maskfed book: what the theme puts on every page, less its errors.

- The live-code (thebe) configuration script is inlined twice by sphinx-thebe, and the second
  copy throws ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``. The book
  has no live-code button (``launch_buttons.thebe: false``), so both copies and
  ``sphinx-thebe.js`` are left out.
- pydata-sphinx-theme 0.17 logs "Got invalid theme mode" on a reader's first visit when no
  ``default_mode`` is set: ``html_context['default_mode']`` is set to ``auto`` (the theme's own fallback).
- pydata-sphinx-theme's header adds a second search field above the book theme's sidebar
  search on desktop: the header's persistent items are emptied.
- ``maskfed-cards.js`` (book/_static) is added to every page: on a phone its tables read as stacked rows.
"""

from __future__ import annotations


def _theme_options(app, config) -> None:
    opts = dict(config.html_theme_options or {})
    opts["navbar_persistent"] = []
    config.html_theme_options = opts
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def _thebe_on(app) -> bool:
    buttons = (app.config.html_theme_options or {}).get("launch_buttons") or {}
    return bool(buttons.get("thebe")) or bool(getattr(app.config, "use_thebe", False))


def _drop_thebe(app, pagename, templatename, context, doctree) -> None:
    if _thebe_on(app) or "script_files" not in context:
        return

    def thebe(js) -> bool:
        name = getattr(js, "filename", None) or str(js)
        body = (getattr(js, "attributes", None) or {}).get("body", "")
        return "sphinx-thebe" in (name or "") or "THEBE_JS_URL" in body or "thebe@" in (name or "")

    context["script_files"] = [js for js in context["script_files"] if not thebe(js)]


def setup(app):
    app.connect("config-inited", _theme_options, priority=900)
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.add_js_file("maskfed-cards.js")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
