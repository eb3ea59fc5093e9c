// The avx512 path of the GLU kernel (flags set per file in glu/CMakeLists.txt).
#define FA_KERNEL_NS glu_avx512
#include "kernels/vec_avx512.h"
#include "../glu_kernels.h"

namespace fa::detail {

extern const GluKernelTable kGluKernels_avx512;
const GluKernelTable kGluKernels_avx512 = {&FA_KERNEL_NS::glu_run};

}  // namespace fa::detail
