// The FA2 tile loop compiled for the generic path (flags set per file in
// flash_attention/CMakeLists.txt).
#define FA_KERNEL_NS isa_generic
#include "../vec_sse2.h"
#include "../fa2_tile_loop.h"
#include "../../common/tile_config.h"

namespace fa::detail {

extern const KernelTable kKernels_generic;
const KernelTable kKernels_generic = {
    Isa::kGeneric,
    "generic",
    &FA_KERNEL_NS::fa2_workspace_floats,
    nullptr,  // no shared K/V packing
    &FA_KERNEL_NS::fa2_run_impl<kAsyncPrefetch>,
    &FA_KERNEL_NS::exp2_array,
    &FA_KERNEL_NS::fma_peak_one_thread,
    nullptr,
};

}  // namespace fa::detail
