"""The SASS of each kernel of two versions, built as the library builds them (one unit), side by side.

    python tools/sass_before_after.py [BEFORE [AFTER]]     # default: v5-pre-house against v5 (this tree)

Evidence that a refactor of csrc/ moved no code: for every kernel both versions have (matched by its
demangled name without the template arguments' spelling), the number of SASS instructions and a hash of
the instruction text, and a hash of the text with register names left out (the same instructions on
other registers), and whether the two use the same multiset of opcodes. Needs nvcc, cuobjdump and nvdisasm (the CUDA toolkit, or the nvidia-cuda-cuobjdump
and nvidia-cuda-nvdisasm wheels on PATH); no GPU. Exit 1 if a kernel of BEFORE differs or is missing.
"""
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kda_nb.kernels import KERNEL_VERSION, _kernel_units, version_sources


def sass(version: str, arch: str = 'sm_90a') -> dict:
    "Kernel (demangled) -> (instructions, sha256 of their text) for `version`'s one-unit build."
    folder = version_sources(version)
    with tempfile.TemporaryDirectory() as tmp:
        unit, cubin = Path(tmp) / 'kda_nb_kernels.cu', Path(tmp) / 'kda_nb_kernels.cubin'
        unit.write_text(''.join(f'#include "{f}"\n' for f in _kernel_units(folder)))
        subprocess.run(['nvcc', '-std=c++17', '-O3', '-lineinfo', f'-gencode=arch=compute_{arch[3:]},code={arch}',
                        f'-I{folder}', '-cubin', str(unit), '-o', str(cubin)], check=True, capture_output=True)
        text = subprocess.run(['cuobjdump', '-sass', str(cubin)], check=True, capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in text.splitlines():
        if m := re.match(r'\s*Function : (\S+)', line): cur = m.group(1); funcs[cur] = []
        elif cur and (m := re.match(r'\s*/\*[0-9a-f]{4,}\*/\s+(.*?);', line)): funcs[cur].append(m.group(1).strip())
    names = subprocess.run(['c++filt'], input='\n'.join(funcs), capture_output=True, text=True).stdout.splitlines()
    h = lambda ins: hashlib.sha256('\n'.join(ins).encode()).hexdigest()[:12]
    ops = lambda ins: [re.sub(r'\bU?R\d+\b|\.reuse|\bP\d\b', 'R', i) for i in ins]   # the same with registers left out
    opcodes = lambda ins: sorted(i.split()[1] if i.startswith('@') else i.split()[0] for i in ins)   # a multiset
    return {n: (len(ins), h(ins), h(ops(ins)), h(opcodes(ins))) for n, ins in zip(names, funcs.values())}


def main(argv: list[str]) -> int:
    before, after = (argv + ['v5-pre-house', KERNEL_VERSION][len(argv):])[:2]
    missing = [t for t in ('nvcc', 'cuobjdump', 'nvdisasm', 'c++filt') if shutil.which(t) is None]
    if missing: sys.exit(f"sass_before_after: not on PATH: {', '.join(missing)}")
    a, b = sass(before), sass(after)
    untemplated = lambda n: re.sub(r'^void (kda::\w+)<[^>]*>', r'\1', n)   # a kernel that lost its template arguments
    matched, differ = set(), 0
    for n, v in sorted(a.items()):
        m = n if n in b else untemplated(n) if untemplated(n) in b else None
        w = b.get(m)
        matched.add(m)
        same = ('same' if w == v else 'same instructions, other registers' if w[2] == v[2]
                else 'DIFFERS (the same opcodes, in another order or with other operands)' if w[3] == v[3]
                else 'DIFFERS') if w else 'not in ' + after
        differ += w is None or w[1] != v[1]
        print(f"{n}\n    {before}: {v[0]:5d} {v[1]} {v[2]}   {after}: {w[0] if w else '-':>5} {w[1] if w else ''} {w[2] if w else ''}"
              f"   {same}")
    for n in sorted(set(b) - matched): print(f"{n}\n    only in {after}: {b[n][0]} {b[n][1]} {b[n][2]}")
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
