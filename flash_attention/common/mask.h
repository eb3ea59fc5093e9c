// Which (query, key) pairs may attend: the causal rule and the explicit mask,
// in one place for the reference and every kernel.  Static, like
// dtype_convert.h, because per-ISA translation units include it.
#pragma once

#include <cstdint>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// One past the last key query row `i` may attend under the causal rule
// (bottom-right aligned): j <= i + (seq_kv - seq_q).  Clamped to [0, seq_kv].
static inline std::int64_t causal_key_end(std::int64_t i, std::int64_t seq_q, std::int64_t seq_kv) {
  const std::int64_t end = i + seq_kv - seq_q + 1;
  return end < 0 ? 0 : (end > seq_kv ? seq_kv : end);
}

// One past the last key any row of [row_begin, row_end) may attend.
static inline std::int64_t key_end_for_rows(const AttentionParams& p, std::int64_t row_end) {
  return p.causal ? causal_key_end(row_end - 1, p.seq_q, p.seq_kv) : p.seq_kv;
}

static inline bool may_attend(const AttentionParams& p, std::int64_t i, std::int64_t j) {
  if (p.causal && j >= causal_key_end(i, p.seq_q, p.seq_kv)) return false;
  if (p.mask && p.mask[i * p.seq_kv + j] == 0) return false;
  return true;
}

}  // namespace fa::detail
