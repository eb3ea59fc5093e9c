// The tile path over bf16 pair layouts, shared by the two engines that
// multiply 32-bit pairs of bf16: the AMX tile unit (TDPBF16PS, amx path,
// amx_tile_path.h) and AVX512_BF16's VDPBF16PS (avx512bf16 path,
// bf16_dot_path.h).  Included by engines.h inside the path's namespace
// (FA_HAVE_BF16_PAIRS), after the helpers it shares with run_tile: the same
// item, masking, online softmax, dropout and epilogue; the operands are
// packed into pair layouts and the two products go to the engine.
//
//   Sᵀ[keys][rows] = K · Qᵀ      A: K in 16-key x 32-dim blocks, packed per K/V tile
//                                B: Qᵀ in pair layout, packed once per item
//   Oᵀ[dims][rows] += Vᵀ · Pᵀ    A: Vᵀ pairs in 16-dim x 32-key blocks, packed per K/V tile
//                                B: Pᵀ in pair layout, converted from the fp32 P
//
// Pair layout: B[k / 2][n] is the 32-bit pair (X[n][k], X[n][k + 1]), the
// operand both instructions multiply (sum over k of A[m][k] * X[n][k] into
// C[m][n]).  The A blocks are AMX A tiles (16 rows of 64 bytes); VDPBF16PS
// broadcasts one 32-bit pair of them at a time.  The softmax and the
// accumulators stay in fp32; like FlashAttention on GPUs, P is rounded to
// bf16 for the second product (the accuracy rule's same-dtype yardstick
// rounds it the same way).
//
// An engine is a struct of static members (AmxProducts, DotProducts):
//   kHandles<DT>        whether it runs this dtype (fp16 in two pieces: amx)
//   kOutDimStep         the dims of Oᵀ the second product computes at a time
//                       (head_dim is padded to it there)
//   kReduceStep         the dims Q·Kᵀ sums over at a time (head_dim is padded
//                       to it there; the operands' layout to 32)
//   kRowStep            the query rows the products take at a time: `width`
//                       below is the tile's rows rounded up to it (the rows
//                       past them come out as a zero Q's)
//   kOwnUnit            whether the products run on a unit beside the vector
//                       unit (AMX tiles), which FA3's pair schedule overlaps
//                       with the softmax
//   begin(), end()      around an item's products (the tile configuration)
//   scores<kP>(kp, k_lo, qb, q_lo, tq, D, reduce_dims, cols_pad, width, st, spans, next)
//       Sᵀ[c][r] = sum_d K[c][d] Q[r][d] for d < reduce_dims (head_dim
//       rounded up to kReduceStep; the rest are zero), c < cols_pad, r < width; K in
//       A-block order (pack_k_tiles; lo piece k_lo elements on), Qᵀ in
//       B-block order (pack_q_pairs; q_lo on), Sᵀ rows tq floats apart
//   accumulate<kP>(vt, ldvt, v_lo, pb, ldp, p_lo, tq, D, cols_pad, width, ot, fresh, spans, next)
//       Oᵀ[d][r] (+)= sum_c Vᵀ[d][c] Pᵀ[c][r] for d < D, r < width, c <
//       cols_pad (Oᵀ = the sum, without reading it, when `fresh`); Vᵀ in
//       A-block order (pack_v_transposed, ldvt = tile_kv / 2), P in B-block
//       order (pack_p_pairs, ldp = tile_kv / 2)
//   `next` (may be null) is the next K/V tile's lines, of which each
//   product issues a third (KvLineStream).  `spans` (may be null: every
//   key may attend): per vector of 16 query rows, the keys of the tile its
//   rows' window lets in (tile_key_spans, engines.h); an engine may
//   skip the others: scores may leave them unwritten (mask_tile sets every
//   score outside the window to -inf on each tile that has spans), and
//   accumulate may drop them from the sum (their probabilities are 0).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>

#include "two_block_softmax.h"

namespace fa::FA_KERNEL_NS {

// The pair path's scratch: the common workspace, then P in bf16 pairs
// (tile_kv / 2 x tile_q 32-bit pairs, twice for fp16's two pieces) after it,
// and for fp16 V's tile as rows of two bf16 pieces (fp16_v_rows: K's take
// the K buffer, PairTileSteps::widen_fp16_rows; V's the room after P, as
// the V buffer holds P spread for the products).
inline std::size_t pair_workspace_floats(int tq, int tkv, int D, DType dtype) {
  return Workspace::floats(tq, tkv, D) + pad16(std::size_t(tkv) * tq) +
         (dtype == DType::kF16 ? pad16(std::size_t(tkv) * D) : 0);
}
inline std::uint32_t* pairs_buffer(const Workspace& w, int tq) {
  return reinterpret_cast<std::uint32_t*>(w.alpha + pad16(tq));
}
inline std::uint16_t* fp16_v_rows(const Workspace& w, int tq, int tkv) {
  return reinterpret_cast<std::uint16_t*>(w.alpha + pad16(tq) + pad16(std::size_t(tkv) * tq));
}

// The quantized caches this path's build widens into bf16 rows tile by tile
// (FP8 and int8, by byte tables, which need AVX512_VBMI).
inline bool widens_to_bf16_rows([[maybe_unused]] DType kv_dtype) {
#if defined(__AVX512VBMI__)
  return is_fp8(kv_dtype) || kv_dtype == DType::kI8;
#else
  return false;
#endif
}

// Whole blocks of keys and rows: 32 keys per A block of the second product,
// 16 rows per B block.  Other tiles, and quantized K/V caches (int8, FP8),
// run the AVX-512 loop, but for pair_path_runs' case below.
// Any head_dim: see pair_dims.
inline bool pair_tile_path_fits(const AttentionJob& job) {
  return job.kv_dtype == job.dtype && job.tile_kv % 32 == 0 && job.tile_q % 16 == 0;
}

// Whether the pair path runs a job's Q tiles on `Engine`: where it fits, and
// for a quantized cache (FP8, int8) with bf16 Q in a packed GQA tile on an
// engine that reads K/V as rows (the tile unit), each K/V tile widened
// exactly into bf16 rows (PairTileSteps::widen_fp8_rows, widen_int8_rows) at
// head_dim a multiple of 32.  The planner packs those tiles where they beat
// the row path (detail::tile_reads_kv_rows).
template <class Engine>
inline bool pair_path_runs(const AttentionJob& job) {
  if (pair_tile_path_fits(job)) return true;
  return Engine::kReadsKvRows && job.pack_tile && job.dtype == DType::kBF16 && widens_to_bf16_rows(job.kv_dtype) &&
         job.head_dim % 32 == 0 && job.tile_kv % 32 == 0 && job.tile_q % 16 == 0;
}

// The pair path's head_dim: the given one rounded up to the engines' step of
// 32 dims (an A block of the first product; two 16-dim blocks of the
// second), the padding zero in Q, K and V as they are packed.  The products
// then cost up to 31 dims more, and stay on the engine (a head_dim off the
// step ran the FMA loop at half the speed).  Oᵀ has the padded rows, which
// the epilogue does not write.
inline int pair_dims(std::int64_t head_dim) { return round_up_dims(head_dim, 32); }

// In-register transpose of a 16 x 16 block of 32-bit elements.
inline void transpose_16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // u[4k + j], 128-bit lane L: column 4L + j of rows 4k .. 4k + 3.
  __m512i u[16];
  for (int k = 0; k < 4; ++k) {
    u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i lo_a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), lo_b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i hi_a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE), hi_b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    r[j] = _mm512_shuffle_i32x4(lo_a, lo_b, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(lo_a, lo_b, 0xDD);
    r[8 + j] = _mm512_shuffle_i32x4(hi_a, hi_b, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(hi_a, hi_b, 0xDD);
  }
}

// --- operand pieces ---------------------------------------------------
// bf16 inputs are one bf16 piece.  fp16 inputs are split exactly into two,
// x = hi + lo (hi = x rounded to bf16, lo = the rest: an fp16 significand
// has 11 bits, two bf16 pieces 16), and each product becomes three,
// hi·hi + hi·lo + lo·hi (the dropped lo·lo is below 2^-16 of the product):
// fp16 on a bf16 engine without ever rounding fp16 inputs to bf16.  The
// probabilities are split the same way for the second product.
// FP8 inputs (FA3) are one piece too: every e4m3 and e5m2 value is a bf16
// (3 and 2 mantissa bits, exponents well inside bf16's range), so they are
// widened exactly, and their descale factors stay in the score scale and the
// output divisor as on the other paths.
template <DType DT>
inline constexpr int kPieces = DT == DType::kF16 ? 2 : 1;

// Two fp32 vectors (elements 0-15 and 16-31) as bf16 hi and lo pieces, 32
// 16-bit values each in element order.
inline void split_f32(__m512 a, __m512 b, __m512i* hi, __m512i* lo) {
  const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  const __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
  const __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
  *hi = h;
  *lo = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)));
}

// 32 consecutive input elements as bf16 pieces (lo untouched for bf16 and
// FP8).
template <DType DT>
inline void load_pieces32(const Elem<DT>* src, __m512i* hi, __m512i* lo) {
  if constexpr (DT == DType::kBF16) {
    *hi = _mm512_loadu_si512(src);
  } else if constexpr (is_fp8(DT)) {
    *hi = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(fp8x16_to_f32<DT>(src + 16), fp8x16_to_f32<DT>(src)));
  } else {
    split_f32(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))),
              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16))), hi, lo);
  }
}

// 16 consecutive input elements as bf16 pieces, zero-extended to 32 bits.
template <DType DT>
inline void load_pieces16(const Elem<DT>* src, __m512i* hi, __m512i* lo) {
  if constexpr (DT == DType::kBF16) {
    *hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  } else if constexpr (is_fp8(DT)) {
    *hi = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(fp8x16_to_f32<DT>(src))));
  } else {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
    const __m512i h32 = _mm512_cvtepu16_epi32(h);
    *hi = h32;
    *lo = _mm512_cvtepu16_epi32(
        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(h32, 16))))));
  }
}

// N (32 or 16) elements as load_pieces32 / load_pieces16 take them, of
// which only the first n are read and the rest are zero: a row's last block
// when head_dim is off the pair step (0 is +0 in every dtype).
template <DType DT, int N>
inline void load_pieces_n(const Elem<DT>* src, int n, __m512i* hi, __m512i* lo) {
  static_assert(N == 32 || N == 16);
  auto load = [&](const Elem<DT>* from) {
    if constexpr (N == 32) load_pieces32<DT>(from, hi, lo); else load_pieces16<DT>(from, hi, lo);
  };
  if (n >= N) return load(src);  // (no buffer to clear on the common path)
  alignas(64) Elem<DT> buf[N] = {};
  if (n > 0) std::memcpy(buf, src, sizeof(Elem<DT>) * n);
  load(buf);
}

// --- packing -------------------------------------------------------------
// D is the padded head_dim (pair_dims), `dims` the given one: elements from
// `dims` to D are zero.
// Every packed operand holds its hi piece at the pointer given and, for fp16,
// its lo piece `lo` elements further.

// Qᵀ in pair layout, one B tile per 16 rows and 32 dims laid out
// contiguously: the pair (Q[r][2p], Q[r][2p + 1]) at
// qb[(r / 16 * (D / 2) + p) * 16 + r % 16]; rows from `rows` on are zero.
// Row r is row r % head_rows of head r / head_rows (a packed tile's heads
// in turn; head_rows = rows for one head).
template <DType DT>
inline void pack_q_pairs(const Elem<DT>* q, std::int64_t q_row_stride, std::int64_t q_head_stride, int head_rows,
                         int rows, int width, int dims, int D, std::uint32_t* qb, std::int64_t lo) {
  for (int r0 = 0; r0 < width; r0 += 16) {
    const Elem<DT>* row[16];
    for (int r = 0; r < 16 && r0 + r < rows; ++r) {
      row[r] = q + tile_row_offset(r0 + r, head_rows, q_row_stride, q_head_stride);
    }
    for (int d0 = 0; d0 < D; d0 += 32) {
      __m512i hi_block[16], lo_block[16];
      for (int r = 0; r < 16; ++r) {
        hi_block[r] = lo_block[r] = _mm512_setzero_si512();
        if (r0 + r < rows) load_pieces_n<DT, 32>(row[r] + d0, dims - d0, &hi_block[r], &lo_block[r]);
      }
      std::uint32_t* out = qb + (std::int64_t(r0 / 16) * (D / 2) + d0 / 2) * 16;
      transpose_16x16_epi32(hi_block);
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + p * 16, hi_block[p]);
      if constexpr (kPieces<DT> == 2) {
        transpose_16x16_epi32(lo_block);
        for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + lo + p * 16, lo_block[p]);
      }
    }
  }
}

// A byte address as the elements of DT (TileRows' runs, for the packing).
template <DType DT>
inline const Elem<DT>* elems(const char* p) {
  return reinterpret_cast<const Elem<DT>*>(p);
}

// A K/V tile's keys in A-tile order: the 16 keys x 32 dims of block (c / 16,
// d / 32) contiguous (16 rows of 64 bytes) at kp[(c / 16 * (D / 32) + d / 32) * 512],
// keys from `cols` to cols_pad zero.  Read in place, K rows lie a whole
// token apart (4 KiB for 16 heads of 128 in BSH), so a tile's 16 rows would
// fall in one L1 set.  Rows from `split` on start at `second` (a paged
// cache's tile over two blocks, kv_tiles.h).
template <DType DT>
inline void pack_k_tiles(const Elem<DT>* k, std::int64_t k_row_stride, int cols, int cols_pad, int dims, int D,
                         std::uint16_t* kp, std::int64_t lo, const Elem<DT>* second = nullptr, int split = 1 << 30) {
  for (int c = 0; c < cols_pad; ++c) {
    const Elem<DT>* row =
        c < split ? k + std::int64_t(c) * k_row_stride : second + std::int64_t(c - split) * k_row_stride;
    std::uint16_t* out = kp + (std::int64_t(c / 16) * (D / 32)) * 512 + (c % 16) * 32;
    for (int d0 = 0; d0 < D; d0 += 32) {
      __m512i hi = _mm512_setzero_si512(), lo_piece = _mm512_setzero_si512();
      if (c < cols) load_pieces_n<DT, 32>(row + d0, dims - d0, &hi, &lo_piece);
      _mm512_storeu_si512(out + (d0 / 32) * 512, hi);
      if constexpr (kPieces<DT> == 2) _mm512_storeu_si512(out + lo + (d0 / 32) * 512, lo_piece);
    }
  }
}

// Vᵀ of one K/V tile as 32-bit pairs (V[c][d], V[c + 1][d]), in A-tile
// order: the 16 dims x 32 keys of block (d / 16, c / 32) contiguous (16 rows
// of 64 bytes) at vt[(d / 16 * (ldvt / 16) + c / 32) * 256], ldvt = tile_kv / 2;
// keys from `cols` to cols_pad are zero (their probabilities are zero too,
// and 0 * garbage could be NaN).  Rows from `split` (even) on start at
// `second`, as pack_k_tiles takes them.
template <DType DT>
inline void pack_v_transposed(const Elem<DT>* v, std::int64_t v_row_stride, int cols, int cols_pad, int dims, int D,
                              std::uint32_t* vt, int ldvt, std::int64_t lo, const Elem<DT>* second = nullptr,
                              int split = 1 << 30) {
  auto row = [&](int c) {
    return c < split ? v + std::int64_t(c) * v_row_stride : second + std::int64_t(c - split) * v_row_stride;
  };
  for (int c0 = 0; c0 < cols_pad; c0 += 32) {
    int d0 = 0;
    if constexpr (DT == DType::kBF16) {
      // 32 whole keys x 32 dims at a time: VPUNPCKLWD / VPUNPCKHWD pair two
      // key rows as loaded (no widening, shift or OR), leaving in each
      // 128-bit lane L the dims 8L .. 8L + 3 (low) and 8L + 4 .. 8L + 7
      // (high); one transpose each, and every transposed row is stored at
      // the dim it holds.  (Vᵀ pairs were 20% of a 16-row tile's time.)
      if (c0 + 32 <= cols) {
        for (; d0 + 32 <= dims; d0 += 32) {
          for (int half = 0; half < 2; ++half) {
            __m512i block[16];
            for (int p = 0; p < 16; ++p) {
              const __m512i even = _mm512_loadu_si512(row(c0 + 2 * p) + d0);
              const __m512i odd = _mm512_loadu_si512(row(c0 + 2 * p + 1) + d0);
              block[p] = half ? _mm512_unpackhi_epi16(even, odd) : _mm512_unpacklo_epi16(even, odd);
            }
            transpose_16x16_epi32(block);
            for (int e = 0; e < 16; ++e) {
              const int d = d0 + 8 * (e / 4) + 4 * half + e % 4;
              _mm512_storeu_si512(vt + (std::int64_t(d / 16) * (ldvt / 16) + c0 / 32) * 256 + (d % 16) * 16, block[e]);
            }
          }
        }
      }
    }
    for (; d0 < D; d0 += 16) {
      __m512i hi_block[16], lo_block[16];
      for (int p = 0; p < 16; ++p) {
        const int c = c0 + 2 * p;
        __m512i even_hi = _mm512_setzero_si512(), even_lo = even_hi, odd_hi = even_hi, odd_lo = even_hi;
        if (c < cols) load_pieces_n<DT, 16>(row(c) + d0, dims - d0, &even_hi, &even_lo);
        if (c + 1 < cols) load_pieces_n<DT, 16>(row(c + 1) + d0, dims - d0, &odd_hi, &odd_lo);
        hi_block[p] = _mm512_or_si512(even_hi, _mm512_slli_epi32(odd_hi, 16));
        lo_block[p] = _mm512_or_si512(even_lo, _mm512_slli_epi32(odd_lo, 16));
      }
      transpose_16x16_epi32(hi_block);
      std::uint32_t* out = vt + (std::int64_t(d0 / 16) * (ldvt / 16) + c0 / 32) * 256;
      for (int d = 0; d < 16; ++d) _mm512_storeu_si512(out + d * 16, hi_block[d]);
      if constexpr (kPieces<DT> == 2) {
        transpose_16x16_epi32(lo_block);
        for (int d = 0; d < 16; ++d) _mm512_storeu_si512(out + lo + d * 16, lo_block[d]);
      }
    }
  }
}

// The probabilities of keys c and c + 1 for 16 rows as one row of B-tile
// pairs (bf16, nearest even; for fp16 inputs a hi and a lo piece).
alignas(64) inline constexpr std::uint16_t kInterleavePairs[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                                   21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                                   11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
template <int kP>
inline void store_p_pairs(__m512 p0, __m512 p1, std::uint32_t* out, std::int64_t lo) {
  const __m512i idx = _mm512_load_si512(kInterleavePairs);
  if constexpr (kP == 1) {
    _mm512_storeu_si512(out, _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(p1, p0))));
  } else {
    __m512i hi, lo_piece;
    split_f32(p0, p1, &hi, &lo_piece);
    _mm512_storeu_si512(out, _mm512_permutexvar_epi16(idx, hi));
    _mm512_storeu_si512(out + lo, _mm512_permutexvar_epi16(idx, lo_piece));
  }
}

// Pᵀ [cols][tq] fp32 -> pairs, one B tile per 16 rows and 32 keys laid out
// contiguously (16 pair rows of 64 bytes): pair (c, c + 1) of row r at
// pb[(r / 16 * ldp + c / 2) * 16 + r % 16], ldp = tile_kv / 2.  Keys from
// `cols` to cols_pad are zero.
template <int kP>
inline void pack_p_pairs(const float* st, int cols, int cols_pad, int nvec, int tq, std::uint32_t* pb, int ldp,
                         std::int64_t lo) {
  for (int j = 0; j < nvec; ++j) {  // each row block's pairs written in order
    for (int c = 0; c < cols_pad; c += 2) {
      const __m512 p0 = c < cols ? _mm512_loadu_ps(st + std::int64_t(c) * tq + j * 16) : _mm512_setzero_ps();
      const __m512 p1 = c + 1 < cols ? _mm512_loadu_ps(st + std::int64_t(c + 1) * tq + j * 16) : _mm512_setzero_ps();
      store_p_pairs<kP>(p0, p1, pb + (std::int64_t(j) * ldp + c / 2) * 16, lo);
    }
  }
}

// The online softmax and pack_p_pairs in one pass over the tile (tiles
// without dropout): P never goes back to memory in fp32; each pair of keys
// is written straight into pack_p_pairs' B-tile order.  The same arithmetic
// as online_softmax_tile followed by pack_p_pairs (exp2 in fp32: an
// fp16 exp2 would be cheaper and P is rounded to bf16 anyway, but the row
// sums, and so the LSE, would carry fp16 rounding, measured above 1e-4).
// kHalfExp (fp16 inputs in an FA_MIXED_PRECISION_SOFTMAX=OFF build): exp2 in
// fp16 arithmetic, 32 rows per instruction (half_softmax.h).
// The running max is kept while a tile's scores exceed it by at most 2^8
// (two_block_softmax's slack): P <= 256 is exact enough in bf16 and fp32
// alike, and O is rescaled only when a row's max jumps (the fp32 exp2 takes
// x > 0; the fp16 one of an OFF build does not).
inline constexpr float kRescaleSlack = 8.0f;

// 2^x for the probabilities the second product takes as bf16 (or, for fp16
// inputs, as two bf16 pieces, 2^-16 of P): Vec::exp2's range reduction with
// a degree-4 polynomial fitted for least maximum relative error on
// [-0.5, 0.5] (2.7e-6 in fp32 Horner steps, against bf16's 3.9e-3 rounding
// and the LSE's 1e-4 bound), two FMAs a vector fewer than the degree-6 one
// the other softmaxes keep.  The row sums take the same values, so the
// weights stay normalized.
inline __m512 exp2_probabilities(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  const __m512 f = _mm512_reduce_ps(x, 0x08);  // x - round-to-nearest(x), exact
  const __m512 n = _mm512_sub_ps(x, f);
  __m512 p = _mm512_set1_ps(9.570102207e-03f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.591785908e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402474433e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931217909e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999992847e-01f));
  return _mm512_maskz_scalef_ps(normal, p, n);
}

// kKeyWeights: `key_weights` (an int8 cache's V scales, key c's at
// [c * weight_stride]) multiply each key's probabilities as they are
// packed, after the row sums took them, so P · V (of the cache's codes) is
// the product with the dequantized V.  (A template parameter: the check in
// the key loop cost an FP8 cache's decoding 6%.)
template <int kP, bool kHalfExp = false, bool kKeyWeights = false>
inline void softmax_to_pairs(const Workspace& w, int cols, int cols_pad, int nvec, int tq, float scale,
                             std::uint32_t* pb, int ldp, std::int64_t lo, KvLineStream* next = nullptr,
                             const float* key_weights = nullptr, std::int64_t weight_stride = 0) {
  // Per 8 keys of a row pair, or per 2 keys of a tile's only pair
  // (decoding): a burst of prefetches beyond the core's miss buffers stalls
  // the work behind it.
  const int keys_per_issue = nvec <= 2 ? 2 : 8;
  const int share = next ? next->third_per_step(((nvec + 1) / 2) * (cols_pad / keys_per_issue)) : 0;
  auto probabilities = [](__m512 xa, __m512 xb, __m512& pa, __m512& pbv) {
#if defined(FA_HAVE_AVX512FP16)
    if constexpr (kHalfExp) {
      exp2_half_pair(xa, xb, pa, pbv);
      return;
    }
#endif
    pa = exp2_probabilities(xa);
    pbv = exp2_probabilities(xb);
  };
  __m512 even_a, even_b;  // key c - 1's probabilities, waiting for key c
  two_block_softmax(w, cols, cols_pad, nvec, tq, scale, kHalfExp ? 0.0f : kRescaleSlack, probabilities,
                    [&](int j, bool pair, int c, __m512 pa, __m512 pbv) {
                      if (next && c % keys_per_issue == keys_per_issue - 1) next->issue(share);
                      if (kKeyWeights && c < cols) {
                        const __m512 weight = _mm512_set1_ps(key_weights[c * weight_stride]);
                        pa = _mm512_mul_ps(pa, weight);
                        pbv = _mm512_mul_ps(pbv, weight);
                      }
                      if (c % 2 == 0) {
                        even_a = pa;
                        even_b = pbv;
                        return;
                      }
                      std::uint32_t* out = pb + (std::int64_t(j) * ldp + c / 2) * 16;
                      store_p_pairs<kP>(even_a, pa, out, lo);
                      if (pair) store_p_pairs<kP>(even_b, pbv, out + std::int64_t(ldp) * 16, lo);
                    });
}

// softmax_to_pairs for a tile of at most 8 query rows (decoding at GQA
// 32/8 and 64/8: 4 and 8 rows a K/V head; bf16, kP = 1): the scores of
// 16 / R keys share one vector (R = 4 or 8 rows), where the 16-row vector
// of a key left 12 or 8 of its lanes idle through each exp2 (a fifth of
// 32/8 decoding's time).  The same bits as softmax_to_pairs: each score's
// max-subtracted value and exp2 are the same instructions on the same
// values, and each row's sum takes its keys in order.  P's pair rows are
// written whole, rows R to 15 zero (the products read 8 or 16); the state
// of rows R to 15 stands, their alpha 1.
template <int R, bool kKeyWeights = false>
inline void softmax_to_pairs_narrow(const Workspace& w, int cols, int cols_pad, int tq, float scale, std::uint32_t* pb,
                                    KvLineStream* next = nullptr, const float* key_weights = nullptr,
                                    std::int64_t weight_stride = 0) {
  static_assert(R == 4 || R == 8);
  constexpr int K = 16 / R;  // keys a vector
  const int share = next ? next->third_per_step(cols_pad / 2) * (K / 2) : 0;
  // Keys c .. c + K - 1, rows 0 .. R - 1 of each, the first R floats of each key's column.
  auto gather = [&](int c) {
    const float* at = w.st + std::int64_t(c) * tq;
    if constexpr (R == 8) {
      return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(at)), _mm256_loadu_ps(at + tq), 1);
    } else {
      __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(at));
      v = _mm512_insertf32x4(v, _mm_loadu_ps(at + tq), 1);
      v = _mm512_insertf32x4(v, _mm_loadu_ps(at + 2 * tq), 2);
      return _mm512_insertf32x4(v, _mm_loadu_ps(at + 3 * tq), 3);
    }
  };
  // The lanes of keys below `cols`.
  auto keys_below = [&](int c) -> __mmask16 {
    const int n = cols - c;
    return n >= K ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << (n * R)) - 1);
  };
  // Lane l of a vector is row l % R: a row's 16-lane value spread that way, and back.
  alignas(64) static constexpr std::int32_t kSpread[16] = {0, 1, 2, 3, R == 8 ? 4 : 0, R == 8 ? 5 : 1, R == 8 ? 6 : 2,
                                                           R == 8 ? 7 : 3, 0, 1, 2, 3, R == 8 ? 4 : 0, R == 8 ? 5 : 1,
                                                           R == 8 ? 6 : 2, R == 8 ? 7 : 3};
  const __m512i spread = _mm512_load_si512(kSpread);
  const __m512 vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(kNegInf), zero = _mm512_setzero_ps();
  const __mmask16 own = static_cast<__mmask16>((1u << R) - 1);
  __m512 tile_max = neg_inf;
  for (int c = 0; c < cols; c += K) tile_max = _mm512_mask_max_ps(tile_max, keys_below(c), tile_max, gather(c));
  // Fold the key groups: lanes 0 .. R - 1 hold each row's max.
  if constexpr (R == 4) tile_max = _mm512_max_ps(tile_max, _mm512_shuffle_f32x4(tile_max, tile_max, 0xB1));  // 128-bit neighbours
  tile_max = _mm512_max_ps(tile_max, _mm512_shuffle_f32x4(tile_max, tile_max, 0x4E));  // the two halves
  // The state update of two_block_softmax, rows 0 .. R - 1 (others -inf: unchanged).
  const __m512 m_old = _mm512_loadu_ps(w.m);
  __m512 m = _mm512_max_ps(m_old, _mm512_mul_ps(_mm512_mask_mov_ps(neg_inf, own, tile_max), vscale));
  m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(m, _mm512_add_ps(m_old, _mm512_set1_ps(kRescaleSlack)), _CMP_LE_OQ), m_old);
  const __m512 m_sub = Vec::zero_if_neg_inf(m);
  const __m512 neg = _mm512_permutexvar_ps(spread, _mm512_sub_ps(zero, m_sub));
  __m256 sum8 = _mm256_setzero_ps();  // R == 8
  __m128 sum4 = _mm_setzero_ps();     // R == 4
  alignas(64) static constexpr std::uint16_t kPairs8[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  alignas(64) static constexpr std::uint16_t kPairs4[16] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
  const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(R == 8 ? kPairs8 : kPairs4));
  for (int c = 0; c < cols_pad; c += K) {
    const __mmask16 live = keys_below(c);
    __m512 p = zero;
    if (live) p = _mm512_maskz_mov_ps(live, exp2_probabilities(_mm512_fmadd_ps(gather(c), vscale, neg)));
    if constexpr (R == 8) {
      sum8 = _mm256_add_ps(sum8, _mm512_castps512_ps256(p));
      sum8 = _mm256_add_ps(sum8, _mm512_extractf32x8_ps(p, 1));
    } else {
      sum4 = _mm_add_ps(sum4, _mm512_castps512_ps128(p));
      sum4 = _mm_add_ps(sum4, _mm512_extractf32x4_ps(p, 1));
      sum4 = _mm_add_ps(sum4, _mm512_extractf32x4_ps(p, 2));
      sum4 = _mm_add_ps(sum4, _mm512_extractf32x4_ps(p, 3));
    }
    if constexpr (kKeyWeights) {  // each key's weight over its R lanes (keys past cols read none)
      auto weight = [&](int k) { return key_weights[std::int64_t(c + k < cols ? c + k : 0) * weight_stride]; };
      __m512 wv;
      if constexpr (R == 8) {
        wv = _mm512_insertf32x8(_mm512_set1_ps(weight(0)), _mm256_set1_ps(weight(1)), 1);
      } else {
        wv = _mm512_insertf32x4(_mm512_set1_ps(weight(0)), _mm_set1_ps(weight(1)), 1);
        wv = _mm512_insertf32x4(wv, _mm_set1_ps(weight(2)), 2);
        wv = _mm512_insertf32x4(wv, _mm_set1_ps(weight(3)), 3);
      }
      p = _mm512_mask_mul_ps(p, live, p, wv);
    }
    // bf16 (nearest even), each pair of keys' values interleaved row by row:
    // one pair row (R == 8) or two (R == 4), zero past row R.
    const __m256i bf = _mm256_permutexvar_epi16(pairs, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)));
    std::uint32_t* out = pb + std::int64_t(c / 2) * 16;
    if constexpr (R == 8) {
      _mm512_storeu_si512(out, _mm512_zextsi256_si512(bf));
    } else {
      _mm512_storeu_si512(out, _mm512_zextsi128_si512(_mm256_castsi256_si128(bf)));
      _mm512_storeu_si512(out + 16, _mm512_zextsi128_si512(_mm256_extracti128_si256(bf, 1)));
    }
    if (next) next->issue(share);
  }
  const __m512 sum = R == 8 ? _mm512_castps256_ps512(sum8) : _mm512_castps128_ps512(sum4);
  const __m512 alpha = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), own, Vec::exp2(_mm512_sub_ps(m_old, m_sub)));
  _mm512_storeu_ps(w.alpha, alpha);
  _mm512_mask_storeu_ps(w.l, own, _mm512_fmadd_ps(_mm512_loadu_ps(w.l), alpha, sum));
  _mm512_mask_storeu_ps(w.m, own, m);
}

// Whether any of the first `blocks` x 16 rows' max moved this tile (its
// alpha is not 1): else O needs no rescale.
inline bool alpha_moved(const Workspace& w, int blocks) {
  __mmask16 moved = 0;
  for (int j = 0; j < blocks; ++j) moved |= _mm512_cmp_ps_mask(_mm512_loadu_ps(w.alpha + j * 16), _mm512_set1_ps(1.0f), _CMP_NEQ_UQ);
  return moved != 0;
}

// Oᵀ[d][r] *= alpha[r]; skipped when every row's max stood still (alpha 1),
// which is most tiles once the running max has settled.
inline void rescale_output(const Workspace& w, int D, int nvec, int tq) {
  if (!alpha_moved(w, nvec)) return;
  for (int d = 0; d < D; ++d) {
    float* row = w.ot + std::int64_t(d) * tq;
    for (int j = 0; j < nvec; ++j) {
      _mm512_storeu_ps(row + j * 16, _mm512_mul_ps(_mm512_loadu_ps(row + j * 16), _mm512_loadu_ps(w.alpha + j * 16)));
    }
  }
}

// write_tile_outputs in 16 x 16 blocks: Oᵀ transposed in registers, divided
// by the row sums (over V's descale factor for FP8 inputs), and stored 16
// values at a time in the output dtype (the input's; FP8's asks for fp32,
// fp16 or bf16), 16-bit ones rounded to nearest even.  Split-KV partials
// take the common epilogue.
template <DType DT>
inline void write_pair_outputs(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  if (job.num_splits > 1) {
    write_tile_outputs<DT>(job, w, it);
    return;
  }
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q;
  const float out_scale = output_scale(job, it.h);
  with_output_dtype<DT>(job, [&]<DType ODT>() {
    auto* obase = static_cast<Elem<ODT>*>(job.o);
    for (int r0 = 0; r0 < it.rows; r0 += 16) {
      const int n = it.rows - r0 < 16 ? it.rows - r0 : 16;
      for (int d0 = 0; d0 < D; d0 += 16) {
        __m512i block[16];
        for (int d = 0; d < 16; ++d) block[d] = _mm512_castps_si512(_mm512_loadu_ps(w.ot + std::int64_t(d0 + d) * tq + r0));
        transpose_16x16_epi32(block);  // block[r]: row r0 + r, dims d0 .. d0 + 15
        for (int r = 0; r < n; ++r) {
          const __m512 o =
              _mm512_div_ps(_mm512_castsi512_ps(block[r]), _mm512_set1_ps(row_denominator(w.l[r0 + r]) / out_scale));
          Elem<ODT>* out = obase + o_row_offset(job, it, r0 + r) + d0;
          // The row's last dims when head_dim is not a multiple of 16.
          const __mmask16 dims = D - d0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (D - d0)) - 1);
          if constexpr (ODT == DType::kF32) {
            _mm512_mask_storeu_ps(out, dims, o);
          } else if constexpr (ODT == DType::kBF16) {
            _mm256_mask_storeu_epi16(out, dims, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(o)));
          } else {
            _mm256_mask_storeu_epi16(out, dims, _mm512_cvtps_ph(o, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
          }
        }
      }
    }
  });
  write_tile_lse(job, w, it);
}

// O as an engine that reads K and V as rows holds it (amx_tile_path.h,
// AmxProducts::kReadsKvRows): in row tiles, 16 x 16 fp32 each: per 16 query
// rows and 32 dims, the even dims' tile and the odd dims'; or with at most
// 8 rows (`halves`), one tile per 32 dims, the even dims in rows 0-7 and
// the odd ones in rows 8-15.
struct RowTiles {
  float* ot;
  int D;
  bool halves;
  // Row r's dims 32 b + 2 n + parity, n = 0 ... 15.
  float* at(int r, int b, int parity) const {
    if (halves) return ot + std::int64_t(b) * 256 + (parity * 8 + r) * 16;
    return ot + ((std::int64_t(r / 16) * (D / 32) + b) * 2 + parity) * 256 + (r % 16) * 16;
  }
};

// Where an item's packed operands live in its scratch: Qᵀ pairs in Qᵀ's
// space, K in the K buffer, Vᵀ in the V buffer, P after the common
// workspace; each lo piece (fp16) `*_lo` elements after its hi piece.
struct TileOperands {
  std::uint32_t* qb;
  std::uint16_t* kp;
  std::uint32_t* vt;
  std::uint32_t* pb;
  std::int64_t q_lo, k_lo, v_lo, p_lo;
};
inline TileOperands tile_operands(const Workspace& w, int tq, int tkv, int D) {
  return {reinterpret_cast<std::uint32_t*>(w.qt),
          reinterpret_cast<std::uint16_t*>(w.kbuf),
          reinterpret_cast<std::uint32_t*>(w.vbuf),
          pairs_buffer(w, tq),
          std::int64_t(tq) * (D / 2),
          std::int64_t(tkv) * D,
          std::int64_t(D) * (tkv / 2),
          std::int64_t(tq) * (tkv / 2)};
}

// --- K/V packed once per call (AttentionJob::kv_pack) ----------------------------
// Without it every Q tile re-packs the K/V tiles it visits from the input
// rows, which come from memory each time (a head's K/V outgrow L2 at long
// sequences): packing was ~30% of a tile's time at B1 S4096 H16 D128, in
// BSH and BNSD alike.  The first item to reach a tile packs it into its
// slot; later ones, on any thread, read the slot.  One finding the slot
// being packed packs its own copy rather than wait.

// uint16 elements of a slot: K in A-tile order, then Vᵀ pairs, each with
// its lo piece for fp16 (the offsets of tile_operands).
inline std::int64_t kv_pack_slot_elems(int tkv, std::int64_t D, int kP) { return std::int64_t(2) * kP * tkv * D; }

// Capped so that a huge batch falls back to per-item packing instead of
// doubling its memory; a call this large gains little from sharing anyway.
inline constexpr std::size_t kMaxKvPackBytes = std::size_t{1} << 30;

// Whether an engine runs a job's dtype (a runtime value) on the pair path.
template <class Engine>
inline bool engine_handles(DType dtype) {
  switch (dtype) {
    case DType::kF16: return Engine::template kHandles<DType::kF16>;
    case DType::kBF16: return Engine::template kHandles<DType::kBF16>;
    case DType::kFP8E4M3: return Engine::template kHandles<DType::kFP8E4M3>;
    case DType::kFP8E5M2: return Engine::template kHandles<DType::kFP8E5M2>;
    default: return false;  // fp32
  }
}

template <class Engine>
inline std::size_t pair_kv_pack_bytes(const AttentionJob& job) {
  if (!engine_handles<Engine>(job.dtype) || !pair_tile_path_fits(job) || job.pack_group > 1 ||
      job.seq_q <= job.row_rows || job.q_tiles * job.kv_group < 2) {
    return 0;  // not the tile path, or each K/V tile is visited once per call
  }
  const int kP = job.dtype == DType::kF16 ? 2 : 1;
  const std::int64_t tiles = (job.seq_kv + job.tile_kv - 1) / job.tile_kv;
  const std::int64_t slots = job.batch * (job.heads / job.kv_group) * tiles;
  const std::size_t states = (static_cast<std::size_t>(slots) * 4 + 63) & ~std::size_t{63};
  const std::size_t bytes = states + static_cast<std::size_t>(slots * kv_pack_slot_elems(job.tile_kv, pair_dims(job.head_dim), kP)) * 2;
  return slots > 0 && bytes <= kMaxKvPackBytes ? bytes : 0;
}

// The slot of the K/V tile at j0 with `cols` keys, when it can be shared: a
// tile boundary and all the keys there (a whole tile, or the sequence's last
// ones); else null.  Its state through *state.
inline std::uint16_t* kv_pack_slot(const AttentionJob& job, const TileItem& it, std::int64_t j0, int cols, int kP,
                                   std::uint32_t** state) {
  const int tkv = job.tile_kv;
  if (!job.kv_pack || j0 % tkv != 0 || cols != (job.seq_kv - j0 < tkv ? job.seq_kv - j0 : tkv)) return nullptr;
  const std::int64_t slot = (it.b * (job.heads / job.kv_group) + it.h / job.kv_group) * job.kv_pack_tiles + j0 / tkv;
  *state = job.kv_pack_state + slot;
  return job.kv_pack + slot * kv_pack_slot_elems(tkv, pair_dims(job.head_dim), kP);
}

// The operands of one K/V tile: the shared slot when it is ready or this
// item packs it (both products then read it); else the item's scratch,
// which the loop fills (`own`).
struct KvOperands {
  const std::uint16_t* k;
  const std::uint32_t* vt;
  bool own;
};
template <DType DT>
inline KvOperands shared_kv_tile(const AttentionJob& job, const TileItem& it, std::int64_t j0, int cols, int cols_pad,
                                 const TileOperands& op) {
  constexpr int kP = kPieces<DT>;
  const int dims = static_cast<int>(job.head_dim), D = pair_dims(dims), tkv = job.tile_kv;
  std::uint32_t* state = nullptr;
  std::uint16_t* slot = kv_pack_slot(job, it, j0, cols, kP, &state);
  if (!slot) return {op.kp, op.vt, true};
  auto* slot_v = reinterpret_cast<std::uint32_t*>(slot + std::int64_t(kP) * tkv * D);
  std::uint32_t s = __atomic_load_n(state, __ATOMIC_ACQUIRE);
  if (s == 0 && __atomic_compare_exchange_n(state, &s, 1u, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    const std::int64_t ks = job.k_strides[2], vs = job.v_strides[2], es = sizeof(Elem<DT>);
    const TileRows k = tile_rows(job, it.kbase, ks * es, it.b, j0, cols);
    const TileRows v = tile_rows(job, it.vbase, vs * es, it.b, j0, cols);
    pack_k_tiles<DT>(elems<DT>(k.first), ks, cols, cols_pad, dims, D, slot, op.k_lo, elems<DT>(k.second), k.split);
    pack_v_transposed<DT>(elems<DT>(v.first), vs, cols, cols_pad, dims, D, slot_v, tkv / 2, op.v_lo,
                          elems<DT>(v.second), v.split);
    __atomic_store_n(state, 2u, __ATOMIC_RELEASE);
    s = 2;
  }
  if (s != 2) return {op.kp, op.vt, true};
  return {slot, slot_v, false};
}

// The next tile's lines for KvLineStream: its shared slot when that is
// ready (contiguous), else its input rows.
template <DType DT>
inline KvLineStream next_tile_lines(const AttentionJob& job, const TileItem& it, std::int64_t j0) {
  constexpr int kP = kPieces<DT>;
  KvLineStream next = next_kv_tile_lines(job, it.kbase, it.vbase, it.b, j0, it.kv_end);
  if (next.part != 0) return next;
  std::uint32_t* state = nullptr;
  const std::uint16_t* slot = kv_pack_slot(job, it, j0 + job.tile_kv, next.rows, kP, &state);
  if (!slot || __atomic_load_n(state, __ATOMIC_ACQUIRE) != 2) return next;
  const std::int64_t half = kv_pack_slot_elems(job.tile_kv, pair_dims(job.head_dim), kP) / 2;  // K, then V
  next.base[0] = reinterpret_cast<const char*>(slot);
  next.base[1] = reinterpret_cast<const char*>(slot + half);
  next.stride[0] = next.stride[1] = 0;
  next.rows = 1;
  next.lines_per_row = static_cast<int>(half * 2 / 64);
  return next;
}

// One Q tile on the pair path, both products on `Engine` (bf16 and FP8, or
// fp16 in two pieces where the engine takes it), as steps a loop calls per
// K/V tile: FA2's loop (run_tile_pairs) runs them in order; FA3's pair
// schedule (fa3/fa3_mainloop.h) interleaves two tiles' steps.  Q is packed
// into scratch (tile_operands), K/V read from their shared slots or packed
// there (shared_kv_tile), the next K/V tile always streamed into L2 (so
// FA_ENABLE_ASYNC does not apply here).  Engine::begin() / end() go around
// the steps of every tile a thread runs together.
template <DType DT, class Engine>
class PairTileSteps {
 public:
  static constexpr int kP = kPieces<DT>;

  // `stream_next`: whether this tile streams the next K/V tile's lines (of
  // two tiles over one K/V stream, one does).  `screen_v`: whether a bf16 V
  // read as rows is screened for non-finite values tile by tile (see
  // bf16_rows_nonfinite; an item runs again so when its O ends non-finite).
  PairTileSteps(const AttentionJob& job, const Workspace& w, const TileItem& it, bool stream_next = true,
                bool screen_v = false)
      : job_(job), w_(w), it_(it), op_(tile_operands(w, job.tile_q, job.tile_kv, pair_dims(job.head_dim))),
        stream_next_(stream_next), rows_(reads_rows(job, it)), screen_v_(screen_v) {
#if defined(__AVX512VBMI__)
    if (job.kv_dtype == DType::kFP8E4M3) fp8_table_ = Fp8Bf16Table::of<DType::kFP8E4M3>();
    if (job.kv_dtype == DType::kFP8E5M2) fp8_table_ = Fp8Bf16Table::of<DType::kFP8E5M2>();
    if (job.kv_dtype == DType::kI8) int8_table_ = Int8Bf16Table::make();
#endif
  }

  // Whether the item reads K and V as rows where they lie, with O in the
  // engine's row tiles (Engine::kReadsKvRows: the tile unit, bf16): where
  // no K/V tile is shared between items (kv_pack), so each is read once per
  // item anyway (decoding, packed groups, single-tile calls), head_dim is
  // whole A-tile rows (32 dims), and every row starts on a 64-byte boundary.
  // A quantized cache (pair_path_runs: FP8, int8) is always read so, from
  // the bf16 rows each tile is widened into; so is fp16, as rows of two bf16
  // pieces a value (widen_fp16_rows), in the calls detail::fp16_tile_reads_rows
  // names (short GQA queries; head_dim from 64, where P's two pieces spread
  // for the second product fit the V buffer).
  static bool reads_rows([[maybe_unused]] const AttentionJob& job, [[maybe_unused]] const TileItem& it) {
    if constexpr (!Engine::kReadsKvRows || (DT != DType::kBF16 && DT != DType::kF16)) {
      return false;
    } else {
      if (job.kv_pack || job.head_dim % 32 != 0) return false;
      if constexpr (DT == DType::kF16) {
        return detail::fp16_tile_reads_rows(Isa::kAmx, DT, job.kv_dtype, job.head_dim, job.kv_group, job.seq_q);
      }
      if (job.kv_dtype != DType::kBF16) return true;
      auto lined_up = [](const char* base, std::int64_t row_elems) {
        return reinterpret_cast<std::uintptr_t>(base) % 64 == 0 && row_elems * 2 % 64 == 0;
      };
      return lined_up(it.kbase, job.k_strides[2]) && lined_up(it.vbase, job.v_strides[2]);
    }
  }

  // Q packed; the softmax state set.  Oᵀ is written whole by the first
  // tile's product (`fresh`), so it is cleared here only for an item that
  // has no key to visit.
  void start() {
    pack_q_pairs<DT>(reinterpret_cast<const Elem<DT>*>(it_.qbase), job_.q_strides[2], job_.q_strides[1], it_.head_rows,
                     it_.rows, it_.nvec * 16, dims(), D(), op_.qb, op_.q_lo);
    init_tile_state(job_, w_, it_, /*zero_output=*/it_.kv_begin >= it_.kv_end);
#if defined(__AVX512VBMI__)
    if constexpr (Engine::kReadsKvRows && DT == DType::kBF16) {
      if (rows_ && job_.kv_dtype == DType::kI8 && width() <= 16 && job_.head_dim % 64 == 0) {
        k_codes_products_ = pack_q_int16_pieces();
      }
    }
#endif
  }
  // Whether K/V are read as rows where they lie (reads_rows).
  bool reads_kv_rows() const { return rows_; }
  // The next tile's lines from `shared`, a stream of `sharers` tile loops
  // run in turn (run_tiles_together): the leader builds it at each tile, the
  // last issues what the shares left.
  void share_stream(KvLineStream* shared, bool leader, bool last) {
    stream_ = shared;
    stream_leader_ = leader;
    stream_last_ = last;
  }
  bool attends(std::int64_t j0) const { return j0 >= it_.kv_begin && j0 < it_.kv_end; }

  // The K/V tile at j0: its operands, and K packed when they are the item's own.
  void load_k(std::int64_t j0) {
    j0_ = j0;
    cols_ = static_cast<int>(it_.kv_end - j0 < job_.tile_kv ? it_.kv_end - j0 : job_.tile_kv);
    cols_pad_ = (cols_ + 31) & ~31;
    spans_ = tile_key_spans(job_, it_, j0, cols_, span_buffer_);
    if (stream_ == &next_) {
      next_ = stream_next_ ? next_tile_lines<DT>(job_, it_, j0) : KvLineStream{};
    } else if (stream_leader_) {  // the sharers' heads lie side by side from the leader's
      const int heads = stream_->sharers;
      *stream_ = next_kv_tile_lines(job_, it_.kbase, it_.vbase, it_.b, j0, it_.kv_end, heads);
      stream_->sharers = heads;
    }
    if constexpr (Engine::kReadsKvRows) {
      if (rows_) {
        locate_rows(j0);
        return;
      }
    }
    kv_ = shared_kv_tile<DT>(job_, it_, j0, cols_, cols_pad_, op_);
    k_in_place_ = nullptr;
    if (kv_.own) {
      const std::int64_t ks = job_.k_strides[2];
      const TileRows k = tile_rows(job_, it_.kbase, ks * std::int64_t(sizeof(Elem<DT>)), it_.b, j0, cols_);
      // An engine that broadcasts K's pairs reads bf16 rows where they lie:
      // a tile no other item reads (short queries, packed groups) is then
      // never packed.
      if constexpr (Engine::kReadsKInPlace && DT == DType::kBF16) {
        if (k.contiguous() && Engine::reads_k_in_place(job_.head_dim, cols_, ks)) {
          k_in_place_ = elems<DT>(k.first);
          return;
        }
      }
      pack_k_tiles<DT>(elems<DT>(k.first), ks, cols_, cols_pad_, dims(), D(), op_.kp, op_.k_lo, elems<DT>(k.second),
                       k.split);
    }
  }
  // Sᵀ = K · Qᵀ; then Vᵀ packed when it is the item's own.
  void scores(StageLaps& laps) {
    if constexpr (Engine::kReadsKvRows) {
      if (rows_) {
#if defined(__AVX512VBMI__)
        if (k_codes_in_place_) {
          int8_code_scores();
          laps.lap(kStageScores);
          return;
        }
#endif
        Engine::template scores_rows<kP>(k_rows_, k_lo_bytes_, op_.qb, op_.q_lo, job_.tile_q, D(), cols16_,
                                         width(), w_.st, spans_, stream_);
        if (k_scales_) scale_key_rows(k_scales_, k_scale_stride_, width());
        laps.lap(kStageScores);
        return;
      }
    }
    if constexpr (Engine::kReadsKInPlace && DT == DType::kBF16) {
      if (k_in_place_) {
        Engine::scores_in_place(reinterpret_cast<const std::uint16_t*>(k_in_place_), job_.k_strides[2] / 2, op_.qb,
                                job_.tile_q, D(), reduce_dims(), cols_, width(), w_.st, spans_, stream_);
      }
    }
    if (!k_in_place_) {
      Engine::template scores<kP>(kv_.k, op_.k_lo, op_.qb, op_.q_lo, job_.tile_q, D(), reduce_dims(), cols_pad_,
                                  width(), w_.st, spans_, stream_);
    }
    laps.lap(kStageScores);
    if (kv_.own) {
      const std::int64_t vs = job_.v_strides[2];
      const TileRows v = tile_rows(job_, it_.vbase, vs * std::int64_t(sizeof(Elem<DT>)), it_.b, j0_, cols_);
      pack_v_transposed<DT>(elems<DT>(v.first), vs, cols_, cols_pad_, dims(), D(), op_.vt, job_.tile_kv / 2, op_.v_lo,
                            elems<DT>(v.second), v.split);
    }
    laps.lap(kStageKv);
  }
  // The online softmax into P pairs, Oᵀ rescaled, Oᵀ += Vᵀ · Pᵀ.
  void softmax_accumulate(StageLaps& laps) {
    const int tq = job_.tile_q, tkv = job_.tile_kv, nvec = it_.nvec;
    if (job_.dropout.active) {  // dropout works on the fp32 P, which is packed afterwards
      softmax_raw_tile<DT>(job_, w_, it_, j0_, cols_);
      if (v_scales_) scale_key_rows(v_scales_, v_scale_stride_, it_.nvec * 16);
      pack_p_pairs<kP>(w_.st, cols_, cols_pad_, nvec, tq, op_.pb, tkv / 2, op_.p_lo);
    } else {
      const float scale = prepare_scores(job_, w_, it_, j0_, cols_);
      if (narrow_softmax()) {
        const float* weights = v_scales_;
        const std::int64_t stride = v_scale_stride_;
        if (it_.rows <= 4) {
          if (weights) softmax_to_pairs_narrow<4, true>(w_, cols_, cols_pad_, tq, scale, op_.pb, stream_, weights, stride);
          else softmax_to_pairs_narrow<4>(w_, cols_, cols_pad_, tq, scale, op_.pb, stream_);
        } else {
          if (weights) softmax_to_pairs_narrow<8, true>(w_, cols_, cols_pad_, tq, scale, op_.pb, stream_, weights, stride);
          else softmax_to_pairs_narrow<8>(w_, cols_, cols_pad_, tq, scale, op_.pb, stream_);
        }
      } else if (v_scales_) {
        softmax_to_pairs<kP, kHalfSoftmax<DT>, true>(w_, cols_, cols_pad_, nvec, tq, scale, op_.pb, tkv / 2, op_.p_lo,
                                                     stream_, v_scales_, v_scale_stride_);
      } else {
        softmax_to_pairs<kP, kHalfSoftmax<DT>>(w_, cols_, cols_pad_, nvec, tq, scale, op_.pb, tkv / 2, op_.p_lo, stream_);
      }
    }
    laps.lap(kStageSoftmax);
    const bool fresh = j0_ == it_.kv_begin;
    if constexpr (Engine::kReadsKvRows) {
      if (rows_) {
        if (!fresh) Engine::rescale_rows(w_, row_tiles(), width());
        laps.lap(kStageRescale);
        Engine::template accumulate_rows<kP>(v_rows_, v_lo_bytes_, op_.pb, op_.p_lo, tkv / 2,
                                             reinterpret_cast<std::uint32_t*>(w_.vbuf), spread_keys(), row_tiles(), cols16_,
                                             width(), fresh, stream_);
        if (v_nonfinite_) add_nonfinite_v();
        if (stream_last_) stream_->issue(stream_->total_lines());
        laps.lap(kStagePv);
        return;
      }
    }
    if (!fresh) rescale_output(w_, out_dims(), nvec, tq);
    laps.lap(kStageRescale);
    Engine::template accumulate<kP>(kv_.vt, tkv / 2, op_.v_lo, op_.pb, tkv / 2, op_.p_lo, tq, out_dims(), cols_pad_, width(),
                                    w_.ot, fresh, spans_, stream_);
    if (stream_last_) stream_->issue(stream_->total_lines());  // what rounding left
    laps.lap(kStagePv);
  }
  // The epilogue; but where V was read as bf16 rows unscreened and O ended
  // with a non-finite value, nothing is written and needs_rerun() says so:
  // a non-finite V value would have reached the other dim of its pair
  // (bf16_rows_nonfinite), and the caller runs the item again screened
  // (rerun_screened).  Any such value leaves a NaN in O (0 x NaN or 0 x Inf
  // in the rows' other halves), so O's check at the end finds every item
  // that needs it, at the cost of one pass over O; NaN from Q or K sends an
  // item the same way, to the same result.
  void finish() {
    if constexpr (Engine::kReadsKvRows) {
      if (rows_) {
        if (!screen_v_ && job_.kv_dtype == DType::kBF16 && !o_rows_finite()) {
          rerun_ = true;
          return;
        }
        return Engine::template write_rows<DT>(job_, w_, it_, row_tiles());
      }
    }
    write_pair_outputs<DT>(job_, w_, it_);
  }
  bool needs_rerun() const { return rerun_; }

 private:
  int dims() const { return static_cast<int>(job_.head_dim); }  // as given
  int D() const { return pair_dims(job_.head_dim); }             // padded to the engines' step
  // Oᵀ's rows the second product computes: head_dim padded to the engine's
  // output step (8 dims on VDPBF16PS, which takes A rows 8 at a time; the
  // tile unit's 32), V being packed to D (its extra rows are zero; rows past
  // out_dims are never computed, and the epilogue reads them only into
  // lanes it does not store).
  int out_dims() const { return round_up_dims(job_.head_dim, Engine::kOutDimStep); }
  // The dims Q·Kᵀ sums over: head_dim padded to the engine's reduction step
  // (8 on VDPBF16PS, a quarter of an A block; the tile unit's 32), the operands
  // being packed to D (their extra dims are zero).
  int reduce_dims() const { return round_up_dims(job_.head_dim, Engine::kReduceStep); }
  // The query rows the products compute: the tile's rows rounded up to the
  // engine's step (8 on VDPBF16PS, whose last vector may run half; 16 on
  // the tile unit), never past the row vectors in use.
  int width() const {
    const int w = (it_.rows + Engine::kRowStep - 1) / Engine::kRowStep * Engine::kRowStep;
    return w < it_.nvec * 16 ? w : it_.nvec * 16;
  }
  // Whether the softmax packs several keys' rows into a vector
  // (softmax_to_pairs_narrow): one pair piece, fp32 exp2, at most 8 rows.
  bool narrow_softmax() const { return kP == 1 && !kHalfSoftmax<DT> && it_.nvec == 1 && it_.rows <= 8; }
  // O's row tiles (the row-reading engine's): with at most 8 query rows,
  // both parities of a 32-dim block in one tile.
  RowTiles row_tiles() const { return {w_.ot, D(), it_.rows <= 8}; }
  // The keys whose probabilities the row-reading engine spreads at a time
  // into the V buffer (up to 2 KiB of A tiles per 16 keys, 16 KiB for 128
  // keys; the buffer holds a whole tile's, 128 B a key against its 4 D >=
  // 128; 128, 256 and 512 keys took the same time).
  int spread_keys() const { return job_.tile_kv < kSpreadKeys ? job_.tile_kv : kSpreadKeys; }
  static constexpr int kSpreadKeys = 128;

  // The K/V tile at j0_ as rows where they lie; a tile whose keys end
  // inside a block of 16 (a sequence's last) is copied into the K buffer,
  // K's rows then V's, with zero rows up to the block's end, so that no
  // tile row reads past the keys.
  void locate_rows(std::int64_t j0) {
    cols16_ = (cols_ + 15) & ~15;
    const std::int64_t es = kv_elem_bytes(job_);
    k_rows_ = tile_rows(job_, it_.kbase, job_.k_strides[2] * es, it_.b, j0, cols_);
    v_rows_ = tile_rows(job_, it_.vbase, job_.v_strides[2] * es, it_.b, j0, cols_);
    v_src_ = v_rows_;
    if constexpr (DT == DType::kF16) return widen_fp16_rows();
#if defined(__AVX512VBMI__)
    if (is_fp8(job_.kv_dtype)) return widen_fp8_rows();
    if (job_.kv_dtype == DType::kI8) return widen_int8_rows(kv_row(job_, it_.b, j0));
#endif
    v_nonfinite_ = screen_v_ && bf16_rows_nonfinite(v_rows_);
    if (cols16_ == cols_ && !v_nonfinite_) return;
    const std::int64_t bytes = std::int64_t(D()) * 2;
    char* k_copy = reinterpret_cast<char*>(w_.kbuf);
    char* v_copy = k_copy + cols16_ * bytes;
    for (int c = 0; c < cols_; ++c) {
      std::memcpy(k_copy + c * bytes, k_rows_.row(c), bytes);
      std::memcpy(v_copy + c * bytes, v_rows_.row(c), bytes);
    }
    std::memset(k_copy + cols_ * bytes, 0, (cols16_ - cols_) * bytes);
    std::memset(v_copy + cols_ * bytes, 0, (cols16_ - cols_) * bytes);
    k_rows_ = {k_copy, nullptr, 1 << 30, bytes};
    v_rows_ = {v_copy, nullptr, 1 << 30, bytes};
    if (v_nonfinite_) zero_nonfinite_v(reinterpret_cast<std::uint16_t*>(v_copy));
  }

  // A non-finite V value (NaN, Inf) would reach the other dim of its pair
  // too: the rows engine multiplies a V row's dim pairs by P in one half of
  // A's pairs and zero in the other, and 0 x NaN is NaN.  So a tile holding
  // one (found by its exponent, all ones: the largest value V & 0x7f80 can
  // take, so a running maximum finds it) is multiplied with those values as
  // zeros (copied into the K buffer, or widened there) and each is added to
  // O afterwards, to its own dim only, as P x V for every row of the tile
  // (add_nonfinite_v): a zero probability gives NaN there as on the vector
  // loops, so no NaN the reference has is lost (a dropped key's, which the
  // reference multiplies by zero).  An FP8 cache is
  // screened as it is widened (a few instructions); a bf16 one read in place
  // only when an item runs again (finish): a pass over every V tile cost
  // GQA decoding 5-15% of its time.
  bool o_rows_finite() const {
    const RowTiles o = row_tiles();
    const std::int64_t n = o.halves ? std::int64_t(8) * o.D : std::int64_t(width()) * o.D;
    const __m512i exponent = _mm512_set1_epi32(0x7f800000);
    __m512i top = _mm512_setzero_si512();
    for (std::int64_t i = 0; i < n; i += 16) {
      top = _mm512_max_epu32(top, _mm512_and_si512(_mm512_loadu_si512(o.ot + i), exponent));
    }
    return _mm512_cmpeq_epi32_mask(top, exponent) == 0;
  }
  bool bf16_rows_nonfinite(const TileRows& rows) const {
    const __m512i exponent = _mm512_set1_epi16(0x7f80);
    __m512i top = _mm512_setzero_si512();
    for (int c = 0; c < cols_; ++c) {
      for (int d0 = 0; d0 < dims(); d0 += 32) {
        top = _mm512_max_epu16(top, _mm512_and_si512(_mm512_loadu_si512(rows.row(c) + d0 * 2), exponent));
      }
    }
    return _mm512_cmpeq_epi16_mask(top, exponent) != 0;
  }
  void zero_nonfinite_v(std::uint16_t* rows) const {  // D() apart
    for (int c = 0; c < cols_; ++c) {
      for (int d = 0; d < dims(); ++d) {
        if ((rows[c * D() + d] & 0x7f80) == 0x7f80) rows[c * D() + d] = 0;
      }
    }
  }
  float v_value(int c, int d) const {
    const char* row = v_src_.row(c);
    switch (job_.kv_dtype) {
      case DType::kFP8E4M3: return detail::fp8_e4m3_to_f32(static_cast<std::uint8_t>(row[d]));
      case DType::kFP8E5M2: return detail::fp8_e5m2_to_f32(static_cast<std::uint8_t>(row[d]));
      case DType::kF16: return detail::f16_to_f32(reinterpret_cast<const std::uint16_t*>(row)[d]);
      default: return detail::bf16_to_f32(reinterpret_cast<const std::uint16_t*>(row)[d]);
    }
  }
  void add_nonfinite_v() {
    const RowTiles o = row_tiles();
    const std::int64_t ldp = job_.tile_kv / 2;
    for (int c = 0; c < cols_; ++c) {
      for (int d = 0; d < dims(); ++d) {
        const float v = v_value(c, d);
        if (std::isfinite(v)) continue;
        for (int r = 0; r < it_.rows; ++r) {  // P as the product took it (pack_p_pairs' order)
          const std::uint32_t pair = op_.pb[(std::int64_t(r / 16) * ldp + c / 2) * 16 + r % 16];
          const float prob = detail::bf16_to_f32(static_cast<std::uint16_t>(c % 2 ? pair >> 16 : pair & 0xffff));
          o.at(r, d / 32, d % 2)[(d % 32) / 2] += prob * v;
        }
      }
    }
  }

  // An fp16 tile as rows of two bf16 pieces a value, hi = the value cut to
  // bf16 and lo = the rest (exact: an fp16 significand has 11 bits, the cut
  // leaves at most 3, which a bf16 holds), as the products take them
  // (amx_scores_rows_pieces, rows_products_pieces): K's hi rows then its lo
  // rows in the K buffer, V's in fp16_v_rows, each followed by zero rows up
  // to the block of 16, D() apart.  In order, so Q, P and O keep the bf16
  // layouts; eight vector instructions per 32 values, on lines the previous
  // tile streamed into L2.  V's non-finite values are screened as they are
  // read (their exponent all ones) and go to add_nonfinite_v, as an FP8
  // cache's.
  void widen_fp16_rows() {
    const int D = this->D(), dims = this->dims();  // equal (reads_rows)
    const std::int64_t bytes = std::int64_t(D) * 2, lo_bytes = std::int64_t(cols16_) * bytes;
    alignas(64) static constexpr std::uint16_t kHighWords[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                                 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                                 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    const __m512i high_words = _mm512_load_si512(kHighWords);
    const __m512i cut = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const __m512i exponent = _mm512_set1_epi16(0x7c00);
    __m512i top = _mm512_setzero_si512();
    char* k_copy = reinterpret_cast<char*>(w_.kbuf);
    char* v_copy = reinterpret_cast<char*>(fp16_v_rows(w_, job_.tile_q, job_.tile_kv));
    for (auto [src, dst] : {std::pair{k_rows_, k_copy}, {v_rows_, v_copy}}) {
      const bool v = dst == v_copy;
      for (int c = 0; c < cols_; ++c) {
        const char* row = src.row(c);
        auto* hi = reinterpret_cast<std::uint16_t*>(dst + c * bytes);
        auto* lo = reinterpret_cast<std::uint16_t*>(dst + lo_bytes + c * bytes);
        for (int d0 = 0; d0 < dims; d0 += 32) {
          const __m512i x = _mm512_loadu_si512(row + d0 * 2);
          if (v) top = _mm512_max_epu16(top, _mm512_and_si512(x, exponent));
          const __m512 a = _mm512_cvtph_ps(_mm512_castsi512_si256(x)), b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
          const __m512 ha = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), cut));
          const __m512 hb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), cut));
          _mm512_storeu_si512(hi + d0, _mm512_permutex2var_epi16(_mm512_castps_si512(ha), high_words, _mm512_castps_si512(hb)));
          _mm512_storeu_si512(lo + d0, _mm512_permutex2var_epi16(_mm512_castps_si512(_mm512_sub_ps(a, ha)), high_words,
                                                                 _mm512_castps_si512(_mm512_sub_ps(b, hb))));
        }
      }
      for (std::int64_t piece : {std::int64_t(0), lo_bytes}) {
        std::memset(dst + piece + cols_ * bytes, 0, (cols16_ - cols_) * bytes);
      }
    }
    k_rows_ = {k_copy, nullptr, 1 << 30, bytes};
    v_rows_ = {v_copy, nullptr, 1 << 30, bytes};
    k_lo_bytes_ = v_lo_bytes_ = lo_bytes;
    v_nonfinite_ = _mm512_cmpeq_epi16_mask(top, exponent) != 0;
    if (v_nonfinite_) {
      zero_nonfinite_v(reinterpret_cast<std::uint16_t*>(v_copy));
      zero_nonfinite_v(reinterpret_cast<std::uint16_t*>(v_copy + lo_bytes));
    }
  }

#if defined(__AVX512VBMI__)
  // An FP8 cache's tile as bf16 rows in the K buffer, K's then V's, with
  // zero rows up to the block of 16, as locate_rows copies a last tile: the
  // values exactly (Fp8Bf16Table, NaN included), in order, so Q, P and O
  // keep the bf16 cache's layouts; the cache's descale factors stay in the
  // score scale and the output's denominator, as for FP8 inputs.  Six
  // vector instructions per 64 values (widen_in_order), on lines the
  // previous tile streamed into L2.
  void widen_fp8_rows() {
    const Fp8Bf16Table table = fp8_table_;  // in registers: the stores may alias the member
    // V's non-finite codes (add_nonfinite_v): e4m3's NaN S.1111.111, e5m2's
    // S.11111.xx, by the running maximum of the code's bits below the sign
    // that they fill.
    const __m512i special = _mm512_set1_epi8(static_cast<char>(job_.kv_dtype == DType::kFP8E4M3 ? 0x7f : 0x7c));
    __m512i top = _mm512_setzero_si512();
    std::uint16_t* v_copy = widen_rows(table, /*skip_k=*/false, [&](__m512i codes) {
      top = _mm512_max_epu8(top, _mm512_and_si512(codes, special));
    });
    v_nonfinite_ = _mm512_cmpeq_epi8_mask(top, special) != 0;
    if (v_nonfinite_) zero_nonfinite_v(v_copy);
  }
  // The tile's K rows (but with `skip_k`) and V rows widened by `table`
  // (widen_in_order: 64 codes to their bf16s, in order) into the K buffer,
  // K's then V's, each followed by zero rows up to the block of 16;
  // `on_v(codes)` sees V's codes as they are read.  k_rows_ (widened) and
  // v_rows_ then point there; returns V's.
  template <class Table, class OnV>
  std::uint16_t* widen_rows(const Table& table, bool skip_k, OnV&& on_v) {
    const int dims = this->dims();  // a multiple of 32 (reads_rows)
    const std::int64_t bytes = std::int64_t(dims) * 2;
    char* k_copy = reinterpret_cast<char*>(w_.kbuf);
    char* v_copy = k_copy + cols16_ * bytes;
    for (auto [src, dst] : {std::pair{k_rows_, k_copy}, {v_rows_, v_copy}}) {
      if (dst == k_copy && skip_k) continue;
      for (int c = 0; c < cols_; ++c) {
        const char* row = src.row(c);
        auto* out = reinterpret_cast<std::uint16_t*>(dst + c * bytes);
        for (int d0 = 0; d0 < dims; d0 += 64) {
          const bool whole = dims - d0 >= 64;
          const __m512i codes = whole ? _mm512_loadu_si512(row + d0) : _mm512_maskz_loadu_epi8(0xffffffffu, row + d0);
          if (dst == v_copy) on_v(codes);
          __m512i first, second;
          table.widen_in_order(codes, first, second);
          _mm512_storeu_si512(out + d0, first);
          if (whole) _mm512_storeu_si512(out + d0 + 32, second);
        }
      }
      std::memset(dst + cols_ * bytes, 0, (cols16_ - cols_) * bytes);
    }
    if (!skip_k) k_rows_ = {k_copy, nullptr, 1 << 30, bytes};
    v_rows_ = {v_copy, nullptr, 1 << 30, bytes};
    return reinterpret_cast<std::uint16_t*>(v_copy);
  }
  Fp8Bf16Table fp8_table_{};  // an FP8 cache's (widen_fp8_rows)
#endif

#if defined(__AVX512VBMI__)
  // An int8 cache's tile as bf16 rows in the K buffer, laid out as
  // widen_fp8_rows lays an FP8 one: each code exactly (every integer of
  // int8's range is a bf16; Int8Bf16Table).  Its per-key scales (at the
  // cache row `row`) go to the scores (scale_key_rows) and to the
  // probabilities (softmax_to_pairs' key weights), so both products take
  // the dequantized values; the codes are never non-finite.
  void widen_int8_rows(std::int64_t row) {
    const Int8Bf16Table table = int8_table_;  // in registers: the stores may alias the member
    // K's codes read where they lie by the int8 products (k_codes_products_)
    // where the tile's keys fill whole blocks of 16 (a sequence's last tile
    // is widened with zero rows after it, as a bf16 one is copied).
    const TileRows source = k_rows_;  // where the codes lie (widen_rows moves k_rows_ to the widened rows)
    k_codes_in_place_ = k_codes_products_ && cols16_ == cols_;
    widen_rows(table, k_codes_in_place_, [](__m512i) {});
    k_scale_stride_ = job_.kv_scale_strides[0][2];
    v_scale_stride_ = job_.kv_scale_strides[1][2];
    k_scales_ = it_.kv_scales.k ? it_.kv_scales.k + row * k_scale_stride_ : nullptr;
    v_scales_ = it_.kv_scales.v ? it_.kv_scales.v + row * v_scale_stride_ : nullptr;
    if (!source.contiguous()) {  // a tile over two blocks: its keys' scales gathered in order
      const std::int64_t second = kv_row(job_, it_.b, j0_ + source.split);
      for (int c = 0; c < cols_; ++c) {
        const std::int64_t key = c < source.split ? row + c : second + (c - source.split);
        if (k_scales_) gathered_scales_[0][c] = it_.kv_scales.k[key * k_scale_stride_];
        if (v_scales_) gathered_scales_[1][c] = it_.kv_scales.v[key * v_scale_stride_];
      }
      if (k_scales_) k_scales_ = gathered_scales_[0];
      if (v_scales_) v_scales_ = gathered_scales_[1];
      k_scale_stride_ = v_scale_stride_ = 1;
    }
    // The next tile's scales, a line or two a tile that the stream of the
    // K/V lines leaves out (so each tile would wait for them from DRAM).
    if (k_scales_ && j0_ + job_.tile_kv < it_.kv_end) {
      const std::int64_t next = kv_row(job_, it_.b, j0_ + job_.tile_kv);
      for (int t = 0; t < 2; ++t) {
        const std::int64_t stride = job_.kv_scale_strides[t][2];
        const float* scales = (t == 0 ? it_.kv_scales.k : it_.kv_scales.v) + next * stride;
        const int step = stride >= 16 ? 1 : static_cast<int>(16 / stride);  // keys a 64-byte line
        for (int c = 0; c < job_.tile_kv; c += step) _mm_prefetch(reinterpret_cast<const char*>(scales + c * stride), _MM_HINT_T0);
      }
    }
  }
  Int8Bf16Table int8_table_{};  // an int8 cache's (widen_int8_rows)

  // An int8 cache's Q·Kᵀ on the tile unit's int8 products, K's codes where
  // they lie (Engine::scores_rows_i8): the widening of K, half the tile's
  // shuffles, is gone.  Q's rows (at most 16) as int16 over their largest
  // magnitude, in two byte pieces as the products' B tiles (64 dims a tile,
  // 16 rows of 4-dim quads): q = 256 hi + lo, hi signed, lo unsigned.  The
  // int16 rounding is at most 2^-16 of a row's largest value, as the row
  // path's VPDPWSSD products take Q.  The pieces go after the bf16 pairs in
  // Q's buffer (half of it; 32 bytes a dim for 16 rows).  False (the bf16
  // rows then) for a row with a non-finite value, which integers cannot
  // carry.
  bool pack_q_int16_pieces() {
    auto* hi = reinterpret_cast<std::uint8_t*>(op_.qb + op_.q_lo);
    std::uint8_t* lo = hi + std::int64_t(job_.head_dim) * 16;
    std::memset(hi, 0, std::size_t(job_.head_dim) * 32);
    for (int r = 0; r < 16; ++r) q_row_scale_[r] = 0.0f;
    for (int r = 0; r < it_.rows; ++r) {
      const std::int64_t at = q_row_offset(job_, it_, r);
      float top = 0.0f;
      for (std::int64_t d = 0; d < job_.head_dim; ++d) {
        const float q = load_scalar<DT>(it_.qbase, at + d);
        if (!std::isfinite(q)) return false;
        top = std::max(top, std::fabs(q));
      }
      if (top == 0.0f) continue;
      const float to_int = 32767.0f / top;
      q_row_scale_[r] = top / 32767.0f;
      for (std::int64_t d = 0; d < job_.head_dim; ++d) {
        const int q16 = static_cast<int>(std::nearbyint(load_scalar<DT>(it_.qbase, at + d) * to_int));
        // B tile (d / 64), row (d % 64) / 4, column r, byte d % 4.
        const std::int64_t pos = (d / 64) * 1024 + ((d % 64) / 4) * 64 + r * 4 + d % 4;
        hi[pos] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q16 >> 8));
        lo[pos] = static_cast<std::uint8_t>(q16 & 0xff);
      }
    }
    return true;
  }
  // Sᵀ[c][r] = (256 s_hi + s_lo) x Q's row scale x K's key scale, from the
  // products' int32 sums, 16 a key, in the K buffer's part K's widened rows
  // would take (64 bytes a key each, within its 2 x head_dim).
  void int8_code_scores() {
    const auto* hi = reinterpret_cast<const std::uint8_t*>(op_.qb + op_.q_lo);
    const std::uint8_t* lo = hi + std::int64_t(job_.head_dim) * 16;
    const int tq = job_.tile_q;
    auto* s_hi = reinterpret_cast<std::int32_t*>(w_.kbuf);
    std::int32_t* s_lo = s_hi + std::int64_t(cols16_) * 16;
    Engine::scores_rows_i8(k_rows_, hi, lo, static_cast<int>(job_.head_dim), cols16_, s_hi, s_lo, 16, stream_);
    const __m512 row_scale = _mm512_loadu_ps(q_row_scale_);
    const std::int64_t kss = k_scale_stride_;
    for (int c = 0; c < cols_; ++c) {
      const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_loadu_si512(s_hi + c * 16), 8),
                                           _mm512_loadu_si512(s_lo + c * 16));
      __m512 scale = row_scale;
      if (k_scales_) scale = _mm512_mul_ps(scale, _mm512_set1_ps(k_scales_[c * kss]));
      _mm512_storeu_ps(w_.st + std::int64_t(c) * tq, _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scale));
    }
  }
  float q_row_scale_[16] = {};
  bool k_codes_products_ = false;  // the item's Q packed as int16 pieces (start)
  bool k_codes_in_place_ = false;  // this tile's K read as codes (widen_int8_rows)
#endif
  // Sᵀ's key rows (the tile's keys, their first `lanes` rows) times the
  // keys' factors (an int8 cache's scales, key c's at [c * stride]): K's on
  // the scores, V's on the fp32 P of the dropout softmax.
  void scale_key_rows(const float* factors, std::int64_t stride, int lanes) {
    const int tq = job_.tile_q;
    for (int c = 0; c < cols_; ++c) {
      const __m512 factor = _mm512_set1_ps(factors[c * stride]);
      float* row = w_.st + std::int64_t(c) * tq;
      for (int r = 0; r < lanes; r += 16) _mm512_storeu_ps(row + r, _mm512_mul_ps(_mm512_loadu_ps(row + r), factor));
    }
  }

  const AttentionJob& job_;
  const Workspace& w_;
  const TileItem& it_;
  const TileOperands op_;
  const bool stream_next_;
  // The current K/V tile.
  std::int64_t j0_ = 0;
  int cols_ = 0, cols_pad_ = 0;
  const KeySpan* spans_ = nullptr;
  KeySpan span_buffer_[kMaxRowVectors];
  KvLineStream next_;
  KvLineStream* stream_ = &next_;  // next_, or a stream shared with other tiles (share_stream)
  bool stream_leader_ = true, stream_last_ = true;
  KvOperands kv_{};
  const Elem<DT>* k_in_place_ = nullptr;  // the tile's K rows, when the engine reads them as they are
  // Rows where they lie (reads_rows): the tile's K and V rows (over two
  // blocks of a paged cache, TileRows), and its keys rounded up to a block
  // of 16.
  const bool rows_;
  TileRows k_rows_, v_rows_;
  // fp16's (widen_fp16_rows): bytes from each hi row to its lo row.
  std::int64_t k_lo_bytes_ = 0, v_lo_bytes_ = 0;
  int cols16_ = 0;
  // V's rows as given (add_nonfinite_v), and whether they hold a non-finite value.
  TileRows v_src_;
  bool v_nonfinite_ = false;
  // An int8 cache's K and V scales at the tile's first key (widen_int8_rows).
  const float* k_scales_ = nullptr;
  const float* v_scales_ = nullptr;
  std::int64_t k_scale_stride_ = 0, v_scale_stride_ = 0;
  // A tile over two blocks of a paged cache (detail::kPagedSplitTileKv keys):
  // its keys' K and V scales, gathered.
  float gathered_scales_[2][detail::kPagedSplitTileKv] = {};
  const bool screen_v_;
  bool rerun_ = false;
};

// One Q tile's steps in order, from its start; `screen_v` as PairTileSteps
// takes it.
template <DType DT, class Engine>
void run_tile_steps(const AttentionJob& job, const Workspace& w, const TileItem& it, bool screen_v) {
  StageLaps laps(job.stage_cycles);
  PairTileSteps<DT, Engine> tile(job, w, it, /*stream_next=*/true, screen_v);
  tile.start();
  Engine::begin();
  laps.lap(kStageQ);
  for (std::int64_t j0 = it.kv_begin; j0 < it.kv_end; j0 += job.tile_kv) {
    tile.load_k(j0);
    laps.lap(kStageKv);
    tile.scores(laps);
    tile.softmax_accumulate(laps);
  }
  Engine::end();
  tile.finish();
  laps.finish(kStageEpilogue);
  if (tile.needs_rerun()) run_tile_steps<DT, Engine>(job, w, it, /*screen_v=*/true);
}

// A tile whose finish() asked for it (needs_rerun): the item again, V screened.
template <DType DT, class Engine>
void rerun_screened(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  run_tile_steps<DT, Engine>(job, w, it, /*screen_v=*/true);
}

// FA2's loop on the pair path: one Q tile's steps in order.
template <DType DT, class Engine>
void run_tile_pairs(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  run_tile_steps<DT, Engine>(job, w, it, /*screen_v=*/false);
}

// Whether the n tiles' K/V heads lie side by side in each row, every one
// read as rows where it lies: their next tiles' lines are then one run of
// each row (all n heads' slices), issued in address order.
template <class ReadsRows>
inline bool side_by_side_rows(const AttentionJob& job, const TileItem* it, int n, ReadsRows&& reads_rows) {
  const std::int64_t slice = job.head_dim * kv_elem_bytes(job);
  for (int g = 0; g < n; ++g) {
    if (!reads_rows(g) || it[g].kbase != it[0].kbase + g * slice || it[g].vbase != it[0].vbase + g * slice) return false;
  }
  return true;
}

// The packed tiles of several K/V heads of one item (tile_kv_heads), each
// with its own workspace and softmax state, over the key tiles together:
// for each tile, every head's steps in turn.  With the heads side by side
// in each token row (BSH, BSND, a pool laid out so) a K/V head's tile is a
// slice of every row, 256 bytes in 2 KiB at 8 heads of D128; walked head
// after head the rows were read slice by slice, 8 times over, and the
// hardware's own prefetches of each page's next lines fetched the other
// heads' slices long before their items came.  Together the item reads
// each tile's rows whole, and the next tile's lines go out as one stream
// of whole rows in address order, each head's steps issuing a share: a
// stream per head sent 4 lines at every 2 KiB row, 8 runs over the same
// rows (GQA decoding at 64/8 in BSH took 1.06x the time, paged 1.1x, an
// int8 cache 1.19x; docs/PERF.md).
template <DType DT, class Engine>
void run_tiles_together(const AttentionJob& job, const Workspace* w, const TileItem* it, int n) {
  StageLaps laps(job.stage_cycles);
  std::optional<PairTileSteps<DT, Engine>> tiles[detail::kMaxTileKvHeads];
  for (int g = 0; g < n; ++g) {
    tiles[g].emplace(job, w[g], it[g]);
    tiles[g]->start();
  }
  KvLineStream shared;
  if (n > 1 && side_by_side_rows(job, it, n, [&](int g) { return tiles[g]->reads_kv_rows(); })) {
    shared.sharers = n;
    for (int g = 0; g < n; ++g) tiles[g]->share_stream(&shared, g == 0, g == n - 1);
  }
  Engine::begin();
  laps.lap(kStageQ);
  for (std::int64_t j0 = it[0].kv_begin; j0 < it[0].kv_end; j0 += job.tile_kv) {
    for (int g = 0; g < n; ++g) {
      tiles[g]->load_k(j0);
      laps.lap(kStageKv);
      tiles[g]->scores(laps);
      tiles[g]->softmax_accumulate(laps);
    }
  }
  Engine::end();
  for (int g = 0; g < n; ++g) {
    tiles[g]->finish();
    if (tiles[g]->needs_rerun()) rerun_screened<DT, Engine>(job, w[g], it[g]);
  }
  laps.finish(kStageEpilogue);
}

}  // namespace fa::FA_KERNEL_NS
