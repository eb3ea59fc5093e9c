# fa_build_variant(OPTIONS <cmake -D...> TARGETS <targets> [EXPECT <regex>]):
# configures ${SOURCE} into ${BUILD} as a Release build with OPTIONS (the
# configure output must match EXPECT when given) and builds TARGETS; a
# failure stops the calling script with the output.  Shared by the CTest
# scripts that check a build variant (FA_MIXED_PRECISION_SOFTMAX=OFF,
# FA_AMX_EMULATION=ON, FA_SANITIZE_THREAD=ON).
function(fa_build_variant)
  cmake_parse_arguments(V "" "EXPECT" "OPTIONS;TARGETS" ${ARGN})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BUILD} -DCMAKE_BUILD_TYPE=Release ${V_OPTIONS}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR (V_EXPECT AND NOT out MATCHES "${V_EXPECT}"))
    message(FATAL_ERROR "configure failed or did not print '${V_EXPECT}':\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} --target ${V_TARGETS} -j 2 RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "build failed:\n${err}")
  endif()
endfunction()

# fa_skip_unless_cpu_has(<cpuinfo flag> <what needs it>): prints SKIP and
# ends the calling script when /proc/cpuinfo lacks the flag, before anything
# is built (a variant whose programs could not run here costs no build time).
# A macro, so that return() leaves the calling script.
macro(fa_skip_unless_cpu_has flag why)
  if(EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo _fa_cpu_flags REGEX "^flags" LIMIT_COUNT 1)
    if(NOT _fa_cpu_flags MATCHES " ${flag}( |$)")
      message("SKIP: ${why} needs the CPU flag ${flag}, which this CPU lacks")
      return()
    endif()
  endif()
endmacro()
