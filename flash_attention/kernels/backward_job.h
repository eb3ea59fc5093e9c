// What one instruction-set path provides for the backward pass, and the job
// description its loop receives (common/backward_dispatch.cpp fills it in).
// Plain data only: this header is shared by translation units compiled with
// different instruction-set flags.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel_table.h"

namespace fa::detail {

struct BackwardJob {
  // The forward call the gradients are of, as its loop would see it: Q, K,
  // V, O and their strides, the LSE, the shape, the key window and explicit
  // mask, the score modifiers, dropout, sinks, scale_log2, tile_q / tile_kv
  // (the backward's own tiles) and threads.
  AttentionJob fwd;
  const void* dout;
  std::int64_t dout_strides[3];  // batch, head, seq (elements), like Q's
  // dQ, dK, dV: each fp32 or the inputs' dtype.
  void* grad[3];
  DType grad_dtype[3];
  std::int64_t grad_strides[3][3];
  float scale;   // the softmax scale (natural units): dQ and dK carry it
  float* delta;  // [batch * heads * seq_q] scratch: D_i = dO_i · O_i
  // Optional: dbias [bias_heads][seq_q][seq_kv] (written whole) and, per
  // (batch, head), -sum_i P_sink,i D_i (the dispatcher sums them per head).
  float* dbias;
  std::int64_t bias_heads;
  float* sink_parts;
  float* scratch;  // threads * per_thread_floats floats, 64-byte aligned
  std::size_t per_thread_floats;
  // Pair products (bf16 on avx512bf16): Q, dO, K and V packed once as bf16
  // pairs, pair_pack_u32 of them, 64-byte aligned; null elsewhere.
  std::uint32_t* pairs;
  // Whole-head items: one item per (batch, K/V head) gives its dK, dV and
  // its group's dQ (five products a block); else dK and dV per K/V tile and
  // dQ per Q tile in a pass of its own (seven).  The same bits either way;
  // the dispatcher picks whole heads where there are enough of them to keep
  // the threads busy and no dbias is asked for.
  bool whole_heads;
};

struct BackwardKernelTable {
  Isa isa;
  const char* name;
  // Scratch floats one thread needs for a job (its shape and tiles set).
  std::size_t (*workspace_floats)(const BackwardJob& job);
  // 32-bit words of the job's packed operands (0 where the products are FMA).
  std::size_t (*pair_pack_u32)(const BackwardJob& job);
  // The three passes (D and the sinks' partials; dK and dV; dQ and dbias),
  // each one parallel loop.
  void (*run)(const BackwardJob& job);
};

// nullptr when the path is not built.
const BackwardKernelTable* backward_kernel_table(Isa isa);

}  // namespace fa::detail
