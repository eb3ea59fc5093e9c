// The avx2 path of the RoPE kernel (flags set per file in rope/CMakeLists.txt).
#define FA_KERNEL_NS rope_avx2
#include "kernels/vec_avx2.h"
#include "../rope_kernels.h"

namespace fa::detail {

extern const RopeKernelTable kRopeKernels_avx2;
const RopeKernelTable kRopeKernels_avx2 = {&FA_KERNEL_NS::rope_run};

}  // namespace fa::detail
