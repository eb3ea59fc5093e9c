// Public C++ API of the FlashAttention operators.
//
// One forward entry point per algorithm version (fa1_forward, fa2_forward,
// fa3_forward, each in its version's library), all sharing the same
// parameter and tensor-view types, so callers and drivers switch versions by
// switching one function.  Nothing here aborts the process: every problem
// with the arguments comes back as a Status carrying a one-line message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Symbols of the shared libraries' public API; everything else is hidden.
#if defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

namespace fa {

// tile_q / tile_kv value asking the planner to choose.
inline constexpr int kTileAuto = -1;
// num_splits value asking the planner to choose (split only when the
// (batch, head, Q tile) items leave threads idle).
inline constexpr int kSplitsAuto = -1;
inline constexpr int kMaxSplits = 1024;

// Largest head_dim the kernels accept (multiples of 8 up to this).
inline constexpr std::int64_t kMaxHeadDim = 256;
// Most threads one call may ask for.
inline constexpr int kMaxThreads = 1024;

// ---------------------------------------------------------------- status ---

enum class StatusCode { kOk = 0, kInvalidArgument, kOutOfMemory, kUnsupported };

class Status {
 public:
  Status() = default;
  static Status Ok() { return {}; }
  static Status Invalid(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status OutOfMemory(std::string message) {
    return Status(StatusCode::kOutOfMemory, std::move(message));
  }
  static Status Unsupported(std::string message) {
    return Status(StatusCode::kUnsupported, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// --------------------------------------------------------------- version ---

// The FlashAttention algorithm versions.  FA1 (2022): K/V tiles outer, Q
// tiles inner, output and softmax state kept in memory and rewritten at
// every K/V step, parallel over (batch, head), 64 x 64 tiles.  FA2 (2023): Q
// tiles outer, state in the thread's scratch, parallel over (batch, head, Q
// tile).  FA3 (2024): FA2's arithmetic with two Q tiles per thread
// interleaved and the next K/V tile loaded while the current one computes.
enum class Version { kFA1 = 1, kFA2 = 2, kFA3 = 3 };

// "fa1", "fa2", "fa3".
FA_API std::string_view version_name(Version version);

// ----------------------------------------------------------------- dtype ---

// fp32, fp16 and bf16 for every tensor; the 8-bit floats of the OCP FP8
// format (e4m3fn: 4 exponent bits, 3 mantissa bits, max 448, NaN but no Inf;
// e5m2: 5 and 2, max 57344, Inf and NaN) for Q, K and V of FA3, with the
// output in fp32, fp16 or bf16 and a dequantization factor per tensor or per
// head (AttentionParams::descale_*).  int8 is a K/V cache dtype only (see
// AttentionTensors::k_scale).
enum class DType { kF32, kF16, kBF16, kFP8E4M3, kFP8E5M2, kI8 };

inline constexpr bool is_fp8(DType dtype) { return dtype == DType::kFP8E4M3 || dtype == DType::kFP8E5M2; }
// The dtypes of a quantized K/V cache read with fp16 or bf16 queries: int8
// with a scale per (token, K/V head), FP8 with descale_k / descale_v.
inline constexpr bool is_quantized_kv(DType dtype) { return dtype == DType::kI8 || is_fp8(dtype); }

FA_API std::size_t dtype_size(DType dtype);
// "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8": the spellings the
// command-line tools accept.
FA_API std::string_view dtype_name(DType dtype);
FA_API std::optional<DType> parse_dtype(std::string_view name);

// ---------------------------------------------------------------- layout ---

// Memory layouts of Q, K, V and O.  B = batch, S = sequence, N (or H) = heads,
// D = head_dim.  BSH is the guide's [batch, seq, heads * head_dim]; BSND is
// the same bytes seen as 4-D; BNSD puts each head's rows together.
// TND is the packed variable-length layout [total tokens, heads, head_dim]:
// the bytes of BSND with a batch of 1 (see AttentionParams::cu_seqlens_q).
enum class Layout { kBSH, kBSND, kBNSD, kTND };

FA_API std::string_view layout_name(Layout layout);
FA_API std::optional<Layout> parse_layout(std::string_view name);

// ------------------------------------------------------ instruction set ---

// Kernel paths, from the portable one up.  `generic` is SSE2 (every x86-64
// CPU); `avx2` needs AVX2+FMA+F16C; `avx512` needs AVX-512 F/BW/VL/DQ;
// `avx512bf16` needs AVX512-BF16 on top and runs the bf16 products with
// VDPBF16PS; `amx` needs AMX-TILE+AMX-BF16, AVX512-BF16 and AVX512-FP16 on top
// of avx512, and runs the bf16 and fp16 products on the tile unit.  fp32 calls
// (and fp16 on avx512bf16) run the paths' AVX-512 FMA code.
enum class Isa { kGeneric, kAvx2, kAvx512, kAvx512Bf16, kAmx };

FA_API std::string_view isa_name(Isa isa);
FA_API std::optional<Isa> parse_isa(std::string_view name);
// True when this build contains the path and the CPU (and OS) can run it.
FA_API bool isa_available(Isa isa);
// The paths this build contains, e.g. "generic avx2 avx512".
FA_API std::string built_isas();
// The CPU's relevant features, e.g. "avx2 fma f16c avx512f ...".
FA_API std::string cpu_isa_features();

// ----------------------------------------------------------- sparse mode ---

// Which keys a query may attend, as the Ascend operator numbers its modes.
// A window is [i + offset - pre_tokens, i + offset + next_tokens] for query i.
enum class SparseMode {
  kMaskAndBand = 0,        // explicit mask (if any) AND the band, aligned top-left (offset 0)
  kAll = 1,                // every key
  kCausalTopLeft = 2,      // j <= i
  kCausalBottomRight = 3,  // j <= i + seq_kv - seq_q (what `causal` means)
  kBand = 4,               // sliding window, aligned bottom-right (offset seq_kv - seq_q)
};
inline constexpr std::int64_t kUnboundedTokens = std::int64_t{1} << 60;

// ----------------------------------------------------------- tensor view ---

// A strided view of a 4-D tensor with logical axes [batch, heads, seq, dim].
// Strides are in elements, not bytes.  The view does not own its memory.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t shape[4] = {0, 0, 0, 0};    // batch, heads, seq, dim
  std::int64_t strides[4] = {0, 0, 0, 0};  // in elements

  std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) const {
    return b * strides[0] + h * strides[1] + s * strides[2] + d * strides[3];
  }
};

// A view of a dense buffer stored in `layout`.
FA_API TensorView make_view(void* data, DType dtype, Layout layout, std::int64_t batch,
                     std::int64_t heads, std::int64_t seq, std::int64_t head_dim);

// A matrix for the element-wise operators (the norms, the gated linear
// units): `rows` rows of `hidden` elements of `dtype` (fp32, fp16 or bf16), each row
// `row_stride` elements after the previous (0: hidden, packed).  The last
// dimension is contiguous.
struct RowsView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::int64_t rows = 0, hidden = 0, row_stride = 0;
};

// ------------------------------------------------------------- profiling ---

// Where one call's time went, work item by work item (AttentionParams::
// profile; the benchmarks' --profile writes it as a Chrome trace).
inline constexpr int kProfileStages = 7;
// The tile loop's stages, in the order of ItemProfile::stage_us: Q loaded
// and the row state set up; K/V tiles converted or packed; Q·Kᵀ; the
// softmax with masks and modifiers; O rescaled; P·V; the epilogue (O, LSE).
inline constexpr const char* kProfileStageNames[kProfileStages] = {"Q+state", "K/V", "Q*K^T", "softmax",
                                                                   "rescale", "P*V", "epilogue"};
struct ItemProfile {
  int thread = 0;                  // the worker that ran it, 0 ... threads - 1
  double start_us = 0, end_us = 0;  // from the call's start
  // Each stage's time, summed over the item's K/V steps (the stages
  // alternate step by step; these are their totals).  All 0 for items of
  // the row path (short Q tiles), which is not lapped.
  double stage_us[kProfileStages] = {};
};
struct CallProfile {
  double start_us = 0;     // the call's start on the steady clock (one timeline for many calls)
  double duration_us = 0;  // to the end of its last step (split-KV's combine included)
  int threads = 0;
  std::string kernel;                // the path's name
  std::size_t workspace_bytes = 0;   // the call's scratch and shared K/V packing
  std::vector<ItemProfile> items;    // in the order of the parallel loop's item numbers
};

// ---------------------------------------------------------------- params ---

struct FA_API AttentionParams {
  std::int64_t batch = 1;
  std::int64_t seq_q = 0;
  std::int64_t seq_kv = 0;
  std::int64_t num_heads = 1;
  std::int64_t num_kv_heads = 0;  // 0 means num_heads (plain multi-head attention)
  std::int64_t head_dim = 0;
  std::optional<float> scale;     // default 1/sqrt(head_dim)

  // Query i may attend key j when j <= i + (seq_kv - seq_q): the causal mask
  // aligned bottom-right, as in FlashAttention 2.1 and later.
  bool causal = false;
  // Optional explicit mask, int8 [seq_q, seq_kv] row-major, 1 = may attend,
  // shared by every batch and head.  Combined with `causal` by logical AND.
  const std::int8_t* mask = nullptr;
  // Sparse modes (unset: `causal` decides).  pre_tokens / next_tokens are the
  // band's left and right sizes for kMaskAndBand and kBand (>= 0).
  std::optional<SparseMode> sparse_mode;
  std::int64_t pre_tokens = kUnboundedTokens;
  std::int64_t next_tokens = kUnboundedTokens;
  // Variable-length sequences packed without padding (layout TND): with
  // both set, `batch` is the number of sequences, seq_q / seq_kv are the
  // total query / key tokens, the tensors are views of batch 1
  // ([1, heads, total, head_dim]), and sequence b owns query tokens
  // [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and keys likewise.  int32
  // [batch + 1], starting at 0, non-decreasing, ending at the totals.  Masks
  // and windows apply per sequence; the LSE is [1, heads, total_q].  Not
  // combined with an explicit mask or a bias tensor.  Split-KV cuts every
  // sequence into chunks of one size (num_splits caps the longest's).
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_kv = nullptr;
  // Paged KV cache (the layout of vLLM and of the Ascend operator): K and V
  // are pools of kv_num_blocks blocks of block_size tokens (a power of two
  // from 16 to 512), and block_table[b * max_blocks_per_seq + n] (int32,
  // [batch, max_blocks_per_seq]) names the pool block holding tokens
  // [n * block_size, (n + 1) * block_size) of sequence b.  Every sequence has
  // seq_kv keys, or with seqlens_kv its own count (the entries past its last
  // block are not read).  The K and V views describe
  // the pool as one sequence, [1, num_kv_heads, kv_num_blocks * block_size,
  // head_dim] in any layout (BSH: vLLM's [blocks, block_size, heads,
  // head_dim]).  Results equal those of the same keys stored contiguously,
  // bit for bit.  Null = contiguous K/V.  Not combined with cu_seqlens.
  const std::int32_t* block_table = nullptr;
  std::int64_t max_blocks_per_seq = 0;
  std::int64_t block_size = 0;
  std::int64_t kv_num_blocks = 0;
  // Per-sequence key counts of a KV cache (continuous batching): int32
  // [batch], sequence b attends its first seqlens_kv[b] keys (0 ... seq_kv)
  // of a contiguous cache [batch, num_kv_heads, seq_kv, head_dim] (seq_kv is
  // then its capacity) or of a paged one.  Causal masks and windows align to
  // each sequence's own length (its last query sees its last key); each
  // sequence gets its own dropout pattern, as with cu_seqlens.  Long
  // sequences are split across threads (split-KV, chunks of one size for
  // the whole batch), so a batch of mixed lengths keeps every core busy.
  // Null = every sequence has seq_kv keys.  Not combined with cu_seqlens, an
  // explicit mask or a bias tensor.
  const std::int32_t* seqlens_kv = nullptr;
  // Attention sinks: one logit per query head (in the units of the scaled
  // scores) that takes part in every row's softmax denominator; null = none.
  const float* sinks = nullptr;
  // Score modifiers, applied to s = scale * q·k in this order:
  //   logit soft-capping  s = softcap * tanh(s / softcap)     (softcap > 0)
  //   ALiBi               s -= slope[h] * |i + seq_kv - seq_q - j|
  //   additive bias       s += bias[h or 0][i][j]   (fp32 [bias_heads, seq_q, seq_kv])
  float softcap = 0.0f;
  // Attention dropout (training): each probability is kept with keep_prob
  // and scaled by 1 / keep_prob, else zeroed, after normalization; the
  // log-sum-exp is unaffected.  Which elements drop depends only on
  // dropout_seed and the element's (batch, head, query, key).  1 = off.
  float keep_prob = 1.0f;
  std::uint64_t dropout_seed = 0;
  const float* alibi_slopes = nullptr;  // [num_heads]
  const float* bias = nullptr;
  std::int64_t bias_heads = 0;          // 1 (shared) or num_heads

  // FP8 inputs (FA3: Q, K and V in FP8; FA2 and FA3: an FP8 K/V cache read
  // with fp16 or bf16 queries): the real value of an element is its FP8
  // value times its tensor's descale factor, one per tensor (count 1) or one
  // per head (num_heads for Q, num_kv_heads for K and V); finite and
  // positive.  Null means 1.  Given for other dtypes, they are refused.
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  std::int64_t descale_q_count = 0, descale_k_count = 0, descale_v_count = 0;

  // Threads used; 0 means every core this process may run on.  Either way
  // capped by the FA_MAX_THREADS environment variable when set.
  int threads = 0;
  // Tile sizes (rows of Q and of K/V per block): a power of two from 16 to
  // 512, kTileAuto (the tuning cache's entry for this shape class, else the
  // target's table), or 0 for the build's default (FA_TILE_Q / FA_TILE_KV,
  // which may itself be auto).  Every plan is checked against the CPU's
  // per-core L2 budget.
  int tile_q = 0;
  int tile_kv = 0;
  // Split-KV: the keys are cut into chunks (of at least FA_SPLIT_THRESHOLD
  // keys, whole K/V tiles) computed in parallel, each giving a partial output
  // and log-sum-exp, combined exactly.  1 = unsplit, N = at most N chunks,
  // kSplitsAuto = the planner decides, 0 = the build's default (auto with
  // FA_SPLIT_ENABLE=ON, and for short queries of at most TilePlan::row_rows
  // rows, else 1).
  int num_splits = 0;
  // Whether a token's K/V heads lie side by side in one row of K and V (BSH,
  // BSND, TND; a paged pool as [blocks, block_size, heads, head_dim]) rather
  // than each head's keys together (BNSD).  Short queries read side-by-side
  // heads as whole rows, tile by tile, and other layouts head after head,
  // and the planner sizes the K/V tile for that.  The forward sets it from
  // K's and V's strides; only a plan made without the tensors (fa::plan,
  // the workspace query) reads it from here.
  bool kv_heads_side_by_side = true;
  // Kernel path; unset means the FA_ISA environment variable when set, else
  // the fastest path this build and CPU have.
  std::optional<Isa> isa;
  // Software prefetch of the next K/V tile while the current one computes
  // (FA2 and FA3; FA1 has none); unset means the build's FA_ENABLE_ASYNC.
  std::optional<bool> async_prefetch;
  // When set, the call records each work item's thread, time span and
  // stages into it (two TSC reads per stage and step: a few percent of a
  // call's time).  Null: no recording.
  CallProfile* profile = nullptr;

  std::int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  float softmax_scale() const;
};

struct AttentionTensors {
  TensorView q;  // [batch, num_heads,    seq_q,  head_dim]
  TensorView k;  // [batch, num_kv_heads, seq_kv, head_dim]
  TensorView v;  // [batch, num_kv_heads, seq_kv, head_dim]
  TensorView o;  // [batch, num_heads,    seq_q,  head_dim], written: Q's dtype, or for FP8
                 // inputs fp32, fp16 or bf16
  // A quantized K/V cache (FA2 and FA3; decoding reads half the bytes of a
  // 16-bit one): with Q in fp16 or bf16, K and V may be int8 or FP8
  // (e4m3fn, e5m2), both the same, contiguous, paged or per-sequence; O is
  // Q's dtype.  Dequantized as they are read, the softmax and accumulation
  // in fp32.  int8: key j of K/V head h of batch entry b stands for k[b, h,
  // j, :] * k_scale[b, h, j, 0] (likewise V), the scales fp32 views
  // [batch, num_kv_heads, seq_kv, 1] in any layout (a paged cache's:
  // [1, num_kv_heads, kv_num_blocks * block_size, 1], pool rows like K's),
  // written by append_kv_cache.  FP8: AttentionParams::descale_k and
  // descale_v, one per tensor or per K/V head.  Unused (data null) otherwise.
  TensorView k_scale;
  TensorView v_scale;
  // Optional log-sum-exp of each score row (natural log, scaled scores),
  // fp32 [batch, num_heads, seq_q] contiguous.  -inf for a fully masked row.
  float* lse = nullptr;
};

// Checks shapes, dtypes, strides, tiles and mask against each other.
FA_API Status validate(const AttentionParams& params, const AttentionTensors& tensors);

// Bytes of scratch memory a <version>_forward call allocates for `threads`
// threads (on the pair path, amx and bf16 on avx512bf16, with it the K/V
// packing shared by the call's Q tiles; for FA1, each thread's output and
// softmax state of a whole (batch, head)).  Each in its version's library.
FA_API std::size_t fa1_workspace_bytes(const AttentionParams& params, DType dtype, int threads);
FA_API std::size_t fa2_workspace_bytes(const AttentionParams& params, DType dtype, int threads);
FA_API std::size_t fa3_workspace_bytes(const AttentionParams& params, DType dtype, int threads);

// Workspace blocks are kept for the next calls when a call ends (the largest
// four): the bytes held now, and freeing them all.
FA_API std::size_t cached_workspace_bytes();
FA_API void release_cached_workspace();

// Number of (query, key) pairs that may attend, per (batch, head); for a
// call with per-sequence lengths (cu_seqlens, seqlens_kv), per head, summed
// over its sequences.
FA_API std::int64_t attended_pairs(const AttentionParams& params);

// Threads a call with params.threads == 0 uses: the size of the library's
// CPU set, the CPUs the process may run on (its main thread's affinity),
// whatever the calling thread is pinned to.  The library's worker threads run
// on that whole set; the calling thread takes part with its own affinity.
FA_API int default_thread_count();
// Narrows the library's CPU set to `cpus` (for callers who pin their work):
// the default thread count becomes their number and the workers move onto
// them at the next call; an empty list restores the process's set.  A CPU
// the process may not run on is refused.
FA_API Status set_worker_cpus(const std::vector<int>& cpus);

// --------------------------------------------------------- entry points ---

// The forward pass O = softmax(scale * Q Kᵀ + mask) V of each version, in
// that version's library (libflash_attention_fa<N>.so).  FA_VERBOSE=1 in the
// environment prints the path and tile plan of each call on stderr.
//
// FlashAttention-1: what the 2022 algorithm offered; variable-length (TND)
// calls, split-KV (num_splits > 1) and attention sinks are refused with
// kUnsupported, and its tiles are 64 x 64 (another explicit tile_q or
// tile_kv is refused); async_prefetch is ignored.
FA_API Status fa1_forward(const AttentionParams& params, const AttentionTensors& tensors);
// FlashAttention-2.
FA_API Status fa2_forward(const AttentionParams& params, const AttentionTensors& tensors);
// FlashAttention-3: every FA2 feature, two Q tiles per work item, and FP8
// inputs (FA1 and FA2 refuse those).
FA_API Status fa3_forward(const AttentionParams& params, const AttentionTensors& tensors);

// ------------------------------------------------------------- backward ---

// The gradients of one attention call (training).  `dout` is read; the rest
// is written.  dQ has Q's shape, dK and dV K's and V's (with GQA each K/V
// head's gradient summed over its group of query heads); each may be stored
// in its input's dtype or in fp32, in any layout.
struct AttentionGrads {
  TensorView dout;  // dO: [batch, num_heads, seq_q, head_dim], Q's dtype
  TensorView dq;    // [batch, num_heads,    seq_q,  head_dim]
  TensorView dk;    // [batch, num_kv_heads, seq_kv, head_dim]
  TensorView dv;    // [batch, num_kv_heads, seq_kv, head_dim]
  // Optional (null: not computed).  With a bias tensor: the bias's gradient,
  // fp32 [bias_heads, seq_q, seq_kv], summed over the batch (and over the
  // heads when one bias is shared).  With sinks: each sink logit's
  // gradient, fp32 [num_heads].
  float* dbias = nullptr;
  float* dsinks = nullptr;
};

// FlashAttention-2's backward pass (in libflash_attention_fa2.so): dQ, dK and
// dV of the forward call `params` and `tensors` describe, given its output
// O (tensors.o) and log-sum-exp (tensors.lse, required) and dO.  P is
// recomputed tile by tile from the LSE; no seq_q x seq_kv buffer exists.
// fp32 arithmetic for fp32, fp16 and bf16 inputs.  The results are
// bit-identical across runs and thread counts (docs/DESIGN.md says how).
// Every mask and sparse mode, GQA/MQA, ALiBi, the bias (and its gradient),
// softcap, dropout (the forward's mask, recomputed), sinks (and their
// gradients) and variable-length (TND) calls; FP8 inputs, quantized or
// paged K/V caches and per-sequence key counts (inference features) are
// refused with kUnsupported.  Never aborts.
FA_API Status fa2_backward(const AttentionParams& params, const AttentionTensors& tensors, const AttentionGrads& grads);
// Bytes of scratch memory an fa2_backward call of `params` on `dtype` inputs
// allocates for `threads` threads (0: the call's own count): each thread's
// tiles, D of every row, and for bf16's pair products Q, dO, K and V packed
// as bf16 pairs (about 2 x (Q + dO) + 2 x K + V).  Linear in the sequence
// lengths.  0 for a call it would refuse.
FA_API std::size_t fa2_backward_workspace_bytes(const AttentionParams& params, DType dtype, int threads);

// The float64 reference of the gradients, written from the formulas (a full
// score row at a time): dq [batch, seq_q, num_heads, head_dim], dk and dv
// [batch, seq_kv, num_kv_heads, head_dim] (the BSH order; variable-length
// calls: batch 1 over the total tokens), dbias [bias_heads, seq_q, seq_kv]
// and dsinks [num_heads] (either may be null).  O and the LSE are not read:
// the reference recomputes them.
FA_API Status reference_backward(const AttentionParams& params, const AttentionTensors& tensors, const TensorView& dout,
                                 double* dq, double* dk, double* dv, double* dbias, double* dsinks);

// The backward pass's accuracy yardstick (as same_dtype_attention is the
// forward's): the same formulas with each stage's result rounded to
// `compute` (scores, P, O, D = rowsum(dO ∘ O), dP, dS), the gradients' sums
// rounded once.  Outputs as reference_backward's.
FA_API Status same_dtype_backward(const AttentionParams& params, const AttentionTensors& tensors, const TensorView& dout,
                                  DType compute, double* dq, double* dk, double* dv, double* dbias, double* dsinks);

// Whether `version` offers what `params` asks for on inputs of `dtype` (OK),
// else an Unsupported status saying what it lacks and which version has it.
// `kv_dtype`: K's and V's when they differ from Q's (a quantized cache).
FA_API Status version_supports(Version version, const AttentionParams& params, DType dtype,
                               std::optional<DType> kv_dtype = std::nullopt);

// The path a forward call would run for `params` (forced, FA_ISA, or the
// best), or an Unsupported status naming the missing instruction set.
FA_API Status select_isa(const AttentionParams& params, Isa* isa);

// Peak fp32 FMA rate of `isa`'s vector unit on `threads` threads, in
// GFLOP/s, measured by running independent FMA chains for about `seconds`.
FA_API double measure_fma_peak_gflops(Isa isa, int threads, double seconds);

// Peak bf16 rate of `isa`'s bf16 product unit on `threads` threads, in
// GFLOP/s: AMX TDPBF16PS on the amx path, AVX512-BF16 VDPBF16PS on the
// avx512bf16 path; 0 for paths without one.
FA_API double measure_matrix_peak_gflops(Isa isa, int threads, double seconds);

// Streaming-read bandwidth in GB/s (1e9 bytes per second) of `threads`
// threads reading, each its own slice of one buffer of `bytes`, over and
// over for about `seconds` with `isa`'s loads: DRAM bandwidth when `bytes`
// is well beyond the last-level cache, the cache's when it fits.  The
// buffer comes from allocate_tensor_memory(..., huge_pages), so it can be
// measured on the pages the tensors it is compared with lie on.  0 when
// the buffer cannot be allocated or the path is not available.
FA_API double measure_read_bandwidth_gbps(Isa isa, int threads, std::size_t bytes, double seconds,
                                          bool huge_pages = false);

// Memory for a large tensor (a KV cache, say), 64-byte aligned; with
// huge_pages and at least 2 MiB, 2 MiB aligned and advised onto
// transparent huge pages (madvise), where a stream of K/V tiles takes far
// fewer TLB misses: GQA decoding over a 128 MiB cache took 0.82-0.92x the
// time on them on Zen 4 (docs/PERF.md).  Advice only: the kernel's policy
// (transparent_huge_pages()) may refuse it.  Free it with std::free; null
// when the memory could not be had.
FA_API void* allocate_tensor_memory(std::size_t bytes, bool huge_pages);
// The kernel's transparent-huge-page policy as it reads in sysfs: "always",
// "madvise" or "never"; empty where it cannot be read.
FA_API std::string transparent_huge_pages();

// The bandwidth of a streaming copy of `bytes` (half read, half written) on
// `threads` threads, in GB/s of bytes moved (read + written), the best of
// repeats over about `seconds`, alternating memcpy and a copy through
// non-temporal stores (which does not read the destination first): the
// yardstick of the element-wise operators (norms, RoPE, gated linear units),
// which read and write alike.  Its buffers come from allocate_tensor_memory
// (..., huge_pages), like the tensors it is compared with.
FA_API double measure_copy_bandwidth_gbps(int threads, std::size_t bytes, double seconds, bool huge_pages = false);

// True when a call of this dtype and head_dim on `isa` runs its products on
// the bf16 unit measure_matrix_peak_gflops measures: the amx path for bf16,
// and for fp16 split exactly into two bf16 pieces (three products each); the
// avx512bf16 path for bf16; on both, FP8 inputs (FA3) widened exactly to
// bf16; any head_dim (padded to the engines' 32-dim step; K/V tiles of
// at least 32 keys).  Query tiles of at most TilePlan::row_rows rows run on
// the row path whatever the path (on avx512bf16 with VDPBF16PS: the unit
// this measures).
FA_API bool uses_matrix_unit(Isa isa, DType dtype, std::int64_t head_dim);

// ------------------------------------------------------------- KV cache ---

// Appends new tokens' keys and values to a KV cache, as vLLM's
// reshape_and_cache does: token t of k_new and v_new ([1, kv_heads, tokens,
// head_dim], any layout) goes to slot slots[t] of k_cache and v_cache
// ([batch, kv_heads, seq, head_dim], any layout), row slots[t] % seq of
// batch entry slots[t] / seq.  A contiguous cache's slot is b * seq + the
// token's position; a paged pool ([1, kv_heads, kv_num_blocks * block_size,
// head_dim]) is its own batch of one, and a slot is block_table[b][pos /
// block_size] * block_size + pos % block_size.  A negative slot skips its
// token (padding); a slot named twice keeps the later token.  The caches'
// dtype is the new tokens', or for a quantized cache (see
// AttentionTensors::k_scale) int8 or FP8 with the new tokens in fp32, fp16
// or bf16, quantized as they are written: int8 rows scaled by their own
// absolute maximum / 127 (each (token, K/V head) row's scale written to
// `scales.k` / `scales.v`, the caches' scale views), rounded to nearest
// even; FP8 divided by the K/V head's descale factor (`scales.descale_k`
// and `descale_v`, counts 1 or kv_heads; null: 1), rounded to nearest even,
// e4m3 saturating at +-448.  Threads as in AttentionParams::threads.
struct KvCacheScales {
  TensorView k, v;  // int8 caches: fp32 [batch, kv_heads, seq, 1], like the caches
  const float* descale_k = nullptr;  // FP8 caches
  const float* descale_v = nullptr;
  std::int64_t descale_k_count = 0, descale_v_count = 0;
};
FA_API Status append_kv_cache(const TensorView& k_new, const TensorView& v_new, const std::int64_t* slots,
                              const TensorView& k_cache, const TensorView& v_cache, int threads = 0);
FA_API Status append_kv_cache(const TensorView& k_new, const TensorView& v_new, const std::int64_t* slots,
                              const TensorView& k_cache, const TensorView& v_cache, const KvCacheScales& scales,
                              int threads = 0);

// Float64 reference forward (straightforward softmax(QKᵀ)V with float64
// arithmetic).  `out` receives [batch, seq_q, num_heads, head_dim] (the BSH
// order) and `lse` (optional) [batch, num_heads, seq_q].  The output view in
// `tensors.o` is ignored.
FA_API Status reference_forward(const AttentionParams& params, const AttentionTensors& tensors,
                         double* out, double* lse);

// A straightforward attention computed *in* `compute` dtype, the yardstick of
// the accuracy rule and the guide's FP16 trap: inputs in the dtype, Q·Kᵀ
// accumulated in fp32 then rounded to the dtype, scaled, softmax in the dtype
// (each exp, sum and division rounded), P·V accumulated in fp32, output
// rounded.  With subtract_max = false the exponentials are taken of the raw
// scores, as a naive fp16 softmax does: scores above ln(65504) = 11.09
// overflow to Inf and the row turns into Inf/NaN (`--reference=naive-fp16`).
// `out` as in reference_forward.
FA_API Status same_dtype_attention(const AttentionParams& params, const AttentionTensors& tensors, DType compute,
                                   bool subtract_max, double* out);

// Tile sizes this build uses when AttentionParams leaves them 0 (kTileAuto
// when the build leaves the choice to the planner).
FA_API int default_tile_q();
FA_API int default_tile_kv();
// FA_ENABLE_ASYNC of this build: what an unset AttentionParams::async_prefetch means.
FA_API bool default_async_prefetch();
// FA_MIXED_PRECISION_SOFTMAX of this build: true = fp32 softmax for every
// dtype; false = fp16 inputs get an fp16-arithmetic softmax (amx path only).
FA_API bool mixed_precision_softmax();

// ------------------------------------------------------------ tile plan ---

struct TilePlan {
  int tile_q = 0, tile_kv = 0;
  std::size_t working_set_bytes = 0;  // per thread
  std::size_t limit_bytes = 0;        // per-core L2 budget of the target
  std::string target;                 // kernel path the plan is for
  std::string source;                 // "caller", "tuning cache" or "target table"
  int threads = 0;                    // threads the call uses (capped by FA_MAX_THREADS and the work items)
  std::int64_t work_items = 0;        // items: (batch, head, Q tile) for FA2, (batch, head,
                                      // pair of Q tiles) for FA3, (batch, head) for FA1; each
                                      // times the splits
  // How evenly the items fill the threads: total work / (threads x the
  // longest thread's work), from the scheduler's own order (longest first).
  double occupancy = 0.0;
  int num_splits = 1;                 // K/V chunks per (batch, head, Q tile); the
                                      // longest sequence's in a call with
                                      // per-sequence lengths (cu_seqlens, seqlens_kv)
  std::int64_t split_keys = 0;        // keys per chunk (a multiple of tile_kv)
  // Query heads one work item holds (1 = none).  Short queries (decoding,
  // at most row_rows rows) pack every head of a batch, so each K/V tile is read
  // once per GQA group instead of once per query head, and all K/V heads of
  // a token row together; beyond 1024 rows an item, one GQA group.
  int pack_gqa = 1;
  // Whether the packed heads' rows run the tile path rather than the row
  // path: queries of row_rows + 1 to 32 rows in GQA groups (speculative
  // decoding, the tail of chunked prefill), and shorter ones where the bf16
  // pair engines (avx512bf16, amx) run the call and a group holds at least 8
  // rows (on avx512bf16: more than 24; on amx with bf16 K/V
  // or an FP8 cache, head_dim a multiple of 32, 2 rows; fp16 more than 8).
  // A tile then holds the rows of one K/V head's whole group, head after
  // head: tile_q rows in all, q_step of each head (tile_q / the group;
  // without packing q_step = tile_q).  Where the amx path reads K/V rows
  // with the K/V heads side by side in a token row, an item holds the
  // groups of every K/V head of a batch entry (pack_gqa: all the heads), a
  // tile each, walked together.
  bool pack_tile = false;
  int q_step = 0;
  // The most rows a Q tile may have to run the row path (decoding and short
  // queries: keys in the vector lanes, not query rows): 4, or 24 where the
  // row path's products are VDPBF16PS pair dot products (bf16 Q, K and V on
  // the avx512bf16 path, head_dim a multiple of 32, or bf16 Q over an FP8
  // cache; 8 for fp16 Q over one), which cost about half of the FMA row
  // path's, so a head's 5 to 24 rows no longer take a 16- or 32-row tile
  // whose per-tile packing few rows share.  8 for fp16 with no group on 16 lanes.
  int row_rows = 4;
};

// Resolves the tiles, threads, splits and work items `version`'s forward
// would use and checks them against the target's resources.  A plan that
// does not fit returns InvalidArgument with "Error: Resource usage exceeds
// device limit." and the usage, the limit and a tile that fits; what the
// version does not offer returns version_supports' status.
FA_API Status plan(Version version, const AttentionParams& params, DType dtype, TilePlan* plan);
// The plan of a call whose K/V are stored in `kv_dtype` (a quantized cache:
// int8 or FP8 with 16-bit Q; else dtype), which decides how decoding packs
// its query heads: on the bf16 pair engines, a GQA group of 8 or more query
// rows takes the packed tile, which a quantized cache (read on the row
// path) does not; and on the avx512bf16 path an FP8 cache keeps up to 8
// query rows a head on the row path (TilePlan::row_rows), whose products
// are pair dot products there.
FA_API Status plan(Version version, const AttentionParams& params, DType dtype, DType kv_dtype, TilePlan* plan);
// plan(Version::kFA2, ...).
FA_API Status fa2_plan(const AttentionParams& params, DType dtype, TilePlan* plan);

// Per-core L2 of this CPU (sysfs), or 0 when it cannot be read.
FA_API std::size_t cpu_l2_bytes();
// The last-level cache of this CPU (the highest level sysfs lists, shared by
// its cores), or 0 when it cannot be read.
FA_API std::size_t cpu_last_level_cache_bytes();
// The part of it the element-wise operators (the norms, RoPE, GLU) count on
// keeping their data in, the size past which their outputs stream: at most
// 8 MiB for each CPU sharing it, as a virtual machine may list its host's
// whole L3 (common/elementwise_paths.h).
FA_API std::size_t cpu_cache_share_bytes();

// ---------------------------------------------------------- tuning cache ---

// Where the tuning cache lives: $FA_TUNING_CACHE, else
// $XDG_CACHE_HOME/flash_attention/tuning_cache.txt, else
// ~/.cache/flash_attention/tuning_cache.txt.
FA_API std::string tuning_cache_path();

// Records the best tiles `version` measured for the shape class of `params`
// on `isa` (the file is rewritten atomically; later lookups in this process
// see it).
FA_API Status tuning_cache_store(Version version, const AttentionParams& params, DType dtype, Isa isa, int tile_q,
                                 int tile_kv, double tflops);

// The cached tiles of `version` for the shape class, if any.
FA_API bool tuning_cache_lookup(Version version, const AttentionParams& params, DType dtype, Isa isa, int* tile_q,
                                int* tile_kv);

}  // namespace fa
