// The backward pass's products on bf16 pairs (bf16 inputs): VDPBF16PS dot
// products on the avx512bf16 path (bf16_dot_path.h's register blocks), or
// TDPBF16PS on the amx path's tile unit (amx_tile_path.h's tile macros; in
// an FA_AMX_EMULATION build their C++ model).  Each product's operands are
// packed as bf16 pairs along its reduction, in layouts both engines read:
// a B operand's 16 pairs of 16 lanes are an AMX B tile's 16 rows.  Q, dO, K and
// V are packed once per call, by a pass before the others (each is read by
// every block of its row or column: packing them per block cost as much as
// the products); P ∘ Z and dS, rounded to bf16 as FlashAttention's own bf16
// backward rounds them, per block.
//
// Layouts (uint32 = one bf16 pair; k the reduction, n the output columns):
//   B operands, [n / 16][k / 2][16]: 16 output lanes, pairs along k
//     qb  (S = K Qᵀ: Qᵀ, k head_dim, n query rows)       from Qᵀ [Dp][tq]
//     dob (dP = V dOᵀ: dOᵀ)                              from dOᵀ
//     qr  (dK += dSᵀ Q: Q, k query rows, n head_dim)      from Q [tq][Dp]
//     dor (dV += (P∘Z)ᵀ dO: dO)                          from dO
//     dsb (dQᵀ += Kᵀ dS'ᵀ: dS'ᵀ, k keys, n query rows)     from dS'ᵀ [tk][tq]
//   A operands, [m][k / 2]: rows, pairs along k
//     ka, va   (S's and dP's: K and V rows, pairs along head_dim)
//     kt       (dQᵀ's: Kᵀ, head_dim x keys)
//     pza, dsa (dV's and dK's: (P∘Z)ᵀ and dS'ᵀ, keys x query rows)
// Compiled inside the path's namespace after the engine's header.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace fa::FA_KERNEL_NS {

// The engine's steps: A operand rows (a register block's 8 rows; a tile's
// 16) and the reduction (half an A block's 16 pairs; a tile's 16 pairs).
// Rows and reductions are padded to them with zeros.
#if defined(FA_HAVE_AMX)
inline constexpr int kPairRowStep = 16, kPairReduceStep = 32;
#else
inline constexpr int kPairRowStep = 8, kPairReduceStep = 16;
#endif

// Around a thread's products: the tile unit configured, then released.
struct PairUnit {
#if defined(FA_HAVE_AMX)
  PairUnit() { tile_config(); }
  ~PairUnit() { tile_release(); }
#endif
};

// 16 fp32 values as bf16 (nearest even), each widened into a 32-bit lane.
inline __m512i bf16_lanes(__m512 x) { return _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x))); }

// B operand from fp32 rows (`k_rows` of them, an even count, `ld` apart):
// [n / 16][k_rows / 2][16], pair p of lane l = (row 2p, row 2p + 1) at
// column 16 v + l.
inline void pack_b_pairs(const float* src, int ld, int k_rows, int n, std::uint32_t* dst) {
  const int pairs = k_rows / 2;
  for (int v = 0; v < n / 16; ++v) {
    for (int p = 0; p < pairs; ++p) {
      const __m512i lo = bf16_lanes(_mm512_loadu_ps(src + std::int64_t(2 * p) * ld + v * 16));
      const __m512i hi = bf16_lanes(_mm512_loadu_ps(src + std::int64_t(2 * p + 1) * ld + v * 16));
      _mm512_storeu_si512(dst + (std::int64_t(v) * pairs + p) * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// A operand from fp32 rows: `rows` rows of n values (a multiple of 16) as
// n / 2 pairs, `out_ld` pairs apart; rows [rows, fill_rows) zero.
inline void pack_a_rows(const float* src, int ld, int rows, int fill_rows, int n, std::uint32_t* dst, int out_ld) {
  for (int r = 0; r < rows; ++r) {
    const float* in = src + std::int64_t(r) * ld;
    std::uint32_t* out = dst + std::int64_t(r) * out_ld;
    int j = 0;
    for (; j + 32 <= n; j += 32) {
      _mm512_storeu_si512(out + j / 2, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + j + 16),
                                                                                      _mm512_loadu_ps(in + j))));
    }
    if (j < n) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j / 2), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(in + j))));
  }
  for (int r = rows; r < fill_rows; ++r) std::memset(dst + std::int64_t(r) * out_ld, 0, sizeof(std::uint32_t) * (n / 2));
}

// A operand of the transpose: from Sᵀ-shaped fp32 [k_rows][ld] (k_rows
// even), rows r < m of the result hold pairs (srcᵀ[2p][r], srcᵀ[2p + 1][r]).
inline void pack_a_transposed(const float* src, int ld, int k_rows, int m, std::uint32_t* dst, int out_ld) {
  alignas(64) std::uint32_t lanes[16];
  for (int p = 0; p < k_rows / 2; ++p) {
    for (int r0 = 0; r0 < m; r0 += 16) {
      const __m512i lo = bf16_lanes(_mm512_loadu_ps(src + std::int64_t(2 * p) * ld + r0));
      const __m512i hi = bf16_lanes(_mm512_loadu_ps(src + std::int64_t(2 * p + 1) * ld + r0));
      _mm512_store_si512(lanes, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      for (int l = 0; l < 16 && r0 + l < m; ++l) dst[std::int64_t(r0 + l) * out_ld + p] = lanes[l];
    }
  }
}

// C[m][n] (+)= A[m][k] · B[k][n]: A rows `a_ld` pairs apart (m a multiple
// of kPairRowStep), B packed [n / 16][k / 2][16] (k a multiple of
// kPairReduceStep, n of 16), C rows ldc floats apart.
template <bool kAccumulate>
inline void pair_gemm(const std::uint32_t* a, int a_ld, int m, const std::uint32_t* b, int k, int n, float* c, int ldc) {
#if defined(FA_HAVE_AMX)
  // One 16 x 16 C tile at a time over the reduction's A and B tiles (tiles
  // 0, 4 and 6 of amx_tile_path.h's configuration).
  const int pairs = k / 2;
  for (int i0 = 0; i0 < m; i0 += 16) {
    for (int v = 0; v < n / 16; ++v) {
      float* ct = c + std::int64_t(i0) * ldc + v * 16;
      if constexpr (kAccumulate) {
        FA_TILE_LOAD(0, ct, std::int64_t(ldc) * 4);
      } else {
        FA_TILE_ZERO(0);
      }
      for (int p0 = 0; p0 < pairs; p0 += 16) {
        FA_TILE_LOAD(4, a + std::int64_t(i0) * a_ld + p0, std::int64_t(a_ld) * 4);
        FA_TILE_LOAD(6, b + (std::int64_t(v) * pairs + p0) * 16, 64);
        FA_TILE_DOT(0, 4, 6);
      }
      FA_TILE_STORE(0, ct, std::int64_t(ldc) * 4);
    }
  }
#else
  // The register blocks take 3 vectors of columns at a time; a width that
  // would leave one vector alone (4, 7, ... vectors: a 64-wide Q tile) ends
  // in two blocks of 2 instead, which load each A pair half as often.
  const std::int64_t b_vstride = std::int64_t(k / 2) * 16;
  auto columns = [&](int n0, int width) {
    dot_product<kAccumulate, false, true>(a, ALayout::rows(a_ld), m, b + (n0 / 16) * b_vstride, b_vstride, k / 2, width,
                                          c + n0, ldc, nullptr, nullptr, 0);
  };
  const int nvec = n / 16;
  if (nvec % kDotVecs == 1 && nvec > 1) {
    const int head = (nvec - 4) * 16;
    if (head > 0) columns(0, head);
    columns(head, 32);
    columns(head + 32, 32);
  } else {
    columns(0, n);
  }
#endif
}

}  // namespace fa::FA_KERNEL_NS
