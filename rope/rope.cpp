// RoPE's entry points: validation (one-line messages, never an abort), the
// frequencies, the kernel path, the work items handed to the library's
// thread pool, and the float64 reference.
#include "rope/rope.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/elementwise_paths.h"
#include "common/thread_pool.h"
#include "rope_job.h"

namespace fa::detail {
#if defined(ROPE_BUILD_AVX512BF16)
extern const RopeKernelTable kRopeKernels_avx512bf16;
#endif
#if defined(ROPE_BUILD_AVX512)
extern const RopeKernelTable kRopeKernels_avx512;
#endif
#if defined(ROPE_BUILD_AVX2)
extern const RopeKernelTable kRopeKernels_avx2;
#endif
extern const RopeKernelTable kRopeKernels_generic;
}  // namespace fa::detail

namespace fa {
namespace {

bool path_built(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return true;
#if defined(ROPE_BUILD_AVX2)
    case Isa::kAvx2: return true;
#endif
#if defined(ROPE_BUILD_AVX512)
    case Isa::kAvx512: return true;
#endif
#if defined(ROPE_BUILD_AVX512BF16)
    case Isa::kAvx512Bf16: return true;
#endif
    default: return false;
  }
}

const detail::RopeKernelTable* table_of(Isa isa) {
  switch (isa) {
#if defined(ROPE_BUILD_AVX512BF16)
    case Isa::kAvx512Bf16: return &detail::kRopeKernels_avx512bf16;
#endif
#if defined(ROPE_BUILD_AVX512)
    case Isa::kAvx512: return &detail::kRopeKernels_avx512;
#endif
#if defined(ROPE_BUILD_AVX2)
    case Isa::kAvx2: return &detail::kRopeKernels_avx2;
#endif
    default: return &detail::kRopeKernels_generic;
  }
}

// Computed angles keep their reduction exact below this position (the
// kernel's Cody-Waite step, rope_kernels.h).
constexpr std::int64_t kMaxComputedPosition = (std::int64_t{1} << 24) - 1;

bool is_rope_dtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

std::string shape_text(const TensorView& v) {
  std::string s = "[";  // appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on one chain of + here
  for (int i = 0; i < 4; ++i) s.append(i ? ", " : "").append(std::to_string(v.shape[i]));
  return s.append("]");
}

// A view of a dtype RoPE takes, unit head_dim stride, non-negative strides.
Status check_view(const std::string& name, const TensorView& v) {
  if (!is_rope_dtype(v.dtype)) return Status::Invalid(name + ": dtype must be fp32, fp16 or bf16 (got " + detail::dtype_text(v.dtype) + ")");
  for (int i = 0; i < 4; ++i) {
    if (v.shape[i] < 1) return Status::Invalid(name + ": every dimension must be >= 1 (got shape " + shape_text(v) + ")");
    if (v.strides[i] < 0) return Status::Invalid(name + ": strides must be non-negative and addressable");
  }
  if (v.strides[3] != 1) return Status::Invalid(name + ": the head_dim stride must be 1 (got " + std::to_string(v.strides[3]) + ")");
  return Status::Ok();
}

Status check_output(const std::string& name, const TensorView& out, const TensorView& in) {
  if (Status s = check_view(name, out); !s.ok()) return s;
  for (int i = 0; i < 4; ++i) {
    if (out.shape[i] != in.shape[i]) {
      return Status::Invalid(name + ": shape " + shape_text(out) + " differs from its input's " + shape_text(in));
    }
  }
  if (out.data == in.data && (out.dtype != in.dtype || std::equal(out.strides, out.strides + 4, in.strides) == false)) {
    return Status::Invalid(name + ": in place (data equal to the input's) needs the input's dtype and strides");
  }
  return Status::Ok();
}

std::int64_t rotary_dim_of(const RopeParams& p, std::int64_t head_dim) { return p.rotary_dim > 0 ? p.rotary_dim : head_dim; }

// The view both operands share the batch, seq and head_dim of.
const TensorView& lead_view(const RopeTensors& t) { return t.q.data ? t.q : t.k; }

// Token count and the number of the tokens' positions: batch x seq.
std::int64_t token_count(const RopeTensors& t) { return lead_view(t).shape[0] * lead_view(t).shape[2]; }

Status check_params(const RopeParams& p, std::int64_t head_dim) {
  const std::int64_t rd = rotary_dim_of(p, head_dim);
  if (p.rotary_dim < 0 || rd % 2 != 0 || rd < 2 || rd > head_dim) {
    return Status::Invalid("rotary_dim must be 0 (head_dim) or even, from 2 to head_dim " + std::to_string(head_dim) +
                           " (got " + std::to_string(p.rotary_dim) + ")");
  }
  if (!(p.base > 0.0) || !std::isfinite(p.base)) return Status::Invalid("base must be a finite number > 0 (got " + std::to_string(p.base) + ")");
  if (p.scaling != RopeScaling::kNone && (!(p.factor >= 1.0) || !std::isfinite(p.factor))) {
    return Status::Invalid("factor must be a finite number >= 1 with a scaling (got " + std::to_string(p.factor) + ")");
  }
  if (p.scaling == RopeScaling::kNtk && rd < 4) return Status::Invalid("rotary_dim must be >= 4 for NTK-aware scaling (got " + std::to_string(rd) + ")");
  if (p.scaling == RopeScaling::kLlama3) {
    if (!(p.low_freq_factor > 0.0) || !std::isfinite(p.low_freq_factor)) {
      return Status::Invalid("low_freq_factor must be a finite number > 0 (got " + std::to_string(p.low_freq_factor) + ")");
    }
    if (!(p.high_freq_factor > p.low_freq_factor) || !std::isfinite(p.high_freq_factor)) {
      return Status::Invalid("high_freq_factor must be finite and > low_freq_factor " + std::to_string(p.low_freq_factor) +
                             " (got " + std::to_string(p.high_freq_factor) + ")");
    }
    if (!(p.original_max_position > 0.0) || !std::isfinite(p.original_max_position)) {
      return Status::Invalid("original_max_position must be a finite number > 0 (got " + std::to_string(p.original_max_position) + ")");
    }
  }
  if (p.threads < 0 || p.threads > kMaxThreads) {
    return Status::Invalid("threads must be 0 (all cores) or a count from 1 to " + std::to_string(kMaxThreads) + " (got " +
                           std::to_string(p.threads) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status rope_isa(const RopeParams& p, Isa* isa) { return detail::choose_elementwise_path(p.isa, path_built, isa); }

Status rope_inv_frequencies(const RopeParams& p, std::int64_t rd, double* inv_freq) {
  if (Status s = check_params(p, rd); !s.ok()) return s;
  if (!inv_freq) return Status::Invalid("inv_freq: data is null");
  const std::int64_t half = rd / 2;
  double base = p.base;
  if (p.scaling == RopeScaling::kNtk) base *= std::pow(p.factor, static_cast<double>(rd) / static_cast<double>(rd - 2));
  for (std::int64_t i = 0; i < half; ++i) {
    double f = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rd));
    if (p.scaling == RopeScaling::kLinear) f /= p.factor;
    if (p.scaling == RopeScaling::kLlama3) {
      const double wavelength = 2.0 * M_PI / f;
      const double long_edge = p.original_max_position / p.low_freq_factor;    // longer: scaled
      const double short_edge = p.original_max_position / p.high_freq_factor;  // shorter: kept
      if (wavelength > long_edge) {
        f /= p.factor;
      } else if (wavelength >= short_edge) {
        const double smooth = (p.original_max_position / wavelength - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        f = (1.0 - smooth) * f / p.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  return Status::Ok();
}

Status validate_rope(const RopeParams& p, const RopeTensors& t) {
  if (!t.q.data && !t.k.data) return Status::Invalid("q and k: both are null (RoPE needs at least one)");
  if (t.q.data) {
    if (Status s = check_view("q", t.q); !s.ok()) return s;
  }
  if (t.k.data) {
    if (Status s = check_view("k", t.k); !s.ok()) return s;
  }
  if (t.q.data && t.k.data && (t.q.shape[0] != t.k.shape[0] || t.q.shape[2] != t.k.shape[2] || t.q.shape[3] != t.k.shape[3])) {
    return Status::Invalid("k: shape " + shape_text(t.k) + " must match q's " + shape_text(t.q) + " in batch, seq and head_dim");
  }
  if (t.q_out.data && !t.q.data) return Status::Invalid("q_out: given without q");
  if (t.k_out.data && !t.k.data) return Status::Invalid("k_out: given without k");
  if (t.q_out.data) {
    if (Status s = check_output("q_out", t.q_out, t.q); !s.ok()) return s;
  }
  if (t.k_out.data) {
    if (Status s = check_output("k_out", t.k_out, t.k); !s.ok()) return s;
  }
  const TensorView& lead = lead_view(t);
  if (Status s = check_params(p, lead.shape[3]); !s.ok()) return s;
  if (p.cu_seqlens) {
    if (lead.shape[0] != 1) return Status::Invalid("cu_seqlens: the views must have batch 1 (got " + std::to_string(lead.shape[0]) + ")");
    if (p.num_sequences < 1) return Status::Invalid("num_sequences must be >= 1 with cu_seqlens (got " + std::to_string(p.num_sequences) + ")");
    if (p.cu_seqlens[0] != 0) return Status::Invalid("cu_seqlens[0] must be 0 (got " + std::to_string(p.cu_seqlens[0]) + ")");
    for (std::int64_t b = 0; b < p.num_sequences; ++b) {
      if (p.cu_seqlens[b + 1] < p.cu_seqlens[b]) {
        return Status::Invalid("cu_seqlens must be non-decreasing (entry " + std::to_string(b + 1) + " is " +
                               std::to_string(p.cu_seqlens[b + 1]) + " after " + std::to_string(p.cu_seqlens[b]) + ")");
      }
    }
    if (p.cu_seqlens[p.num_sequences] != lead.shape[2]) {
      return Status::Invalid("cu_seqlens[num_sequences] must be the total tokens " + std::to_string(lead.shape[2]) + " (got " +
                             std::to_string(p.cu_seqlens[p.num_sequences]) + ")");
    }
  } else if (p.num_sequences != 0) {
    return Status::Invalid("num_sequences: given without cu_seqlens");
  }
  if ((t.cos != nullptr) != (t.sin != nullptr)) return Status::Invalid("cos and sin: give both tables or neither");
  if (t.cos && t.table_positions < 1) {
    return Status::Invalid("table_positions must be >= 1 with cos/sin tables (got " + std::to_string(t.table_positions) + ")");
  }
  // The largest position a token may take: the table's last row, or the
  // computed angles' exact range.
  const std::int64_t limit = t.cos ? t.table_positions - 1 : kMaxComputedPosition;
  const char* limit_text = t.cos ? "table_positions - 1" : "2^24 - 1 (computed angles)";
  if (t.positions) {
    const std::int64_t n = token_count(t);
    for (std::int64_t i = 0; i < n; ++i) {
      if (t.positions[i] < 0 || t.positions[i] > limit) {
        return Status::Invalid("positions[" + std::to_string(i) + "] = " + std::to_string(t.positions[i]) + " is out of range: expected 0 to " +
                               limit_text + " = " + std::to_string(limit));
      }
    }
  } else {
    std::int64_t longest = lead.shape[2];
    if (p.cu_seqlens) {
      longest = 0;
      for (std::int64_t b = 0; b < p.num_sequences; ++b) longest = std::max<std::int64_t>(longest, p.cu_seqlens[b + 1] - p.cu_seqlens[b]);
    }
    if (longest - 1 > limit) {
      return Status::Invalid("seq: positions reach " + std::to_string(longest - 1) + ", past " + limit_text + " = " + std::to_string(limit));
    }
  }
  return Status::Ok();
}

namespace {

// The inverse frequencies of the last parameters a thread asked for: a
// decoding step rotates one token, and 64 pow() calls were 40% of its
// time (one Zen 4 core).  Per thread, so no lock; the key is every
// parameter rope_inv_frequencies reads.
const double* cached_inv_frequencies(const RopeParams& p, std::int64_t rd, Status* status) {
  struct Entry {
    std::int64_t rd = -1;  // -1: empty
    RopeParams params;     // of which the fields the frequencies depend on
    std::vector<double> inv_freq;
  };
  thread_local Entry entry;
  const RopeParams& e = entry.params;
  const bool same = entry.rd == rd && e.base == p.base && e.scaling == p.scaling && e.factor == p.factor &&
                    e.low_freq_factor == p.low_freq_factor && e.high_freq_factor == p.high_freq_factor &&
                    e.original_max_position == p.original_max_position;
  if (!same) {
    entry.rd = -1;  // unusable until filled
    entry.inv_freq.resize(static_cast<std::size_t>(rd / 2));
    if (Status s = rope_inv_frequencies(p, rd, entry.inv_freq.data()); !s.ok()) {
      *status = s;
      return nullptr;
    }
    entry.params = p;
    entry.rd = rd;
  }
  return entry.inv_freq.data();
}

}  // namespace

Status rope_forward(const RopeParams& p, const RopeTensors& t) {
  if (Status s = validate_rope(p, t); !s.ok()) return s;
  Isa isa;
  if (Status s = rope_isa(p, &isa); !s.ok()) return s;
  const TensorView& lead = lead_view(t);
  detail::RopeJob job;
  job.mode = p.mode;
  job.head_dim = lead.shape[3];
  job.rotary_dim = rotary_dim_of(p, job.head_dim);
  job.batch = lead.shape[0];
  job.seq = lead.shape[2];
  job.cu_seqlens = p.cu_seqlens;
  job.num_sequences = p.num_sequences;
  job.positions = t.positions;
  if (t.cos) {
    job.cos_table = t.cos;
    job.sin_table = t.sin;
  } else {
    Status s = Status::Ok();
    job.inv_freq = cached_inv_frequencies(p, job.rotary_dim, &s);
    if (!job.inv_freq) return s;
  }
  std::int64_t heads = 0;
  double bytes = 0;  // read and written
  auto size = [](DType d) { return d == DType::kF32 ? 4.0 : 2.0; };  // fp32, fp16 or bf16
  for (const auto& [in, out] : {std::pair{&t.q, &t.q_out}, std::pair{&t.k, &t.k_out}}) {
    if (!in->data) continue;
    detail::RopeOperand& op = job.operands[job.num_operands++];
    const TensorView& o = out->data ? *out : *in;
    op.in = in->data;
    op.out = o.data;
    op.in_dtype = in->dtype;
    op.out_dtype = o.dtype;
    op.heads = in->shape[1];
    for (int i = 0; i < 3; ++i) {
      op.in_strides[i] = in->strides[i == 0 ? 0 : i == 1 ? 1 : 2];
      op.out_strides[i] = o.strides[i == 0 ? 0 : i == 1 ? 1 : 2];
    }
    heads += op.heads;
    const double elems = static_cast<double>(in->shape[0]) * static_cast<double>(in->shape[1]) *
                         static_cast<double>(in->shape[2]) * static_cast<double>(in->shape[3]);
    bytes += elems * (size(in->dtype) + (out->data ? size(out->dtype) : 0.0));
  }
  // Streamed separate outputs, as the other element-wise operators stream
  // theirs: an ordinary store reads its line from memory first, a third
  // stream beside the input and the output (in place: none to avoid).
  const bool separate = t.q_out.data || t.k_out.data;
  job.stream = separate && detail::stream_outputs(p.stream_output, bytes);
  // Items: chunks of 16 tokens, whose expanded cos/sin rows (2 x 16 x
  // rotary_dim floats, 16 KiB at 128) stay in L1 while every head of the
  // chunk reuses them (measured on BNSD, where each head re-reads them: 8
  // tokens 60%, 16 75%, 32 69%, 64 71% of the copy bandwidth; BSH 93-100%
  // at 16-64), split further by heads until there are a few items a thread.
  const std::int64_t tokens = job.batch * job.seq;
  const int threads = p.threads > 0 ? p.threads : detail::worker_cpu_count();
  job.chunk = std::min<std::int64_t>(16, tokens);
  const std::int64_t chunks = (tokens + job.chunk - 1) / job.chunk;
  std::int64_t head_groups = 1;
  while (chunks * head_groups < 4 * threads && head_groups < heads) head_groups *= 2;
  head_groups = std::min(head_groups, heads);
  job.heads_per_item = (heads + head_groups - 1) / head_groups;
  head_groups = (heads + job.heads_per_item - 1) / job.heads_per_item;
  // Each item a run of consecutive chunks (about four runs a thread), so
  // the chunk after the one a thread rotates is its own next: the kernel
  // prefetches it in BNSD.
  const std::int64_t chunks_per_run = head_groups == 1 ? std::max<std::int64_t>(1, chunks / (4 * threads)) : 1;
  const std::int64_t runs = (chunks + chunks_per_run - 1) / chunks_per_run;
  const std::int64_t items = runs * head_groups;
  const int used = static_cast<int>(std::min<std::int64_t>(threads, items));
  const std::size_t per_thread = static_cast<std::size_t>(detail::rope_scratch_floats(job));
  std::unique_ptr<float[]> scratch(new (std::nothrow) float[per_thread * static_cast<std::size_t>(used)]);
  if (!scratch) return Status::OutOfMemory("rope: could not allocate " + std::to_string(per_thread * used * 4) + " bytes of scratch");
  const detail::RopeKernelTable* table = table_of(isa);
  detail::ThreadPool::global().parallel_for(items, used, [&](std::int64_t item, int worker) {
    const std::int64_t r = item / head_groups, g = item % head_groups;
    const std::int64_t h0 = g * job.heads_per_item, h1 = std::min(heads, h0 + job.heads_per_item);
    for (std::int64_t c = r * chunks_per_run; c < std::min(chunks, (r + 1) * chunks_per_run); ++c) {
      const std::int64_t t0 = c * job.chunk, t1 = std::min(tokens, t0 + job.chunk);
      table->run(job, t0, t1, h0, h1, scratch.get() + per_thread * static_cast<std::size_t>(worker));
    }
  });
  return Status::Ok();
}

Status rope_reference(const RopeParams& p, const RopeTensors& t, double* q_out, double* k_out) {
  if (Status s = validate_rope(p, t); !s.ok()) return s;
  const TensorView& lead = lead_view(t);
  const std::int64_t batch = lead.shape[0], seq = lead.shape[2], d = lead.shape[3];
  const std::int64_t rd = rotary_dim_of(p, d), half = rd / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  if (!t.cos) {
    if (Status s = rope_inv_frequencies(p, rd, inv_freq.data()); !s.ok()) return s;
  }
  std::vector<double> cs(static_cast<std::size_t>(half)), sn(cs.size()), x(static_cast<std::size_t>(d));
  for (const auto& [in, out] : {std::pair{&t.q, q_out}, std::pair{&t.k, k_out}}) {
    if (!in->data || !out) continue;
    const std::int64_t heads = in->shape[1];
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t s = 0; s < seq; ++s) {
        // The token's position: given, else its index in its sequence.
        std::int64_t pos = s;
        if (t.positions) {
          pos = t.positions[b * seq + s];
        } else if (p.cu_seqlens) {
          std::int64_t start = 0;
          for (std::int64_t n = 0; n < p.num_sequences; ++n) {
            if (p.cu_seqlens[n] <= s) start = p.cu_seqlens[n];
          }
          pos = s - start;
        }
        for (std::int64_t i = 0; i < half; ++i) {
          if (t.cos) {
            cs[static_cast<std::size_t>(i)] = t.cos[pos * half + i];
            sn[static_cast<std::size_t>(i)] = t.sin[pos * half + i];
          } else {
            const double angle = static_cast<double>(pos) * inv_freq[static_cast<std::size_t>(i)];
            cs[static_cast<std::size_t>(i)] = std::cos(angle);
            sn[static_cast<std::size_t>(i)] = std::sin(angle);
          }
        }
        for (std::int64_t h = 0; h < heads; ++h) {
          for (std::int64_t j = 0; j < d; ++j) x[static_cast<std::size_t>(j)] = detail::load_as_f32(in->data, in->dtype, in->offset(b, h, s, j));
          double* y = out + ((b * heads + h) * seq + s) * d;
          for (std::int64_t j = rd; j < d; ++j) y[j] = x[static_cast<std::size_t>(j)];
          for (std::int64_t i = 0; i < half; ++i) {
            // The pair (first, second) of frequency i in the mode's order.
            const std::int64_t first = p.mode == RopeMode::kRotateHalf ? i : 2 * i;
            const std::int64_t second = p.mode == RopeMode::kRotateHalf ? i + half : 2 * i + 1;
            const double a = x[static_cast<std::size_t>(first)], bb = x[static_cast<std::size_t>(second)];
            const double c = cs[static_cast<std::size_t>(i)], sv = sn[static_cast<std::size_t>(i)];
            y[first] = a * c - bb * sv;
            y[second] = bb * c + a * sv;
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace fa
