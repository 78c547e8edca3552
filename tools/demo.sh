#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, then compute KDA on a default problem with every
# backend available here, printing each one's error against the fp64 recurrence and its time.
# Extra arguments go to the demo: bash tools/demo.sh --T 4096 --H 8
KDA_NB_SETUP=lib source "$(dirname "$0")/_setup.sh"
python -m kda_nb.demo "$@"
