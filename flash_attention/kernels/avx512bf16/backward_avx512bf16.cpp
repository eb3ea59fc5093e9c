// The backward pass on the avx512bf16 path: backward_loop.h compiled with this
// path's flags (set per file in flash_attention/CMakeLists.txt), once, into
// the FA2 library; bf16 calls' products as VDPBF16PS pair dot products
// (backward_pairs.h), fp16 and fp32 calls' on the AVX-512 FMA microkernel.
// Its own namespace: no inline function is shared with the forward's
// translation unit of the same path, whose macros differ.
#define FA_KERNEL_NS isa_avx512bf16_backward
#define FA_HAVE_BF16_DOT 1
#include "../vec_avx512.h"
#include "../backward_loop.h"

namespace fa::detail {

extern const BackwardKernelTable kBackward_avx512bf16;
const BackwardKernelTable kBackward_avx512bf16 = FA_KERNEL_NS::backward_table_of(Isa::kAvx512Bf16, "avx512bf16");

}  // namespace fa::detail
