# fa2_benchmark --backward end to end: the guide's shape with GQA, causal,
# bf16; the Backward lines and the gradients' check; dQ, dK, dV and the LSE
# written at their sizes; and dO read from a file, with 1 and 2 threads
# giving the same gradient files byte for byte.  Run as
#   cmake -DBENCH=<fa2_benchmark> -DDIR=<scratch> -P backward_files.cmake
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
set(shape --dtype=bf16 --causal --num-kv-heads=4 --num-runs=2 --warmup-runs=1 --no-probe)
function(run_bench tag)
  execute_process(COMMAND ${BENCH} ${shape} --backward ${ARGN} --output-dq=${DIR}/dq_${tag}.bin
                          --output-dk=${DIR}/dk_${tag}.bin --output-dv=${DIR}/dv_${tag}.bin
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fa2_benchmark --backward ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run_bench(first --check --output-lse=${DIR}/lse.bin)
message("${out}")
if(NOT out MATCHES "Backward Latency: [0-9.]+ ms.*Backward Throughput: [0-9.]+ TFLOPS.*Backward Check: PASS.*Check: PASS")
  message(FATAL_ERROR "missing or failing Backward lines")
endif()
# B=2 S=512 H=12 (4 K/V heads) D=64, bf16; the LSE fp32.
foreach(pair "dq_first.bin;1572864" "dk_first.bin;524288" "dv_first.bin;524288" "lse.bin;49152")
  list(GET pair 0 name)
  list(GET pair 1 want)
  file(SIZE ${DIR}/${name} size)
  if(NOT size EQUAL want)
    message(FATAL_ERROR "${name}: ${size} bytes, expected ${want}")
  endif()
endforeach()
# dO from a file (the first run's dQ has dO's shape and dtype).
run_bench(one --input-do=${DIR}/dq_first.bin --threads=1)
run_bench(two --input-do=${DIR}/dq_first.bin --threads=2)
foreach(g dq dk dv)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/${g}_one.bin ${DIR}/${g}_two.bin RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "${g} differs between 1 and 2 threads")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/dq_first.bin ${DIR}/dq_one.bin RESULT_VARIABLE same)
if(NOT same)
  message(FATAL_ERROR "dQ did not change with a different dO: --input-do was not read")
endif()
message("backward files: sizes right, 1 and 2 threads byte-identical")
