// What changes scores and probabilities besides masks: soft-capping,
// ALiBi, the additive bias, attention sinks (the softmax state a row starts
// from), dropout, and FP8's descale factors.
#pragma once

#include "tile_state.h"

namespace fa::FA_KERNEL_NS {


// tanh on the vector unit: (1 - e) / (1 + e) with e = exp(-2|x|) <= 1, so
// the softmax's exp2 serves (absolute error ~1e-7).
inline typename Vec::T tanh_vec(typename Vec::T x) {
  const typename Vec::T e = Vec::exp2(Vec::mul(Vec::abs(x), Vec::set1(-2.8853900817779268f)));  // -2 log2(e)
  const typename Vec::T one = Vec::set1(1.0f);
  return Vec::copysign(Vec::div(Vec::sub(one, e), Vec::add(one, e)), x);
}

// A row's online-softmax state before its first key: max -inf and sum 0, or,
// with an attention sink, the sink as the max and exp(0) = 1 as the sum.
// The sink joins once per row, in the first K/V chunk.
inline float initial_row_max(const AttentionJob& job, std::int64_t h, std::int64_t split) {
  return job.sinks && split == 0 ? job.sinks[h] * 1.4426950408889634f : kNegInf;
}
inline float initial_row_sum(const AttentionJob& job, std::int64_t split) { return job.sinks && split == 0 ? 1.0f : 0.0f; }

// FP8 inputs' dequantization factors (1 for other dtypes): the scores of
// query head h are scaled by Q's and K's, its output by V's.
inline float descale_of(const AttentionJob& job, int tensor, std::int64_t head) {
  return job.descale[tensor] ? job.descale[tensor][head * job.descale_stride[tensor]] : 1.0f;
}
inline float score_scale(const AttentionJob& job, std::int64_t h) {
  return job.scale_log2 * descale_of(job, 0, h) * descale_of(job, 1, h / job.kv_group);
}
inline float output_scale(const AttentionJob& job, std::int64_t h) { return descale_of(job, 2, h / job.kv_group); }

inline bool has_score_modifiers(const AttentionJob& job) {
  return job.softcap_log2 > 0.0f || job.alibi_slopes || job.bias;
}

// Applies softcap, ALiBi and bias (in that order) to scores of rows
// [i0, i0 + rows) and keys [j0, j0 + cols): s[c * key_stride + r * row_stride].
// Scores are in log2 units (scaled by scale * log2(e)), so every modifier is too.
inline void modify_scores(const AttentionJob& job, std::int64_t h, std::int64_t i0, int rows, std::int64_t j0, int cols,
                          float* s, std::int64_t key_stride, std::int64_t row_stride) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (job.softcap_log2 > 0.0f) {
    // Vectorized along whichever of keys and rows is contiguous.
    const typename Vec::T cap = Vec::set1(job.softcap_log2), inv = Vec::set1(1.0f / job.softcap_log2);
    const bool rows_contiguous = row_stride == 1;
    const int outer = rows_contiguous ? cols : rows, inner = rows_contiguous ? rows : cols;
    const std::int64_t outer_stride = rows_contiguous ? key_stride : row_stride;
    for (int a = 0; a < outer; ++a) {
      float* line = s + a * outer_stride;
      int b = 0;
      for (; b + Vec::W <= inner; b += Vec::W) {
        Vec::store(line + b, Vec::mul(cap, tanh_vec(Vec::mul(Vec::load(line + b), inv))));
      }
      if (b < inner) {
        float buf[Vec::W] = {};
        for (int k = 0; b + k < inner; ++k) buf[k] = line[b + k];
        Vec::store(buf, Vec::mul(cap, tanh_vec(Vec::mul(Vec::load(buf), inv))));
        for (int k = 0; b + k < inner; ++k) line[b + k] = buf[k];
      }
    }
  }
  if (job.alibi_slopes) {
    const float slope = job.alibi_slopes[h] * kLog2e;
    const std::int64_t offset = job.seq_kv - job.seq_q;
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < rows; ++r) {
        const std::int64_t dist = i0 + r + offset - (j0 + c);
        s[c * key_stride + r * row_stride] -= slope * float(dist < 0 ? -dist : dist);
      }
    }
  }
  if (job.bias) {
    const float* bias = job.bias + h * job.bias_head_stride;
    for (int r = 0; r < rows; ++r) {
      const float* brow = bias + (i0 + r) * job.seq_kv + j0;
      for (int c = 0; c < cols; ++c) s[c * key_stride + r * row_stride] += brow[c] * kLog2e;
    }
  }
}


// Dropout on a Pᵀ tile, after the row sum took the undropped P.
inline void drop_tile(const AttentionJob& job, std::int64_t bh, std::int64_t i0, int rows, std::int64_t j0, int cols,
                      float* st, int tq) {
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < rows; ++r) st[std::int64_t(c) * tq + r] *= detail::dropout_factor(job.dropout, bh, i0 + r, j0 + c);
  }
}

}  // namespace fa::FA_KERNEL_NS
