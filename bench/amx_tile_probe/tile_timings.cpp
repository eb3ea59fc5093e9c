// The mixes amx_tile_probe times, compiled with the amx path's flags.  Each
// loop is the instruction mix alone, operands placed where the row says
// (L1: a 16 KiB ring; L2: 1 MiB; memory: 256 MiB, on transparent huge pages
// or not), timed with the TSC around `reps` repetitions after a warm-up.
#include "tile_timings.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <x86intrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace fa::bench {
namespace {

struct alignas(64) TileConfig {
  std::uint8_t palette, start_row, reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

void configure_tiles() {
  TileConfig cfg{};
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// An aligned buffer; `huge`: on transparent huge pages where the system
// grants them.
std::uint8_t* buffer(std::size_t bytes, bool huge) {
  void* p = nullptr;
  if (posix_memalign(&p, 2 << 20, bytes) != 0) std::abort();
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);  // faulted in, bf16 zeros
  return static_cast<std::uint8_t*>(p);
}

template <class Body>
double tsc_per_op(long reps, int ops_per_rep, Body&& body) {
  for (long i = 0; i < reps / 10 + 1; ++i) body(i);
  const std::uint64_t t0 = __rdtsc();
  for (long i = 0; i < reps; ++i) body(i);
  return double(__rdtsc() - t0) / double(reps) / ops_per_rep;
}

// 48 FMAs in 8 independent chains on registers: a softmax slice's share of
// vector work (the exp2 polynomial's degree 6, eight vectors).
inline void vector_work(__m512 x[8]) {
  for (int k = 0; k < 8; ++k) {
    __m512 p = _mm512_set1_ps(1.5e-4f);
    for (int s = 0; s < 5; ++s) p = _mm512_fmadd_ps(p, x[k], _mm512_set1_ps(0.1f * float(s + 1)));
    x[k] = _mm512_fmadd_ps(p, x[k], _mm512_set1_ps(-0.3f));
  }
  __asm__ volatile("" : "+v"(x[0]), "+v"(x[1]), "+v"(x[2]), "+v"(x[3]), "+v"(x[4]), "+v"(x[5]), "+v"(x[6]), "+v"(x[7]));
}

}  // namespace

std::vector<TileTiming> time_tile_mixes(long reps) {
  constexpr std::size_t kL1 = 16 << 10, kL2 = 1 << 20, kMem = std::size_t(256) << 20;
  std::uint8_t* l1 = buffer(kL1 + 4096, false);
  std::uint8_t* l2 = buffer(kL2, false);
  std::uint8_t* mem = buffer(kMem, false);
  std::uint8_t* mem_huge = buffer(kMem, true);
  auto* out = reinterpret_cast<float*>(buffer(64 << 10, false));
  std::vector<TileTiming> t;
  configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, l1, 64);
  _tile_loadd(5, l1, 64);
  _tile_loadd(6, l1, 64);
  _tile_loadd(7, l1, 64);
  auto products = [] {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  };
  t.push_back({"TDPBF16PS, 4 accumulators, operands on registers (the probe)", tsc_per_op(reps, 4, [&](long) { products(); }), "TDPBF16PS"});
  // Four loads of 1 KiB a repetition, from a ring of `bytes` at `stride`
  // bytes a row, `offset` bytes past a line boundary.
  auto loads = [&](const char* what, std::uint8_t* base, std::size_t bytes, int stride, int offset, bool t1) {
    const std::size_t step = std::size_t(16) * stride, mask = bytes - 1;
    t.push_back({what, tsc_per_op(reps, 4, [&](long i) {
                   const std::size_t o = (std::size_t(i) * 4 * step) & mask;
                   std::uint8_t* p = base + o + offset;
                   if (t1) {
                     _tile_stream_loadd(4, p, stride);
                     _tile_stream_loadd(5, p + step, stride);
                     _tile_stream_loadd(6, p + 2 * step, stride);
                     _tile_stream_loadd(7, p + 3 * step, stride);
                   } else {
                     _tile_loadd(4, p, stride);
                     _tile_loadd(5, p + step, stride);
                     _tile_loadd(6, p + 2 * step, stride);
                     _tile_loadd(7, p + 3 * step, stride);
                   }
                 }),
                 "1 KiB load"});
  };
  loads("TILELOADD from L1, stride 64, aligned", l1, kL1, 64, 0, false);
  loads("TILELOADD from L1, stride 128 (half of each row's lines)", l1, kL1, 128, 0, false);
  loads("TILELOADD from L1, stride 64, rows 32 B off their lines", l1, kL1, 64, 32, false);
  loads("TILELOADDT1 from L1, stride 64", l1, kL1, 64, 0, true);
  loads("TILELOADD from L2, stride 64", l2, kL2, 64, 0, false);
  loads("TILELOADD from memory, stride 64, 4 KiB pages", mem, kMem, 64, 0, false);
  loads("TILELOADD from memory, stride 64, huge pages", mem_huge, kMem, 64, 0, false);
  loads("TILELOADDT1 from memory, stride 64, 4 KiB pages", mem, kMem, 64, 0, true);
  // The four accumulators into a 32 x 32 block of a 256-column fp32 tile
  // (Sᵀ's or Oᵀ's: rows 1 KiB apart), the block chosen by i.
  auto store_scores = [&](long i) {
    float* o = out + (i & 7) * 32;
    _tile_stored(0, o, 1024);
    _tile_stored(1, o + 16, 1024);
    _tile_stored(2, o + 4096, 1024);
    _tile_stored(3, o + 4096 + 16, 1024);
  };
  t.push_back({"TILESTORED to a 16 x 256 fp32 score block (stride 1 KiB)", tsc_per_op(reps, 4, store_scores), "1 KiB store"});
  // The products' blocks: 2 A and 2 B tiles per step of 32 dims.
  auto block = [&](const std::uint8_t* a, const std::uint8_t* b, int steps) {
    for (int d = 0; d < steps; ++d) {
      _tile_loadd(4, a + d * 2048, 64);
      _tile_loadd(5, a + d * 2048 + 1024, 64);
      _tile_loadd(6, b + d * 2048, 64);
      _tile_loadd(7, b + d * 2048 + 1024, 64);
      products();
    }
  };
  t.push_back({"2x2 block, 4 loads from L1 + 4 TDPBF16PS a step", tsc_per_op(reps, 16, [&](long) { block(l1, l1 + 8192, 4); }), "TDPBF16PS"});
  // Q·Kᵀ's block at head_dim 128: accumulators zeroed, 4 steps, 4 stores.
  auto qk_block = [&](const std::uint8_t* a, const std::uint8_t* b, long i) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    block(a, b, 4);
    store_scores(i);
  };
  t.push_back({"Q*K^T block, head_dim 128: zero, 4 steps from L1, 4 stores", tsc_per_op(reps, 16, [&](long i) { qk_block(l1, l1 + 8192, i); }),
               "TDPBF16PS"});
  t.push_back({"the same, B tiles (Q) from L2 (a 256-row Q tile is 64 KiB)",
               tsc_per_op(reps, 16, [&](long i) { qk_block(l1, l2 + ((std::size_t(i) * 8192) & (kL2 - 1)), i); }), "TDPBF16PS"});
  // P·V's block at 256 keys: accumulators loaded, 8 steps, stored.
  t.push_back({"P*V block, 256 keys: load 4 accumulators, 8 steps from L1, 4 stores", tsc_per_op(reps, 32, [&](long i) {
                 float* o = out + (i & 7) * 32;
                 _tile_loadd(0, o, 1024);
                 _tile_loadd(1, o + 16, 1024);
                 _tile_loadd(2, o + 4096, 1024);
                 _tile_loadd(3, o + 4096 + 16, 1024);
                 block(l1, l1 + 8192, 4);
                 block(l1, l1 + 8192, 4);
                 store_scores(i);
               }),
               "TDPBF16PS"});
  // Whether the tile unit works beside the vector units.
  __m512 x[8];
  for (int k = 0; k < 8; ++k) x[k] = _mm512_set1_ps(0.01f * float(k));
  t.push_back({"48 FMAs (8 chains) alone", tsc_per_op(reps, 1, [&](long) { vector_work(x); }), "48 FMAs"});
  t.push_back({"4 TDPBF16PS on registers, then 48 FMAs", tsc_per_op(reps, 1, [&](long) {
                 products();
                 vector_work(x);
               }),
               "4 TDP + 48 FMAs"});
  t.push_back({"2x2 block from L1, then 48 FMAs", tsc_per_op(reps, 1, [&](long) {
                 block(l1, l1 + 8192, 1);
                 vector_work(x);
               }),
               "4 TDP + 48 FMAs"});
  _tile_release();
  for (void* p : {static_cast<void*>(l1), static_cast<void*>(l2), static_cast<void*>(mem), static_cast<void*>(mem_huge),
                  static_cast<void*>(out)}) {
    std::free(p);
  }
  return t;
}

}  // namespace fa::bench
