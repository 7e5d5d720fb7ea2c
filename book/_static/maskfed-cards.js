/* At any width where it does not fit its column even with its text cells wrapped (a phone's above all), a table of
   the book reads as stacked rows ("cards"): each body row becomes a block
   headed by its row labels, and each cell shows its column's header before its value, so that a
   comparison (Table I's paper column, the verdict) is read without sideways scrolling. This script
   only labels the cells (data-label) and marks the table to stack (where it is wider than its column, even wrapped); maskfed.css lays the cards out,
   so a desktop reader sees the table unchanged. Multi-row headers (pandas' column levels) are joined
   with " · ", and row labels spanning several rows (pandas' sparse index) are repeated on each card. */
(function () {
  const PROSE_CHARS = 40;  // a cell longer than this is text to read, not a value to look up
  function headerLabels(table) {
    const rows = Array.from(table.querySelectorAll(':scope > thead > tr'));
    const labels = [];
    for (const tr of rows) {
      let col = 0;
      for (const cell of Array.from(tr.children)) {
        const span = parseInt(cell.getAttribute('colspan') || '1', 10);
        const text = (cell.innerText || '').trim();
        for (let i = 0; i < span; i++, col++) {
          if (!labels[col]) labels[col] = [];
          if (text && !cell.classList.contains('index_name') && labels[col][labels[col].length - 1] !== text) {
            labels[col].push(text);
          }
        }
      }
    }
    return labels.map(l => (l || []).join(' · '));
  }
  function indexNames(table) {  // pandas' index names (bs, τ): column position -> name
    const names = [];
    for (const tr of Array.from(table.querySelectorAll(':scope > thead > tr'))) {
      let col = 0;
      for (const cell of Array.from(tr.children)) {
        const text = (cell.innerText || '').trim();
        if (cell.classList.contains('index_name') && text) names[col] = text;
        col += parseInt(cell.getAttribute('colspan') || '1', 10);
      }
    }
    return names;
  }
  function label(table) {
    if (table.closest('.highlight, mjx-container, .maskfed-nocards') || !table.tBodies.length) return;
    const labels = headerLabels(table);
    const index = indexNames(table);
    const pending = [];  // row labels spanning rows: [text, rows left] per column
    // a short row label (32, full, 0.1) is named by its index (bs 32, α 0.1); a long one (The cliff) names itself
    const named = (col, text) => (index[col] && text.length <= 6 ? index[col] + ' ' + text : text);
    for (const tr of Array.from(table.tBodies[0].rows)) {
      let col = 0;
      const cells = Array.from(tr.children);
      const names = [];
      const take = () => {
        while (pending[col] && pending[col][1] > 0) {
          names.push(named(col, pending[col][0]));
          pending[col][1] -= 1;
          col += 1;
        }
      };
      for (const cell of cells) {
        take();
        if (cell.tagName === 'TH') {
          const text = (cell.innerText || '').trim();
          const rs = parseInt(cell.getAttribute('rowspan') || '1', 10);
          pending[col] = [text, rs - 1];
          if (text) names.push(named(col, text));
        } else if (labels[col]) {
          cell.setAttribute('data-label', labels[col]);
          // a sentence or more (a criterion, a claim's statement): in a card it reads below its label, left-aligned
          if ((cell.textContent || '').trim().length > PROSE_CHARS) cell.classList.add('maskfed-prose');
        }
        col += parseInt(cell.getAttribute('colspan') || '1', 10);
      }
      take();
      if (names.length) tr.setAttribute('data-rowlabel', names.join(' · '));
    }
    table.classList.add('maskfed-cards');
    fit(table);
    // A table folded away (a hidden output, a closed box) measures 0 wide when the page loads: lay it out again when
    // it is opened, and whenever its column changes width (a turned phone, a resized window).
    if (window.ResizeObserver && table.parentElement) new ResizeObserver(() => fit(table)).observe(table.parentElement);
  }
  // Wider than its column at this width (a phone's or a desktop's): first let its text cells wrap (a number or a
  // range such as 1.10–1.36 stays whole); only a table still too wide reads as stacked rows (maskfed.css), so a
  // two-column table (the box of what ran) stays a table on a phone.
  function fit(table) {
    if (!table.parentElement || table.parentElement.clientWidth === 0) return;  // hidden: measured once shown
    table.classList.remove('maskfed-wrap', 'maskfed-cards-stack');
    if (tooWide(table)) {
      keepWhole(table);
      table.classList.add('maskfed-wrap');
      // wrapped to fit a phone's column, but into a word or two a line: cards read better
      if (tooWide(table) || (table.parentElement.clientWidth < PHONE_PX && tooTall(table))) {
        table.classList.remove('maskfed-wrap');
      }
    }
    if (tooWide(table)) table.classList.add('maskfed-cards-stack');
  }
  const PHONE_PX = 600;   // a column narrower than this is a phone's (maskfed.css: the figures' phone layout)
  const TALL_LINES = 8;  // a wrapped cell taller than this many lines of its text makes the table read as cards
  function tooTall(table) {
    return Array.from(table.querySelectorAll('td')).some(td => {
      const style = getComputedStyle(td);
      const line = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
      return td.clientHeight > TALL_LINES * line;
    });
  }
  function tooWide(table) {  // overflows itself (an output's table), or is wider than its column (a Markdown table,
    // which the theme puts in a box that scrolls sideways)
    return table.scrollWidth > table.clientWidth + 1 || table.scrollWidth > table.parentElement.clientWidth + 1;
  }
  // a short token with a hyphen or dash (1.1e-08, 1.10–1.36, -0.52) never breaks inside itself; a long one (a run
  // folder's name) may, or it would run past a phone's column
  const WHOLE_MAX_CHARS = 16;
  function keepWhole(table) {
    if (table.dataset.maskfedWhole) return;
    table.dataset.maskfedWhole = '1';
    for (const td of Array.from(table.querySelectorAll('td'))) {
      if (td.children.length || !/[-–]/.test(td.textContent)) continue;
      const parts = td.textContent.split(/(\s+)/);
      const body = document.createElement('span');  // one box: a stacked row's cell stays label + value
      for (const part of parts) {
        if (/[-–]/.test(part) && part.length <= WHOLE_MAX_CHARS) {
          const span = document.createElement('span');
          span.className = 'maskfed-whole';
          span.textContent = part;
          body.appendChild(span);
        } else body.appendChild(document.createTextNode(part));
      }
      td.textContent = '';
      td.appendChild(body);
    }
  }
  function run() {
    document.querySelectorAll('article table').forEach(label);
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', run); else run();
})();
