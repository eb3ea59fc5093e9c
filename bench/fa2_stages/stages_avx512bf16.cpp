// Stage timer for the avx512bf16 path (compiled with that path's flags).
#define FA_KERNEL_NS isa_avx512bf16
#define FA_HAVE_BF16_DOT 1
#include "../../flash_attention/kernels/vec_avx512.h"
#include "../../flash_attention/fa2/fa2_mainloop.h"
#include "stage_timer.h"

namespace fa::bench {
StageReport time_stages_avx512bf16(const StageConfig& cfg) { return FA_KERNEL_NS::time_stages(cfg); }
}  // namespace fa::bench
