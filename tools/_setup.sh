# Sourced by tools/demo.sh and tools/test.sh: a virtual environment in .venv with kda_nb and its
# development dependencies. Idempotent: a second run only checks. Set KDA_NB_PYTHON to choose the Python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${KDA_NB_PYTHON:-python3}"
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
if ! python -c "import kda_nb, nbdev, pytest, hypothesis" 2>/dev/null || [ setup.py -nt .venv/.kda_nb_installed ] \
   || [ settings.ini -nt .venv/.kda_nb_installed ]; then
  echo "== installing kda_nb and its development dependencies"
  python -m pip install -q -e ".[dev]"
  touch .venv/.kda_nb_installed
fi
