#!/usr/bin/env bash
# The main job on a fresh machine: compute KDA on a default problem with every backend available here,
# printing each one's error against the fp64 recurrence and its time. It needs the library alone: a Python
# that has torch and numpy (KDA_NB_PYTHON, else python3) is used as it is, with kda_nb from this checkout;
# otherwise .venv is made with the library only. The docs and the tests need more: bash tools/_setup.sh.
# Extra arguments go to the demo: bash tools/demo.sh --T 4096 --H 8
KDA_NB_SETUP=lib source "$(dirname "$0")/_setup.sh"
python -m kda_nb.demo "$@"
