# Builds the project with FA_AMX_EMULATION=ON (the amx path's tile
# instructions modelled in C++) and runs the amx engine's code where the CPU
# has no AMX: every fa2_test case on --isa=amx, and the unit tests of the amx
# path (window edges, shared K/V packing, edge cases, the accuracy rule).
# Prints SKIP on a CPU without AVX512_BF16, which the emulated path needs.
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_skip_unless_cpu_has(avx512_bf16 "the emulated amx path")
fa_build_variant(OPTIONS -DFA_AMX_EMULATION=ON -DENABLE_TESTS=ON TARGETS fa2_test fa2_property_tests fa_unit_tests
                 EXPECT "FA_AMX_EMULATION=ON")
execute_process(COMMAND ${BUILD}/tests/fa2_test --isa=amx RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 2 AND err MATCHES "not supported by this CPU")
  message("SKIP: the emulated amx path needs AVX512_BF16: ${err}")
  return()
endif()
if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed")
  message(FATAL_ERROR "fa2_test on the emulated amx path failed (exit ${rc}):\n${out}${err}")
endif()
string(REGEX MATCH "[0-9]+ passed, 0 failed" cases "${out}")
set(units 0)
foreach(binary fa2_property_tests fa_unit_tests)
  execute_process(COMMAND ${BUILD}/tests/unit/${binary} --gtest_filter=*amx*:IsaChoice.*
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "PASSED")
    message(FATAL_ERROR "${binary} on the emulated amx path failed (exit ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "PASSED  \\] ([0-9]+) tests" passed "${out}")
  math(EXPR units "${units} + ${CMAKE_MATCH_1}")
endforeach()
message("PASS: amx engine on emulated tiles: fa2_test ${cases}; ${units} unit tests passed")
