// The generic path of the RoPE kernel (flags set per file in rope/CMakeLists.txt).
#define FA_KERNEL_NS rope_generic
#include "kernels/vec_sse2.h"
#include "../rope_kernels.h"

namespace fa::detail {

extern const RopeKernelTable kRopeKernels_generic;
const RopeKernelTable kRopeKernels_generic = {&FA_KERNEL_NS::rope_run};

}  // namespace fa::detail
