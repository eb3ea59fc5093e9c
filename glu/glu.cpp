// GLU's entry points: validation (one-line messages, never an abort), the
// kernel path, the work items handed to the library's thread pool, and the
// float64 reference.
#include "glu/glu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/elementwise_paths.h"
#include "common/thread_pool.h"
#include "glu_job.h"

namespace fa::detail {
#if defined(GLU_BUILD_AVX512BF16)
extern const GluKernelTable kGluKernels_avx512bf16;
#endif
#if defined(GLU_BUILD_AVX512)
extern const GluKernelTable kGluKernels_avx512;
#endif
#if defined(GLU_BUILD_AVX2)
extern const GluKernelTable kGluKernels_avx2;
#endif
extern const GluKernelTable kGluKernels_generic;
}  // namespace fa::detail

namespace fa {
namespace {

bool path_built(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return true;
#if defined(GLU_BUILD_AVX2)
    case Isa::kAvx2: return true;
#endif
#if defined(GLU_BUILD_AVX512)
    case Isa::kAvx512: return true;
#endif
#if defined(GLU_BUILD_AVX512BF16)
    case Isa::kAvx512Bf16: return true;
#endif
    default: return false;
  }
}

const detail::GluKernelTable* table_of(Isa isa) {
  switch (isa) {
#if defined(GLU_BUILD_AVX512BF16)
    case Isa::kAvx512Bf16: return &detail::kGluKernels_avx512bf16;
#endif
#if defined(GLU_BUILD_AVX512)
    case Isa::kAvx512: return &detail::kGluKernels_avx512;
#endif
#if defined(GLU_BUILD_AVX2)
    case Isa::kAvx2: return &detail::kGluKernels_avx2;
#endif
    default: return &detail::kGluKernels_generic;
  }
}

bool is_glu_dtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

std::string shape_text(const RowsView& v) {
  std::string s = "[";  // appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on one chain of + here
  return s.append(std::to_string(v.rows)).append(", ").append(std::to_string(v.hidden)).append("]");
}

std::int64_t stride_of(const RowsView& v) { return v.row_stride == 0 ? v.hidden : v.row_stride; }

Status check_rows(const char* name, const RowsView& v) {
  if (!v.data) return Status::Invalid(std::string(name) + ": data is null");
  if (!is_glu_dtype(v.dtype)) {
    return Status::Invalid(std::string(name) + ": dtype must be fp32, fp16 or bf16 (got " + detail::dtype_text(v.dtype) + ")");
  }
  if (v.rows < 1 || v.hidden < 1) return Status::Invalid(std::string(name) + ": rows and hidden must be >= 1 (got " + shape_text(v) + ")");
  if (v.row_stride != 0 && v.row_stride < v.hidden) {
    return Status::Invalid(std::string(name) + ": row_stride must be 0 (packed) or >= hidden " + std::to_string(v.hidden) + " (got " +
                           std::to_string(v.row_stride) + ")");
  }
  return Status::Ok();
}

// The activation in double, from its definition, in the forms that keep
// the negative tail: 1 + erf(x) = erfc(-x), and 0.5 (1 + tanh(u)) =
// 1 / (1 + exp(-2u)) (as written, 1 + erf and 1 + tanh cancel to 0 in
// double below g = -8, where the fp32 kernel still has the value).
double activation(GluKind kind, double g) {
  switch (kind) {
    case GluKind::kSwiGlu: return g / (1.0 + std::exp(-g));
    case GluKind::kGeGluErf: return 0.5 * g * std::erfc(-g / std::sqrt(2.0));
    case GluKind::kGeGluTanh: return g / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    case GluKind::kReGlu: return std::isnan(g) ? g : std::max(g, 0.0);
  }
  return g;
}

// The activation of every 16-bit gate value, for the paths whose kernel
// reads it with a gather (GluJob::activation): built on first use by the
// path's own kernel, from a row of all 65536 gate bit patterns with an up
// half of ones (act(g) * 1 is act(g) exactly), so a looked-up output has the
// computed one's bits.  One table a (path, activation, gate dtype), kept for
// the process.  ReLU has none: its max is cheaper than a gather.
struct TableSlot {
  int path, kind, dtype;  // AVX-512 with BF16, AVX-512, AVX2; SwiGLU, GeGLU erf, GeGLU tanh; bf16, fp16
  bool used() const { return path >= 0 && kind >= 0 && dtype >= 0; }
};

TableSlot table_slot(Isa isa, GluKind kind, DType gate_dtype) {
  const int path = isa == Isa::kAvx512Bf16 ? 0 : isa == Isa::kAvx512 ? 1 : isa == Isa::kAvx2 ? 2 : -1;
  return {path, kind == GluKind::kReGlu ? -1 : static_cast<int>(kind), gate_dtype == DType::kBF16 ? 0 : gate_dtype == DType::kF16 ? 1 : -1};
}

// A job over one row of `width` outputs: x holds the gates, then the up
// half; y is packed.
detail::GluJob one_row_job(GluKind kind, DType gate_dtype, const std::uint16_t* x, std::int64_t width, void* y,
                           DType y_dtype) {
  detail::GluJob job;
  job.kind = kind;
  job.rows = 1;
  job.width = width;
  job.gate = x;
  job.up = x + width;
  job.x_dtype = gate_dtype;
  job.x_stride = 2 * width;
  job.y = y;
  job.y_dtype = y_dtype;
  job.y_stride = width;
  return job;
}

// Whether reading act(g) from `table` beats computing it on this core, for
// gates as a layer's activations run (normal, spread over a few thousand
// table entries, most of them L1's).  Which wins depends on the core's
// gathers, not on the path alone: on Zen 4 (avx512bf16) computing SwiGLU
// and GeGLU tanh took 0.6-0.8x the table's time and GeGLU erf 1.1-1.2x;
// on a Xeon with AMX and on Zen 3 (avx2) the table won for every
// activation (docs/PERF.md).  So the two are timed on a row in cache, best
// of 15 alternating runs each (about 0.1 ms, once a process per table);
// the outputs are the same bits either way.
bool table_beats_computing(const detail::GluKernelTable& kernels, GluKind kind, DType gate_dtype, const float* table) {
  constexpr std::int64_t kWidth = 8192;
  std::vector<std::uint16_t> x(2 * kWidth), y(kWidth);
  std::uint32_t state = 2463534242u;
  auto uniform = [&] {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return static_cast<float>(state >> 8) / 16777216.0f;
  };
  auto half = [&](float v) { return gate_dtype == DType::kBF16 ? detail::f32_to_bf16(v) : detail::f32_to_f16(v); };
  for (std::int64_t i = 0; i < kWidth; ++i) {
    // Irwin-Hall: about normal, standard deviation 2.
    const float g = 2.0f * (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f;
    x[static_cast<std::size_t>(i)] = half(g);
    x[static_cast<std::size_t>(kWidth + i)] = half(1.0f);
  }
  detail::GluJob job = one_row_job(kind, gate_dtype, x.data(), kWidth, y.data(), gate_dtype);
  auto seconds = [&](const float* activation) {
    job.activation = activation;
    const auto start = std::chrono::steady_clock::now();
    kernels.run(job, 0, 1, 0, kWidth);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double looked_up = 1e30, computed = 1e30;
  for (int r = 0; r < 16; ++r) {  // the first round warms both up, untimed
    const double a = seconds(table), b = seconds(nullptr);
    if (r > 0) looked_up = std::min(looked_up, a), computed = std::min(computed, b);
  }
  return looked_up < computed;
}

struct ActivationTable {
  const float* values = nullptr;  // null: no table for this path, activation and dtype
  bool faster = false;            // table_beats_computing on this core
};

ActivationTable activation_table(Isa isa, const detail::GluKernelTable& kernels, GluKind kind, DType gate_dtype) {
  constexpr std::int64_t kValues = 65536;
  const TableSlot slot = table_slot(isa, kind, gate_dtype);
  if (!slot.used()) return {};
  struct Table {
    std::once_flag built;
    std::unique_ptr<float[]> values;
    bool faster = false;
  };
  static Table tables[3][3][2];
  Table& t = tables[slot.path][slot.kind][slot.dtype];
  std::call_once(t.built, [&] {
    std::vector<std::uint16_t> x(2 * kValues);
    const std::uint16_t one = gate_dtype == DType::kBF16 ? 0x3F80 : 0x3C00;
    for (std::int64_t i = 0; i < kValues; ++i) {
      x[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i);
      x[static_cast<std::size_t>(kValues + i)] = one;
    }
    t.values.reset(new float[kValues]);
    kernels.run(one_row_job(kind, gate_dtype, x.data(), kValues, t.values.get(), DType::kF32), 0, 1, 0, kValues);
    t.faster = table_beats_computing(kernels, kind, gate_dtype, t.values.get());
  });
  return {t.values.get(), t.faster};
}

// The table a call reads act(g) from, or null to compute it.
const float* lookup_table(const GluParams& p, Isa isa, const detail::GluKernelTable& kernels, DType gate_dtype) {
  if (p.lookup_activation == false) return nullptr;
  const ActivationTable t = activation_table(isa, kernels, p.kind, gate_dtype);
  return p.lookup_activation == true || t.faster ? t.values : nullptr;
}

}  // namespace

Status glu_isa(const GluParams& p, Isa* isa) { return detail::choose_elementwise_path(p.isa, path_built, isa); }

bool glu_uses_activation_table(const GluParams& p, DType x_dtype) {
  Isa isa;
  return glu_isa(p, &isa).ok() && lookup_table(p, isa, *table_of(isa), x_dtype) != nullptr;
}

Status validate_glu(const GluParams& p, const GluTensors& t) {
  if (Status s = check_rows("x", t.x); !s.ok()) return s;
  if (t.x.hidden % 2 != 0) {
    return Status::Invalid("x: hidden must be even, 2d: the gate and up halves (got " + std::to_string(t.x.hidden) + ")");
  }
  if (Status s = check_rows("y", t.y); !s.ok()) return s;
  if (t.y.rows != t.x.rows || t.y.hidden * 2 != t.x.hidden) {
    return Status::Invalid("y: shape " + shape_text(t.y) + " must be [rows, d] = [" + std::to_string(t.x.rows) + ", " +
                           std::to_string(t.x.hidden / 2) + "] for x " + shape_text(t.x));
  }
  if (p.threads < 0 || p.threads > kMaxThreads) {
    return Status::Invalid("threads must be 0 (all cores) or a count from 1 to " + std::to_string(kMaxThreads) + " (got " +
                           std::to_string(p.threads) + ")");
  }
  return Status::Ok();
}

Status glu_forward(const GluParams& p, const GluTensors& t) {
  if (Status s = validate_glu(p, t); !s.ok()) return s;
  Isa isa;
  if (Status s = glu_isa(p, &isa); !s.ok()) return s;
  const std::int64_t d = t.y.hidden;
  const std::size_t xs = t.x.dtype == DType::kF32 ? 4 : 2;
  detail::GluJob job;
  job.kind = p.kind;
  job.rows = t.x.rows;
  job.width = d;
  const char* x = static_cast<const char*>(t.x.data);
  job.gate = p.split == GluSplit::kGateFirst ? x : x + static_cast<std::size_t>(d) * xs;
  job.up = p.split == GluSplit::kGateFirst ? x + static_cast<std::size_t>(d) * xs : x;
  job.x_dtype = t.x.dtype;
  job.x_stride = stride_of(t.x);
  job.y = t.y.data;
  job.y_dtype = t.y.dtype;
  job.y_stride = stride_of(t.y);
  const double footprint = static_cast<double>(job.rows) * static_cast<double>(d) *
                           static_cast<double>(2 * xs + (t.y.dtype == DType::kF32 ? 4 : 2));
  job.stream = detail::stream_outputs(p.stream_output, footprint);
  // Items of about 16K outputs: whole rows where rows are many, a row's
  // column blocks (multiples of 64) where they are few (a decoding step's
  // one row of 14336).
  const int threads = p.threads > 0 ? p.threads : detail::worker_cpu_count();
  const std::int64_t cols = job.rows >= 4 * threads ? d : std::min<std::int64_t>(d, std::max<std::int64_t>(64, (d / (4 * threads) + 63) / 64 * 64));
  const std::int64_t col_blocks = (d + cols - 1) / cols;
  // Items of at least 16K outputs and at most four a thread, so that each
  // is a long run of memory (see layer_norm.cpp's run_rows: items taken
  // turn about by the threads read from memory slower than long runs).
  const std::int64_t rows_per_item =
      std::max({std::int64_t{1}, (std::int64_t{16} << 10) / cols, (job.rows + 4 * threads - 1) / (4 * threads)});
  const std::int64_t row_blocks = (job.rows + rows_per_item - 1) / rows_per_item;
  const std::int64_t items = row_blocks * col_blocks;
  const int used = static_cast<int>(std::min<std::int64_t>(threads, items));
  const detail::GluKernelTable* table = table_of(isa);
  job.activation = lookup_table(p, isa, *table, job.x_dtype);
  detail::ThreadPool::global().parallel_for(items, used, [&](std::int64_t item, int) {
    const std::int64_t rb = item / col_blocks, cb = item % col_blocks;
    const std::int64_t r0 = rb * rows_per_item, c0 = cb * cols;
    table->run(job, r0, std::min(job.rows, r0 + rows_per_item), c0, std::min(d, c0 + cols));
  });
  return Status::Ok();
}

Status glu_reference(const GluParams& p, const GluTensors& t, double* y) {
  GluTensors checked = t;
  RowsView fake = t.x;  // y's view need not be given: only its shape is checked
  fake.hidden = t.x.hidden / 2;
  fake.row_stride = 0;
  if (!checked.y.data) checked.y = fake;
  if (Status s = validate_glu(p, checked); !s.ok()) return s;
  if (!y) return Status::Invalid("y: the reference's output is null");
  const std::int64_t d = t.x.hidden / 2, stride = stride_of(t.x);
  for (std::int64_t r = 0; r < t.x.rows; ++r) {
    for (std::int64_t c = 0; c < d; ++c) {
      const std::int64_t first = r * stride + c, second = first + d;
      const double a = detail::load_as_f32(t.x.data, t.x.dtype, first), b = detail::load_as_f32(t.x.data, t.x.dtype, second);
      const double g = p.split == GluSplit::kGateFirst ? a : b, u = p.split == GluSplit::kGateFirst ? b : a;
      y[r * d + c] = activation(p.kind, g) * u;
    }
  }
  return Status::Ok();
}

}  // namespace fa
