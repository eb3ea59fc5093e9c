// The avx512bf16 path of the normalization kernels (flags set per file in
// layer_norm/CMakeLists.txt).
#define FA_KERNEL_NS norm_avx512bf16
#include "kernels/vec_avx512.h"
#include "../norm_kernels.h"

namespace fa::detail {

extern const NormKernelTable kNormKernels_avx512bf16;
const NormKernelTable kNormKernels_avx512bf16 = {&FA_KERNEL_NS::norm_rows, &FA_KERNEL_NS::add_rows};

}  // namespace fa::detail
