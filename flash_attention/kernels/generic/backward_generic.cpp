// The backward pass on the generic path (SSE2, every x86-64 CPU):
// backward_loop.h compiled with this path's flags (set per file in
// flash_attention/CMakeLists.txt), once, into the FA2 library.  Its own
// namespace: no inline function is shared with the forward's translation unit
// of the same path, whose macros differ.
#define FA_KERNEL_NS isa_generic_backward
#include "../vec_sse2.h"
#include "../backward_loop.h"

namespace fa::detail {

extern const BackwardKernelTable kBackward_generic;
const BackwardKernelTable kBackward_generic = FA_KERNEL_NS::backward_table_of(Isa::kGeneric, "generic");

}  // namespace fa::detail
