#!/usr/bin/env bash
# The GPU truth, on an SM90 machine (the lent H200): build the kernels once, then in the same process tree
#   1. the outputs of this tree against an earlier build, bitwise (tools/bitwise_before_after.py BASE);
#   2. the GPU tests of the library's notebooks (kernels, decode, plan, API, backward, fla backend), with the
#      sanitizer cases;
#   3. optionally the benchmark's anchor and small-call groups, this tree against BASE, in one run.
#
#   bash tools/gpu_check.sh [BASE] [--bench | --slow | --train]   # BASE: a KERNEL_VERSIONS key (default v5-pre-house)
#
# --slow runs only the slow GPU tests (the sanitizer cases, the 64-bit offsets test); without it they are left out.
# --train runs only the backward's GPU tests, its sanitizer cases, its per-kernel times (tools/backward_stages.py)
# and the benchmark's train group (kda_nb and fla's training steps in one run; TRAIN_H picks the anchors' heads,
# default 96,64 as the issue's train group asks (each head warmed for fla in turn); TRAIN_DEADLINE the run's seconds, default 400), after tools/fla_warmup.py has compiled and tuned fla's
# training path on the same shapes (minutes per shape class: more than one 10-minute device command holds; keep
# the machine warm, whose Triton cache keeps what was tuned, and go on with the benchmark's --resume;
# FLA_WARM_FIRST: how many of its shapes to warm, default 2 (6 with FLA_CONFIGS); FLA_CACHE: a packed Triton cache to restore first;
# FLA_CONFIGS: a file of fla's own autotuning winners, tools/fla_configs.py, e.g. benchmarks/fla_configs_h200.json,
# read back through FLA_CONFIG_DIR with FLA_CACHE_MODE, default fuzzy (strict matches only the heads they were tuned
# at), so that fla only compiles: all six shape classes then warm in about 90 s on the H200, and FLA_WARM_FIRST
# defaults to all of them).
#
# Logs go to $OUT (or /tmp/gpu_check). Needs the git history (for BASE's sources) and, for the fla tests, the
# fla-core wheel in .whl/ (pure Python). Uses the machine's python3 and torch as they are. Where the copy on the GPU
# machine holds no history (seen on 2026-12-02), write BASE's sources here first, into a folder that travels:
#   XDG_CACHE_HOME=$PWD/.kcache python -c "from kda_nb.kernels import version_sources as v; print(v('BASE'))"
# then carry .kcache and export XDG_CACHE_HOME=$PWD/.kcache there (kda_nb.kernels reads a complete copy from it).
set -uo pipefail
cd "$(dirname "$0")/.."
BASE="${1:-v5-pre-house}"
BENCH="${2:-}"
LOG="${OUT:-/tmp/gpu_check}"
mkdir -p "$LOG"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions}"    # kept by a warm machine
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
status=0
echo "== build (this tree and $BASE)"
python3 - "$BASE" "$BENCH" <<'PY' 2>&1 | tee "$LOG/build.txt" || status=1
import sys, time
from kda_nb.kernels import load_kernels
for v in (None,) if sys.argv[2:] == ['--train'] else (None, sys.argv[1]):
    t = time.time(); load_kernels(**({} if v is None else {'version': v})); print(f"built {v or 'this tree'} in {time.time() - t:.0f} s")
PY
TESTS="tests/test_04_kernels.py tests/test_04a_decode.py tests/test_04b_plan.py tests/test_04c_backward_kernels.py tests/test_05_api.py tests/test_03a_backward.py
       tests/test_06_peers.py tests/test_06a_fla_backend.py tests/test_07b_bench_backends.py tests/test_07k_bench_paths.py"
if [ "$BENCH" = --train ]; then
  echo "== the backward's GPU tests"
  python3 -m pytest -q -rs -p no:cacheprovider tests/test_04c_backward_kernels.py 2>&1 | tee "$LOG/pytest_backward.txt" || status=1
  python3 -m pytest -q -rs -p no:cacheprovider tests/test_05_api.py -k "kernel_path_backward or opcheck_cuda" 2>&1 \
    | tee "$LOG/pytest_api_backward.txt" || status=1
  echo "== the backward under compute-sanitizer, and where its time goes"
  python3 tools/sanitize.py --backward 2>&1 | tee "$LOG/sanitize_backward.txt" || status=1
  python3 tools/backward_stages.py --out "$LOG" 2>&1 | tee "$LOG/backward_stages.txt" || status=1
  if [ -n "${FLA_CONFIGS:-}" ]; then
    python3 tools/fla_configs.py install "$FLA_CONFIGS" /tmp/fla_configs 2>&1 | tee "$LOG/fla_configs.txt" || status=1
    export FLA_CONFIG_DIR=/tmp/fla_configs FLA_CACHE_MODE="${FLA_CACHE_MODE:-fuzzy}"
  fi
  echo "== fla's training path compiled and tuned first (271 s for one shape on the H200 when fla tunes: tools/fla_warmup.py)"
  for h in $(echo "${TRAIN_H:-96,64}" | tr ',' ' '); do
    python3 tools/fla_warmup.py --H "$h" --first "${FLA_WARM_FIRST:-$([ -n "${FLA_CONFIGS:-}" ] && echo 6 || echo 2)}" ${FLA_CACHE:+--unpack "$FLA_CACHE"} \
      2>&1 | tee -a "$LOG/fla_warmup.txt" || status=1
  done
  echo "== training steps: kda_nb and fla in one run (the benchmark's train group)"
  python3 -m kda_nb.bench --cases train --impls kda_nb,fla --H "${TRAIN_H:-96,64}" --deadline "${TRAIN_DEADLINE:-400}" \
    --no-plots --out "$LOG" --tag train_h200 2>&1 | tee "$LOG/train.txt" || status=1
  exit $status
fi
if [ "$BENCH" = --slow ]; then
  echo "== the slow GPU tests"
  python3 -m pytest -q -rs -p no:cacheprovider -m slow $TESTS 2>&1 | tee "$LOG/pytest_slow.txt" || status=1
  exit $status
fi
echo "== bitwise against $BASE"
python3 tools/bitwise_before_after.py "$BASE" 2>&1 | tee "$LOG/bitwise.txt" || status=1
echo "== GPU tests (not the slow ones)"
python3 -m pytest -q -rs -p no:cacheprovider -m "not slow" $TESTS 2>&1 | tee "$LOG/pytest.txt" || status=1
if [ "$BENCH" = --bench ]; then
  echo "== benchmark: anchor and small calls, this tree against $BASE"
  python3 -m kda_nb.bench --no-plots --cases anchor,small --impls "kda_nb,kda_nb_$BASE" --out "$LOG" --tag house 2>&1 \
    | tee "$LOG/bench.txt" || status=1
fi
exit $status
