#!/usr/bin/env bash
# The guide's regression test (its code block 10): build -> correctness ->
# performance against a baseline, one report.
#   1. build and install each version with scripts/build_flash_attention.sh
#      into INSTALL_BASE_fa<N> (--skip-build: use what is installed there)
#   2. fa<N>_test --quick --dtype=bf16 (the guide's; --test-args to change)
#   3. the benchmark over a few configurations, each repeated and its median
#      taken (scripts/perf_regression.py), written to current_results.csv and
#      compared with baseline_results.csv (config,throughput_tflops): a drop
#      of more than --threshold percent prints a REGRESSION line and fails
# A timestamped report (regression_report_YYYYmmdd_HHMMSS.txt) holds every
# stage's output.  Unlike the guide's script, a regression fails the run
# (its check's `exit 1` sat inside a Python string under `set -e`).
#
# usage: scripts/regression_test.sh [--versions 1,2,3] [--target auto]
#            [--install-base ./install_regression] [--skip-build] [--jobs N]
#            [--baseline baseline_results.csv] [--current current_results.csv]
#            [--threshold 10] [--repeats 3] [--num-runs 10] [--configs LIST]
#            [--update-baseline] [--test-args "ARGS"] [--report-dir .]
#   --configs  DTYPE/BxSxHxD[/causal],... (fp16/2x512x12x64/causal,bf16/1x2048x16x128/causal)
# Exit status: 0 every stage passed; 1 a build, a test or the performance
# check failed (the summary says which); 2 bad arguments.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage_error() { echo "regression_test.sh: $*" >&2; exit 2; }

VERSIONS="1,2,3" TARGET=auto INSTALL_BASE=./install_regression SKIP_BUILD=0 JOBS=$(nproc 2>/dev/null || echo 2)
BASELINE=./baseline_results.csv CURRENT=./current_results.csv THRESHOLD=10 REPEATS=3 NUM_RUNS=10 CONFIGS=""
UPDATE=() TEST_ARGS="--quick --dtype=bf16" REPORT_DIR=.
need() { [ "$2" -ge 2 ] || usage_error "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --versions) need "$1" $#; VERSIONS=$2; shift 2 ;;
    --target) need "$1" $#; TARGET=$2; shift 2 ;;
    --install-base) need "$1" $#; INSTALL_BASE=$2; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --jobs) need "$1" $#; JOBS=$2; shift 2 ;;
    --baseline) need "$1" $#; BASELINE=$2; shift 2 ;;
    --current) need "$1" $#; CURRENT=$2; shift 2 ;;
    --threshold) need "$1" $#; THRESHOLD=$2; shift 2 ;;
    --repeats) need "$1" $#; REPEATS=$2; shift 2 ;;
    --num-runs) need "$1" $#; NUM_RUNS=$2; shift 2 ;;
    --configs) need "$1" $#; CONFIGS=$2; shift 2 ;;
    --update-baseline) UPDATE=(--update-baseline); shift ;;
    --test-args) need "$1" $#; TEST_ARGS=$2; shift 2 ;;
    --report-dir) need "$1" $#; REPORT_DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1' (see --help)" ;;
  esac
done
VERSION_LIST=${VERSIONS//,/ }
[ -n "${VERSION_LIST// /}" ] || usage_error "--versions is empty"
for v in $VERSION_LIST; do case "$v" in 1|2|3) ;; *) usage_error "--versions: '$v' is not 1, 2 or 3" ;; esac; done
for pair in "--repeats:$REPEATS" "--num-runs:$NUM_RUNS" "--jobs:$JOBS"; do
  case "${pair#*:}" in ''|*[!0-9]*|0) usage_error "${pair%%:*}: '${pair#*:}' is not a positive integer" ;; esac
done
case "$THRESHOLD" in ''|*[!0-9.]*|*.*.*) usage_error "--threshold: '$THRESHOLD' is not a percentage" ;; esac
[ -d "$REPORT_DIR" ] || usage_error "--report-dir: '$REPORT_DIR' is not a directory"
PYTHON=$(command -v python3 || command -v /usr/bin/python3 || true)
[ -n "$PYTHON" ] || usage_error "python3 is needed for the performance stage (apt-get install python3)"

REPORT_FILE=$REPORT_DIR/regression_report_$(date +%Y%m%d_%H%M%S).txt
REPORT_TMP=$REPORT_FILE.partial
trap 'rm -f "$REPORT_TMP"' EXIT
: > "$REPORT_TMP"
log() { echo "[$(date +%H:%M:%S)] $1" | tee -a "$REPORT_TMP"; }

PASS=0
FAIL=0
FAILED_STAGES=""
record() {  # ok|fail, what
  if [ "$1" = ok ]; then PASS=$((PASS + 1)); log "  $2: PASS"; else
    FAIL=$((FAIL + 1)); FAILED_STAGES="$FAILED_STAGES; $2"; log "  $2: FAIL"; fi
}

log "=========================================="
log "  Starting Regression Test Suite"
log "  Versions: $VERSION_LIST  Target: $TARGET  Install base: $INSTALL_BASE"
log "=========================================="

log "[Stage 1] Compiling FA${VERSION_LIST// /\/FA}..."
for v in $VERSION_LIST; do
  if [ "$SKIP_BUILD" = 1 ]; then
    if [ -x "${INSTALL_BASE}_fa$v/bin/fa${v}_benchmark" ]; then
      log "  FA$v build: skipped (--skip-build; using ${INSTALL_BASE}_fa$v)"
    else
      record fail "FA$v build (--skip-build, but ${INSTALL_BASE}_fa$v/bin/fa${v}_benchmark is missing)"
    fi
    continue
  fi
  log "  Building FA$v..."
  if bash "$REPO/scripts/build_flash_attention.sh" "$v" "$TARGET" "${INSTALL_BASE}_fa$v" --jobs "$JOBS" \
       >> "$REPORT_TMP" 2>&1; then
    record ok "FA$v build"
  else
    record fail "FA$v build"
  fi
done

log "[Stage 2] Running correctness tests ($TEST_ARGS)..."
for v in $VERSION_LIST; do
  bin=${INSTALL_BASE}_fa$v/bin/fa${v}_test
  if [ ! -x "$bin" ]; then
    record fail "FA$v correctness ($bin not available)"
    continue
  fi
  # shellcheck disable=SC2086
  if "$bin" $TEST_ARGS >> "$REPORT_TMP" 2>&1; then
    record ok "FA$v correctness ($(tail -n1 "$REPORT_TMP"))"
  else
    record fail "FA$v correctness ($(tail -n1 "$REPORT_TMP"))"
  fi
done

log "[Stage 3] Checking performance regression..."
bench_args=()
for v in $VERSION_LIST; do
  bin=${INSTALL_BASE}_fa$v/bin/fa${v}_benchmark
  [ -x "$bin" ] && bench_args+=(--benchmark "$v=$bin")
done
if [ ${#bench_args[@]} -eq 0 ]; then
  record fail "Performance regression check (no benchmark binary installed)"
else
  perf_args=("${bench_args[@]}" --repeats "$REPEATS" --num-runs "$NUM_RUNS" --threshold "$THRESHOLD"
             --baseline "$BASELINE" --current "$CURRENT" ${UPDATE[@]+"${UPDATE[@]}"})
  [ -n "$CONFIGS" ] && perf_args+=(--configs "$CONFIGS")
  "$PYTHON" "$REPO/scripts/perf_regression.py" "${perf_args[@]}" 2>&1 | tee -a "$REPORT_TMP"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) record ok "Performance regression check" ;;
    1) record fail "Performance regression check (see the REGRESSION lines)" ;;
    *) record fail "Performance regression check (exit status $rc)" ;;
  esac
fi

log ""
log "=========================================="
log "  Regression Test Summary"
log "  PASSED: $PASS"
log "  FAILED: $FAIL${FAILED_STAGES:+ (${FAILED_STAGES#; })}"
log "  Report: $REPORT_FILE"
log "=========================================="
mv "$REPORT_TMP" "$REPORT_FILE"
trap - EXIT
[ $FAIL -eq 0 ]
