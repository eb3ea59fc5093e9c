// The backward pass on the avx512 path (AVX-512 F/BW/VL/DQ): backward_loop.h
// compiled with this path's flags (set per file in
// flash_attention/CMakeLists.txt), once, into the FA2 library.  Its own
// namespace: no inline function is shared with the forward's translation unit
// of the same path, whose macros differ.
#define FA_KERNEL_NS isa_avx512_backward
#include "../vec_avx512.h"
#include "../backward_loop.h"

namespace fa::detail {

extern const BackwardKernelTable kBackward_avx512;
const BackwardKernelTable kBackward_avx512 = FA_KERNEL_NS::backward_table_of(Isa::kAvx512, "avx512");

}  // namespace fa::detail
