// The RoPE kernel, written once over the attention kernels' vector policy
// (flash_attention/kernels/vec_*.h, `Vec`) and the shared vector loads and
// stores (vec_io.h), compiled per path by kernels/rope_<path>.cpp inside
// its own FA_KERNEL_NS.
//
// An item is a chunk of tokens and a group of heads.  The chunk's cos and
// sin rows are made first (from the table, or from the angles), expanded so
// that both modes rotate as  out = x * C + partner(x) * S  with S carrying
// the sign, then each head's vectors of the chunk are rotated: head by head,
// so a BNSD tensor is read in runs of whole rows (the next chunk's run of
// each head prefetched meanwhile).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/dtype_convert.h"
#include "kernels/vec_io.h"
#include "rope_job.h"

namespace fa::FA_KERNEL_NS {

// cos and sin of position * inv_freq[i], i < n, in fp32.  The angle is
// formed in double and reduced by the nearest multiple q of pi/2 (Cody and
// Waite's two-part pi/2: q * its 33-bit head is exact while q < 2^20, and
// positions below 2^24 keep the reduced angle within 1e-8), then sin and
// cos of the rest (|y| <= pi/4) by their Taylor series to degree 11 and 12
// (truncation below 2e-9), and the quadrant q mod 4 picks and signs them.
// No library call.  Eight angles a vector on the AVX-512 paths, four on
// avx2 (the compiler left the scalar form scalar: 31% of a BNSD call's time
// with its data in cache, one Zen 4 core); the scalar form for the rest.
namespace rope_angles {
constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kPio2Hi = 1.57079632673412561417e+00;  // the first 33 bits of pi/2
constexpr double kPio2Lo = 6.07710050650619224932e-11;  // pi/2 - kPio2Hi
constexpr double kRound = 0x1.8p52;                     // adding it rounds to an integer (|x| < 2^51)
// sin(y) / y and cos(y) as polynomials in y^2 (Taylor to degree 11 and 12),
// highest term first.
constexpr double kSin[6] = {-1.0 / 39916800, 1.0 / 362880, -1.0 / 5040, 1.0 / 120, -1.0 / 6, 1.0};
constexpr double kCos[7] = {1.0 / 479001600, -1.0 / 3628800, 1.0 / 40320, -1.0 / 720, 1.0 / 24, -0.5, 1.0};
}  // namespace rope_angles

inline void angle_cos_sin(double a, float* cos_out, float* sin_out) {
  using namespace rope_angles;
  const double shifted = a * kTwoOverPi + kRound;
  const double q = shifted - kRound;
  std::uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const unsigned quadrant = static_cast<unsigned>(bits) & 3u;  // q mod 4 (two's complement low bits)
  const double y = (a - q * kPio2Hi) - q * kPio2Lo;
  const double y2 = y * y;
  double s = kSin[0], c = kCos[0];
  for (int k = 1; k < 6; ++k) s = s * y2 + kSin[k];
  for (int k = 1; k < 7; ++k) c = c * y2 + kCos[k];
  s *= y;
  // sin(y + q pi/2), cos(y + q pi/2) for q mod 4 = 0, 1, 2, 3:
  // (s, c), (c, -s), (-s, -c), (-c, s).
  const double sv = (quadrant & 1u) ? c : s;
  const double cv = (quadrant & 1u) ? s : c;
  *sin_out = static_cast<float>((quadrant & 2u) ? -sv : sv);
  *cos_out = static_cast<float>(((quadrant + 1u) & 2u) ? -cv : cv);
}

#if defined(__AVX2__) || defined(__AVX512F__)
// The reduction and both series of angle_cos_sin on a vector of angles a,
// DV the path's vector of doubles: sin and cos of the remainder y, and a
// plus the rounding constant, whose low bits hold q mod 4.
template <class DV>
inline void reduced_sin_cos(typename DV::T a, typename DV::T* sin_y, typename DV::T* cos_y, typename DV::T* shifted) {
  using namespace rope_angles;
  const typename DV::T round = DV::set1(kRound);
  *shifted = DV::fmadd(a, DV::set1(kTwoOverPi), round);
  const typename DV::T q = DV::sub(*shifted, round);
  const typename DV::T y = DV::fnmadd(q, DV::set1(kPio2Lo), DV::fnmadd(q, DV::set1(kPio2Hi), a));
  const typename DV::T y2 = DV::mul(y, y);
  typename DV::T s = DV::set1(kSin[0]), c = DV::set1(kCos[0]);
  for (int k = 1; k < 6; ++k) s = DV::fmadd(s, y2, DV::set1(kSin[k]));
  for (int k = 1; k < 7; ++k) c = DV::fmadd(c, y2, DV::set1(kCos[k]));
  *sin_y = DV::mul(s, y);
  *cos_y = c;
}
#endif
#if defined(__AVX512F__)
struct Pd512 {
  using T = __m512d;
  static T set1(double x) { return _mm512_set1_pd(x); }
  static T mul(T a, T b) { return _mm512_mul_pd(a, b); }
  static T sub(T a, T b) { return _mm512_sub_pd(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_pd(a, b, c); }
  static T fnmadd(T a, T b, T c) { return _mm512_fnmadd_pd(a, b, c); }
};
#elif defined(__AVX2__)
struct Pd256 {
  using T = __m256d;
  static T set1(double x) { return _mm256_set1_pd(x); }
  static T mul(T a, T b) { return _mm256_mul_pd(a, b); }
  static T sub(T a, T b) { return _mm256_sub_pd(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_pd(a, b, c); }
  static T fnmadd(T a, T b, T c) { return _mm256_fnmadd_pd(a, b, c); }
};
#endif

inline void angles_cos_sin(double position, const double* inv_freq, std::int64_t n, float* cos_out, float* sin_out) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  const __m512d pos = _mm512_set1_pd(position);
  const __m512i one = _mm512_set1_epi64(1), two = _mm512_set1_epi64(2), sign = _mm512_set1_epi64(INT64_MIN);
  for (; i + 8 <= n; i += 8) {
    __m512d s, c, shifted;
    reduced_sin_cos<Pd512>(_mm512_mul_pd(pos, _mm512_loadu_pd(inv_freq + i)), &s, &c, &shifted);
    const __m512i quadrant = _mm512_castpd_si512(shifted);  // q mod 4 in its low bits
    const __mmask8 odd = _mm512_test_epi64_mask(quadrant, one);
    const __mmask8 sin_neg = _mm512_test_epi64_mask(quadrant, two);
    const __mmask8 cos_neg = _mm512_test_epi64_mask(_mm512_add_epi64(quadrant, one), two);
    const __m512i sv = _mm512_castpd_si512(_mm512_mask_blend_pd(odd, s, c));
    const __m512i cv = _mm512_castpd_si512(_mm512_mask_blend_pd(odd, c, s));
    _mm256_storeu_ps(sin_out + i, _mm512_cvtpd_ps(_mm512_castsi512_pd(_mm512_mask_xor_epi64(sv, sin_neg, sv, sign))));
    _mm256_storeu_ps(cos_out + i, _mm512_cvtpd_ps(_mm512_castsi512_pd(_mm512_mask_xor_epi64(cv, cos_neg, cv, sign))));
  }
#elif defined(__AVX2__)
  // Four angles a vector.  AVX2 has no mask registers: the quadrant's bits
  // are shifted into the sign bit, which BLENDVPD reads as its selector and
  // an AND with the sign bit turns into the sign to flip.
  const __m256d pos = _mm256_set1_pd(position);
  const __m256i one = _mm256_set1_epi64x(1), sign = _mm256_set1_epi64x(INT64_MIN);
  for (; i + 4 <= n; i += 4) {
    __m256d s, c, shifted;
    reduced_sin_cos<Pd256>(_mm256_mul_pd(pos, _mm256_loadu_pd(inv_freq + i)), &s, &c, &shifted);
    const __m256i quadrant = _mm256_castpd_si256(shifted);  // q mod 4 in its low bits
    const __m256d odd = _mm256_castsi256_pd(_mm256_slli_epi64(quadrant, 63));
    const __m256d sin_neg = _mm256_castsi256_pd(_mm256_and_si256(_mm256_slli_epi64(quadrant, 62), sign));
    const __m256d cos_neg = _mm256_castsi256_pd(_mm256_and_si256(_mm256_slli_epi64(_mm256_add_epi64(quadrant, one), 62), sign));
    const __m256d sv = _mm256_blendv_pd(s, c, odd), cv = _mm256_blendv_pd(c, s, odd);
    _mm_storeu_ps(sin_out + i, _mm256_cvtpd_ps(_mm256_xor_pd(sv, sin_neg)));
    _mm_storeu_ps(cos_out + i, _mm256_cvtpd_ps(_mm256_xor_pd(cv, cos_neg)));
  }
#endif
  for (; i < n; ++i) angle_cos_sin(position * inv_freq[i], cos_out + i, sin_out + i);
}

// The position of token t (t = b * seq + s; TND: the total's index).
inline std::int64_t token_position(const detail::RopeJob& job, std::int64_t t) {
  if (job.positions) return job.positions[t];
  if (!job.cu_seqlens) return t % job.seq;
  // The sequence holding t: the last start <= t.
  std::int64_t lo = 0, hi = job.num_sequences;
  while (hi - lo > 1) {
    const std::int64_t mid = (lo + hi) / 2;
    (job.cu_seqlens[mid] <= t ? lo : hi) = mid;
  }
  return t - job.cu_seqlens[lo];
}

// Token t's expanded rows: C[j] the cos of j's pair, S[j] its sin signed
// so that out[j] = x[j] C[j] + x[partner(j)] S[j].
inline void expand_token(const detail::RopeJob& job, std::int64_t t, float* c_row, float* s_row) {
  const std::int64_t half = job.rotary_dim / 2;
  const std::int64_t pos = token_position(job, t);
  // The half rows first, in the second half of C and S (rotate-half reads
  // them in place; interleaved spreads them over the whole row after).
  float* ch = c_row + half;
  float* sh = s_row + half;
  if (job.cos_table) {
    std::memcpy(ch, job.cos_table + pos * half, static_cast<std::size_t>(half) * sizeof(float));
    std::memcpy(sh, job.sin_table + pos * half, static_cast<std::size_t>(half) * sizeof(float));
  } else {
    angles_cos_sin(static_cast<double>(pos), job.inv_freq, half, ch, sh);
  }
  if (job.mode == RopeMode::kRotateHalf) {
    // (x[i], x[i + half]): out[i] = x[i] c - x[i + half] s, out[i + half] = x[i + half] c + x[i] s.
    for (std::int64_t i = 0; i < half; ++i) {
      c_row[i] = ch[i];
      s_row[i] = -sh[i];
    }
  } else {
    // (x[2i], x[2i + 1]): out[2i] = x[2i] c - x[2i + 1] s, out[2i + 1] = x[2i + 1] c + x[2i] s.
    // Left to right: element i of the halves is read before 2i and 2i + 1
    // (>= i, and >= half only where i's own entry lies there) are written.
    for (std::int64_t i = 0; i < half; ++i) {
      const float c = ch[i], s = sh[i];
      c_row[2 * i] = c;
      c_row[2 * i + 1] = c;
      s_row[2 * i] = -s;
      s_row[2 * i + 1] = s;
    }
  }
}

// Adjacent lanes swapped: (x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...).
inline typename Vec::T swap_pairs(typename Vec::T v) {
#if defined(__AVX512F__)
  return _mm512_permute_ps(v, 0xB1);
#elif defined(__AVX2__)
  return _mm256_permute_ps(v, 0xB1);
#else
  return _mm_shuffle_ps(v, v, 0xB1);
#endif
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// bf16 in and out on AVX2 (Vec::kSplitBf16): each 2W elements loaded as W
// 32-bit pairs and widened as their even and odd values, and stored back as
// one pair vector (store_bf16_split: no widening load, pack or permute).
// The chunk's cos and sin rows are put in the same order first
// (split_rows), so each lane meets its own factors: rotate-half pairs a
// block with the block half a row on (the same lanes), interleaved pairs
// each even value with the odd one beside it (the other vector).  The same
// arithmetic for each element as the plain loop, so the same bits.  Where
// it applies: split_rope_rows.
inline bool split_rope_rows(const detail::RopeJob& job) {
  constexpr std::int64_t kBlock = 2 * Vec::W;
  return job.mode == RopeMode::kRotateHalf ? (job.rotary_dim / 2) % kBlock == 0 : job.rotary_dim % kBlock == 0;
}
// The rows [n x rotary_dim] reordered within each block of 2W: the even
// entries, then the odd ones.
inline void split_rows(float* rows, std::int64_t n) {
  constexpr int W = Vec::W;
  for (std::int64_t i = 0; i + 2 * W <= n; i += 2 * W) {
    float even[W], odd[W];
    for (int k = 0; k < W; ++k) {
      even[k] = rows[i + 2 * k];
      odd[k] = rows[i + 2 * k + 1];
    }
    for (int k = 0; k < W; ++k) {
      rows[i + k] = even[k];
      rows[i + W + k] = odd[k];
    }
  }
}
inline void rotate_vector_split(const detail::RopeJob& job, const std::uint16_t* in, void* out, bool in_place, bool stream,
                                const float* c_row, const float* s_row) {
  constexpr int W = Vec::W;
  const std::int64_t rd = job.rotary_dim, half = rd / 2;
  using T = typename Vec::T;
  if (job.mode == RopeMode::kRotateHalf) {
    for (std::int64_t i = 0; i < half; i += 2 * W) {
      const T pa = Vec::load_pairs(in + i), pb = Vec::load_pairs(in + i + half);
      const T ae = Vec::bf16_even(pa), ao = Vec::bf16_odd(pa), be = Vec::bf16_even(pb), bo = Vec::bf16_odd(pb);
      const std::int64_t j = i + half;
      store_bf16_split(out, i, Vec::fmadd(be, Vec::load(s_row + i), Vec::mul(ae, Vec::load(c_row + i))),
                       Vec::fmadd(bo, Vec::load(s_row + i + W), Vec::mul(ao, Vec::load(c_row + i + W))), stream);
      store_bf16_split(out, j, Vec::fmadd(ae, Vec::load(s_row + j), Vec::mul(be, Vec::load(c_row + j))),
                       Vec::fmadd(ao, Vec::load(s_row + j + W), Vec::mul(bo, Vec::load(c_row + j + W))), stream);
    }
  } else {
    for (std::int64_t j = 0; j < rd; j += 2 * W) {
      const T p = Vec::load_pairs(in + j);
      const T e = Vec::bf16_even(p), o = Vec::bf16_odd(p);
      store_bf16_split(out, j, Vec::fmadd(o, Vec::load(s_row + j), Vec::mul(e, Vec::load(c_row + j))),
                       Vec::fmadd(e, Vec::load(s_row + j + W), Vec::mul(o, Vec::load(c_row + j + W))), stream);
    }
  }
  if (in_place) return;
  std::int64_t j = rd;
  for (; j + W <= job.head_dim; j += W) store_vec<DType::kBF16>(out, j, load_vec<DType::kBF16>(in, j), stream);
  for (; j < job.head_dim; ++j) detail::store_from_f32(out, DType::kBF16, j, detail::bf16_to_f32(in[j]));
}
#endif

// One head vector of head_dim elements: the rotary part turned, the rest
// copied when out of place (in place it is already there); the vector
// stores through non-temporal stores with `stream`.
template <DType IT, DType OT>
inline void rotate_vector(const detail::RopeJob& job, const void* in, void* out, bool in_place, bool stream,
                          const float* c_row, const float* s_row, bool split) {
  constexpr int W = Vec::W;
  const std::int64_t rd = job.rotary_dim, half = rd / 2;
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (IT == DType::kBF16 && OT == DType::kBF16) {
    if (split) return rotate_vector_split(job, static_cast<const std::uint16_t*>(in), out, in_place, stream, c_row, s_row);
  }
#else
  (void)split;
#endif
  auto scalar = [&](std::int64_t j, std::int64_t partner) {
    return detail::load_as_f32(in, IT, j) * c_row[j] + detail::load_as_f32(in, IT, partner) * s_row[j];
  };
  if (job.mode == RopeMode::kRotateHalf) {
    std::int64_t i = 0;
    for (; i + W <= half; i += W) {
      const typename Vec::T a = load_vec<IT>(in, i), b = load_vec<IT>(in, i + half);
      const typename Vec::T oa = Vec::fmadd(b, Vec::load(s_row + i), Vec::mul(a, Vec::load(c_row + i)));
      const typename Vec::T ob = Vec::fmadd(a, Vec::load(s_row + half + i), Vec::mul(b, Vec::load(c_row + half + i)));
      store_vec<OT>(out, i, oa, stream);
      store_vec<OT>(out, i + half, ob, stream);
    }
    for (; i < half; ++i) {
      const float oa = scalar(i, i + half), ob = scalar(i + half, i);
      detail::store_from_f32(out, OT, i, oa);
      detail::store_from_f32(out, OT, i + half, ob);
    }
  } else {
    std::int64_t j = 0;
    for (; j + W <= rd; j += W) {
      const typename Vec::T x = load_vec<IT>(in, j);
      store_vec<OT>(out, j, Vec::fmadd(swap_pairs(x), Vec::load(s_row + j), Vec::mul(x, Vec::load(c_row + j))), stream);
    }
    for (; j < rd; j += 2) {
      const float o0 = scalar(j, j + 1), o1 = scalar(j + 1, j);
      detail::store_from_f32(out, OT, j, o0);
      detail::store_from_f32(out, OT, j + 1, o1);
    }
  }
  if (in_place) return;
  std::int64_t j = rd;
  for (; j + W <= job.head_dim; j += W) store_vec<OT>(out, j, load_vec<IT>(in, j), stream);
  for (; j < job.head_dim; ++j) detail::store_from_f32(out, OT, j, detail::load_as_f32(in, IT, j));
}

// Heads [h0, h1) of one operand (local head numbers) for the chunk's tokens,
// in the order of memory: token by token when a token's heads lie together
// (BSH, BSND, TND), head by head when a head's tokens do (BNSD).
template <DType IT, DType OT>
inline void rotate_heads(const detail::RopeJob& job, const detail::RopeOperand& op, std::int64_t t0, std::int64_t t1,
                         std::int64_t h0, std::int64_t h1, const float* c_rows, const float* s_rows, bool split) {
  const std::int64_t is = IT == DType::kF32 ? 4 : 2, os = OT == DType::kF32 ? 4 : 2;
  const bool in_place = op.out == op.in;
  const char* in = static_cast<const char*>(op.in);
  char* out = static_cast<char*>(op.out);
  // Streamed where every vector store lands on its own boundary: a row on
  // a 64-byte line (checked per row), and vectors from it at whole
  // multiples of W (the second half, and the copied rest, start at one).
  constexpr int W = Vec::W;
  const std::int64_t rd = job.rotary_dim;
  const bool stream_rows = job.stream && !in_place && rd % W == 0 && (job.mode != RopeMode::kRotateHalf || (rd / 2) % W == 0);
  auto one = [&](std::int64_t t, std::int64_t in_token, std::int64_t out_token, std::int64_t h) {
    const std::int64_t k = (t - t0) * rd;
    char* row = out + (out_token + h * op.out_strides[1]) * os;
    rotate_vector<IT, OT>(job, in + (in_token + h * op.in_strides[1]) * is, row, in_place,
                          stream_rows && reinterpret_cast<std::uintptr_t>(row) % 64 == 0, c_rows + k, s_rows + k, split);
  };
  // Each token's offsets (batch and sequence index) once, not per head.
  std::int64_t in_token[detail::kRopeMaxChunk], out_token[detail::kRopeMaxChunk];
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t b = t / job.seq, s = t % job.seq;
    in_token[t - t0] = b * op.in_strides[0] + s * op.in_strides[2];
    out_token[t - t0] = b * op.out_strides[0] + s * op.out_strides[2];
  }
  if (op.in_strides[1] < op.in_strides[2]) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t h = h0; h < h1; ++h) one(t, in_token[t - t0], out_token[t - t0], h);
    }
    return;
  }
  // Head by head, each head's rows of the chunk in one run, and the same
  // head's rows of the next chunk (which this thread takes next: rope_forward
  // hands out runs of chunks) sent for while this one turns: an item reads
  // dozens of such runs, more streams than the prefetchers follow, and
  // without it the BNSD call moved 0.65x of BSH's bytes a second (Zen 4,
  // docs/PERF.md).
  const std::int64_t n = t1 - t0, tokens = job.batch * job.seq, row_bytes = job.head_dim * is;
  std::int64_t next_token[detail::kRopeMaxChunk];
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t tn = t + n, b = tn / job.seq, s = tn % job.seq;
    next_token[t - t0] = tn < tokens ? b * op.in_strides[0] + s * op.in_strides[2] : -1;
  }
  for (std::int64_t h = h0; h < h1; ++h) {
    for (std::int64_t t = t0; t < t1; ++t) {
      if (next_token[t - t0] >= 0) {
        const char* row = in + (next_token[t - t0] + h * op.in_strides[1]) * is;
        for (std::int64_t l = 0; l < row_bytes; l += 64) {
          if (in_place) __builtin_prefetch(row + l, 1, 2); else __builtin_prefetch(row + l, 0, 2);
        }
      }
      one(t, in_token[t - t0], out_token[t - t0], h);
    }
  }
}

template <DType IT>
inline void rotate_heads_in(const detail::RopeJob& job, const detail::RopeOperand& op, std::int64_t t0, std::int64_t t1,
                            std::int64_t h0, std::int64_t h1, const float* c_rows, const float* s_rows, bool split) {
  switch (op.out_dtype) {
    case DType::kF16: return rotate_heads<IT, DType::kF16>(job, op, t0, t1, h0, h1, c_rows, s_rows, split);
    case DType::kBF16: return rotate_heads<IT, DType::kBF16>(job, op, t0, t1, h0, h1, c_rows, s_rows, split);
    default: return rotate_heads<IT, DType::kF32>(job, op, t0, t1, h0, h1, c_rows, s_rows, split);
  }
}

inline void rope_run(const detail::RopeJob& job, std::int64_t t0, std::int64_t t1, std::int64_t h0, std::int64_t h1,
                     float* scratch) {
  float* c_rows = scratch;
  float* s_rows = scratch + (t1 - t0) * job.rotary_dim;
  for (std::int64_t t = t0; t < t1; ++t) {
    expand_token(job, t, c_rows + (t - t0) * job.rotary_dim, s_rows + (t - t0) * job.rotary_dim);
  }
  // The split order where every operand is bf16 in and out (the rows are
  // shared by the operands).
  bool split = false;
#if defined(__AVX2__) && !defined(__AVX512F__)
  split = split_rope_rows(job);
  for (int k = 0; k < job.num_operands; ++k) {
    split = split && job.operands[k].in_dtype == DType::kBF16 && job.operands[k].out_dtype == DType::kBF16;
  }
  if (split) {
    split_rows(c_rows, (t1 - t0) * job.rotary_dim);
    split_rows(s_rows, (t1 - t0) * job.rotary_dim);
  }
#endif
  std::int64_t first = 0;  // the operand's first head in the global count
  for (int k = 0; k < job.num_operands; ++k) {
    const detail::RopeOperand& op = job.operands[k];
    const std::int64_t a = h0 > first ? h0 - first : 0, b = h1 - first < op.heads ? h1 - first : op.heads;
    if (a < b) {
      switch (op.in_dtype) {
        case DType::kF16: rotate_heads_in<DType::kF16>(job, op, t0, t1, a, b, c_rows, s_rows, split); break;
        case DType::kBF16: rotate_heads_in<DType::kBF16>(job, op, t0, t1, a, b, c_rows, s_rows, split); break;
        default: rotate_heads_in<DType::kF32>(job, op, t0, t1, a, b, c_rows, s_rows, split); break;
      }
    }
    first += op.heads;
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  if (job.stream) _mm_sfence();  // the streamed lines reach memory before the pool reports the item done
#endif
}

}  // namespace fa::FA_KERNEL_NS
