"""``make book-check``: read every page of the built book in headless Chromium, as a reader would.

Each page is served locally and opened at a desktop (1400 px) and a phone (390 px) width in the system
Chromium, driven by Playwright (which downloads no browser). Once MathJax has typeset it and every toggled
box is open, the probe (:data:`PROBE_JS`) reports per page and width each breach of :data:`RULES`: errors
(``js-error``; ``other-host``, a request off the local server, aborted; ``missing-file``); layout
(``wider-than-column``, ``clipped``, ``scrolls-at-desktop``, ``equation-clipped``); images
(``image-resolution``, under 2 px per CSS px; ``figure-shrunk``; ``image-missing``; ``alt-path``;
``figure-text-small``, a figure's :data:`MIN_FONT_PT` text below that size at phone width); markup or text
left for later (``raw-latex``, ``punctuation-wrapped``, ``debug-line``, ``word-broken``, ``placeholder``,
``developer-comment``); links that book/_ext makes (``eq-unlinked``, ``term-unlinked``, ``term-undefined``);
and in running text ``doubled-word``, ``nan-shown`` and ``long-number`` (over four significant digits).

``python book/_tools/browsercheck.py [HTML_DIR]`` prints one line per finding and exits 1 if there is any,
2 when Chromium or Playwright is missing, 0 otherwise. Chromium: ``apt-get install -y chromium``
(Debian); ``MASKFED_CHROMIUM`` names another binary.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from maskfed.book.plots import MIN_FONT_PT  # figures' smallest text (pt): at phone width it must stay this size
from maskfed.paths import REPO_ROOT

#: The widths every page is read at (CSS px): a desktop window and a phone.
WIDTHS = {"desktop": 1400, "phone": 390}
#: Window heights (CSS px); the probe measures the whole page, not only the visible part.
HEIGHTS = {"desktop": 900, "phone": 844}
#: Flags for an offline, quiet, repeatable headless Chromium (a fresh profile is added per width).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
#: The built glossary page whose terms the ``term-unlinked`` rule reads (book/glossary.md).
GLOSSARY_PAGE = "glossary.html"
#: Seconds a page may take to load and typeset.
PAGE_TIMEOUT_S = 60
#: Every rule the probe can report.
RULES = ("js-error", "other-host", "missing-file", "wider-than-column", "clipped", "scrolls-at-desktop",
         "equation-clipped", "image-resolution", "figure-shrunk", "image-missing", "raw-latex",
         "punctuation-wrapped", "debug-line", "word-broken", "placeholder", "developer-comment", "eq-unlinked",
         "term-unlinked", "term-undefined", "doubled-word", "nan-shown", "long-number", "alt-path",
         "figure-text-small")


class BrowserMissing(RuntimeError):
    """Chromium or Playwright is not installed; the message says how to install it."""


@dataclass(frozen=True)
class Finding:
    """One problem (``rule`` of :data:`RULES`, ``detail``: what and where) on one ``page`` (relative to the HTML
    folder) at one ``width`` (:data:`WIDTHS`)."""

    page: str
    width: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.page} [{self.width} {WIDTHS[self.width]} px] {self.rule}: {self.detail}"


def chromium_path(explicit: str | None = None) -> str:
    """The Chromium binary: ``explicit``, else ``$MASKFED_CHROMIUM``, else ``chromium`` or ``chromium-browser``.

    Raises:
        BrowserMissing: none found.
    """
    given = explicit or os.environ.get("MASKFED_CHROMIUM")
    for candidate in ([given] if given else ["chromium", "chromium-browser"]):
        if found := shutil.which(candidate):
            return found
    raise BrowserMissing("no Chromium found: install Debian's package (apt-get install -y chromium) "
                         "or set MASKFED_CHROMIUM to a Chromium binary")


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve the folder ``root`` over HTTP on 127.0.0.1 (a free port) inside the ``with`` block; yields the base URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # one line per request would bury the findings
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


#: The probe run in each page once it has loaded: returns ``[{rule, detail}]``. Its argument: ``desktop``
#: (true at the desktop width) and ``terms`` (the glossary's terms, :func:`glossary_terms`; none on the
#: glossary page itself).
PROBE_JS = r"""
async ({desktop, terms, minFontPt}) => {
  const out = [];
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; } catch (e) { out.push({rule: 'raw-latex', detail: 'MathJax failed: ' + e}); }
  }
  if (document.fonts && document.fonts.ready) { await document.fonts.ready; }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));

  const name = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    const cls = (typeof el.className === 'string' ? el.className : '').trim().split(/\s+/).filter(Boolean).slice(0, 3);
    if (cls.length) s += '.' + cls.join('.');
    const text = Array.from((el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ')).slice(0, 60).join('');
    return text ? `${s} "${text}"` : s;
  };
  const add = (rule, el, detail) => out.push({rule, detail: (el ? name(el) + ': ' : '') + detail});
  const px = (v) => Math.round(v) + ' px';

  const main = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  // what a reader can open is read open: toggled boxes, hidden solutions, collapsed code
  for (const d of main.querySelectorAll('details')) d.open = true;
  for (const t of main.querySelectorAll('.toggle-hidden')) t.classList.remove('toggle-hidden');
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const colRight = main.getBoundingClientRect().right;
  const colWidth = main.clientWidth;
  const scrolls = (v) => v === 'auto' || v === 'scroll';

  // math first: a formula is judged by its own box
  const reported = new Set();
  for (const c of main.querySelectorAll('mjx-container')) {
    reported.add(c);
    const r = c.getBoundingClientRect();
    if (r.width === 0) continue;
    const inner = c.querySelector('mjx-math');
    const innerWidth = inner ? inner.getBoundingClientRect().width : r.width;
    const display = c.getAttribute('display') === 'true';
    if ((display && c.scrollWidth > c.clientWidth + 1) || innerWidth > r.width + 1) {
      add('equation-clipped', c, `formula ${px(innerWidth)} in a ${px(r.width)} box`);
    } else if (r.right > colRight + 1) {
      add('equation-clipped', c, `reaches ${px(r.right - colRight)} past the ${px(colWidth)} column`);
    }
  }

  // elements past the right edge of the column
  const inside = (el) => { for (let a = el.parentElement; a && a !== main; a = a.parentElement) { if (reported.has(a)) return true; } return false; };
  for (const el of main.querySelectorAll('*')) {
    if (reported.has(el) || el.closest('mjx-container') || inside(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || r.right <= colRight + 1) continue;
    const st = getComputedStyle(el);
    if (st.position === 'fixed' || st.visibility === 'hidden') continue;
    let box = null;
    for (let a = el.parentElement; a && a !== main; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible') { box = a; break; }
    }
    if (box && scrolls(getComputedStyle(box).overflowX)) continue;   // scrolls in its own box
    reported.add(el);
    if (box) add('clipped', el, `${px(r.width)} wide, cut by ${name(box)}`);
    else add('wider-than-column', el, `reaches ${px(r.right - colRight)} past the ${px(colWidth)} column`);
  }
  if (document.documentElement.scrollWidth > document.documentElement.clientWidth + 1) {
    add('wider-than-column', null, `the page is ${px(document.documentElement.scrollWidth)} wide in a ` +
        `${px(document.documentElement.clientWidth)} window`);
  }

  // scroll boxes that still scroll at desktop width (code blocks may: a line of code is not a table)
  if (desktop) {
    for (const el of main.querySelectorAll('*')) {
      if (el.closest('mjx-container, pre, .highlight')) continue;
      const st = getComputedStyle(el);
      if (scrolls(st.overflowX) && el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0) {
        add('scrolls-at-desktop', el, `content ${px(el.scrollWidth)} in a ${px(el.clientWidth)} box`);
      }
    }
  }

  // images
  for (const img of main.querySelectorAll('img')) {
    const src = img.currentSrc || img.src || '';
    if (!img.complete || img.naturalWidth === 0) { add('image-missing', img, src.slice(0, 80)); continue; }
    const shown = img.getBoundingClientRect().width;
    if (shown === 0) continue;
    const svg = /\.svg([?#]|$)/i.test(src) || src.startsWith('data:image/svg');
    const alt = (img.getAttribute('alt') || '').trim();
    if (/^(data:|https?:|\.{0,2}\/|_images\/)|\.(svg|png|jpe?g|gif|webp)$/i.test(alt) || /[\/\\]\S*\.[a-z]{3,4}$/i.test(alt)) {
      add('alt-path', img, `alt text "${Array.from(alt).slice(0, 50).join('')}" is a file name, not a description`);
    }
    if (svg) {
      if (desktop && shown < img.naturalWidth - 1) {
        add('figure-shrunk', img, `drawn ${px(img.naturalWidth)} wide, shown at ${px(shown)} ` +
            `(${Math.round(100 * shown / img.naturalWidth)}%: its text shrinks with it)`);
      } else if (!desktop && minFontPt * shown / img.naturalWidth < minFontPt - 0.05) {
        add('figure-text-small', img, `drawn ${px(img.naturalWidth)} wide, shown at ${px(shown)}: its ` +
            `${minFontPt} pt text reads ${(minFontPt * shown / img.naturalWidth).toFixed(1)} pt`);
      }
    } else if (img.naturalWidth < 2 * shown - 0.5) {
      add('image-resolution', img, `${img.naturalWidth} px image shown ${px(shown)} wide (need 2x)`);
    }
  }

  // text: raw LaTeX or MyST markup, MathJax errors, debug lines, punctuation after math
  for (const e of main.querySelectorAll('mjx-merror')) add('raw-latex', e, 'MathJax error');
  const latex = /\\(frac|tfrac|mathbb|mathrm|mathcal|operatorname|lVert|rVert|sum|prod|hat|bar|overline|begin|end|left|right|cdot|sigma|mu|Delta|alpha|tau|theta|le|ge|ne|in)(?![A-Za-z])|\$[^$\s][^$]*\$|\{(glue|eval|math|eq|numref|ref|prf:ref|doc)(:[a-z]+)?\}`|`[^`\s][^`]*`/;
  const debug = /executed in [0-9.]+ s at profile/;
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT, {
    acceptNode: (n) => n.parentElement && n.parentElement.closest('script, style, code, pre, kbd, textarea, mjx-container, .highlight, .math, .MathJax_Preview')
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const m = n.textContent.match(latex);
    if (m) add('raw-latex', n.parentElement, `"${Array.from(m[0]).slice(0, 40).join('')}"`);
  }
  for (const el of main.querySelectorAll('.cell_output')) {
    const m = (el.innerText || '').match(debug);
    if (m) add('debug-line', el, m[0]);
  }
  for (const c of main.querySelectorAll('mjx-container:not([display="true"])')) {
    const host = c.parentElement && c.parentElement.matches('span.math') ? c.parentElement : c;
    const next = host.nextSibling;
    if (!next || next.nodeType !== Node.TEXT_NODE || !/^[.,;:!?)]/.test(next.textContent)) continue;
    const range = document.createRange();
    range.setStart(next, 0);
    range.setEnd(next, 1);
    const rects = range.getClientRects();
    const cr = c.getBoundingClientRect();
    if (rects.length && rects[0].top >= cr.bottom - 2) {
      add('punctuation-wrapped', host.parentElement, `"${next.textContent[0]}" after math starts a new line`);
    }
  }
  // table cells: no word split over two lines
  for (const cell of main.querySelectorAll('td, th')) {
    const w = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let broken = null;
    for (let n = w.nextNode(); n && !broken; n = w.nextNode()) {
      if (n.parentElement.closest('mjx-container, code, pre')) continue;
      const re = /[A-Za-z\u00C0-\u024F]{2,}/g;
      for (let m = re.exec(n.textContent); m && !broken; m = re.exec(n.textContent)) {
        const range = document.createRange();
        range.setStart(n, m.index);
        range.setEnd(n, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) broken = m[0];
      }
    }
    if (broken) add('word-broken', cell, `"${broken}" is split over two lines`);
  }

  // text left for later, and developers' comments in code a reader sees
  const placeholder = /<[A-Za-z][A-Za-z ]* (URL|url|name|path)>|\bTODO\b|\bFIXME\b|\bTBD\b|lorem ipsum/i;
  const text = main.innerText || '';
  const ph = text.match(placeholder);
  if (ph) add('placeholder', null, `"${ph[0]}"`);
  const devComment = /#.*(\bnoqa\b|papermill|\bTODO\b|\bFIXME\b|type: ?ignore)/;
  for (const el of main.querySelectorAll('.cell_input pre, div.cell_input .highlight pre')) {
    if (el.offsetParent === null) continue;   // not shown
    const line = (el.innerText || '').split('\n').find(l => devComment.test(l));
    if (line) add('developer-comment', el, `"${Array.from(line.trim()).slice(0, 60).join('')}"`);
  }
  // running text (paragraphs and list items, not tables, code, math or the bibliography): doubled words, "nan",
  // long numbers; a formula or code inside a paragraph stands as a token, so "and [formula] and" is no doubled word
  const skipInline = 'code, pre, kbd, script, style, mjx-container, .math, .cell_input, .highlight, svg';
  const proseText = (el) => {
    let t = '';
    for (const c of el.childNodes) {
      if (c.nodeType === Node.TEXT_NODE) t += c.textContent;
      else if (c.nodeType === Node.ELEMENT_NODE) t += c.matches(skipInline) ? ' \u00a7 ' : proseText(c);
    }
    return t;
  };
  const doubled = /(?<![\p{L}\p{N}])(\p{L}{2,})\s+\1(?![\p{L}\p{N}])/iu;
  const nanWord = /(?<![\p{L}])(nan|NaN)(?![\p{L}])/u;
  const decimals = /(?<![\p{L}\p{N}.,_:\/-])\d[\d,]*\.\d+(?:e[-+]?\d+)?(?![\p{L}\p{N}.\/])/giu;
  const sig = (t) => t.replace(/e.*$/i, '').replace(/[,.]/g, '').replace(/^0+/, '').length;
  for (const b of main.querySelectorAll('p, li, dd, figcaption, caption')) {
    if (b.closest('table, .citation, .bibliography, .cell_input, .highlight, pre')) continue;
    if (b.querySelector('p, li, dd')) continue;   // the innermost block only: its text is read once
    const t = proseText(b);
    const d = t.match(doubled);
    if (d) add('doubled-word', b, `"${d[0]}"`);
    const m = t.match(nanWord);
    if (m) add('nan-shown', b, `"${m[0]}" where a number should be`);
    for (const x of t.matchAll(decimals)) {
      if (sig(x[0]) > 4) { add('long-number', b, `"${x[0]}" has ${sig(x[0])} significant digits`); break; }
    }
  }
  // equation mentions in prose link to the equation
  const eqWalker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT, {
    acceptNode: (n) => n.parentElement && n.parentElement.closest('a, summary, h1, h2, h3, h4, h5, h6, .admonition-title, svg, code, pre, kbd, script, style, table, mjx-container, .cell_input, .highlight')
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  for (let n = eqWalker.nextNode(); n; n = eqWalker.nextNode()) {
    const m = n.textContent.match(/\b[Ee]qs?\.\s*\(?\d{1,2}\)?/);
    if (m) { add('eq-unlinked', n.parentElement, `"${m[0]}" is not a link`); }
  }
  // glossary terms: the first prose use of each links to its entry; every {term} reference resolves
  for (const x of main.querySelectorAll('.std-term')) {
    if (!x.closest('a[href]')) add('term-undefined', x, 'the glossary defines no such term');
  }
  const long = terms.filter(t => Array.from(t).length >= 3).sort((a, b) => b.length - a.length);
  if (long.length) {
    const esc = (t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const termRe = new RegExp('(?<![\\p{L}\\p{N}_-])(' + long.map(esc).join('|') + ')(?:e?s)?(?![\\p{L}\\p{N}_-])', 'giu');
    const seen = new Set();
    const tw = document.createTreeWalker(main, NodeFilter.SHOW_TEXT, {
      acceptNode: (n) => n.parentElement && n.parentElement.closest('summary, h1, h2, h3, h4, h5, h6, .admonition-title, svg, code, pre, kbd, script, style, table, caption, figcaption, dt, mjx-container, .cell_input, .highlight, .output.text_html, .rubric')
        ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
    for (let n = tw.nextNode(); n; n = tw.nextNode()) {
      const link = n.parentElement.closest('a[href]');
      const toGlossary = link && /#term-/.test(link.getAttribute('href'));
      if (link && !toGlossary) continue;   // another link's text (a title in a table of contents) is no use
      for (const m of n.textContent.matchAll(termRe)) {
        const t = m[1].toLowerCase();
        if (seen.has(t)) continue;
        seen.add(t);
        if (!toGlossary) {
          add('term-unlinked', n.parentElement, `the first use of "${m[0]}" is not a link to the glossary`);
        }
      }
    }
  }
  return out;
}
"""


#: A page that only forwards the reader elsewhere (``<meta http-equiv="Refresh" ...>`` and nothing else).
_REDIRECT = re.compile(r'\s*<meta http-equiv="refresh"[^>]*>\s*$', re.I)


def _pages(html_dir: Path, pages: Sequence[str] | None) -> list[str]:
    """The pages to read: ``pages`` as given, else every ``*.html`` under ``html_dir`` but Sphinx's own, the
    theme's and redirects."""
    if pages:
        return list(pages)
    skip = {"search.html", "genindex.html", "py-modindex.html"}
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
                  and not _REDIRECT.match(p.read_text(errors="replace")))


def check_book(html_dir: Path | str, *, pages: Sequence[str] | None = None,
               widths: Sequence[str] = tuple(WIDTHS), chromium: str | None = None) -> list[Finding]:
    """Read the ``pages`` (:func:`_pages`) of the built book ``html_dir`` at ``widths`` in headless Chromium
    (:func:`chromium_path`) and return every finding, desktop before phone.

    Raises:
        FileNotFoundError: ``html_dir`` is not a folder or holds no page.
        ValueError: an unknown width name.
        BrowserMissing: no Chromium, or Playwright is not installed.
    """
    html_dir = Path(html_dir)
    if not html_dir.is_dir():
        raise FileNotFoundError(f"html_dir: no built book at {html_dir} (run `make book` first)")
    unknown = [w for w in widths if w not in WIDTHS]
    if unknown:
        raise ValueError(f"widths must be among {list(WIDTHS)}; got {unknown}")
    names = _pages(html_dir, pages)
    if not names:
        raise FileNotFoundError(f"html_dir: no HTML page under {html_dir}")
    binary = chromium_path(chromium)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise BrowserMissing("Playwright is not installed: pip install -e '.[book]' (or pip install playwright); "
                             "it drives the system Chromium and downloads no browser") from exc

    terms = glossary_terms(html_dir)
    findings: list[Finding] = []
    with serve(html_dir) as base, sync_playwright() as pw:
        local = urlsplit(base).netloc
        for width in widths:
            with tempfile.TemporaryDirectory(prefix="maskfed-chromium-") as profile_dir:
                phone = width == "phone"
                context = pw.chromium.launch_persistent_context(
                    profile_dir, executable_path=binary, headless=True, args=list(CHROMIUM_FLAGS),
                    viewport={"width": WIDTHS[width], "height": HEIGHTS[width]}, is_mobile=phone, has_touch=phone,
                    device_scale_factor=3 if phone else 1, service_workers="block")
                try:
                    for name in names:
                        findings += _check_page(context, base, local, name, width,
                                                [] if Path(name).name == GLOSSARY_PAGE else terms)
                finally:
                    context.close()
    return findings


def glossary_terms(html_dir: Path) -> list[str]:
    """The terms the built glossary page (``GLOSSARY_PAGE`` anywhere under ``html_dir``) defines: the text of
    each ``<dt id="term-…">``, without its permalink; [] when the book has no glossary page."""
    pages = sorted(Path(html_dir).rglob(GLOSSARY_PAGE))
    if not pages:
        return []
    dts = re.findall(r"<dt\b[^>]*\bid=[\"']term-[^>]*>(.*?)</dt>", pages[0].read_text(errors="replace"), re.S)
    terms = (html.unescape(re.sub(r"<[^>]*>", "", re.sub(r"<a\b.*?</a>", "", dt, flags=re.S))).strip() for dt in dts)
    return [t for t in terms if t]


def _check_page(context, base: str, local: str, name: str, width: str, terms: Sequence[str] = ()) -> list[Finding]:
    """Open one page in ``context`` and return its findings (see :data:`PROBE_JS`); ``terms``: the glossary's."""
    found: list[tuple[str, str]] = []

    def route(r):
        parts = urlsplit(r.request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != local:
            found.append(("other-host", r.request.url[:120]))
            r.abort()
        else:
            r.continue_()

    def on_response(resp):
        if resp.status >= 400 and urlsplit(resp.url).netloc == local:
            found.append(("missing-file", f"{resp.status} {urlsplit(resp.url).path}"))

    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
    page.route("**/*", route)
    page.on("pageerror", lambda exc: found.append(("js-error", str(exc).splitlines()[0][:200])))
    # a failed load is logged as a console error too: it is reported once, as other-host or missing-file
    page.on("console", lambda msg: found.append(("js-error", f"console.error: {msg.text[:200]}"))
            if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    page.on("response", on_response)
    try:
        page.goto(base + name, wait_until="load", timeout=PAGE_TIMEOUT_S * 1000)
        probed = page.evaluate(PROBE_JS, {"desktop": width == "desktop", "terms": list(terms),
                                          "minFontPt": MIN_FONT_PT})
    finally:
        page.close()
    found += [(p["rule"], p["detail"]) for p in probed]
    return [Finding(name, width, rule, detail) for rule, detail in dict.fromkeys(found)]


def main(argv: list[str] | None = None) -> int:
    """Check the built book; one line per finding. Exit status 0 clean, 1 findings, 2 no browser or book."""
    parser = argparse.ArgumentParser(prog="book/_tools/browsercheck.py", description=__doc__.split("\n")[0])
    parser.add_argument("html_dir", nargs="?", default=str(REPO_ROOT / "book" / "_build" / "html"),
                        help="the built book (default: book/_build/html)")
    parser.add_argument("--page", action="append", default=None, help="only this page (repeatable), e.g. nb/intro.html")
    parser.add_argument("--width", action="append", choices=list(WIDTHS), default=None, help="only this width")
    parser.add_argument("--chromium", default=None, help="the Chromium binary (default: $MASKFED_CHROMIUM, chromium)")
    args = parser.parse_args(argv)
    try:
        findings = check_book(args.html_dir, pages=args.page, widths=args.width or tuple(WIDTHS), chromium=args.chromium)
    except (BrowserMissing, FileNotFoundError) as exc:
        print(f"book-check: {exc}", file=sys.stderr)
        return 2
    for f in findings:
        print(f)
    pages = len(_pages(Path(args.html_dir), args.page))
    widths = args.width or list(WIDTHS)
    by_rule = {r: sum(f.rule == r for f in findings) for r in RULES if any(f.rule == r for f in findings)}
    print(f"book-check: {pages} page(s) at {', '.join(f'{w} {WIDTHS[w]} px' for w in widths)}: "
          + (f"{len(findings)} finding(s) ({', '.join(f'{k} {v}' for k, v in by_rule.items())})" if findings
             else "no findings"), file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
