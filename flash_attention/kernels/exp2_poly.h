// The polynomial core of the softmax's exp2, shared by every vector policy:
// 2^f for f in [-0.5, 0.5] by a degree-6 polynomial fitted for least maximum
// relative error (2e-9 there; with fp32 Horner steps the whole exp2 stays
// within 1 ulp of the correctly rounded result over the softmax's domain,
// which a degree-7 Taylor series needs one more FMA for).  The policies do
// the range reduction around it.
#pragma once

namespace fa::FA_KERNEL_NS {

template <class V>
inline typename V::T exp2_poly(typename V::T f) {
  typename V::T p = V::set1(1.535336050e-04f);
  p = V::fmadd(p, f, V::set1(1.339887502e-03f));
  p = V::fmadd(p, f, V::set1(9.618436918e-03f));
  p = V::fmadd(p, f, V::set1(5.550332367e-02f));
  p = V::fmadd(p, f, V::set1(2.402264774e-01f));
  p = V::fmadd(p, f, V::set1(6.931471825e-01f));
  return V::fmadd(p, f, V::set1(1.0f));
}

}  // namespace fa::FA_KERNEL_NS
