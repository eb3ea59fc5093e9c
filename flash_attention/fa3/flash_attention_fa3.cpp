// FlashAttention-3 (2024): the entry points of libflash_attention_fa3.so.  The call
// itself is the shared dispatcher's (common/forward_dispatch.cpp); what is
// FA3's own is its loop (fa3_mainloop.h), compiled into this library's
// kernel tables, and its plan (common/tile_planner.cpp, Version::kFA3).
#include "../common/forward_dispatch.h"

FA_VERSION_ENTRY_POINTS(3)
