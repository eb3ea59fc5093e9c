// The avx512bf16 path: the AVX-512 loop, whose pair path (bf16_pair_path.h)
// runs bf16's two products with AVX512_BF16's VDPBF16PS (bf16_dot_path.h);
// chosen automatically on AMD CPUs (Zen 4 and later), where VDPBF16PS
// outpaces the FMA loop (CpuFeatures::bf16_dot_outpaces_fma).  fp16 and fp32
// calls, and shapes the pair path does not fit, run the AVX-512 FMA code
// compiled here.  The loop is the version's this file is compiled for
// (FA_LOOP_VERSION; flags and versions set per file in
// flash_attention/CMakeLists.txt).
#define FA_KERNEL_NS isa_avx512bf16
#define FA_HAVE_BF16_DOT 1
#include "../vec_avx512.h"
#include "../version_mainloop.h"

namespace fa::detail {

extern const KernelTable kKernels_avx512bf16;
const KernelTable kKernels_avx512bf16 =
    FA_KERNEL_NS::kernel_table_of(Isa::kAvx512Bf16, "avx512bf16", &FA_KERNEL_NS::dot_peak_one_thread);

}  // namespace fa::detail
