// Build-time defaults: tiles (FA_TILE_Q / FA_TILE_KV), software prefetch
// (FA_ENABLE_ASYNC), split-KV (FA_SPLIT_ENABLE / FA_SPLIT_THRESHOLD) and the
// softmax precision (FA_MIXED_PRECISION_SOFTMAX).
#pragma once

#ifndef FA_TILE_Q
#define FA_TILE_Q -1
#endif
#ifndef FA_TILE_KV
#define FA_TILE_KV -1
#endif
#ifndef FA_ENABLE_ASYNC
#define FA_ENABLE_ASYNC 0
#endif
#ifndef FA_SPLIT_ENABLE
#define FA_SPLIT_ENABLE 0
#endif
#ifndef FA_MIXED_PRECISION_SOFTMAX
#define FA_MIXED_PRECISION_SOFTMAX 1
#endif
#ifndef FA_SPLIT_THRESHOLD
#define FA_SPLIT_THRESHOLD 128
#endif

namespace fa::detail {

inline constexpr int kDefaultTileQ = FA_TILE_Q;
inline constexpr int kDefaultTileKv = FA_TILE_KV;
inline constexpr bool kAsyncPrefetch = FA_ENABLE_ASYNC != 0;
inline constexpr bool kSplitByDefault = FA_SPLIT_ENABLE != 0;
inline constexpr int kSplitThreshold = FA_SPLIT_THRESHOLD;
// FA_MIXED_PRECISION_SOFTMAX=OFF asks for an fp16-arithmetic softmax on fp16
// inputs: the amx path has one (AVX512-FP16, kernels/half_softmax.h); the
// other paths refuse such calls rather than silently run them in fp32.
inline constexpr bool kMixedPrecisionSoftmax = FA_MIXED_PRECISION_SOFTMAX != 0;

// -1 (kTileAuto) leaves the choice to the planner.
static_assert(kDefaultTileQ == -1 || ((kDefaultTileQ & (kDefaultTileQ - 1)) == 0 && kDefaultTileQ >= 16 && kDefaultTileQ <= 512),
              "FA_TILE_Q must be auto or a power of two from 16 to 512");
static_assert(kDefaultTileKv == -1 || ((kDefaultTileKv & (kDefaultTileKv - 1)) == 0 && kDefaultTileKv >= 16 && kDefaultTileKv <= 512),
              "FA_TILE_KV must be auto or a power of two from 16 to 512");

}  // namespace fa::detail
