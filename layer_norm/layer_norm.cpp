// The normalization operators' entry points: validation (one-line
// messages, never an abort), the kernel path, the rows handed to the
// library's thread pool, and the float64 reference.
#include "layer_norm/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>


#include "common/cpu_features.h"
#include "common/dtype_convert.h"
#include "common/elementwise_paths.h"
#include "common/thread_pool.h"
#include "norm_job.h"

namespace fa::detail {
#if defined(LN_BUILD_AVX512BF16)
extern const NormKernelTable kNormKernels_avx512bf16;
#endif
#if defined(LN_BUILD_AVX512)
extern const NormKernelTable kNormKernels_avx512;
#endif
#if defined(LN_BUILD_AVX2)
extern const NormKernelTable kNormKernels_avx2;
#endif
extern const NormKernelTable kNormKernels_generic;
}  // namespace fa::detail

namespace fa {
namespace {

bool path_built(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return true;
#if defined(LN_BUILD_AVX2)
    case Isa::kAvx2: return true;
#endif
#if defined(LN_BUILD_AVX512)
    case Isa::kAvx512: return true;
#endif
#if defined(LN_BUILD_AVX512BF16)
    case Isa::kAvx512Bf16: return true;
#endif
    default: return false;
  }
}

const detail::NormKernelTable* table_of(Isa isa) {
  switch (isa) {
#if defined(LN_BUILD_AVX512BF16)
    case Isa::kAvx512Bf16: return &detail::kNormKernels_avx512bf16;
#endif
#if defined(LN_BUILD_AVX512)
    case Isa::kAvx512: return &detail::kNormKernels_avx512;
#endif
#if defined(LN_BUILD_AVX2)
    case Isa::kAvx2: return &detail::kNormKernels_avx2;
#endif
    default: return &detail::kNormKernels_generic;
  }
}

bool is_norm_dtype(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16; }

float eps_of(const NormParams& p) { return p.eps ? *p.eps : p.kind == NormKind::kLayerNorm ? 1e-5f : 1e-6f; }

std::string shape_text(const RowsView& v) {
  std::string s = "[";  // appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on one chain of + here
  return s.append(std::to_string(v.rows)).append(", ").append(std::to_string(v.hidden)).append("]");
}

std::int64_t stride_of(const RowsView& v) { return v.row_stride == 0 ? v.hidden : v.row_stride; }

// A view the same shape as x: present, a dtype the norms take, a stride that
// holds a row.
Status check_rows(const char* name, const RowsView& v, const RowsView& x) {
  if (!v.data) return Status::Invalid(std::string(name) + ": data is null");
  if (!is_norm_dtype(v.dtype)) {
    return Status::Invalid(std::string(name) + ": dtype must be fp32, fp16 or bf16 (got " + detail::dtype_text(v.dtype) + ")");
  }
  if (v.rows != x.rows || v.hidden != x.hidden) {
    return Status::Invalid(std::string(name) + ": shape " + shape_text(v) + " differs from x's " + shape_text(x));
  }
  if (v.row_stride != 0 && v.row_stride < v.hidden) {
    return Status::Invalid(std::string(name) + ": row_stride must be 0 (packed) or >= hidden " +
                           std::to_string(v.hidden) + " (got " + std::to_string(v.row_stride) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status norm_isa(const NormParams& p, Isa* isa) { return detail::choose_elementwise_path(p.isa, path_built, isa); }

Status validate_norm(const NormParams& p, const NormTensors& t) {
  const RowsView& x = t.x;
  if (!x.data) return Status::Invalid("x: data is null");
  if (!is_norm_dtype(x.dtype)) return Status::Invalid(std::string("x: dtype must be fp32, fp16 or bf16 (got ") + detail::dtype_text(x.dtype) + ")");
  if (x.rows < 1 || x.hidden < 1) {
    return Status::Invalid("x: rows and hidden must be >= 1 (got " + shape_text(x) + ")");
  }
  if (x.hidden > (std::int64_t{1} << 24)) {
    return Status::Invalid("x: hidden must be <= 16777216 (got " + std::to_string(x.hidden) + ")");
  }
  if (x.row_stride != 0 && x.row_stride < x.hidden) {
    return Status::Invalid("x: row_stride must be 0 (packed) or >= hidden " + std::to_string(x.hidden) + " (got " +
                           std::to_string(x.row_stride) + ")");
  }
  if (Status s = check_rows("y", t.y, x); !s.ok()) return s;
  const float eps = eps_of(p);
  if (!(eps > 0.0f) || !std::isfinite(eps)) {
    return Status::Invalid("eps must be a finite number > 0 (got " + std::to_string(eps) + ")");
  }
  if (p.threads < 0 || p.threads > kMaxThreads) {
    return Status::Invalid("threads must be 0 (all cores) or a count from 1 to " + std::to_string(kMaxThreads) +
                           " (got " + std::to_string(p.threads) + ")");
  }
  if (t.residual.data) {
    if (Status s = check_rows("residual", t.residual, x); !s.ok()) return s;
  } else if (t.sum.data) {
    return Status::Invalid("sum: given without a residual (the sum is x + residual)");
  }
  if (t.sum.data) {
    if (Status s = check_rows("sum", t.sum, x); !s.ok()) return s;
    if (t.sum.dtype != x.dtype) {
      return Status::Invalid(std::string("sum: dtype must be x's, ") + detail::dtype_text(x.dtype) + " (got " + detail::dtype_text(t.sum.dtype) + ")");
    }
  }
  if ((t.gamma || t.beta) && t.param_dtype != DType::kF32 && t.param_dtype != x.dtype) {
    return Status::Invalid(std::string("param_dtype: gamma and beta must be fp32 or x's dtype, ") + detail::dtype_text(x.dtype) +
                           " (got " + detail::dtype_text(t.param_dtype) + ")");
  }
  if (p.kind == NormKind::kRmsNorm && t.beta) return Status::Invalid("beta: RMSNorm takes no shift (pass null)");
  if (p.kind == NormKind::kRmsNorm && t.mean) return Status::Invalid("mean: RMSNorm has no mean output (pass null)");
  return Status::Ok();
}

namespace {

// The job's rows on the library's pool: items of whole rows, about 64 KiB
// of x each (at least one row), so the pool's counter hands out enough of
// them to balance; each thread's scratch kNormScratchRows rows of fp32.
Status run_rows(const detail::NormJob& job, int threads_asked,
                void (*kernel)(const detail::NormJob&, std::int64_t, std::int64_t, float*)) {
  const std::int64_t n = job.hidden;
  const int threads = threads_asked > 0 ? threads_asked : detail::worker_cpu_count();
  const std::int64_t row_bytes = n * static_cast<std::int64_t>(detail::norm_elem_bytes(job.x_dtype));
  // Items of at least 64 KiB of rows, and no more than four a thread: each
  // item a long run of memory.  Items of 64 KiB taken turn about by two
  // threads read from memory 1.3-1.4x slower than each thread's rows in one
  // run (two-pass bf16 rows of 8 KiB on the 2-vCPU Xeon; 2 MiB runs were as
  // fast as halves), and four a thread keep some balance where a core is
  // shared.
  const std::int64_t rows_per_item = std::max({std::int64_t{1}, (std::int64_t{64} << 10) / std::max<std::int64_t>(row_bytes, 1),
                                               (job.rows + 4 * threads - 1) / (4 * threads)});
  const std::int64_t items = (job.rows + rows_per_item - 1) / rows_per_item;
  const int used = static_cast<int>(std::min<std::int64_t>(threads, items));
  const std::int64_t per_worker = detail::kNormScratchRows * n;
  std::unique_ptr<float[]> scratch(new (std::nothrow) float[static_cast<std::size_t>(used * per_worker)]);
  if (!scratch) return Status::OutOfMemory("norm: could not allocate " + std::to_string(used * per_worker * 4) + " bytes of scratch");
  detail::ThreadPool::global().parallel_for(items, used, [&](std::int64_t item, int worker) {
    const std::int64_t r0 = item * rows_per_item, r1 = std::min(job.rows, r0 + rows_per_item);
    kernel(job, r0, r1, scratch.get() + static_cast<std::size_t>(worker * per_worker));
  });
  return Status::Ok();
}

}  // namespace

Status norm_forward(const NormParams& p, const NormTensors& t) {
  if (Status s = validate_norm(p, t); !s.ok()) return s;
  Isa isa;
  if (Status s = norm_isa(p, &isa); !s.ok()) return s;
  const std::int64_t n = t.x.hidden;
  // Every row reads gamma and beta in fp32: the caller's own where they are
  // fp32 (the default), else widened once per call.  (Widening fp32 too, an
  // element at a time, cost a one-row call, decoding's, twice its own work.)
  const float* gamma = static_cast<const float*>(t.gamma);
  const float* beta = static_cast<const float*>(t.beta);
  std::vector<float> params;
  if (t.param_dtype != DType::kF32 && (t.gamma || t.beta)) {
    params.resize(static_cast<std::size_t>((t.gamma ? n : 0) + (t.beta ? n : 0)));
    float* g = t.gamma ? params.data() : nullptr;
    float* b = t.beta ? params.data() + (t.gamma ? n : 0) : nullptr;
    for (std::int64_t i = 0; i < n; ++i) {
      if (g) g[i] = detail::load_as_f32(t.gamma, t.param_dtype, i);
      if (b) b[i] = detail::load_as_f32(t.beta, t.param_dtype, i);
    }
    gamma = g;
    beta = b;
  }
  detail::NormJob job;
  job.kind = p.kind;
  job.rows = t.x.rows;
  job.hidden = n;
  job.eps = eps_of(p);
  job.x = t.x.data;
  job.x_dtype = t.x.dtype;
  job.x_stride = stride_of(t.x);
  job.residual = t.residual.data;
  job.residual_dtype = t.residual.dtype;
  job.residual_stride = stride_of(t.residual);
  job.sum = t.sum.data;
  job.sum_stride = stride_of(t.sum);
  job.y = t.y.data;
  job.y_dtype = t.y.dtype;
  job.y_stride = stride_of(t.y);
  job.gamma = gamma;
  job.beta = beta;
  job.mean = t.mean;
  job.rstd = t.rstd;
  const double footprint = static_cast<double>(job.rows) * static_cast<double>(n) *
                           static_cast<double>(detail::norm_elem_bytes(t.x.dtype) + detail::norm_elem_bytes(t.y.dtype));
  job.stream = detail::stream_outputs(p.stream_output, footprint);

  return run_rows(job, p.threads, table_of(isa)->run_rows);
}

Status residual_add(const NormParams& p, const NormTensors& t) {
  if (!t.residual.data || !t.sum.data) return Status::Invalid("residual and sum: the add needs both (sum = x + residual)");
  NormTensors checked = t;  // y is not written: checked as the sum
  checked.y = t.sum;
  checked.gamma = checked.beta = nullptr;
  checked.mean = checked.rstd = nullptr;
  if (Status s = validate_norm(p, checked); !s.ok()) return s;
  Isa isa;
  if (Status s = norm_isa(p, &isa); !s.ok()) return s;
  detail::NormJob job;
  job.rows = t.x.rows;
  job.hidden = t.x.hidden;
  job.x = t.x.data;
  job.x_dtype = t.x.dtype;
  job.x_stride = stride_of(t.x);
  job.residual = t.residual.data;
  job.residual_dtype = t.residual.dtype;
  job.residual_stride = stride_of(t.residual);
  job.sum = t.sum.data;
  job.sum_stride = stride_of(t.sum);
  // The sum through non-temporal stores past the last-level cache, as the
  // norms send y: ordinary stores read each line from memory first.
  const double footprint = static_cast<double>(job.rows) * static_cast<double>(job.hidden) *
                           static_cast<double>(2 * detail::norm_elem_bytes(t.x.dtype) + detail::norm_elem_bytes(t.residual.dtype));
  job.stream = detail::stream_outputs(p.stream_output, footprint);
  return run_rows(job, p.threads, table_of(isa)->add_rows);
}

Status norm_reference(const NormParams& p, const NormTensors& t, double* y, double* mean, double* rstd) {
  RowsView out = t.y;
  if (!out.data) {  // the reference writes doubles, so y need not be given
    out = t.x;
  }
  NormTensors checked = t;
  checked.y = out;
  if (Status s = validate_norm(p, checked); !s.ok()) return s;
  const std::int64_t rows = t.x.rows, n = t.x.hidden;
  const double eps = eps_of(p);
  std::vector<double> h(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      float v = detail::load_as_f32(t.x.data, t.x.dtype, r * stride_of(t.x) + i);
      if (t.residual.data) {
        // The sum as the operator stores it: fp32, rounded to x's dtype.
        v += detail::load_as_f32(t.residual.data, t.residual.dtype, r * stride_of(t.residual) + i);
        if (t.x.dtype == DType::kF16) v = detail::f16_to_f32(detail::f32_to_f16(v));
        if (t.x.dtype == DType::kBF16) v = detail::bf16_to_f32(detail::f32_to_bf16(v));
      }
      h[static_cast<std::size_t>(i)] = v;
    }
    double mu = 0.0, var = 0.0;
    if (p.kind == NormKind::kLayerNorm) {
      for (double v : h) mu += v;
      mu /= static_cast<double>(n);
    }
    for (double v : h) var += (v - mu) * (v - mu);
    var /= static_cast<double>(n);
    const double rs = 1.0 / std::sqrt(var + eps);
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
    if (!y) continue;
    for (std::int64_t i = 0; i < n; ++i) {
      double v = (h[static_cast<std::size_t>(i)] - mu) * rs;
      if (t.gamma) v *= detail::load_as_f32(t.gamma, t.param_dtype, i);
      if (t.beta && p.kind == NormKind::kLayerNorm) v += detail::load_as_f32(t.beta, t.param_dtype, i);
      y[r * n + i] = v;
    }
  }
  return Status::Ok();
}

}  // namespace fa
