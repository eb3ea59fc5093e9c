// The eight AMX tile registers and the tile instructions the amx engine
// uses, in plain C++: a build with FA_AMX_EMULATION=ON runs the amx path's
// engine (its blocking, strides, pieces and key spans) on a CPU without AMX,
// so the tests check that code where no AMX machine is at hand.  Slow (a
// TDPBF16PS is 8192 scalar multiply-adds here), so never a speed figure.
// Included by amx_tile_path.h in place of the real instructions (the
// FA_TILE_* macros it uses, defined at the end).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace fa::FA_KERNEL_NS {

// Every tile as tile_config sets it on the real unit: 16 rows of 64 bytes.  Per thread,
// as the real registers are; trivially destructible and zero-initialized,
// so no thread-exit code is needed.
struct alignas(64) EmulatedTiles {
  unsigned char row[8][16][64];
};
inline EmulatedTiles& emulated_tiles() {
  static thread_local EmulatedTiles tiles;
  return tiles;
}

// bf16 to fp32 as TDPBF16PS reads it: denormals are zero.
inline float emulated_bf16(std::uint16_t h) {
  const std::uint32_t bits = (h & 0x7f80u) ? std::uint32_t(h) << 16 : std::uint32_t(h & 0x8000u) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

template <int T>
inline void emulated_tile_zero() {
  std::memset(emulated_tiles().row[T], 0, sizeof emulated_tiles().row[T]);
}

template <int T>
inline void emulated_tile_load(const void* base, std::int64_t stride) {
  for (int r = 0; r < 16; ++r) std::memcpy(emulated_tiles().row[T][r], static_cast<const char*>(base) + r * stride, 64);
}

template <int T>
inline void emulated_tile_store(void* base, std::int64_t stride) {
  for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(base) + r * stride, emulated_tiles().row[T][r], 64);
}

// C (16 x 16 fp32) += A (16 rows x 16 bf16 pairs) · B (16 pair rows x 16
// columns of pairs), each pair's two products added in turn, as the
// instruction's definition orders them; denormal results flushed to zero.
template <int C, int A, int B>
inline void emulated_tile_dot() {
  EmulatedTiles& t = emulated_tiles();
  for (int m = 0; m < 16; ++m) {
    float acc[16];
    std::memcpy(acc, t.row[C][m], sizeof acc);
    std::uint16_t a[32];
    std::memcpy(a, t.row[A][m], sizeof a);
    for (int k = 0; k < 16; ++k) {
      std::uint16_t b[32];
      std::memcpy(b, t.row[B][k], sizeof b);
      const float a0 = emulated_bf16(a[2 * k]), a1 = emulated_bf16(a[2 * k + 1]);
      for (int n = 0; n < 16; ++n) {
        acc[n] += a0 * emulated_bf16(b[2 * n]);
        acc[n] += a1 * emulated_bf16(b[2 * n + 1]);
      }
    }
    constexpr float kSmallestNormal = std::numeric_limits<float>::min();
    for (float& x : acc) {
      if (x != 0.0f && x > -kSmallestNormal && x < kSmallestNormal) x = x < 0.0f ? -0.0f : 0.0f;
    }
    std::memcpy(t.row[C][m], acc, sizeof acc);
  }
}

// C (16 x 16 int32) += A (16 rows x 64 int8) · B (16 rows of 16 quads):
// TDPBSSD (both signed) and TDPBSUD (B unsigned), wrapping as the
// instruction's int32 sums do (the callers' sums never reach 2^31).
template <int C, int A, int B, bool kUnsignedB>
inline void emulated_tile_dot_int8() {
  EmulatedTiles& t = emulated_tiles();
  for (int m = 0; m < 16; ++m) {
    std::int32_t acc[16];
    std::memcpy(acc, t.row[C][m], sizeof acc);
    for (int kk = 0; kk < 16; ++kk) {
      for (int n = 0; n < 16; ++n) {
        for (int i = 0; i < 4; ++i) {
          const int a = static_cast<std::int8_t>(t.row[A][m][4 * kk + i]);
          const int b = kUnsignedB ? int(t.row[B][kk][4 * n + i]) : int(static_cast<std::int8_t>(t.row[B][kk][4 * n + i]));
          acc[n] += a * b;
        }
      }
    }
    std::memcpy(t.row[C][m], acc, sizeof acc);
  }
}

inline void tile_config() {}   // every tile is 16 x 64 bytes already
inline void tile_release() {}

}  // namespace fa::FA_KERNEL_NS

#define FA_TILE_ZERO(t) emulated_tile_zero<t>()
#define FA_TILE_LOAD(t, base, stride) emulated_tile_load<t>(base, stride)
#define FA_TILE_STORE(t, base, stride) emulated_tile_store<t>(base, stride)
#define FA_TILE_DOT(c, a, b) emulated_tile_dot<c, a, b>()
#define FA_TILE_DOT_SS(c, a, b) emulated_tile_dot_int8<c, a, b, false>()
#define FA_TILE_DOT_SU(c, a, b) emulated_tile_dot_int8<c, a, b, true>()
