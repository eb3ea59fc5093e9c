// The forward dispatcher every version's entry point calls
// (fa<N>/flash_attention_fa<N>.cpp): validates the call and what the
// version offers, picks the kernel path (instruction set) and the tile plan,
// allocates the per-thread scratch once, and hands a plain job description
// to the path's KernelTable, which runs the version's loop (kernels/<isa>/,
// compiled once per version); then combines split-KV partials.  Linked into
// each version's library, whose kernel tables hold that version's loop.
#include <x86intrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../kernels/kernel_table.h"
#include "dtype_convert.h"
#include "flash_attention/flash_attention.h"
#include "forward_dispatch.h"
#include "thread_pool.h"
#include "tile_config.h"
#include "workspace_cache.h"

namespace fa::detail {

Status select_isa(const std::optional<Isa>& forced, Isa* chosen);

namespace {

struct Plan {
  int tile_q, tile_kv, threads;
  std::int64_t q_tiles;
};

// Tiles from the planner (it has checked them against the L2 budget).
Plan make_plan(const AttentionParams& p, const TilePlan& tiles) {
  Plan plan;
  plan.tile_q = tiles.tile_q;
  plan.tile_kv = tiles.tile_kv;
  plan.threads = tiles.threads;
  plan.q_tiles = (p.seq_q + tiles.q_step - 1) / tiles.q_step;
  return plan;
}

// Split-KV combine: O = sum_s exp(lse_s - lse) O_s with lse = log sum_s
// exp(lse_s), exact up to rounding; chunks that saw no key (lse_s = -inf)
// drop out, a row no chunk attended stays 0 with lse -inf, and a row with a
// NaN chunk is NaN.  Every split job of a call (one per sequence when the
// sequences have their own lengths) in one parallel loop over blocks of rows.
constexpr std::int64_t kCombineRows = 16;

std::int64_t combine_items(const AttentionJob& job) {
  return job.batch * job.heads * ((job.seq_q + kCombineRows - 1) / kCombineRows);
}

void combine_rows(const AttentionJob& job, std::int64_t item) {
  const std::int64_t BH = job.batch * job.heads, Sq = job.seq_q, D = job.head_dim;
  const std::size_t es = dtype_size(job.o_dtype);
  const std::int64_t row_blocks = (Sq + kCombineRows - 1) / kCombineRows;
  const std::int64_t bh = item / row_blocks, b = bh / job.heads, h = bh % job.heads;
  const std::int64_t i_begin = (item % row_blocks) * kCombineRows;
  const std::int64_t i_end = i_begin + kCombineRows < Sq ? i_begin + kCombineRows : Sq;
  float acc[kMaxHeadDim];
  for (std::int64_t i = i_begin; i < i_end; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int s = 0; s < job.num_splits; ++s) {  // a NaN chunk makes the row NaN (the NaN rule)
      const float lse_s = job.partial_lse[(s * BH + bh) * Sq + i];
      m = std::isnan(lse_s) || lse_s > m ? lse_s : m;
    }
    for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
    float sum = 0.0f;
    if (m != -std::numeric_limits<float>::infinity()) {
      for (int s = 0; s < job.num_splits; ++s) {
        const float lse_s = job.partial_lse[(s * BH + bh) * Sq + i];
        if (lse_s == -std::numeric_limits<float>::infinity()) continue;
        const float w = std::exp(lse_s - m);
        sum += w;
        const float* po = job.partial_o + ((s * BH + bh) * Sq + i) * D;
        for (std::int64_t d = 0; d < D; ++d) acc[d] += w * po[d];
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // NaN * 0 stays NaN
    char* orow = static_cast<char*>(job.o) + (b * job.o_strides[0] + h * job.o_strides[1] + i * job.o_strides[2]) * es;
    for (std::int64_t d = 0; d < D; ++d) store_from_f32(orow, job.o_dtype, d, acc[d] * inv);
    if (job.lse) {
      job.lse[b * job.lse_strides[0] + h * job.lse_strides[1] + i] =
          sum == 0.0f ? -std::numeric_limits<float>::infinity() : m + std::log(sum);
    }
  }
}

void combine_splits(const AttentionJob* jobs, std::size_t count, int threads) {
  std::vector<std::int64_t> ends;  // running item counts of the split jobs
  std::vector<const AttentionJob*> split;
  std::int64_t total = 0;
  for (std::size_t j = 0; j < count; ++j) {
    if (jobs[j].num_splits <= 1) continue;
    split.push_back(&jobs[j]);
    ends.push_back(total += combine_items(jobs[j]));
  }
  if (total == 0) return;
  ThreadPool::global().parallel_for(total, threads, [&](std::int64_t item, int) {
    const std::size_t j = static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), item) - ends.begin());
    combine_rows(*split[j], item - (j == 0 ? 0 : ends[j - 1]));
  });
}

// The K/V chunks of a sequence of `seq_kv` keys under the plan (1: unsplit).
int sequence_splits(std::int64_t seq_kv, const TilePlan& tiles) {
  return tiles.num_splits > 1 && seq_kv > tiles.split_keys
             ? static_cast<int>((seq_kv + tiles.split_keys - 1) / tiles.split_keys)
             : 1;
}

// Floats of the split-KV partials (O and LSE) of a call: each split job's
// chunks x rows x (head_dim + 1).
std::size_t partial_floats(const AttentionParams& p, const TilePlan& tiles) {
  if (tiles.num_splits <= 1) return 0;
  const std::size_t width = static_cast<std::size_t>(p.head_dim) + 1;
  if (!per_sequence_call(p)) {
    return static_cast<std::size_t>(tiles.num_splits) * static_cast<std::size_t>(p.batch * p.num_heads * p.seq_q) * width;
  }
  std::size_t n = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const AttentionParams sp = sequence_params(p, b);
    const int splits = sequence_splits(sp.seq_kv, tiles);
    if (splits > 1) n += static_cast<std::size_t>(splits) * static_cast<std::size_t>(p.num_heads * sp.seq_q) * width;
  }
  return n;
}

bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("FA_VERBOSE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

// FA_STAGE_TIMING=1: where each call's tile-loop time goes, on stderr.
bool stage_timing() {
  static const bool on = [] {
    const char* v = std::getenv("FA_STAGE_TIMING");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

void print_stage_times(Version version, const char* path, const std::uint64_t* cycles) {
  const auto& kNames = kProfileStageNames;
  std::uint64_t total = 0;
  for (int i = 0; i < kStageCount; ++i) total += cycles[i];
  if (total == 0) {
    std::fprintf(stderr, "%s_forward stages (%s): no tile-loop items (short Q tiles run the row path)\n",
                 std::string(version_name(version)).c_str(), path);
    return;
  }
  std::string line;
  for (int i = 0; i < kStageCount; ++i) {
    char part[48];
    std::snprintf(part, sizeof part, "%s%s %.1f%%", i ? ", " : "", kNames[i], 100.0 * double(cycles[i]) / double(total));
    line += part;
  }
  std::fprintf(stderr, "%s_forward stages (%s path tile loop, all threads): %s\n",
               std::string(version_name(version)).c_str(), path, line.c_str());
}


// TSC ticks per microsecond, measured once against the steady clock.
double tsc_ticks_per_us() {
  static const double rate = [] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t c0 = __rdtsc();
    auto t1 = t0;
    while (t1 - t0 < std::chrono::milliseconds(5)) t1 = std::chrono::steady_clock::now();
    const std::uint64_t c1 = __rdtsc();
    return double(c1 - c0) / std::chrono::duration<double, std::micro>(t1 - t0).count();
  }();
  return rate;
}

double steady_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// AttentionParams::profile: a record per item of the call's parallel loop
// (the scheduler fills them), turned into the caller's CallProfile at the end.
class CallRecorder {
 public:
  explicit CallRecorder(CallProfile* out) : out_(out) {
    if (out_) *out_ = CallProfile{};
  }
  // Before the loop: `items` zeroed records into *records (null when not
  // profiling); false when they cannot be allocated.
  bool begin(std::int64_t items, ItemRecord** records) {
    *records = nullptr;
    if (!out_) return true;
    try {
      records_.assign(static_cast<std::size_t>(items), ItemRecord{});
      out_->items.reserve(records_.size());
      out_->kernel.reserve(32);
    } catch (const std::bad_alloc&) {
      return false;
    }
    start_us_ = steady_us();
    start_tsc_ = __rdtsc();
    *records = records_.data();
    return true;
  }
  // After the loop and the combine (nothing here allocates beyond what
  // begin reserved: kernel names are short).
  void end(const char* kernel, int threads, std::size_t workspace_bytes) {
    if (!out_) return;
    const double per_us = tsc_ticks_per_us();
    const double end_us = double(__rdtsc() - start_tsc_) / per_us;
    out_->start_us = start_us_;
    out_->duration_us = end_us;
    out_->threads = threads;
    out_->kernel = kernel;
    out_->workspace_bytes = workspace_bytes;
    out_->items.resize(records_.size());
    for (std::size_t i = 0; i < records_.size(); ++i) {
      const ItemRecord& r = records_[i];
      ItemProfile& item = out_->items[i];
      item.thread = r.worker;
      item.start_us = double(std::int64_t(r.begin - start_tsc_)) / per_us;
      item.end_us = double(std::int64_t(r.end - start_tsc_)) / per_us;
      for (int k = 0; k < kStageCount; ++k) item.stage_us[k] = double(r.stage_cycles[k]) / per_us;
    }
  }

 private:
  CallProfile* out_;
  std::vector<ItemRecord> records_;
  double start_us_ = 0;
  std::uint64_t start_tsc_ = 0;
};

Status profile_out_of_memory(Version version) {
  return Status::OutOfMemory(std::string(version_name(version)) +
                             "_forward: could not allocate the profile's item records (AttentionParams::profile)");
}

// The job's shape and plan (what sizes its workspace), every other field
// zero: run_forward fills in the tensors and options.
AttentionJob planned_job(const AttentionParams& p, DType dtype, const Plan& plan, const TilePlan& tiles) {
  AttentionJob job{};
  set_shape_fields(p, dtype, &job);  // (run_forward sets a quantized cache's kv_dtype)
  job.tile_q = plan.tile_q;
  job.tile_kv = plan.tile_kv;
  job.threads = plan.threads;
  job.q_tiles = plan.q_tiles;
  job.num_splits = tiles.num_splits;
  job.split_keys = tiles.split_keys;
  job.pack_group = tiles.pack_gqa;
  job.pack_tile = tiles.pack_tile;
  job.q_step = tiles.q_step;
  job.row_rows = tiles.row_rows;
  job.kv_pack_tiles = (p.seq_kv + plan.tile_kv - 1) / plan.tile_kv;
  job.async_prefetch = p.async_prefetch.value_or(kAsyncPrefetch);
  return job;
}

// Bytes of the path's K/V packing shared by all items of a call (the pair
// path: amx, and bf16 on avx512bf16), 0 when it has none or would not gain
// from one; calls with per-sequence lengths pack per item.
std::size_t kv_pack_bytes(const KernelTable* table, const AttentionParams& p, const AttentionJob& job) {
  return !per_sequence_call(p) ? table->kv_pack_bytes(job) : 0;
}

// The kernel table of `isa` for `version`: this library's, which holds one
// version's loop; any other version is refused (a caller mixing up entry
// points and libraries).
Status version_table(Version version, Isa isa, const KernelTable** table) {
  *table = kernel_table(isa);
  if ((*table)->version != version) {
    return Status::Unsupported("this library runs the " + std::string(version_name((*table)->version)) +
                               " loop, not " + std::string(version_name(version)));
  }
  return Status::Ok();
}

}  // namespace

void set_shape_fields(const AttentionParams& p, DType dtype, AttentionJob* job) {
  job->dtype = job->kv_dtype = job->o_dtype = dtype;
  job->batch = p.batch;
  job->seq_q = p.seq_q;
  job->seq_kv = p.seq_kv;
  job->heads = p.num_heads;
  job->kv_group = p.num_heads / p.kv_heads();
  job->head_dim = p.head_dim;
}

void set_score_fields(const AttentionParams& p, AttentionJob* job) {
  job->mask = p.mask;
  job->scale_log2 = p.softmax_scale() * 1.4426950408889634f;
  job->window = key_window(p);
  job->sinks = p.sinks;
  job->softcap_log2 = p.softcap * 1.4426950408889634f;
  job->alibi_slopes = p.alibi_slopes;
  job->bias = p.bias;
  job->bias_head_stride = p.bias && p.bias_heads > 1 ? p.seq_q * p.seq_kv : 0;
  job->dropout = dropout_of(p);
}

std::size_t forward_workspace_bytes(Version version, const AttentionParams& p, DType dtype, int threads) {
  Isa isa = Isa::kGeneric;
  const KernelTable* table = nullptr;
  TilePlan tiles;
  if (!select_isa(p.isa, &isa).ok() || !version_table(version, isa, &table).ok() ||
      !fa::plan(version, p, dtype, &tiles).ok()) {
    return 0;
  }
  const Plan plan = make_plan(p, tiles);
  const int n = threads > 0 ? threads : plan.threads;
  const std::size_t partials = partial_floats(p, tiles);
  const AttentionJob job = planned_job(p, dtype, plan, tiles);
  return (table->workspace_floats(job) * static_cast<std::size_t>(n) + partials) * sizeof(float) +
         kv_pack_bytes(table, p, job);
}

Status run_forward(Version version, const AttentionParams& p, const AttentionTensors& t) {
  if (Status s = validate(p, t); !s.ok()) return s;
  if (Status s = version_supports(version, p, t.q.dtype, t.k.dtype); !s.ok()) return s;
  Isa isa;
  if (Status s = select_isa(p.isa, &isa); !s.ok()) return s;
  if (!detail::kMixedPrecisionSoftmax && t.q.dtype == DType::kF16 && isa != Isa::kAmx) {
    return Status::Unsupported("FA_MIXED_PRECISION_SOFTMAX=OFF: the fp16 softmax needs a kernel path with "
                               "AVX512-FP16 (amx), and the " + std::string(isa_name(isa)) +
                               " path has none (rebuild with FA_MIXED_PRECISION_SOFTMAX=ON for an fp32 softmax)");
  }
  const KernelTable* table = nullptr;
  if (Status s = version_table(version, isa, &table); !s.ok()) return s;
  TilePlan tiles;
  // The tensors say where K's and V's heads lie, whatever the caller set.
  AttentionParams planned = p;
  planned.kv_heads_side_by_side = t.k.strides[1] == p.head_dim && t.v.strides[1] == p.head_dim;
  if (Status s = fa::plan(version, planned, t.q.dtype, t.k.dtype, &tiles); !s.ok()) return s;
  const Plan plan = make_plan(p, tiles);
  AttentionJob job = planned_job(p, t.q.dtype, plan, tiles);
  job.kv_dtype = t.k.dtype;  // before the scratch is sized: the row path keeps more for an int8 cache

  const std::size_t per_thread = table->workspace_floats(job);
  const std::size_t scratch_floats = per_thread * static_cast<std::size_t>(plan.threads);
  // Split-KV partials live after the per-thread scratch.
  const std::size_t rows = static_cast<std::size_t>(p.batch * p.num_heads * p.seq_q);
  const std::size_t bytes = (scratch_floats + partial_floats(p, tiles)) * sizeof(float);
  const WorkspaceBlock scratch_block(bytes);
  float* const scratch = static_cast<float*>(scratch_block.get());
  if (!scratch) {
    return Status::OutOfMemory(std::string(version_name(version)) + "_forward: could not allocate " +
                               std::to_string(bytes) + " bytes of workspace");
  }

  job.q = t.q.data;
  job.k = t.k.data;
  job.v = t.v.data;
  job.o = t.o.data;
  job.o_dtype = t.o.dtype;
  for (int i = 0; i < 2; ++i) {  // an int8 cache's scales
    const TensorView& scale = i == 0 ? t.k_scale : t.v_scale;
    job.kv_scale[i] = t.k.dtype == DType::kI8 ? static_cast<const float*>(scale.data) : nullptr;
    for (int a = 0; a < 3; ++a) job.kv_scale_strides[i][a] = job.kv_scale[i] ? scale.strides[a] : 0;
  }
  for (auto [i, values, count] : {std::tuple{0, p.descale_q, p.descale_q_count}, std::tuple{1, p.descale_k, p.descale_k_count},
                                  std::tuple{2, p.descale_v, p.descale_v_count}}) {
    job.descale[i] = values;
    job.descale_stride[i] = count > 1 ? 1 : 0;
  }
  job.lse = t.lse;
  job.lse_strides[0] = p.num_heads * p.seq_q;
  job.lse_strides[1] = p.seq_q;
  for (int a = 0; a < 3; ++a) {
    job.q_strides[a] = t.q.strides[a];
    job.k_strides[a] = t.k.strides[a];
    job.v_strides[a] = t.v.strides[a];
    job.o_strides[a] = t.o.strides[a];
  }
  if (p.block_table) {  // every batch reads the one pool through its row of the table
    job.block_table = p.block_table;
    job.blocks_per_seq = p.max_blocks_per_seq;
    job.block_shift = __builtin_ctzll(static_cast<unsigned long long>(p.block_size));
    job.k_strides[0] = job.v_strides[0] = 0;
    job.kv_scale_strides[0][0] = job.kv_scale_strides[1][0] = 0;
  }
  set_score_fields(p, &job);
  job.scratch = scratch;
  job.per_thread_floats = per_thread;
  job.partial_o = tiles.num_splits > 1 ? scratch + scratch_floats : nullptr;
  job.partial_lse = tiles.num_splits > 1 ? job.partial_o + static_cast<std::size_t>(tiles.num_splits) * rows * p.head_dim : nullptr;
  // The path's K/V packing shared by all items: one buffer per call, its
  // states zeroed.  A call whose buffer cannot be had packs per item.
  const std::size_t pack_bytes = kv_pack_bytes(table, p, job);
  const WorkspaceBlock kv_pack = pack_bytes ? WorkspaceBlock(pack_bytes) : WorkspaceBlock();
  if (kv_pack) {
    const std::size_t slots = static_cast<std::size_t>(p.batch * p.kv_heads() * job.kv_pack_tiles);
    const std::size_t state_bytes = (slots * sizeof(std::uint32_t) + 63) & ~std::size_t{63};
    std::memset(kv_pack.get(), 0, state_bytes);
    job.kv_pack_state = static_cast<std::uint32_t*>(kv_pack.get());
    job.kv_pack = reinterpret_cast<std::uint16_t*>(static_cast<char*>(kv_pack.get()) + state_bytes);
  }

  if (verbose()) {
    std::fprintf(stderr,
                 "%s_forward: path=%s tile=%dx%d (%s, L2 working set %zu of %zu bytes) splits=%d gqa_pack=%d%s threads=%d items=%lld dtype=%s kv_dtype=%s B=%lld Sq=%lld Skv=%lld H=%lld "
                 "Hkv=%lld D=%lld window=%d mask=%d sinks=%d workspace=%zu bytes kv_pack=%zu bytes\n",
                 std::string(version_name(version)).c_str(), table->name, plan.tile_q, plan.tile_kv, tiles.source.c_str(), tiles.working_set_bytes,
                 tiles.limit_bytes, tiles.num_splits, tiles.pack_gqa, tiles.pack_tile ? " (one tile)" : "", plan.threads,
                 static_cast<long long>(tiles.work_items), std::string(dtype_name(job.dtype)).c_str(),
                 std::string(dtype_name(job.kv_dtype)).c_str(),
                 static_cast<long long>(p.batch), static_cast<long long>(p.seq_q), static_cast<long long>(p.seq_kv),
                 static_cast<long long>(p.num_heads), static_cast<long long>(p.kv_heads()),
                 static_cast<long long>(p.head_dim), job.window.active ? 1 : 0, p.mask ? 1 : 0, p.sinks ? 1 : 0, bytes,
                 kv_pack ? pack_bytes : std::size_t{0});
  }
  std::uint64_t stage_cycles[kStageCount] = {};
  job.stage_cycles = stage_timing() ? stage_cycles : nullptr;
  CallRecorder recorder(p.profile);
  const std::size_t workspace_bytes = bytes + (kv_pack ? pack_bytes : 0);
  if (!per_sequence_call(p)) {
    if (!recorder.begin(table->items(job), &job.item_records)) return profile_out_of_memory(version);
    table->run(&job, nullptr, 1);
    if (job.num_splits > 1) combine_splits(&job, 1, plan.threads);
    recorder.end(table->name, plan.threads, workspace_bytes);
    if (job.stage_cycles) print_stage_times(version, table->name, stage_cycles);
    return Status::Ok();
  }
  // Per-sequence lengths: one job per sequence, over its own rows of the
  // packed tensors (variable-length: no padding anywhere) or its own batch
  // entry of the cache (seqlens_kv: its first keys, of a contiguous or a
  // paged cache), each cut into chunks of the plan's size, all run in one
  // parallel loop; then the split ones combined in another.
  std::vector<AttentionJob> jobs;
  std::vector<std::int64_t> ends;
  jobs.reserve(static_cast<std::size_t>(p.batch));
  std::int64_t total = 0;
  float* partials = job.partial_o;
  const std::size_t es = dtype_size(job.dtype), o_es = dtype_size(job.o_dtype), kv_es = dtype_size(job.kv_dtype);
  // An int8 cache's scales of sequence b: `tokens` keys (or batch entries) on.
  auto scales_at = [&](AttentionJob& sj, std::int64_t tokens, int axis) {
    for (int i = 0; i < 2; ++i) {
      if (job.kv_scale[i]) sj.kv_scale[i] = job.kv_scale[i] + tokens * job.kv_scale_strides[i][axis];
    }
  };
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const AttentionParams sp = sequence_params(p, b);
    AttentionJob sj = job;
    if (p.seqlens_kv) {  // batch entry b of Q, O, the LSE and the cache
      sj.q = static_cast<const char*>(t.q.data) + b * t.q.strides[0] * es;
      sj.o = static_cast<char*>(t.o.data) + b * t.o.strides[0] * o_es;
      sj.k = static_cast<const char*>(t.k.data) + b * job.k_strides[0] * kv_es;  // the pool itself when paged
      sj.v = static_cast<const char*>(t.v.data) + b * job.v_strides[0] * kv_es;
      scales_at(sj, b, 0);
      sj.block_table = sp.block_table;
      sj.lse = t.lse ? t.lse + b * job.lse_strides[0] : nullptr;
    } else {  // tokens [cu_seqlens[b], cu_seqlens[b + 1]) of the packed tensors
      const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_kv[b];
      sj.q = static_cast<const char*>(t.q.data) + q0 * t.q.strides[2] * es;
      sj.o = static_cast<char*>(t.o.data) + q0 * t.o.strides[2] * o_es;
      sj.k = static_cast<const char*>(t.k.data) + k0 * t.k.strides[2] * kv_es;
      sj.v = static_cast<const char*>(t.v.data) + k0 * t.v.strides[2] * kv_es;
      scales_at(sj, k0, 2);
      sj.lse = t.lse ? t.lse + q0 : nullptr;
      sj.lse_strides[0] = 0;
      sj.lse_strides[1] = p.seq_q;  // [1, heads, total_q]
    }
    sj.batch = 1;
    sj.seq_q = sp.seq_q;
    sj.seq_kv = sp.seq_kv;
    sj.window = key_window(sp);
    sj.dropout = dropout_of(sp);
    sj.q_tiles = (sp.seq_q + tiles.q_step - 1) / tiles.q_step;
    sj.num_splits = sequence_splits(sp.seq_kv, tiles);
    sj.split_keys = sj.num_splits > 1 ? tiles.split_keys : (sp.seq_kv > 0 ? sp.seq_kv : 1);
    sj.partial_o = sj.partial_lse = nullptr;
    if (sj.num_splits > 1) {  // this sequence's partials, next in the buffer
      const std::size_t seq_rows = static_cast<std::size_t>(sj.num_splits) * static_cast<std::size_t>(p.num_heads * sp.seq_q);
      sj.partial_o = partials;
      sj.partial_lse = partials + seq_rows * static_cast<std::size_t>(p.head_dim);
      partials += seq_rows * (static_cast<std::size_t>(p.head_dim) + 1);
    }
    jobs.push_back(sj);
    ends.push_back(total += table->items(sj));
  }
  ItemRecord* records = nullptr;
  if (!recorder.begin(total, &records)) return profile_out_of_memory(version);
  for (AttentionJob& sj : jobs) sj.item_records = records;
  if (total > 0) table->run(jobs.data(), ends.data(), jobs.size());
  combine_splits(jobs.data(), jobs.size(), plan.threads);
  recorder.end(table->name, plan.threads, workspace_bytes);
  if (job.stage_cycles) print_stage_times(version, table->name, stage_cycles);
  return Status::Ok();
}

}  // namespace fa::detail
