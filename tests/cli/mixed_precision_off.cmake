# Builds fa2_benchmark with FA_MIXED_PRECISION_SOFTMAX=OFF for the generic
# path only and checks that an fp16 call is refused there (exit 2, the
# message: that path has no AVX512-FP16) while a bf16 call runs.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BUILD} -DCMAKE_BUILD_TYPE=Release
                        -DFA_MIXED_PRECISION_SOFTMAX=OFF -DENABLE_TESTS=OFF -DFA_TARGET=generic
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "FA_MIXED_PRECISION_SOFTMAX=OFF: fp16 calls run an fp16-arithmetic softmax on the amx path")
  message(FATAL_ERROR "configure failed or said nothing about OFF:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} --target fa2_benchmark -j 2 RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "build failed:\n${err}")
endif()
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
