# FA3's pair schedule reorders two Q tiles' steps but keeps each tile's
# operations and their order FA2's, so at the same tiles FA3's output must
# equal FA2's bit for bit, on whatever path this CPU runs (the bf16 pair
# engines where it has them, the FMA loop elsewhere).  Run as
#   cmake -DFA2=<fa2_benchmark> -DFA3=<fa3_benchmark> -DDIR=<scratch> -DARGS=<flags;...> -P fa3_equals_fa2.cmake
file(MAKE_DIRECTORY ${DIR})
foreach(version 2 3)
  execute_process(COMMAND ${FA${version}} ${ARGS} --num-runs=1 --warmup-runs=0 --no-probe --output=${DIR}/o${version}.bin
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fa${version}_benchmark failed (${rc}):\n${out}\n${err}")
  endif()
  string(REGEX MATCH "Kernel: [^\n]*" kernel "${out}")
  message("fa${version}: ${kernel}")
endforeach()
file(SIZE ${DIR}/o2.bin size)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/o2.bin ${DIR}/o3.bin RESULT_VARIABLE differ)
if(NOT size GREATER 0 OR differ)
  message(FATAL_ERROR "FA3's output differs from FA2's at the same tiles (${size} bytes each)")
endif()
message("FA3 equals FA2 bit for bit (${size} bytes)")
