#include "glu_case.h"

#include <algorithm>
#include <cmath>

#include "common/dtype_convert.h"
#include "driver/cli_args.h"

namespace fa::cli {

const char* glu_kind_name(GluKind kind) {
  switch (kind) {
    case GluKind::kSwiGlu: return "swiglu";
    case GluKind::kGeGluErf: return "geglu";
    case GluKind::kGeGluTanh: return "geglu-tanh";
    case GluKind::kReGlu: return "reglu";
  }
  return "?";
}

std::optional<GluKind> parse_glu_kind(const std::string& name) {
  for (GluKind k : {GluKind::kSwiGlu, GluKind::kGeGluErf, GluKind::kGeGluTanh, GluKind::kReGlu}) {
    if (name == glu_kind_name(k)) return k;
  }
  return std::nullopt;
}

std::string describe(const GluCase& c) {
  std::string s = std::string(glu_kind_name(c.params.kind)) + " " + std::string(dtype_name(c.dtype));
  if (c.out_dtype) s += "->" + std::string(dtype_name(*c.out_dtype));
  s += " rows=" + std::to_string(c.rows) + " d=" + std::to_string(c.width);
  s += c.params.split == GluSplit::kGateFirst ? " gate-first" : " up-first";
  if (c.x_row_stride) s += " x_stride=" + std::to_string(c.x_row_stride);
  if (c.y_row_stride) s += " y_stride=" + std::to_string(c.y_row_stride);
  if (c.threads) s += " threads=" + std::to_string(c.threads);
  if (c.isa) s += " isa=" + std::string(isa_name(*c.isa));
  return s;
}

GluParams glu_params(const GluCase& c) {
  GluParams p = c.params;
  p.threads = c.threads;
  p.isa = c.isa;
  return p;
}

GluBuffers make_glu_buffers(const GluCase& c) {
  GluBuffers b;
  const DType out = c.out_dtype ? *c.out_dtype : c.dtype;
  const std::int64_t xs = c.x_row_stride ? c.x_row_stride : 2 * c.width, ys = c.y_row_stride ? c.y_row_stride : c.width;
  b.x = HostBuffer(checked_product({c.rows, xs, static_cast<std::int64_t>(dtype_size(c.dtype))}, "x"));
  b.y = HostBuffer(checked_product({c.rows, ys, static_cast<std::int64_t>(dtype_size(out))}, "y"));
  fill_normal(b.x.data(), c.dtype, c.rows * xs, c.seed, c.scale);
  b.tensors.x = {b.x.data(), c.dtype, c.rows, 2 * c.width, c.x_row_stride};
  b.tensors.y = {b.y.data(), out, c.rows, c.width, c.y_row_stride};
  if (c.with_reference) {
    b.ref.resize(static_cast<std::size_t>(c.rows * c.width));
    if (Status s = glu_reference(glu_params(c), b.tensors, b.ref.data()); !s.ok()) throw UsageError(s.message());
  }
  return b;
}

GluCheck check_glu(const GluCase& c, const GluBuffers& b) {
  GluCheck r;
  const DType out = b.tensors.y.dtype;
  const std::int64_t xs = c.x_row_stride ? c.x_row_stride : 2 * c.width, ys = c.y_row_stride ? c.y_row_stride : c.width;
  double err2 = 0, ref2 = 0;
  for (std::int64_t row = 0; row < c.rows; ++row) {
    for (std::int64_t col = 0; col < c.width; ++col) {
      const double want = b.ref[static_cast<std::size_t>(row * c.width + col)];
      const double got = detail::load_as_f32(b.y.data(), out, row * ys + col);
      if (std::isnan(want) || std::isnan(got)) {
        if (std::isnan(want) != std::isnan(got)) ++r.nonfinite;
        continue;
      }
      const std::int64_t gate_col = c.params.split == GluSplit::kGateFirst ? col : col + c.width;
      const double g = detail::load_as_f32(b.x.data(), c.dtype, row * xs + gate_col);
      double argument = 0;  // the size of the exponential's argument
      switch (c.params.kind) {
        case GluKind::kSwiGlu: argument = std::fabs(g); break;
        case GluKind::kGeGluTanh: argument = 1.6 * std::fabs(g) * (1 + 0.044715 * g * g); break;
        case GluKind::kGeGluErf: argument = 0.5 * g * g; break;
        case GluKind::kReGlu: argument = 0; break;
      }
      const std::int64_t up_col = gate_col == col ? col + c.width : col;
      const double u = detail::load_as_f32(b.x.data(), c.dtype, row * xs + up_col);
      // fp32's error in the activation, and a floor where the exponential
      // underflows (below 2^-126 the activation is taken as 0).
      const double compute = 0x1p-21 * (4 + argument) * std::fabs(want) + 0x1p-120 * std::fabs(u) * std::max(1.0, std::fabs(g));
      const double allowed = half_ulp(out, std::fabs(want) + compute) + compute;
      const double e = got == want ? 0.0 : std::fabs(got - want);  // an infinity met exactly: no error
      if (!(e <= allowed)) ++r.mismatches;
      r.worst_share = std::max(r.worst_share, e / allowed);
      r.max_abs_error = std::max(r.max_abs_error, e);
      err2 += e * e;
      ref2 += want * want;
    }
  }
  r.rel_l2_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  r.pass = r.nonfinite == 0 && r.mismatches == 0;
  return r;
}

}  // namespace fa::cli
