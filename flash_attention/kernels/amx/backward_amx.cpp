// The backward pass on the amx path (its products on the AVX-512 FMA
// microkernel for now): backward_loop.h compiled with this path's flags (set
// per file in flash_attention/CMakeLists.txt), once, into the FA2 library.
// Its own namespace: no inline function is shared with the forward's
// translation unit of the same path, whose macros differ.
#define FA_KERNEL_NS isa_amx_backward
#include "../vec_avx512.h"
#include "../backward_loop.h"

namespace fa::detail {

extern const BackwardKernelTable kBackward_amx;
const BackwardKernelTable kBackward_amx = FA_KERNEL_NS::backward_table_of(Isa::kAmx, "amx");

}  // namespace fa::detail
