// Everything a version's loop is made of, included by each version's
// mainloop (fa<N>/fa<N>_mainloop.h) inside the path's namespace
// fa::FA_KERNEL_NS, after the path's vector policy `Vec` (vec_sse2.h,
// vec_avx2.h, vec_avx512.h; plus convert_f16 / convert_bf16 when
// FA_HAVE_SIMD_CONVERT).  One file per role, as FlashAttention-3's hopper/
// keeps them:
//
//   tile_state.h       the thread's scratch, a work item, key spans
//   kv_tiles.h         Q, K and V tiles from the caller's tensors; the next
//                      tile's lines streamed into L2
//   microkernel.h      the vector products (Q·Kᵀ and P·V)
//   tile_mask.h        key windows, edge masking, key spans
//   score_modifiers.h  softcap, ALiBi, bias, sinks, dropout
//   online_softmax.h   the online softmax (fp32; fp16 where OFF asks)
//   epilogue.h         O normalized and written, the LSE, split partials
//   row_path.h         short Q tiles (decoding) row by row
//   stage_laps.h       FA_STAGE_TIMING's laps
//   tile_scheduler.h   which item a thread runs; dtype and prefetch chosen once
//   probes.h           the FMA peak probe and exp2 over an array
//   bf16_pair_path.h   (amx, avx512bf16) the bf16 pair layouts and their loop,
//                      with the engine: amx_tile_path.h or bf16_dot_path.h
//
// Every version compiles the whole set for each instruction set; the loops
// that differ between versions are the only code in fa1/, fa2/ and fa3/.
#pragma once

#include "epilogue.h"
#include "kv_tiles.h"
#include "microkernel.h"
#include "online_softmax.h"
#include "probes.h"
#include "row_path.h"
#include "score_modifiers.h"
#include "stage_laps.h"
#include "tile_mask.h"
#include "tile_scheduler.h"
#include "tile_state.h"

// The pair path (bf16 pair layouts) and its engine: the AMX tile unit, or
// AVX512_BF16's dot products.
#if defined(FA_HAVE_AMX) || defined(FA_HAVE_BF16_DOT)
#define FA_HAVE_BF16_PAIRS 1
#include "bf16_pair_path.h"
#endif
#if defined(FA_HAVE_AMX)
#include "amx_tile_path.h"
#elif defined(FA_HAVE_BF16_DOT)
#include "bf16_dot_path.h"
#endif

namespace fa::FA_KERNEL_NS {
#if defined(FA_HAVE_AMX)
using PairEngine = AmxProducts;
#elif defined(FA_HAVE_BF16_DOT)
using PairEngine = DotProducts;
#endif
}  // namespace fa::FA_KERNEL_NS
