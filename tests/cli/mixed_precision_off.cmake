# Builds fa2_benchmark with FA_MIXED_PRECISION_SOFTMAX=OFF for the generic
# path only and checks that an fp16 call is refused there (exit 2, the
# message: that path has no AVX512-FP16) while a bf16 call runs.
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_build_variant(OPTIONS -DFA_MIXED_PRECISION_SOFTMAX=OFF -DENABLE_TESTS=OFF -DFA_TARGET=generic TARGETS fa2_benchmark
                 EXPECT "FA_MIXED_PRECISION_SOFTMAX=OFF: fp16 calls run an fp16-arithmetic softmax on the amx path")
execute_process(COMMAND ${BUILD}/tests/fa2_benchmark --dtype=fp16 --seq-q=64 --num-runs=1 --no-probe
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "FA_MIXED_PRECISION_SOFTMAX=OFF: the fp16 softmax needs a kernel path with AVX512-FP16")
  message(FATAL_ERROR "fp16 was not refused (exit ${rc}): ${out}${err}")
endif()
execute_process(COMMAND ${BUILD}/tests/fa2_benchmark --dtype=bf16 --seq-q=64 --num-runs=1 --no-probe --check
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "Check: PASS")
  message(FATAL_ERROR "bf16 did not run (exit ${rc}): ${out}${err}")
endif()
message("PASS: fp16 refused, bf16 ran")
