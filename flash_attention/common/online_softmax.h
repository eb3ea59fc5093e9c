// The online-softmax state of one score row (FlashAttention's running row
// maximum and row sum), and the one place where a row that has seen no
// attendable key (all -inf) is handled.
//
// Scores arrive already multiplied by scale * log2(e), so exp2 replaces exp.
#pragma once

#include <cmath>
#include <limits>

#include "exp2.h"

namespace fa::detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr float kLn2 = 0.69314718055994531f;
inline constexpr float kLog2e = 1.4426950408889634f;

// Folds one block of scores s[0..n) into the running (max, sum) of a row.
// On return s holds the unnormalized probabilities exp2(s - new_max) and the
// function returns the factor the row's output accumulator must be scaled by
// before this block's P·V is added: exp2(old_max - new_max), or 1 when the
// row has still seen no attendable key.
inline float online_softmax_update(float* s, int n, float& row_max, float& row_sum) {
  float block_max = kNegInf;
  for (int j = 0; j < n; ++j) block_max = s[j] > block_max ? s[j] : block_max;
  const float new_max = block_max > row_max ? block_max : row_max;
  if (new_max == kNegInf) {  // every key so far masked: contribute nothing
    for (int j = 0; j < n; ++j) s[j] = 0.0f;
    return 1.0f;
  }
  const float alpha = exp2_softmax(row_max - new_max);  // row_max = -inf gives 0
  float block_sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = exp2_softmax(s[j] - new_max);
    block_sum += s[j];
  }
  row_sum = row_sum * alpha + block_sum;
  row_max = new_max;
  return alpha;
}

// Natural-log log-sum-exp of a finished row, -inf when nothing was attended.
inline float finish_lse(float row_max, float row_sum) {
  if (row_sum == 0.0f) return kNegInf;
  return row_max * kLn2 + std::log(row_sum);
}

}  // namespace fa::detail
