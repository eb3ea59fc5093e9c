#!/usr/bin/env bash
# The guide's environment health check (its code block 9) for CPUs: what the
# build and the runs need, checked before building.
#   toolchain  g++ (C++20), CMake >= 3.20, make or Ninja, Python 3 with NumPy;
#              GoogleTest (the test suite), pkg-config, matplotlib (charts)
#   CPU        model, instruction sets (AVX2, AVX-512, AVX512-BF16,
#              AVX512-FP16, AMX) and whether the kernel grants the AMX tiles
#   machine    cores, caches, memory, huge pages
#   GPU        the CUDA toolkit and driver, when present (not needed)
# Each problem is named with its fix; warnings (slower paths, optional
# tools) are not counted.
#
# usage: scripts/env_health_check.sh [--help]
# Exit status: the number of problems (0: ready to build).
set -uo pipefail

case "${1:-}" in
  -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "env_health_check.sh: unknown argument '$1' (expected --help or nothing)" >&2; exit 2 ;;
esac

echo "=========================================="
echo "  CPU Environment Health Check"
echo "  $(date)"
echo "=========================================="

ERRORS=0
ok() { echo "[  OK  ] $*"; }
problem() {  # what, fix
  echo "[ FAIL ] $1"
  echo "         fix: $2"
  ERRORS=$((ERRORS + 1))
}
warn() { echo "[ WARN ] $*"; }
version_at_least() {  # have want (dotted)
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

echo ""
echo "--- Toolchain ---"
if command -v g++ >/dev/null 2>&1; then
  gxx=$(g++ -dumpfullversion -dumpversion 2>/dev/null)
  if version_at_least "$gxx" 10; then ok "g++ $gxx (C++20)"; else
    problem "g++ $gxx is too old for C++20" "install g++ 10 or later (Debian 12: apt-get install g++)"; fi
else
  problem "g++ not found" "apt-get install g++"
fi
if command -v cmake >/dev/null 2>&1; then
  cm=$(cmake --version 2>/dev/null | head -n1 | awk '{print $3}')
  if version_at_least "${cm:-0}" 3.20; then ok "CMake $cm"; else
    problem "CMake ${cm:-of unknown version} is older than 3.20" "apt-get install cmake (Debian 12 has 3.25), or pip install cmake"; fi
else
  problem "CMake not found" "apt-get install cmake"
fi
if command -v make >/dev/null 2>&1 || command -v ninja >/dev/null 2>&1; then
  ok "build tool: $( { command -v make >/dev/null && make --version | head -n1; } || ninja --version)"
else
  problem "neither make nor ninja found" "apt-get install make"
fi
PY=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import numpy" 2>/dev/null; then
    PY=$(command -v "$candidate"); break
  fi
done
if [ -n "$PY" ]; then
  ok "Python $("$PY" -c 'import sys; print(sys.version.split()[0])') with NumPy $("$PY" -c 'import numpy; print(numpy.__version__)') ($PY)"
elif command -v python3 >/dev/null 2>&1; then
  problem "Python $(python3 -c 'import sys; print(sys.version.split()[0])') ($(command -v python3)) has no NumPy (the data and verification scripts need it)" \
          "apt-get install python3-numpy (for /usr/bin/python3), or pip install numpy"
else
  problem "python3 not found" "apt-get install python3 python3-numpy"
fi
if [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; then
  ok "GoogleTest headers (the unit tests)"
else
  warn "GoogleTest not found: the unit tests are skipped (apt-get install libgtest-dev; scripts/run_tests.sh installs it)"
fi
command -v pkg-config >/dev/null 2>&1 && ok "pkg-config $(pkg-config --version)" \
  || warn "pkg-config not found: only find_package(FlashAttention) can find an install (apt-get install pkg-config)"
if [ -n "$PY" ] && "$PY" -c "import matplotlib" 2>/dev/null; then
  ok "matplotlib $("$PY" -c 'import matplotlib; print(matplotlib.__version__)') (charts)"
else
  warn "matplotlib not found: reports are written without charts (apt-get install python3-matplotlib)"
fi

echo ""
echo "--- CPU ---"
model=$(grep -m1 "model name" /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2-) "
echo "         Model: ${model:-unknown}"
has() { case "$flags" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
line=""
for f in sse2 avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_bf16 avx512_fp16 amx_tile amx_bf16; do
  has "$f" && line="$line $f"
done
echo "         Instruction sets:${line:- (none read from /proc/cpuinfo)}"
if has amx_tile && has amx_bf16 && has avx512_fp16; then
  path=amx
elif has avx512_bf16 && has avx512f; then
  path=avx512bf16
elif has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  path=avx512
elif has avx2 && has fma && has f16c; then
  path=avx2
else
  path=generic
fi
case "$path" in
  generic) warn "no AVX2: only the generic (SSE2) kernel path runs here, about 4x slower than avx2" ;;
  *) ok "fastest kernel path this CPU offers: $path (the library picks at run time; on Intel CPUs it prefers avx512 over avx512bf16)" ;;
esac
if has amx_tile; then
  # Linux >= 5.16 hands out the AMX tile state only on request
  # (arch_prctl ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18).
  granted=unknown
  if [ -n "$PY" ] || command -v python3 >/dev/null 2>&1; then
    granted=$("${PY:-python3}" -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); print("yes" if l.syscall(158, 0x1023, 18)==0 else "no")' 2>/dev/null || echo unknown)
  fi
  case "$granted" in
    yes) ok "the kernel grants the AMX tile registers ($(uname -r))" ;;
    no) warn "the CPU has AMX but the kernel refuses its tile registers ($(uname -r)): the library runs its" \
             "avx512 path instead (Linux 5.16 or later grants them: the XTILEDATA permission)" ;;
    *) warn "could not ask the kernel for the AMX tile registers (no Python ctypes)" ;;
  esac
fi

echo ""
echo "--- Machine ---"
cores=$(nproc 2>/dev/null || echo "?")
online=$(grep -c '^processor' /proc/cpuinfo 2>/dev/null || echo "?")
echo "         Cores: $cores usable by this process ($online online)"
caches=""
for idx in /sys/devices/system/cpu/cpu0/cache/index*; do
  [ -r "$idx/size" ] || continue
  lvl=$(cat "$idx/level"); typ=$(cat "$idx/type"); size=$(cat "$idx/size")
  case "$typ" in Data) t=d ;; Instruction) t=i ;; *) t="" ;; esac
  caches="$caches L$lvl$t $size,"
done
echo "         Caches (per core or shared, as the CPU reports):${caches%,}"
mem_kb=$(awk '/^MemTotal/ {print $2}' /proc/meminfo 2>/dev/null)
avail_kb=$(awk '/^MemAvailable/ {print $2}' /proc/meminfo 2>/dev/null)
if [ -n "$mem_kb" ]; then
  echo "         Memory: $((mem_kb / 1024)) MB total, $((${avail_kb:-0} / 1024)) MB available"
  [ "${avail_kb:-0}" -ge 1048576 ] || warn "under 1 GB of memory available: the build (g++ on the kernel files) may fail"
fi
thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null | sed 's/.*\[\(.*\)\].*/\1/')
hp=$(awk '/^HugePages_Total/ {print $2}' /proc/meminfo 2>/dev/null)
echo "         Huge pages: transparent ${thp:-unknown}, ${hp:-0} reserved"
[ "$thp" = never ] && warn "transparent huge pages are off: long K/V caches pay more TLB misses (echo madvise > /sys/kernel/mm/transparent_hugepage/enabled)"

echo ""
echo "--- GPU (not needed) ---"
if command -v nvcc >/dev/null 2>&1; then
  echo "         CUDA toolkit: $(nvcc --version | tail -n1)"
else
  echo "         CUDA toolkit: not found"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "         NVIDIA driver: $(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>/dev/null | head -n1)"
else
  echo "         NVIDIA driver: not found"
fi

echo ""
echo "=========================================="
if [ $ERRORS -eq 0 ]; then
  echo "  Environment looks GOOD. Ready to build."
else
  echo "  $ERRORS issue(s) found. Please fix before proceeding."
fi
echo "=========================================="
exit $ERRORS
