// The avx2 path of the GLU kernel (flags set per file in glu/CMakeLists.txt).
#define FA_KERNEL_NS glu_avx2
#include "kernels/vec_avx2.h"
#include "../glu_kernels.h"

namespace fa::detail {

extern const GluKernelTable kGluKernels_avx2;
const GluKernelTable kGluKernels_avx2 = {&FA_KERNEL_NS::glu_run};

}  // namespace fa::detail
