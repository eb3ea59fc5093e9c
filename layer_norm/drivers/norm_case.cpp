#include "norm_case.h"

#include <algorithm>
#include <cmath>

#include "common/dtype_convert.h"
#include "driver/cli_args.h"

namespace fa::cli {

const char* norm_kind_name(NormKind kind) { return kind == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"; }

std::string describe(const NormCase& c) {
  std::string s = std::string(norm_kind_name(c.kind)) + " " + std::string(dtype_name(c.dtype)) + " rows=" +
                  std::to_string(c.rows) + " hidden=" + std::to_string(c.hidden);
  if (c.residual) s += " +residual";
  if (!c.gamma) s += " no-gamma";
  if (c.kind == NormKind::kLayerNorm && !c.beta) s += " no-beta";
  if (c.gamma || c.beta) s += " params=" + std::string(dtype_name(c.param_dtype));
  if (c.mean_offset != 0.0) s += " mean_offset=" + std::to_string(c.mean_offset);
  if (c.threads) s += " threads=" + std::to_string(c.threads);
  if (c.isa) s += " isa=" + std::string(isa_name(*c.isa));
  return s;
}

NormParams norm_params(const NormCase& c) {
  NormParams p;
  p.kind = c.kind;
  p.eps = c.eps;
  p.threads = c.threads;
  p.isa = c.isa;
  return p;
}

NormBuffers make_norm_buffers(const NormCase& c) {
  NormBuffers b;
  const std::int64_t n = c.rows * c.hidden;
  const std::size_t es = dtype_size(c.dtype), ps = dtype_size(c.param_dtype);
  b.x = HostBuffer(static_cast<std::size_t>(n) * es);
  fill_normal(b.x.data(), c.dtype, n, c.seed, 1.0);
  if (c.mean_offset != 0.0) {
    for (std::int64_t i = 0; i < n; ++i) {
      detail::store_from_f32(b.x.data(), c.dtype, i,
                             static_cast<float>(detail::load_as_f32(b.x.data(), c.dtype, i) + c.mean_offset));
    }
  }
  b.y = HostBuffer(static_cast<std::size_t>(n) * es);
  b.tensors.x = {b.x.data(), c.dtype, c.rows, c.hidden, 0};
  b.tensors.y = {b.y.data(), c.dtype, c.rows, c.hidden, 0};
  if (c.residual) {
    b.residual = HostBuffer(static_cast<std::size_t>(n) * es);
    fill_normal(b.residual.data(), c.dtype, n, c.seed + 1, 1.0);
    b.sum = HostBuffer(static_cast<std::size_t>(n) * es);
    b.tensors.residual = {b.residual.data(), c.dtype, c.rows, c.hidden, 0};
    b.tensors.sum = {b.sum.data(), c.dtype, c.rows, c.hidden, 0};
  }
  b.tensors.param_dtype = c.param_dtype;
  if (c.gamma) {
    b.gamma = HostBuffer(static_cast<std::size_t>(c.hidden) * ps);
    fill_normal(b.gamma.data(), c.param_dtype, c.hidden, c.seed + 2, 0.1);
    for (std::int64_t i = 0; i < c.hidden; ++i) {
      detail::store_from_f32(b.gamma.data(), c.param_dtype, i, 1.0f + detail::load_as_f32(b.gamma.data(), c.param_dtype, i));
    }
    b.tensors.gamma = b.gamma.data();
  }
  if (c.beta && c.kind == NormKind::kLayerNorm) {
    b.beta = HostBuffer(static_cast<std::size_t>(c.hidden) * ps);
    fill_normal(b.beta.data(), c.param_dtype, c.hidden, c.seed + 3, 0.1);
    b.tensors.beta = b.beta.data();
  }
  b.rstd.assign(static_cast<std::size_t>(c.rows), 0.0f);
  b.tensors.rstd = b.rstd.data();
  if (c.kind == NormKind::kLayerNorm) {
    b.mean.assign(static_cast<std::size_t>(c.rows), 0.0f);
    b.tensors.mean = b.mean.data();
  }
  return b;
}

NormCheck check_norm(const NormCase& c, const NormBuffers& b) {
  NormCheck r;
  const std::int64_t n = c.rows * c.hidden;
  std::vector<double> y(static_cast<std::size_t>(n)), mean(static_cast<std::size_t>(c.rows)), rstd(mean.size());
  if (!norm_reference(norm_params(c), b.tensors, y.data(), mean.data(), rstd.data()).ok()) return r;
  double err2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double o = detail::load_as_f32(b.y.data(), c.dtype, i);
    if (!std::isfinite(o)) {
      ++r.nonfinite;
      continue;
    }
    const double e = std::fabs(o - y[static_cast<std::size_t>(i)]);
    r.max_abs_error = std::max(r.max_abs_error, e);
    err2 += e * e;
    ref2 += y[static_cast<std::size_t>(i)] * y[static_cast<std::size_t>(i)];
  }
  r.rel_l2_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  for (std::int64_t i = 0; i < c.rows; ++i) {
    const auto k = static_cast<std::size_t>(i);
    r.stat_error = std::max(r.stat_error, std::fabs(b.rstd[k] - rstd[k]) / rstd[k]);
    if (!b.mean.empty()) {
      // The mean relative to the row's spread (1 / rstd), past its own fp32
      // rounding (half an ulp: a mean of 1e4 is off by up to 5e-4 as fp32).
      const double excess = std::fabs(b.mean[k] - mean[k]) - 0x1p-24 * std::fabs(mean[k]);
      r.stat_error = std::max(r.stat_error, std::max(excess, 0.0) * rstd[k]);
    }
  }
  r.bound = c.dtype == DType::kF32 ? 1e-6 : c.dtype == DType::kF16 ? 2e-3 : 1e-2;
  r.pass = r.nonfinite == 0 && r.rel_l2_error <= r.bound && r.stat_error <= 1e-4;
  return r;
}

}  // namespace fa::cli
