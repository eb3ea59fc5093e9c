// The amx path: the AVX-512 loop, whose pair path (bf16_pair_path.h) runs
// its two products on the AMX tile unit (amx_tile_path.h), for bf16 and for
// fp16 in two bf16 pieces.  fp32 calls, and shapes the tiles do not fit, run
// the AVX-512 code compiled here.  The loop is the version's this file is
// compiled for (FA_LOOP_VERSION; flags and versions set per file in
// flash_attention/CMakeLists.txt); with FA_AMX_EMULATION=ON (tests only) the
// tile instructions run as plain C++ (amx_tile_emulation.h).
#define FA_KERNEL_NS isa_amx
#define FA_HAVE_AMX 1
#if !FA_AMX_EMULATION  // every AMX CPU has AVX512-FP16; the emulated build runs where neither is
#define FA_HAVE_AVX512FP16 1
#endif
#include "../vec_avx512.h"
#include "../version_mainloop.h"

namespace fa::detail {

extern const KernelTable kKernels_amx;
#if FA_AMX_EMULATION
// The emulated tiles have no peak worth a Utilization line.
const KernelTable kKernels_amx = FA_KERNEL_NS::kernel_table_of(Isa::kAmx, "amx", nullptr);
#else
const KernelTable kKernels_amx = FA_KERNEL_NS::kernel_table_of(Isa::kAmx, "amx", &FA_KERNEL_NS::amx_peak_one_thread);
#endif

}  // namespace fa::detail
