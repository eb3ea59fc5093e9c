// The generic path of the GLU kernel (flags set per file in glu/CMakeLists.txt).
#define FA_KERNEL_NS glu_generic
#include "kernels/vec_sse2.h"
#include "../glu_kernels.h"

namespace fa::detail {

extern const GluKernelTable kGluKernels_generic;
const GluKernelTable kGluKernels_generic = {&FA_KERNEL_NS::glu_run};

}  // namespace fa::detail
