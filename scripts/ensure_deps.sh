# Sourced by the project's scripts: installs what the build and tests need
# when it is missing (Debian packages), and finds a Python 3 with NumPy.
# Set FA_NO_INSTALL=1 to check only.

fa_log() { echo "[deps] $*" >&2; }

fa_apt_install() {
  if [ "${FA_NO_INSTALL:-0}" = 1 ]; then
    fa_log "missing Debian packages: $* (install them, or run without --no-install)"
    return 1
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      fa_log "missing Debian packages: $* (run as root, or install them: apt-get install $*)"
      return 1
    fi
  fi
  fa_log "installing: $*"
  if [ -z "${FA_APT_UPDATED:-}" ]; then
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || return 1
    FA_APT_UPDATED=1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

fa_cmake_recent_enough() {
  command -v cmake >/dev/null 2>&1 || return 1
  local v
  v=$(cmake --version | head -n1 | sed 's/[^0-9]*\([0-9]*\)\.\([0-9]*\).*/\1 \2/')
  set -- $v
  [ "${1:-0}" -gt 3 ] || { [ "${1:-0}" -eq 3 ] && [ "${2:-0}" -ge 20 ]; }
}

fa_header_present() {  # path under include/
  [ -f "/usr/include/$1" ] || [ -f "/usr/local/include/$1" ]
}

# cmake >= 3.20, g++ with C++20, make; the drivers' JSON (--json, config
# files) and YAML (config files) parsers.
fa_ensure_build_deps() {
  local need=()
  fa_cmake_recent_enough || need+=(cmake)
  command -v g++ >/dev/null 2>&1 || need+=(g++)
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  command -v make >/dev/null 2>&1 || need+=(make)
  fa_header_present nlohmann/json.hpp || need+=(nlohmann-json3-dev)
  fa_header_present yaml-cpp/yaml.h || need+=(libyaml-cpp-dev)
  [ ${#need[@]} -eq 0 ] || fa_apt_install "${need[@]}" || return 1
  fa_cmake_recent_enough || { fa_log "cmake >= 3.20 is required (found: $(cmake --version | head -n1))"; return 1; }
  # oneDNN's matmul for the decoder-layer example's projections.  Not fatal:
  # without it the example is skipped (configure says so).
  fa_header_present oneapi/dnnl/dnnl.hpp || fa_apt_install libdnnl-dev ||
    fa_log "no oneDNN (libdnnl-dev): examples/decoder_layer will be skipped"
}

# GoogleTest headers and CMake package.
fa_ensure_test_deps() {
  fa_ensure_build_deps || return 1
  local need=()
  fa_header_present gtest/gtest.h || need+=(libgtest-dev)
  # The install's consumer test builds with pkg-config too.
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
  [ ${#need[@]} -eq 0 ] || fa_apt_install "${need[@]}" || return 1
}

# clang and its libFuzzer runtime, for the fuzzing harnesses (CTest label
# fuzz).  Not fatal: without them those tests print SKIP.
fa_ensure_fuzz_deps() {
  local runtime
  runtime=$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
  if command -v clang++ >/dev/null 2>&1 && [ -f "$runtime" ]; then return 0; fi
  fa_apt_install clang libclang-rt-dev || fa_log "no clang with libFuzzer: the fuzzing tests will be skipped"
  return 0
}

# Prints a Python 3 interpreter that imports NumPy, installing python3-numpy
# (for Debian's /usr/bin/python3) when none does.
fa_numpy_python() {
  local candidate
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import numpy" 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  fa_apt_install python3 python3-numpy || return 1
  if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    echo /usr/bin/python3
    return 0
  fi
  fa_log "no Python 3 with NumPy found"
  return 1
}

# matplotlib for the charts (bench/shape_sweep), in the Python with NumPy:
# Debian's python3-matplotlib when that Python is Debian's.  Not fatal: the
# tools then write their CSV and say the chart was skipped.
fa_ensure_matplotlib() {
  local python
  python=$(fa_numpy_python) || return 0
  "$python" -c "import matplotlib" 2>/dev/null && return 0
  if [ "$python" = /usr/bin/python3 ]; then
    fa_apt_install python3-matplotlib || fa_log "no matplotlib: charts will be skipped"
  else
    fa_log "no matplotlib for $python: charts will be skipped (pip install matplotlib, or use Debian's python3)"
  fi
  return 0
}

# A virtual environment in DIR for the Python package (python/): nanobind and
# scikit-build-core to build it, and pytest, NumPy, ml_dtypes and PyTorch to test it, from PyPI.
# Made with the python3 on PATH (python3-venv and python3-dev from Debian
# where that Python is Debian's and lacks them).  Prints the environment's
# interpreter; fails (the caller builds without the package) when the
# environment cannot be made.  PyTorch is not fatal: its tests then skip.
fa_ensure_python_env() {
  local dir=$1 python
  if [ ! -x "$dir/bin/python" ]; then
    python3 -m venv "$dir" >&2 2>/dev/null || { fa_apt_install python3-venv && python3 -m venv "$dir" >&2; } || {
      fa_log "could not make a virtual environment in $dir"; return 1; }
  fi
  python=$dir/bin/python
  if ! "$python" -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then
    fa_apt_install python3-dev || { fa_log "no Python headers (python3-dev) for $python"; return 1; }
  fi
  if ! "$python" -c "import nanobind, scikit_build_core, pytest, numpy, ml_dtypes" 2>/dev/null; then
    [ -z "${FA_NO_INSTALL:-}" ] || { fa_log "no nanobind/scikit-build-core/pytest/NumPy/ml_dtypes in $dir and --no-install given"; return 1; }
    fa_log "installing nanobind, scikit-build-core, pytest, NumPy and ml_dtypes into $dir (PyPI)"
    "$python" -m pip install -q "nanobind==3.1.0" "scikit-build-core>=0.10" "pytest>=7" numpy "ml-dtypes>=0.2" >&2 || return 1
  fi
  if ! "$python" -c "import torch" 2>/dev/null; then
    if [ -z "${FA_NO_INSTALL:-}" ]; then
      fa_log "installing PyTorch into $dir (PyPI; the package's torch tests need it)"
      "$python" -m pip install -q "torch>=2.4" >&2 || fa_log "no PyTorch: the package's torch tests will be skipped"
    else
      fa_log "no PyTorch in $dir: the package's torch tests will be skipped"
    fi
  fi
  echo "$python"
}
