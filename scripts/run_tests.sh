#!/usr/bin/env bash
# Builds every version (FLASH_ATTENTION_VERSION=all) and runs the whole test
# suite (CTest): unit and property tests, the fa1/fa2/fa3_test matrices,
# bad-input tests of the tools, configure-time checks and build variants
# (FA2 under ThreadSanitizer among them), the fuzzing harnesses (12 s
# each here; clang), the data scripts, the version comparison, the guide
# walkthrough, the Python package's pytest suite (NumPy and PyTorch, in a
# virtual environment under build/), and the unit and driver tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer (the amx path's tiles
# emulated there).
# Installs missing Debian packages (cmake, g++, libgtest-dev, python3-numpy,
# python3-matplotlib; clang and libclang-rt-dev for the fuzzing, whose tests
# skip without them) unless --no-install.
#
# usage: scripts/run_tests.sh [--build-dir DIR] [--jobs N] [--no-install] [--no-sanitize]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build/tests
JOBS=$(nproc 2>/dev/null || echo 2)
SANITIZE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --build-dir=*) BUILD=${1#*=}; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --jobs=*) JOBS=${1#*=}; shift ;;
    --no-install) export FA_NO_INSTALL=1; shift ;;
    --no-sanitize) SANITIZE=0; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (expected --build-dir, --jobs, --no-install or --no-sanitize)" >&2; exit 2 ;;
  esac
done

# shellcheck source=ensure_deps.sh
. "$REPO/scripts/ensure_deps.sh"
fa_ensure_test_deps
fa_ensure_fuzz_deps
fa_numpy_python >/dev/null  # the script tests need NumPy; CMake finds it again
fa_ensure_matplotlib        # and the charts matplotlib

configure_and_build() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S "$REPO" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DENABLE_FLASH_ATTENTION=ON -DFLASH_ATTENTION_VERSION=all \
        -DENABLE_BENCHMARK=ON -DENABLE_TESTS=ON "$@"
  cmake --build "$dir" -j "$JOBS"
}

# The fuzzers run 12 s each here (FA_FUZZ_SECONDS, 60 by default) to keep the
# whole suite inside CI's time on two cores; longer runs are for by hand.
# The Python package (python/) is built in the same tree and its pytest suite
# runs in CTest, in a virtual environment beside the build.
python_args=(-DFA_BUILD_PYTHON=OFF)
if PYTHON_ENV=$(fa_ensure_python_env "$REPO/build/python-env"); then
  python_args=(-DFA_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$PYTHON_ENV")
else
  echo "warning: no Python environment for the package: its tests are left out" >&2
fi
configure_and_build "$BUILD" -DFA_FUZZ_SECONDS=12 "${python_args[@]}"
# configure.amx_emulation (a Release build of the amx path on emulated tiles)
# is left to the sanitizer build below, which emulates the same tiles and
# runs the same checks (fa<N>_test.amx_emulated, the backward on them, the
# unit tests of the amx path, versions_agree_tests) under ASan and UBSan.
skip=()
[ "$SANITIZE" = 1 ] && skip=(-E '^configure[.]amx_emulation$')
ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure --timeout 900 ${skip[@]+"${skip[@]}"}

if [ "$SANITIZE" = 1 ]; then
  # The paths this CPU runs (FA_TARGET=host: the others could not execute
  # here, and each costs minutes to build with the sanitizers), the amx path
  # among them with its tiles emulated, so its engine's memory accesses are
  # checked too, on any CPU with AVX512_BF16 (real tile loads are invisible to
  # the sanitizers).
  # Only the programs the labels below run are built (not the operators'
  # command-line drivers or the decoder-layer example): each costs tens of
  # seconds under the sanitizers.
  cmake -S "$REPO" -B "$BUILD-sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DENABLE_FLASH_ATTENTION=ON \
        -DFLASH_ATTENTION_VERSION=all -DENABLE_BENCHMARK=OFF -DENABLE_TESTS=ON \
        -DFA_SANITIZE=ON -DFA_AMX_EMULATION=ON -DFA_TARGET=host
  cmake --build "$BUILD-sanitize" -j "$JOBS" --target unit_and_driver_programs
  ctest --test-dir "$BUILD-sanitize" -j "$JOBS" --output-on-failure --timeout 900 -L 'unit|driver'
fi
