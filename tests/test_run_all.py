"""Jupyter's Run All on every notebook in nbs/ and nbs/reports/, on this machine, the way a reader would run it.

nbdev_test honours the `#| gpu`, `#| slow` and `#| eval: false` directives; Jupyter honours none of them. So
each notebook runs here through nbclient (a fresh kernel of the `python3` kernelspec, the notebook's folder
as working directory, every cell top to bottom, at most 600 s a cell) on a copy in memory, and the test
fails at the first cell that raises. Nothing is written back. GPU cells must guard themselves: the GPUs
are hidden from the kernel (`CUDA_VISIBLE_DEVICES=''`), as on CI, so every notebook is checked as a machine
without a GPU runs it. KDA_NB_RUN_ALL=gpu keeps the GPUs visible (every GPU cell then runs: long on the
H200); KDA_NB_RUN_ALL=0 skips these tests. `python tools/run_notebooks.py --run-all nbs/*.ipynb` is the same
from the command line.

Hand-written (tools/export_tests.py leaves it alone).
"""
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / 'nbs').glob('*.ipynb')) + sorted((ROOT / 'nbs' / 'reports').glob('*.ipynb'))  # the reports too
MODE = os.environ.get('KDA_NB_RUN_ALL', 'cpu')


def _run_notebooks():
    spec = importlib.util.spec_from_file_location('run_notebooks', ROOT / 'tools' / 'run_notebooks.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _missing() -> str | None:
    if MODE == '0': return "KDA_NB_RUN_ALL=0"
    for m in ('nbclient', 'nbformat', 'ipykernel'):
        if importlib.util.find_spec(m) is None: return f"{m} is not installed (pip install -e '.[dev]')"
    return None


@pytest.mark.skipif(_missing() is not None, reason=f"Run All of the notebooks: {_missing()}")
@pytest.mark.parametrize('path', NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_run_all(path):
    before = path.read_bytes()
    seconds = _run_notebooks().run_all(path, timeout=600, gpu=MODE == 'gpu')
    print(f"{path.name}: Run All in {seconds:.0f} s")
    assert path.read_bytes() == before, f"{path.name} was written"


def test_no_directive_in_the_modules():
    "nbdev strips `#| export`, not the directives after it: a `#| eval: false` in an exported cell ends up in the module."
    leaks = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted((ROOT / 'kda_nb').rglob('*.py'))
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.match(r'\s*#\|', line)]
    assert not leaks, leaks
