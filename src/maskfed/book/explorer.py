"""An interactive explorer of the paper's closed forms, in plain JavaScript shipped inside the page (no
kernel, no network): eq. 12's recovery factor 1/Δ_S = (K_c r + 1)/(r + 1) against the signal-to-noise
ratio r = ‖μ‖²/σ² for a K_c the reader sets, with measured points of a real run drawn on it, and the
penalties of Propositions 2 and 3 against the keep probability p.

With isotropic diagonal Hessian blocks H_bb = c I (Corollary 1's assumption) and the signal-noise model
of eq. 9 (σ² the expected ‖ε_k‖²), the expected penalties are, in units of c σ² (eq. 4, 6, 7, 10, 11):

- independent masks: R_ind = (1 - p)/(2p) · (r + 1) / K_c,
- one shared mask:   R_shr = (1 - p)/(2p) · (r + 1/K_c),

so R_shr / R_ind = (K_c r + 1)/(r + 1), eq. 12 again, whatever p is; p only sets the price
(1 - p)/(2p) of both. :func:`closed_forms` is the same arithmetic in Python, which the tests hold the
page's script to.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

#: Slider ranges (ours): K_c from 2 to 100, log10 r from -3 to 3, p from 0.05 to 1.
K_RANGE = (2, 100)
LOG_R_RANGE = (-3.0, 3.0)
P_RANGE = (0.05, 1.0)


def closed_forms(k_c: float, r: float, p: float) -> dict[str, float]:
    """The explorer's numbers: ``recovery`` (eq. 12), ``price`` (1 - p)/(2p), ``r_ind`` and ``r_shr``
    (expected penalties with independent and shared masks, units of c σ²; see the module docstring).

    Raises:
        ValueError: ``k_c`` < 1, ``r`` < 0 or ``p`` outside (0, 1].
    """
    if k_c < 1 or r < 0 or not 0 < p <= 1:
        raise ValueError(f"need k_c >= 1, r >= 0 and p in (0, 1]; got k_c = {k_c}, r = {r}, p = {p}")
    price = (1 - p) / (2 * p)
    return {"recovery": (k_c * r + 1) / (r + 1), "price": price, "r_ind": price * (r + 1) / k_c,
            "r_shr": price * (r + 1 / k_c)}


def points_from_table(table, k_c: int) -> list[dict]:
    """Measured points for the explorer from a Table I summary: one ``{"label", "r", "recovery", "k_c"}`` per
    protocol with r = ‖μ̂‖²/σ̂² (medians over seeds); rows with ‖μ̂‖² or σ̂² <= 0 are left out."""
    out = []
    for key, row in table.iterrows():
        bs, tau = key if isinstance(key, tuple) else (key, "")
        if row["sigma2_hat"] > 0 and row["mu2_hat"] > 0:
            out.append({"label": f"{'full' if str(bs) == 'full' else 'bs ' + str(bs)}, τ {tau}",
                        "r": float(f"{row['mu2_hat'] / row['sigma2_hat']:.4g}"),  # 4 digits: the page prints fewer
                        "recovery": round(float(row["recovery_unweighted"]), 4),
                        "k_c": int(k_c)})
    return out


#: The page's script (``explorer.js`` beside this module), with ``%(id)s``, ``%(logr_lo)s``, ``%(logr_hi)s`` and
#: ``%(p_lo)s`` to fill in.
SCRIPT = Path(__file__).with_name("explorer.js").read_text()


def explorer_html(points: list[dict], *, k_c: int = 10, r: float = 0.1, p: float = 0.5, ident: str = "maskfed-explorer") -> str:
    """The explorer as one HTML block with id ``ident`` (sliders for K_c, r and p starting at the given values,
    clipped to their ranges; two SVG panels, eq. 12's with ``points`` from :func:`points_from_table`; a readout),
    its script inline."""
    k_c = int(min(max(k_c, K_RANGE[0]), K_RANGE[1]))
    log_r = min(max(math.log10(max(r, 1e-12)), LOG_R_RANGE[0]), LOG_R_RANGE[1])
    p = min(max(p, P_RANGE[0]), P_RANGE[1])
    script = SCRIPT % {"id": ident, "logr_lo": LOG_R_RANGE[0], "logr_hi": LOG_R_RANGE[1], "p_lo": P_RANGE[0]}
    slider = ('<label style="display:block;margin:0.2em 0">{name} <input class="{cls}" type="range" min="{lo}" '
              'max="{hi}" step="{step}" value="{value}" aria-label="{name}" style="width:12em;vertical-align:middle"> '
              '<b class="{cls}-out"></b></label>')
    return (f'<div id="{ident}" class="maskfed-explorer" data-points="{html.escape(json.dumps(points))}">'
            + slider.format(name="cohort size K_c", cls="k", lo=K_RANGE[0], hi=K_RANGE[1], step=1, value=k_c)
            + slider.format(name="signal-to-noise ratio r", cls="logr", lo=LOG_R_RANGE[0], hi=LOG_R_RANGE[1],
                            step=0.01, value=round(log_r, 2))
            + slider.format(name="keep probability p", cls="p", lo=P_RANGE[0], hi=P_RANGE[1], step=0.01, value=p)
            + '<p class="readout" style="font-size:0.9em"></p>'
            '<div style="display:flex;flex-wrap:wrap;gap:0.5em">'
            '<svg class="eq12" viewBox="0 0 340 220" style="width:340px;max-width:100%" role="img" '
            'aria-label="eq. 12: recovery factor against r"></svg>'
            '<svg class="prop3" viewBox="0 0 340 220" style="width:340px;max-width:100%" role="img" '
            'aria-label="penalties of Propositions 2 and 3 against p"></svg></div>'
            f"<script>{script}</script></div>")
