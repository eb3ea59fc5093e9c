#!/usr/bin/env bash
# The guide's post-build check (its code block 6) for an installed CPU build:
#   1. each version's library is there (and its size)
#   2. its fa<N>_benchmark and fa<N>_test are there and executable
#   3. ldd resolves every dependency of the libraries and binaries
#   4. the libraries export the public API only (namespace fa, each name
#      declared in the installed headers)
#   5. the CMake package and pkg-config files are installed
#   6. each benchmark runs a small call and passes its reference check
#      (read from its --json output), naming the kernel path it chose
# and, where the guide checks for /dev/davinci0, the CPU's instruction sets.
#
# usage: scripts/post_build_check.sh [INSTALL_DIR] [--versions LIST]
#   INSTALL_DIR  the install tree (./install)
#   --versions   the versions to check, e.g. 2 or 1,2,3 (default: every
#                libflash_attention_fa<N>.so found in INSTALL_DIR/lib)
# Exit status: the number of failed checks (0: all passed; the last line
# says how many); bad arguments: one line on stderr, exit 2, nothing checked.
set -uo pipefail

usage_error() { echo "post_build_check.sh: $*" >&2; exit 2; }
INSTALL_DIR="" VERSIONS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --versions) [ $# -ge 2 ] || usage_error "--versions needs a list"; VERSIONS=$2; shift 2 ;;
    --versions=*) VERSIONS=${1#*=}; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) usage_error "unknown option '$1' (expected --versions or --help)" ;;
    *) [ -z "$INSTALL_DIR" ] || usage_error "unexpected argument '$1' (one INSTALL_DIR only)"; INSTALL_DIR=$1; shift ;;
  esac
done
INSTALL_DIR=${INSTALL_DIR:-./install}
[ -d "$INSTALL_DIR" ] || usage_error "INSTALL_DIR '$INSTALL_DIR' is not a directory"
VERSIONS=${VERSIONS//,/ }
for v in $VERSIONS; do
  case "$v" in 1|2|3) ;; *) usage_error "--versions: '$v' is not a version (expected 1, 2 or 3)" ;; esac
done
if [ -z "$VERSIONS" ]; then
  for v in 1 2 3; do [ -e "$INSTALL_DIR/lib/libflash_attention_fa$v.so" ] && VERSIONS="$VERSIONS $v"; done
fi
PYTHON=$(command -v python3 || true)

echo "=========================================="
echo "  Post-Build Checks"
echo "  Install Dir: $INSTALL_DIR"
echo "=========================================="

ERRORS=0
pass() { echo "[PASS] $*"; }
fail() { echo "[FAIL] $*"; ERRORS=$((ERRORS + 1)); }

if [ -z "${VERSIONS// /}" ]; then
  fail "no libflash_attention_fa<N>.so in $INSTALL_DIR/lib (build and install one: scripts/build_flash_attention.sh)"
fi

# 1. libraries
for v in $VERSIONS; do
  lib=$INSTALL_DIR/lib/libflash_attention_fa$v.so
  if [ -f "$lib" ]; then
    pass "FA$v library found: $lib"
    echo "       Size: $(stat -L -c%s "$lib") bytes"
  else
    fail "FA$v library NOT found: $lib"
  fi
done

# 2. binaries
for v in $VERSIONS; do
  for tool in benchmark test; do
    bin=$INSTALL_DIR/bin/fa${v}_$tool
    if [ ! -f "$bin" ]; then
      fail "FA$v $tool NOT found: $bin"
    elif [ ! -x "$bin" ]; then
      fail "FA$v $tool found but NOT executable: $bin (chmod +x)"
    else
      pass "FA$v $tool found and executable: $bin"
    fi
  done
done

# 3. dependencies
echo ""
echo "Checking library dependencies..."
for v in $VERSIONS; do
  for f in "$INSTALL_DIR/lib/libflash_attention_fa$v.so" "$INSTALL_DIR/bin/fa${v}_benchmark" "$INSTALL_DIR/bin/fa${v}_test"; do
    [ -f "$f" ] || continue
    if ! out=$(ldd "$f" 2>&1); then
      fail "ldd cannot read $f: $(echo "$out" | head -n1)"
    elif missing=$(echo "$out" | grep "not found"); then
      fail "$f: unresolved dependencies: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
    else
      pass "$(basename "$f"): all $(echo "$out" | grep -c '=>') dependencies resolved"
    fi
  done
done

# 4. exported symbols: the public API only
echo ""
echo "Checking exported symbols..."
headers=("$INSTALL_DIR"/include/flash_attention/*.h)
[ -e "${headers[0]}" ] || headers=()
for v in $VERSIONS; do
  lib=$INSTALL_DIR/lib/libflash_attention_fa$v.so
  [ -f "$lib" ] || continue
  if [ ${#headers[@]} -eq 0 ]; then
    fail "no headers in $INSTALL_DIR/include/flash_attention: cannot check FA$v's exports"
    continue
  fi
  symbols=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-)
  bad=""
  count=0
  while IFS= read -r sym; do
    [ -n "$sym" ] || continue
    count=$((count + 1))
    name=${sym%%(*}        # fa::ns::name, without the parameters
    name=${name%%\[abi:*}  # and without an ABI tag ([abi:cxx11])
    case "$name" in
      fa::*) short=${name##*::}
             grep -qw -- "$short" "${headers[@]}" || bad="$bad
       $sym (not declared in the installed headers)" ;;
      *) bad="$bad
       $sym (outside namespace fa)" ;;
    esac
  done <<< "$symbols"
  if [ -n "$bad" ]; then
    fail "FA$v exports symbols beyond the public API:$bad"
  elif [ "$count" = 0 ]; then
    fail "FA$v exports no symbols at all"
  else
    pass "FA$v exports $count symbols, all public API (namespace fa, declared in the headers)"
  fi
done

# 5. the files other projects build against
echo ""
echo "Checking the CMake package and pkg-config files..."
cfg=$INSTALL_DIR/lib/cmake/FlashAttention/FlashAttentionConfig.cmake
[ -f "$cfg" ] && pass "CMake package: $cfg" || fail "CMake package NOT found: $cfg"
for v in $VERSIONS; do
  t=$INSTALL_DIR/lib/cmake/FlashAttention/FlashAttentionFa${v}Targets.cmake
  [ -f "$t" ] && pass "FA$v CMake targets: FlashAttention::fa$v" || fail "FA$v CMake targets NOT found: $t"
  pc=$INSTALL_DIR/lib/pkgconfig/flash_attention_fa$v.pc
  [ -f "$pc" ] && pass "FA$v pkg-config file: $pc" || fail "FA$v pkg-config file NOT found: $pc"
done

# 6. a small run of each benchmark, checked against the float64 reference
echo ""
echo "Running each benchmark once (B=1 S=64 H=2 D=64 fp32, --check)..."
kernels=""
for v in $VERSIONS; do
  bin=$INSTALL_DIR/bin/fa${v}_benchmark
  [ -x "$bin" ] || continue
  if ! json=$("$bin" --batch-size=1 --seq-q=64 --num-heads=2 --head-dim=64 --dtype=fp32 --num-runs=1 \
                     --warmup-runs=0 --no-probe --check --json --output=/dev/null 2>&1); then
    fail "fa${v}_benchmark failed: $(echo "$json" | tail -n1)"
    continue
  fi
  if [ -z "$PYTHON" ]; then
    echo "$json" | grep -Eq '"check": ?"PASS"' && pass "fa${v}_benchmark ran and passed its check" \
      || fail "fa${v}_benchmark: check did not pass: $json"
    continue
  fi
  fields=$(echo "$json" | "$PYTHON" -c 'import json,sys; r=json.load(sys.stdin); print(r.get("check",""), r.get("kernel",""), r.get("max_abs_error",""))' 2>&1)
  read -r check kernel err <<< "$fields"
  if [ "$check" = PASS ]; then
    pass "fa${v}_benchmark ran on the $kernel path and passed its reference check (max abs error $err)"
    kernels=$kernel
  else
    fail "fa${v}_benchmark: reference check '$check' ($fields)"
  fi
done

# Where the guide looks for /dev/davinci0: the CPU and what it offers.
echo ""
echo "Checking the CPU..."
model=$(grep -m1 "model name" /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2-) "
echo "       CPU: ${model:-unknown}, $(nproc 2>/dev/null || echo '?') cores available"
have=""
for f in avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_bf16 avx512_fp16 amx_tile amx_bf16; do
  case "$flags" in *" $f "*) have="$have $f" ;; esac
done
echo "       Instruction sets:${have:- none beyond SSE2}"
case "$flags" in
  *" avx2 "*) [ -n "$kernels" ] && pass "CPU: the library runs its $kernels path here" || pass "CPU: AVX2 or better present" ;;
  *) echo "[WARN] no AVX2: only the generic (SSE2) path runs here, about 4x slower than AVX2" ;;
esac

echo ""
echo "=========================================="
if [ $ERRORS -eq 0 ]; then
  echo "  All checks PASSED"
else
  echo "  $ERRORS check(s) FAILED"
fi
echo "=========================================="
exit $ERRORS
