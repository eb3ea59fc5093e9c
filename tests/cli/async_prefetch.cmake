# Builds fa2_test with FA_ENABLE_ASYNC=ON (every kernel path) and runs its
# whole correctness matrix on every path this CPU runs: the next K/V tile's
# prefetch (streamed from inside the tile loop's products, issued at once on
# the row path) must not change a result.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BUILD} -DCMAKE_BUILD_TYPE=Release
                        -DFA_ENABLE_ASYNC=ON -DENABLE_TESTS=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "FA Async Prefetch: ON")
  message(FATAL_ERROR "configure failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} --target fa2_test -j 2 RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "build failed:\n${err}")
endif()
execute_process(COMMAND ${BUILD}/tests/fa2_test RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed")
  message(FATAL_ERROR "fa2_test with FA_ENABLE_ASYNC=ON failed (exit ${rc}):\n${out}${err}")
endif()
string(REGEX MATCH "[0-9]+ passed, 0 failed" summary "${out}")
message("PASS: FA_ENABLE_ASYNC=ON: ${summary}")
