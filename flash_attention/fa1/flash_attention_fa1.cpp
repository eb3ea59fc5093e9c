// FlashAttention-1 (2022): the entry points of libflash_attention_fa1.so.  The call
// itself is the shared dispatcher's (common/forward_dispatch.cpp); what is
// FA1's own is its loop (fa1_mainloop.h), compiled into this library's
// kernel tables, and its plan (common/tile_planner.cpp, Version::kFA1).
#include "../common/forward_dispatch.h"

FA_VERSION_ENTRY_POINTS(1)
