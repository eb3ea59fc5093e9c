# Every build option of the guide, under its exact name, checked once here.
# A value that cannot work fails the configure step with the option's name and
# its valid values; an option whose feature is not built yet says so.

option(ENABLE_FLASH_ATTENTION "Build the FlashAttention operator" ON)
# The other operators of the repository, each its own module (a library, a
# benchmark and a test program).  Their programs share the attention
# drivers' parser and reports, so they are built with ENABLE_FLASH_ATTENTION.
option(ENABLE_LAYER_NORM "Build the LayerNorm / RMSNorm operators (layer_norm/)" ON)
option(ENABLE_ROPE "Build the rotary position embedding operator (rope/)" ON)
option(ENABLE_GLU "Build the gated linear units: SwiGLU, GeGLU, ReGLU (glu/)" ON)
set(FLASH_ATTENTION_VERSION "2" CACHE STRING "FlashAttention version to build: 1, 2, 3 or all")
set(FA_TILE_Q "auto" CACHE STRING "Default Q tile (rows): auto, or a power of two from 16 to 512")
set(FA_TILE_KV "auto" CACHE STRING "Default K/V tile (rows): auto, or a power of two from 16 to 512")
option(FA_ENABLE_ASYNC "Prefetch the next K/V tile while computing the current one" OFF)
option(FA_SPLIT_ENABLE "Split the K/V sequence into chunks computed in parallel" OFF)
set(FA_SPLIT_THRESHOLD "128" CACHE STRING "Smallest K/V chunk (keys) when FA_SPLIT_ENABLE=ON")
option(FA_MIXED_PRECISION_SOFTMAX "Softmax and accumulation in fp32 for fp16/bf16 inputs" ON)
set(FA_TARGET "auto" CACHE STRING "CPU kernel paths to build: auto (all, chosen at run time), host (generic and those this CPU runs), generic, avx2, avx512, avx512bf16, amx")
# Not a guide option: a testing aid for the amx path on machines without AMX.
option(FA_AMX_EMULATION "Run the amx path's tile instructions as plain C++ (tests only: slow, chosen automatically only when no other path is built)" OFF)
option(ENABLE_BENCHMARK "Build the <version>_benchmark programs" ON)
option(ENABLE_TESTS "Build the <version>_test programs and the CTest suite" ON)

function(fa_fail option value expected)
  message(FATAL_ERROR "${option}=${value} is not valid: expected ${expected}")
endfunction()

# The guide's Ascend settings: say plainly that they do not apply here.
if(DEFINED ASCEND_HOME OR DEFINED ASCEND_NPU_TYPE OR DEFINED ENV{ASCEND_NPU_TYPE})
  message(STATUS "Ascend NPUs are not a target of this implementation; CPU targets are chosen "
                 "automatically at run time, or restricted with FA_TARGET (ASCEND_HOME / ASCEND_NPU_TYPE ignored)")
endif()

if(FLASH_ATTENTION_VERSION STREQUAL "all")
  set(FA_VERSIONS 1 2 3)
elseif(FLASH_ATTENTION_VERSION MATCHES "^[123]$")
  set(FA_VERSIONS ${FLASH_ATTENTION_VERSION})
else()
  fa_fail(FLASH_ATTENTION_VERSION "${FLASH_ATTENTION_VERSION}" "1, 2, 3 or all")
endif()

set(FA_VALID_TILES 16 32 64 128 256 512)
foreach(tile_option FA_TILE_Q FA_TILE_KV)
  set(value "${${tile_option}}")
  if(value STREQUAL "auto")
    set(${tile_option}_VALUE -1)
  elseif(value IN_LIST FA_VALID_TILES)
    set(${tile_option}_VALUE ${value})
  else()
    fa_fail(${tile_option} "${value}" "auto or a power of two from 16 to 512 (16, 32, 64, 128, 256, 512)")
  endif()
endforeach()
if(NOT FA_SPLIT_THRESHOLD MATCHES "^[1-9][0-9]*$")
  fa_fail(FA_SPLIT_THRESHOLD "${FA_SPLIT_THRESHOLD}" "a positive number of keys")
endif()

# FA_TARGET plays the guide's ASCEND_NPU_TYPE: which instruction sets the
# kernels are compiled for.  auto builds every path and picks at run time.
# host builds the generic path and every path the configuring CPU can run
# (still chosen at run time, so the binaries run on any x86-64 CPU, at the
# generic path's speed where this CPU's paths are missing): the build for one
# machine, and the sanitizer builds of the test suite, which cannot execute
# the other paths anyway.
set(FA_VALID_TARGETS auto host generic avx2 avx512 avx512bf16 amx)
if(NOT FA_TARGET IN_LIST FA_VALID_TARGETS)
  fa_fail(FA_TARGET "${FA_TARGET}" "auto, host, generic, avx2, avx512, avx512bf16 or amx")
endif()
if(FA_TARGET STREQUAL "auto")
  set(FA_KERNEL_PATHS generic avx2 avx512 avx512bf16 amx)
elseif(FA_TARGET STREQUAL "host")
  include(HostKernelPaths)
  fa_host_kernel_paths(FA_KERNEL_PATHS)
else()
  set(FA_KERNEL_PATHS ${FA_TARGET})
endif()

# Compile flags of each kernel path's translation units (and nothing else).
set(FA_ISA_FLAGS_generic "")
set(FA_ISA_FLAGS_avx2 -mavx2 -mfma -mf16c)
# GCC 12 warns falsely about _mm512_undefined_* (its `__Y = __Y` idiom) inside
# its own intrinsics headers once they are inlined into loops such as the
# stage timer's (fa2/fa2_stage_timer.h).
set(FA_ISA_FLAGS_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -Wno-maybe-uninitialized -Wno-uninitialized)
# The avx512bf16 path: the AVX-512 loop plus AVX512_BF16 (VDPBF16PS products
# for bf16, fp32 -> bf16 pairs), AVX512_VNNI (VPDPWSSD products for an int8
# cache; every CPU with AVX512_BF16 has it) and AVX512_VBMI (an FP8 cache
# widened to bf16 by VPERMI2B byte tables; all such CPUs but Cooper Lake).
set(FA_ISA_FLAGS_avx512bf16 ${FA_ISA_FLAGS_avx512} -mavx512vnni -mavx512vbmi -mavx512bf16)
# The AMX path: the AVX-512 loop plus AVX512_BF16 (fp32 -> bf16 pairs) and
# AVX512_VNNI and AVX512_VBMI as above, the tile unit (AMX-INT8 for an int8
# cache's Q·Kᵀ), and AVX512-FP16 (the fp16 softmax of FA_MIXED_PRECISION_SOFTMAX=OFF);
# every CPU with AMX has both.
set(FA_ISA_FLAGS_amx ${FA_ISA_FLAGS_avx512} -mavx512vnni -mavx512vbmi -mavx512bf16 -mavx512fp16 -mamx-tile -mamx-bf16
    -mamx-int8)
# FA_AMX_EMULATION=ON: the same path on any CPU with AVX512_BF16, its tile
# instructions modelled in C++ (kernels/amx_tile_emulation.h), so the amx
# engine's code is tested where no AMX machine is at hand.
if(FA_AMX_EMULATION)
  set(FA_ISA_FLAGS_amx ${FA_ISA_FLAGS_avx512} -mavx512vnni -mavx512vbmi -mavx512bf16)
  message(STATUS "FA_AMX_EMULATION=ON: the amx path's tile instructions run as plain C++ on any CPU with "
                 "AVX512_BF16 (for tests: slow; --isa=amx / FA_ISA=amx, or a build of that path alone)")
endif()

if(FA_SPLIT_ENABLE)
  message(STATUS "FA Split-KV: ON (calls split the keys when threads would idle; chunks >= ${FA_SPLIT_THRESHOLD} keys)")
else()
  message(STATUS "FA Split-KV: OFF (calls split only when asked: num_splits / --num-splits)")
endif()
if(NOT FA_MIXED_PRECISION_SOFTMAX)
  message(STATUS "FA_MIXED_PRECISION_SOFTMAX=OFF: fp16 calls run an fp16-arithmetic softmax on the amx path "
                 "(AVX512-FP16) and are refused on the other paths; bf16 and fp32 keep the fp32 softmax")
endif()

# The guide's first trap, caught at configure time: tiles whose working set
# exceeds the target's per-core L2 budget (at head_dim 128, the largest of the
# guide's shapes).  The planner's own arithmetic decides (cmake/planner_check.cpp).
if(NOT FA_TILE_Q STREQUAL "auto" OR NOT FA_TILE_KV STREQUAL "auto")
  set(check_q ${FA_TILE_Q})
  set(check_kv ${FA_TILE_KV})
  if(check_q STREQUAL "auto")
    set(check_q 16)
  endif()
  if(check_kv STREQUAL "auto")
    set(check_kv 16)
  endif()
  if(FA_TARGET STREQUAL "auto" OR FA_TARGET STREQUAL "host")
    set(check_target avx512)  # the budget of the paths auto builds (the same for avx2)
  else()
    set(check_target ${FA_TARGET})
  endif()
  set(check_states 1)  # Q tiles' state per thread: FA3 keeps two
  if("3" IN_LIST FA_VERSIONS)
    set(check_states 2)
  endif()
  try_run(FA_PLAN_RUN FA_PLAN_COMPILED
          ${CMAKE_BINARY_DIR}/planner_check ${CMAKE_CURRENT_LIST_DIR}/planner_check.cpp
          CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${PROJECT_SOURCE_DIR}/flash_attention/common"
          CXX_STANDARD 20
          COMPILE_OUTPUT_VARIABLE plan_compile
          RUN_OUTPUT_VARIABLE plan_output
          ARGS ${check_target} ${check_q} ${check_kv} 128 ${check_states})
  if(NOT FA_PLAN_COMPILED)
    message(FATAL_ERROR "could not build the configure-time tile check:\n${plan_compile}")
  endif()
  string(STRIP "${plan_output}" plan_output)
  if(NOT FA_PLAN_RUN EQUAL 0)
    message(FATAL_ERROR "${plan_output}")
  endif()
  message(STATUS "FA Tile Plan: ${plan_output}")
endif()

message(STATUS "FlashAttention Version: ${FLASH_ATTENTION_VERSION} (building: ${FA_VERSIONS})")
message(STATUS "FA Tile Config: Q=${FA_TILE_Q}, KV=${FA_TILE_KV}")
if("1" IN_LIST FA_VERSIONS AND (NOT FA_TILE_Q STREQUAL "auto" OR NOT FA_TILE_KV STREQUAL "auto"))
  message(STATUS "FA1 runs its fixed 64x64 tiles: FA_TILE_Q and FA_TILE_KV apply to FA2 and FA3")
endif()
message(STATUS "FA Async Prefetch: ${FA_ENABLE_ASYNC}")
message(STATUS "FA Target: ${FA_TARGET} (kernel paths: ${FA_KERNEL_PATHS})")
