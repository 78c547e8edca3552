"""Execute notebooks in place, keeping their outputs for the docs (all cells, GPU-flagged ones too).

`nbdev_test` runs notebooks but throws the outputs away; this keeps them. Use it on the machine whose
results the page should show (the H200 for the kernel, benchmark and demo notebooks), then run
`nbdev_clean` to strip volatile metadata. Cells marked `#| eval: false` are skipped, as nbdev does.
With `--skip-gpu`, cells flagged `#| gpu` are skipped too and keep the outputs they have: for
re-rendering the CPU-side cells (tables and plots read from committed H200 results) on a machine
without a GPU.

    python tools/run_notebooks.py nbs/04_kernels.ipynb nbs/05_api.ipynb
    python tools/run_notebooks.py --skip-gpu nbs/reports/bench_h200.ipynb

With `--run-all`, nothing is written: each notebook runs the way Jupyter's Run All runs it (nbclient, a fresh
kernel of the `python3` kernelspec, every cell in order, no nbdev directive honoured), on a copy in memory,
with the GPUs hidden (`CUDA_VISIBLE_DEVICES=''`, as on CI) unless `--gpu` is given; it prints each notebook's
time or the first cell that raised. `tests/test_run_all.py` runs this on every notebook.

    python tools/run_notebooks.py --run-all nbs/*.ipynb
"""
import os
import re
import sys
import time
from pathlib import Path

from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

NO_EVAL = re.compile(r'^\s*#\|\s*eval:\s*false', re.M)
GPU = re.compile(r'^\s*#\|\s*gpu\b', re.M)


def run_notebook(path: Path, skip_gpu: bool = False) -> float:
    "Execute `path` in its own folder and write it back with outputs; returns the seconds it took."
    nb = read_nb(path)
    skipped = [c for c in nb.cells if c.cell_type == 'code'
               and (NO_EVAL.search(c.source) or (skip_gpu and GPU.search(c.source)))]
    for c in skipped: c.cell_type = 'skip'                  # hide from the shell, restore below
    cwd = os.getcwd()
    os.chdir(path.parent)
    t0 = time.perf_counter()
    try:
        CaptureShell().run_all(nb, exc_stop=True)
    finally:
        os.chdir(cwd)
        for c in skipped: c.cell_type = 'code'
    write_nb(nb, path)
    return time.perf_counter() - t0


def run_all(path: Path, timeout: int = 600, gpu: bool = False) -> float:
    """Jupyter's Run All on a copy of `path`, in its folder, with a fresh kernel; raises nbclient's
    `CellExecutionError` (the cell and its traceback) at the first cell that raises. `timeout`: seconds per
    cell. The GPUs are hidden from the kernel unless `gpu`. Never writes `path`; returns the seconds it took."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ)
    if not gpu: env['CUDA_VISIBLE_DEVICES'] = ''
    client = NotebookClient(nb, timeout=timeout, kernel_name='python3', allow_errors=False)
    t0 = time.perf_counter()
    client.execute(cwd=str(path.parent), env=env)
    return time.perf_counter() - t0


if __name__ == '__main__':
    failed = []
    args = sys.argv[1:]
    flags = {'--skip-gpu', '--run-all', '--gpu'}
    skip_gpu, check, gpu = (f in args for f in ('--skip-gpu', '--run-all', '--gpu'))
    for p in (a for a in args if a not in flags):
        try:
            s = run_all(Path(p).resolve(), gpu=gpu) if check else run_notebook(Path(p).resolve(), skip_gpu)
            print(f"{p}: ran in {s:.0f} s", flush=True)
        except Exception as e:
            failed.append(p)
            print(f"{p}: FAILED: {type(e).__name__}: {e}", flush=True)
    sys.exit(1 if failed else 0)
