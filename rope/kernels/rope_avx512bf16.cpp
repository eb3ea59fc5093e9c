// The avx512bf16 path of the RoPE kernel (flags set per file in rope/CMakeLists.txt).
#define FA_KERNEL_NS rope_avx512bf16
#include "kernels/vec_avx512.h"
#include "../rope_kernels.h"

namespace fa::detail {

extern const RopeKernelTable kRopeKernels_avx512bf16;
const RopeKernelTable kRopeKernels_avx512bf16 = {&FA_KERNEL_NS::rope_run};

}  // namespace fa::detail
