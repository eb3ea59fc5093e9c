# oneDNN (Debian's libdnnl-dev, which scripts/ensure_deps.sh installs), for
# the decoder-layer example's projections and bench/onednn_products (the
# products-only ceiling peer).  Defines the interface target onednn_cpu when
# found; the rest of the project does not need it.
#
# The header and the library, not Debian's dnnl-config.cmake: that package
# was built with oneDNN's OpenCL GPU runtime, and its config demands the
# OpenCL development files, which a CPU-only program does not use.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY dnnl)
if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND NOT TARGET onednn_cpu)
  message(STATUS "oneDNN: ${DNNL_LIBRARY}")
  add_library(onednn_cpu INTERFACE)
  target_include_directories(onednn_cpu SYSTEM INTERFACE ${DNNL_INCLUDE_DIR})
  target_link_libraries(onednn_cpu INTERFACE ${DNNL_LIBRARY})
elseif(NOT TARGET onednn_cpu)
  message(STATUS "oneDNN not found (apt-get install libdnnl-dev; scripts/ensure_deps.sh installs it): "
                 "examples/decoder_layer and bench/onednn_products are skipped")
endif()
