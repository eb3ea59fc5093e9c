# Builds fa2_test and fa3_test with FA_ENABLE_ASYNC=ON (every kernel path)
# and runs their whole correctness matrices on every path this CPU runs: the
# next K/V tile's prefetch (streamed from inside the tile loops' products,
# issued at once on the row path) must not change a result.
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_build_variant(OPTIONS -DFA_ENABLE_ASYNC=ON -DENABLE_TESTS=ON -DFLASH_ATTENTION_VERSION=all TARGETS fa2_test fa3_test
                 EXPECT "FA Async Prefetch: ON")
set(summary "")
foreach(version 2 3)
  execute_process(COMMAND ${BUILD}/tests/fa${version}_test RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed")
    message(FATAL_ERROR "fa${version}_test with FA_ENABLE_ASYNC=ON failed (exit ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "[0-9]+ passed, 0 failed" cases "${out}")
  string(APPEND summary " fa${version}_test ${cases};")
endforeach()
message("PASS: FA_ENABLE_ASYNC=ON:${summary}")
