// The generic path of the normalization kernels (flags set per file in
// layer_norm/CMakeLists.txt).
#define FA_KERNEL_NS norm_generic
#include "kernels/vec_sse2.h"
#include "../norm_kernels.h"

namespace fa::detail {

extern const NormKernelTable kNormKernels_generic;
const NormKernelTable kNormKernels_generic = {&FA_KERNEL_NS::norm_rows, &FA_KERNEL_NS::add_rows};

}  // namespace fa::detail
