"""Sphinx extension of the maskfed book: load MathJax on every page, not only on pages that
contain math themselves, so that chapter titles with math (in the navigation bar of every
page, e.g. "The control: identical clients give 1/Δ_S = K_c") render on every page too."""


def setup(app):
    app.set_html_assets_policy("always")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
