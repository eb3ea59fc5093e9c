# The libFuzzer harnesses (tests/fuzz/) for CTest, in two steps:
#   -DSTEP=build : configures and builds them with clang (CC=clang
#                  CXX=clang++, FA_FUZZ=ON, the generic path, FA2) into BUILD;
#                  prints SKIP when clang or its libFuzzer runtime is missing.
#   -DSTEP=run -DHARNESS=name -DSECONDS=n : runs one harness for n seconds on
#                  a copy of its seed corpus (the repository is not written);
#                  any crash, leak, timeout or sanitizer report fails.
if(STEP STREQUAL "build")
  find_program(CLANGXX clang++)
  find_program(CLANG clang)
  if(NOT CLANGXX OR NOT CLANG)
    message("SKIP: clang is not installed (apt-get install clang libclang-rt-14-dev)")
    return()
  endif()
  execute_process(COMMAND ${CLANGXX} -print-file-name=libclang_rt.fuzzer-x86_64.a OUTPUT_VARIABLE runtime
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${runtime}" OR NOT EXISTS "${runtime}")
    message("SKIP: clang's libFuzzer runtime is not installed (apt-get install libclang-rt-14-dev)")
    return()
  endif()
  set(ENV{CC} ${CLANG})
  set(ENV{CXX} ${CLANGXX})
  include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
  fa_build_variant(OPTIONS -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFA_FUZZ=ON -DFA_TARGET=generic -DFLASH_ATTENTION_VERSION=2
                           -DENABLE_TESTS=OFF -DENABLE_BENCHMARK=OFF
                   TARGETS fuzz_benchmark_args fuzz_test_args fuzz_api fuzz_config)
  message("PASS: fuzz harnesses built")
elseif(STEP STREQUAL "run")
  if(NOT EXISTS ${BUILD}/fuzz/${HARNESS})
    message("SKIP: ${HARNESS} was not built (see configure.fuzz_build)")
    return()
  endif()
  set(corpus ${BUILD}/corpus_${HARNESS})
  file(REMOVE_RECURSE ${corpus})
  file(COPY ${SOURCE}/tests/fuzz/corpus/${HARNESS}/ DESTINATION ${corpus})
  execute_process(COMMAND ${BUILD}/fuzz/${HARNESS} -max_total_time=${SECONDS} -timeout=20 -rss_limit_mb=2048
                          -artifact_prefix=${BUILD}/${HARNESS}- ${corpus}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${HARNESS} found a failure (exit ${rc}); its input is saved beside ${BUILD}/${HARNESS}-*:\n${err}")
  endif()
  string(REGEX MATCH "Done [0-9]+ runs in [0-9]+ second" done "${err}")
  message("PASS: ${HARNESS}: ${done}s, no failure")
else()
  message(FATAL_ERROR "fuzz.cmake: STEP must be build or run")
endif()
