# The environment of tools/demo.sh and tools/test.sh (which source this file), or of everything else when
# run on its own: `bash tools/_setup.sh` makes .venv with the development dependencies (the tests, the
# notebooks, the docs: nbdev, pytest, matplotlib, smalldocs) and says how to enter it.
# KDA_NB_SETUP=lib: the library alone, what the demo needs; dev, the default: with the development
# dependencies. In lib mode a Python that already has torch and numpy is used as it is, with kda_nb from
# this checkout, and no .venv is made. Idempotent: a second run only checks. KDA_NB_PYTHON picks the Python
# (python3 otherwise); .venv is made from it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${KDA_NB_PYTHON:-python3}"
MODE="${KDA_NB_SETUP:-dev}"
if [ "$MODE" = lib ] && [ ! -x .venv/bin/python ] && "$PY" -c "import torch, numpy" 2>/dev/null; then
  # The library needs nothing this Python lacks (a GPU image, or an environment the user prepared):
  # use it as it is, with kda_nb from this checkout. No install, no network.
  echo "== using $("$PY" -c 'import sys; print(sys.executable)') with kda_nb from $PWD (no .venv made: the docs"
  echo "   and the tests need the development dependencies, which 'bash tools/_setup.sh' installs into .venv)"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  python() { "$PY" "$@"; }
  return 0 2>/dev/null || exit 0
fi
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv (system site-packages visible, so an installed CUDA torch is reused)"
  "$PY" -m venv --system-site-packages .venv
fi
. .venv/bin/activate
if ! python -c "import torch" 2>/dev/null; then
  # No torch at all: take the release this project is tested with. On x86-64 Linux pip's default
  # wheel is a CUDA build; it runs on CPU-only machines too.
  echo "== installing torch"
  python -m pip install -q "torch==2.13.0"
fi
extra=""; probe="import kda_nb"
if [ "$MODE" = dev ]; then extra="[dev]"; probe="import kda_nb, nbdev, pytest, hypothesis, smalldocs"; fi
stamp=".venv/.kda_nb_installed_$MODE"
if ! python -c "$probe" 2>/dev/null || [ setup.py -nt "$stamp" ] || [ settings.ini -nt "$stamp" ]; then
  echo "== installing kda_nb${extra}"
  # no build isolation: an offline GPU machine that has torch and setuptools needs no download at all
  python -c "import setuptools" 2>/dev/null || python -m pip install -q setuptools wheel
  python -m pip install -q --no-build-isolation -e ".${extra}"
  touch "$stamp"
fi
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # run on its own, not sourced: the environment stays for the caller to enter
  echo "== ready: source .venv/bin/activate"
fi
