# Builds fa2_test and fa2_benchmark with FA_MIXED_PRECISION_SOFTMAX=OFF for
# the amx path and runs every fp16 correctness case (features, masks, edge
# cases, the accuracy rule) through its fp16-arithmetic softmax.  Prints SKIP
# on a CPU without the amx path.
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_skip_unless_cpu_has(amx_tile "the amx path")
fa_build_variant(OPTIONS -DFA_MIXED_PRECISION_SOFTMAX=OFF -DENABLE_TESTS=ON -DFA_TARGET=amx
                 TARGETS fa2_benchmark fa2_test)
execute_process(COMMAND ${BUILD}/tests/fa2_benchmark --dtype=fp16 --seq-q=300 --num-runs=1 --no-probe --check
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 2 AND err MATCHES "not supported by this CPU|refused by the operating system")
  message("SKIP: no amx path on this machine: ${err}")
  return()
endif()
if(NOT rc EQUAL 0 OR NOT out MATCHES "fp16 softmax on AVX512-FP16.*Check: PASS")
  message(FATAL_ERROR "fp16 with the fp16 softmax failed (exit ${rc}): ${out}${err}")
endif()
execute_process(COMMAND ${BUILD}/tests/fa2_test --dtype=fp16 --isa=amx RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed")
  message(FATAL_ERROR "fa2_test with the fp16 softmax failed (exit ${rc}):\n${out}${err}")
endif()
string(REGEX MATCH "[0-9]+ passed, 0 failed" summary "${out}")
message("PASS: fp16 softmax on the amx path: ${summary}")
