"""Build the docs site without Quarto: `python tools/build_docs.py` writes `_docs/`.

With Quarto installed, `nbdev_docs` publishes the site, as in any nbdev project. This script builds
the same site from the same Quarto project where Quarto is not available (CI, most laptops):

1. nbdev's own steps, as `nbdev_docs` runs them before it calls Quarto: `nbs/nbdev.yml` from
   settings.ini, the module index, then nbdev's notebook processors (front matter from the title
   cell, `show_doc` for every exported function, hidden and exported cells dropped) into `_proc/`.
   `_proc/` is what Quarto would render. nbdev's `nbdev_proc_nbs` is not called because it first
   installs Quarto. One difference: nbdev's `exec_show_docs` also re-runs every cell that contains an
   import and replaces its saved outputs with the build machine's (a CPU benchmark, temporary paths,
   a minute of timing loops); here only what `show_doc` needs runs (exported cells, cells of imports
   only, show_doc cells) and every output on the site is the one saved in the notebook.
2. smalldocs renders `_proc/` from its `_quarto.yml` (the top-level one, through the symlink
   `nbs/_quarto.yml`) into `_docs/`: pages, sidebar, search, the outputs saved in the notebooks.
   Each show_doc entry is then folded: its name and docstring stay in the text, its signature and
   parameters open on a click (`<details>`); links nbdev made to private names that have no entry
   become plain code.
3. KaTeX, which smalldocs loads from a CDN, and the theme's web font, which it imports from Google
   Fonts, are put into `_docs/site_libs/` from the npm registry (cached after the first build), so
   the site, maths included, works with no network.

The build prints one line (pages, API entries, time); `--verbose` says what each step does and shows
the warnings that are expected. Errors are always printed, and make it exit 1: a notebook whose
`show_doc` cells fail to run (it is still rendered, without its API reference), a broken link, an
asset loaded from the network. A notebook listed in `nbs/sidebar.yml` that does not exist yet is left
out of the sidebar, with a warning; without `nbs/index.ipynb` a stand-in home page is written.
"""
import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import unquote

import yaml

ROOT = Path(__file__).resolve().parents[1]
KATEX_FILES = ('katex.min.js', 'katex.min.css', 'contrib/auto-render.min.js', 'fonts')


VERBOSE = False  # --verbose: say what each step does, and show nbdev's and smalldocs's expected warnings too


def say(msg): print(f'build_docs: {msg}', file=sys.stderr, flush=True)


def note(msg):
    "Progress and expected warnings: shown with --verbose only."
    if VERBOSE: say(msg)


def _short(msg) -> str:
    "A warning on one line."
    lines = [l for l in str(msg).splitlines() if l.strip() and l.strip() != '---']
    return lines[0] if lines else str(msg)


# ---------------------------------------------------------------- 1. nbdev's notebook processing

HINT = ('\n  hint: to render the API reference the build runs the notebook\'s exported cells, its cells of imports only'
        ' and its show_doc cells (here with no GPU); the failing cell must run on a machine without one')

# The cells the API reference needs: nbdev's show_doc entries document what the exported cells define.
EXEC_DIRECTIVES = {'export', 'exports', 'exporti', 'exec_doc'}


def _needed_for_docs(cell) -> bool:
    "Whether `show_doc` needs this cell run: an exported (or `#| exec_doc`) cell, a cell of imports only, or a show_doc cell."
    import ast
    from nbdev.processors import _show_docs
    if cell.cell_type != 'code' or not cell.source or 'nbdev_export' + '()' in cell.source: return False
    if cell.directives_.get('eval:', [''])[0].lower() == 'false': return False
    if cell.directives_.keys() & EXEC_DIRECTIVES: return True
    trees = cell.parsed_()  # the cell's top-level statements; None for magics and shell escapes
    if not trees: return False
    return all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in trees) or bool(_show_docs(trees))


def _stored_output_procs():
    """nbdev's processors with `exec_show_docs` narrowed to what the API reference needs.

    nbdev's own `exec_show_docs` runs, besides the exported and show_doc cells, every cell that contains an
    import, and replaces its saved outputs with what it prints on the build machine: a CPU benchmark instead
    of the H200's, temporary paths, a minute of timing loops. Here only the cells `show_doc` needs run, and
    every cell but the show_doc ones keeps the outputs saved in the notebook.
    """
    from fastcore.basics import str2bool
    from nbdev.processors import FilterDefaults, _is_showdoc, exec_show_docs

    class exec_show_docs_only(exec_show_docs):
        def __call__(self, cell):
            if not self.nb.has_docs_ or not hasattr(self, 'k'): return
            fm = getattr(self.nb, 'frontmatter_', {})
            if str2bool(fm.get('skip_showdoc', False)) or not _needed_for_docs(cell): return
            stored = cell.get('outputs')
            self.k.cell(cell)
            if not _is_showdoc(cell):  # the API entry is generated; any other output is the one the notebook saved
                if stored is None: cell.pop('outputs', None)
                else: cell['outputs'] = stored
            if self.k.exc:
                lines = cell.source.strip().splitlines()
                first = lines[0] + (f'  (and {len(lines) - 1} more lines)' if len(lines) > 1 else '')
                raise Exception(f"cell {cell.idx_} failed to run: {first}") from self.k.exc

        def end(self):
            super().end()
            # IPython cleans every shell up at exit, a full garbage collection each: seconds with torch loaded
            if hasattr(self, 'k'): atexit.unregister(self.k.atexit_operations)

    class StoredOutputs(FilterDefaults):
        def base_procs(self): return [exec_show_docs_only if p is exec_show_docs else p for p in super().base_procs()]
    return StoredOutputs


def _no_exec_procs():
    "nbdev's processors without `exec_show_docs`: the page keeps its prose, code and saved outputs, not its API reference."
    from nbdev.processors import FilterDefaults, exec_show_docs

    class NoExec(FilterDefaults):
        def base_procs(self): return [p for p in super().base_procs() if p is not exec_show_docs]
    return NoExec


def process_notebooks(root: Path) -> tuple[Path, list[str], list[str]]:
    "Run nbdev's pre-Quarto steps into `root/_proc`; return it, the notebooks that failed, and nbdev's warnings."
    os.chdir(root)  # nbdev finds settings.ini from the working directory
    import nbdev.doclinks
    import nbdev.serve_drv
    from nbdev.config import get_config
    from nbdev.quarto import nbdev_sidebar, refresh_quarto_yml
    from nbdev.serve import _proc_file
    from nbdev.doclinks import nbglob

    cfg = get_config()
    nbs = cfg.nbs_path
    refresh_quarto_yml()                       # nbs/nbdev.yml from settings.ini; keeps nbs/_quarto.yml
    nbdev.doclinks._build_modidx()             # the index that turns `name` into a link
    nbdev_sidebar.__wrapped__(path=nbs)        # a no-op here: settings.ini has custom_sidebar = True
    cache = cfg.config_path / '_proc'
    shutil.rmtree(cache, ignore_errors=True)   # always from scratch: show_doc output depends on kda_nb/
    cache.mkdir()
    # the files nbdev's proc_nbs takes: everything in nbs/ (notebooks processed, the rest copied), and _quarto.yml
    files = nbglob(nbs, func=Path, file_glob='', file_re='')
    for extra in ('_quarto.yml', '_brand.yml'):
        if (nbs / extra).exists(): files.append(nbs / extra)
    jobs = [j for j in (_proc_file(f, cache=cache, path=nbs) for f in files) if j]
    failed, warned = [], []
    for src, dst, procs in jobs:
        if src.suffix == '.ipynb': procs = _stored_output_procs()
        note(f'processing {src.relative_to(root)}')
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter('always')
                nbdev.serve_drv.main((src, dst, procs))
            for w in caught:
                warned.append(f'{src.name}: {_short(w.message)}')
                note(f'  nbdev: {_short(w.message)}')
        except Exception as e:
            cause = e.__cause__ or e.__context__
            failed.append(f'{src.name}: {e}' + (f'\n  caused by {type(cause).__name__}: {cause}' if cause else '') + HINT)
            say(f'ERROR {src.name}: its show_doc cells failed to run; rendering it without its API reference')
            os.environ.pop('IN_TEST', None)
            nbdev.serve_drv.main((src, dst, _no_exec_procs()))
    return cache, failed, warned


# ---------------------------------------------------------------- sidebar and home page

def _entry_file(e):
    "The file a sidebar entry points at, or None for a section or an external link."
    if isinstance(e, str): return e
    if isinstance(e, dict) and 'contents' not in e: return e.get('href') or e.get('file')
    return None


def _entry_files(items):
    "The files of sidebar entries in order, a section's contents in its place."
    for e in items:
        if isinstance(e, dict) and 'contents' in e: yield from _entry_files(e['contents'] or [])
        elif _entry_file(e): yield _entry_file(e)


def fix_sidebar(cache: Path, has_index: bool) -> list[str]:
    "Drop the sidebar's entries whose notebook does not exist yet; point `index.ipynb` at the stand-in."
    f = cache / 'sidebar.yml'
    if not f.exists(): return []
    doc = yaml.safe_load(f.read_text()) or {}
    missing = []

    def keep(items):
        out = []
        for e in items:
            if isinstance(e, dict) and 'contents' in e:
                inner = keep(e['contents'] or [])
                if inner: out.append({**e, 'contents': inner})     # a section none of whose pages exist goes
                continue
            target = _entry_file(e)
            if target == 'index.ipynb' and not has_index:
                out.append('index.qmd')
            elif target and '://' not in target and not (cache / target).exists():
                missing.append(target)
            else:
                out.append(e)
        return out

    sb = doc.get('website', {}).get('sidebar', {})
    for bar in sb if isinstance(sb, list) else [sb]:
        if 'contents' in bar: bar['contents'] = keep(bar['contents'] or [])
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return missing


def _title(nb: Path) -> str:
    "The title nbdev put in a processed notebook's front matter, else its file name."
    import json
    cells = json.loads(nb.read_text(encoding='utf-8')).get('cells') or [{}]
    src = ''.join(cells[0].get('source', ''))
    m = re.match(r'---\n(.*?)\n---', src, re.S) if cells[0].get('cell_type') == 'raw' else None
    fm = (yaml.safe_load(m.group(1)) if m else None) or {}
    return str(fm.get('title') or nb.stem)


def write_standin_index(cache: Path):
    "A home page for a checkout without `nbs/index.ipynb`: the title, the summary, the notebooks in reading order."
    from nbdev.config import get_config
    cfg = get_config()
    doc = yaml.safe_load((cache / 'sidebar.yml').read_text()) if (cache / 'sidebar.yml').exists() else {}
    sb = (doc or {}).get('website', {}).get('sidebar', {})
    entries = list(_entry_files(sb.get('contents') or [])) if isinstance(sb, dict) else []
    pages = [e for e in entries if e and e != 'index.ipynb' and (cache / e).exists()]
    lines = ['---', f'title: "{cfg.title}"', f'description: "{cfg.description}"', '---', '',
             '*`nbs/index.ipynb`, the home page and README, is not written yet.* The notebooks, in reading order:', '']
    lines += [f'{i}. [{_title(cache / p)}]({p})' for i, p in enumerate(pages, 1)]
    (cache / 'index.qmd').write_text('\n'.join(lines) + '\n')


# ---------------------------------------------------------------- 2. smalldocs renders _proc/

# smalldocs's warnings that are expected for an nbdev _quarto.yml: options for Quarto's other outputs
EXPECTED = re.compile(r'format commonmark is not built|keep-md is ignored|output-file is not read')


def nbdev_site(project):
    "A smalldocs site that, as Quarto, writes each notebook to the `output-file` nbdev gave it (`03_chunked.ipynb` -> `chunked.html`)."
    from smalldocs.site import Site

    class NbdevSite(Site):
        def read(self, src):
            page = super().read(src)
            if page.front.get('output-file'): page.out = src.parent / str(page.front['output-file'])
            return page

        def find_page(self, target):  # a link to `chunked.html` finds the page of `03_chunked.ipynb`
            found = super().find_page(target)
            return found or next((p for p in self.pages.values() if p.out == target), None)
    return NbdevSite(project, quiet=True)


def render(cache: Path, out: Path) -> list[str]:
    "Render `cache` with smalldocs and move its output to `out`; return smalldocs's broken links."
    from smalldocs.config import load
    site = nbdev_site(load(cache))
    site.build()
    for w in site.warnings:
        (note if EXPECTED.search(w) else say)(f'smalldocs: {w}')
    built = site.out
    if out.exists(): shutil.rmtree(out)
    shutil.move(str(built), str(out))
    return [f'{page}: {href}' for page, href in site.broken]


# ---------------------------------------------------------------- the API reference, folded

# A show_doc entry as smalldocs renders nbdev's Markdown: a rule, the source link, the name as a heading, the
# signature as a code block, the docstring in italics, then the rest (parameters table, longer text).
SHOW_DOC = re.compile(r'<div class="cell-output cell-output-display cell-output-markdown">\n<hr />\n')
ENTRY = re.compile(
    r'(?P<src><p><a [^>]*>source</a></p>\n)?'
    r'(?P<head><h(?P<level>[3-6])\b[^>]*>.*?</h(?P=level)>)\n'
    r'(?P<sig><div class="code-copy-outer-scaffold"><div class="sourceCode".*?</pre></div>.*?</div>|<div class="sourceCode".*?</pre></div>)\n?'
    r'(?P<doc><p><em>(?:(?!</p>).)*</p>\n?)?'  # the paragraph that opens with the docstring's first line, in italics
    r'(?P<rest>.*)', re.S)

DIV_TAG = re.compile(r'<div\b|</div>')


def _div_end(text: str, start: int) -> int:
    "The index just past the `</div>` that closes the `<div` at `start`."
    depth = 0
    for m in DIV_TAG.finditer(text, start):
        depth += 1 if m.group(0) == '<div' else -1
        if depth == 0: return m.end()
    return len(text)


def fold_api_reference(html: str) -> tuple[str, int]:
    """Fold each show_doc entry: its name (the heading, an anchor and a line of the table of contents) and its
    docstring stay in the text; the signature, the parameters and any longer text open on a click."""
    out, pos, n = [], 0, 0
    for m in SHOW_DOC.finditer(html):
        if m.start() < pos: continue
        end = _div_end(html, m.start())
        inner = html[m.end():end - len('</div>')]
        e = ENTRY.fullmatch(inner)
        if not e: continue
        rest = e['rest'].strip()
        what = 'signature, parameters' if '<table' in rest else 'signature, details' if rest else 'signature'
        out += [html[pos:m.start()],
                '<div class="cell-output cell-output-display cell-output-markdown api-entry">\n',
                e['head'], '\n', e['doc'] or '', (e['src'] or '').replace('<p>', '<p class="api-source">', 1),
                f'<details class="api-details"><summary>{what}</summary>\n', e['sig'], '\n', rest, '\n</details>\n</div>']
        pos, n = end, n + 1
    return ''.join(out) + html[pos:], n


def fold_api_pages(out: Path) -> int:
    "Fold the API reference of every page; return how many entries were folded."
    total = 0
    for p in out.glob('*.html'):
        text = p.read_text(encoding='utf-8')
        new, n = fold_api_reference(text)
        if n: p.write_text(new, encoding='utf-8')
        total += n
    return total


# ---------------------------------------------------------------- 3. KaTeX and the theme's web font, offline

# The npm packages that hold the web fonts the Bootswatch theme imports from Google Fonts
WEB_FONTS = {'Source Sans Pro': ('@fontsource/source-sans-pro', '5.2.5')}  # cosmo's


def npm_package(name: str, version: str) -> Path:
    "The files of an npm package: from the cache, else `npm pack NAME@VERSION` (the npm registry) into it."
    cache = Path(os.environ.get('XDG_CACHE_HOME', Path.home() / '.cache')) / 'kda_nb-docs' / f'{name.replace("/", "+")}-{version}'
    if (cache / 'package' / 'package.json').exists(): return cache / 'package'
    npm = shutil.which('npm')
    if not npm: raise SystemExit(f'build_docs: {name}@{version} is needed so that the site works offline: install Node.js (npm)')
    say(f'fetching {name}@{version} from the npm registry')
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([npm, 'pack', f'{name}@{version}', '--silent', '--pack-destination', tmp],
                       check=True, cwd=tmp, stdout=subprocess.DEVNULL)
        tgz, = Path(tmp).glob('*.tgz')
        part = cache.with_name(cache.name + '.part')
        shutil.rmtree(part, ignore_errors=True)
        with tarfile.open(tgz) as t: t.extractall(part, **({'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}))
        shutil.rmtree(cache, ignore_errors=True)
        part.rename(cache)
    return cache / 'package'


def katex_url_and_version():
    "The CDN folder smalldocs links KaTeX from, and its version."
    from smalldocs.layout import KATEX
    return KATEX, re.search(r'katex@([\d.]+)', KATEX).group(1)


def vendor_katex(out: Path):
    "Copy KaTeX (`$KATEX_DIST`, else the npm package) into `out/site_libs/katex/` and point every page at it instead of the CDN."
    url, version = katex_url_and_version()
    pages = [p for p in out.rglob('*.html') if url in p.read_text(encoding='utf-8')]
    if not pages: return
    dist = Path(os.environ['KATEX_DIST']) if os.environ.get('KATEX_DIST') else npm_package('katex', version) / 'dist'
    dest = out / 'site_libs' / 'katex'
    for name in KATEX_FILES:
        s = dist / name
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(s, dest / name) if s.is_dir() else shutil.copy2(s, dest / name)
    for p in pages:
        up = '../' * (len(p.relative_to(out).parts) - 1)
        p.write_text(p.read_text(encoding='utf-8').replace(url, f'{up}site_libs/katex'), encoding='utf-8')


GOOGLE_FONTS = re.compile(r'@import url\((https://fonts\.googleapis\.com/css2\?[^)]*)\);?')


def vendor_web_fonts(out: Path):
    "Replace a theme's `@import` of Google Fonts with the same fonts from npm (fontsource), in `out/site_libs/fonts/`."
    for css in (out / 'site_libs').rglob('*.css'):
        text = css.read_text(encoding='utf-8')

        def local(m):
            imports = []
            for fam in re.findall(r'family=([^&]+)', unquote(m.group(1))):
                family, _, axes = fam.replace('+', ' ').partition(':')
                if family not in WEB_FONTS:
                    say(f'WARNING {css.name} imports the web font {family!r}, which build_docs cannot vendor: it loads from the network')
                    return m.group(0)
                pkg = npm_package(*WEB_FONTS[family])
                dest = out / 'site_libs' / 'fonts' / family.lower().replace(' ', '-')
                spec = axes.partition('@')[2]  # `300;400;700`, or with `ital,wght@`: `0,400;1,400`
                for w in spec.split(';') if spec else ['400']:
                    ital, _, weight = w.rpartition(',')
                    name = f'{weight}-italic.css' if ital == '1' else f'{weight}.css'
                    face = (pkg / name).read_text(encoding='utf-8')
                    for f in re.findall(r'url\(\./files/([^)]+)\)', face):
                        (dest / 'files').mkdir(parents=True, exist_ok=True)
                        shutil.copy2(pkg / 'files' / f, dest / 'files' / f)
                    (dest / name).write_text(face, encoding='utf-8')
                    imports.append(f'@import url({os.path.relpath(dest / name, css.parent)});')
            return ''.join(imports)
        new = GOOGLE_FONTS.sub(local, text)
        if new != text: css.write_text(new, encoding='utf-8')


def localize_links(out: Path, site_url: str):
    "Point nbdev's links to the published site (`site_url/api.html#fwd`) at the pages of this build."
    for p in out.rglob('*.html'):
        text = p.read_text(encoding='utf-8')
        up = '../' * (len(p.relative_to(out).parts) - 1)
        new = text.replace(f'href="{site_url}"', f'href="{up or "./"}"').replace(f'href="{site_url}', f'href="{up}')
        if new != text: p.write_text(new, encoding='utf-8')


PRIVATE_LINK = re.compile(r'<a href="(?P<page>[^"#:]+\.html)#(?P<frag>_[^"]*)"><code>(?P<name>[^<]*)</code></a>')


def unlink_private_names(out: Path) -> int:
    """nbdev links every `name` its module index knows, private helpers too (`_forward`), but writes API entries
    for public names only: a private name with no entry on its page stays code, not a link to an anchor that
    is not there. (A public name without its entry is still a broken link, which the tests report.)"""
    ids, n = {}, 0
    for p in out.rglob('*.html'):
        text = p.read_text(encoding='utf-8')

        def plain(m):
            nonlocal n
            target = (p.parent / m['page']).resolve()
            if target not in ids: ids[target] = set(re.findall(r'\bid="([^"]+)"', target.read_text(encoding='utf-8'))) if target.exists() else set()
            if m['frag'] in ids[target]: return m.group(0)
            n += 1
            return f'<code>{m["name"]}</code>'
        new = PRIVATE_LINK.sub(plain, text)
        if new != text: p.write_text(new, encoding='utf-8')
    return n


def external_assets(out: Path) -> list[str]:
    "Scripts, stylesheets and CSS imports that the site still loads from the network."
    tag = re.compile(r'<(?:script|link)\b[^>]*?\b(?:src|href)="((?:https?:)?//[^"]+)"[^>]*>')
    found = set()
    for p in out.rglob('*.html'):
        for m in tag.finditer(p.read_text(encoding='utf-8')):
            if not re.search(r'rel="(?:canonical|alternate)"', m.group(0)): found.add(f'{p.relative_to(out)}: {m.group(1)}')
    for p in out.rglob('*.css'):
        for m in re.finditer(r'@import url\(["\']?((?:https?:)?//[^)"\']+)', p.read_text(encoding='utf-8')):
            found.add(f'{p.relative_to(out)}: {m.group(1)}')
    return sorted(found)


# ---------------------------------------------------------------- the command

def main(argv=None) -> int:
    global VERBOSE
    ap = argparse.ArgumentParser(description='Build the docs site into _docs/ without Quarto (nbdev processors + smalldocs + KaTeX).')
    ap.add_argument('--out', default=None, help='the output folder (default: doc_path of settings.ini, _docs)')
    ap.add_argument('--keep-proc', action='store_true', help='keep _proc/ (the processed notebooks) after the build')
    ap.add_argument('--verbose', '-v', action='store_true', help="say what each step does, with nbdev's and smalldocs's expected warnings")
    args = ap.parse_args(argv)
    VERBOSE = args.verbose
    start = time.monotonic()
    out = Path(args.out).resolve() if args.out else None  # before process_notebooks changes directory
    sys.path.insert(0, str(ROOT))

    cache, failed, warned = process_notebooks(ROOT)
    from nbdev.config import get_config
    cfg = get_config()
    out = out or cfg.doc_path
    has_index = (cache / 'index.ipynb').exists()
    if not has_index:
        say('WARNING nbs/index.ipynb is missing: writing a stand-in home page')
    missing = fix_sidebar(cache, has_index)
    for m in missing: say(f'WARNING nbs/sidebar.yml lists {m}, which does not exist yet: left out of the sidebar')
    if not has_index: write_standin_index(cache)
    note('rendering _proc/ with smalldocs')
    broken = render(cache, out)
    folded = fold_api_pages(out)
    note(f'folded {folded} API entries')
    vendor_katex(out)
    vendor_web_fonts(out)
    base = cfg.doc_baseurl.strip('/')
    localize_links(out, cfg.doc_host.rstrip('/') + '/' + (base + '/' if base else ''))  # https://kda-nb.github.io/kda_nb/
    note(f'{unlink_private_names(out)} links to private names without an API entry made plain code')
    if not args.keep_proc: shutil.rmtree(cache, ignore_errors=True)
    ext = external_assets(out)

    for b in broken: say(f'ERROR broken link {b}')
    for e in ext: say(f'ERROR loads from the network: {e}')
    for f in failed: say(f'ERROR {f}')
    bad = broken or ext or failed
    n = len(list(out.glob('*.html')))
    more = f', {len(warned)} warnings from nbdev (--verbose shows them)' if warned and not VERBOSE else ''
    say(f'{n} pages, {folded} API entries, in {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}/ in {time.monotonic() - start:.0f} s{more}'
        + (f'; FAILED: {len(broken)} broken links, {len(ext)} assets from the network, {len(failed)} notebooks without API reference' if bad else ''))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
