"""The import graph of kda_nb: every module, its size in lines, what it imports, and the circles.

An edge is any import of a kda_nb module anywhere in a module's text: at module level, inside a
function (a lazy import counts: it makes the same circle, only later), or under `if TYPE_CHECKING`.
Exit code 1 if the graph has a circle, or if a core module (anything outside kda_nb.bench and
kda_nb.ncu, except kda_nb.demo) imports the lab (kda_nb.bench or kda_nb.ncu).

    python tools/import_graph.py [--quiet]
"""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = 'kda_nb'
LAB = ('kda_nb.bench', 'kda_nb.ncu')       # the lab: may import the library, never the other way
LAB_USERS = ('kda_nb.demo',)               # a core-level module allowed to use the lab


def module_name(path: Path, root: Path = ROOT) -> str:
    "`kda_nb/ncu/__init__.py` -> 'kda_nb.ncu', `kda_nb/api.py` -> 'kda_nb.api'."
    parts = list(path.relative_to(root).with_suffix('').parts)
    if parts[-1] == '__init__': parts.pop()
    return '.'.join(parts)


def modules(root: Path = ROOT, pkg: str = PKG) -> dict:
    "Module name -> file of every .py under the package (the generated `_modidx` left out: it is an index, not code)."
    return {module_name(p, root): p for p in sorted((root / pkg).rglob('*.py'))
            if p.name != '_modidx.py' and '__pycache__' not in p.parts}


def _resolve(name: str, known) -> str | None:
    "The longest known module that `name` (a dotted import target) is or lies in."
    while name:
        if name in known: return name
        name = name.rpartition('.')[0]
    return None


def imports_of(mod: str, path: Path, known) -> set:
    "The kda_nb modules that `mod` imports, anywhere in its text (`from . import x` resolves to the submodule x)."
    tree = ast.parse(path.read_text(encoding='utf-8'), filename=str(path))
    is_pkg = path.name == '__init__.py'
    base = mod if is_pkg else mod.rpartition('.')[0]          # what a relative import is relative to
    out = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = base.split('.')
                up = up[:len(up) - (node.level - 1)] if node.level > 1 else up
                parent = '.'.join(up + ([node.module] if node.module else []))
            else:
                parent = node.module or ''
            # `from pkg import sub` names the submodule; `from pkg.mod import name` (or *) names pkg.mod
            targets = [f"{parent}.{a.name}" if f"{parent}.{a.name}" in known else parent for a in node.names]
        for t in targets:
            r = _resolve(t, known)
            if r and r != mod: out.add(r)
    return out


def graph(root: Path = ROOT, pkg: str = PKG) -> tuple[dict, dict]:
    "(module -> set of kda_nb modules it imports, module -> lines)."
    mods = modules(root, pkg)
    g = {m: imports_of(m, p, mods) for m, p in mods.items()}
    lines = {m: len(p.read_text(encoding='utf-8').splitlines()) for m, p in mods.items()}
    return g, lines


def cycles(g: dict) -> list[list]:
    "The strongly connected components of more than one module (or a module importing itself): each an import circle."
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1 or v in g.get(v, ()): out.append(sorted(comp))
    for v in sorted(g):
        if v not in index: visit(v)
    return out


def in_lab(mod: str) -> bool:
    return any(mod == p or mod.startswith(p + '.') for p in LAB)


def core_uses_lab(g: dict) -> list[tuple]:
    "(core module, lab module) for every import of the lab by the library (kda_nb itself and kda_nb.demo excepted)."
    return [(m, t) for m in sorted(g) if not in_lab(m) and m not in LAB_USERS and m != PKG
            for t in sorted(g[m]) if in_lab(t)]


def report(g: dict, lines: dict) -> str:
    width = max(map(len, g))
    rows = [f"{m:<{width}} {lines[m]:>5} lines  -> {', '.join(sorted(g[m])) or '-'}" for m in sorted(g)]
    return '\n'.join(rows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    g, lines = graph()
    if '--quiet' not in argv:
        print(report(g, lines))
        print(f"\n{len(g)} modules, {sum(lines.values())} lines, {sum(map(len, g.values()))} imports between them")
    bad = 0
    for c in cycles(g):
        print(f"CIRCLE: {' <-> '.join(c)}"); bad = 1
    for m, t in core_uses_lab(g):
        print(f"LIBRARY IMPORTS THE LAB: {m} -> {t}"); bad = 1
    if not bad: print("no import circle; the library imports neither kda_nb.bench nor kda_nb.ncu")
    return bad


if __name__ == '__main__':
    sys.exit(main())
