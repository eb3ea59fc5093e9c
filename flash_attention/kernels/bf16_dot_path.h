// The pair path's engine on AVX512_BF16 (avx512bf16 path): both products
// with VDPBF16PS, which multiplies 16 lanes of bf16 pairs and adds both
// products into fp32 lanes: twice the multiply-adds of an fp32 FMA per
// instruction, at the FMA's rate on AMD Zen 4 (docs/PERF.md; Intel cores run
// it at half the FMA's flop rate, CpuFeatures::bf16_dot_outpaces_fma).  bf16
// only: fp16 in two exact pieces takes three products, 1.5 FMA-equivalents
// against the fp32 FMA loop's one (measured 0.13 against 0.18 TFLOPS), so
// fp16 stays on the FMA loop.  Included by engines.h after
// bf16_pair_path.h when FA_HAVE_BF16_DOT.
//
// A register block keeps R x NV accumulators (R rows of the A operand, NV
// vectors of 16 query rows) across the reduction: per pair step, NV vector
// loads of B pairs, R broadcasts of one A pair, R x NV VDPBF16PS.  The A
// blocks are the AMX A-tile layout of the pair path (16 rows of 16 pairs),
// so row i's pair p lies at (p / 16) * 256 + i * 16 + p % 16.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace fa::FA_KERNEL_NS {

// One 32-bit pair, broadcast to all lanes (memcpy: the buffers are written
// as 16-bit elements).
inline __m512bh broadcast_pair(const std::uint32_t* p) {
  std::int32_t x;
  __builtin_memcpy(&x, p, sizeof x);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(x));
}

// Where the A operand's pairs lie: pair p of row i at a + (i / 16) *
// row_block + (i % 16) * row + (p / 16) * pair_block + p % 16 (uint32).  The
// pair path's A blocks (16 rows of 16 pairs, contiguous) are `blocks(..)`;
// K read in place, its rows as they are in memory, `rows(stride)` (the
// products take it as a template parameter, kRows: the blocks' constant
// strides keep every broadcast an immediate offset from one register).
struct ALayout {
  std::int64_t row, row_block, pair_block;
  static ALayout blocks(std::int64_t row_block) { return {16, row_block, 256}; }
  static ALayout rows(std::int64_t stride) { return {stride, 16 * stride, 16}; }
  const std::uint32_t* at(const std::uint32_t* a, int i, int p) const {
    return a + (i / 16) * row_block + (i % 16) * row + (p / 16) * pair_block + p % 16;
  }
};

// Row i's pairs of the A operand from `a`, rows `row` apart, as a register
// block's loop reaches them: the even and odd rows of each 8 from two
// bases, 2 and 6 rows as index registers, so every row is a base plus a
// scaled index.  Written as a + i * row, K read in place (a stride known
// only at run time) took a register per row: GCC kept three and reloaded
// the rest from the stack on every pair step (the packed GQA tile at 16
// rows a K/V head, Zen 4: 0.93-0.97x the time this way).  With the A
// blocks' constant stride it all folds to immediate offsets as before.
// dot_block_half keeps a + i * row: its 16 rows through these pointers
// took 1.27x the time (GQA 32/8 at 5 queries).
struct ARows {
  const std::uint32_t* even[2];
  const std::uint32_t* odd[2];
  std::int64_t two, six;
  ARows(const std::uint32_t* a, std::int64_t row)
      : even{a, a + 8 * row}, odd{a + row, a + 9 * row}, two(2 * row), six(6 * row) {}
  const std::uint32_t* at(int i, int p) const {
    const std::uint32_t* base = (i % 2 ? odd : even)[i / 8] + p;
    const int k = i % 8 / 2;
    return k == 3 ? base + six : base + k * two;
  }
};

// NP pairs (16: a whole A block; 8 or 4: its first half or quarter) of the R x NV register
// block: A rows `row` apart from ab, B vector v at bb + v * b_vstride.
template <int R, int NV, int NP>
[[gnu::always_inline]] inline void dot_pairs(__m512 (&acc)[R][NV], const std::uint32_t* ab, std::int64_t row,
                                             const std::uint32_t* bb, std::int64_t b_vstride) {
  const ARows rows(ab, row);
  for (int p = 0; p < NP; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bb + v * b_vstride + p * 16));
    for (int i = 0; i < R; ++i) {
      const __m512bh av = broadcast_pair(rows.at(i, p));
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
    }
  }
}

// C[i][16 v ..] (+)= sum_p A(i, p) · B(p, v) for i < R, v < NV, p < pairs (a
// multiple of 4: the last A block may be used only in part, its first 8,
// 16 or 24 dims, when head_dim is that far past a multiple of 32): A's rows from `a`, in A
// blocks (its first R rows lie in one), or with kRows rows `a_row` apart,
// B vector v at b + v * b_vstride + p * 16, C rows ldc floats apart.
// kLoad: add to C.
template <int R, int NV, bool kLoad, bool kRows>
inline void dot_block(const std::uint32_t* a, std::int64_t a_row, const std::uint32_t* b, std::int64_t b_vstride,
                      int pairs, float* c, int ldc) {
  static_assert(16 % R == 0, "a register block's rows lie in one A block");
  // The A blocks' strides are constants, so every broadcast is an immediate
  // offset from one register.
  const std::int64_t row = kRows ? a_row : 16;
  constexpr std::int64_t kPairBlock = kRows ? 16 : 256;
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = kLoad ? _mm512_loadu_ps(c + std::int64_t(i) * ldc + v * 16) : _mm512_setzero_ps();
  }
  int p0 = 0;
  for (; p0 + 16 <= pairs; p0 += 16) {
    dot_pairs<R, NV, 16>(acc, a + (p0 / 16) * kPairBlock, row, b + std::int64_t(p0) * 16, b_vstride);
  }
  // The last block's 4, 8 or 12 pairs (one A block: p0 stays its start).
  const std::uint32_t* a_last = a + (p0 / 16) * kPairBlock;
  if (pairs - p0 >= 8) {
    dot_pairs<R, NV, 8>(acc, a_last, row, b + std::int64_t(p0) * 16, b_vstride);
    a_last += 8;
    p0 += 8;
  }
  if (p0 < pairs) dot_pairs<R, NV, 4>(acc, a_last, row, b + std::int64_t(p0) * 16, b_vstride);
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + std::int64_t(i) * ldc + v * 16, acc[i][v]);
  }
}

// Rows of 8 (8 x 3 accumulators, three B vectors and a broadcast: 28 of the
// 32 registers).
inline constexpr int kDotRows = 8, kDotVecs = 3;

// The same product over the first 8 query rows of one B vector, on 256-bit
// VDPBF16PS: a tile whose rows end 1 to 8 past a multiple of 16 (a packed
// GQA group of 20 or 24 rows: 32/8 at 5-6 queries, 64/8 at 3) would idle
// half of its last vector's lanes in every 512-bit instruction, and Zen 4
// issues two 256-bit VDPBF16PS where it issues one 512-bit (its vector
// unit is 256 bits wide): 0.88x the time at 20 rows, 0.94x at 24 (docs/PERF.md).  R rows of A
// with R independent accumulators (16: enough chains for the latency at
// two a cycle).  C rows are stored whole, lanes 8-15 zero, as the 512-bit
// block leaves the rows of a zero Q: the same bits in every lane used.
template <int R, bool kLoad, bool kRows>
inline void dot_block_half(const std::uint32_t* a, std::int64_t a_row, const std::uint32_t* b, int pairs, float* c,
                           int ldc) {
  static_assert(16 % R == 0, "a register block's rows lie in one A block");
  const std::int64_t row = kRows ? a_row : 16;
  constexpr std::int64_t kPairBlock = kRows ? 16 : 256;
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = kLoad ? _mm256_loadu_ps(c + std::int64_t(i) * ldc) : _mm256_setzero_ps();
  auto step = [&](const std::uint32_t* ab, const std::uint32_t* bb, int np) {
    for (int p = 0; p < np; ++p) {
      const __m256bh bv = reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bb + p * 16)));
      for (int i = 0; i < R; ++i) {
        std::int32_t x;
        __builtin_memcpy(&x, ab + i * row + p, sizeof x);
        acc[i] = _mm256_dpbf16_ps(acc[i], reinterpret_cast<__m256bh>(_mm256_set1_epi32(x)), bv);
      }
    }
  };
  int p0 = 0;
  for (; p0 + 16 <= pairs; p0 += 16) step(a + (p0 / 16) * kPairBlock, b + std::int64_t(p0) * 16, 16);
  if (p0 < pairs) step(a + (p0 / 16) * kPairBlock, b + std::int64_t(p0) * 16, pairs - p0);
  for (int i = 0; i < R; ++i) _mm512_storeu_ps(c + std::int64_t(i) * ldc, _mm512_zextps256_ps512(acc[i]));
}

// C[m][r] (+)= sum_p A(m, p) B(p, r) for m < M (a multiple of 8), r <
// width (a multiple of 8: a last vector of 8 rows runs dot_block_half): A
// laid out as `lay` says, B vector v at b + v * b_vstride.
// Column blocks outside, so a block's B
// pairs stay in L1 while the A rows stream; the next tile's lines are
// issued `share` per column block.
// `spans` (may be null) limits each column block to the keys its rows may
// attend: with kKeysAreRows (Q·Kᵀ: A rows are keys) the other A rows are not
// multiplied and their C rows are left for masking to set to -inf; else
// (P·V: the reduction runs over keys) the reduction skips the 32-key blocks
// outside, whose probabilities are 0.
template <bool kLoad, bool kKeysAreRows, bool kRows = false>
inline void dot_product(const std::uint32_t* a, ALayout lay, int M, const std::uint32_t* b,
                        std::int64_t b_vstride, int pairs, int width, float* c, int ldc, const KeySpan* spans,
                        KvLineStream* next, int share) {
  // The A rows and pairs a column block of vectors v0 .. v0 + nv - 1 needs.
  struct Range {
    int m_begin, m_end, p_begin, p_end;
  };
  auto range = [&](int v0, int nv) {
    Range r{0, M, 0, pairs};
    if (spans) {  // the block's rows attend the union of their spans (windows only move forward)
      const int begin = spans[v0].begin, end = spans[v0 + nv - 1].end;
      if constexpr (kKeysAreRows) {
        r.m_begin = begin / kDotRows * kDotRows;
        r.m_end = end > begin ? (end + kDotRows - 1) / kDotRows * kDotRows : r.m_begin;
      } else {
        r.p_begin = begin / 32 * 16;
        r.p_end = end > begin ? (end + 31) / 32 * 16 : r.p_begin;
      }
    }
    return r;
  };
  const int nvec = width / 16;
  for (int v0 = 0; v0 < nvec; v0 += kDotVecs) {
    const int nv = nvec - v0 < kDotVecs ? nvec - v0 : kDotVecs;
    const Range r = range(v0, nv);
    const std::uint32_t* bv = b + v0 * b_vstride + std::int64_t(r.p_begin) * 16;
    for (int m0 = r.m_begin; m0 < r.m_end; m0 += kDotRows) {
      const std::uint32_t* am = lay.at(a, m0, r.p_begin);  // p_begin: a multiple of 16
      float* cm = c + std::int64_t(m0) * ldc + v0 * 16;
      const int np = r.p_end - r.p_begin;
      switch (nv) {
        case 1: dot_block<kDotRows, 1, kLoad, kRows>(am, lay.row, bv, b_vstride, np, cm, ldc); break;
        case 2: dot_block<kDotRows, 2, kLoad, kRows>(am, lay.row, bv, b_vstride, np, cm, ldc); break;
        default: dot_block<kDotRows, kDotVecs, kLoad, kRows>(am, lay.row, bv, b_vstride, np, cm, ldc); break;
      }
    }
    if (next) next->issue(share);
  }
  if (width % 16 != 0) {  // a last vector of 8 rows: 16 A rows a block where they lie in one A block, else 8
    const Range r = range(nvec, 1);
    const std::uint32_t* bv = b + nvec * b_vstride + std::int64_t(r.p_begin) * 16;
    for (int m0 = r.m_begin; m0 < r.m_end;) {
      const std::uint32_t* am = lay.at(a, m0, r.p_begin);
      float* cm = c + std::int64_t(m0) * ldc + nvec * 16;
      if (m0 % 16 == 0 && m0 + 16 <= r.m_end) {
        dot_block_half<16, kLoad, kRows>(am, lay.row, bv, r.p_end - r.p_begin, cm, ldc);
        m0 += 16;
      } else {
        dot_block_half<kDotRows, kLoad, kRows>(am, lay.row, bv, r.p_end - r.p_begin, cm, ldc);
        m0 += kDotRows;
      }
    }
    if (next) next->issue(share);
  }
}

// The engine run_tile_pairs drives on this path (bf16 only, so kP = 1).
struct DotProducts {
  static constexpr const char* kUnit = "VDPBF16PS";  // for fa2_stages
  template <DType DT>
  static constexpr bool kHandles = DT == DType::kBF16 || is_fp8(DT);
  // Both products step by 8 dims, so a head_dim 8 or 24 past a multiple of
  // 16 computes no padding (at 16 dims, D=40 took D=48's time: 0.74x D=64's
  // throughput, docs/PERF.md).
  static constexpr int kOutDimStep = 8;  // Oᵀ rows per register block (8 of a 16-row A block)
  static constexpr int kReduceStep = 8;  // Q·Kᵀ's dims: 4 of an A block's 16 pairs at least
  static constexpr int kRowStep = 8;      // a last vector of 8 rows runs on 256-bit VDPBF16PS
  // VDPBF16PS runs on the vector pipes the softmax uses: FA3's pair
  // schedule has nothing to overlap and keeps two Q tiles' operands hot
  // instead of one (measured 0.93x running each tile FA2's way, Zen 4,
  // docs/PERF.md), so FA3 runs each tile FA2's way on this engine.
  static constexpr bool kOwnUnit = false;
  static void begin() {}
  static void end() {}
  template <int kP>
  static void scores(const std::uint16_t* kp, std::int64_t, const std::uint32_t* qb, std::int64_t, int tq, int D,
                     int reduce_dims, int cols_pad, int width, float* st, const KeySpan* spans, KvLineStream* next) {
    static_assert(kP == 1, "bf16 only");
    dot_product<false, true>(reinterpret_cast<const std::uint32_t*>(kp), ALayout::blocks(std::int64_t(D / 32) * 256),
                             cols_pad, qb, std::int64_t(D / 2) * 16, reduce_dims / 2, width, st, tq, spans, next,
                             share(next, width));
  }
  // The same with K read in place, its bf16 rows `k_row_pairs` 32-bit pairs
  // apart (no packing: the engine broadcasts one pair of a row at a time,
  // wherever the row lies), for `cols` keys (a multiple of kDotRows: Sᵀ's
  // rows from cols on are left unwritten, and the softmax reads none of
  // them); head_dim is reduce_dims (a multiple of kReduceStep: the rows hold
  // nothing past it).
  static constexpr bool kReadsKInPlace = true;
  // V too would need VDPBF16PS pairs of keys: it is packed (Vᵀ pairs).
  static constexpr bool kReadsKvRows = false;
  static bool reads_k_in_place(std::int64_t head_dim, int cols, std::int64_t k_row_stride) {
    return head_dim % kReduceStep == 0 && cols % kDotRows == 0 && k_row_stride % 2 == 0;
  }
  static void scores_in_place(const std::uint16_t* k, std::int64_t k_row_pairs, const std::uint32_t* qb, int tq, int D,
                              int reduce_dims, int cols, int width, float* st, const KeySpan* spans, KvLineStream* next) {
    dot_product<false, true, true>(reinterpret_cast<const std::uint32_t*>(k), ALayout::rows(k_row_pairs), cols, qb,
                             std::int64_t(D / 2) * 16, reduce_dims / 2, width, st, tq, spans, next, share(next, width));
  }
  template <int kP>
  static void accumulate(const std::uint32_t* vt, int ldvt, std::int64_t, const std::uint32_t* pb, int ldp,
                         std::int64_t, int tq, int D, int cols_pad, int width, float* ot, bool fresh,
                         const KeySpan* spans, KvLineStream* next) {
    static_assert(kP == 1, "bf16 only");
    const ALayout a_layout = ALayout::blocks(std::int64_t(ldvt / 16) * 256);
    const std::int64_t b_vstride = std::int64_t(ldp) * 16;
    if (fresh) {
      dot_product<false, false>(vt, a_layout, D, pb, b_vstride, cols_pad / 2, width, ot, tq, spans, next,
                                share(next, width));
    } else {
      dot_product<true, false>(vt, a_layout, D, pb, b_vstride, cols_pad / 2, width, ot, tq, spans, next,
                               share(next, width));
    }
  }

 private:
  // Lines of the next tile per column block: a third of them per product.
  static int share(KvLineStream* next, int width) {
    return next ? next->third_per_step((width / 16 + kDotVecs - 1) / kDotVecs + (width % 16 != 0)) : 0;
  }
};

// VDPBF16PS throughput of this thread, GFLOP/s (64 per instruction): twelve
// independent accumulators, more than latency x issue rate.
[[gnu::noinline]] inline double dot_peak_one_thread(double seconds) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_setzero_ps();
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80));  // bf16 pairs (1, 1)
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x35803580));  // (2^-20, 2^-20): sums stay small
  const double rate = calls_per_second(seconds, 4096, [&] {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  });
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i) total = _mm512_add_ps(total, acc[i]);
  float sink[16];
  _mm512_storeu_ps(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return 64.0 * kChains * rate / 1e9;
}

}  // namespace fa::FA_KERNEL_NS
