// The backward pass on the avx2 path (AVX2, FMA, F16C): backward_loop.h
// compiled with this path's flags (set per file in
// flash_attention/CMakeLists.txt), once, into the FA2 library.  Its own
// namespace: no inline function is shared with the forward's translation unit
// of the same path, whose macros differ.
#define FA_KERNEL_NS isa_avx2_backward
#include "../vec_avx2.h"
#include "../backward_loop.h"

namespace fa::detail {

extern const BackwardKernelTable kBackward_avx2;
const BackwardKernelTable kBackward_avx2 = FA_KERNEL_NS::backward_table_of(Isa::kAvx2, "avx2");

}  // namespace fa::detail
