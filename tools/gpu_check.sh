#!/usr/bin/env bash
# The GPU truth, on an SM90 machine (the lent H200): build the kernels once, then in the same process tree
#   1. the outputs of this tree against an earlier build, bitwise (python -m kda_nb.bench compare BASE);
#   2. the GPU tests of the library's notebooks (kernels, decode, plan, API, backward, fla backend, serving), with the
#      sanitizer cases;
#   3. optionally the benchmark's anchor and small-call groups, this tree against BASE, in one run (the full suite of 2.
#      takes most of a 10-minute command on an H100: SKIP_TESTS=1 leaves it out, so that the benchmark gets the time).
#
#   bash tools/gpu_check.sh [BASE] [--bench | --slow | --train | --train-base | --capture | --records | --new | --long | --serving]   # BASE: a key of kda_nb.bench.versions.KERNEL_VERSIONS (default base, 72082b1)
#
# --records makes every current benchmark record of benchmarks/README.md in one run of about 9 minutes (BASE unused):
#   COMMIT=$(git rev-parse --short=12 HEAD) FLA_CONFIGS=benchmarks/fla_configs_h200.json bash tools/gpu_check.sh - --records
# the anchor, sweeps and small-call groups (kda_nb, with FlashKDA where flash_kda imports and fla's recurrent kernel
# where fla does), the decode paths (python -m kda_nb.bench decode-paths) and the train group (kda_nb and fla, fla warmed first), each
# group given its share of DEADLINE (default 570 s). The records come back as $OUT/records.tar, laid out as the
# repository is: `tar -xf records.tar` at the repository's root puts them in benchmarks/.
#
# --new checks and times the newest paths, the first GPU session after they land (BASE unused), most wanted first:
# the GPU tests of K2's states only and of the states with the transitions in one launch (04), of the backward's entry
# gradients alone and the chunk factors kept (04c), of the passes and the gradient in segments (10a: against fp64, and
# SPLIT_BACKWARD_LEAN's same bits) and of the API's gradients (05); tools/sanitize.py and tools/sanitize.py --backward;
# the training step one sequence whole, in segments and in segments lean (python tools/segments_probe.py --train, JSON in
# the logs); and the long group with kda_nb alone at H = 4, 8, 16 and T = 65536, 131072. Point it at what lands next.
# Its JSON and logs come back in $OUT/gpu_check.tar.
#
# --train-base checks this tree's whole API against BASE's whole tree bitwise (python -m kda_nb.bench compare-tree:
# kda's gradients, fwd over pools, DecodeStep), then times a training step of this tree against BASE's whole tree (default base, 72082b1), each side the
# benchmark's train group (kda_nb alone, TRAIN_H heads, default 96,64) in processes of its own, in turns (python -m
# kda_nb.bench train-base, 2 rounds); its train_base_<tag>.json and .md come back in $OUT/gpu_check.tar. BASE's tree
# comes from git history, or from a complete copy in the cache (carry .kcache, written here first:
#   XDG_CACHE_HOME=$PWD/.kcache python -c "from kda_nb.bench.versions import version_tree as v; print(v('base'))").
#
# --serving times the serving steps in one run (BASE unused): python -m kda_nb.bench serving, the one-token step over a
# state pool beside the state floor and fla's kernel, the verification of 4 drafts composed and in one launch, and the
# anchor prefills with two checkpoints per sequence composed and in one launch, every call checked first (nbs/07n_bench_serving.ipynb);
# within SERVING_DEADLINE seconds (default 210) or what DEADLINE leaves. Its serving_<tag>.json and
# BENCHMARK_SERVING_<TAG>.md come back in $OUT/gpu_check.tar, beside its log.
#
# --long makes the long-sequence group's record (python -m kda_nb.bench --cases long: one sequence and a long-plus-short
# mix, T from 8K to 512K at H = 4 to 96, with FlashKDA where flash_kda imports and fla with and without its intra-card
# context parallelism where fla does), into $OUT/records.tar as --records does; a run cut by DEADLINE goes on with
# RESUME=1 on the same warm machine (the benchmark's --resume).
#
# --capture runs the profile walk-through's capture (nbs/reports/profile_h200.ipynb): the GPU tests (CAPTURE_TESTS=0: none), then
# `python -m kda_nb.ncu capture --modes fixed varlen decode train` (CAPTURE_MODES: other modes, e.g. drafts, K3 on
# 4 tokens a sequence) (with `--with-flash-kda` where flash_kda imports:
# build it first with tools/flash_kda_build.py), then each report's numbers (`numbers --lines` for kda_nb's, plain
# `numbers` for FlashKDA's, whose sources stay on the machine) and the summary, on the machine itself.
#
# --slow runs only the slow GPU tests (the sanitizer cases, the 64-bit offsets test); without it they are left out.
# --train runs only the backward's GPU tests, its sanitizer cases, its per-kernel times (python -m kda_nb.bench stages)
# and the benchmark's train group (kda_nb and fla's training steps in one run; TRAIN_H picks the anchors' heads,
# default 96,64 (each head warmed for fla in turn); TRAIN_DEADLINE the run's seconds, default 400), after tools/fla_warmup.py has compiled and tuned fla's
# training path on the same shapes (minutes per shape class: more than one 10-minute device command holds; keep
# the machine warm, whose Triton cache keeps what was tuned, and go on with the benchmark's --resume;
# FLA_WARM_FIRST: how many of its shapes to warm, default 2 (6 with FLA_CONFIGS); FLA_CACHE: a packed Triton cache to restore first;
# FLA_CONFIGS: a file of fla's own autotuning winners, tools/fla_configs.py, e.g. benchmarks/fla_configs_h200.json,
# read back through FLA_CONFIG_DIR with FLA_CACHE_MODE, default fuzzy (strict matches only the heads they were tuned
# at), so that fla only compiles: all six shape classes then warm in about 90 s on the H200, and FLA_WARM_FIRST
# defaults to all of them).
#
# FlashKDA, the peer of --records, --long and --capture: a machine with no flash_kda to import builds it first where the
# tree carries its sources (ignored, so carry .whl), in about a minute (tools/flash_kda_build.py, into /tmp/flash_kda):
#   mkdir -p .whl/peers && git -C FLASHKDA_CHECKOUT archive --prefix=flashkda/ HEAD > .whl/peers/flashkda.tar
#   pip download --no-deps -d .whl/peers nvidia-cutlass        # CUTLASS's headers (FlashKDA's submodule)
#
# Logs are packed into $OUT/gpu_check.tar (OUT default /tmp/gpu_check_out). Needs the git history (for BASE's sources) and, for the fla tests, the
# fla-core wheel in .whl/ (pure Python). Uses the machine's python3 and torch as they are. Where the copy on the GPU
# machine holds no history (seen on 2026-12-02), write BASE's sources here first, into a folder that travels:
#   XDG_CACHE_HOME=$PWD/.kcache python -c "from kda_nb.bench.versions import version_sources as v; print(v('BASE'))"
# then carry .kcache and export XDG_CACHE_HOME=$PWD/.kcache there (kda_nb.bench.versions reads a complete copy from it).
set -uo pipefail
cd "$(dirname "$0")/.."
BASE="${1:-base}"
BENCH="${2:-}"
# The device tool brings back at most 8 files of $OUT, 16 MB each, and kills a command at its limit: the logs are
# written to a work folder and packed into one $OUT/gpu_check.tar when the script ends, which it does before
# DEADLINE seconds (default 570) by giving each step only the time left.
OUTDIR="${OUT:-/tmp/gpu_check_out}"
LOG=/tmp/gpu_check
rm -rf "$LOG"; mkdir -p "$LOG" "$OUTDIR"
T0=$(date +%s)
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - T0) )); }
pack() { tar -C "$LOG" -cf "$OUTDIR/gpu_check.tar" . && echo "logs: $OUTDIR/gpu_check.tar ($(du -h "$OUTDIR/gpu_check.tar" | cut -f1))"; }
trap pack EXIT
bounded() { local t; t=$(left); [ "$t" -gt 10 ] || { echo "skipped (deadline): $*"; return 124; }; timeout "$t" "$@"; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions}"    # kept by a warm machine
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
status=0
peers() {   # FlashKDA from .whl/peers where flash_kda does not import (see above); its log in $LOG/flash_kda_build.txt
  python3 -c "import flash_kda" 2>/dev/null && return 0
  local src cut
  src=$(ls .whl/peers/flashkda*.tar 2>/dev/null | head -1); cut=$(ls .whl/peers/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$src" ] && [ -n "$cut" ] || { echo "FlashKDA: not built (no .whl/peers/flashkda*.tar and nvidia_cutlass wheel)"; return 0; }
  rm -rf /tmp/peers && mkdir -p /tmp/peers && tar -xf "$src" -C /tmp/peers \
    && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peers/cutlass "$cut" \
    && bounded python3 tools/flash_kda_build.py --src /tmp/peers/flashkda --cutlass /tmp/peers/cutlass/cutlass_library/source \
         --out /tmp/flash_kda > "$LOG/flash_kda_build.txt" 2>&1 \
    && export PYTHONPATH="$PYTHONPATH:/tmp/flash_kda" && python3 -c "import flash_kda" \
    && echo "FlashKDA: built from $src" || { echo "FlashKDA: the build failed (tail of its log below)"; tail -5 "$LOG/flash_kda_build.txt"; }
}
case "$BENCH" in --records|--long|--capture) peers ;; esac
# the records' tag names the card they ran on (h200, h100; GPU_TAG= to set it), so a run on another card never
# overwrites the H200's records
GPU_TAG="${GPU_TAG:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]\+' | tr 'H' 'h')}"
GPU_TAG="${GPU_TAG:-gpu}"
# The commit the benchmark records: COMMIT=<sha> from the machine that sent the tree. The GPU machine's copy of the
# tree has carried the git metadata of an earlier commit (2026-12-04: records said "25789d5 + uncommitted changes" for
# a later tree), so pass it: COMMIT=$(git rev-parse --short=12 HEAD) in the command line written on this side.
COMMIT_ARG=(); [ -n "${COMMIT:-}" ] && COMMIT_ARG=(--commit "$COMMIT")
echo "== build (this tree and $BASE)"
python3 - "$BASE" "$BENCH" <<'PY' 2>&1 | tee "$LOG/build.txt" || status=1
import sys, time
from kda_nb.kernels import load_kernels
from kda_nb.bench.versions import load_version
for v in (None,) if sys.argv[2:] in (['--train'], ['--train-base'], ['--capture'], ['--records'], ['--new'], ['--long'], ['--serving']) else (None, sys.argv[1]):
    t = time.time(); load_kernels() if v is None else load_version(v); print(f"built {v or 'this tree'} in {time.time() - t:.0f} s")
PY
# the API first: its GPU tests (graphs, no host sync, compile) are the quickest to say what a host-side change broke
# (fla's tests last: fla may tune its kernels for minutes on a machine that has not run them yet)
TESTS="tests/test_05_api.py tests/test_04_kernels.py tests/test_04a_decode.py tests/test_04b_plan.py
       tests/test_04c_backward_kernels.py tests/test_03a_backward.py tests/test_11_serving.py tests/test_12_serving_loop.py
       tests/test_10a_segments.py tests/test_07n_bench_serving.py tests/test_07k_bench_paths.py tests/test_07m_bench_versions.py
       tests/test_07b_bench_backends.py tests/test_06_peers.py tests/test_06a_fla_backend.py"
if [ "$BENCH" = --train ]; then
  echo "== the backward's GPU tests"
  bounded python3 -m pytest -q -rfEs --tb=short -p no:cacheprovider tests/test_04c_backward_kernels.py 2>&1 | tee "$LOG/pytest_backward.txt" || status=1
  bounded python3 -m pytest -q -rfEs --tb=short -p no:cacheprovider tests/test_05_api.py -k "kernel_path_backward or opcheck_cuda" 2>&1 \
    | tee "$LOG/pytest_api_backward.txt" || status=1
  echo "== the backward under compute-sanitizer, and where its time goes"
  bounded python3 tools/sanitize.py --backward 2>&1 | tee "$LOG/sanitize_backward.txt" || status=1
  bounded python3 -m kda_nb.bench stages --out "$LOG" 2>&1 | tee "$LOG/backward_stages.txt" || status=1
  if [ -n "${FLA_CONFIGS:-}" ]; then
    python3 tools/fla_configs.py install "$FLA_CONFIGS" /tmp/fla_configs 2>&1 | tee "$LOG/fla_configs.txt" || status=1
    export FLA_CONFIG_DIR=/tmp/fla_configs FLA_CACHE_MODE="${FLA_CACHE_MODE:-fuzzy}"
  fi
  echo "== fla's training path compiled and tuned first (271 s for one shape on the H200 when fla tunes: tools/fla_warmup.py)"
  for h in $(echo "${TRAIN_H:-96,64}" | tr ',' ' '); do
    bounded python3 tools/fla_warmup.py --H "$h" --first "${FLA_WARM_FIRST:-$([ -n "${FLA_CONFIGS:-}" ] && echo 6 || echo 2)}" ${FLA_CACHE:+--unpack "$FLA_CACHE"} \
      2>&1 | tee -a "$LOG/fla_warmup.txt" || status=1
  done
  echo "== training steps: kda_nb and fla in one run (the benchmark's train group)"
  bounded python3 -m kda_nb.bench --cases train --impls kda_nb,fla --H "${TRAIN_H:-96,64}" --deadline "${TRAIN_DEADLINE:-400}" \
    --no-plots --out "$LOG" --tag train_$GPU_TAG "${COMMIT_ARG[@]}" 2>&1 | tee "$LOG/train.txt" || status=1
  exit $status
fi
if [ "$BENCH" = --train-base ]; then
  [ "$BASE" = - ] && BASE=base
  echo "== the whole API (gradients, pools, decode steps) against $BASE's whole tree, bitwise"
  bounded python3 -m kda_nb.bench compare-tree "$BASE" 2>&1 | tee "$LOG/bitwise_tree.txt" || status=1
  echo "== training steps: this tree against $BASE's whole tree, in turns"
  bounded python3 -m kda_nb.bench train-base --version "$BASE" --H "${TRAIN_H:-96,64}" --rounds 2 \
    --deadline "$(( ($(left) - 150) / 4 > 30 ? ($(left) - 150) / 4 : 30 ))" --out "$LOG" "${COMMIT_ARG[@]}" 2>&1 \
    | tee "$LOG/train_base.txt" || status=1
  exit $status
fi
if [ "$BENCH" = --new ]; then
  echo "== K2's states only and paired (04), the entry gradients (04c), the passes and the gradient in segments (10a), the API's gradients (05)"
  bounded python3 -m pytest -q -rfEs --tb=short -p no:cacheprovider -m "not slow" tests/test_04_kernels.py \
    tests/test_04c_backward_kernels.py tests/test_10a_segments.py tests/test_05_api.py \
    -k "states_only or states_paired or entry_only or segments or passes or gradient or backward" 2>&1 \
    | tee "$LOG/pytest_new.txt" || status=1
  echo "== the forward's and the backward's cases under compute-sanitizer"
  bounded python3 tools/sanitize.py 2>&1 | tee "$LOG/sanitize.txt" || status=1
  bounded python3 tools/sanitize.py --backward 2>&1 | tee "$LOG/sanitize_backward.txt" || status=1
  echo "== the training step one sequence: whole, in segments, in segments lean"
  bounded python3 tools/segments_probe.py --train --out "$LOG/passes_train_probe.json" 2>&1 | tee "$LOG/train_probe.txt" || status=1
  echo "== the long group, kda_nb alone"
  bounded python3 -m kda_nb.bench --cases long --impls kda_nb --H 4,8,16 --long-T 65536,131072 --no-plots \
    --deadline "$(( $(left) > 300 ? 90 : $(left) / 3 ))" --out "$LOG" --tag long_kda_nb_$GPU_TAG "${COMMIT_ARG[@]}" 2>&1 \
    | tee "$LOG/long_kda_nb.txt" || status=1
  exit $status
fi
if [ "$BENCH" = --serving ]; then
  d=$(( $(left) - 20 )); [ "$d" -gt "${SERVING_DEADLINE:-210}" ] && d=${SERVING_DEADLINE:-210}
  echo "== serving steps: decode, verification, checkpoints (at most $d s)"
  bounded python3 -m kda_nb.bench serving --deadline "$d" --out "$LOG" "${COMMIT_ARG[@]}" 2>&1 | tee "$LOG/serving.txt" || status=1
  exit $status
fi
if [ "$BENCH" = --long ]; then
  REC=/tmp/records_long; [ -n "${RESUME:-}" ] || rm -rf "$REC"; mkdir -p "$REC/benchmarks"
  FK=$(python3 -c "import flash_kda" 2>/dev/null && echo ,flash_kda)
  FL=$(python3 -c "import fla" 2>/dev/null && echo ,fla,fla_cp)
  if [ -n "$FL" ] && [ -n "${FLA_CONFIGS:-}" ]; then
    python3 tools/fla_configs.py install "$FLA_CONFIGS" /tmp/fla_configs 2>&1 | tee "$LOG/fla_configs.txt" || status=1
    export FLA_CONFIG_DIR=/tmp/fla_configs FLA_CACHE_MODE="${FLA_CACHE_MODE:-fuzzy}"
  fi
  echo "== record long_$GPU_TAG (at most $(( $(left) - 15 )) s)"
  bounded python3 -m kda_nb.bench --cases long --impls "kda_nb$FK$FL" --deadline "$(( $(left) - 15 ))" \
    --out "$REC" --tag long_$GPU_TAG ${RESUME:+--resume} "${COMMIT_ARG[@]}" 2>&1 | tee "$LOG/long.txt" || status=1
  [ -f "$REC/BENCHMARK_LONG_${GPU_TAG^^}.md" ] && mv "$REC/BENCHMARK_LONG_${GPU_TAG^^}.md" "$REC/benchmarks/"
  tar -C "$REC" -cf "$OUTDIR/records.tar" benchmarks && tar -tf "$OUTDIR/records.tar"
  exit $status
fi
if [ "$BENCH" = --records ]; then
  REC=/tmp/records; rm -rf "$REC"; mkdir -p "$REC/benchmarks"
  FK=$(python3 -c "import flash_kda" 2>/dev/null && echo ,flash_kda)
  FR=$(python3 -c "import fla" 2>/dev/null && echo ,fla_recurrent)
  group() {   # TAG SECONDS ARGS...: one group of the benchmark into $REC (BENCHMARK_<TAG>.md, benchmarks/results_<tag>.json)
    local tag=$1 s=$2; shift 2
    echo "== record $tag (at most $s s)"
    bounded python3 -m kda_nb.bench --no-plots "$@" --deadline "$s" --out "$REC" --tag "$tag" "${COMMIT_ARG[@]}" 2>&1 \
      | tee "$LOG/$tag.txt" || status=1
    [ -f "$REC/BENCHMARK_${tag^^}.md" ] && mv "$REC/BENCHMARK_${tag^^}.md" "$REC/benchmarks/"
  }
  group anchor_$GPU_TAG 60 --cases anchor --impls "kda_nb$FK"
  group sweeps_$GPU_TAG 150 --cases T,N --impls "kda_nb$FK"
  group small_$GPU_TAG 60 --cases small --impls "kda_nb,kda_nb_step$FK$FR"
  echo "== record decode_paths_$GPU_TAG"
  bounded python3 -m kda_nb.bench decode-paths $GPU_TAG 2>&1 | tee "$LOG/decode_paths.txt" && cp benchmarks/decode_paths_$GPU_TAG.json "$REC/benchmarks/" \
    || status=1
  if [ -n "$FR" ]; then
    if [ -n "${FLA_CONFIGS:-}" ]; then
      python3 tools/fla_configs.py install "$FLA_CONFIGS" /tmp/fla_configs 2>&1 | tee "$LOG/fla_configs.txt" || status=1
      export FLA_CONFIG_DIR=/tmp/fla_configs FLA_CACHE_MODE="${FLA_CACHE_MODE:-fuzzy}"
    fi
    for h in $(echo "${TRAIN_H:-96,64}" | tr ',' ' '); do
      bounded python3 tools/fla_warmup.py --H "$h" --first "${FLA_WARM_FIRST:-$([ -n "${FLA_CONFIGS:-}" ] && echo 6 || echo 2)}" \
        2>&1 | tee -a "$LOG/fla_warmup.txt" || status=1
    done
  fi
  group train_$GPU_TAG "$(( $(left) - 15 ))" --cases train --impls "kda_nb${FR:+,fla}" --H "${TRAIN_H:-96,64}"
  tar -C "$REC" -cf "$OUTDIR/records.tar" benchmarks && tar -tf "$OUTDIR/records.tar"
  exit $status
fi
if [ "$BENCH" = --capture ]; then
  if [ "${CAPTURE_TESTS:-1}" != 0 ]; then
    echo "== the GPU tests (not the slow ones), then the capture"
    bounded python3 -m pytest -q -rfEs --tb=short -p no:cacheprovider -m "not slow" $TESTS 2>&1 | tee "$LOG/pytest.txt" | tail -15 || status=1
  fi
  FK=$(python3 -c "import flash_kda" 2>/dev/null && echo --with-flash-kda)
  bounded python3 -m kda_nb.ncu capture --modes ${CAPTURE_MODES:-fixed varlen decode train} $FK --out /tmp/ncu 2>&1 | grep -v '^==PROF== Profiling' \
    | tee "$LOG/capture.txt" || status=1
  mkdir -p "$LOG/ncu" "$LOG/flash_kda"
  cp /tmp/ncu/capture.json "$LOG/ncu/" 2>/dev/null; cp reports/ncu/flash_kda/capture.json "$LOG/flash_kda/" 2>/dev/null
  # each report's numbers with NVIDIA's ncu_report where it works, else with the ncu command's raw page (no source
  # lines): on the lent H200 (2026-12-04) the ncu_report of Nsight Compute 2025.3.1 crashed the process that read a report
  ncu_read() {
    bounded python3 -m kda_nb.ncu "$@" --reader module && return 0
    echo "kda_nb.ncu $1 with ncu_report failed: again with the ncu command's raw page (--reader cli)"
    bounded python3 -m kda_nb.ncu "$@" --reader cli
  }
  # the modes' reports (not the locating run's, which profiles every kernel the program launches, torch's too)
  REPS=$(ls /tmp/ncu/kda_{fixed,varlen,decode,drafts,fused,train,long,long_whole}.ncu-rep 2>/dev/null)
  ncu_read numbers $REPS --lines --out "$LOG/ncu" 2>&1 | tee -a "$LOG/capture.txt" || status=1
  ncu_read summary $REPS > "$LOG/ncu/summary.txt" 2>&1 || status=1
  if [ -n "$FK" ]; then
    ncu_read numbers reports/ncu/flash_kda/flashkda_fixed.ncu-rep reports/ncu/flash_kda/flashkda_varlen.ncu-rep \
      --out "$LOG/flash_kda" 2>&1 | tee -a "$LOG/capture.txt" || status=1
  fi
  for r in kda_fixed kda_varlen; do                 # the full reports (not tracked: their numbers are), each under the 16 MB limit
    [ -f "/tmp/ncu/$r.ncu-rep" ] && cp "/tmp/ncu/$r.ncu-rep" "$OUTDIR/"
  done
  exit $status
fi
if [ "$BENCH" = --slow ]; then
  echo "== the slow GPU tests"
  bounded python3 -m pytest -q -rfEs --tb=short -p no:cacheprovider -m slow $TESTS 2>&1 | tee "$LOG/pytest_slow.txt" || status=1
  exit $status
fi
echo "== bitwise against $BASE"
bounded python3 -m kda_nb.bench compare "$BASE" 2>&1 | tee "$LOG/bitwise.txt" || status=1
if [ -n "${SKIP_TESTS:-}" ]; then
  echo "== GPU tests skipped (SKIP_TESTS)"
else
  echo "== GPU tests (not the slow ones)"
  bounded python3 -m pytest -q -rfEs --tb=short -p no:cacheprovider -m "not slow" $TESTS 2>&1 | tee "$LOG/pytest.txt" || status=1
fi
if [ "$BENCH" = --bench ]; then
  echo "== benchmark: anchor and small calls, this tree against $BASE"
  bounded python3 -m kda_nb.bench --no-plots --cases anchor,small --impls "kda_nb,kda_nb_launch,kda_nb_$BASE" --out "$LOG" --tag house "${COMMIT_ARG[@]}" 2>&1 \
    | tee "$LOG/bench.txt" || status=1
fi
exit $status
