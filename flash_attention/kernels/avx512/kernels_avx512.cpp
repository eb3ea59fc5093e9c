// The avx512 path (AVX-512 F/BW/VL/DQ): the loop of the version this file is
// compiled for (FA_LOOP_VERSION; flags and versions set per file in
// flash_attention/CMakeLists.txt).
#define FA_KERNEL_NS isa_avx512
#include "../vec_avx512.h"
#include "../version_mainloop.h"

namespace fa::detail {

extern const KernelTable kKernels_avx512;
const KernelTable kKernels_avx512 = FA_KERNEL_NS::kernel_table_of(Isa::kAvx512, "avx512", nullptr);

}  // namespace fa::detail
