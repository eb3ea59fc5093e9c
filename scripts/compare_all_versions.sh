#!/usr/bin/env bash
# The guide's version comparison (its code block 3) on a CPU: builds
# FlashAttention-1, -2 and -3 (FLASH_ATTENTION_VERSION=all) and runs each
# version's benchmark on the same shape, dtype and random inputs, printing
# per version the guide's lines: Throughput, Latency, Elapsed, CPU and Mem
# (the whole process: wall time, CPU time over wall time, peak resident
# memory), then a summary with each version's speed relative to FA1.
# --rounds N runs the three N times in turn (FA1, FA2, FA3, FA1, ...) and the
# summary gives each version's median: on a shared machine whose speed
# drifts, only figures taken side by side compare.
#
# usage: scripts/compare_all_versions.sh [--build-dir DIR] [--skip-build] [--jobs N]
#            [--dtype bf16] [--batch 2] [--seq 512] [--heads 12] [--head-dim 64]
#            [--num-runs 10] [--rounds 1] [--causal] [-- EXTRA BENCHMARK FLAGS...]
# Defaults are the guide's (B=2, S=512, H=12, D=64, bf16, 10 runs).  FA2 and
# FA3 run the guide's --tile-q=128 --tile-kv=64 unless EXTRA gives tiles or
# --tile-q=auto; FA1 runs its fixed 64x64 tiles (it refuses others).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build/compare_versions
JOBS=$(nproc 2>/dev/null || echo 2)
SKIP_BUILD=0
DTYPE=bf16 BATCH=2 SEQ=512 HEADS=12 HEAD_DIM=64 NUM_RUNS=10 ROUNDS=1 CAUSAL=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --heads) HEADS=$2; shift 2 ;;
    --head-dim) HEAD_DIM=$2; shift 2 ;;
    --num-runs) NUM_RUNS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --causal) CAUSAL=(--causal); shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (expected --build-dir, --skip-build, --jobs, --dtype, --batch, --seq," \
            "--heads, --head-dim, --num-runs, --rounds, --causal or -- EXTRA)" >&2; exit 2 ;;
  esac
done
for pair in "--batch:$BATCH" "--seq:$SEQ" "--heads:$HEADS" "--head-dim:$HEAD_DIM" "--num-runs:$NUM_RUNS" "--jobs:$JOBS" \
            "--rounds:$ROUNDS"; do
  case "${pair#*:}" in ''|*[!0-9]*|0) echo "error: ${pair%%:*}: '${pair#*:}' is not a positive integer" >&2; exit 2 ;; esac
done

if [ "$SKIP_BUILD" = 0 ]; then
  # shellcheck source=ensure_deps.sh
  . "$REPO/scripts/ensure_deps.sh"
  export FA_NO_INSTALL=1  # check only: the tooling scripts download nothing
  fa_ensure_build_deps || { echo "error: install the packages named above and run it again" >&2; exit 1; }
  echo "== Building FA1, FA2 and FA3 (FLASH_ATTENTION_VERSION=all) in $BUILD"
  cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DENABLE_FLASH_ATTENTION=ON -DFLASH_ATTENTION_VERSION=all \
        -DENABLE_BENCHMARK=ON -DENABLE_TESTS=OFF > "$BUILD.configure.log" 2>&1 \
    || { echo "error: cmake failed (see $BUILD.configure.log)" >&2; exit 1; }
  cmake --build "$BUILD" -j "$JOBS" --target fa1_benchmark fa2_benchmark fa3_benchmark > "$BUILD.build.log" 2>&1 \
    || { echo "error: the build failed (see $BUILD.build.log)" >&2; exit 1; }
fi

echo "=========================================="
echo "  Comparing ALL FA Versions"
echo "  B=$BATCH S=$SEQ H=$HEADS D=$HEAD_DIM $DTYPE ${CAUSAL[*]:-non-causal}, $NUM_RUNS runs, random inputs"
echo "=========================================="

# Runs a command; prints its output, then Elapsed (s), CPU (% of one core)
# and Mem (peak resident KB) of the child, as GNU time's -f "%e %P %M" would.
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
wall = time.perf_counter() - t0
use = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.write(p.stdout)
print(f"Elapsed: {wall:.2f} s\nCPU: {100 * (use.ru_utime + use.ru_stime) / wall:.0f}%\nMem: {use.ru_maxrss} KB")
sys.exit(p.returncode)
PY
}

declare -A THROUGHPUT  # per version: the rounds' figures, space-separated, from each run's --json-file
status=0
RESULTS=$(mktemp -d)
trap 'rm -rf "$RESULTS"' EXIT
for ROUND in $(seq "$ROUNDS"); do
for VER in 1 2 3; do
  echo ""
  if [ "$ROUNDS" -gt 1 ]; then echo ">>> Testing FA${VER} (round $ROUND of $ROUNDS) ..."; else echo ">>> Testing FA${VER} ..."; fi
  BINARY="$BUILD/tests/fa${VER}_benchmark"
  if [ ! -x "$BINARY" ]; then
    echo "    [SKIP] FA${VER} binary not found at ${BINARY}"
    continue
  fi
  tiles=(--tile-q=128 --tile-kv=64)
  [ "$VER" = 1 ] && tiles=()  # FA1's fixed 64x64
  for arg in "${EXTRA[@]}"; do case "$arg" in --tile-*) tiles=() ;; esac; done
  if ! out=$(measure "$BINARY" --batch-size="$BATCH" --seq-q="$SEQ" --seq-kv="$SEQ" --num-heads="$HEADS" \
                     --head-dim="$HEAD_DIM" --dtype="$DTYPE" --num-runs="$NUM_RUNS" --warmup-runs=2 \
                     "${tiles[@]}" "${CAUSAL[@]}" --output=/dev/null --json-file="$RESULTS/fa$VER.json" \
                     "${EXTRA[@]}" 2>&1); then
    echo "$out" | sed 's/^/    /'
    echo "    [FAIL] fa${VER}_benchmark exited with an error"
    status=1
    continue
  fi
  echo "$out" | grep -E "^(Tile|Kernel|Throughput|Latency|Utilization|Elapsed|CPU|Mem)" | sed 's/^/    /'
  THROUGHPUT[$VER]="${THROUGHPUT[$VER]:-} $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["throughput_tflops"])' \
                                             "$RESULTS/fa$VER.json")"
done
done

echo ""
if [ "$ROUNDS" -gt 1 ]; then echo "Summary (median over $ROUNDS rounds, relative to FA1):"; else echo "Summary (throughput relative to FA1):"; fi
for VER in 1 2 3; do
  [ -n "${THROUGHPUT[$VER]:-}" ] || continue
  python3 -c "import statistics, sys
median = lambda text: statistics.median(float(x) for x in text.split())
t = median(sys.argv[2]); base = median(sys.argv[3]) if sys.argv[3].strip() else 0
print(f'  FA{sys.argv[1]}: {t:.5f} TFLOPS' + (f'  ({t / base:.2f}x FA1)' if base > 0 else ''))" \
    "$VER" "${THROUGHPUT[$VER]}" "${THROUGHPUT[1]:-}"
done
echo ""
echo "Comparison done."
exit $status
