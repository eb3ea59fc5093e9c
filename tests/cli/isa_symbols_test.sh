#!/bin/sh
# Portability guard: an object compiled with AVX2, AVX-512 (with or without
# AVX512-BF16) or AMX flags must not define any shared (weak/COMDAT) symbol
# outside its own fa::isa_<path> namespace, or the linker could pick that
# copy for baseline code and the library would crash on CPUs without the
# instruction set.
# usage: isa_symbols_test.sh OBJECT...
status=0
checked=0
for obj in "$@"; do
  case "$obj" in
    */kernels/avx2/*) ns=isa_avx2 ;;
    */kernels/avx512/*) ns=isa_avx512 ;;
    */kernels/avx512bf16/*) ns=isa_avx512bf16 ;;
    */kernels/amx/*) ns=isa_amx ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  bad=$(nm -C "$obj" | awk '$2 == "W" || $2 == "V" || $2 == "u"' | grep -v "$ns" || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $obj shares symbols outside fa::$ns:"
    echo "$bad"
    status=1
  fi
done
if [ "$checked" = 0 ]; then
  echo "no AVX2/AVX-512 objects in this build (FA_TARGET); nothing to check"
  exit 77
fi
[ $status = 0 ] && echo "PASS: $checked ISA-specific objects share no symbols"
exit $status
