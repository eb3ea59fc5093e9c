// Attention dropout's random numbers: a counter-based hash of (seed, batch x
// head, query, key), so whether an element is kept depends on nothing else —
// not the thread count, the tiles, the split or the kernel path — and the
// reference draws exactly the same ones.  Static inline: per-ISA translation
// units include it.
#pragma once

#include <cstdint>

namespace fa::detail {

struct Dropout {
  bool active = false;
  std::uint64_t seed = 0;
  std::uint32_t keep_threshold = 0;  // kept when hash < threshold (keep_prob * 2^32)
  float scale = 1.0f;                // 1 / keep_prob
};

// A 64-bit mix (splitmix64's finalizer) of the element's coordinates.
static inline std::uint32_t dropout_hash(std::uint64_t seed, std::uint64_t bh, std::uint64_t i, std::uint64_t j) {
  std::uint64_t z = seed ^ (bh * 0x9e3779b97f4a7c15ull) ^ (i * 0xc2b2ae3d27d4eb4full) ^ (j * 0x165667b19e3779f9ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z >> 32);
}

// The factor element (i, j) of head bh is multiplied by: 0 or 1 / keep_prob.
static inline float dropout_factor(const Dropout& d, std::uint64_t bh, std::uint64_t i, std::uint64_t j) {
  return dropout_hash(d.seed, bh, i, j) < d.keep_threshold ? d.scale : 0.0f;
}

}  // namespace fa::detail
