// The backward pass on the amx path: backward_loop.h compiled with this path's
// flags (set per file in flash_attention/CMakeLists.txt), once, into the FA2
// library; bf16 calls' products as TDPBF16PS on the tile unit
// (backward_pairs.h; its C++ model with FA_AMX_EMULATION=ON), fp16 and fp32
// calls' on the AVX-512 FMA microkernel.  Its own namespace: no inline
// function is shared with the forward's translation unit of the same path,
// whose macros differ.
#define FA_KERNEL_NS isa_amx_backward
#define FA_HAVE_AMX 1
#if !FA_AMX_EMULATION  // every AMX CPU has AVX512-FP16; the emulated build runs where neither is
#define FA_HAVE_AVX512FP16 1
#endif
#include "../vec_avx512.h"
#include "../backward_loop.h"

namespace fa::detail {

extern const BackwardKernelTable kBackward_amx;
const BackwardKernelTable kBackward_amx = FA_KERNEL_NS::backward_table_of(Isa::kAmx, "amx");

}  // namespace fa::detail
