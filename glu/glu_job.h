// What a GLU call hands every kernel path: plain data resolved by glu.cpp
// (no instruction-set code), and the table each path exports.
#pragma once

#include <cstdint>

#include "glu/glu.h"

namespace fa::detail {

struct GluJob {
  GluKind kind = GluKind::kSwiGlu;
  std::int64_t rows = 0, width = 0;  // width: d, y's columns
  const void* gate = nullptr;        // x + the gate half's offset
  const void* up = nullptr;          // x + the up half's offset
  DType x_dtype = DType::kF32, y_dtype = DType::kF32;
  std::int64_t x_stride = 0;  // elements
  void* y = nullptr;
  std::int64_t y_stride = 0;
  // y written around the caches (non-temporal stores, rows starting on a
  // 64-byte line): the call's data exceed the last-level cache, so y would
  // not stay there for its consumer, and a streamed line is not read first.
  bool stream = false;
  // act(g) for every 16-bit gate value, indexed by the gate's bits (fp16 or
  // bf16 as x_dtype), where glu.cpp built one for this path: the kernel
  // then reads act(g) with a gather instead of computing it.  Null: computed.
  const float* activation = nullptr;
};

// One path's kernel: rows [r0, r1), columns [c0, c1) of y.
struct GluKernelTable {
  void (*run)(const GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1);
};

}  // namespace fa::detail
