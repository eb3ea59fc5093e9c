// The pair path's engine on the AMX tile unit (amx path): both products as
// TDPBF16PS on 16 x 16 fp32 accumulator tiles, for bf16 and for fp16 as two
// exact bf16 pieces (kPieces).  Included by engines.h after
// bf16_pair_path.h (the layouts, the packing and the loop) when FA_HAVE_AMX.
#pragma once

#include <immintrin.h>

#include <cstdint>

// Tile registers: C 0-3 (fp32 16 x 16 accumulators), A 4-5, B 6-7, every one
// 16 rows x 64 bytes, so one configuration serves both products.  The
// engine below reaches them only through FA_TILE_ZERO / FA_TILE_LOAD /
// FA_TILE_STORE / FA_TILE_DOT and tile_config / tile_release: the
// instructions here, or their plain C++ model in a build with
// FA_AMX_EMULATION=ON.  Macros, because GCC's intrinsics paste the tile
// number into the instruction's text: it must be a literal.
#if FA_AMX_EMULATION
#include "amx_tile_emulation.h"
#else
#define FA_TILE_ZERO(t) _tile_zero(t)
#define FA_TILE_LOAD(t, base, stride) _tile_loadd(t, base, stride)
#define FA_TILE_STORE(t, base, stride) _tile_stored(t, base, stride)
#define FA_TILE_DOT(c, a, b) _tile_dpbf16ps(c, a, b)

namespace fa::FA_KERNEL_NS {

struct alignas(64) AmxConfig {
  std::uint8_t palette, start_row, reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

// LDTILECFG through an operand that covers all 64 bytes: GCC 12's
// _tile_loadconfig declares a read of only 8, so the compiler may drop the
// stores of the rows and column widths as dead, leaving tiles unconfigured
// (the next tile instruction then faults).
inline void tile_config() {
  AmxConfig cfg{};
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
inline void tile_release() { _tile_release(); }

}  // namespace fa::FA_KERNEL_NS
#endif

namespace fa::FA_KERNEL_NS {

// --- products ------------------------------------------------------------
// C tiles 0-3 += A tiles 4-5 x B tiles 6-7: the 2 x 2 block that keeps four
// accumulators live.
inline void products_2x2() {
  FA_TILE_DOT(0, 4, 6);
  FA_TILE_DOT(1, 4, 7);
  FA_TILE_DOT(2, 5, 6);
  FA_TILE_DOT(3, 5, 7);
}

// The block's operands loaded and multiplied; with two pieces, hi·hi, hi·lo
// and lo·hi in turn.
template <int kP>
inline void block_2x2(const void* a0, const void* a1, std::int64_t a_lo, std::int64_t a_stride, const void* b0,
                      const void* b1, std::int64_t b_lo, std::int64_t b_stride) {
  FA_TILE_LOAD(4, a0, a_stride);
  FA_TILE_LOAD(5, a1, a_stride);
  FA_TILE_LOAD(6, b0, b_stride);
  FA_TILE_LOAD(7, b1, b_stride);
  products_2x2();
  if constexpr (kP == 2) {
    FA_TILE_LOAD(6, static_cast<const char*>(b0) + b_lo, b_stride);
    FA_TILE_LOAD(7, static_cast<const char*>(b1) + b_lo, b_stride);
    products_2x2();  // hi x lo
    FA_TILE_LOAD(4, static_cast<const char*>(a0) + a_lo, a_stride);
    FA_TILE_LOAD(5, static_cast<const char*>(a1) + a_lo, a_stride);
    FA_TILE_LOAD(6, b0, b_stride);
    FA_TILE_LOAD(7, b1, b_stride);
    products_2x2();  // lo x hi
  }
}

// C tiles 0 and 2 += A tiles 4-5 x B tile 6: the last 16 rows of an odd count.
template <int kP>
inline void block_2x1(const void* a0, const void* a1, std::int64_t a_lo, std::int64_t a_stride, const void* b0,
                      std::int64_t b_lo, std::int64_t b_stride) {
  FA_TILE_LOAD(4, a0, a_stride);
  FA_TILE_LOAD(5, a1, a_stride);
  FA_TILE_LOAD(6, b0, b_stride);
  FA_TILE_DOT(0, 4, 6);
  FA_TILE_DOT(2, 5, 6);
  if constexpr (kP == 2) {
    FA_TILE_LOAD(6, static_cast<const char*>(b0) + b_lo, b_stride);
    FA_TILE_DOT(0, 4, 6);
    FA_TILE_DOT(2, 5, 6);
    FA_TILE_LOAD(4, static_cast<const char*>(a0) + a_lo, a_stride);
    FA_TILE_LOAD(5, static_cast<const char*>(a1) + a_lo, a_stride);
    FA_TILE_LOAD(6, b0, b_stride);
    FA_TILE_DOT(0, 4, 6);
    FA_TILE_DOT(2, 5, 6);
  }
}

// The keys [begin, end) that query rows [r0, r0 + rows) may attend, from
// their vectors' spans (windows only move forward); every key when `spans`
// is null.
inline KeySpan rows_key_span(const KeySpan* spans, int r0, int rows, int cols_pad) {
  if (!spans) return {0, cols_pad};
  return {spans[r0 / 16].begin, spans[(r0 + rows) / 16 - 1].end};
}

// Whether a span takes any of the keys [c0, c0 + 32).
inline bool touches(const KeySpan& keys, int c0) { return keys.begin < keys.end && c0 < keys.end && c0 + 32 > keys.begin; }

// Sᵀ[c][r] = sum_d K[c][d] Q[r][d] for c < cols_pad, r < width; K in A-tile
// order (lo piece k_lo elements on), Qᵀ in B-tile order (q_lo on).
// `spans` (may be null): a block of 32 keys x 32 (or 16) query rows that no
// row's span touches is not multiplied (its scores are left for masking).
// `next` (may be null): the next K/V tile's lines, a share per block.
template <int kP>
inline void amx_scores(const std::uint16_t* kp, std::int64_t k_lo, const std::uint32_t* qb, std::int64_t q_lo, int tq,
                       int D, int cols_pad, int width, float* st, const KeySpan* spans = nullptr,
                       KvLineStream* next = nullptr) {
  const std::int64_t sts = std::int64_t(tq) * 4, a_lo = k_lo * 2, b_lo = q_lo * 4;
  const int share = next ? next->third_per_step((cols_pad / 32) * ((width + 31) / 32)) : 0;
  for (int c0 = 0; c0 < cols_pad; c0 += 32) {
    const std::uint16_t* k0 = kp + std::int64_t(c0 / 16) * (D / 32) * 512;
    const std::uint16_t* k1 = k0 + std::int64_t(D / 32) * 512;
    float* s0 = st + std::int64_t(c0) * tq;
    float* s1 = s0 + 16 * std::int64_t(tq);
    int r0 = 0;
    for (; r0 + 32 <= width; r0 += 32) {
      if (touches(rows_key_span(spans, r0, 32, cols_pad), c0)) {
        FA_TILE_ZERO(0);
        FA_TILE_ZERO(1);
        FA_TILE_ZERO(2);
        FA_TILE_ZERO(3);
        for (int d0 = 0; d0 < D; d0 += 32) {
          block_2x2<kP>(k0 + (d0 / 32) * 512, k1 + (d0 / 32) * 512, a_lo, 64,
                        qb + (std::int64_t(r0 / 16) * (D / 2) + d0 / 2) * 16,
                        qb + (std::int64_t(r0 / 16 + 1) * (D / 2) + d0 / 2) * 16, b_lo, 64);
        }
        FA_TILE_STORE(0, s0 + r0, sts);
        FA_TILE_STORE(1, s0 + r0 + 16, sts);
        FA_TILE_STORE(2, s1 + r0, sts);
        FA_TILE_STORE(3, s1 + r0 + 16, sts);
      }
      if (next) next->issue(share);
    }
    if (r0 < width) {  // a last block of 16 rows
      if (touches(rows_key_span(spans, r0, 16, cols_pad), c0)) {
        FA_TILE_ZERO(0);
        FA_TILE_ZERO(2);
        for (int d0 = 0; d0 < D; d0 += 32) {
          block_2x1<kP>(k0 + (d0 / 32) * 512, k1 + (d0 / 32) * 512, a_lo, 64,
                        qb + (std::int64_t(r0 / 16) * (D / 2) + d0 / 2) * 16, b_lo, 64);
        }
        FA_TILE_STORE(0, s0 + r0, sts);
        FA_TILE_STORE(2, s1 + r0, sts);
      }
      if (next) next->issue(share);
    }
  }
}

// The 32-key blocks [begin, end) of a reduction over keys that a span
// touches: the probabilities outside are 0.
inline KeySpan key_blocks(const KeySpan& keys, int cols_pad) {
  if (keys.end <= keys.begin) return {0, 0};
  const int end = (keys.end + 31) / 32 * 32;
  return {keys.begin / 32 * 32, end < cols_pad ? end : cols_pad};
}

// Oᵀ[d][r] += sum_c Vᵀ[d][c] Pᵀ[c][r] for d < D, r < width, c < cols_pad
// (Oᵀ = the sum, without reading it, when `fresh`: the item's first tile);
// Vᵀ in A-tile order (ldvt = tile_kv / 2; lo piece v_lo on), P in B-tile
// order (p_lo on).  `spans` (may be null): each block of query rows sums only
// the 32-key blocks its rows' spans touch.
template <int kP>
inline void amx_accumulate(const std::uint32_t* vt, int ldvt, std::int64_t v_lo, const std::uint32_t* pb, int ldp,
                           std::int64_t p_lo, int tq, int D, int cols_pad, int width, float* ot, bool fresh,
                           const KeySpan* spans = nullptr, KvLineStream* next = nullptr) {
  const int share = next ? next->third_per_step((D / 32) * ((width + 31) / 32)) : 0;
  const std::int64_t ots = std::int64_t(tq) * 4, a_lo = v_lo * 4, b_lo = p_lo * 4;
  for (int d0 = 0; d0 < D; d0 += 32) {
    float* o0 = ot + std::int64_t(d0) * tq;
    float* o1 = o0 + 16 * std::int64_t(tq);
    const std::uint32_t* v0 = vt + std::int64_t(d0 / 16) * (ldvt / 16) * 256;  // A tiles of dims d0 .. d0 + 15
    const std::uint32_t* v1 = v0 + std::int64_t(ldvt / 16) * 256;               // and of the next 16
    int r0 = 0;
    for (; r0 + 32 <= width; r0 += 32) {
      const KeySpan blocks = key_blocks(rows_key_span(spans, r0, 32, cols_pad), cols_pad);
      if (fresh) {
        FA_TILE_ZERO(0);
        FA_TILE_ZERO(1);
        FA_TILE_ZERO(2);
        FA_TILE_ZERO(3);
      } else {
        FA_TILE_LOAD(0, o0 + r0, ots);
        FA_TILE_LOAD(1, o0 + r0 + 16, ots);
        FA_TILE_LOAD(2, o1 + r0, ots);
        FA_TILE_LOAD(3, o1 + r0 + 16, ots);
      }
      for (int c0 = blocks.begin; c0 < blocks.end; c0 += 32) {
        block_2x2<kP>(v0 + (c0 / 32) * 256, v1 + (c0 / 32) * 256, a_lo, 64, pb + (std::int64_t(r0 / 16) * ldp + c0 / 2) * 16,
                      pb + (std::int64_t(r0 / 16 + 1) * ldp + c0 / 2) * 16, b_lo, 64);
      }
      FA_TILE_STORE(0, o0 + r0, ots);
      FA_TILE_STORE(1, o0 + r0 + 16, ots);
      FA_TILE_STORE(2, o1 + r0, ots);
      FA_TILE_STORE(3, o1 + r0 + 16, ots);
      if (next) next->issue(share);
    }
    if (r0 < width) {
      const KeySpan blocks = key_blocks(rows_key_span(spans, r0, 16, cols_pad), cols_pad);
      if (fresh) {
        FA_TILE_ZERO(0);
        FA_TILE_ZERO(2);
      } else {
        FA_TILE_LOAD(0, o0 + r0, ots);
        FA_TILE_LOAD(2, o1 + r0, ots);
      }
      for (int c0 = blocks.begin; c0 < blocks.end; c0 += 32) {
        block_2x1<kP>(v0 + (c0 / 32) * 256, v1 + (c0 / 32) * 256, a_lo, 64, pb + (std::int64_t(r0 / 16) * ldp + c0 / 2) * 16, b_lo, 64);
      }
      FA_TILE_STORE(0, o0 + r0, ots);
      FA_TILE_STORE(2, o1 + r0, ots);
    }
  }
}

// The engine run_tile_pairs drives on this path.
struct AmxProducts {
  static constexpr const char* kUnit = "AMX";  // for fa2_stages
  template <DType DT>
  static constexpr bool kHandles = DT == DType::kBF16 || DT == DType::kF16 || is_fp8(DT);
  static constexpr int kOutDimStep = 32;  // Oᵀ rows per pair of 16-row A tiles (block_2x2)
  static constexpr int kReduceStep = 32;  // Q·Kᵀ's dims: a whole A tile's 32 at a time
  static constexpr int kRowStep = 16;     // B tiles of 16 rows
  static constexpr bool kReadsKInPlace = false;  // tile loads want K's A tiles packed
  // The tile unit works beside the AVX-512 softmax: FA3's pair schedule
  // has something to overlap.
  static constexpr bool kOwnUnit = true;
  static void begin() { tile_config(); }
  static void end() { tile_release(); }
  template <int kP>
  static void scores(const std::uint16_t* kp, std::int64_t k_lo, const std::uint32_t* qb, std::int64_t q_lo, int tq,
                     int D, int /*reduce_dims: D*/, int cols_pad, int width, float* st, const KeySpan* spans,
                     KvLineStream* next) {
    amx_scores<kP>(kp, k_lo, qb, q_lo, tq, D, cols_pad, width, st, spans, next);
  }
  template <int kP>
  static void accumulate(const std::uint32_t* vt, int ldvt, std::int64_t v_lo, const std::uint32_t* pb, int ldp,
                         std::int64_t p_lo, int tq, int D, int cols_pad, int width, float* ot, bool fresh,
                         const KeySpan* spans, KvLineStream* next) {
    amx_accumulate<kP>(vt, ldvt, v_lo, pb, ldp, p_lo, tq, D, cols_pad, width, ot, fresh, spans, next);
  }
};

// TDPBF16PS throughput of this thread's tile unit, GFLOP/s: four independent
// accumulators, as the products above keep.
[[gnu::noinline]] inline double amx_peak_one_thread(double seconds) {
  alignas(64) std::uint16_t ones[16 * 32];
  for (std::uint16_t& x : ones) x = 0x3f80;  // bf16 1.0
  tile_config();
  FA_TILE_ZERO(0);
  FA_TILE_ZERO(1);
  FA_TILE_ZERO(2);
  FA_TILE_ZERO(3);
  FA_TILE_LOAD(4, ones, 64);
  FA_TILE_LOAD(5, ones, 64);
  FA_TILE_LOAD(6, ones, 64);
  FA_TILE_LOAD(7, ones, 64);
  const double rate = calls_per_second(seconds, 1024, products_2x2);
  tile_release();
  return 4.0 * 2.0 * 16 * 16 * 32 * rate / 1e9;
}

}  // namespace fa::FA_KERNEL_NS
