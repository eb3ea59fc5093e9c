# fa_host_kernel_paths(<out>): the kernel paths FA_TARGET=host builds: generic
# and each path whose instruction sets this machine's CPU and kernel enable,
# read from /proc/cpuinfo (Linux lists only what the kernel lets programs
# use, so AVX-512 on a kernel that does not save its registers is absent).
# The avx512bf16 path needs AVX512_BF16, AVX512_VNNI and AVX512_VBMI; the amx path those
# and AMX-TILE, AMX-BF16 and AVX512-FP16, or, with FA_AMX_EMULATION=ON, only
# the former (its tiles then run as plain C++).
# Without /proc/cpuinfo every path is built, as auto does.
function(fa_host_kernel_paths out)
  if(NOT EXISTS /proc/cpuinfo)
    message(STATUS "FA_TARGET=host: /proc/cpuinfo is missing, so every path is built (as auto)")
    set(${out} generic avx2 avx512 avx512bf16 amx PARENT_SCOPE)
    return()
  endif()
  file(STRINGS /proc/cpuinfo flags REGEX "^flags" LIMIT_COUNT 1)
  string(REGEX REPLACE "^flags[ \t]*:" "" flags "${flags}")
  string(REGEX REPLACE "[ \t]+" ";" flags "${flags}")
  set(paths generic)
  set(has_avx2 OFF)
  if("avx2" IN_LIST flags AND "fma" IN_LIST flags AND "f16c" IN_LIST flags)
    set(has_avx2 ON)
    list(APPEND paths avx2)
  endif()
  set(has_avx512 OFF)
  if(has_avx2 AND "avx512f" IN_LIST flags AND "avx512bw" IN_LIST flags AND "avx512vl" IN_LIST flags
     AND "avx512dq" IN_LIST flags)
    set(has_avx512 ON)
    list(APPEND paths avx512)
  endif()
  if(has_avx512 AND "avx512_vnni" IN_LIST flags AND "avx512vbmi" IN_LIST flags AND "avx512_bf16" IN_LIST flags)
    list(APPEND paths avx512bf16)
    if(FA_AMX_EMULATION OR ("amx_tile" IN_LIST flags AND "amx_bf16" IN_LIST flags AND "avx512_fp16" IN_LIST flags))
      list(APPEND paths amx)
    endif()
  endif()
  set(${out} ${paths} PARENT_SCOPE)
endfunction()
