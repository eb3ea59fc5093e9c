#include "paged_cache.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

namespace fa::cli {

void PagedCache::bind(AttentionParams& p) const {
  p.block_table = block_table.data();
  p.max_blocks_per_seq = blocks_per_seq;
  p.block_size = block_size;
  p.kv_num_blocks = num_blocks;
}

PagedCache make_paged_cache(std::int64_t batch, std::int64_t seq_kv, std::int64_t block_size, std::uint64_t seed,
                            std::int64_t spare) {
  PagedCache c;
  c.block_size = block_size;
  c.blocks_per_seq = std::max<std::int64_t>(1, (seq_kv + block_size - 1) / block_size);
  c.num_blocks = batch * c.blocks_per_seq + spare;
  std::vector<std::int32_t> order(static_cast<std::size_t>(c.num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(static_cast<std::size_t>(batch * c.blocks_per_seq));  // the spare blocks: the last ones drawn
  c.block_table = std::move(order);
  return c;
}

HostBuffer scatter_to_pool(const PagedCache& c, const TensorView& from, Layout layout, const std::int32_t* seqlens_kv) {
  const std::int64_t B = from.shape[0], H = from.shape[1], S = from.shape[2], D = from.shape[3];
  const std::size_t es = dtype_size(from.dtype);
  HostBuffer pool(static_cast<std::size_t>(c.pool_tokens() * H * D) * es);
  std::memset(pool.data(), 0, pool.bytes());
  const TensorView to = make_view(pool.data(), from.dtype, layout, 1, H, c.pool_tokens(), D);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t keys = seqlens_kv ? seqlens_kv[b] : S;
    for (std::int64_t j = 0; j < keys; ++j) {
      const std::int64_t token = c.pool_row(b, j);
      for (std::int64_t h = 0; h < H; ++h) {
        std::memcpy(static_cast<char*>(pool.data()) + to.offset(0, h, token, 0) * es,
                    static_cast<const char*>(from.data) + from.offset(b, h, j, 0) * es, static_cast<std::size_t>(D) * es);
      }
    }
  }
  return pool;
}

}  // namespace fa::cli
