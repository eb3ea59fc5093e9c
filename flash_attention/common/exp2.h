// A vectorizable exp2 for the softmax.
//
// std::exp2 is a library call that compilers do not vectorize without
// -ffast-math, which this project does not use (it would break the
// infinities masking relies on).  This version is branch-free integer and
// float arithmetic, so a loop over it vectorizes on any x86-64 target.
// Domain used by the softmax: x <= 0 (scores minus the running maximum).
// Accuracy: within 2 ulp of exp2 for x in [-126, 0]; exactly 0 below -126
// (denormal results are flushed on purpose: they are slow and irrelevant to a
// probability summed with at least one term equal to 1), and 0 for -inf.
#pragma once

#include <bit>
#include <cstdint>

namespace fa::detail {

inline float exp2_softmax(float x) {
  const bool underflow = !(x >= -126.0f);  // also true for -inf and NaN-free -inf paths
  const float xc = underflow ? -126.0f : (x > 0.0f ? 0.0f : x);
  // Round to nearest integer with the 1.5 * 2^23 trick (exact for |x| < 2^22).
  constexpr float kRound = 12582912.0f;
  const float shifted = xc + kRound;
  const float n = shifted - kRound;
  const std::int32_t ni = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(shifted) - 0x4b400000u);
  const float f = xc - n;  // in [-0.5, 0.5]
  // 2^f = e^(f ln 2): Taylor series to degree 7, relative error < 1e-8 here.
  float p = 1.5252733804059838e-05f;
  p = p * f + 1.5403530393381606e-04f;
  p = p * f + 1.3333558146428441e-03f;
  p = p * f + 9.6181291076284770e-03f;
  p = p * f + 5.5504108664821576e-02f;
  p = p * f + 2.4022650695910071e-01f;
  p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  const float scaled = std::bit_cast<float>(std::bit_cast<std::int32_t>(p) + (ni << 23));
  return underflow ? 0.0f : scaled;
}

}  // namespace fa::detail
