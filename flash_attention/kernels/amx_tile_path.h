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
// FA_TILE_STORE / FA_TILE_DOT (and FA_TILE_DOT_SS / _SU, the int8 products
// of an int8 cache's Q·Kᵀ) and tile_config / tile_release: the
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
#define FA_TILE_DOT_SS(c, a, b) _tile_dpbssd(c, a, b)
#define FA_TILE_DOT_SU(c, a, b) _tile_dpbsud(c, a, b)

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

// --- K and V read as rows where they lie (bf16) -----------------------------
// A tile load takes any row stride, and a K row is already an A row: 32
// dims of a key in 64 bytes.  So Sᵀ = K · Qᵀ reads K where it lies.  V's
// rows are B rows only as pairs of dims, (V[c][2n], V[c][2n + 1]): a product
// with P in the even halves of A's pairs and zeros in the odd ones sums over
// keys into the even dims, and one with P in the odd halves into the odd
// dims.  At most 8 query rows (decoding at GQA up to 8 heads a K/V head)
// take both in one product: P's rows in the even halves of A rows 0-7 and
// again in the odd halves of rows 8-15.  Else it is twice the second
// product's tile work.  No transpose of V and no copy of either: a
// decoding call streams its K/V once (packing each K/V tile first cost a
// third of GQA decoding's time), and the tile unit has work to spare there.
//
// O is then held in row tiles (RowTiles, bf16_pair_path.h).

// Sᵀ[c][r] = sum_d K[c][d] Q[r][d] for c < cols (a multiple of 16), r <
// width; K's bf16 rows where they lie (TileRows: row_bytes apart in groups
// of 16, best a multiple of 64 from a 64-byte boundary: a tile row off its
// line costs several times one on it), D of their dims read; Qᵀ in B-tile
// order (pack_q_pairs).  `spans` as amx_scores.  The next tile's lines go
// out a share per tile step: a burst of prefetches beyond the core's miss
// buffers stalls the work behind it.
inline void amx_scores_rows(const TileRows& k, const std::uint32_t* qb, int tq, int D, int cols, int width, float* st,
                            const KeySpan* spans, KvLineStream* next) {
  const std::int64_t k_row_bytes = k.row_bytes;
  const std::int64_t sts = std::int64_t(tq) * 4;
  // A share of the next tile's lines per product of two-row blocks.
  const int share = next ? next->third_per_step(((cols + 31) / 32) * ((width + 31) / 32) * (D / 32) * 2) : 0;
  for (int c0 = 0; c0 < cols; c0 += 32) {
    const bool keys2 = c0 + 32 <= cols;  // else the last 16 keys
    const char* k0 = k.row(c0);
    const char* k1 = keys2 ? k.row(c0 + 16) : k0;
    float* s0 = st + std::int64_t(c0) * tq;
    float* s1 = s0 + 16 * std::int64_t(tq);
    for (int r0 = 0; r0 < width; r0 += 32) {
      const bool rows2 = r0 + 32 <= width;  // else the last 16 rows
      if (!touches(rows_key_span(spans, r0, rows2 ? 32 : 16, cols), c0)) {
        if (next) next->issue(share * (D / 32) * 2);
        continue;
      }
      FA_TILE_ZERO(0);
      FA_TILE_ZERO(1);
      FA_TILE_ZERO(2);
      FA_TILE_ZERO(3);
      for (int d0 = 0; d0 < D; d0 += 32) {
        const std::uint32_t* q0 = qb + (std::int64_t(r0 / 16) * (D / 2) + d0 / 2) * 16;
        FA_TILE_LOAD(4, k0 + d0 * 2, k_row_bytes);
        FA_TILE_LOAD(6, q0, 64);
        FA_TILE_DOT(0, 4, 6);
        if (next) next->issue(share);
        if (rows2) {
          FA_TILE_LOAD(7, q0 + std::int64_t(D / 2) * 16, 64);
          FA_TILE_DOT(1, 4, 7);
        }
        if (keys2) {
          FA_TILE_LOAD(5, k1 + d0 * 2, k_row_bytes);
          FA_TILE_DOT(2, 5, 6);
          if (rows2) FA_TILE_DOT(3, 5, 7);
        }
        if (next) next->issue(share);
      }
      FA_TILE_STORE(0, s0 + r0, sts);
      if (rows2) FA_TILE_STORE(1, s0 + r0 + 16, sts);
      if (keys2) {
        FA_TILE_STORE(2, s1 + r0, sts);
        if (rows2) FA_TILE_STORE(3, s1 + r0 + 16, sts);
      }
    }
  }
}

// fp16 K read as rows: Sᵀ of K's two bf16 pieces a value (the rows
// PairTileSteps::widen_fp16_rows writes, k_lo bytes after K's hi rows)
// against Q's (pack_q_pairs; its lo piece q_lo pairs on), as Khi·Qhiᵀ +
// Khi·Qloᵀ + Klo·Qhiᵀ in one accumulator (the pieces path's three products,
// bf16_pair_path.h).  16 query rows a pass: the B tiles hold Q's two pieces.
inline void amx_scores_rows_pieces(const char* k, std::int64_t k_lo, std::int64_t k_row_bytes, const std::uint32_t* qb,
                                   std::int64_t q_lo, int tq, int D, int cols, int width, float* st, const KeySpan* spans,
                                   KvLineStream* next) {
  const std::int64_t sts = std::int64_t(tq) * 4;
  const int share = next ? next->third_per_step(((cols + 31) / 32) * ((width + 15) / 16) * (D / 32) * 2) : 0;
  for (int c0 = 0; c0 < cols; c0 += 32) {
    const bool keys2 = c0 + 32 <= cols;  // else the last 16 keys
    const char* k0 = k + std::int64_t(c0) * k_row_bytes;
    const char* k1 = k0 + 16 * k_row_bytes;
    float* s0 = st + std::int64_t(c0) * tq;
    float* s1 = s0 + 16 * std::int64_t(tq);
    for (int r0 = 0; r0 < width; r0 += 16) {
      if (!touches(rows_key_span(spans, r0, 16, cols), c0)) {
        if (next) next->issue(share * (D / 32) * 2);
        continue;
      }
      FA_TILE_ZERO(0);
      FA_TILE_ZERO(2);
      for (int d0 = 0; d0 < D; d0 += 32) {
        const std::uint32_t* q0 = qb + (std::int64_t(r0 / 16) * (D / 2) + d0 / 2) * 16;
        FA_TILE_LOAD(6, q0, 64);
        FA_TILE_LOAD(7, q0 + q_lo, 64);
        FA_TILE_LOAD(4, k0 + d0 * 2, k_row_bytes);
        FA_TILE_DOT(0, 4, 6);
        FA_TILE_DOT(0, 4, 7);
        if (keys2) {
          FA_TILE_LOAD(5, k1 + d0 * 2, k_row_bytes);
          FA_TILE_DOT(2, 5, 6);
          FA_TILE_DOT(2, 5, 7);
        }
        if (next) next->issue(share);
        FA_TILE_LOAD(4, k0 + k_lo + d0 * 2, k_row_bytes);
        FA_TILE_DOT(0, 4, 6);
        if (keys2) {
          FA_TILE_LOAD(5, k1 + k_lo + d0 * 2, k_row_bytes);
          FA_TILE_DOT(2, 5, 6);
        }
        if (next) next->issue(share);
      }
      FA_TILE_STORE(0, s0 + r0, sts);
      if (keys2) FA_TILE_STORE(2, s1 + r0, sts);
    }
  }
}

// Sᵀ of an int8 cache's K codes read where they lie, for one block of at most
// 16 query rows, in the tile unit's int8 products: Q's rows as int16 in two
// byte pieces (pack_q_int16_pieces: the high one signed, the low one
// unsigned), so s_hi[c][r] = sum_d K[c][d] Qhi[r][d] and s_lo[c][r] = sum_d
// K[c][d] Qlo[r][d] (int32, TDPBSSD and TDPBSUD) and the score is their
// 256 s_hi + s_lo times Q's row scale and K's key scale (the caller's).
// K's rows where they lie (TileRows), D (a multiple of 64) dims each, cols
// keys (a multiple of 16) all readable; q_hi and q_lo B tiles of 64 dims, 1
// KiB apart; s_hi and s_lo rows s_stride int32 apart.  No widening of K.
inline void amx_scores_rows_i8(const TileRows& k, const std::uint8_t* q_hi, const std::uint8_t* q_lo, int D, int cols,
                               std::int32_t* s_hi, std::int32_t* s_lo, std::int64_t s_stride, KvLineStream* next) {
  const int share = next ? next->third_per_step((cols / 16) * (D / 64)) : 0;
  for (int c0 = 0; c0 < cols; c0 += 16) {
    FA_TILE_ZERO(0);
    FA_TILE_ZERO(1);
    for (int d0 = 0; d0 < D; d0 += 64) {
      FA_TILE_LOAD(4, k.row(c0) + d0, k.row_bytes);
      FA_TILE_LOAD(6, q_hi + d0 * 16, 64);
      FA_TILE_LOAD(7, q_lo + d0 * 16, 64);
      FA_TILE_DOT_SS(0, 4, 6);
      FA_TILE_DOT_SU(1, 4, 7);
      if (next) next->issue(share);
    }
    FA_TILE_STORE(0, s_hi + c0 * s_stride, s_stride * 4);
    FA_TILE_STORE(1, s_lo + c0 * s_stride, s_stride * 4);
  }
}

// One row block's probabilities for keys [0, keys) (a multiple of 16), from
// P's B-tile pairs (pack_p_pairs' order, the block's first pair at pb), as
// the A tiles of the products with V's rows, one per 16 keys, 256 32-bit
// pairs each: P[r][c] in the low half of pair c of row r, zero in the high
// half, then the same with the halves swapped (both parities: 2 tiles per
// 16 keys); or with `halves`, rows 0-7 the first way and rows 8-15 the
// second (1 tile).  The pairs past `keys` up to the next 32 are read (the
// softmax wrote them, zeros) and dropped.
inline void spread_probabilities(const std::uint32_t* pb, int keys, bool halves, std::uint32_t* spread) {
  const int tiles_per_16 = halves ? 1 : 2;
  for (int c0 = 0; c0 < keys; c0 += 32) {
    __m512i r[16];
    for (int p = 0; p < 16; ++p) r[p] = _mm512_loadu_si512(pb + std::int64_t(c0 / 2 + p) * 16);
    transpose_16x16_epi32(r);  // r[row]: P[row][c0 .. c0 + 31] in bf16
    for (int part = 0; part < 2 && c0 + 16 * part < keys; ++part) {
      std::uint32_t* out = spread + std::int64_t(c0 / 16 + part) * tiles_per_16 * 256;
      for (int row = 0; row < (halves ? 8 : 16); ++row) {
        const __m256i p16 = part == 0 ? _mm512_castsi512_si256(r[row]) : _mm512_extracti64x4_epi64(r[row], 1);
        const __m512i low = _mm512_cvtepu16_epi32(p16);
        _mm512_store_si512(out + row * 16, low);
        _mm512_store_si512(out + (halves ? (8 + row) * 16 : 256 + row * 16), _mm512_slli_epi32(low, 16));
      }
    }
  }
}

// The tile loop of amx_accumulate_rows: C tiles 0 .. N-1 (+)= the spread
// A tiles x V's rows, for N of 32 dims each (halves: one C tile a 32 dims)
// or N / 2 (both parities: two C tiles a 32 dims, the even dims' first).
template <int N, bool kHalves>
inline void rows_products(const std::uint32_t* spread, int keys, const TileRows& v, int c0, int d_bytes,
                          KvLineStream* next, int share) {
  static_assert(N >= 1 && N <= 4 && (kHalves || N % 2 == 0));
  const std::int64_t v_row_bytes = v.row_bytes;
  for (int c = 0; c < keys; c += 16) {
    const char* vc = v.row(c0 + c) + d_bytes;
    if constexpr (kHalves) {
      FA_TILE_LOAD(4, spread + std::int64_t(c / 16) * 256, 64);
      FA_TILE_LOAD(6, vc, v_row_bytes);
      FA_TILE_DOT(0, 4, 6);
      if (next) next->issue(share);
      if constexpr (N > 1) {
        FA_TILE_LOAD(7, vc + 64, v_row_bytes);
        FA_TILE_DOT(1, 4, 7);
        if (next) next->issue(share);
      }
      if constexpr (N > 2) {
        FA_TILE_LOAD(6, vc + 128, v_row_bytes);
        FA_TILE_DOT(2, 4, 6);
        if (next) next->issue(share);
      }
      if constexpr (N > 3) {
        FA_TILE_LOAD(7, vc + 192, v_row_bytes);
        FA_TILE_DOT(3, 4, 7);
        if (next) next->issue(share);
      }
    } else {
      FA_TILE_LOAD(4, spread + std::int64_t(c / 16) * 512, 64);
      FA_TILE_LOAD(5, spread + std::int64_t(c / 16) * 512 + 256, 64);
      FA_TILE_LOAD(6, vc, v_row_bytes);
      FA_TILE_DOT(0, 4, 6);
      FA_TILE_DOT(1, 5, 6);
      if (next) next->issue(share);
      if constexpr (N > 2) {
        FA_TILE_LOAD(7, vc + 64, v_row_bytes);
        FA_TILE_DOT(2, 4, 7);
        FA_TILE_DOT(3, 5, 7);
        if (next) next->issue(share);
      }
    }
  }
}

// rows_products for fp16's two pieces: P's spread hi and lo tiles
// (`spread_lo` pairs after the hi ones) against V's hi rows, and P's hi
// tiles against V's lo rows (`v_lo` bytes after the hi ones): Phi·Vhi +
// Plo·Vhi + Phi·Vlo.  With `halves`, C tile j takes the 32 dims from 32 j
// (N of them); else C tiles 2 j and 2 j + 1 take the even and odd dims of
// 32-dim block j (N / 2 blocks).
#define FA_PIECES_HALF_BLOCK(C, J)                                  \
  FA_TILE_LOAD(6, vc + (J) * 64, v_row_bytes);                      \
  FA_TILE_DOT(C, 4, 6);                                             \
  FA_TILE_DOT(C, 5, 6);                                             \
  FA_TILE_LOAD(7, vc + v_lo + (J) * 64, v_row_bytes);               \
  FA_TILE_DOT(C, 4, 7);                                             \
  if (next) next->issue(share)
template <int N, bool kHalves>
inline void rows_products_pieces(const std::uint32_t* spread, std::int64_t spread_lo, int keys, const char* v,
                                 std::int64_t v_lo, std::int64_t v_row_bytes, KvLineStream* next, int share) {
  static_assert(N >= 1 && N <= 4 && (kHalves || N % 2 == 0));
  for (int c = 0; c < keys; c += 16) {
    const char* vc = v + std::int64_t(c) * v_row_bytes;
    if constexpr (kHalves) {
      const std::uint32_t* a = spread + std::int64_t(c / 16) * 256;
      FA_TILE_LOAD(4, a, 64);
      FA_TILE_LOAD(5, a + spread_lo, 64);
      FA_PIECES_HALF_BLOCK(0, 0);
      if constexpr (N > 1) { FA_PIECES_HALF_BLOCK(1, 1); }
      if constexpr (N > 2) { FA_PIECES_HALF_BLOCK(2, 2); }
      if constexpr (N > 3) { FA_PIECES_HALF_BLOCK(3, 3); }
    } else {
      const std::uint32_t* a = spread + std::int64_t(c / 16) * 512;
      // P's hi pieces (even and odd halves) against V's hi and lo rows.
      FA_TILE_LOAD(4, a, 64);
      FA_TILE_LOAD(5, a + 256, 64);
      FA_TILE_LOAD(6, vc, v_row_bytes);
      FA_TILE_DOT(0, 4, 6);
      FA_TILE_DOT(1, 5, 6);
      FA_TILE_LOAD(7, vc + v_lo, v_row_bytes);
      FA_TILE_DOT(0, 4, 7);
      FA_TILE_DOT(1, 5, 7);
      if (next) next->issue(share);
      if constexpr (N > 2) {
        FA_TILE_LOAD(6, vc + 64, v_row_bytes);
        FA_TILE_DOT(2, 4, 6);
        FA_TILE_DOT(3, 5, 6);
        FA_TILE_LOAD(7, vc + v_lo + 64, v_row_bytes);
        FA_TILE_DOT(2, 4, 7);
        FA_TILE_DOT(3, 5, 7);
        if (next) next->issue(share);
      }
      // P's lo pieces against V's hi rows.
      FA_TILE_LOAD(4, a + spread_lo, 64);
      FA_TILE_LOAD(5, a + spread_lo + 256, 64);
      FA_TILE_LOAD(6, vc, v_row_bytes);
      FA_TILE_DOT(0, 4, 6);
      FA_TILE_DOT(1, 5, 6);
      if constexpr (N > 2) {
        FA_TILE_LOAD(7, vc + 64, v_row_bytes);
        FA_TILE_DOT(2, 4, 7);
        FA_TILE_DOT(3, 5, 7);
      }
    }
  }
}
#undef FA_PIECES_HALF_BLOCK

// O[r][d] (+)= sum_c P[r][c] V[c][d] for r < width, d < D, c < cols (a
// multiple of 16), in RowTiles' order (O = the sum, without reading it, when
// `fresh`); V's bf16 rows where they lie (as K's in amx_scores_rows); P
// in pack_p_pairs' order (ldp pairs a row block), spread `chunk` keys at a
// time (a multiple of 32) into `spread` (chunk * 32 32-bit pairs, 64-byte
// aligned).
// With fp16's two pieces (kP = 2): V's widened rows contiguous from
// v.first, its lo rows `v_lo` bytes after its hi ones, P's lo pairs `p_lo`
// after its hi ones, and `spread` holding both pieces' tiles (twice the
// room).
template <int kP>
inline void amx_accumulate_rows(const TileRows& v, std::int64_t v_lo, const std::uint32_t* pb,
                                std::int64_t p_lo, int ldp, std::uint32_t* spread, int chunk, const RowTiles& o, int cols,
                                int width, bool fresh, KvLineStream* next) {
  const int D = o.D;
  const std::int64_t v_row_bytes = v.row_bytes;  // fp16's pieces: widened, contiguous
  // C tiles a pass: four of 32 dims each (halves), or two 32-dim blocks'
  // even and odd tiles.
  const int pass_dims = o.halves ? 128 : 64;
  // The lo piece's tiles after the hi ones' (spread_probabilities' layout).
  const std::int64_t spread_lo = std::int64_t(chunk / 16) * (o.halves ? 256 : 512);
  // A share of the next tile's lines per 32 dims of a 16-key step.
  const int share = next ? next->third_per_step((width / 16) * (cols / 16) * ((D + 31) / 32)) : 0;
  for (int rb = 0; rb < width / 16; ++rb) {
    for (int c0 = 0; c0 < cols; c0 += chunk) {
      const int keys = cols - c0 < chunk ? cols - c0 : chunk;
      spread_probabilities(pb + (std::int64_t(rb) * ldp + c0 / 2) * 16, keys, o.halves, spread);
      if constexpr (kP == 2) {
        spread_probabilities(pb + p_lo + (std::int64_t(rb) * ldp + c0 / 2) * 16, keys, o.halves, spread + spread_lo);
      }
      const bool zero = fresh && c0 == 0;
      for (int d0 = 0; d0 < D; d0 += pass_dims) {
        const int blocks = (D - d0 < pass_dims ? D - d0 : pass_dims) / 32;
        const int n = o.halves ? blocks : 2 * blocks;  // C tiles, 256 floats apart from the first
        float* c = o.at(rb * 16, d0 / 32, 0);
        if (zero) {
          FA_TILE_ZERO(0);
          FA_TILE_ZERO(1);
          FA_TILE_ZERO(2);
          FA_TILE_ZERO(3);
        } else {
          FA_TILE_LOAD(0, c, 64);
          if (n > 1) FA_TILE_LOAD(1, c + 256, 64);
          if (n > 2) FA_TILE_LOAD(2, c + 512, 64);
          if (n > 3) FA_TILE_LOAD(3, c + 768, 64);
        }
        if constexpr (kP == 2) {
          const char* vd = v.first + std::int64_t(c0) * v_row_bytes + d0 * 2;
          if (o.halves) {
            switch (n) {
              case 1: rows_products_pieces<1, true>(spread, spread_lo, keys, vd, v_lo, v_row_bytes, next, share); break;
              case 2: rows_products_pieces<2, true>(spread, spread_lo, keys, vd, v_lo, v_row_bytes, next, share); break;
              case 3: rows_products_pieces<3, true>(spread, spread_lo, keys, vd, v_lo, v_row_bytes, next, share); break;
              default: rows_products_pieces<4, true>(spread, spread_lo, keys, vd, v_lo, v_row_bytes, next, share); break;
            }
          } else if (n == 2) {
            rows_products_pieces<2, false>(spread, spread_lo, keys, vd, v_lo, v_row_bytes, next, share);
          } else {
            rows_products_pieces<4, false>(spread, spread_lo, keys, vd, v_lo, v_row_bytes, next, share);
          }
        } else if (o.halves) {
          switch (n) {
            case 1: rows_products<1, true>(spread, keys, v, c0, d0 * 2, next, share); break;
            case 2: rows_products<2, true>(spread, keys, v, c0, d0 * 2, next, share); break;
            case 3: rows_products<3, true>(spread, keys, v, c0, d0 * 2, next, share); break;
            default: rows_products<4, true>(spread, keys, v, c0, d0 * 2, next, share); break;
          }
        } else if (n == 2) {
          rows_products<2, false>(spread, keys, v, c0, d0 * 2, next, share);
        } else {
          rows_products<4, false>(spread, keys, v, c0, d0 * 2, next, share);
        }
        FA_TILE_STORE(0, c, 64);
        if (n > 1) FA_TILE_STORE(1, c + 256, 64);
        if (n > 2) FA_TILE_STORE(2, c + 512, 64);
        if (n > 3) FA_TILE_STORE(3, c + 768, 64);
      }
    }
  }
}

// O *= alpha row by row, in RowTiles' order, for the rows < width;
// skipped when every row's max stood still.
inline void rescale_rows(const Workspace& w, const RowTiles& o, int width) {
  if (!alpha_moved(w, width / 16)) return;
  for (int r = 0; r < (o.halves ? 8 : width); ++r) {
    const __m512 a = _mm512_set1_ps(w.alpha[r]);
    for (int b = 0; b < o.D / 32; ++b) {
      for (int parity = 0; parity < 2; ++parity) {
        float* x = o.at(r, b, parity);
        _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), a));
      }
    }
  }
}

// The epilogue of O in RowTiles' order: each row's even and odd dims
// interleaved back, divided by the row's denominator, and written as
// write_pair_outputs writes (or as the split-KV partials); head_dim a
// multiple of 32.
template <DType DT>
inline void write_row_outputs(const AttentionJob& job, const Workspace& w, const TileItem& it, const RowTiles& o) {
  alignas(64) static constexpr std::int32_t kLow[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
  alignas(64) static constexpr std::int32_t kHigh[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i low = _mm512_load_si512(kLow), high = _mm512_load_si512(kHigh);
  const float out_scale = output_scale(job, it.h);
  // visit(d0, dims d0 .. d0 + 15, dims d0 + 16 .. d0 + 31) of row r, normalized.
  auto row_dims = [&](int r, auto&& visit) {
    const __m512 den = _mm512_set1_ps(row_denominator(w.l[r]) / out_scale);
    for (int b = 0; b < o.D / 32; ++b) {
      const __m512 even = _mm512_loadu_ps(o.at(r, b, 0)), odd = _mm512_loadu_ps(o.at(r, b, 1));
      visit(b * 32, _mm512_div_ps(_mm512_permutex2var_ps(even, low, odd), den),
            _mm512_div_ps(_mm512_permutex2var_ps(even, high, odd), den));
    }
  };
  if (job.num_splits > 1) {
    for (int r = 0; r < it.rows; ++r) {
      const std::int64_t at = partial_row(job, it, r);
      float* po = job.partial_o + at * o.D;
      row_dims(r, [&](int d0, __m512 lo, __m512 hi) {
        _mm512_storeu_ps(po + d0, lo);
        _mm512_storeu_ps(po + d0 + 16, hi);
      });
      job.partial_lse[at] = row_lse(w.m[r], w.l[r]);
    }
    return;
  }
  with_output_dtype<DT>(job, [&]<DType ODT>() {
    auto* obase = static_cast<Elem<ODT>*>(job.o);
    for (int r = 0; r < it.rows; ++r) {
      Elem<ODT>* out = obase + o_row_offset(job, it, r);
      row_dims(r, [&](int d0, __m512 lo, __m512 hi) {
        if constexpr (ODT == DType::kF32) {
          _mm512_storeu_ps(out + d0, lo);
          _mm512_storeu_ps(out + d0 + 16, hi);
        } else if constexpr (ODT == DType::kBF16) {
          _mm512_storeu_si512(out + d0, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
        } else {
          constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + d0), _mm512_cvtps_ph(lo, kRound));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + d0 + 16), _mm512_cvtps_ph(hi, kRound));
        }
      });
    }
  });
  write_tile_lse(job, w, it);
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
  // bf16 K and V read as rows where they lie, O held in row tiles (above).
  static constexpr bool kReadsKvRows = true;
  // fp16 read as rows too, each tile widened into two bf16 pieces a value
  // (kP = 2: k_lo / v_lo bytes from each hi row to its lo row, q_lo / p_lo
  // pairs from each hi piece to its lo piece; the widened rows contiguous).
  template <int kP>
  static void scores_rows(const TileRows& k, std::int64_t k_lo, const std::uint32_t* qb, std::int64_t q_lo, int tq,
                          int D, int cols, int width, float* st, const KeySpan* spans, KvLineStream* next) {
    if constexpr (kP == 2) {
      amx_scores_rows_pieces(k.first, k_lo, k.row_bytes, qb, q_lo, tq, D, cols, width, st, spans, next);
    } else {
      amx_scores_rows(k, qb, tq, D, cols, width, st, spans, next);
    }
  }
  template <int kP>
  static void accumulate_rows(const TileRows& v, std::int64_t v_lo, const std::uint32_t* pb, std::int64_t p_lo, int ldp,
                              std::uint32_t* spread, int chunk, const RowTiles& o, int cols, int width, bool fresh,
                              KvLineStream* next) {
    amx_accumulate_rows<kP>(v, v_lo, pb, p_lo, ldp, spread, chunk, o, cols, width, fresh, next);
  }
  // An int8 cache's K codes read where they lie (above).
  static void scores_rows_i8(const TileRows& k, const std::uint8_t* q_hi, const std::uint8_t* q_lo, int D, int cols,
                             std::int32_t* s_hi, std::int32_t* s_lo, std::int64_t s_stride, KvLineStream* next) {
    amx_scores_rows_i8(k, q_hi, q_lo, D, cols, s_hi, s_lo, s_stride, next);
  }
  static void rescale_rows(const Workspace& w, const RowTiles& o, int width) { fa::FA_KERNEL_NS::rescale_rows(w, o, width); }
  template <DType DT>
  static void write_rows(const AttentionJob& job, const Workspace& w, const TileItem& it, const RowTiles& o) {
    write_row_outputs<DT>(job, w, it, o);
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
