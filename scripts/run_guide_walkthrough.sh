#!/usr/bin/env bash
# The guide's sections 3 and 4 on a CPU, end to end:
#   3.2  cmake configure (the guide's options, no Ascend paths)
#   3.3  make, and check the artifacts
#   4.1  generate the default test data (B=2, S=512, H=12, D=64, fp16, causal)
#   4.2  run fa2_benchmark with the guide's command line
#   4.3  verify the output against a float64 reference
# and print "PASS: ..." with the throughput.  Installs missing Debian
# packages (cmake, g++, python3-numpy) unless --no-install.
#
# usage: scripts/run_guide_walkthrough.sh [--work-dir DIR] [--dtype fp16|bf16|fp32]
#                                         [--target T] [--jobs N] [--no-install]
# --target is FA_TARGET, where the guide's configure line names its NPU
# (-DASCEND_NPU_TYPE): auto (default), host, generic, avx2, avx512,
# avx512bf16 or amx.
# The build goes to DIR/build/flash_attention and the data to DIR/test_data
# (DIR defaults to the repository root), so the guide's relative paths
# (../../test_data/input_Q.bin) hold as written.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$REPO
DTYPE=fp16
TARGET=auto
JOBS=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --work-dir) WORK=$2; shift 2 ;;
    --work-dir=*) WORK=${1#*=}; shift ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --dtype=*) DTYPE=${1#*=}; shift ;;
    --target) TARGET=$2; shift 2 ;;
    --target=*) TARGET=${1#*=}; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --jobs=*) JOBS=${1#*=}; shift ;;
    --no-install) export FA_NO_INSTALL=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (expected --work-dir, --dtype, --target, --jobs or --no-install)" >&2; exit 2 ;;
  esac
done
case "$DTYPE" in fp16|bf16|fp32) ;; *) echo "error: --dtype: '$DTYPE' (expected fp16, bf16 or fp32)" >&2; exit 2 ;; esac
case "$TARGET" in
  auto|host|generic|avx2|avx512|avx512bf16|amx) ;;
  *) echo "error: --target: '$TARGET' (expected auto, host, generic, avx2, avx512, avx512bf16 or amx)" >&2; exit 2 ;;
esac

# shellcheck source=ensure_deps.sh
. "$REPO/scripts/ensure_deps.sh"
fa_ensure_build_deps
PYTHON=$(fa_numpy_python)

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
BUILD="$WORK/build/flash_attention"

echo "== [3.2] cmake configure"
mkdir -p "$BUILD" && cd "$BUILD"
cmake "$REPO" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=gcc \
    -DCMAKE_CXX_COMPILER=g++ \
    -DENABLE_FLASH_ATTENTION=ON \
    -DFA_TARGET="$TARGET" \
    -DFLASH_ATTENTION_VERSION=2 \
    -DFA_TILE_Q=128 \
    -DFA_TILE_KV=64 \
    -DFA_ENABLE_ASYNC=OFF \
    -DENABLE_BENCHMARK=ON \
    -DENABLE_TESTS=ON

echo "== [3.3] make"
make -j"$JOBS" flash_attention_fa2 fa2_benchmark fa2_test
ls -lh "$BUILD/fa2/libflash_attention_fa2.so" "$BUILD/tests/fa2_benchmark" "$BUILD/tests/fa2_test"
file "$BUILD/fa2/libflash_attention_fa2.so" 2>/dev/null || true

echo "== [4.1] generate test data"
cd "$WORK"
"$PYTHON" "$REPO/scripts/gen_fa2_test_data.py" --dtype="$DTYPE"

echo "== [4.2] run fa2_benchmark"
cd "$BUILD"
./tests/fa2_benchmark \
    --input-q=../../test_data/input_Q.bin \
    --input-k=../../test_data/input_K.bin \
    --input-v=../../test_data/input_V.bin \
    --causal-mask=../../test_data/input_causal_mask.bin \
    --batch-size=2 \
    --seq-q=512 \
    --seq-kv=512 \
    --num-heads=12 \
    --head-dim=64 \
    --dtype="$DTYPE" \
    --num-runs=10 \
    --warmup-runs=2 \
    --tile-q=128 \
    --tile-kv=64 \
    --output=./output_attention.bin | tee benchmark_log.txt

echo "== [4.3] verify"
"$PYTHON" "$REPO/scripts/verify_correctness.py" \
    ./output_attention.bin \
    ../../test_data/input_Q.bin \
    ../../test_data/input_K.bin \
    ../../test_data/input_V.bin | tee verify_log.txt

throughput=$(sed -n 's/^Throughput: \([0-9.]*\) TFLOPS.*/\1/p' benchmark_log.txt)
latency=$(sed -n 's/^Latency: \([0-9.]*\) ms.*/\1/p' benchmark_log.txt)
if grep -q "Status: PASS" verify_log.txt; then
  echo "PASS: FlashAttention-v2 $DTYPE B=2 S=512 H=12 D=64 causal on $(nproc) threads: ${throughput} TFLOPS (${latency} ms)"
else
  echo "FAIL: the output does not match the reference (see above)"
  exit 1
fi
