// The generic path (SSE2, every x86-64 CPU): the loop of the version this
// file is compiled for (FA_LOOP_VERSION; flags and versions set per file in
// flash_attention/CMakeLists.txt).
#define FA_KERNEL_NS isa_generic
#include "../vec_sse2.h"
#include "../version_mainloop.h"

namespace fa::detail {

extern const KernelTable kKernels_generic;
const KernelTable kKernels_generic = FA_KERNEL_NS::kernel_table_of(Isa::kGeneric, "generic", nullptr);

}  // namespace fa::detail
