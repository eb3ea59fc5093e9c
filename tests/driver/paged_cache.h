// A paged KV cache made from a contiguous one, the way a serving engine
// lays it out (vLLM's block pools): for the benchmark's --paged and the
// tests that compare paged calls with contiguous ones.
#pragma once

#include <cstdint>
#include <vector>

#include "flash_attention/flash_attention.h"
#include "host_tensor.h"

namespace fa::cli {

struct PagedCache {
  std::vector<std::int32_t> block_table;  // [batch, blocks_per_seq]: pool block of each sequence's n-th block
  std::int64_t blocks_per_seq = 0, block_size = 0, num_blocks = 0;

  std::int64_t pool_tokens() const { return num_blocks * block_size; }
  // The pool row holding token `pos` of sequence b: block_table[b][pos /
  // block_size] * block_size + pos % block_size (append_kv_cache's slot).
  std::int64_t pool_row(std::int64_t b, std::int64_t pos) const {
    return std::int64_t(block_table[static_cast<std::size_t>(b * blocks_per_seq + pos / block_size)]) * block_size +
           pos % block_size;
  }
  // Points `p` at the table (block_table, max_blocks_per_seq, block_size,
  // kv_num_blocks).
  void bind(AttentionParams& p) const;
};

// A table for `batch` sequences of up to `seq_kv` keys in blocks of
// `block_size`: every block of the pool used once, in a random order drawn
// from `seed`, and `spare` more blocks in the pool that no sequence uses.
PagedCache make_paged_cache(std::int64_t batch, std::int64_t seq_kv, std::int64_t block_size, std::uint64_t seed,
                            std::int64_t spare = 0);

// The pool [1, heads, pool_tokens, head_dim] in `layout` holding the keys
// (or values) of `from`, a contiguous [batch, heads, seq_kv, head_dim] view:
// token j of sequence b at row block_table[b][j / block_size] * block_size +
// j % block_size.  Only each sequence's first seqlens_kv[b] keys when
// `seqlens_kv` is given; every other row is zero.
HostBuffer scatter_to_pool(const PagedCache& cache, const TensorView& from, Layout layout,
                           const std::int32_t* seqlens_kv = nullptr);

}  // namespace fa::cli
