#!/usr/bin/env bash
# The tests on a fresh machine: set up .venv, then check that the library and the exported tests are
# what the notebooks say, run every notebook (nbdev_test), and run the exported tests (pytest), which
# include Jupyter's Run All of every notebook with the GPUs hidden (tests/test_run_all.py: a few minutes
# on two cores; KDA_NB_RUN_ALL=0 skips it). GPU-only tests skip with their reason on machines without
# an SM90 GPU; -rs lists the reasons.
source "$(dirname "$0")/_setup.sh"
echo "== nbdev_export and tools/export_tests.py must leave kda_nb/ and tests/ unchanged"
nbdev_export
python tools/export_tests.py
python tools/make_readme.py --check
if [ -n "$(git status --porcelain -- kda_nb tests)" ]; then
  git status --porcelain -- kda_nb tests
  git --no-pager diff --stat -- kda_nb tests
  echo "the generated files differ from the notebooks: run nbdev_export and python tools/export_tests.py, commit"
  exit 1
fi
if command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "== kernel resource usage (nvcc, sm_90a): CI has no GPU, but it compiles every kernel source"
  python -c "from kda_nb.kernels import nvcc_resource_usage as u; [print(r) for r in u()]"
fi
echo "== nbdev_test"
nbdev_test --n_workers 2
echo "== pytest"
python -m pytest -q -rs "$@"
