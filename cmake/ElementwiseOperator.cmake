# add_elementwise_operator(NAME <lib> PREFIX <P> KERNEL <stem> SOURCES <files>)
#
# One of the element-wise operator libraries (the norms, RoPE, the gated
# linear units): lib<NAME>.so from SOURCES, its kernels kernels/<stem>_<path>.cpp
# compiled once per path with that path's flags (the attention kernels'
# vector policies, FA_ISA_FLAGS_*) and announced as <P>_BUILD_<PATH>, the
# library's own copy of the shared CPU-feature and thread-pool code (hidden,
# like every symbol but its API's), installed with its include/<NAME> headers.
# Its paths: generic, and avx2, avx512 and avx512bf16 (bf16 stores as
# VCVTNEPS2BF16) as far as FA_KERNEL_PATHS reaches; amx runs avx512bf16's.
function(add_elementwise_operator)
  cmake_parse_arguments(OP "" "NAME;PREFIX;KERNEL" "SOURCES" ${ARGN})
  set(paths generic)
  foreach(path IN ITEMS avx2 avx512 avx512bf16 amx)
    if(path IN_LIST FA_KERNEL_PATHS)
      list(APPEND paths avx2)
      if(NOT path STREQUAL "avx2")
        list(APPEND paths avx512)
      endif()
      if(path STREQUAL "avx512bf16" OR path STREQUAL "amx")
        list(APPEND paths avx512bf16)
      endif()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES paths)

  add_library(${OP_NAME} SHARED
    ${OP_SOURCES}
    ${PROJECT_SOURCE_DIR}/flash_attention/common/cpu_features.cpp
    ${PROJECT_SOURCE_DIR}/flash_attention/common/thread_pool.cpp
  )
  foreach(path IN LISTS paths)
    target_sources(${OP_NAME} PRIVATE kernels/${OP_KERNEL}_${path}.cpp)
    # -ffp-contract=off: a multiply and an add stay two roundings unless the
    # code asks for an FMA (Vec::fmadd), so one expression gives the same
    # bits wherever the compiler inlines it (the fused norm's outputs equal
    # the add's then the norm's, bit for bit, tests/unit/layer_norm_unit_test).
    set_source_files_properties(kernels/${OP_KERNEL}_${path}.cpp PROPERTIES COMPILE_OPTIONS "${FA_ISA_FLAGS_${path}};-ffp-contract=off")
    string(TOUPPER ${path} upper)
    target_compile_definitions(${OP_NAME} PRIVATE ${OP_PREFIX}_BUILD_${upper}=1)
  endforeach()
  target_include_directories(${OP_NAME}
    PUBLIC
      $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/flash_attention/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/flash_attention)
  find_package(Threads REQUIRED)
  target_link_libraries(${OP_NAME} PRIVATE Threads::Threads)
  target_compile_features(${OP_NAME} INTERFACE cxx_std_17)
  set_target_properties(${OP_NAME} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/${OP_NAME}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR})
  # find_package(FlashAttention COMPONENTS <NAME>) -> FlashAttention::<NAME>
  # (the package's config reads every FlashAttention*Targets.cmake beside
  # it), and pkg-config's ops_transformer_<NAME>.pc.
  set_target_properties(${OP_NAME} PROPERTIES EXPORT_NAME ${OP_NAME})
  install(TARGETS ${OP_NAME} EXPORT FlashAttention_${OP_NAME}Targets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT FlashAttention_${OP_NAME}Targets NAMESPACE FlashAttention::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/FlashAttention)
  install(DIRECTORY include/${OP_NAME} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set(OP_PC_NAME ${OP_NAME})
  string(REGEX REPLACE "[^/]+" ".." OP_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/elementwise_operator.pc.in
                 ${CMAKE_BINARY_DIR}/pkgconfig/ops_transformer_${OP_NAME}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/pkgconfig/ops_transformer_${OP_NAME}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  message(STATUS "${OP_NAME}: kernel paths ${paths}")
endfunction()

# add_elementwise_programs(NAME <program prefix> LIBRARY <lib> STEM <stem>)
#
# The operator's programs, <NAME>_benchmark and <NAME>_test (in
# <build>/tests/, beside the attention programs), from <STEM>_benchmark.cpp
# and <STEM>_test.cpp over the case driver <STEM>_driver (<STEM>_case.cpp),
# on the attention drivers' parser, buffers and reports (fa_driver, whose
# dtype, layout and path names come from the first attention library);
# CTest runs <NAME>_test --quick under the label <NAME>.
function(add_elementwise_programs)
  cmake_parse_arguments(OP "" "NAME;LIBRARY;STEM" "" ${ARGN})
  add_library(${OP_STEM}_driver STATIC ${OP_STEM}_case.cpp)
  target_link_libraries(${OP_STEM}_driver PUBLIC fa_driver ${OP_LIBRARY} flash_attention_fa${FA_DRIVER_VERSION})
  target_include_directories(${OP_STEM}_driver PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} PRIVATE ${PROJECT_SOURCE_DIR}/flash_attention)
  foreach(kind IN ITEMS benchmark test)
    if((kind STREQUAL "benchmark" AND NOT ENABLE_BENCHMARK) OR (kind STREQUAL "test" AND NOT ENABLE_TESTS))
      continue()
    endif()
    add_executable(${OP_NAME}_${kind} ${OP_STEM}_${kind}.cpp)
    target_link_libraries(${OP_NAME}_${kind} PRIVATE ${OP_STEM}_driver)
    set_target_properties(${OP_NAME}_${kind} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    install(TARGETS ${OP_NAME}_${kind} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endforeach()
  if(ENABLE_TESTS)
    add_test(NAME ${OP_NAME}_test.quick COMMAND ${OP_NAME}_test --quick)
    set_tests_properties(${OP_NAME}_test.quick PROPERTIES LABELS "${OP_NAME}")
  endif()
endfunction()
