// The products of the vector paths: C[M][N] (+)= A·B with R x NV
// accumulator vectors in registers (gemm_block), blocked over columns and
// rows, skipping the keys a KeySpan rules out.  Q·Kᵀ and P·V both run on it.
#pragma once

#include "kv_tiles.h"

namespace fa::FA_KERNEL_NS {


// C[i][j] for i < M and j < NV vectors starting at column block j0:
//   C = (kAccumulate ? C * col_scale : 0) + sum_k A(i, k) * B[k][j]
// A(i, k) = a[i * a_rs + k * a_ks]; B and C row-major with ldb / ldc.
// R x NV accumulators stay in registers for the whole k loop.
template <int R, int NV, bool kAccumulate>
inline void gemm_block(const float* a, std::int64_t a_rs, std::int64_t a_ks, const float* b, int ldb, float* c,
                       int ldc, int K, const float* col_scale) {
  using T = typename Vec::T;
  constexpr int W = Vec::W;
  T acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = kAccumulate ? Vec::mul(Vec::load(c + r * ldc + v * W), Vec::load(col_scale + v * W)) : Vec::zero();
    }
  }
  for (int k = 0; k < K; ++k) {
    T bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Vec::load(b + std::int64_t(k) * ldb + v * W);
    const float* ak = a + k * a_ks;
    for (int r = 0; r < R; ++r) {
      const T av = Vec::set1(ak[r * a_rs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = Vec::fmadd(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) Vec::store(c + r * ldc + v * W, acc[r][v]);
  }
}

// Rows in blocks of R, then the remainder in blocks of 4, 2 and 1.
template <int NV, bool kAccumulate>
inline void gemm_column_block(const float* a, std::int64_t a_rs, std::int64_t a_ks, int M, const float* b, int ldb,
                              float* c, int ldc, int K, const float* col_scale) {
  constexpr int R = Vec::kRows;
  int i = 0;
  for (; i + R <= M; i += R) gemm_block<R, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
  if constexpr (R > 4) {
    if (i + 4 <= M) {
      gemm_block<4, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
      i += 4;
    }
  }
  if constexpr (R > 2) {
    if (i + 2 <= M) {
      gemm_block<2, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
      i += 2;
    }
  }
  if (i < M) gemm_block<1, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
}

// C[M][nvec * W] (+)= A[M][K] · B[K][nvec * W], blocked over columns.
// `spans` (may be null) limits each column block to the keys its rows may
// attend (the union over its vectors: windows only move forward): with
// kKeysAreRows (Q·Kᵀ, A rows are keys) the other rows are not computed (left
// for mask_tile, which runs on every tile with spans, to set to -inf); else
// (P·V, the reduction runs over keys) the reduction skips them, their
// probabilities being 0.
template <bool kAccumulate, bool kKeysAreRows = !kAccumulate>
inline void gemm(const float* a, std::int64_t a_rs, std::int64_t a_ks, int M, int K, const float* b, int ldb,
                 int nvec, float* c, int ldc, const float* col_scale, const KeySpan* spans = nullptr,
                 KvLineStream* next = nullptr) {
  constexpr int W = Vec::W, NV = Vec::kVecs;
  // `next`: half of the next K/V tile's lines, a share after each column block.
  const int share = next ? next->per_step(nvec / NV + nvec % NV, 2) : 0;
  for (int j = 0; j < nvec;) {
    const int nv = nvec - j >= NV ? NV : 1;
    int m0 = 0, m1 = M, k0 = 0, k1 = K;
    if (spans) {
      const int begin = spans[j].begin, end = spans[j + nv - 1].end > begin ? spans[j + nv - 1].end : begin;
      if constexpr (kKeysAreRows) {
        m0 = begin;
        m1 = end;
      } else {
        k0 = begin;
        k1 = end;
      }
    }
    const float* a_sub = a + m0 * a_rs + k0 * a_ks;
    const float* b_sub = b + std::int64_t(k0) * ldb + j * W;
    float* c_sub = c + std::int64_t(m0) * ldc + j * W;
    const float* scale = kAccumulate ? col_scale + j * W : nullptr;
    if (nv == NV) {
      gemm_column_block<NV, kAccumulate>(a_sub, a_rs, a_ks, m1 - m0, b_sub, ldb, c_sub, ldc, k1 - k0, scale);
    } else {
      gemm_column_block<1, kAccumulate>(a_sub, a_rs, a_ks, m1 - m0, b_sub, ldb, c_sub, ldc, k1 - k0, scale);
    }
    if (next) next->issue(share);
    j += nv;
  }
}


// The tile path's two products, on the item's Qᵀ, Sᵀ and Oᵀ buffers in `w`
// and one K/V tile, for the keys each row vector may attend (`spans`, may be
// null); each issues half of `next`'s lines (may be null).
//   Sᵀ[c][r] = K[c] · Qᵀ[:, r]
inline void tile_scores(const AttentionJob& job, const Workspace& w, int nvec, const KvTile& kv, int cols,
                        const KeySpan* spans, KvLineStream* next) {
  gemm<false>(kv.k, kv.ldk, 1, cols, static_cast<int>(job.head_dim), w.qt, job.tile_q, nvec, w.st, job.tile_q, nullptr,
              spans, next);
}
//   Oᵀ[d][r] = Oᵀ[d][r] * alpha[r] + sum_c V[c][d] * Pᵀ[c][r]  (the rescale fused into the product)
inline void tile_accumulate(const AttentionJob& job, const Workspace& w, int nvec, const KvTile& kv, int cols,
                            const KeySpan* spans, KvLineStream* next) {
  gemm<true>(kv.v, 1, kv.ldv, static_cast<int>(job.head_dim), cols, w.st, job.tile_q, nvec, w.ot, job.tile_q, w.alpha,
             spans, next);
}

}  // namespace fa::FA_KERNEL_NS
