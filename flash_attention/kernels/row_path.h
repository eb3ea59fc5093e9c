// The row path: Q tiles of at most job.row_rows rows (decoding, a
// sequence's last rows, GQA-packed groups) run row by row with keys in the
// vector lanes for the scores and head_dim in the lanes for P·V, so decoding
// does not idle 15 of 16 lanes.  Shared by FA2 and FA3.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kv_tiles.h"
#include "online_softmax.h"
#include "vec_io.h"

namespace fa::FA_KERNEL_NS {



// K and V elements of the row path: fp32 rows, or 16-bit and 8-bit rows
// (fp16, bf16; FP8, and int8 of a quantized cache) widened in registers
// (the avx2 and avx512 paths, which have F16C): decoding reads each K/V
// element once, so a separate widening pass into a buffer would double its
// memory traffic.
template <DType DT>
using Elem = std::conditional_t<
    DT == DType::kF32, float,
    std::conditional_t<DT == DType::kI8, std::int8_t, std::conditional_t<is_fp8(DT), std::uint8_t, std::uint16_t>>>;

template <DType DT>
inline typename Vec::T load_elems(const Elem<DT>* p) {
  if constexpr (DT == DType::kF32) {
    return Vec::load(p);
  }
#if defined(FA_HAVE_SIMD_CONVERT)
  else if constexpr (DT == DType::kF16) {
    return Vec::load_f16(p);
  } else if constexpr (DT == DType::kBF16) {
    return Vec::load_bf16(p);
  } else if constexpr (DT == DType::kI8) {
    return i8_vec_to_f32(p);
  } else {
    return fp8_vec_to_f32<DT>(p);
  }
#endif
}

// An int8 cache's per-key scales of one K or V tile (key c's at
// p[c * stride]): the row path multiplies each score by its key's K scale
// as the dot product ends, and each probability by its key's V scale as
// P·V broadcasts it; other K/V dtypes pass none.
struct KeyScales {
  const float* p = nullptr;
  std::int64_t stride = 0;
  float operator[](int c) const { return p[c * stride]; }
};

// The last head_dim % Vec::W elements, as load_elems widens them (FP8 in
// its units: kFp8RowUnit).
template <DType DT>
inline float load_elem(const Elem<DT>* p, int d) {
#if defined(FA_HAVE_SIMD_CONVERT)
  if constexpr (is_fp8(DT)) return load_scalar<DT>(p, d) * kFp8RowUnit<DT>;
#endif
  return load_scalar<DT>(p, d);
}

// Row o (D floats) divided by den into `out` in the output dtype ODT:
// vectors where their conversion is the scalar one bit for bit (fp32; fp16,
// whose VCVTPS2PH rounds to nearest even as f32_to_f16 does: each of the
// 2^32 inputs compared, NaN included), else an element at a time (bf16:
// VCVTNEPS2BF16 flushes results below 2^-126).  GCC vectorized the
// element-by-element fp16 conversion in integers, 14% of a 16-key GQA
// decoding step on Zen 4.
template <DType ODT>
inline void store_row_divided(char* out, const float* o, int D, float den) {
  int d = 0;
  if constexpr (ODT == DType::kF32 || ODT == DType::kF16) {
    const typename Vec::T vden = Vec::set1(den);
    for (; d + Vec::W <= D; d += Vec::W) store_vec<ODT>(out, d, Vec::div(Vec::load(o + d), vden), false);
  }
  for (; d < D; ++d) store_scalar<ODT>(out, d, o[d] / den);
}

// Query rows per register block of the row path's two products: each K or V
// vector loaded (and widened) once serves this many rows.  Bounded by the
// registers: rows x 4 accumulators + 4 loaded vectors + a broadcast (16 on
// SSE2 and AVX2, 32 on AVX-512).
inline constexpr int kRowBlock = Vec::W >= 16 ? 4 : 2;
inline constexpr int kKeyBlock = 4;  // keys per score block: four independent sums per row
inline constexpr int kPvKeys = 8;    // keys per P·V block (see row_accumulate)
// Keys per P·V block of the pair products (for_pv_pair_blocks): their
// accumulators go back to O after each block, so a block of 8 keys paid a
// load and a store of each accumulator for every four key pairs; 32 keys'
// V rows (8 KiB at head_dim 128 in bf16) still stay in L1 across a
// block's chunks.
inline constexpr int kPvPairKeys = 32;

// s[r * lds + c] = dot(q_r, k_c) for NR rows (q: [NR][D]) and keys
// [0, cols) of a K tile, kKeyBlock keys at a time so each row's sums are
// independent chains and each K vector is loaded once for NR rows.  Each sum
// runs over head_dim in order and is reduced the same way whatever NR: every
// row's scores are the same bits however the rows are blocked.  `next`
// streams the next K/V tile's lines, `per_block` lines a key block.
template <DType DT, int NR>
inline void row_scores(const float* q, int D, const Elem<DT>* k, std::int64_t ldk, int cols, float* s, std::int64_t lds,
                       KvLineStream& next, int per_block, KeyScales key_scales = {}) {
  constexpr int W = Vec::W, KB = kKeyBlock;
  static_assert(KB == 4, "one reduce_add4 per row and key block");
  const int dv = D / W * W;
  int c = 0;
  for (; c + KB <= cols; c += KB) {
    next.issue(per_block);
    // An int8 cache's key scales, loaded ahead of the products that hide
    // their latency, and applied to the sums before they are reduced.
    [[maybe_unused]] float ks[KB];
    if constexpr (DT == DType::kI8) {
      for (int j = 0; j < KB; ++j) ks[j] = key_scales[c + j];
    }
    typename Vec::T acc[NR][KB];
    for (int r = 0; r < NR; ++r) {
      for (int j = 0; j < KB; ++j) acc[r][j] = Vec::zero();
    }
    for (int d = 0; d < dv; d += W) {
      typename Vec::T kv[KB];
      for (int j = 0; j < KB; ++j) kv[j] = load_elems<DT>(k + (c + j) * ldk + d);
      for (int r = 0; r < NR; ++r) {
        const typename Vec::T qv = Vec::load(q + r * D + d);
        for (int j = 0; j < KB; ++j) acc[r][j] = Vec::fmadd(qv, kv[j], acc[r][j]);
      }
    }
    for (int r = 0; r < NR; ++r) {
      float* out = s + r * lds + c;
      if constexpr (DT == DType::kI8) {
        for (int j = 0; j < KB; ++j) acc[r][j] = Vec::mul(acc[r][j], Vec::set1(ks[j]));
      }
      Vec::reduce_add4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], out);
      if (dv < D) {
        for (int j = 0; j < KB; ++j) {
          float tail = 0.0f;
          for (int d = dv; d < D; ++d) tail += q[r * D + d] * load_elem<DT>(k + (c + j) * ldk, d);
          out[j] += DT == DType::kI8 ? tail * ks[j] : tail;
        }
      }
    }
  }
  for (; c < cols; ++c) {  // the last cols % KB keys, one at a time
    next.issue(per_block);
    for (int r = 0; r < NR; ++r) {
      typename Vec::T acc = Vec::zero();
      for (int d = 0; d < dv; d += W) acc = Vec::fmadd(Vec::load(q + r * D + d), load_elems<DT>(k + c * ldk + d), acc);
      float sum = Vec::reduce_add(acc);
      for (int d = dv; d < D; ++d) sum += q[r * D + d] * load_elem<DT>(k + c * ldk, d);
      if constexpr (DT == DType::kI8) sum *= key_scales[c];
      s[r * lds + c] = sum;
    }
  }
}

// NV vectors of head_dim from d0 of NR rows over keys [c0, c1): o = o *
// alpha (on the tile's first keys only) + sum_c p_c v_c, keys in order.
template <DType DT, int NR, int NV>
inline void pv_chunk(float* o, int D, const float* alpha, bool first, const float* p, std::int64_t ldp, const Elem<DT>* v,
                     std::int64_t ldv, int c0, int c1, int d0, KeyScales value_scales) {
  constexpr int W = Vec::W;
  typename Vec::T acc[NR][NV];
  for (int r = 0; r < NR; ++r) {
    const typename Vec::T va = Vec::set1(alpha[r]);
    for (int k = 0; k < NV; ++k) {
      acc[r][k] = Vec::load(o + r * D + d0 + k * W);
      if (first) acc[r][k] = Vec::mul(acc[r][k], va);
    }
  }
  for (int c = c0; c < c1; ++c) {
    typename Vec::T vv[NV];
    for (int k = 0; k < NV; ++k) vv[k] = load_elems<DT>(v + c * ldv + d0 + k * W);
    [[maybe_unused]] const float vs = DT == DType::kI8 ? value_scales[c] : 1.0f;
    for (int r = 0; r < NR; ++r) {
      const typename Vec::T pc = Vec::set1(DT == DType::kI8 ? p[r * ldp + c] * vs : p[r * ldp + c]);
      for (int k = 0; k < NV; ++k) acc[r][k] = Vec::fmadd(pc, vv[k], acc[r][k]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < NV; ++k) Vec::store(o + r * D + d0 + k * W, acc[r][k]);
  }
}

// o_r[d] = o_r[d] * alpha[r] + sum_c p[r * ldp + c] * v[c * ldv + d] for NR
// rows (o: [NR][D]).  Keys go in blocks of kPvKeys, and within a block
// head_dim in register chunks of up to 4 vectors: each V vector is loaded
// (and widened) once for NR rows, and a block's V rows stay in L1 across its
// chunks (one pass over the tile per chunk would fetch every V row from L2
// once per chunk; in BSH those rows lie a whole token row apart).  Each
// element's sum runs over the keys in order, whatever NR: the same bits
// however the rows are blocked.  `next` as in row_scores.
template <DType DT, int NR>
inline void row_accumulate(float* o, int D, const float* alpha, const float* p, std::int64_t ldp, const Elem<DT>* v,
                           std::int64_t ldv, int cols, KvLineStream& next, int per_block, KeyScales value_scales = {}) {
  constexpr int W = Vec::W, kChunk = 4;
  const int dv = D / W * W;
  for (int c0 = 0; c0 < cols; c0 += kPvKeys) {
    next.issue(per_block);
    const int c1 = c0 + kPvKeys < cols ? c0 + kPvKeys : cols;
    const bool first = c0 == 0;
    int d0 = 0;
    for (; d0 + kChunk * W <= dv; d0 += kChunk * W) pv_chunk<DT, NR, kChunk>(o, D, alpha, first, p, ldp, v, ldv, c0, c1, d0, value_scales);
    switch ((dv - d0) / W) {
      case 3: pv_chunk<DT, NR, 3>(o, D, alpha, first, p, ldp, v, ldv, c0, c1, d0, value_scales); break;
      case 2: pv_chunk<DT, NR, 2>(o, D, alpha, first, p, ldp, v, ldv, c0, c1, d0, value_scales); break;
      case 1: pv_chunk<DT, NR, 1>(o, D, alpha, first, p, ldp, v, ldv, c0, c1, d0, value_scales); break;
      default: break;
    }
  }
  for (int r = 0; r < NR; ++r) {  // the last D % W elements
    for (int d = dv; d < D; ++d) {
      float acc = o[r * D + d] * alpha[r];
      for (int c = 0; c < cols; ++c) {
        const float pc = DT == DType::kI8 ? p[r * ldp + c] * value_scales[c] : p[r * ldp + c];
        acc += pc * load_elem<DT>(v + c * ldv, d);
      }
      o[r * D + d] = acc;
    }
  }
}

// bf16 K and V on the FMA products where the policy splits bf16 pairs
// (Vec::kSplitBf16: AVX2, whose row path has no pair dot product).  A load
// of 2W values is widened in two halves, the even-indexed values and the
// odd ones (Vec::bf16_even / bf16_odd), so each W values cost one integer
// operation where the widening load and its shift cost two.  GQA decoding
// is bound by the FMA products and the widening on AVX2: 32/8 and 64/8 took
// 0.8x and 0.72x the time with K/V from the L3 on Zen 3 (docs/PERF.md).
// Q's rows and O's accumulators are kept in the same split order (each 2W
// dims: the W even ones, then the W odd ones; split_dims), and O goes back
// to head_dim's order once, before the epilogue (unsplit_dims).  head_dim a
// multiple of 2W.
inline void split_dims(float* x, int D) {
  constexpr int W2 = 2 * Vec::W;
  float t[W2];
  for (int d0 = 0; d0 < D; d0 += W2) {
    for (int i = 0; i < Vec::W; ++i) {
      t[i] = x[d0 + 2 * i];
      t[Vec::W + i] = x[d0 + 2 * i + 1];
    }
    std::memcpy(x + d0, t, sizeof t);
  }
}
inline void unsplit_dims(float* x, int D) {
  constexpr int W2 = 2 * Vec::W;
  float t[W2];
  for (int d0 = 0; d0 < D; d0 += W2) {
    for (int i = 0; i < Vec::W; ++i) {
      t[2 * i] = x[d0 + i];
      t[2 * i + 1] = x[d0 + Vec::W + i];
    }
    std::memcpy(x + d0, t, sizeof t);
  }
}

// row_scores on bf16 K with Q in split order: each sum runs over head_dim's
// 2W blocks in order, the even dims' product then the odd's (one row: into
// two chains, added at the end, so the four keys' sums keep eight FMAs in
// flight), and is reduced the same way whatever NR.
template <int NR>
inline void row_scores_split(const float* q, int D, const std::uint16_t* k, std::int64_t ldk, int cols, float* s,
                             std::int64_t lds, KvLineStream& next, int per_block) {
  constexpr int W = Vec::W, KB = kKeyBlock, kChains = NR == 1 ? 2 : 1;
  int c = 0;
  for (; c + KB <= cols; c += KB) {
    next.issue(per_block);
    typename Vec::T acc[NR][KB][kChains];
    for (int r = 0; r < NR; ++r) {
      for (int j = 0; j < KB; ++j) {
        for (int h = 0; h < kChains; ++h) acc[r][j][h] = Vec::zero();
      }
    }
    for (int d = 0; d < D; d += 2 * W) {
      for (int j = 0; j < KB; ++j) {
        const typename Vec::T pairs = Vec::load_pairs(k + (c + j) * ldk + d);
        const typename Vec::T even = Vec::bf16_even(pairs), odd = Vec::bf16_odd(pairs);
        for (int r = 0; r < NR; ++r) {
          acc[r][j][0] = Vec::fmadd(Vec::load(q + r * D + d), even, acc[r][j][0]);
          acc[r][j][kChains - 1] = Vec::fmadd(Vec::load(q + r * D + d + W), odd, acc[r][j][kChains - 1]);
        }
      }
    }
    for (int r = 0; r < NR; ++r) {
      if constexpr (kChains == 2) {
        for (int j = 0; j < KB; ++j) acc[r][j][0] = Vec::add(acc[r][j][0], acc[r][j][1]);
      }
      Vec::reduce_add4(acc[r][0][0], acc[r][1][0], acc[r][2][0], acc[r][3][0], s + r * lds + c);
    }
  }
  for (; c < cols; ++c) {  // the last cols % KB keys, one at a time
    next.issue(per_block);
    for (int r = 0; r < NR; ++r) {
      typename Vec::T acc = Vec::zero();
      for (int d = 0; d < D; d += 2 * W) {
        const typename Vec::T pairs = Vec::load_pairs(k + c * ldk + d);
        acc = Vec::fmadd(Vec::load(q + r * D + d), Vec::bf16_even(pairs), acc);
        acc = Vec::fmadd(Vec::load(q + r * D + d + W), Vec::bf16_odd(pairs), acc);
      }
      s[r * lds + c] = Vec::reduce_add(acc);
    }
  }
}

// pv_chunk on bf16 V with O in split order: NP blocks of 2W dims from d0.
template <int NR, int NP>
inline void pv_split_chunk(float* o, int D, const float* alpha, bool first, const float* p, std::int64_t ldp,
                           const std::uint16_t* v, std::int64_t ldv, int c0, int c1, int d0) {
  constexpr int W = Vec::W;
  typename Vec::T acc[NR][2 * NP];
  for (int r = 0; r < NR; ++r) {
    const typename Vec::T va = Vec::set1(alpha[r]);
    for (int k = 0; k < 2 * NP; ++k) {
      acc[r][k] = Vec::load(o + r * D + d0 + k * W);
      if (first) acc[r][k] = Vec::mul(acc[r][k], va);
    }
  }
  for (int c = c0; c < c1; ++c) {
    for (int k = 0; k < NP; ++k) {
      const typename Vec::T pairs = Vec::load_pairs(v + c * ldv + d0 + 2 * k * W);
      const typename Vec::T even = Vec::bf16_even(pairs), odd = Vec::bf16_odd(pairs);
      for (int r = 0; r < NR; ++r) {
        const typename Vec::T pc = Vec::set1(p[r * ldp + c]);
        acc[r][2 * k] = Vec::fmadd(pc, even, acc[r][2 * k]);
        acc[r][2 * k + 1] = Vec::fmadd(pc, odd, acc[r][2 * k + 1]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < 2 * NP; ++k) Vec::store(o + r * D + d0 + k * W, acc[r][k]);
  }
}

// row_accumulate on bf16 V with O in split order (keys in blocks of kPvKeys,
// head_dim in chunks of two 2W blocks, as there).
template <int NR>
inline void row_accumulate_split(float* o, int D, const float* alpha, const float* p, std::int64_t ldp,
                                 const std::uint16_t* v, std::int64_t ldv, int cols, KvLineStream& next, int per_block) {
  constexpr int W2 = 2 * Vec::W;
  for (int c0 = 0; c0 < cols; c0 += kPvKeys) {
    next.issue(per_block);
    const int c1 = c0 + kPvKeys < cols ? c0 + kPvKeys : cols;
    const bool first = c0 == 0;
    int d0 = 0;
    for (; d0 + 2 * W2 <= D; d0 += 2 * W2) pv_split_chunk<NR, 2>(o, D, alpha, first, p, ldp, v, ldv, c0, c1, d0);
    if (d0 < D) pv_split_chunk<NR, 1>(o, D, alpha, first, p, ldp, v, ldv, c0, c1, d0);
  }
}

#if defined(__AVX512BW__)
// 32 dims held as two vectors of key pairs interleaved by VPUNPCKLWD /
// VPUNPCKHWD (dims {0-3, 8-11, 16-19, 24-27} of the 32, then the others),
// back in head_dim order.
inline void unpair32(__m512 lo, __m512 hi, __m512& first, __m512& second) {
  const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  first = _mm512_permutex2var_ps(lo, lo_idx, hi);
  second = _mm512_permutex2var_ps(lo, hi_idx, hi);
}

// An int8 cache on the AVX-512 paths: the row path's two products in
// integers.  Q's rows are quantized to int16 with a scale a row (a step of
// 2^-15 of the row's largest element), the probabilities times their keys'
// V scales to int16 with a scale a row and tile; K and V are sign-extended
// to int16 in registers and each pair of products is summed into an int32
// lane by one VPDPWSSD (AVX512_VNNI; VPMADDWD and VPADDD on the avx512
// path).  Against the FMA products this drops the widening of every K and V
// element to fp32 (two instructions for 16) and the per-key scale inside
// both loops, which is what bounds GQA decoding on such a cache.  The
// int16 steps are far finer than the cache's own int8 step (the error
// against the reference on the dequantized cache stays that of the fp32
// products; forward_property_test's quantized cases).
#define FA_HAVE_ROW_I8 1

inline __m512i dot_i16(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

// 32 int8 values at p as int16, only the first n (the rest zero) when
// n < 32: a row's last dims are read with a mask, never past it.
inline __m512i load_i8_as_i16(const std::int8_t* p, int n) {
  const __m256i x = n >= 32 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                            : _mm256_maskz_loadu_epi8(static_cast<__mmask32>((std::uint64_t{1} << n) - 1), p);
  return _mm512_cvtepi8_epi16(x);
}

// Row q (D finite floats) as int16 in out[0, Dp), zero from D on; returns
// the scale (q ~ out * scale), 0 for a row of zeros.
inline float quantize_row_i16(const float* q, int D, int Dp, std::int16_t* out) {
  float top = 0.0f;
  for (int d = 0; d < D; ++d) top = std::fabs(q[d]) > top ? std::fabs(q[d]) : top;
  // In double: for a row of subnormals 32767 / top overflows fp32.
  const double inv = top > 0.0f ? 32767.0 / top : 0.0;
  for (int d = 0; d < D; ++d) {
    const double x = std::nearbyint(q[d] * inv);
    out[d] = static_cast<std::int16_t>(x > 32767.0 ? 32767.0 : x < -32767.0 ? -32767.0 : x);
  }
  for (int d = D; d < Dp; ++d) out[d] = 0;
  return top / 32767.0f;
}

// The largest int16 a probability takes in a tile of `cols` keys, so that
// no int32 lane of P·V can overflow (|v| <= 128).
inline float i16_probability_top(int cols) {
  const double fit = 2147483647.0 / (128.0 * (cols > 0 ? cols : 1));
  return fit < 32767.0 ? static_cast<float>(std::floor(fit)) : 32767.0f;
}

// s[r * lds + c] = dot(q_r, k_c) for NR rows of pairs (q: [NR][ldq], zero
// past D) and keys [0, cols) of a K tile, as row_scores: per 32 dims one
// dot instruction a row and key, summed in the same order whatever NR.
// P, the products: VPDPWSSD on int16 Q and an int8 K (I16Pairs: the scores
// in the quantized units; the softmax applies Q's and K's scales with the
// score scale), or VDPBF16PS on bf16 rows (Bf16Pairs) or on an FP8 K widened
// to bf16 (Fp8Pairs).  P::kStep dims a step.
template <class P, int NR>
inline void row_scores_pairs(const P& pairs, const typename P::QElem* q, int ldq, int D, const typename P::KElem* k,
                             std::int64_t ldk, int cols, float* s, std::int64_t lds, KvLineStream& next,
                             int per_block) {
  constexpr int KB = kKeyBlock;
  int c = 0;
  for (; c + KB <= cols; c += KB) {
    next.issue(per_block);
    typename P::Acc acc[NR][KB];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < KB; ++j) acc[r][j] = P::zero();
    }
    for (int d = 0; d < D; d += P::kStep) {
      typename P::KOperand kv[KB];
#pragma GCC unroll 4
      for (int j = 0; j < KB; ++j) kv[j] = pairs.load_k(k + (c + j) * ldk + d, D - d);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) {
        const typename P::QOperand qv = pairs.load_q(q + r * ldq + d);
#pragma GCC unroll 4
        for (int j = 0; j < KB; ++j) acc[r][j] = pairs.dot(acc[r][j], qv, kv[j]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      Vec::reduce_add4(P::sums(acc[r][0]), P::sums(acc[r][1]), P::sums(acc[r][2]), P::sums(acc[r][3]), s + r * lds + c);
    }
  }
  for (; c < cols; ++c) {  // the last cols % KB keys, one at a time
    next.issue(per_block);
    for (int r = 0; r < NR; ++r) {
      typename P::Acc acc = P::zero();
      for (int d = 0; d < D; d += P::kStep) acc = pairs.dot(acc, pairs.load_q(q + r * ldq + d), pairs.load_k(k + c * ldk + d, D - d));
      s[r * lds + c] = _mm512_reduce_add_ps(P::sums(acc));
    }
  }
}

struct I16Pairs {
  using QElem = std::int16_t;
  using KElem = std::int8_t;
  using Acc = __m512i;
  using Operand = __m512i;
  using QOperand = Operand;
  using KOperand = Operand;
  static constexpr int kStep = 32;
  static Acc zero() { return _mm512_setzero_si512(); }
  static Operand load_q(const QElem* p) { return _mm512_loadu_si512(p); }
  static Operand load_k(const KElem* p, int n) { return load_i8_as_i16(p, n); }
  static Acc dot(Acc acc, Operand a, Operand b) { return dot_i16(acc, a, b); }
  static __m512 sums(Acc acc) { return _mm512_cvtepi32_ps(acc); }
};

// Row p of a tile's probabilities times each key's V scale (vs, unit
// stride), as int16 in out (with a zero after an odd count: the last key
// pair); returns the scale (p_c vs_c ~ out[c] * scale), NaN when a product
// is not finite or the largest is subnormal (the caller then takes the
// fp32 products for the tile).
inline float probabilities_to_i16(const float* p, const float* vs, int cols, float top, std::int16_t* out) {
  __m512 largest = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int c = 0; c < cols; c += 16) {
    const __mmask16 m = cols - c >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - c)) - 1);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + c), _mm512_maskz_loadu_ps(m, vs + c));
    bad |= _mm512_fpclass_ps_mask(x, 0x99);  // NaN or infinity
    largest = _mm512_max_ps(largest, _mm512_abs_ps(x));
  }
  const float m = _mm512_reduce_max_ps(largest);
  // Not finite, or so small that top / m overflows (subnormal products: V
  // scales near fp32's floor): the fp32 products take the tile.
  if (bad || (m > 0.0f && m < std::numeric_limits<float>::min())) return std::numeric_limits<float>::quiet_NaN();
  const __m512 inv = _mm512_set1_ps(m > 0.0f ? top / m : 0.0f);
  for (int c = 0; c < cols; c += 16) {
    const __mmask16 k = cols - c >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - c)) - 1);
    const __m512 x = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + c), _mm512_maskz_loadu_ps(k, vs + c)), inv);
    _mm256_mask_storeu_epi16(out + c, k, _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(x)));
  }
  if (cols % 2 != 0) out[cols] = 0;
  return m / top;
}

// NC x 32 dims from d0 of NR rows: o = o * alpha + p_scale * sum over the
// tile's key pairs of (p_c, p_c+1) · (v_c, v_c+1), the sums in int32 lanes
// (V's rows sign-extended and interleaved as pv_dot_chunk's), put back in
// head_dim order as they reach o.  Every key pair of the tile goes through
// one chunk's registers before the next chunk: the tile's int8 V rows (8
// KiB at 64 keys of head_dim 128) stay in L1 across the chunks.  An odd
// tile's last key is paired with zeros, never read past; dims past D are
// read as zeros and never written.
template <int NR, int NC>
inline void pv_i8_chunk(float* o, int D, const float* alpha, const float* p_scale, const std::int16_t* p,
                        std::int64_t ldp, const std::int8_t* v, std::int64_t ldv, int cols, int d0, KvLineStream& next,
                        int per_block) {
  __m512i acc[NR][2 * NC];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int k = 0; k < 2 * NC; ++k) acc[r][k] = _mm512_setzero_si512();
  }
  for (int c = 0; c < cols; c += 2) {
    if (d0 == 0 && c % kPvKeys == 0) next.issue(per_block);
    __m512i vv[2 * NC];
#pragma GCC unroll 4
    for (int k = 0; k < NC; ++k) {
      const int n = D - d0 - 32 * k;
      const __m512i a = load_i8_as_i16(v + c * ldv + d0 + 32 * k, n);
      const __m512i b = c + 1 < cols ? load_i8_as_i16(v + (c + 1) * ldv + d0 + 32 * k, n) : _mm512_setzero_si512();
      vv[2 * k] = _mm512_unpacklo_epi16(a, b);
      vv[2 * k + 1] = _mm512_unpackhi_epi16(a, b);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      std::int32_t pair;
      __builtin_memcpy(&pair, p + r * ldp + c, sizeof pair);
      const __m512i pr = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int k = 0; k < 2 * NC; ++k) acc[r][k] = dot_i16(acc[r][k], pr, vv[k]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
    const __m512 va = _mm512_set1_ps(alpha[r]), vs = _mm512_set1_ps(p_scale[r]);
#pragma GCC unroll 4
    for (int k = 0; k < NC; ++k) {
      __m512 first, second;
      unpair32(_mm512_cvtepi32_ps(acc[r][2 * k]), _mm512_cvtepi32_ps(acc[r][2 * k + 1]), first, second);
      const int d = d0 + 32 * k, n = D - d;
      float* out = o + r * D + d;
      const __mmask16 m0 = n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
      const __mmask16 m1 = n >= 32 ? __mmask16(0xFFFF) : n > 16 ? static_cast<__mmask16>((1u << (n - 16)) - 1) : 0;
      _mm512_mask_storeu_ps(out, m0, _mm512_fmadd_ps(first, vs, _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, out), va)));
      if (m1) _mm512_mask_storeu_ps(out + 16, m1, _mm512_fmadd_ps(second, vs, _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, out + 16), va)));
    }
  }
}

// row_accumulate for an int8 V and int16 P (pv_i8_chunk): head_dim in
// chunks of 64 (the last of 32 where that covers it).
template <int NR>
inline void row_accumulate_i8(float* o, int D, const float* alpha, const float* p_scale, const std::int16_t* p,
                              std::int64_t ldp, const std::int8_t* v, std::int64_t ldv, int cols, KvLineStream& next,
                              int per_block) {
  static_assert(kPvKeys % 2 == 0, "key pairs");
  for (int d0 = 0; d0 < D; d0 += 64) {
    if (D - d0 > 32) {
      pv_i8_chunk<NR, 2>(o, D, alpha, p_scale, p, ldp, v, ldv, cols, d0, next, per_block);
    } else {
      pv_i8_chunk<NR, 1>(o, D, alpha, p_scale, p, ldp, v, ldv, cols, d0, next, per_block);
    }
  }
}
#endif

#if defined(FA_HAVE_BF16_DOT) || (defined(FA_HAVE_AMX) && !FA_AMX_EMULATION)
// bf16 Q, K and V on a CPU with VDPBF16PS (the avx512bf16 and amx paths):
// the row path's two products as bf16 pair dot products, on K and V read in
// place.  Against the FMA products above this halves the multiply
// instructions and drops the widening of every K and V vector (two
// instructions each for bf16), which is what bounds GQA decoding: a K/V
// head's rows serve a whole group of query rows (8 at GQA 64/8), so each
// K/V byte carries 8 FLOP there (docs/PERF.md).  Q is bf16 already, so its
// products are exact; P is rounded to bf16 for P·V as on the pair path.
// head_dim a multiple of 32 (a whole vector of pairs; other head_dims keep
// the FMA products).
#define FA_HAVE_ROW_DOT 1

inline __m512bh bf16_pairs(const std::uint16_t* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }

// The row path's Q·Kᵀ on bf16 rows (row_scores_pairs): head_dim a multiple
// of 32, so K's last step needs no mask.
struct Bf16Pairs {
  using QElem = std::uint16_t;
  using KElem = std::uint16_t;
  using Acc = __m512;
  using Operand = __m512bh;
  using QOperand = Operand;
  using KOperand = Operand;
  static constexpr int kStep = 32;
  static Acc zero() { return _mm512_setzero_ps(); }
  static Operand load_q(const QElem* p) { return bf16_pairs(p); }
  static Operand load_k(const KElem* p, int) { return bf16_pairs(p); }
  static Acc dot(Acc acc, Operand a, Operand b) { return _mm512_dpbf16_ps(acc, a, b); }
  static __m512 sums(Acc acc) { return acc; }
};

// P·V's accumulators hold 32 dims as two vectors of V's key pairs
// interleaved by VPUNPCKLWD / VPUNPCKHWD: dims {0-3, 8-11, 16-19, 24-27} of
// the 32, then the others.  The row path keeps O in that order while it
// runs and puts it back once, at the end (unpair_dims).
inline void unpair_dims(float* o, int D) {
  for (int d = 0; d < D; d += 32) {
    __m512 first, second;
    unpair32(_mm512_loadu_ps(o + d), _mm512_loadu_ps(o + d + 16), first, second);
    _mm512_storeu_ps(o + d, first);
    _mm512_storeu_ps(o + d + 16, second);
  }
}

// The pair products' P·V accumulators of NR rows: K vectors of O from d0
// (rows ldo apart), times the row's alpha on a tile's first keys; after
// the key pairs, stored back.  Between, each key pair adds row r's pair of
// probabilities (p + r * ldp + c, the smaller key in the low half) times
// the K vectors of V pairs.
template <int NR, int K>
inline void load_pv_rows(__m512 (&acc)[NR][K], const float* o, int ldo, int d0, const float* alpha, bool first) {
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
    const __m512 va = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      acc[r][k] = _mm512_loadu_ps(o + r * ldo + d0 + k * 16);
      if (first) acc[r][k] = _mm512_mul_ps(acc[r][k], va);
    }
  }
}
template <int NR, int K>
inline void add_pv_pair(__m512 (&acc)[NR][K], const std::uint16_t* p, std::int64_t ldp, int c, const __m512bh (&vv)[K]) {
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
    std::int32_t pair;
    __builtin_memcpy(&pair, p + r * ldp + c, sizeof pair);
    const __m512bh pr = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) acc[r][k] = _mm512_dpbf16_ps(acc[r][k], pr, vv[k]);
  }
}
template <int NR, int K>
inline void store_pv_rows(const __m512 (&acc)[NR][K], float* o, int ldo, int d0) {
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) _mm512_storeu_ps(o + r * ldo + d0 + k * 16, acc[r][k]);
  }
}

// NC x 32 dims from d0 of NR rows over keys [c0, c1) (c0 even): o = o *
// alpha (on the tile's first keys only) + sum over key pairs of (p_c,
// p_c+1) · (v_c, v_c+1), o in the paired order (unpair_dims).  p: bf16
// probabilities, row r's at p + r * ldp, with a zero after an odd tile's
// last key (whose missing partner V row is read as zeros, never from
// memory).
template <int NR, int NC>
inline void pv_dot_chunk(float* o, int D, const float* alpha, bool first, const std::uint16_t* p, std::int64_t ldp,
                         const std::uint16_t* v, std::int64_t ldv, int c0, int c1, int cols, int d0) {
  __m512 acc[NR][2 * NC];
  load_pv_rows(acc, o, D, d0, alpha, first);
  for (int c = c0; c < c1; c += 2) {
    __m512bh vv[2 * NC];
#pragma GCC unroll 4
    for (int k = 0; k < NC; ++k) {
      const __m512i a = _mm512_loadu_si512(v + c * ldv + d0 + k * 32);
      const __m512i b = c + 1 < cols ? _mm512_loadu_si512(v + (c + 1) * ldv + d0 + k * 32) : _mm512_setzero_si512();
      vv[2 * k] = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(a, b));
      vv[2 * k + 1] = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(a, b));
    }
    add_pv_pair(acc, p, ldp, c, vv);
  }
  store_pv_rows(acc, o, D, d0);
}

// row_accumulate with bf16 P and V (pv_dot_chunk): key blocks of kPvPairKeys,
// within a block head_dim in chunks of 64, so a block's V rows stay in L1
// across its chunks.  Each element's sum runs over the key pairs in order,
// whatever NR.
// The key blocks of P·V on pairs: kPvPairKeys keys a block, and within a block
// head_dim in chunks of `wide` dims (chunk.template operator()<true>(c0, c1,
// d0)), then of `narrow` (<false>) for the rest, so a block's V rows stay
// in L1 across its chunks.
template <class Chunk>
inline void for_pv_pair_blocks(int D, int cols, int wide, int narrow, KvLineStream& next, int per_block, Chunk&& chunk) {
  static_assert(kPvPairKeys % 2 == 0, "key pairs");
  for (int c0 = 0; c0 < cols; c0 += kPvPairKeys) {
    next.issue(per_block);
    const int c1 = c0 + kPvPairKeys < cols ? c0 + kPvPairKeys : cols;
    int d0 = 0;
    for (; d0 + wide <= D; d0 += wide) chunk.template operator()<true>(c0, c1, d0);
    for (; d0 < D; d0 += narrow) chunk.template operator()<false>(c0, c1, d0);
  }
}

template <int NR>
inline void row_accumulate_dot(float* o, int D, const float* alpha, const std::uint16_t* p, std::int64_t ldp,
                               const std::uint16_t* v, std::int64_t ldv, int cols, KvLineStream& next, int per_block) {
  for_pv_pair_blocks(D, cols, 64, 32, next, per_block, [&]<bool kWide>(int c0, int c1, int d0) {
    pv_dot_chunk<NR, kWide ? 2 : 1>(o, D, alpha, c0 == 0, p, ldp, v, ldv, c0, c1, cols, d0);
  });
}

// Rows of fp32 probabilities to bf16 (round to nearest even), with a zero
// after an odd count (pv_dot_chunk's last pair); with `rest`, also what
// the bf16 leaves out (p - bf16(p), as bf16: p to about 2^-17 in the two).
inline void probabilities_to_bf16(const float* s, int cols, std::uint16_t* out, std::uint16_t* rest = nullptr) {
  for (int c = 0; c < cols; c += 16) {
    const __mmask16 m = cols - c >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - c)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, s + c);
    const __m256i hi = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
    _mm256_mask_storeu_epi16(out + c, m, hi);
    if (rest) {
      const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
      _mm256_mask_storeu_epi16(rest + c, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(x, back))));
    }
  }
  if (cols % 2 != 0) {
    out[cols] = 0;
    if (rest) rest[cols] = 0;
  }
}
#endif

#if defined(FA_HAVE_ROW_DOT) && defined(__AVX512VBMI__)
// An FP8 cache with bf16 or fp16 Q on a CPU with VDPBF16PS and VBMI (the
// avx512bf16 and amx paths): the row path's two products as bf16 pair dot
// products on K and V widened to bf16 in registers through byte tables
// (Fp8Bf16Table), exactly: the values themselves, NaN and subnormals
// included, so no NaN scan and no units.  Against the FMA products, whose
// F16C widening took five instructions for 16 values, this is five for 64
// and a dot instruction per 32 products: decoding over such a cache reads
// half the bf16 cache's bytes, and with one row a K/V head the products
// now keep up with them.  Any head_dim: the last 64 dims of a row are read
// with a mask, and Q's rows and O are kept padded to 64 (past the
// Workspace where head_dim is not a multiple of 64: row_path_fp8_floats).
//
// The widened values come out in a fixed order within each 64 dims (the
// tables' unpacks work within 128-bit lanes), which the products absorb:
// Q's rows are packed in K's order (pack_q_fp8_order), and O is kept in
// V's order while the item runs and put back at its end
// (unorder_fp8_dims).  fp16 Q is split into a bf16 high part and the bf16
// of the rest (exact: fp16's 11 significant bits fit in two bf16s), one dot
// instruction each, so Q's products are exact for both dtypes.  P is
// rounded to bf16 for P·V as on the bf16 row path with bf16 Q, and split in
// two likewise with fp16 Q (to about 2^-17): rounded to one bf16, it put
// fp16 calls at 1.3e-3 relative L2 against 2.1e-4 on the FMA products, most
// of fp16's 2e-3 bound.
#define FA_HAVE_ROW_FP8 1

// Dim d of a 64-dim chunk of K widened by Fp8Pairs::load_k lands at word
// fp8_k_position(d) of the two vectors' 64: within each 128-bit lane the low 8
// codes go to the first vector, the high 8 to the second.
inline constexpr int fp8_k_position(int d) { return (d % 16 < 8 ? 0 : 32) + (d / 16) * 8 + d % 8; }

// Row x (D values) as bf16 in K's order, zero from D to Dp (D rounded up
// to 64); with kSplit (fp16 Q) the rest x - bf16(x) as bf16 in out[Dp,
// 2 Dp) (zero where x is not finite: the high part carries its Inf or NaN).
template <DType DT, bool kSplit>
inline void pack_q_fp8_order(const char* x, int D, int Dp, std::uint16_t* out) {
  std::memset(out, 0, sizeof(std::uint16_t) * Dp * (kSplit ? 2 : 1));
  for (int d = 0; d < D; ++d) {
    const float f = load_scalar<DT>(x, d);
    const std::uint16_t hi = detail::f32_to_bf16(f);
    const int at = d / 64 * 64 + fp8_k_position(d % 64);
    out[at] = hi;
    if constexpr (kSplit) out[Dp + at] = std::isfinite(f) ? detail::f32_to_bf16(f - detail::bf16_to_f32(hi)) : 0;
  }
}

// 64 FP8 codes at p, only the first n (the rest zero) when n < 64: a row's
// last dims are read with a mask, never past it.
inline __m512i load_fp8_codes(const std::uint8_t* p, int n) {
  return n >= 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8((std::uint64_t{1} << n) - 1, p);
}

// Q·Kᵀ on an FP8 K (row_scores_pairs): 64 dims a step (the last masked),
// the widened K as two vectors of bf16 pairs, Q's rows in that order (and
// with kSplit Q's low parts lo_offset elements after each row's high part).
template <bool kSplit>
struct Fp8Pairs {
  using QElem = std::uint16_t;
  using KElem = std::uint8_t;
  using Acc = __m512;
  struct KOperand {
    __m512bh first, second;
  };
  struct QOperand {
    __m512bh first, second, first_lo, second_lo;
  };
  static constexpr int kStep = 64;
  Fp8Bf16Table table;
  int lo_offset;

  static Acc zero() { return _mm512_setzero_ps(); }
  KOperand load_k(const KElem* p, int n) const {
    __m512i lo, hi;
    table.widen(load_fp8_codes(p, n), lo, hi);
    return {reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi)), reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi))};
  }
  QOperand load_q(const QElem* p) const {
    QOperand q{bf16_pairs(p), bf16_pairs(p + 32), {}, {}};
    if constexpr (kSplit) {
      q.first_lo = bf16_pairs(p + lo_offset);
      q.second_lo = bf16_pairs(p + lo_offset + 32);
    }
    return q;
  }
  Acc dot(Acc acc, const QOperand& q, const KOperand& k) const {
    acc = _mm512_dpbf16_ps(acc, q.first, k.first);
    acc = _mm512_dpbf16_ps(acc, q.second, k.second);
    if constexpr (kSplit) {
      acc = _mm512_dpbf16_ps(acc, q.first_lo, k.first);
      acc = _mm512_dpbf16_ps(acc, q.second_lo, k.second);
    }
    return acc;
  }
  static __m512 sums(Acc acc) { return acc; }
};

// Two keys' 64 codes each (a: key c's dims d0..d0+63, b: key c+1's), as
// four vectors of bf16 key pairs (key c's value in each pair's low half):
// interleaved byte by byte, then widened, so vector k holds in lane L the
// pairs of dims 16L + 4k + j (j < 4).
inline void widen_fp8_key_pair(__m512i a, __m512i b, const Fp8Bf16Table& table, __m512bh* vv) {
  __m512i lo, hi;
  table.widen(_mm512_unpacklo_epi8(a, b), lo, hi);
  vv[0] = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
  vv[1] = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
  table.widen(_mm512_unpackhi_epi8(a, b), lo, hi);
  vv[2] = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
  vv[3] = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
}

// NC x 64 dims from d0 of NR rows over keys [c0, c1) (c0 even), as
// pv_dot_chunk on an FP8 V widened by widen_fp8_key_pair: accumulator k of
// a 64-dim chunk holds dims 16L + 4k + j (lane L, element j), which o (rows
// ldo apart, head_dim padded to 64) keeps in that order (unorder_fp8_dims).
// With kSplit (fp16 Q) each row's probabilities come as two bf16 rows, the
// second (what the first leaves out) p_rest elements after it, one dot
// instruction each.
template <int NR, int NC, bool kSplit>
inline void pv_fp8_chunk(float* o, int ldo, int D, const float* alpha, bool first, const std::uint16_t* p,
                         std::int64_t ldp, std::int64_t p_rest, const std::uint8_t* v, std::int64_t ldv, int c0, int c1,
                         int cols, int d0, const Fp8Bf16Table& table) {
  __m512 acc[NR][4 * NC];
  load_pv_rows(acc, o, ldo, d0, alpha, first);
  for (int c = c0; c < c1; c += 2) {
    __m512bh vv[4 * NC];
#pragma GCC unroll 2
    for (int k = 0; k < NC; ++k) {
      const int n = D - d0 - k * 64;
      const __m512i a = load_fp8_codes(v + c * ldv + d0 + k * 64, n);
      const __m512i b = c + 1 < cols ? load_fp8_codes(v + (c + 1) * ldv + d0 + k * 64, n) : _mm512_setzero_si512();
      widen_fp8_key_pair(a, b, table, vv + 4 * k);
    }
    add_pv_pair(acc, p, ldp, c, vv);
    if constexpr (kSplit) add_pv_pair(acc, p + p_rest, ldp, c, vv);
  }
  store_pv_rows(acc, o, ldo, d0);
}

// row_accumulate on an FP8 V and bf16 P (pv_fp8_chunk): 128 dims a chunk
// for a single row, 64 for more (the accumulators, four a 64-dim chunk and
// row, and the table's four registers share the 32).
template <int NR, bool kSplit>
inline void row_accumulate_fp8(float* o, int ldo, int D, const float* alpha, const std::uint16_t* p, std::int64_t ldp,
                               std::int64_t p_rest, const std::uint8_t* v, std::int64_t ldv, int cols,
                               KvLineStream& next, int per_block, const Fp8Bf16Table& table) {
  constexpr int kWide = NR == 1 ? 2 : 1;
  for_pv_pair_blocks(D, cols, 64 * kWide, 64, next, per_block, [&]<bool kIsWide>(int c0, int c1, int d0) {
    pv_fp8_chunk<NR, kIsWide ? kWide : 1, kSplit>(o, ldo, D, alpha, c0 == 0, p, ldp, p_rest, v, ldv, c0, c1, cols, d0,
                                                  table);
  });
}

// Row `in` (head_dim padded to 64) from pv_fp8_chunk's order back to
// head_dim order, its first D values into `out` (which may be `in`):
// within each 64 dims, position 16k + 4L + j holds dim 16L + 4k + j (a
// transpose of 4 x 4 blocks of four).
inline void unorder_fp8_dims(const float* in, float* out, int D) {
  for (int d0 = 0; d0 < D; d0 += 64) {
    float t[64];
    std::memcpy(t, in + d0, sizeof t);
    for (int k = 0; k < 4; ++k) {
      for (int L = 0; L < 4; ++L) {
        for (int j = 0; j < 4; ++j) {
          const int dim = d0 + 16 * L + 4 * k + j;
          if (dim < D) out[dim] = t[16 * k + 4 * L + j];
        }
      }
    }
  }
}
#endif

// Whether x[0, n) are all finite (exponent bits not all ones).
inline bool all_finite(const float* x, int n) {
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bad |= (bits & 0x7f800000u) == 0x7f800000u;
  }
  return bad == 0;
}

// The cache lines of n floats `stride` apart (an int8 cache's per-key
// scales), into L2.
inline void prefetch_strided(const float* p, std::int64_t stride, int n) {
  const std::int64_t step = stride >= 16 ? 1 : 16 / (stride > 0 ? stride : 16);
  for (std::int64_t c = 0; c < n; c += step) __builtin_prefetch(p + c * stride, 0, 2);
  if (n > 0) __builtin_prefetch(p + (n - 1) * stride, 0, 2);
}

// The largest of s[0, n), -inf when n = 0; NaN entries are passed over,
// as `s > max ? s : max` would (the NaN reaches O through its exp2).
inline float row_max(const float* s, int n) {
  typename Vec::T acc = Vec::set1(kNegInf);
  int c = 0;
  for (; c + Vec::W <= n; c += Vec::W) acc = Vec::max(Vec::load(s + c), acc);
  float m = Vec::reduce_max(acc);
  for (; c < n; ++c) m = s[c] > m ? s[c] : m;
  return m;
}

// Rows [0, total) in register blocks of kRowBlock, the last ones smaller:
// body.template operator()<NR>(first row).  row_blocks: how many blocks.
template <class Body>
inline void for_row_blocks(int total, Body&& body) {
  int r = 0;
  for (; r + kRowBlock <= total; r += kRowBlock) body.template operator()<kRowBlock>(r);
  if constexpr (kRowBlock > 2) {
    if (total - r >= 2) {
      body.template operator()<2>(r);
      r += 2;
    }
  }
  if (r < total) body.template operator()<1>(r);
}
inline int row_blocks(int total) {
  int blocks = 0;
  for_row_blocks(total, [&blocks]<int>(int) { ++blocks; });
  return blocks;
}

// Rows the row path holds at once: a Q tile's, or a packed unit's (its
// query heads x at most job.row_rows rows each), and the scratch that
// takes (the loops size their workspace to cover it).
inline int row_path_rows(const AttentionJob& job) {
  const int packed = job.pack_group * (job.tile_q < job.row_rows ? job.tile_q : job.row_rows);
  return packed > job.tile_q ? packed : job.tile_q;
}
// An int8 cache's integer products (FA_HAVE_ROW_I8) also keep, past the
// Workspace, Q's and P's scales a row and Q's int16 rows (head_dim padded to
// 32).
inline std::size_t row_path_i8_floats(const AttentionJob& job) {
  if (job.kv_dtype != DType::kI8) return 0;
  const std::size_t rows = static_cast<std::size_t>(row_path_rows(job)), Dp = (job.head_dim + 31) / 32 * 32;
  return pad16(rows) * 2 + pad16(rows * Dp / 2);
}
// An FP8 cache's pair products (FA_HAVE_ROW_FP8) at a head_dim that is not
// a multiple of 64 keep Q's bf16 rows (two a row for fp16 Q) and O padded
// to 64 past the Workspace (at a multiple of 64 they fit where Q's and O's
// fp32 rows are).  A quantized cache has one kind, so this and the int8
// extra share the place.
inline std::size_t row_path_fp8_floats(const AttentionJob& job) {
  if (!is_fp8(job.kv_dtype) || job.head_dim % 64 == 0) return 0;
  const std::size_t rows = static_cast<std::size_t>(row_path_rows(job)), Dp = (job.head_dim + 63) / 64 * 64;
  return pad16(rows * Dp) * 2;
}
inline std::size_t row_path_workspace_floats(const AttentionJob& job) {
  return Workspace::floats(row_path_rows(job), job.tile_kv, static_cast<int>(job.head_dim)) + row_path_i8_floats(job) +
         row_path_fp8_floats(job);
}

// The row path (see detail::kRowPathMaxRows): per K/V tile and query row, scores
// by dot products over head_dim, the online softmax over keys in the lanes,
// and P·V with head_dim in the lanes.  Same masking, chunking and outputs as
// the tile path.  With packing (job.pack_group = g > 1) the item holds the
// same query rows of g query heads: row rr is query i0 + rr % rows of head
// h + rr / rows.  g is whole GQA groups (each K/V tile read once for a
// group), up to every head of the batch (short queries): then each K/V tile
// is read for the item's K/V heads in turn, so a layout whose heads share a
// token's row (BSH, BSND, TND) is read as whole contiguous rows, not one
// head's slice at a stride of all of them.  `w_tile` starts the item's
// scratch, which holds row_path_workspace_floats.  KDT: K's and V's dtype
// (DT, or a quantized cache's int8 / FP8; see run_rows).
template <DType DT, DType KDT, bool kPrefetch>
void run_rows_of(const AttentionJob& job, const Workspace& w_tile, const TileItem& it) {
  const int rows = it.rows;
  const std::int64_t i0 = it.i0, kv_begin = it.kv_begin, kv_end = it.kv_end, b = it.b, h = it.h, split = it.split;
  const char *qbase = it.qbase, *kbase = it.kbase, *vbase = it.vbase;
  const int D = static_cast<int>(job.head_dim);
  const int tkv = job.tile_kv;
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(DT)), kv_es = static_cast<std::int64_t>(dtype_size(KDT));
  const Workspace w = Workspace::carve(w_tile.qt, row_path_rows(job), tkv, D);
  const int total_rows = rows * job.pack_group;
  // The item's K/V heads, each with the rows of its group's query heads.
  const int kv_heads = job.pack_group > job.kv_group ? static_cast<int>(job.pack_group / job.kv_group) : 1;
  const int head_rows = total_rows / kv_heads;
  auto head_of = [&](int rr) { return h + rr / rows; };
  auto query_of = [&](int rr) { return i0 + rr % rows; };
  // Row rr's Q elements in the caller's tensor.
  auto q_row = [&](int rr) { return qbase + ((head_of(rr) - h) * job.q_strides[1] + (rr % rows) * job.q_strides[2]) * es; };
  float* q = w.qt;  // [total_rows][D]; each score is scaled once, after its dot product
  float* o = w.ot;  // [total_rows][D] unnormalized output
  for (int rr = 0; rr < total_rows; ++rr) {
    // Widened a vector at a time (an element at a time, fp16's bit fiddling
    // took 8% of a GQA 32/8 decoding call over 256 keys on Zen 4).
    load_tile<DT>(q_row(rr), 0, 1, D, q + rr * D);
    std::fill(o + rr * D, o + (rr + 1) * D, 0.0f);
    w.m[rr] = initial_row_max(job, head_of(rr), split);
    w.l[rr] = initial_row_sum(job, split);
  }
#if defined(FA_HAVE_SIMD_CONVERT)
  // 16-bit and 8-bit K/V are read in place and widened in registers (see
  // load_elems); FP8 in its units (kFp8RowUnit), which the score scale and
  // the output's denominator take back.
  constexpr bool kFused = KDT != DType::kF32;
  constexpr float kUnit = is_fp8(KDT) ? kFp8RowUnit<KDT> : 1.0f;
#else
  constexpr bool kFused = false;
  constexpr float kUnit = 1.0f;
#endif
  // An int8 cache read in place: each score times its key's K scale, each
  // probability (after the row sum took it) times its key's V scale, inside
  // the two products (KeyScales).  (Widened into buffers, the scales are
  // applied there.)
  constexpr bool kKeyScales = kFused && KDT == DType::kI8;
  // bf16 K/V on a policy that splits its pairs (row_scores_split): Q's rows
  // in split order.
  constexpr bool kSplitTypes = kFused && Vec::kSplitBf16 && DT == DType::kBF16 && KDT == DType::kBF16;
  const bool split_bf16 = kSplitTypes && D % (2 * Vec::W) == 0;
  if (split_bf16) {
    for (int rr = 0; rr < total_rows; ++rr) split_dims(q + rr * D, D);
  }
  float* s = w.st;  // [head_rows][tile_kv] scores, then probabilities
  const std::int64_t lds = tkv;
  // bf16 throughout on a CPU with VDPBF16PS: the products as pair dot
  // products (row_scores_pairs<Bf16Pairs>, row_accumulate_dot), with Q's bf16 rows in
  // place of its fp32 ones and the bf16 probabilities in the V buffer, which
  // V read in place leaves free.
#if defined(FA_HAVE_ROW_DOT) || defined(FA_HAVE_ROW_I8)
  const std::int64_t ldp = tkv + 2;  // even: a pair never straddles two rows
#endif
#if defined(FA_HAVE_ROW_DOT)
  constexpr bool kDotTypes = DT == DType::kBF16 && KDT == DType::kBF16;
  const bool dot = kDotTypes && D % 32 == 0 && std::int64_t(head_rows) * ldp <= 2 * std::int64_t(tkv) * D;
  // Q's bf16 rows where the fp32 rows would be (they take half the room).
  auto* qh = reinterpret_cast<std::uint16_t*>(w.qt);  // [total_rows][D]
  auto* pb = reinterpret_cast<std::uint16_t*>(w.vbuf);  // [head_rows][ldp]
  if (dot) {
    for (int rr = 0; rr < total_rows; ++rr) {
      const char* qrow = q_row(rr);
      std::memcpy(qh + rr * D, qrow, sizeof(std::uint16_t) * D);
    }
  }
#endif
  // An FP8 cache with 16-bit Q: the products as pair dot products on K and V
  // widened to bf16 through byte tables (Fp8Pairs, row_accumulate_fp8), Q's
  // bf16 rows (two a row for fp16: high and low parts) in K's order where
  // the fp32 rows would be, the bf16 probabilities in the V buffer.  The
  // widened values are exact, so the scores and O need no units (unit).
#if defined(FA_HAVE_ROW_FP8)
  constexpr bool kFp8Types = is_fp8(KDT) && (DT == DType::kBF16 || DT == DType::kF16);
  constexpr bool kSplitQ = DT == DType::kF16;
  // fp16 Q's probabilities as two bf16 rows each (pv_fp8_chunk), so each row takes 2 ldp.
  const std::int64_t ldp8 = kSplitQ ? 2 * ldp : ldp;
  // On the CPUs with the tile unit (Intel's), VDPBF16PS issues at half the
  // rate of the two FMA units, so the pair products win only where they
  // save the most widening: one query row a K/V head.  From 2 rows the FMA
  // products on codes widened to fp32 take their place (fp16 Q, 32768 keys,
  // BNSD, Xeon with AMX: 1 row 1.18x the time, 2 rows 0.94x, 4 rows 0.66x,
  // 8 rows 0.62x; docs/PERF.md).  (bf16 Q with 2 rows or more takes the
  // tile unit, pair_path_runs.)
#if defined(FA_HAVE_AMX) && !FA_AMX_EMULATION
  constexpr bool kFp8DotOneRowOnly = true;
#else
  constexpr bool kFp8DotOneRowOnly = false;
#endif
  const bool fp8dot = kFp8Types && (!kFp8DotOneRowOnly || head_rows == 1) &&
                      std::int64_t(head_rows) * ldp8 <= 2 * std::int64_t(tkv) * D;
  Fp8Bf16Table fp8_table{};
  if constexpr (kFp8Types) fp8_table = Fp8Bf16Table::of<KDT>();
  // head_dim padded to 64: Q's bf16 rows and O in place of the fp32 rows
  // where that is head_dim, else past the Workspace (row_path_fp8_floats).
  const int Dp8 = (D + 63) / 64 * 64;
  const Fp8Pairs<kSplitQ> fp8_pairs{fp8_table, Dp8};
  const int ldq8 = kSplitQ ? 2 * Dp8 : Dp8;
  float* fp8_extra = w_tile.qt + Workspace::floats(row_path_rows(job), tkv, D);
  auto* q8 = reinterpret_cast<std::uint16_t*>(Dp8 == D ? w.qt : fp8_extra);  // [total_rows][ldq8]
  float* o8 = Dp8 == D ? o : fp8_extra + pad16(std::size_t(row_path_rows(job)) * Dp8);  // [total_rows][Dp8]
  if (fp8dot) {
    for (int rr = 0; rr < total_rows; ++rr) {
      const char* qrow = q_row(rr);
      pack_q_fp8_order<DT, kSplitQ>(qrow, D, Dp8, q8 + rr * ldq8);
      if (o8 != o) std::fill(o8 + rr * Dp8, o8 + (rr + 1) * Dp8, 0.0f);
    }
  }
  const float unit = fp8dot ? 1.0f : kUnit;
#else
  [[maybe_unused]] constexpr bool fp8dot = false;
  constexpr float unit = kUnit;
#endif
  // An int8 cache on AVX-512: the products in integers (row_scores_pairs<I16Pairs>,
  // row_accumulate_i8), but for a tile whose scales are not all finite, or
  // whose probabilities are not, which takes the fp32 products (the NaN
  // rule as the reference says).  P's and Q's scales and Q's int16 rows lie
  // past the Workspace (row_path_i8_floats); the V buffer, which V read in
  // place leaves free, holds P's int16 rows.  A Q row that is not finite
  // keeps the item on the fp32 products.
#if defined(FA_HAVE_ROW_I8)
  constexpr bool kI8Types = kKeyScales;
  const int Dp = (D + 31) / 32 * 32;
  const std::size_t row_floats = static_cast<std::size_t>(row_path_rows(job));
  float* p_scale = w_tile.qt + Workspace::floats(row_path_rows(job), tkv, D);
  float* q_scale = p_scale + pad16(row_floats);
  auto* q16 = reinterpret_cast<std::int16_t*>(q_scale + pad16(row_floats));
  auto* p16 = reinterpret_cast<std::int16_t*>(w.vbuf);
  bool i8 = kI8Types && std::size_t(head_rows) * ldp / 2 <= std::size_t(tkv) * D;
  i8 = i8 && all_finite(q, total_rows * D);
  for (int rr = 0; i8 && rr < total_rows; ++rr) q_scale[rr] = quantize_row_i16(q + rr * D, D, Dp, q16 + rr * Dp);
#endif
  // Fused: the next tile's lines stream into L2 during this tile's work
  // (decoding reads every K/V byte once: without it each key row's load
  // waits on DRAM).  Otherwise load_kv_tile widens the tile (and with
  // kPrefetch fetches the next one).  The stream's lines go out a share per
  // key block of both products, over every row block: as evenly as the
  // tile's work allows, since a burst of prefetches beyond the core's miss
  // buffers stalls the work behind it.
  auto tile_cols = [&](std::int64_t j0) { return static_cast<int>(kv_end - j0 < tkv ? kv_end - j0 : tkv); };
  // P·V's key blocks: kPvPairKeys on the pair products, else kPvKeys.
  bool pair_pv = fp8dot;
#if defined(FA_HAVE_ROW_DOT)
  pair_pv = pair_pv || dot;
#endif
  const int pv_keys = pair_pv ? kPvPairKeys : kPvKeys;
  auto tile_steps = [&](int cols) {
    return row_blocks(head_rows) * ((cols + kKeyBlock - 1) / kKeyBlock + (cols + pv_keys - 1) / pv_keys);
  };
  auto head_k = [&](int g) { return kbase + g * job.k_strides[1] * kv_es; };
  auto head_v = [&](int g) { return vbase + g * job.v_strides[1] * kv_es; };
  // When the item's K/V heads lie side by side in a token's row (BSH, BSND,
  // TND holding several heads), each tile is read for all of them, and one
  // stream walks the next tile's rows in address order.  Else (BNSD, or a
  // paged pool laid out so) each K/V head runs its whole key range
  // in turn, streaming its next tile (at its last, the next head's first):
  // two streams at a time, K's and V's, where walking the heads side by
  // side kept two per head in flight (with the planner's larger tiles this
  // allows, GQA 32/8 and 64/8 decoding in BNSD 5-10% faster on Zen 4,
  // docs/PERF.md).  One loop for both orders, so the body is compiled once.
  const bool whole_rows = kv_heads > 1 && job.k_strides[1] == D && job.v_strides[1] == D;
  const std::int64_t tiles = (kv_end - kv_begin + tkv - 1) / tkv;
  KvLineStream next;
  int per_block = 0;
  for (std::int64_t step = 0; step < tiles * kv_heads; ++step) {
    const int g = static_cast<int>(whole_rows ? step % kv_heads : step / tiles);
    const std::int64_t j0 = kv_begin + (whole_rows ? step / kv_heads : step % tiles) * tkv;
    if (kFused && whole_rows && g == 0) {
      next = next_kv_tile_lines(job, kbase, vbase, b, j0, kv_end, kv_heads);
      per_block = next.per_step(kv_heads * tile_steps(tile_cols(j0)), 1);
    } else if (kFused && !whole_rows) {
      const bool last = j0 + tkv >= kv_end;
      next = !last ? next_kv_tile_lines(job, head_k(g), head_v(g), b, j0, kv_end)
             : g + 1 < kv_heads ? kv_tile_lines(job, head_k(g + 1), head_v(g + 1), b, kv_begin, kv_end)
                                : KvLineStream{};
      per_block = next.per_step(tile_steps(tile_cols(j0)), 1);
    }
    const int cols = tile_cols(j0);
    const char* kb = head_k(g);
    const char* vb = head_v(g);
    const KvScales scales = it.kv_scales.next_heads(job, g);
    const int first = g * head_rows;
    [[maybe_unused]] const std::int64_t row = kv_row(job, b, j0);
    [[maybe_unused]] const auto* kin = reinterpret_cast<const Elem<KDT>*>(kb) + row * job.k_strides[2];
    [[maybe_unused]] const auto* vin = reinterpret_cast<const Elem<KDT>*>(vb) + row * job.v_strides[2];
    // Read in place (kFused), but for an e4m3 tile holding the NaN code,
    // which the fast widening does not see (fp8_convert.h): that tile is
    // widened exactly into the buffers, in the same units.
    bool fused = kFused;
#if defined(FA_HAVE_SIMD_CONVERT)
    if constexpr (KDT == DType::kFP8E4M3) {
      fused = fp8dot || (!e4m3_rows_have_nan(kin, job.k_strides[2], cols, D) && !e4m3_rows_have_nan(vin, job.v_strides[2], cols, D));
    }
#endif
    const KvTile kv = fused ? KvTile{} : load_kv_tile<DT, kPrefetch>(job, w, kb, vb, b, j0, cols, kv_end, scales);
    if (kFused && !fused) {  // (never with fp8dot)
      for (std::int64_t i = 0; i < std::int64_t(cols) * D; ++i) {
        w.kbuf[i] *= kUnit;
        w.vbuf[i] *= kUnit;
      }
    }
    // An int8 cache's scales of the tile's keys, read at unit stride:
    // in place where they lie so (BNSD), else gathered into the (otherwise
    // unused) K buffer once per tile (in BSH a key's scales lie kv_heads
    // apart); and the next tile's sent into L2, which the K/V line stream
    // does not cover.
    [[maybe_unused]] KeyScales kscale, vscale;
    [[maybe_unused]] bool tile_i8 = false, pv_i8 = false;
    if constexpr (kKeyScales) {
      const std::int64_t kss = job.kv_scale_strides[0][2], vss = job.kv_scale_strides[1][2];
      const float* ks = scales.k + row * kss;
      const float* vs = scales.v + row * vss;
      if (kss == 1 && vss == 1) {
        kscale = {ks, 1};
        vscale = {vs, 1};
      } else {
        for (int c = 0; c < cols; ++c) {
          w.kbuf[c] = ks[c * kss];
          w.kbuf[tkv + c] = vs[c * vss];
        }
        kscale = {w.kbuf, 1};
        vscale = {w.kbuf + tkv, 1};
      }
#if defined(FA_HAVE_ROW_I8)
      tile_i8 = pv_i8 = i8 && all_finite(kscale.p, cols) && all_finite(vscale.p, cols);
#endif
      if (j0 + tkv < kv_end) {
        const std::int64_t next_row = kv_row(job, b, j0 + tkv);
        const int next_cols = static_cast<int>(kv_end - j0 - tkv < tkv ? kv_end - j0 - tkv : tkv);
        prefetch_strided(scales.k + next_row * kss, kss, next_cols);
        prefetch_strided(scales.v + next_row * vss, vss, next_cols);
      }
    }
    // Q·Kᵀ: the K/V head's rows against the tile's keys.
    for_row_blocks(head_rows, [&]<int NR>(int r0) {
#if defined(FA_HAVE_ROW_I8)
      if constexpr (kI8Types) {
        if (tile_i8) {
          row_scores_pairs<I16Pairs, NR>(I16Pairs{}, q16 + (first + r0) * Dp, Dp, D, kin, job.k_strides[2], cols, s + r0 * lds,
                                         lds, next, per_block);
          return;
        }
      }
#endif
#if defined(FA_HAVE_ROW_FP8)
      if constexpr (kFp8Types) {
        if (fp8dot) {
          row_scores_pairs<Fp8Pairs<kSplitQ>, NR>(fp8_pairs, q8 + (first + r0) * ldq8, ldq8, D, kin, job.k_strides[2],
                                                  cols, s + r0 * lds, lds, next, per_block);
          return;
        }
      }
#endif
#if defined(FA_HAVE_ROW_DOT)
      if constexpr (kDotTypes) {
        if (dot) {
          row_scores_pairs<Bf16Pairs, NR>(Bf16Pairs{}, qh + (first + r0) * D, D, D, kin, job.k_strides[2], cols, s + r0 * lds, lds,
                                          next, per_block);
          return;
        }
      }
#endif
#if defined(FA_HAVE_SIMD_CONVERT)
      if constexpr (kSplitTypes) {
        if (split_bf16) {
          row_scores_split<NR>(q + (first + r0) * D, D, kin, job.k_strides[2], cols, s + r0 * lds, lds, next, per_block);
          return;
        }
      }
      if constexpr (kFused) {
        if (fused) {
          row_scores<KDT, NR>(q + (first + r0) * D, D, kin, job.k_strides[2], cols, s + r0 * lds, lds, next, per_block,
                              kscale);
          return;
        }
      }
#endif
      row_scores<DType::kF32, NR>(q + (first + r0) * D, D, kv.k, kv.ldk, cols, s + r0 * lds, lds, next, per_block);
    });
    // The online softmax of each row (keys in the lanes).
    for (int r = 0; r < head_rows; ++r) {
      const int rr = first + r;
      const std::int64_t i = query_of(rr), head = head_of(rr);
      float* srow = s + r * lds;
      const float scale = score_scale(job, head) / unit;
#if defined(FA_HAVE_ROW_I8)
      if (tile_i8) {  // the integer scores' units: Q's scale and each key's K scale
        const float qk = scale * q_scale[rr];
        const float* ks = kscale.p;
        for (int c = 0; c < cols; ++c) srow[c] *= qk * ks[c];
      } else
#endif
      for (int c = 0; c < cols; ++c) srow[c] *= scale;
      if (has_score_modifiers(job)) modify_scores(job, head, i, 1, j0, cols, srow, 1, 0);
      if (job.window.active) mask_window(job, i, j0, cols, srow, 1);
      if (job.mask) {
        const std::int8_t* mrow = job.mask + i * job.seq_kv + j0;
        for (int c = 0; c < cols; ++c) {
          if (mrow[c] == 0) srow[c] = kNegInf;
        }
      }
      const float block_max = row_max(srow, cols);
      const float m_old = w.m[rr];
      const float m_new = block_max > m_old ? block_max : m_old;
      const float m_sub = m_new == kNegInf ? 0.0f : m_new;  // as in online_softmax_tile
      float sum;
#if defined(FA_HAVE_AVX512FP16)
      if constexpr (kHalfSoftmax<DT>) sum = exp2_row_half(srow, cols, m_sub); else
#endif
      sum = exp2_row(srow, cols, m_sub);
      float alpha = m_old - m_sub;
      exp2_row(&alpha, 1, 0.0f);
      w.l[rr] = w.l[rr] * alpha + sum;
      w.m[rr] = m_new;
      w.alpha[rr] = alpha;
      if (job.dropout.active) {  // after the row sum took the undropped P
        const std::int64_t bh = b * job.heads + head;
        for (int c = 0; c < cols; ++c) srow[c] *= detail::dropout_factor(job.dropout, bh, i, j0 + c);
      }
#if defined(FA_HAVE_ROW_DOT)
      if (dot) probabilities_to_bf16(srow, cols, pb + r * ldp);
#endif
#if defined(FA_HAVE_ROW_FP8)
      if (fp8dot) probabilities_to_bf16(srow, cols, pb + r * ldp8, kSplitQ ? pb + r * ldp8 + ldp : nullptr);
#endif
#if defined(FA_HAVE_ROW_I8)
      if (tile_i8) {
        p_scale[r] = probabilities_to_i16(srow, vscale.p, cols, i16_probability_top(cols), p16 + r * ldp);
        pv_i8 = pv_i8 && !std::isnan(p_scale[r]);
      }
#endif
    }
    // P·V, each row's O rescaled by its alpha.
    for_row_blocks(head_rows, [&]<int NR>(int r0) {
      float* orows = o + (first + r0) * D;
      const float* alpha = w.alpha + first + r0;
#if defined(FA_HAVE_ROW_I8)
      if constexpr (kI8Types) {
        if (pv_i8) {
          row_accumulate_i8<NR>(orows, D, alpha, p_scale + r0, p16 + r0 * ldp, ldp, vin, job.v_strides[2], cols, next,
                                per_block);
          return;
        }
      }
#endif
#if defined(FA_HAVE_ROW_FP8)
      if constexpr (kFp8Types) {
        if (fp8dot) {
          row_accumulate_fp8<NR, kSplitQ>(o8 + (first + r0) * Dp8, Dp8, D, alpha, pb + r0 * ldp8, ldp8, ldp, vin,
                                          job.v_strides[2], cols, next, per_block, fp8_table);
          return;
        }
      }
#endif
#if defined(FA_HAVE_ROW_DOT)
      if constexpr (kDotTypes) {
        if (dot) {
          row_accumulate_dot<NR>(orows, D, alpha, pb + r0 * ldp, ldp, vin, job.v_strides[2], cols, next, per_block);
          return;
        }
      }
#endif
#if defined(FA_HAVE_SIMD_CONVERT)
      if constexpr (kSplitTypes) {
        if (split_bf16) {
          row_accumulate_split<NR>(orows, D, alpha, s + r0 * lds, lds, vin, job.v_strides[2], cols, next, per_block);
          return;
        }
      }
      if constexpr (kFused) {
        if (fused) {
          row_accumulate<KDT, NR>(orows, D, alpha, s + r0 * lds, lds, vin, job.v_strides[2], cols, next, per_block,
                                  vscale);
          return;
        }
      }
#endif
      row_accumulate<DType::kF32, NR>(orows, D, alpha, s + r0 * lds, lds, kv.v, kv.ldv, cols, next, per_block);
    });
  }
#if defined(FA_HAVE_ROW_DOT)
  if (dot) {
    for (int rr = 0; rr < total_rows; ++rr) unpair_dims(o + rr * D, D);
  }
#endif
#if defined(FA_HAVE_ROW_FP8)
  if (fp8dot) {
    for (int rr = 0; rr < total_rows; ++rr) unorder_fp8_dims(o8 + rr * Dp8, o + rr * D, D);
  }
#endif
  if (split_bf16) {
    for (int rr = 0; rr < total_rows; ++rr) unsplit_dims(o + rr * D, D);
  }
  const std::int64_t BH = job.batch * job.heads;
  for (int rr = 0; rr < total_rows; ++rr) {
    const std::int64_t i = query_of(rr), head = head_of(rr), bh = b * job.heads + head;
    const float den = row_denominator(w.l[rr]) / (output_scale(job, head) / unit);  // V's descale (FP8) or 1
    const float lse = row_lse(w.m[rr], w.l[rr]);
    if (job.num_splits > 1) {
      float* po = job.partial_o + ((split * BH + bh) * job.seq_q + i) * D;
      for (int d = 0; d < D; ++d) po[d] = o[rr * D + d] / den;
      job.partial_lse[(split * BH + bh) * job.seq_q + i] = lse;
      continue;
    }
    with_output_dtype<DT>(job, [&]<DType ODT>() {
      char* orow = static_cast<char*>(job.o) +
                   (b * job.o_strides[0] + head * job.o_strides[1] + i * job.o_strides[2]) * dtype_size(ODT);
      store_row_divided<ODT>(orow, o + rr * D, D, den);
    });
    if (job.lse) job.lse[b * job.lse_strides[0] + head * job.lse_strides[1] + i] = lse;
  }
}

// The row path of one Q tile: K/V in Q's dtype, or a quantized cache's int8
// or FP8 (16-bit Q only: the other combinations are refused before any job
// is built, and are not compiled).  A quantized cache takes no prefetch
// variant: read in place, its next tile streams anyway (kFused).
template <DType DT, bool kPrefetch>
void run_rows(const AttentionJob& job, const Workspace& w_tile, const TileItem& it) {
  if constexpr (DT == DType::kF16 || DT == DType::kBF16) {
    switch (job.kv_dtype) {
      case DType::kI8: return run_rows_of<DT, DType::kI8, false>(job, w_tile, it);
      case DType::kFP8E4M3: return run_rows_of<DT, DType::kFP8E4M3, false>(job, w_tile, it);
      case DType::kFP8E5M2: return run_rows_of<DT, DType::kFP8E5M2, false>(job, w_tile, it);
      default: break;
    }
  }
  run_rows_of<DT, DT, kPrefetch>(job, w_tile, it);
}

}  // namespace fa::FA_KERNEL_NS
