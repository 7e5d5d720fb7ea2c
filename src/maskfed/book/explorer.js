// The explorer's script: maskfed.book.explorer.explorer_html fills in the block's id and the slider ranges.
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
