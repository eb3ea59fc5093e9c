// The backward dispatcher (fa2_backward, in libflash_attention_fa2.so):
// checks the call, picks the kernel path as the forward does, sizes the
// tiles and the scratch, and hands a plain job description to the path's
// backward table (kernels/<isa>/backward_<isa>.cpp, the loop of
// kernels/backward_loop.h); variable-length calls run one job per sequence,
// in order.  Then the sinks' partials are summed per head.
#include <algorithm>
#include <cstring>
#include <string>

#include "../kernels/backward_job.h"
#include "backward_checks.h"
#include "backward_dispatch.h"
#include "forward_dispatch.h"
#include "flash_attention/flash_attention.h"
#include "workspace_cache.h"

namespace fa::detail {

Status select_isa(const std::optional<Isa>& forced, Isa* chosen);
int max_threads_from_env();
Status validate_params(const AttentionParams& p);

#if FA_BUILD_GENERIC
extern const BackwardKernelTable kBackward_generic;
#endif
#if FA_BUILD_AVX2
extern const BackwardKernelTable kBackward_avx2;
#endif
#if FA_BUILD_AVX512
extern const BackwardKernelTable kBackward_avx512;
#endif
#if FA_BUILD_AVX512BF16
extern const BackwardKernelTable kBackward_avx512bf16;
#endif
#if FA_BUILD_AMX
extern const BackwardKernelTable kBackward_amx;
#endif

const BackwardKernelTable* backward_kernel_table(Isa isa) {
  switch (isa) {
#if FA_BUILD_GENERIC
    case Isa::kGeneric: return &kBackward_generic;
#endif
#if FA_BUILD_AVX2
    case Isa::kAvx2: return &kBackward_avx2;
#endif
#if FA_BUILD_AVX512
    case Isa::kAvx512: return &kBackward_avx512;
#endif
#if FA_BUILD_AVX512BF16
    case Isa::kAvx512Bf16: return &kBackward_avx512bf16;
#endif
#if FA_BUILD_AMX
    case Isa::kAmx: return &kBackward_amx;
#endif
    default: return nullptr;
  }
}

namespace {

// The backward's tiles: the call's explicit tile_q / tile_kv (validated as
// the forward's: powers of two from 16 to 512), else 64 keys, and 64 query
// rows, or 128 from 1024 query rows on.  A 64 x 64 block's working set at
// head_dim 128 (K, V, dK, dV, Q, dO, dQ and the transposes, four
// score-shaped buffers) is about 360 KiB, inside the L2 of the CPUs this
// library targets.  128-row Q tiles give the bf16 pair products 8 x 3
// register blocks where 64 lanes take 8 x 2, and dK and dV twice the
// reduction per accumulator load: 2-4% at 1024-4096 rows on Zen 4 (docs/PERF.md),
// while at 512 rows (the guide's shape, causal) the diagonal blocks' waste
// outweighs it.
// On the amx path bf16's products step 32 keys and query rows at a time
// (16 pairs of a tile), so its tiles are at least 32.
int backward_tile(int asked, int fallback, int least) { return std::max(asked > 0 ? asked : fallback, least); }

// A variable-length call's sequence, with the tiles the call's job chose
// (the scratch is sized for them).
AttentionParams sequence_job_params(const AttentionParams& p, std::int64_t b, const AttentionJob& call) {
  AttentionParams sp = sequence_params(p, b);
  sp.tile_q = call.tile_q;
  sp.tile_kv = call.tile_kv;
  return sp;
}

// The job's forward half: what the forward loop's job would hold.
AttentionJob forward_half(const AttentionParams& p, const AttentionTensors& t, int threads, Isa isa) {
  AttentionJob f{};
  f.q = t.q.data;
  f.k = t.k.data;
  f.v = t.v.data;
  f.o = t.o.data;
  f.lse = t.lse;
  f.lse_strides[0] = p.num_heads * p.seq_q;
  f.lse_strides[1] = p.seq_q;
  set_shape_fields(p, t.q.dtype, &f);
  for (int a = 0; a < 3; ++a) {
    f.q_strides[a] = t.q.strides[a];
    f.k_strides[a] = t.k.strides[a];
    f.v_strides[a] = t.v.strides[a];
    f.o_strides[a] = t.o.strides[a];
  }
  set_score_fields(p, &f);
  const int least = isa == Isa::kAmx && t.q.dtype == DType::kBF16 ? 32 : 16;
  f.tile_q = backward_tile(p.tile_q, p.seq_q >= 1024 ? 128 : 64, least);
  f.tile_kv = backward_tile(p.tile_kv, 64, least);
  f.threads = threads;
  return f;
}

// The call's scratch, in floats: each thread's tiles, then D of every row
// and the sinks' partials of every (sequence or batch entry, head); then,
// 64-byte aligned, the pair products' packed operands (for a
// variable-length call the largest sequence's: its jobs run one after
// another).  O(seq): nothing in it grows with seq_q x seq_kv.
struct ScratchLayout {
  std::size_t per_thread = 0, threads = 0, delta = 0, sinks = 0, head = 0, pairs = 0;
  std::size_t bytes() const { return (head + pairs) * sizeof(float); }
};
ScratchLayout scratch_layout(const AttentionParams& p, const AttentionTensors& t, const BackwardKernelTable* table,
                             const BackwardJob& job, Isa isa) {
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  ScratchLayout s;
  s.per_thread = table->workspace_floats(job);
  s.threads = static_cast<std::size_t>(job.fwd.threads);
  s.delta = static_cast<std::size_t>((varlen ? 1 : p.batch) * p.num_heads * p.seq_q);
  s.sinks = static_cast<std::size_t>(p.batch * p.num_heads);
  if (!varlen) {
    s.pairs = table->pair_pack_u32(job);
  } else {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      BackwardJob sj = job;
      sj.fwd = forward_half(sequence_job_params(p, b, job.fwd), t, job.fwd.threads, isa);
      s.pairs = std::max(s.pairs, table->pair_pack_u32(sj));
    }
  }
  s.head = (s.per_thread * s.threads + s.delta + s.sinks + 15) & ~std::size_t{15};
  return s;
}

// Whole-head items (BackwardJob::whole_heads) where every thread gets at
// least two of them (a causal call's heads cost alike, so two a thread keep
// them even), no dbias is asked for (its rows are shared across batch
// entries and heads), and the group's dQ accumulators take at most 64 MiB a
// thread.
bool use_whole_heads(const AttentionParams& p, const BackwardJob& job, bool dbias) {
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  const std::int64_t items = (varlen ? 1 : p.batch) * p.kv_heads();
  const std::int64_t q_rows = (p.seq_q + job.fwd.tile_q - 1) / job.fwd.tile_q * job.fwd.tile_q;
  const std::int64_t dq_bytes = p.num_heads / p.kv_heads() * q_rows * (p.head_dim + 31) * 4;
  return !dbias && items >= 2 * std::int64_t(job.fwd.threads) && dq_bytes <= (std::int64_t{64} << 20);
}

int backward_threads(const AttentionParams& p) {
  int threads = p.threads > 0 ? p.threads : default_thread_count();
  if (const int cap = max_threads_from_env(); cap > 0 && cap < threads) threads = cap;
  return threads;
}

}  // namespace

std::size_t backward_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  Isa isa;
  if (!select_isa(p.isa, &isa).ok()) return 0;
  const BackwardKernelTable* table = backward_kernel_table(isa);
  if (!table || !validate_params(p).ok()) return 0;
  AttentionTensors t;  // the shape's stand-ins: only the dtype is read
  t.q.dtype = t.k.dtype = t.v.dtype = t.o.dtype = dtype;
  BackwardJob job{};
  job.fwd = forward_half(p, t, threads > 0 ? threads : backward_threads(p), isa);
  job.whole_heads = use_whole_heads(p, job, false);
  return scratch_layout(p, t, table, job, isa).bytes();
}

Status run_backward(const AttentionParams& p, const AttentionTensors& t, const AttentionGrads& g) {
  if (Status s = check_backward_inputs(p, t, g.dout, "fa2_backward"); !s.ok()) return s;
  if (Status s = check_backward_outputs(p, t, g); !s.ok()) return s;
  Isa isa;
  if (Status s = select_isa(p.isa, &isa); !s.ok()) return s;
  const BackwardKernelTable* table = backward_kernel_table(isa);
  if (!table) return Status::Unsupported("fa2_backward: the " + std::string(isa_name(isa)) + " path is not built");

  const int threads = backward_threads(p);
  BackwardJob job{};
  job.fwd = forward_half(p, t, threads, isa);
  job.dout = g.dout.data;
  const TensorView* grads[3] = {&g.dq, &g.dk, &g.dv};
  for (int i = 0; i < 3; ++i) {
    job.grad[i] = grads[i]->data;
    job.grad_dtype[i] = grads[i]->dtype;
    for (int a = 0; a < 3; ++a) job.grad_strides[i][a] = grads[i]->strides[a];
  }
  for (int a = 0; a < 3; ++a) job.dout_strides[a] = g.dout.strides[a];
  job.scale = p.softmax_scale();
  job.dbias = g.dbias;
  job.bias_heads = p.bias_heads > 1 ? p.bias_heads : 1;
  job.whole_heads = use_whole_heads(p, job, g.dbias != nullptr);

  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  const ScratchLayout layout = scratch_layout(p, t, table, job, isa);
  const std::size_t per_thread = layout.per_thread, delta_floats = layout.delta, head_floats = layout.head,
                    pair_u32 = layout.pairs, bytes = layout.bytes();
  const WorkspaceBlock block(bytes);
  if (!block) {
    return Status::OutOfMemory("fa2_backward: could not allocate " + std::to_string(bytes) + " bytes of workspace");
  }
  job.scratch = static_cast<float*>(block.get());
  job.per_thread_floats = per_thread;
  job.delta = job.scratch + per_thread * threads;
  float* const sink_parts = job.delta + delta_floats;
  job.sink_parts = g.dsinks ? sink_parts : nullptr;
  job.pairs = pair_u32 ? reinterpret_cast<std::uint32_t*>(job.scratch + head_floats) : nullptr;

  if (!varlen) {
    table->run(job);
  } else {
    // One job per sequence over its rows of the packed tensors ([1, heads,
    // total, head_dim]; the LSE [1, heads, total]), in order.
    const std::size_t es = dtype_size(t.q.dtype);
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const AttentionParams sp = sequence_job_params(p, b, job.fwd);
      if (g.dsinks) {  // a sequence without rows or keys takes no part
        for (std::int64_t h = 0; h < p.num_heads; ++h) sink_parts[b * p.num_heads + h] = 0.0f;
      }
      const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_kv[b];
      BackwardJob sj = job;
      auto at = [&](const void* base, const std::int64_t* strides, std::int64_t token) {
        return static_cast<const char*>(base) + token * strides[2] * es;
      };
      if (sp.seq_kv == 0) {  // rows with nothing to attend: dQ = 0
        const std::size_t qes = dtype_size(g.dq.dtype);
        for (std::int64_t h = 0; h < p.num_heads; ++h) {
          for (std::int64_t i = q0; i < q0 + sp.seq_q; ++i) {
            std::memset(static_cast<char*>(g.dq.data) + g.dq.offset(0, h, i, 0) * qes, 0, qes * p.head_dim);
          }
        }
        continue;
      }
      if (sp.seq_q == 0) {  // keys no query reads: dK = dV = 0
        for (const TensorView* v : {&g.dk, &g.dv}) {
          const std::size_t ves = dtype_size(v->dtype);
          for (std::int64_t h = 0; h < p.kv_heads(); ++h) {
            for (std::int64_t j = k0; j < k0 + sp.seq_kv; ++j) {
              std::memset(static_cast<char*>(v->data) + v->offset(0, h, j, 0) * ves, 0, ves * p.head_dim);
            }
          }
        }
        continue;
      }
      sj.fwd = forward_half(sp, t, threads, isa);
      sj.fwd.q = at(t.q.data, t.q.strides, q0);
      sj.fwd.o = const_cast<char*>(at(t.o.data, t.o.strides, q0));  // (read only)
      sj.fwd.k = at(t.k.data, t.k.strides, k0);
      sj.fwd.v = at(t.v.data, t.v.strides, k0);
      sj.fwd.lse = t.lse + q0;
      sj.fwd.lse_strides[0] = 0;
      sj.fwd.lse_strides[1] = p.seq_q;
      sj.dout = at(g.dout.data, g.dout.strides, q0);
      for (int i = 0; i < 3; ++i) {
        const std::size_t ges = dtype_size(job.grad_dtype[i]);
        sj.grad[i] = static_cast<char*>(job.grad[i]) + (i == 0 ? q0 : k0) * job.grad_strides[i][2] * ges;
      }
      sj.delta = job.delta + q0 * p.num_heads;
      sj.sink_parts = g.dsinks ? sink_parts + b * p.num_heads : nullptr;
      table->run(sj);
    }
  }
  if (g.dsinks) {  // summed over the batch entries (or sequences) in order
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      double sum = 0.0;
      for (std::int64_t b = 0; b < p.batch; ++b) sum += sink_parts[b * p.num_heads + h];
      g.dsinks[h] = static_cast<float>(sum);
    }
  }
  return Status::Ok();
}

}  // namespace fa::detail
