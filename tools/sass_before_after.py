"""Per-kernel SASS of csrc/ at a git commit against csrc/ of the working tree: proof that a csrc/ edit moved no code.

    python tools/sass_before_after.py                   # 72082b1 against the working tree
    python tools/sass_before_after.py COMMIT            # another commit against the working tree
    python tools/sass_before_after.py --diff KERNEL     # also a unified diff of KERNEL's instructions (a part of its name)
    python tools/sass_before_after.py --arch sm_90a     # the target (default sm_90a, the one the library builds)
    python tools/sass_before_after.py --pair 'kda::kda_fwd_fused(=kda_fwd_fused<(kda::GateForm)0, false>'
                                                        # a kernel renamed (a template instance now): compare the two

Both sides are built as the library builds its kernels: the `.cu` files of `KERNEL_UNITS` (the commit's own, read from
its kda_nb/kernels.py, for the commit's side) included, in that order, by one translation unit, compiled by nvcc with `CUDA_FLAGS` and `TORCH_NVCC_DEFINES` (kda_nb.kernels) to an object file.
`cuobjdump -sass` of each object is split per kernel (its mangled name) and normalised to the instructions alone (no
addresses, no encodings). For each kernel the tool prints the instruction count before and after and `same` or
`DIFFERENT`; a kernel on one side only is `DIFFERENT`. `params` is the verdict of a kernel whose instructions are the
same but for the offsets at which they read their parameters (`c[0x0][...]`: a reordered params struct): the same
arithmetic on the same values. Exit status 1 if any kernel differs (with `--strict`, also for `params`), else 0.
The column `bytes` says whether the encodings, scheduling control bits included, are equal too (`=`) or not (`~`).

Needs git, nvcc and cuobjdump with its nvdisasm (the CUDA toolkit, or the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels, their bin/ folders on PATH); no GPU. Run from the repository root.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kda_nb.kernels import CUDA_FLAGS, KERNEL_UNITS, TORCH_NVCC_DEFINES

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BEFORE = '72082b1'


def tool(name: str) -> str:
    "The path of a CUDA toolkit program: on PATH, else under CUDA_HOME (default /usr/local/cuda)."
    found = shutil.which(name) or Path(os.environ.get('CUDA_HOME', '/usr/local/cuda')) / 'bin' / name
    if not Path(found).exists(): sys.exit(f"sass_before_after: {name} not found (put it on PATH or set CUDA_HOME)")
    return str(found)


def commit_csrc(commit: str, dest: Path) -> Path:
    "Write csrc/ of `commit` under `dest`; return that folder."
    archive = subprocess.run(['git', '-C', str(ROOT), 'archive', '--format=tar', commit, 'csrc'], capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"sass_before_after: cannot read csrc/ of {commit!r}: {archive.stderr.decode().strip()}")
    subprocess.run(['tar', '-x', '-C', str(dest)], input=archive.stdout, check=True)
    return dest / 'csrc'


def commit_units(commit: str) -> tuple[str, ...]:
    "KERNEL_UNITS as `commit`'s kda_nb/kernels.py spells it (the working tree's if it has none)."
    res = subprocess.run(['git', '-C', str(ROOT), 'show', f'{commit}:kda_nb/kernels.py'], capture_output=True, text=True)
    m = re.search(r'^KERNEL_UNITS = \((.*?)\)', res.stdout, re.S | re.M) if res.returncode == 0 else None
    return tuple(re.findall(r"'([\w.]+\.cu)'", m.group(1))) if m else KERNEL_UNITS


def units(folder: Path, order: tuple[str, ...]) -> list[str]:
    "The `.cu` files of `folder` in the order the library includes them (`order`), any others after, sorted."
    cu = {p.name for p in folder.glob('*.cu')}
    return [f for f in order if f in cu] + sorted(cu - set(order))


def sass(folder: Path, order: tuple[str, ...], arch: str, tmp: Path, tag: str) -> dict[str, tuple[list[str], list[str]]]:
    "Mangled kernel name -> (its SASS instructions, their encodings), for the one-unit build of the sources in `folder`."
    unit, obj = tmp / f'{tag}_kernels.cu', tmp / f'{tag}_kernels.o'
    unit.write_text(''.join(f'#include "{f}"\n' for f in units(folder, order)))
    cmd = [tool('nvcc'), *CUDA_FLAGS, *TORCH_NVCC_DEFINES, f'-gencode=arch=compute_{arch[3:]},code={arch}',
           f'-I{folder}', '-c', str(unit), '-o', str(obj)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0: sys.exit(f"sass_before_after: nvcc failed on {tag}'s csrc/:\n{res.stderr[-4000:]}")
    res = subprocess.run([tool('cuobjdump'), '-sass', str(obj)], capture_output=True, text=True)
    if res.returncode != 0: sys.exit(f"sass_before_after: cuobjdump failed (is nvdisasm on PATH?):\n{res.stderr}")
    return split_kernels(res.stdout)


def split_kernels(text: str) -> dict[str, tuple[list[str], list[str]]]:
    "Split `cuobjdump -sass` output per function: each instruction's text (address and encoding dropped), and the encodings."
    funcs, cur = {}, None
    for line in text.splitlines():
        if m := re.match(r'\s*Function : (\S+)', line): cur = funcs.setdefault(m.group(1), ([], []))
        elif cur is None: continue
        elif m := re.match(r'\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;', line): cur[0].append(re.sub(r'\s+', ' ', m.group(1)))
        for word in re.findall(r'/\* (0x[0-9a-f]{16}) \*/', line): cur[1].append(word)
    return funcs


def demangled(names: list[str]) -> dict[str, str]:
    "Mangled name -> demangled (for reading; the comparison uses the mangled names)."
    cxxfilt = shutil.which('c++filt')
    if not cxxfilt: return {n: n for n in names}
    out = subprocess.run([cxxfilt], input='\n'.join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('before', nargs='?', default=DEFAULT_BEFORE, help=f'git commit (default {DEFAULT_BEFORE})')
    p.add_argument('--diff', metavar='KERNEL', help='print a unified diff of the kernel whose name contains KERNEL')
    p.add_argument('--arch', default='sm_90a', help='sm_XX target (default sm_90a)')
    p.add_argument('--strict', action='store_true', help='a kernel whose parameters moved counts as different')
    p.add_argument('--pair', action='append', default=[], metavar='BEFORE=AFTER',
                   help="also compare the kernel before whose demangled name contains BEFORE with the one after whose "
                        "name contains AFTER (each must match exactly one kernel): a kernel that became a template instance")
    a = p.parse_args(argv)
    if not re.fullmatch(r'sm_\d+a?', a.arch): sys.exit(f"sass_before_after: --arch must look like sm_90a, got {a.arch!r}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        before = sass(commit_csrc(a.before, tmp), commit_units(a.before), a.arch, tmp, 'before')
        after = sass(ROOT / 'csrc', KERNEL_UNITS, a.arch, tmp, 'after')
    names = sorted(set(before) | set(after))
    pretty = demangled(names)
    differ = moved = 0
    params = lambda ins: [re.sub(r'c\[0x0\]\[0x[0-9a-f]+\]', 'c[0x0][param]', i) for i in ins]
    print(f"{'before':>7} {'after':>7}  verdict   bytes  kernel   (before: {a.before}, after: working tree, {a.arch})")
    for n in names:
        (b, b_enc), (w, w_enc) = before.get(n, (None, None)), after.get(n, (None, None))
        same = b is not None and b == w
        shifted = not same and b is not None and w is not None and params(b) == params(w)
        differ += not (same or shifted)
        moved += shifted
        count = lambda ins: f"{len(ins):7d}" if ins is not None else f"{'-':>7}"
        verdict = 'same     ' if same else 'params   ' if shifted else 'DIFFERENT'
        print(f"{count(b)} {count(w)}  {verdict}  {'=' if b_enc == w_enc else '~'}     {pretty[n]}")
    print(f"{len(names) - differ - moved} of {len(names)} kernels the same"
          + (f", {moved} the same but for their parameters' offsets" if moved else '')
          + (f", {differ} DIFFERENT" if differ else ''))
    for pair in a.pair:
        if '=' not in pair: sys.exit(f"sass_before_after: --pair takes BEFORE=AFTER, got {pair!r}")
        bpart, apart = pair.split('=', 1)
        bn = [n for n in before if bpart in pretty[n]]
        an = [n for n in after if apart in pretty[n]]
        if len(bn) != 1 or len(an) != 1:
            sys.exit(f"sass_before_after: --pair {pair!r} matches {len(bn)} kernel(s) before and {len(an)} after, not one each")
        (b, b_enc), (w, w_enc) = before[bn[0]], after[an[0]]
        same, shifted = b == w, b != w and params(b) == params(w)
        differ += not (same or shifted)
        moved += shifted
        verdict = 'same     ' if same else 'params   ' if shifted else 'DIFFERENT'
        print(f"{len(b):7d} {len(w):7d}  {verdict}  {'=' if b_enc == w_enc else '~'}     {pretty[bn[0]]}  ->  {pretty[an[0]]}")
    if a.diff:
        hits = [n for n in names if a.diff in n or a.diff in pretty[n]]
        if not hits: sys.exit(f"sass_before_after: no kernel's name contains {a.diff!r}")
        for n in hits:
            sys.stdout.writelines(difflib.unified_diff([i + '\n' for i in before.get(n, ([], []))[0]],
                                                       [i + '\n' for i in after.get(n, ([], []))[0]],
                                                       f'{a.before}: {pretty[n]}', f'working tree: {pretty[n]}'))
    return 1 if differ or (a.strict and moved) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
