"""Build FlashKDA (the peer kda_nb is compared with) on a GPU machine, in a scratch folder outside this repository,
in about a minute on 16 cores instead of several: its one launch file instantiates 14 template variants, which this
tool compiles as 14 files that `MAX_JOBS` builds side by side.

    python tools/flash_kda_build.py --src FLASHKDA_CHECKOUT --cutlass CUTLASS_INCLUDE_ROOT --out /tmp/flash_kda
    export PYTHONPATH=/tmp/flash_kda:$PYTHONPATH      # then `import flash_kda` works

--src is a FlashKDA checkout (MoonshotAI/FlashKDA, the committed results used 1ce47ea) or `git archive` of one;
--cutlass is a folder holding CUTLASS's `include/`, `examples/common/` and `tools/util/include/` (FlashKDA's
submodule, or the `cutlass_library/source/` folder of the `nvidia-cutlass` wheel, for a machine that cannot fetch
the submodule). Nothing of FlashKDA is kept in this repository: the tool copies its sources to --out, splits the
launch file there, gives its one non-template kernel (`_flash_kda_build_tile_prefix`) internal linkage in that copy
(every split file defines it, and the link fails otherwise), and builds in place with FlashKDA's own nvcc flags for
SM90 (`FLASH_KDA_CUDA_ARCHS=90a`). `--dry-run` writes the files and prints the build command without running it.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

LAUNCH = Path('csrc') / 'smxx' / 'fwd_launch.cu'
KERNEL1 = Path('csrc') / 'smxx' / 'fwd_kernel1.cuh'
SHARED_KERNEL = '_flash_kda_build_tile_prefix'


def variants(launch_src: str) -> list[tuple[str, ...]]:
    "The `INSTANTIATE_LAUNCH_FWD(...)` argument lists the launch file expands to (its state variants, varlen and not)."
    per_state = re.findall(r'INSTANTIATE_LAUNCH_FWD\((\d+),\s*(\w+),\s*(\w+),\s*(\w+),\s*VL\)', launch_src)
    lengths = re.findall(r'^INSTANTIATE_STATE_VARIANTS\((\w+)\)', launch_src, re.M)
    if not per_state or not lengths:
        raise SystemExit(f"{LAUNCH}: no INSTANTIATE_STATE_VARIANTS block found (a FlashKDA this tool does not know)")
    return [(*v, vl) for vl in lengths for v in per_state]


def split_launch(launch_src: str) -> list[str]:
    "One copy of the launch file per variant: the definitions, then that variant's instantiation only."
    head = launch_src[:launch_src.index('#define INSTANTIATE_LAUNCH_FWD')]
    macro = re.search(r'#define INSTANTIATE_LAUNCH_FWD\(.*?\n(?:.*\\\n)*.*\n', launch_src).group(0)
    return [head + macro + f"INSTANTIATE_LAUNCH_FWD({', '.join(v)})\n" for v in variants(launch_src)]


def prepare(src: Path, cutlass: Path, out: Path) -> list[str]:
    "Copy FlashKDA's sources to `out`, split its launch file, write the setup script; the build command."
    for need in (src / LAUNCH, src / KERNEL1, src / 'csrc' / 'flash_kda.cpp', src / 'flash_kda' / '__init__.py'):
        if not need.exists(): raise SystemExit(f"--src {src}: {need.relative_to(src)} is missing (not a FlashKDA checkout?)")
    incs = [cutlass / 'include', cutlass / 'examples' / 'common', cutlass / 'tools' / 'util' / 'include']
    for d in incs:
        if not d.is_dir(): raise SystemExit(f"--cutlass {cutlass}: {d.relative_to(cutlass)}/ is missing")
    if out.exists(): shutil.rmtree(out)
    shutil.copytree(src / 'csrc', out / 'csrc')
    shutil.copytree(src / 'flash_kda', out / 'flash_kda')
    k1 = (out / KERNEL1).read_text()
    decl = f'__global__ void {SHARED_KERNEL}('
    if k1.count(decl) != 1: raise SystemExit(f"{KERNEL1}: expected one definition of {SHARED_KERNEL}")
    (out / KERNEL1).write_text(k1.replace(decl, f'static {decl}'))
    parts = split_launch((out / LAUNCH).read_text())
    (out / LAUNCH).unlink()
    names = []
    for i, text in enumerate(parts):
        name = out / LAUNCH.parent / f'fwd_launch_{i:02d}.cu'
        name.write_text(text)
        names.append(str(name.relative_to(out)))
    sources = ['csrc/flash_kda.cpp', *names]
    (out / 'setup.py').write_text(f'''# written by kda_nb's tools/flash_kda_build.py: FlashKDA's extension, its launch file split in {len(parts)}
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
NVCC = ['-O3', '-U__CUDA_NO_HALF_OPERATORS__', '-U__CUDA_NO_HALF_CONVERSIONS__', '-U__CUDA_NO_HALF2_OPERATORS__',
        '-U__CUDA_NO_BFLOAT16_CONVERSIONS__', '--expt-relaxed-constexpr', '--expt-extended-lambda', '--use_fast_math',
        '-lineinfo', '-gencode', 'arch=compute_90a,code=sm_90a']
setup(name='flash_kda', packages=['flash_kda'], cmdclass={{'build_ext': BuildExtension}},
      ext_modules=[CUDAExtension('flash_kda_C', {sources!r},
                                 include_dirs={[str(d) for d in incs] + [str(out / 'csrc')]!r},
                                 extra_compile_args={{'cxx': ['-O3', '-Wno-psabi'], 'nvcc': NVCC}})])
''')
    return [sys.executable, 'setup.py', 'build_ext', '--inplace']


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--src', required=True, type=Path, help='a FlashKDA checkout (or git archive of one)')
    ap.add_argument('--cutlass', required=True, type=Path, help="a folder with CUTLASS's include/, examples/common/, tools/util/include/")
    ap.add_argument('--out', default=Path('/tmp/flash_kda'), type=Path, help='the scratch folder to build in (replaced)')
    ap.add_argument('--jobs', type=int, default=os.cpu_count() or 8, help='parallel compiles (MAX_JOBS)')
    ap.add_argument('--dry-run', action='store_true', help='write the files, print the command, build nothing')
    a = ap.parse_args(argv)
    out = a.out.resolve()
    if (Path(__file__).resolve().parent.parent / '.git').exists() and Path(__file__).resolve().parent.parent in out.parents:
        raise SystemExit(f"--out {out} is inside this repository: build FlashKDA outside it (its code is not ours to commit)")
    cmd = prepare(a.src.resolve(), a.cutlass.resolve(), out)
    print(f"{len(list((out / LAUNCH.parent).glob('fwd_launch_*.cu')))} launch files in {out / LAUNCH.parent}; "
          f"MAX_JOBS={a.jobs} {' '.join(cmd)} (in {out})", flush=True)
    if a.dry_run: return 0
    res = subprocess.run(cmd, cwd=out, env={**os.environ, 'MAX_JOBS': str(a.jobs)})
    if res.returncode == 0: print(f"built: export PYTHONPATH={out}:$PYTHONPATH", flush=True)
    return res.returncode


if __name__ == '__main__':
    sys.exit(main())
