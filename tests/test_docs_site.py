"""The docs site: `tools/build_docs.py` builds it, and a real browser (headless Chromium) reads it.

Without Quarto the site is built from the same `_quarto.yml` and the same nbdev-processed notebooks
by smalldocs (see tools/build_docs.py). These tests check what a reader would notice: a page for
every notebook, the sidebar in reading order, an API entry for every public function, the maths
typeset (offline: the browser can resolve no host but this one), the pictures loaded, every link
inside the site landing on a page and an anchor that exist. And that the site is readable: a wide
text column, no code, output or picture cut at its edge, the outputs the notebooks saved (never
re-run on the build machine, no machine paths), pages of a bounded length, a quiet build. Set
KDA_DOCS_SCREENSHOTS=DIR to keep screenshots of a few pages (and the pages' heights, heights.json).

The browser tests skip, saying why, where Chromium, chromedriver or selenium is missing
(`apt-get install chromium chromium-driver`, `pip install selenium`).
"""
import functools
import http.server
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'

def _site_url() -> str:
    "doc_host + doc_baseurl of settings.ini (https://kda-nb.github.io/kda_nb/): where nbdev's doc links point."
    from configparser import ConfigParser
    cfg = ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini', encoding='utf-8')
    base = cfg['DEFAULT'].get('doc_baseurl', '').strip('/')
    return cfg['DEFAULT']['doc_host'].rstrip('/') + '/' + (base + '/' if base else '')


SITE_URL = _site_url()
SCREENSHOTS = ('index.html', 'chunked.html', 'kernels.html', 'api.html', 'bench.html', 'reports/profile_h200.html')

# Readability, checked in a window of each width (px): the text column is at least COLUMN[width] wide.
# At 1400 px the sidebar (260 px, with the page's table of contents) leaves ~1050 px; from ~1550 px the
# column has its 1160 px; under 992 px the sidebar folds away.
COLUMN = {1400: 1000, 1920: 1150, 1024: 640}
# Tables that may be wider than the column at 1400 px, scrolling in their own box: the profile's metric
# tables of 11 to 17 columns (launches, kernel_table, occupancy limits, memory, version comparison) and the
# hot-line tables whose `code` column holds unbreakable source. Everything else fits.
WIDE_TABLES = {'reports/profile_h200.html': 7, 'ncu_analysis.html': 1, 'ncu_reports.html': 1}
# The longest page may be 60 screens of a 1000 px window at 1400 px. Before the wide column and the folded
# API reference, 08_ncu was 67,400 px, 07_bench 44,700, 04_kernels 31,900; after, 57,000, 34,000 and
# 31,500: most of what is left is the notebooks' own code, tables and test cells. Split into a report
# (reports/profile_h200, 32,700 px) and a page per module (at most 10,600), the profile is much shorter. A
# page that outgrows the bound should be split into two notebooks, or its test cells folded (`#| code-fold: true`).
MAX_HEIGHT = 60_000
# What a page must never show: paths of the machine a notebook ran on (/tmp/..., /root/..., /home/..., the
# checkout in /work/...; not inside a URL), and the log of a benchmark run on a CPU (re-run at build time, as
# nbdev does for cells that import unless build_docs stops it, or saved in the notebook).
FORBIDDEN = {'a machine path': re.compile(r'(?<![\w.:/-])/(?:tmp|root|home|work)/[^\s<"\']*'),
             'a CPU benchmark log': re.compile(r'benchmark on cpu', re.I)}


def page_of(nb: Path) -> str:
    "The page nbdev (and Quarto) writes a notebook to: `03_chunked.ipynb` -> `chunked.html`, `reports/x.ipynb` -> `reports/x.html`."
    folder = 'reports/' if nb.parent.name == 'reports' else ''
    return folder + re.sub(r'^\d+[a-zA-Z0-9]*_', '', nb.name.lower()).removesuffix('.ipynb') + '.html'


def notebooks():
    "The notebooks of nbs/ and of nbs/reports/ (reports: notebooks that export nothing)."
    return sorted(p for p in [*NBS.glob('*.ipynb'), *NBS.glob('reports/*.ipynb')] if not p.name.startswith(('_', '.')))


def site_pages(site: Path) -> list[str]:
    "The pages of the built site, relative to it: one per notebook, the reports in `reports/`."
    return sorted(p.relative_to(site).as_posix() for p in [*site.glob('*.html'), *site.glob('reports/*.html')])


def _walk(items):
    "The files of sidebar entries, sections opened, in order."
    for e in items:
        if isinstance(e, dict) and 'contents' in e: yield from _walk(e['contents'])
        elif isinstance(e, dict): yield e.get('href') or e.get('file')
        else: yield e


def sidebar_files():
    "Every file nbs/sidebar.yml lists, in its order."
    return list(_walk(yaml.safe_load((NBS / 'sidebar.yml').read_text())['website']['sidebar']['contents']))


@pytest.fixture(scope='module')
def build(tmp_path_factory):
    "Build the site once, into a scratch folder; keep `_proc/` to count the outputs it should show."
    pytest.importorskip('smalldocs', reason='smalldocs renders the site without Quarto: pip install smalldocs (Python 3.11+)')
    out = tmp_path_factory.mktemp('docs') / '_docs'
    r = subprocess.run([sys.executable, 'tools/build_docs.py', '--out', str(out), '--keep-proc'],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    return out, r


@pytest.fixture(scope='module')
def site(build):
    "The built site, even when the build reported errors, so that the other tests say what is wrong with it."
    out, r = build
    if not (out / 'index.html').exists(): pytest.fail(f'tools/build_docs.py built no site:\n{r.stderr[-6000:]}')
    return out


def test_build_is_clean(build):
    "No notebook failed nbdev's processing, no broken link, nothing loaded from the network."
    out, r = build
    errors = r.stderr[r.stderr.find('build_docs: ERROR'):] if 'build_docs: ERROR' in r.stderr else r.stderr[-6000:]
    assert r.returncode == 0, f'tools/build_docs.py exited {r.returncode}:\n{errors}'


def test_build_output_is_short(build):
    "A clean build says one line: pages, API entries, time. Anything more is an error or a warning, said loudly."
    out, r = build
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip() and not l.startswith('build_docs: fetching ')]
    summary = re.compile(r'^build_docs: \d+ pages, \d+ API entries, in .* in \d+ s')
    assert lines and summary.match(lines[-1]), f'the build ends with its summary line, not:\n' + '\n'.join(lines[-10:])
    if r.returncode == 0:
        assert len(lines) <= 3, f'a clean build prints {len(lines)} lines (at most 3); --verbose is for the rest:\n' + '\n'.join(lines[:30])
    else:
        noise = [l for l in lines[:-1] if not re.match(r'build_docs: (ERROR|WARNING)|\s', l)]
        assert not noise, 'a failed build prints its errors, nothing else:\n' + '\n'.join(noise[:30])
    print(lines[-1])


# ---------------------------------------------------------------- without a browser

def _code_cells(nb: Path):
    "The code cells of a notebook, by their source without `#|` lines (nbdev drops and adds some of those)."
    for c in json.loads(nb.read_text(encoding='utf-8'))['cells']:
        if c['cell_type'] == 'code':
            yield re.sub(r'^#\|.*\n?', '', ''.join(c['source']), flags=re.M).strip(), c


def _outputs(cell) -> str:
    return json.dumps([{k: v for k, v in o.items() if k != 'execution_count'} for o in cell.get('outputs', [])], sort_keys=True)


def test_outputs_are_the_notebooks_own(site):
    "Every output on the site is the one saved in the notebook (where it was measured), never re-run on the build machine."
    changed = []
    for nb in notebooks():
        proc = ROOT / '_proc' / nb.relative_to(NBS)
        if not proc.exists(): continue
        saved = {}
        for src, c in _code_cells(nb): saved.setdefault(src, []).append(_outputs(c))
        for src, c in _code_cells(proc):
            if src.startswith('show_doc(') or src not in saved: continue  # the API reference is generated
            if _outputs(c) not in saved[src]: changed.append(f'{nb.relative_to(NBS)}: {src.splitlines()[0][:70]!r}')
    assert not changed, f'outputs that the build re-ran instead of showing the saved ones: {changed}'


def test_no_machine_paths_or_rerun_output(site):
    "No page shows where a notebook ran (/tmp/..., /root/..., /work/...) or a benchmark log from a CPU run."
    found = []
    for page in site_pages(site):
        text = (site / page).read_text(encoding='utf-8')
        for what, pat in FORBIDDEN.items():
            hits = [m.group(0) for m in pat.finditer(text)]
            if hits: found.append(f'{page}: {len(hits)} x {what}: {sorted(set(hits))[:4]}')
    assert not found, 'pages show what the saved outputs should not contain (fix the cells in the notebooks):\n' + '\n'.join(found)


def test_api_reference_is_folded():
    "build_docs folds a show_doc entry: the name and docstring stay, the signature and parameters open on a click."
    sys.path.insert(0, str(ROOT / 'tools'))
    from build_docs import fold_api_reference
    entry = ('<div class="cell-output cell-output-display cell-output-markdown">\n<hr />\n'
             '<p><a href="https://github.com/x/y.py#L1" target="_blank" style="float:right; font-size:smaller">source</a></p>\n'
             '<h3 id="f" class="anchored" data-anchor-id="f">f</h3>\n'
             '<div class="code-copy-outer-scaffold"><div class="sourceCode" id="cb1"><pre class="sourceCode python"><code>def f(x):</code></pre></div>'
             '<button title="Copy to Clipboard" class="code-copy-button"><i class="bi"></i></button></div>\n'
             '<p><em>Does f.</em></p>\n<table><tr><td>x</td></tr></table>\n</div>')
    html, n = fold_api_reference(f'<p>before</p>\n{entry}\n<p>after</p>')
    assert n == 1 and html.count('<details') == 1
    head, _, folded = html.partition('<details')
    assert 'id="f"' in head and '<em>Does f.</em>' in head and 'source</a>' in head, 'name, docstring and source link stay in the text'
    assert 'def f(x):' in folded and '<table>' in folded and '<p>after</p>' in folded
    assert fold_api_reference('<div class="cell-output cell-output-display cell-output-markdown">\n<hr />\n<p>other</p>\n</div>')[1] == 0



LAB = ('07', '08')      # the lab's module pages (kda_nb.bench, kda_nb.ncu): one section, below the reader's path


def test_sidebar_lists_every_notebook_in_reading_order():
    "The reader's path first (index, the library's pages 00 to 05 in order, then the rest), the lab's pages in one section below it."
    listed = sidebar_files()
    assert listed[0] == 'index.ipynb', 'the home page comes first'
    missing = [nb.relative_to(NBS).as_posix() for nb in notebooks() if nb.relative_to(NBS).as_posix() not in listed]
    assert not missing, f'add these notebooks to nbs/sidebar.yml: {missing}'
    assert len(listed) == len(set(listed)), 'a page listed twice in nbs/sidebar.yml'
    top = yaml.safe_load((NBS / 'sidebar.yml').read_text())['website']['sidebar']['contents']
    sections = [e for e in top if isinstance(e, dict) and 'contents' in e]
    assert len(sections) == 1 and top[-1] is sections[0], 'one section, the lab, after the reader\'s path'
    path, lab = [e for e in top if isinstance(e, str)], list(_walk(sections[0]['contents']))
    assert all(f.startswith(LAB) for f in lab) and not any(f.startswith(LAB) for f in path), (path, lab)
    assert lab == sorted(lab), 'the lab\'s pages follow their numbers (the benchmark, then the profiler)'
    library = [f for f in path if re.match(r'0[0-5]', f)]
    assert library == sorted(library) and path[1:1 + len(library)] == library, \
        'after the home page, the library\'s pages (00 to 05) in their order'
    assert [f for f in listed if (NBS / f).exists()] == [f for f in path + lab if (NBS / f).exists()]


def test_one_quarto_project_file():
    q = NBS / '_quarto.yml'
    assert q.is_symlink() and os.readlink(q) == '../_quarto.yml', 'nbs/_quarto.yml is a relative symlink to the top-level _quarto.yml'
    assert yaml.safe_load(q.read_text())['metadata-files'] == ['nbdev.yml', 'sidebar.yml']


def test_every_notebook_has_a_page(site):
    missing = [f'{nb.name} -> {page_of(nb)}' for nb in notebooks() if not (site / page_of(nb)).exists()]
    assert not missing, f'no page for {missing}'
    assert (site / 'index.html').exists()


def test_every_public_function_has_an_api_entry(site):
    "nbdev's show_doc entry, at the anchor nbdev's module index links to, for each function and class in `__all__`."
    sys.path.insert(0, str(ROOT))
    from kda_nb._modidx import d
    missing = []
    for mod, syms in d['syms'].items():
        m = importlib.import_module(mod)
        for name in getattr(m, '__all__', []):
            if not (inspect.isfunction(getattr(m, name)) or inspect.isclass(getattr(m, name))): continue
            page, _, frag = syms[f'{mod}.{name}'][0].partition('#')
            html = (site / page).read_text(encoding='utf-8') if (site / page).exists() else ''
            if f'id="{frag}"' not in html: missing.append(f'{mod}.{name} ({page}#{frag})')
    assert not missing, f'no API entry for {len(missing)} public functions, among them {missing[:12]}'


def test_no_asset_from_the_network(site):
    "Every script and stylesheet is in the site: KaTeX too, so that the maths renders offline."
    pat = re.compile(r'<(?:script|link)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]+"[^>]*>')
    found = {f'{p}: {m.group(0)}' for p in site_pages(site) for m in pat.finditer((site / p).read_text(encoding='utf-8'))
             if not re.search(r'rel="(?:canonical|alternate)"', m.group(0))}
    assert not found, sorted(found)
    assert (site / 'site_libs' / 'katex' / 'katex.min.js').exists()


# ---------------------------------------------------------------- in a browser

def _browser_missing() -> str | None:
    try: import selenium  # noqa: F401
    except ImportError: return 'selenium is not installed (pip install selenium)'
    if not (shutil.which('chromium') or shutil.which('chromium-browser')):
        return 'Chromium and its chromedriver are not installed (apt-get install chromium chromium-driver)'
    if not shutil.which('chromedriver'): return 'chromedriver is not installed (apt-get install chromium-driver)'


@pytest.fixture(scope='module')
def browser(site):
    reason = _browser_missing()
    if reason: pytest.skip(f'no browser to check the docs site in: {reason}')
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args): pass
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which('chromium') or shutil.which('chromium-browser')
    profile = tempfile.mkdtemp(prefix='kda-docs-chromium-')
    for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
              '--disable-background-networking', '--disable-component-update', '--disable-sync',
              '--disable-dev-shm-usage', f'--user-data-dir={profile}', '--window-size=1400,1000',
              '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1'):  # offline, as CI is
        opts.add_argument(a)
    opts.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    os.environ.setdefault('SE_OFFLINE', 'true')  # selenium must not look for a driver on the network
    driver = webdriver.Chrome(service=Service(shutil.which('chromedriver')), options=opts)
    driver.set_page_load_timeout(60)
    try: yield driver, f'http://127.0.0.1:{server.server_port}/'
    finally:
        driver.quit()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)


READ_PAGE = r"""
const main = document.querySelector('main') || document.body;
const prose = main.cloneNode(true);
prose.querySelectorAll('pre, code, script, style, .katex').forEach(e => e.remove());
return {
  math: document.querySelectorAll('.math').length,
  typeset: document.querySelectorAll('.math .katex').length,
  errors: Array.from(document.querySelectorAll('.katex-error')).map(e => e.title || e.textContent).slice(0, 5),
  raw: (prose.textContent.match(/\\\(|\\\[|\$\$|\$[^$\s](?:[^$\n]*?[^$\s\\])?\$/g) || []).slice(0, 5),
  images: Array.from(document.images).map(i => ({src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0})),
  svgs: main.querySelectorAll('.cell-output svg').length,
  tables: main.querySelectorAll('.cell-output-display table').length,
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  sidebar: Array.from(document.querySelectorAll('#quarto-sidebar .sidebar-menu-container a[href]')).map(a => a.getAttribute('href')),
  title: document.title,
};
"""


def _expected_outputs(page: str) -> tuple[int, int]:
    "Pictures and tables among the saved outputs of the processed notebook behind `page`."
    nbs = [p for p in [*(ROOT / '_proc').glob('*.ipynb'), *(ROOT / '_proc').glob('reports/*.ipynb')] if page_of(p) == page]
    if not nbs: return 0, 0
    pics = tables = 0
    for cell in json.loads(nbs[0].read_text(encoding='utf-8'))['cells']:
        src = ''.join(cell.get('source', ''))
        if re.search(r'^#\|\s*(output:\s*false|include:\s*false)', src, re.M): continue
        for o in cell.get('outputs', []):
            data = o.get('data', {})
            if any(k in data for k in ('image/png', 'image/jpeg', 'image/gif', 'image/svg+xml')) and 'text/html' not in data: pics += 1
            elif '<table' in ''.join(data.get('text/html', '')): tables += 1
    return pics, tables


def _ids(path: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', path.read_text(encoding='utf-8')))


def test_pages_in_a_browser(site, browser):
    driver, base = browser
    shots = Path(os.environ.get('KDA_DOCS_SCREENSHOTS') or site.parent / 'screenshots')
    shots.mkdir(parents=True, exist_ok=True)
    pages = site_pages(site)
    problems, ids = [], {}
    for page in pages:
        driver.get(base + page)
        driver.execute_script('return document.fonts.ready')
        got = driver.execute_script(READ_PAGE)
        where = f'{page}:'
        if got['typeset'] != got['math']: problems.append(f'{where} {got["math"] - got["typeset"]} of {got["math"]} formulas not typeset')
        if got['errors']: problems.append(f'{where} KaTeX could not typeset {got["errors"]}')
        if got['raw']: problems.append(f'{where} raw TeX in the text: {got["raw"]}')
        bad = [i['src'] for i in got['images'] if not i['ok']]
        if bad: problems.append(f'{where} pictures that did not load: {bad}')
        pics, tables = _expected_outputs(page)
        if len(got['images']) + got['svgs'] < pics: problems.append(f'{where} {pics} pictures saved in the notebook, {len(got["images"]) + got["svgs"]} shown')
        if got['tables'] < tables: problems.append(f'{where} {tables} tables saved in the notebook, {got["tables"]} shown')
        for href in got['links']:
            u = urlsplit(href)
            if href.startswith(base): rel = href[len(base):]
            elif href.startswith(SITE_URL): rel = href[len(SITE_URL):]  # nbdev's links to the published site
            else: continue
            target = unquote(urlsplit(rel).path) or 'index.html'
            if target.endswith('/'): target += 'index.html'
            if not (site / target).is_file(): problems.append(f'{where} link to a missing page: {href}'); continue
            if u.fragment and target.endswith('.html'):
                if target not in ids: ids[target] = _ids(site / target)
                if unquote(u.fragment) not in ids[target]: problems.append(f'{where} link to a missing anchor: {href}')
        logs = [e['message'] for e in driver.get_log('browser') if e['level'] == 'SEVERE' and 'favicon.ico' not in e['message']]
        if logs: problems.append(f'{where} console errors: {logs[:3]}')
        if page in SCREENSHOTS: driver.save_screenshot(str(shots / page.replace('/', '_').replace('.html', '.png')))
        if page == 'index.html':
            want = [page_of(NBS / f) if f.endswith('.ipynb') else f for f in sidebar_files() if (NBS / f).exists() or f == 'index.ipynb']
            shown = list(dict.fromkeys(h.split('#')[0].removeprefix('./') or 'index.html' for h in got['sidebar']))
            if shown != want: problems.append(f'sidebar: {shown}, expected {want}')
    print(f'checked {len(pages)} pages in Chromium; screenshots in {shots}')
    assert not problems, '\n'.join(problems)


READ_LAYOUT = r"""
const main = document.querySelector('main.content');
const col = main.clientWidth;
const height = document.documentElement.scrollHeight;
document.querySelectorAll('details').forEach(d => d.open = true);  // folded API entries must fit too, once open
const shown = e => e.getClientRects().length > 0;
const label = e => {
  const c = e.closest('.cell');
  return (c ? '#' + c.id + ' ' : '') + e.tagName.toLowerCase() + ' ' + Math.round(e.scrollWidth) + ' px: '
         + (e.textContent || e.getAttribute('src') || '').trim().replace(/\s+/g, ' ').slice(0, 60);
};
const scroller = e => {  // the nearest box that scrolls sideways, or main
  for (let b = e.parentElement; b && b !== main; b = b.parentElement)
    if (['auto', 'scroll'].includes(getComputedStyle(b).overflowX)) return b;
  return main;
};
const wide = Array.from(main.querySelectorAll('table')).filter(shown).filter(t => t.getBoundingClientRect().width > col + 2);
return {
  col, height,
  page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  pres: Array.from(main.querySelectorAll('pre')).filter(shown).filter(e => e.scrollWidth > e.clientWidth + 2).map(label),
  boxed: wide.filter(t => t.closest('.cell-output') && scroller(t) !== main && scroller(t).getBoundingClientRect().width <= col + 2).map(label),
  loose: wide.filter(t => !t.closest('.cell-output') || scroller(t) === main || scroller(t).getBoundingClientRect().width > col + 2).map(label),
  images: Array.from(main.querySelectorAll('img, .cell-output svg')).filter(shown).filter(i => i.getBoundingClientRect().width > col + 1).map(label),
};
"""


def test_pages_are_readable(site, browser):
    """At 1400, 1920 and 1024 px: a wide text column; no code block or output cut at its edge (long lines wrap);
    tables fit, except the few wide computed ones, which scroll in their own box; pictures no wider than the
    column; the page never scrolls sideways; at 1400 px no page is longer than MAX_HEIGHT."""
    driver, base = browser
    shots = Path(os.environ.get('KDA_DOCS_SCREENSHOTS') or site.parent / 'screenshots')
    shots.mkdir(parents=True, exist_ok=True)
    pages = site_pages(site)
    problems, heights = [], {}
    try:
        for width in COLUMN:
            driver.set_window_size(width, 1000)
            for page in pages:
                driver.get(base + page)
                driver.execute_script('return document.fonts.ready')
                got = driver.execute_script(READ_LAYOUT)
                where = f'{page} at {width} px:'
                if width == 1400: heights[page] = got['height']
                if got['col'] < COLUMN[width]: problems.append(f'{where} the text column is {got["col"]} px, narrower than {COLUMN[width]}')
                if got['page'] > 0: problems.append(f'{where} the page scrolls sideways by {got["page"]} px')
                if got['pres']: problems.append(f'{where} {len(got["pres"])} code blocks or outputs cut at the edge: {got["pres"][:4]}')
                if got['loose']: problems.append(f'{where} tables wider than the column outside a box of their own: {got["loose"][:4]}')
                if width == 1400 and len(got['boxed']) > WIDE_TABLES.get(page, 0):
                    problems.append(f'{where} {len(got["boxed"])} tables scroll sideways (at most {WIDE_TABLES.get(page, 0)}): {got["boxed"]}')
                if got['images']: problems.append(f'{where} pictures wider than the column: {got["images"][:4]}')
    finally:
        driver.set_window_size(1400, 1000)
    (shots / 'heights.json').write_text(json.dumps(heights, indent=1))
    print('page heights at 1400 px: ' + ', '.join(f'{p} {h}' for p, h in sorted(heights.items(), key=lambda x: -x[1])))
    long = {p: h for p, h in heights.items() if h > MAX_HEIGHT}
    if long: problems.append(f'pages longer than {MAX_HEIGHT} px at 1400 px: {long}')
    assert not problems, '\n'.join(problems)
