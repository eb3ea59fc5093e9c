// Which (query, key) pairs may attend: the key window (causal, sparse modes)
// and the explicit mask, in one place for the reference, the planner and
// every kernel.  Static inline, like dtype_convert.h, because per-ISA
// translation units include it.
#pragma once

#include <cstdint>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// Query i may attend keys [i + offset - left, i + offset + right] (clamped to
// the sequence) when active; every key otherwise.
struct KeyWindow {
  bool active = false;
  std::int64_t offset = 0, left = kUnboundedTokens, right = kUnboundedTokens;
};

// The window of a call (causal and sparse_mode resolved); params.cpp.
KeyWindow key_window(const AttentionParams& p);

// Whether a call gives each sequence its own lengths: variable-length
// (cu_seqlens) or per-sequence key counts (seqlens_kv).  Such a call runs as
// one call per sequence.
static inline bool per_sequence_call(const AttentionParams& p) {
  return (p.cu_seqlens_q && p.cu_seqlens_kv) || p.seqlens_kv;
}

// Sequence b of a per-sequence call as a call of its own (batch 1, its own
// lengths, its own dropout seed; a paged cache's table cut to its row);
// params.cpp.
AttentionParams sequence_params(const AttentionParams& p, std::int64_t b);

struct Dropout;
// The dropout of a call (keep_prob and seed resolved); params.cpp.
Dropout dropout_of(const AttentionParams& p);

static inline std::int64_t clamp_keys(std::int64_t x, std::int64_t seq_kv) {
  return x < 0 ? 0 : (x > seq_kv ? seq_kv : x);
}

// First key query i may attend.
static inline std::int64_t window_begin(const KeyWindow& w, std::int64_t i, std::int64_t seq_kv) {
  if (!w.active || w.left >= kUnboundedTokens) return 0;
  return clamp_keys(i + w.offset - w.left, seq_kv);
}

// One past the last key query i may attend.
static inline std::int64_t window_end(const KeyWindow& w, std::int64_t i, std::int64_t seq_kv) {
  if (!w.active || w.right >= kUnboundedTokens) return seq_kv;
  return clamp_keys(i + w.offset + w.right + 1, seq_kv);
}

static inline bool may_attend(const AttentionParams& p, const KeyWindow& w, std::int64_t i, std::int64_t j) {
  if (j < window_begin(w, i, p.seq_kv) || j >= window_end(w, i, p.seq_kv)) return false;
  if (p.mask && p.mask[i * p.seq_kv + j] == 0) return false;
  return true;
}

}  // namespace fa::detail
