// Stage timer for the generic path (compiled with that path's flags).
#define FA_KERNEL_NS isa_generic
#include "../../flash_attention/kernels/vec_sse2.h"
#include "../../flash_attention/fa2/fa2_mainloop.h"
#include "stage_timer.h"

namespace fa::bench {
StageReport time_stages_generic(const StageConfig& cfg) { return FA_KERNEL_NS::time_stages(cfg); }
}  // namespace fa::bench
