// FlashAttention-2 (2023): the entry points of libflash_attention_fa2.so.  The call
// itself is the shared dispatcher's (common/forward_dispatch.cpp); what is
// FA2's own is its loop (fa2_mainloop.h), compiled into this library's
// kernel tables, and its plan (common/tile_planner.cpp, Version::kFA2).
#include "../common/forward_dispatch.h"

FA_VERSION_ENTRY_POINTS(2)
