// Build-time tile defaults (the FA_TILE_Q / FA_TILE_KV CMake options) and the
// software-prefetch switch (FA_ENABLE_ASYNC), in one place.
#pragma once

#ifndef FA_TILE_Q
#define FA_TILE_Q 128
#endif
#ifndef FA_TILE_KV
#define FA_TILE_KV 64
#endif
#ifndef FA_ENABLE_ASYNC
#define FA_ENABLE_ASYNC 0
#endif

namespace fa::detail {

inline constexpr int kDefaultTileQ = FA_TILE_Q;
inline constexpr int kDefaultTileKv = FA_TILE_KV;
inline constexpr bool kAsyncPrefetch = FA_ENABLE_ASYNC != 0;

static_assert((kDefaultTileQ & (kDefaultTileQ - 1)) == 0 && kDefaultTileQ >= 16 && kDefaultTileQ <= 512,
              "FA_TILE_Q must be a power of two from 16 to 512");
static_assert((kDefaultTileKv & (kDefaultTileKv - 1)) == 0 && kDefaultTileKv >= 16 && kDefaultTileKv <= 512,
              "FA_TILE_KV must be a power of two from 16 to 512");

}  // namespace fa::detail
