"""The explorer of eq. 12 and Propositions 2-3 (maskfed.book.explorer): its closed forms by hand, its
points from a table, and its page script in headless Chromium (skipped with the reason where Chromium or
Playwright is missing), which must show the same numbers as the Python closed forms after a slider moves."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from maskfed.book import explorer


def test_closed_forms_by_hand():
    # K_c = 10, r = 1, p = 0.5: price 0.5; R_ind = 0.5 * 2 / 10 = 0.1, R_shr = 0.5 * 1.1 = 0.55; ratio 5.5 = eq. 12
    f = explorer.closed_forms(10, 1.0, 0.5)
    assert f == pytest.approx({"recovery": 5.5, "price": 0.5, "r_ind": 0.1, "r_shr": 0.55})
    assert f["r_shr"] / f["r_ind"] == pytest.approx(f["recovery"])
    assert explorer.closed_forms(10, 0.0, 1.0) == {"recovery": 1.0, "price": 0.0, "r_ind": 0.0, "r_shr": 0.0}
    with pytest.raises(ValueError, match="p in \\(0, 1\\]"):
        explorer.closed_forms(10, 1.0, 0.0)


def test_points_from_table_take_the_ratio_of_the_medians():
    table = pd.DataFrame({"mu2_hat": [1e-3, 2e-3, 1e-3], "sigma2_hat": [1e-2, 0.0, 4e-3],
                          "recovery_unweighted": [1.2, 9.0, 1.3]},
                         index=pd.MultiIndex.from_tuples([("32", 2), ("full", 1), ("128", 1)],
                                                         names=["batch_size", "local_epochs"]))
    pts = explorer.points_from_table(table, k_c=10)
    assert [(p["label"], round(p["r"], 6), p["recovery"]) for p in pts] == [("bs 32, τ 2", 0.1, 1.2),
                                                                            ("bs 128, τ 1", 0.25, 1.3)]


@pytest.mark.slow
def test_the_page_script_shows_the_closed_forms_after_a_slider_moves(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
    binary = next((shutil.which(b) for b in ("chromium", "chromium-browser") if shutil.which(b)), None)
    if binary is None:
        pytest.skip("no Chromium (apt-get install -y chromium)")
    # prepare: a page holding the explorer, one measured point
    page_file = tmp_path / "explorer.html"
    page_file.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>"
                         + explorer.explorer_html([{"label": "bs 32, τ 2", "r": 0.02, "recovery": 1.2, "k_c": 10}])
                         + "</body></html>")
    errors = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=binary, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        # execute: K_c to 20, log10 r to 0 (r = 1), p to 0.25
        for cls, value in (("k", "20"), ("logr", "0"), ("p", "0.25")):
            page.eval_on_selector(f"input.{cls}", "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }",
                                  value)
        readout = page.inner_text(".readout")
        circles = page.eval_on_selector_all("svg.eq12 circle", "cs => cs.length")
        browser.close()
    # assert: no script error; the readout is the Python closed forms at (20, 1, 0.25); the dot and the point drawn
    f = explorer.closed_forms(20, 1.0, 0.25)
    assert not errors
    assert f"1/Δ_S = {f['recovery']:.2f} of at most 20" in readout
    assert f"R_ind = {f['r_ind']:.3g}".rstrip("0") in readout and f"R_shr / R_ind = {f['recovery']:.2f}" in readout
    assert circles == 2
