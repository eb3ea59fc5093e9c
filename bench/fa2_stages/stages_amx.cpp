// Stage timer for the amx path (compiled with that path's flags).
#define FA_KERNEL_NS isa_amx
#define FA_HAVE_AMX 1
#if !FA_AMX_EMULATION  // every AMX CPU has AVX512-FP16; the emulated build runs where neither is
#define FA_HAVE_AVX512FP16 1
#endif
#include "../../flash_attention/kernels/vec_avx512.h"
#include "../../flash_attention/fa2/fa2_mainloop.h"
#include "stage_timer.h"

namespace fa::bench {
StageReport time_stages_amx(const StageConfig& cfg) { return FA_KERNEL_NS::time_stages(cfg); }
}  // namespace fa::bench
