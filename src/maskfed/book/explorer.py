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
    """Measured points for the explorer from a Table I summary (:func:`maskfed.studies.experiments.table1`):
    one ``{"label", "r", "recovery"}`` per protocol with r = ‖μ̂‖²/σ̂² (medians over seeds, so the point
    need not lie on eq. 12's curve exactly), at the run's ``k_c``; rows with σ̂² <= 0 are left out."""
    out = []
    for key, row in table.iterrows():
        bs, tau = key if isinstance(key, tuple) else (key, "")
        if row["sigma2_hat"] > 0 and row["mu2_hat"] > 0:
            out.append({"label": f"{'full' if str(bs) == 'full' else 'bs ' + str(bs)}, τ {tau}",
                        "r": float(f"{row['mu2_hat'] / row['sigma2_hat']:.4g}"),  # 4 digits: the page prints fewer
                        "recovery": round(float(row["recovery_unweighted"]), 4),
                        "k_c": int(k_c)})
    return out


SCRIPT = r"""
(function () {
  const root = document.getElementById('%(id)s');
  const pts = JSON.parse(root.dataset.points);
  const q = (s) => root.querySelector(s);
  const ns = 'http://www.w3.org/2000/svg';
  const W = 340, H = 220, L = 46, R = 22, T = 24, B = 36;
  function el(tag, attrs, parent) {
    const e = document.createElementNS(ns, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, anchor) {
    const t = el('text', {x: x, y: y, 'font-size': 12, 'text-anchor': anchor || 'middle', fill: '#222'}, parent);
    t.textContent = s;
    return t;
  }
  function axes(svg, xlab, ylab, xticks, yticks, sx, sy) {
    el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#444'}, svg);
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#444'}, svg);
    for (const [v, s] of xticks) { const x = sx(v); el('line', {x1: x, y1: H - B, x2: x, y2: H - B + 4, stroke: '#444'}, svg); text(svg, x, H - B + 16, s); }
    for (const [v, s] of yticks) { const y = sy(v); el('line', {x1: L - 4, y1: y, x2: L, y2: y, stroke: '#444'}, svg); text(svg, L - 6, y + 4, s, 'end'); }
    text(svg, (L + W - R) / 2, H - 4, xlab);
    const yl = text(svg, 12, (T + H - B) / 2, ylab);
    yl.setAttribute('transform', `rotate(-90 12 ${(T + H - B) / 2})`);
  }
  function forms(k, r, p) {
    const price = (1 - p) / (2 * p);
    return {recovery: (k * r + 1) / (r + 1), price: price, r_ind: price * (r + 1) / k, r_shr: price * (r + 1 / k)};
  }
  function draw() {
    const k = Number(q('.k').value), r = Math.pow(10, Number(q('.logr').value)), p = Number(q('.p').value);
    const f = forms(k, r, p);
    q('.k-out').textContent = k;
    q('.logr-out').textContent = r < 0.1 ? r.toPrecision(2) : r.toFixed(2);
    q('.p-out').textContent = p.toFixed(2);
    q('.readout').textContent = `1/Δ_S = ${f.recovery.toFixed(2)} of at most ${k}; ` +
      `R_ind = ${f.r_ind.toPrecision(3)}, R_shr = ${f.r_shr.toPrecision(3)} (units of c·σ²), ` +
      `R_shr / R_ind = ${(f.r_shr / f.r_ind).toFixed(2)}`;
    // panel 1: eq. 12 against r (log axis), the measured points at their own K_c
    const s1 = q('svg.eq12'); s1.innerHTML = '';
    const lo = %(logr_lo)s, hi = %(logr_hi)s, ymax = Math.max(k, ...pts.map(d => d.recovery)) * 1.05;
    const sx = (lr) => L + (lr - lo) / (hi - lo) * (W - L - R), sy = (v) => H - B - v / ymax * (H - T - B);
    axes(s1, 'r = ‖μ‖²/σ² (log scale)', '1/Δ_S', [[-3, '0.001'], [-1, '0.1'], [1, '10'], [3, '1000']],
         [[1, '1'], [k, String(k)]], sx, sy);
    let d = '';
    for (let i = 0; i <= 120; i++) { const lr = lo + (hi - lo) * i / 120, rr = Math.pow(10, lr); d += (i ? 'L' : 'M') + sx(lr).toFixed(1) + ' ' + sy((k * rr + 1) / (rr + 1)).toFixed(1); }
    el('path', {d: d, fill: 'none', stroke: '#1f77b4', 'stroke-width': 2}, s1);
    text(s1, L + 4, 14, 'eq. 12; dot: your r; circles: measured', 'start');
    el('circle', {cx: sx(Math.log10(r)), cy: sy(f.recovery), r: 5, fill: '#1f77b4'}, s1);
    for (const m of pts) {
      const lr = Math.log10(m.r);
      if (lr < lo || lr > hi) continue;
      const c = el('circle', {cx: sx(lr), cy: sy(m.recovery), r: 3.5, fill: 'none', stroke: '#d62728', 'stroke-width': 1.5}, s1);
      el('title', {}, c).textContent = `${m.label}: r̂ = ${m.r.toPrecision(2)}, 1/Δ_S = ${m.recovery.toFixed(2)} (K_c = ${m.k_c})`;
    }
    // panel 2: the two penalties against p, at this K_c and r
    const s2 = q('svg.prop3'); s2.innerHTML = '';
    const pmin = %(p_lo)s, top = forms(k, r, pmin).r_shr * 1.05 || 1;
    const px = (v) => L + (v - pmin) / (1 - pmin) * (W - L - R), py = (v) => H - B - Math.min(v, top) / top * (H - T - B);
    axes(s2, 'keep probability p', 'penalty (c·σ²)', [[pmin, String(pmin)], [0.5, '0.5'], [1, '1']],
         [[0, '0'], [top / 1.05, (top / 1.05).toPrecision(2)]], px, py);
    text(s2, L + 4, 14, 'green: shared mask; orange: per client', 'start');
    for (const [key, colour] of [['r_shr', '#2ca02c'], ['r_ind', '#ff7f0e']]) {
      let e = '';
      for (let i = 0; i <= 120; i++) { const v = pmin + (1 - pmin) * i / 120; e += (i ? 'L' : 'M') + px(v).toFixed(1) + ' ' + py(forms(k, r, v)[key]).toFixed(1); }
      el('path', {d: e, fill: 'none', stroke: colour, 'stroke-width': 2}, s2);
      el('circle', {cx: px(p), cy: py(f[key]), r: 4, fill: colour}, s2);
    }
  }
  for (const s of root.querySelectorAll('input')) s.addEventListener('input', draw);
  draw();
})();
"""


def explorer_html(points: list[dict], *, k_c: int = 10, r: float = 0.1, p: float = 0.5, ident: str = "maskfed-explorer") -> str:
    """The explorer as one HTML block (sliders for K_c, r and p; two SVG panels; a readout), its script
    inline, so it runs offline in the built page.

    Args:
        points: measured points (:func:`points_from_table`) drawn on eq. 12's panel.
        k_c, r, p: the sliders' starting values (clipped to :data:`K_RANGE`, :data:`LOG_R_RANGE`,
            :data:`P_RANGE`).
        ident: the block's HTML id (one explorer per page).
    """
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


def points_caption(points: list[dict], source: str = "cpu-paper") -> str:
    """The sentence under the explorer on its measured points (:func:`points_from_table`)."""
    if not points:
        return "No archived runs were found, so no measured points are drawn."
    return (f"The open red circles are the {len(points)} local protocols of the archived {source} runs (Table I's grid "
            "on the small CNN: r̂ = ‖μ̂‖²/σ̂² and 1/Δ_S, medians over seeds, at "
            f"K_c = {points[0]['k_c']}); hover one for its values. They fall on the curve only when K_c is set to theirs.")
