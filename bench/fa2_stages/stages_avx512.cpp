// Stage timer for the avx512 path (compiled with that path's flags).
#define FA_KERNEL_NS isa_avx512
#include "../../flash_attention/kernels/vec_avx512.h"
#include "../../flash_attention/fa2/fa2_mainloop.h"
#include "stage_timer.h"

namespace fa::bench {
StageReport time_stages_avx512(const StageConfig& cfg) { return FA_KERNEL_NS::time_stages(cfg); }
}  // namespace fa::bench
