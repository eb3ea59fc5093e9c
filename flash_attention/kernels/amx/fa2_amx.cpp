// The FA2 tile loop compiled for the amx path: the AVX-512 loop, whose pair
// path (bf16_pair_path.h) runs its two products on the AMX tile unit
// (amx_tile_path.h), for bf16 and for fp16 in two bf16 pieces.  fp32 calls,
// and shapes the tiles do not fit, run the AVX-512 code compiled here.
// Flags set per file in flash_attention/CMakeLists.txt; with
// FA_AMX_EMULATION=ON (tests only) the tile instructions run as plain C++
// (amx_tile_emulation.h).
#define FA_KERNEL_NS isa_amx
#define FA_HAVE_AMX 1
#if !FA_AMX_EMULATION  // every AMX CPU has AVX512-FP16; the emulated build runs where neither is
#define FA_HAVE_AVX512FP16 1
#endif
#include "../vec_avx512.h"
#include "../fa2_tile_loop.h"
#include "../../common/tile_config.h"

namespace fa::detail {

extern const KernelTable kKernels_amx;
const KernelTable kKernels_amx = {
    Isa::kAmx,
    "amx",
    &FA_KERNEL_NS::pair_workspace_floats,
    &FA_KERNEL_NS::pair_kv_pack_bytes<FA_KERNEL_NS::AmxProducts>,
    &FA_KERNEL_NS::fa2_run_impl<kAsyncPrefetch>,
    &FA_KERNEL_NS::exp2_array,
    &FA_KERNEL_NS::fma_peak_one_thread,
#if FA_AMX_EMULATION
    nullptr,  // the emulated tiles have no peak worth a Utilization line
#else
    &FA_KERNEL_NS::amx_peak_one_thread,
#endif
};

}  // namespace fa::detail
