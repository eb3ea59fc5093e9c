# Builds the project with FA_AMX_EMULATION=ON (the amx path's tile
# instructions modelled in C++) and runs the amx engine's code where the CPU
# has no AMX: every fa2_test and fa3_test case on --isa=amx, the unit tests of
# the amx path (window edges, shared K/V packing, edge cases, the accuracy
# rule) for both, FA2's backward pass (bf16's products on the tile unit) on
# the same matrix and its unit tests, and FA3's pair schedule on the tile
# unit against FA2 bit for bit (bf16, and fp16 in two pieces).  Only the amx
# path is built.
# Prints SKIP on a CPU without AVX512_BF16, which the emulated path needs.
# scripts/run_tests.sh leaves this build out: its sanitizer build emulates
# the same tiles and runs these checks there (fa<N>_test.amx_emulated,
# fa2_test.backward_amx_emulated, the unit tests, versions_agree_tests).
include(${CMAKE_CURRENT_LIST_DIR}/variant_build.cmake)
fa_skip_unless_cpu_has(avx512_bf16 "the emulated amx path")
fa_build_variant(OPTIONS -DFA_AMX_EMULATION=ON -DENABLE_TESTS=ON -DFLASH_ATTENTION_VERSION=all -DFA_TARGET=amx
                 TARGETS fa2_test fa3_test fa2_property_tests fa3_property_tests fa_unit_tests fa2_benchmark fa3_benchmark
                 EXPECT "FA_AMX_EMULATION=ON")
set(cases "")
foreach(version 2 3)
  execute_process(COMMAND ${BUILD}/tests/fa${version}_test --isa=amx RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 2 AND err MATCHES "not supported by this CPU")
    message("SKIP: the emulated amx path needs AVX512_BF16: ${err}")
    return()
  endif()
  if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed")
    message(FATAL_ERROR "fa${version}_test on the emulated amx path failed (exit ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "[0-9]+ passed, 0 failed" passed "${out}")
  string(APPEND cases " fa${version}_test ${passed};")
endforeach()
execute_process(COMMAND ${BUILD}/tests/fa2_test --backward --isa=amx RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed")
  message(FATAL_ERROR "fa2_test --backward on the emulated amx path failed (exit ${rc}):\n${out}${err}")
endif()
string(REGEX MATCH "[0-9]+ passed, 0 failed" passed "${out}")
string(APPEND cases " fa2_test --backward ${passed};")
set(units 0)
foreach(binary fa2_property_tests fa3_property_tests fa_unit_tests)
  execute_process(COMMAND ${BUILD}/tests/unit/${binary} --gtest_filter=*amx*:IsaChoice.*:Backward.*:*BackwardBits.*
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "PASSED")
    message(FATAL_ERROR "${binary} on the emulated amx path failed (exit ${rc}):\n${out}${err}")
  endif()
  string(REGEX MATCH "PASSED  \\] ([0-9]+) tests" passed "${out}")
  math(EXPR units "${units} + ${CMAKE_MATCH_1}")
endforeach()
foreach(dtype bf16 fp16)
  execute_process(COMMAND ${CMAKE_COMMAND} -DFA2=${BUILD}/tests/fa2_benchmark -DFA3=${BUILD}/tests/fa3_benchmark
                          -DDIR=${BUILD}/fa3_equals_fa2_${dtype}
                          "-DARGS=--isa=amx;--dtype=${dtype};--causal;--seq-q=300;--seq-kv=333;--num-heads=4;--num-kv-heads=2;--head-dim=64;--tile-q=32;--tile-kv=64;--threads=2"
                          -P ${CMAKE_CURRENT_LIST_DIR}/fa3_equals_fa2.cmake
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT err MATCHES "Kernel: amx.*FA3 equals FA2 bit for bit")
    message(FATAL_ERROR "FA3's pair schedule on the emulated amx path (${dtype}):\n${out}${err}")
  endif()
endforeach()
message("PASS: amx engine on emulated tiles:${cases} ${units} unit tests passed; FA3 equals FA2 (bf16, fp16)")
