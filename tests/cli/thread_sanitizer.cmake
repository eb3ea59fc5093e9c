# Builds FA3 with ThreadSanitizer (FA_SANITIZE_THREAD=ON) and runs what
# shares memory between threads: the thread pool handing out items, the
# per-thread scratch, the split-KV partials and their combine, the workspace
# cache, on 2 to 8 threads: the quick correctness matrix (one path), and the
# property tests that require the same result on any thread count and split.
# Any report fails the test (halt_on_error); no suppressions.
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_build_variant(OPTIONS -DFA_SANITIZE_THREAD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASH_ATTENTION_VERSION=3
                         -DENABLE_TESTS=ON -DENABLE_BENCHMARK=OFF
                 TARGETS fa3_test fa3_property_tests)
set(ENV{TSAN_OPTIONS} "halt_on_error=1 second_deadlock_stack=1")
execute_process(COMMAND ${BUILD}/tests/fa3_test --quick --dtype=bf16 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed" OR err MATCHES "ThreadSanitizer")
  message(FATAL_ERROR "fa3_test under ThreadSanitizer failed (exit ${rc}):\n${out}${err}")
endif()
string(REGEX MATCH "[0-9]+ passed, 0 failed" cases "${out}")
execute_process(COMMAND ${BUILD}/tests/unit/fa3_property_tests
                        --gtest_filter=*ResultDoesNotDependOnThreadCount*:*SplitMatchesUnsplit*:*Dropout*:*SharedKvPacking*
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "PASSED" OR err MATCHES "ThreadSanitizer")
  message(FATAL_ERROR "fa3 property tests under ThreadSanitizer failed (exit ${rc}):\n${out}${err}")
endif()
string(REGEX MATCH "PASSED  \\] ([0-9]+) tests" passed "${out}")
message("PASS: ThreadSanitizer clean: fa3_test --quick ${cases}; ${CMAKE_MATCH_1} property tests")
