// The random cases the property tests share (forward_property_test.cpp,
// backward_property_test.cpp): a shape, dtype layout, mask, sparse mode,
// modifiers, dropout, variable-length or KV-cache lengths, tiles and
// threads drawn from one seed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>

#include "driver/attention_case.h"

namespace fa::cli {

inline CaseSpec random_case(DType dtype, std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  CaseSpec c;
  c.dtype = dtype;
  c.seed = seed;
  c.layout = static_cast<Layout>(pick(0, 2));
  c.mask = static_cast<MaskMode>(pick(0, 3));
  fa::AttentionParams& p = c.params;
  p.batch = pick(1, 3);
  p.seq_q = pick(1, 200);
  p.seq_kv = pick(0, 3) == 0 ? p.seq_q : pick(1, 200);
  const int heads[] = {1, 2, 4, 6};
  p.num_heads = heads[pick(0, 3)];
  do {
    p.num_kv_heads = pick(1, static_cast<int>(p.num_heads));
  } while (p.num_heads % p.num_kv_heads != 0);
  p.head_dim = 8 * pick(1, 32);
  p.tile_q = 16 << pick(0, 4);
  p.tile_kv = 16 << pick(0, 4);
  p.threads = pick(1, 4);
  if (pick(0, 4) == 0) p.scale = 0.05f + 0.2f * static_cast<float>(pick(0, 10));
  const int splits[] = {1, 1, 2, 3, 7, fa::kSplitsAuto};
  p.num_splits = splits[pick(0, 5)];
  if (pick(0, 2) == 0) {  // a sparse mode instead of the mask mode's causal flag
    p.sparse_mode = static_cast<fa::SparseMode>(pick(0, 4));
    if (pick(0, 1)) p.pre_tokens = pick(0, 150);
    if (pick(0, 1)) p.next_tokens = pick(0, 150);
  }
  c.with_sinks = pick(0, 3) == 0;
  c.with_alibi = pick(0, 4) == 0;
  if (pick(0, 4) == 0) c.bias_heads = pick(0, 1) ? 1 : static_cast<int>(p.num_heads);
  if (pick(0, 4) == 0) p.softcap = 0.5f + 2.0f * static_cast<float>(pick(0, 10));
  if (pick(0, 4) == 0) {
    p.keep_prob = 0.5f + 0.1f * static_cast<float>(pick(0, 4));
    p.dropout_seed = seed;
  }
  // Variable-length packed sequences, where they combine (no explicit mask,
  // bias or split-KV).
  if (pick(0, 3) == 0 && (c.mask == MaskMode::kNone || c.mask == MaskMode::kCausal) && c.bias_heads == 0) {
    const int n = pick(1, 4);
    for (int i = 0; i < n; ++i) {
      c.seq_lens_q.push_back(pick(0, 90));
      c.seq_lens_kv.push_back(pick(0, 3) == 0 ? c.seq_lens_q.back() : pick(0, 120));
    }
    p.num_splits = 1;
    if (p.sparse_mode == fa::SparseMode::kMaskAndBand) p.sparse_mode = fa::SparseMode::kBand;  // no mask here
  } else if (pick(0, 3) == 0 && (c.mask == MaskMode::kNone || c.mask == MaskMode::kCausal) && c.bias_heads == 0) {
    // A KV cache of per-sequence key counts, paged or not.
    for (std::int64_t b = 0; b < p.batch; ++b) c.cache_seqlens_kv.push_back(pick(0, static_cast<int>(p.seq_kv)));
    if (pick(0, 1)) {
      c.paged_block_size = 16 << pick(0, 2);
      p.tile_kv = std::min(p.tile_kv, c.paged_block_size);  // a K/V tile lies in one block
    }
    if (p.sparse_mode == fa::SparseMode::kMaskAndBand) p.sparse_mode = fa::SparseMode::kBand;
  }
  return c;
}

}  // namespace fa::cli
