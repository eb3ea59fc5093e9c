#!/usr/bin/env bash
# The guide's build script (its code block 1) for CPUs: configures, builds
# and installs one FlashAttention version, or all three.
#
# usage: scripts/build_flash_attention.sh [VERSION] [TARGET] [INSTALL_DIR]
#            [--build-dir DIR] [--jobs N] [--tile-q N] [--tile-kv N]
#            [-- EXTRA CMAKE ARGS...]
#   VERSION      1, 2, 3 or all (2)
#   TARGET       the CPU target, where the guide names its NPU type: auto
#                (every kernel path, chosen at run time), host (the paths
#                this CPU runs), generic, avx2, avx512, avx512bf16, amx (auto)
#   INSTALL_DIR  where to install (./install): lib/libflash_attention_fa<N>.so,
#                bin/fa<N>_benchmark, bin/fa<N>_test, include/flash_attention/,
#                lib/cmake/FlashAttention/ (find_package(FlashAttention),
#                targets FlashAttention::fa<N>) and lib/pkgconfig/flash_attention_fa<N>.pc
#   --build-dir  the CMake build directory (build/fa<VERSION>-<TARGET>; reused,
#                so a second run rebuilds only what changed)
#   --tile-q, --tile-kv  FA_TILE_Q / FA_TILE_KV (auto: the planner's choice)
# It installs nothing: missing tools or libraries are named with the
# command that installs them (scripts/env_health_check.sh checks them all).
# Exit status: 0 built and installed; 1 the build failed (its log is named);
# 2 bad arguments.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VALID_TARGETS="auto, host, generic, avx2, avx512, avx512bf16, amx"
usage_error() { echo "build_flash_attention.sh: $*" >&2; exit 2; }

POSITIONAL=() BUILD_DIR="" JOBS=$(nproc 2>/dev/null || echo 2) TILE_Q=auto TILE_KV=auto EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || usage_error "--build-dir needs a directory"; BUILD_DIR=$2; shift 2 ;;
    --build-dir=*) BUILD_DIR=${1#*=}; shift ;;
    --jobs) [ $# -ge 2 ] || usage_error "--jobs needs a number"; JOBS=$2; shift 2 ;;
    --jobs=*) JOBS=${1#*=}; shift ;;
    --tile-q) [ $# -ge 2 ] || usage_error "--tile-q needs a value"; TILE_Q=$2; shift 2 ;;
    --tile-q=*) TILE_Q=${1#*=}; shift ;;
    --tile-kv) [ $# -ge 2 ] || usage_error "--tile-kv needs a value"; TILE_KV=$2; shift 2 ;;
    --tile-kv=*) TILE_KV=${1#*=}; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    -*) usage_error "unknown option '$1' (expected --build-dir, --jobs, --tile-q, --tile-kv, --help or -- CMAKE ARGS)" ;;
    *) POSITIONAL+=("$1"); shift ;;
  esac
done
[ ${#POSITIONAL[@]} -le 3 ] || usage_error "too many arguments: '${POSITIONAL[3]}' (expected VERSION TARGET INSTALL_DIR)"
FA_VERSION=${POSITIONAL[0]:-2}
TARGET=${POSITIONAL[1]:-auto}
INSTALL_DIR=${POSITIONAL[2]:-./install}

case "$FA_VERSION" in 1|2|3|all) ;; *) usage_error "VERSION '$FA_VERSION' is not valid: expected 1, 2, 3 or all" ;; esac
case "$TARGET" in
  auto|host|generic|avx2|avx512|avx512bf16|amx) ;;
  [Aa]scend*|*910*|*310*|*[Nn][Pp][Uu]*)
    usage_error "TARGET '$TARGET' is an Ascend NPU type; this project builds for x86-64 CPUs: expected one of $VALID_TARGETS" ;;
  *) usage_error "TARGET '$TARGET' is not valid: expected one of $VALID_TARGETS" ;;
esac
case "$JOBS" in ''|*[!0-9]*|0) usage_error "--jobs: '$JOBS' is not a positive integer" ;; esac
for pair in "--tile-q:$TILE_Q" "--tile-kv:$TILE_KV"; do
  case "${pair#*:}" in
    auto|16|32|64|128|256|512) ;;
    *) usage_error "${pair%%:*}: '${pair#*:}' is not valid: expected auto or a power of two from 16 to 512" ;;
  esac
done
[ -n "$INSTALL_DIR" ] || usage_error "INSTALL_DIR is empty"
case "$INSTALL_DIR" in /*) ;; *) INSTALL_DIR=$PWD/$INSTALL_DIR ;; esac
[ -n "$BUILD_DIR" ] || BUILD_DIR=$REPO/build/fa$FA_VERSION-$TARGET
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$PWD/$BUILD_DIR ;; esac

if [ "$FA_VERSION" = all ]; then VERSIONS="1 2 3"; else VERSIONS=$FA_VERSION; fi
echo "=========================================="
echo "  FlashAttention Build Script"
echo "  Version: FA${FA_VERSION}"
echo "  CPU Target: ${TARGET}"
echo "  Install Dir: ${INSTALL_DIR}"
echo "=========================================="

# shellcheck source=ensure_deps.sh
. "$REPO/scripts/ensure_deps.sh"
export FA_NO_INSTALL=1  # check only: this script downloads nothing
fa_ensure_build_deps || { echo "build_flash_attention.sh: install the packages named above and run it again" >&2; exit 1; }

mkdir -p "$BUILD_DIR"
LOG=$BUILD_DIR/build_flash_attention.log
: > "$LOG"
run_logged() {  # step name, command...
  local step=$1; shift
  if ! "$@" >> "$LOG" 2>&1; then
    tail -n 20 "$LOG" >&2
    echo "build_flash_attention.sh: $step failed (whole log: $LOG)" >&2
    exit 1
  fi
}

echo "[1/3] Running cmake configuration..."
run_logged "cmake configuration" cmake -S "$REPO" -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_INSTALL_PREFIX=$INSTALL_DIR" \
  -DFA_TARGET="$TARGET" \
  -DENABLE_FLASH_ATTENTION=ON \
  -DFLASH_ATTENTION_VERSION="$FA_VERSION" \
  -DFA_TILE_Q="$TILE_Q" \
  -DFA_TILE_KV="$TILE_KV" \
  -DENABLE_BENCHMARK=ON \
  -DENABLE_TESTS=ON \
  ${EXTRA[@]+"${EXTRA[@]}"}
grep -E "FlashAttention Version|FA Tile Config|FA Target" "$LOG" | sed 's/^-- /  /' || true

# Only what is installed: the libraries and the two drivers per version, and
# the other operators' modules when enabled (the CTest suite's unit tests are
# not part of an install).
targets=()
for v in $VERSIONS; do targets+=(flash_attention_fa$v fa${v}_benchmark fa${v}_test); done
for module in LAYER_NORM ROPE GLU; do
  if grep -q "^ENABLE_${module}:BOOL=ON" "$BUILD_DIR/CMakeCache.txt"; then
    lib=$(echo "$module" | tr 'A-Z' 'a-z')
    targets+=("$lib" "${lib}_benchmark" "${lib}_test")
  fi
done
# The decoder-layer benchmark, where configure found oneDNN for it.
# (The list read whole first: grep -q would close the pipe early, and under
# pipefail the writer's SIGPIPE would read as no match.)
build_targets=$(cmake --build "$BUILD_DIR" --target help 2>/dev/null || true)
if grep -q "decoder_layer_benchmark" <<<"$build_targets"; then
  targets+=(decoder_layer_benchmark)
fi
echo "[2/3] Building (parallel jobs: $JOBS)..."
run_logged "the build" cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"

echo "[3/3] Installing to ${INSTALL_DIR}..."
run_logged "the install" cmake --install "$BUILD_DIR"

echo ""
echo "=========================================="
echo "  Build completed successfully!"
for v in $VERSIONS; do
  echo "  Library: ${INSTALL_DIR}/lib/libflash_attention_fa${v}.so"
  echo "  Binary:  ${INSTALL_DIR}/bin/fa${v}_benchmark"
done
echo "  CMake:   find_package(FlashAttention) -> FlashAttention::fa<N> (${INSTALL_DIR}/lib/cmake/FlashAttention)"
echo "  pkg-config: PKG_CONFIG_PATH=${INSTALL_DIR}/lib/pkgconfig pkg-config --cflags --libs flash_attention_fa<N>"
echo "=========================================="
