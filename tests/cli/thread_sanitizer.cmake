# Builds FA2 with ThreadSanitizer (FA_SANITIZE_THREAD=ON) and runs what
# shares memory between threads: the thread pool (its CPU set too), the
# workspace cache, the per-thread scratch, the split-KV partials and their
# combine, the packed-K/V slots where a pair path runs: the pool and API unit
# tests, fa2_test's fp32 matrix on one path (1 to 64 threads, splits) and its
# quick bf16 matrix, and the property tests that require the same result on
# any thread count and split.  (The versions share all of that code; each
# version's own loop runs inside one thread.)  Any report fails the test
# (halt_on_error); no suppressions.
# One kernel path, built alone (FA_TARGET): the threads, splits and combine
# the tests exercise are shared by every path, TSan slows each case about
# tenfold, and building the other paths under TSan would cost minutes.
set(isa generic)
if(EXISTS /proc/cpuinfo)
  file(STRINGS /proc/cpuinfo flags REGEX "^flags" LIMIT_COUNT 1)
  if(flags MATCHES " avx2 " AND flags MATCHES " fma " AND flags MATCHES " f16c ")
    set(isa avx2)
  endif()
endif()
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_build_variant(OPTIONS -DFA_SANITIZE_THREAD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASH_ATTENTION_VERSION=2
                         -DENABLE_TESTS=ON -DENABLE_BENCHMARK=OFF -DFA_TARGET=${isa}
                 TARGETS fa2_test fa_unit_tests fa2_property_tests)
set(ENV{TSAN_OPTIONS} "halt_on_error=1 second_deadlock_stack=1")
set(summary "")
foreach(run "fa2_test --dtype=fp32 --isa=${isa}" "fa2_test --quick --dtype=bf16")
  separate_arguments(command UNIX_COMMAND "${run}")
  list(POP_FRONT command binary)
  execute_process(COMMAND ${BUILD}/tests/${binary} ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed" OR err MATCHES "ThreadSanitizer")
    message(FATAL_ERROR "${run} under ThreadSanitizer failed (exit ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "[0-9]+ passed, 0 failed" cases "${out}")
  string(APPEND summary " ${run}: ${cases};")
endforeach()
foreach(run "unit/fa_unit_tests --gtest_filter=ThreadPool*:CpuSet*:ApiValidation*"
            "unit/fa2_property_tests --gtest_filter=*ResultDoesNotDependOnThreadCount*:*SplitMatchesUnsplit*:*Dropout*:*SharedKvPacking*")
  separate_arguments(command UNIX_COMMAND "${run}")
  list(POP_FRONT command binary)
  execute_process(COMMAND ${BUILD}/tests/${binary} ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "PASSED" OR err MATCHES "ThreadSanitizer")
    message(FATAL_ERROR "${binary} under ThreadSanitizer failed (exit ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "PASSED  \\] ([0-9]+) tests" passed "${out}")
  string(APPEND summary " ${binary} ${CMAKE_MATCH_1} tests;")
endforeach()
message("PASS: ThreadSanitizer clean:${summary}")
