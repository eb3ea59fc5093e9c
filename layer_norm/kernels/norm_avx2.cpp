// The avx2 path of the normalization kernels (flags set per file in
// layer_norm/CMakeLists.txt).
#define FA_KERNEL_NS norm_avx2
#include "kernels/vec_avx2.h"
#include "../norm_kernels.h"

namespace fa::detail {

extern const NormKernelTable kNormKernels_avx2;
const NormKernelTable kNormKernels_avx2 = {&FA_KERNEL_NS::norm_rows, &FA_KERNEL_NS::add_rows};

}  // namespace fa::detail
