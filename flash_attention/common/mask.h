// Which (query, key) pairs may attend: the causal rule and the explicit mask,
// in one place for the reference and every kernel.
#pragma once

#include <algorithm>
#include <cstdint>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// One past the last key query row `i` may attend under the causal rule
// (bottom-right aligned): j <= i + (seq_kv - seq_q).  Clamped to [0, seq_kv].
inline std::int64_t causal_key_end(std::int64_t i, std::int64_t seq_q, std::int64_t seq_kv) {
  return std::clamp<std::int64_t>(i + seq_kv - seq_q + 1, 0, seq_kv);
}

// One past the last key any row of [row_begin, row_end) may attend.
inline std::int64_t key_end_for_rows(const AttentionParams& p, std::int64_t row_end) {
  return p.causal ? causal_key_end(row_end - 1, p.seq_q, p.seq_kv) : p.seq_kv;
}

inline bool may_attend(const AttentionParams& p, std::int64_t i, std::int64_t j) {
  if (p.causal && j >= causal_key_end(i, p.seq_q, p.seq_kv)) return false;
  if (p.mask && p.mask[i * p.seq_kv + j] == 0) return false;
  return true;
}

}  // namespace fa::detail
