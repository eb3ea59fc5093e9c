// The polynomial core of the softmax's exp2, shared by every vector policy:
// 2^f = e^(f ln 2) for f in [-0.5, 0.5], Taylor series to degree 7 (relative
// error below 1e-8 there).  The policies do the range reduction around it.
#pragma once

namespace fa::FA_KERNEL_NS {

template <class V>
inline typename V::T exp2_poly(typename V::T f) {
  typename V::T p = V::set1(1.5252733804059838e-05f);
  p = V::fmadd(p, f, V::set1(1.5403530393381606e-04f));
  p = V::fmadd(p, f, V::set1(1.3333558146428441e-03f));
  p = V::fmadd(p, f, V::set1(9.6181291076284770e-03f));
  p = V::fmadd(p, f, V::set1(5.5504108664821576e-02f));
  p = V::fmadd(p, f, V::set1(2.4022650695910071e-01f));
  p = V::fmadd(p, f, V::set1(6.9314718055994531e-01f));
  return V::fmadd(p, f, V::set1(1.0f));
}

}  // namespace fa::FA_KERNEL_NS
