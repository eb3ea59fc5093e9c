// The avx2 path (AVX2 + FMA + F16C): the loop of the version this file is
// compiled for (FA_LOOP_VERSION; flags and versions set per file in
// flash_attention/CMakeLists.txt).
#define FA_KERNEL_NS isa_avx2
#include "../vec_avx2.h"
#include "../version_mainloop.h"

namespace fa::detail {

extern const KernelTable kKernels_avx2;
const KernelTable kKernels_avx2 = FA_KERNEL_NS::kernel_table_of(Isa::kAvx2, "avx2", nullptr);

}  // namespace fa::detail
