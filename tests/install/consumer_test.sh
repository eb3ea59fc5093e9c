#!/usr/bin/env bash
# Builds the consumer project (tests/install/consumer) against an installed
# FlashAttention, one way per call, runs it, and expects its PASS line:
#   cmake       find_package(FlashAttention) + FlashAttention::fa2, ::rope (CMAKE_PREFIX_PATH)
#   pkg-config  c++ $(pkg-config --cflags --libs flash_attention_fa2 ops_transformer_rope)
# usage: consumer_test.sh cmake|pkg-config INSTALL_DIR SCRATCH_DIR
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: consumer_test.sh cmake|pkg-config INSTALL_DIR SCRATCH_DIR" >&2; exit 2; }
way=$1 install=$2 scratch=$3
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/consumer" && pwd)
rm -rf "$scratch" && mkdir -p "$scratch"
case "$way" in
  cmake)
    cmake -S "$src" -B "$scratch" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$install" > "$scratch/configure.log" 2>&1 \
      || { cat "$scratch/configure.log"; echo "FAIL: find_package(FlashAttention) against $install"; exit 1; }
    cmake --build "$scratch" > "$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; echo "FAIL: build"; exit 1; }
    # CMake puts the imported library's directory in the build tree's RPATH.
    "$scratch/consumer"
    ;;
  pkg-config)
    command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config (apt-get install pkg-config)"; exit 77; }
    export PKG_CONFIG_PATH=$install/lib/pkgconfig
    flags=$(pkg-config --cflags --libs flash_attention_fa2 ops_transformer_rope)
    echo "pkg-config --cflags --libs flash_attention_fa2 ops_transformer_rope: $flags"
    # shellcheck disable=SC2086
    ${CXX:-c++} -std=c++17 -O1 "$src/main.cpp" -o "$scratch/consumer" $flags
    LD_LIBRARY_PATH=$(pkg-config --variable=libdir flash_attention_fa2) "$scratch/consumer"
    ;;
  *) echo "consumer_test.sh: unknown way '$way' (expected cmake or pkg-config)" >&2; exit 2 ;;
esac
