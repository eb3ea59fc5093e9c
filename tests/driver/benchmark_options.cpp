// The <version>_benchmark command line: its flags, and their reading into
// BenchmarkOptions with every bad value refused as one UsageError line (exit 2).
// Apart from the program so the fuzzing harnesses (tests/fuzz/) drive the
// same code.
#include "benchmark_options.h"

#include "host_tensor.h"
#include "trace.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>

namespace fa::cli {

std::vector<FlagSpec> benchmark_flags() {
  using K = FlagKind;
  return {
      {"input-q", K::kString, "PATH", "Q input file, raw dtype values in --layout (default: random)"},
      {"input-k", K::kString, "PATH", "K input file (given together with --input-q and --input-v)"},
      {"input-v", K::kString, "PATH", "V input file"},
      {"causal-mask", K::kString, "PATH", "int8 mask file [seq_q, seq_kv], non-zero = may attend"},
      {"batch-size", K::kInt, "N", "batch size (default 2)"},
      {"seq-q", K::kInt, "N", "query sequence length (default 512)"},
      {"seq-kv", K::kInt, "N", "key/value sequence length (default: --seq-q)"},
      {"num-heads", K::kInt, "N", "query heads (default 12)"},
      {"num-kv-heads", K::kInt, "N", "key/value heads for GQA/MQA, divides --num-heads (default: --num-heads)"},
      {"head-dim", K::kInt, "N", "head dimension, a multiple of 8 up to 256 (default 64)"},
      {"dtype", K::kString, "fp16|bf16|fp32|fp8_e4m3|fp8_e5m2", "data type of Q, K, V (and O but for FP8; default fp16; FP8: FA3)"},
      {"kv-dtype", K::kString, "int8|fp8_e4m3|fp8_e5m2",
       "a quantized K/V cache read with fp16 or bf16 Q (FA2, FA3): K and V drawn (or read) in --dtype, then quantized, "
       "int8 with a scale per token and K/V head, FP8 with a factor per K/V head"},
      {"out-dtype", K::kString, "bf16|fp16|fp32", "FP8 inputs: the dtype of O (default bf16)"},
      {"descale-q", K::kString, "X|X1,X2,...", "FP8 inputs: Q's dequantization factor, or one per head (default 1)"},
      {"descale-k", K::kString, "X|X1,X2,...", "FP8 inputs: K's factor, or one per K/V head (default 1)"},
      {"descale-v", K::kString, "X|X1,X2,...", "FP8 inputs: V's factor, or one per K/V head (default 1)"},
      {"layout", K::kString, "BSH|BSND|BNSD|TND", "memory layout of the inputs (default BSH; TND needs --cu-seqlens-*)"},
      {"cu-seqlens-q", K::kString, "0,N1,N2,...", "TND: cumulative query lengths (sets --batch-size and --seq-q)"},
      {"cu-seqlens-kv", K::kString, "0,M1,M2,...", "TND: cumulative key lengths (sets --seq-kv)"},
      {"seqlens-kv", K::kString, "M1,M2,...",
       "keys of each sequence of a KV cache (continuous batching: sets --batch-size, and --seq-kv to the longest unless given)"},
      {"append", K::kBool, "",
       "also time append_kv_cache writing the call's new tokens (seq_q per sequence) into the cache (not with TND)"},
      {"paged", K::kBool, "", "K/V in a paged cache: blocks of --block-size tokens in a random order, found through a block table"},
      {"block-size", K::kInt, "N", "--paged: tokens per block, a power of two from 16 to 512 (default 128)"},
      {"causal", K::kBool, "", "causal mask aligned bottom-right, no mask file needed (= --sparse-mode=3)"},
      {"sparse-mode", K::kInt, "0-4", "0 mask+band (top-left), 1 all, 2 causal top-left, 3 causal bottom-right, 4 band"},
      {"pre-tokens", K::kInt, "N", "band: keys allowed before the aligned diagonal (modes 0 and 4; default unbounded)"},
      {"next-tokens", K::kInt, "N", "band: keys allowed after the aligned diagonal (modes 0 and 4; default unbounded)"},
      {"sinks", K::kString, "X|X1,X2,...", "attention-sink logit for every head, or one per head"},
      {"softcap", K::kFloat, "X", "logit soft-capping: s = X * tanh(s / X) (default off)"},
      {"alibi", K::kBool, "", "ALiBi with the standard slopes 2^(-8 (h + 1) / heads)"},
      {"keep-prob", K::kFloat, "P", "attention dropout: keep each probability with P in (0, 1] (default 1 = off)"},
      {"dropout-seed", K::kInt, "N", "seed of the dropout pattern (default 0)"},
      {"bias", K::kString, "PATH", "additive fp32 bias [1 or heads, seq_q, seq_kv] (heads from the file size)"},
      {"scale", K::kFloat, "X", "softmax scale (default 1/sqrt(head_dim))"},
      {"num-runs", K::kInt, "N", "timed runs; the median is reported (default 10)"},
      {"warmup-runs", K::kInt, "N", "untimed runs before timing (default 2)"},
      {"tile-q", K::kString, "N|auto", "Q tile rows, a power of two from 16 to 512, or auto (default: FA_TILE_Q)"},
      {"tile-kv", K::kString, "N|auto", "K/V tile rows, a power of two from 16 to 512, or auto (default: FA_TILE_KV)"},
      {"threads", K::kInt, "N", "threads (default: every core this process may use, capped by FA_MAX_THREADS)"},
      {"async", K::kBool, "", "prefetch the next K/V tile while computing the current one (FA2, FA3; default: FA_ENABLE_ASYNC)"},
      {"no-async", K::kBool, "", "no next-tile prefetch, whatever FA_ENABLE_ASYNC says"},
      {"num-splits", K::kString, "N|auto", "split-KV chunks: 1 = unsplit, N, or auto (default: auto with FA_SPLIT_ENABLE=ON or short queries: at most 4 query rows, 24 for bf16 on avx512bf16 with head_dim a multiple of 32; else 1)"},
      {"seed", K::kInt, "N", "seed of the random inputs used when no input files are given (default 1)"},
      {"isa", K::kString, "generic|avx2|avx512|avx512bf16|amx", "kernel path (default: FA_ISA, else the fastest this CPU runs)"},
      {"no-probe", K::kBool, "", "skip the start-up measurements of the unit's peak and the memory bandwidth (no Utilization or Bandwidth line)"},
      {"huge-pages", K::kBool, "", "put Q, K, V, O and the bandwidth probe's buffer on transparent huge pages (madvise; a long K/V cache's tiles then take far fewer TLB misses)"},
      {"output", K::kString, "PATH", "write O as [batch, seq_q, heads*head_dim] in --dtype (FP8: --out-dtype)"},
      {"output-lse", K::kString, "PATH", "write the forward's log-sum-exp, fp32 [batch, heads, seq_q] (natural log of the scaled scores)"},
      {"backward", K::kBool, "", "also time the backward pass (FA2: dQ, dK, dV; FLOPs counted as 2.5x the forward's)"},
      {"input-do", K::kString, "PATH", "with --backward: dO in --dtype and --layout, like Q (default: random)"},
      {"output-dq", K::kString, "PATH", "with --backward: write dQ in --dtype, in Q's --layout"},
      {"output-dk", K::kString, "PATH", "with --backward: write dK in --dtype, in K's --layout"},
      {"output-dv", K::kString, "PATH", "with --backward: write dV in --dtype, in V's --layout"},
      {"check", K::kBool, "", "compare O (and with --backward dQ, dK, dV) with the float64 reference; exit 1 when out of tolerance"},
      {"sweep", K::kBool, "", "time every tile of --sweep-tiles, print each and the best, store the best in the tuning cache"},
      {"sweep-tiles", K::kString, "QxKV,...", "tiles for --sweep (default: the guide's grid, Q 64/128/256 x KV 32/64/128)"},
      {"no-cache-update", K::kBool, "", "with --sweep: do not write the tuning cache"},
      {"reference", K::kString, "float64|naive-fp16|same-dtype",
       "with --check: also run a naive fp16 softmax (the guide's FP16 trap) or a same-dtype attention beside ours"},
      {"json", K::kBool, "", "print one JSON object instead of text lines"},
      {"profile", K::kString, "DIR", "write DIR/<binary>_trace.json: the timed calls as a Chrome trace (work items per thread, their stages, memory)"},
      {"config", K::kString, "PATH", "settings from a JSON (.json) or YAML (.yaml) file, e.g. configs/long_sequence_config.json; flags on the command line win"},
      {"json-file", K::kString, "PATH", "also write the results as one JSON object to PATH (atomically; the text lines still print)"},
      {"help", K::kBool, "", "print this help"},
  };
}


bool is_tile(std::int64_t t) { return t >= 16 && t <= 512 && (t & (t - 1)) == 0; }

// "64x32,128x64" -> {(64, 32), (128, 64)}.
std::vector<std::pair<int, int>> parse_tile_list(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const std::size_t x = item.find('x');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const long q = x == std::string::npos ? 0 : std::strtol(item.c_str(), &end1, 10);
    const long kv = x == std::string::npos ? 0 : std::strtol(item.c_str() + x + 1, &end2, 10);
    if (x == std::string::npos || end1 != item.c_str() + x || *end2 != '\0' || !is_tile(q) || !is_tile(kv)) {
      throw UsageError("--sweep-tiles: '" + item + "' is not QxKV with powers of two from 16 to 512 (e.g. 128x64)");
    }
    out.emplace_back(static_cast<int>(q), static_cast<int>(kv));
    pos = comma + 1;
  }
  return out;
}

namespace {

// "X" or "X1,X2,..." as floats, each accepted by `ok`; else one line naming
// --flag, the item and `expected`.
template <class Ok>
std::vector<float> parse_float_list(const std::string& text, const char* flag, const char* expected, Ok&& ok) {
  std::vector<float> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !ok(v)) throw UsageError(std::string("--") + flag + ": '" + item + "' is not " + expected);
    out.push_back(static_cast<float>(v));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

BenchmarkOptions read_benchmark_options(const Args& a) {
  BenchmarkOptions o;
  constexpr std::int64_t kBig = std::int64_t{1} << 31;
  fa::AttentionParams& p = o.params;
  p.batch = a.integer("batch-size", 2, 1, kBig);
  p.seq_q = a.integer("seq-q", 512, 1, kBig);
  p.seq_kv = a.integer("seq-kv", p.seq_q, 1, kBig);
  p.num_heads = a.integer("num-heads", 12, 1, 65536);
  p.num_kv_heads = a.integer("num-kv-heads", p.num_heads, 1, 65536);
  p.head_dim = a.integer("head-dim", 64, 1, 1 << 20);
  if (p.head_dim % 8 != 0 || p.head_dim > fa::kMaxHeadDim) {
    throw UsageError("--head-dim: " + std::to_string(p.head_dim) + " is not valid (expected a multiple of 8 from 8 to " +
                     std::to_string(fa::kMaxHeadDim) + ")");
  }
  if (p.num_heads % p.num_kv_heads != 0) {
    throw UsageError("--num-kv-heads: " + std::to_string(p.num_kv_heads) + " does not divide --num-heads=" +
                     std::to_string(p.num_heads) + " (expected a divisor of the query heads)");
  }
  const std::string dtype = a.str("dtype", "fp16");
  auto dt = fa::parse_dtype(dtype);
  if (!dt || *dt == fa::DType::kI8) {
    throw UsageError("--dtype: " + (dt ? "int8 is a K/V cache dtype (--kv-dtype=int8 with --dtype=fp16 or bf16)"
                                       : "unknown dtype '" + dtype + "'") +
                     " (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)");
  }
  o.dtype = o.out_dtype = *dt;
  if (a.has("kv-dtype")) {
    const std::string kv = a.str("kv-dtype");
    auto kvt = fa::parse_dtype(kv);
    if (!kvt || !fa::is_quantized_kv(*kvt)) {
      throw UsageError("--kv-dtype: '" + kv + "' is not a quantized cache dtype (expected int8, fp8_e4m3 or fp8_e5m2)");
    }
    if (o.dtype != fa::DType::kF16 && o.dtype != fa::DType::kBF16) {
      throw UsageError("--kv-dtype: a quantized cache is read with --dtype=fp16 or bf16 (got " +
                       std::string(fa::dtype_name(o.dtype)) + ")");
    }
    o.kv_dtype = *kvt;
  }
  if (fa::is_fp8(o.dtype)) {
    const std::string out = a.str("out-dtype", "bf16");
    auto odt = fa::parse_dtype(out);
    if (!odt || fa::is_fp8(*odt)) throw UsageError("--out-dtype: '" + out + "' is not an output dtype (expected bf16, fp16 or fp32)");
    o.out_dtype = *odt;
  }
  for (auto [i, flag, heads] : {std::tuple{0, "descale-q", p.num_heads}, std::tuple{1, "descale-k", p.num_kv_heads},
                                std::tuple{2, "descale-v", p.num_kv_heads}}) {
    if (!a.has(flag)) continue;
    if (!fa::is_fp8(o.dtype)) {
      throw UsageError(std::string("--") + flag + ": applies to FP8 inputs only (--dtype=fp8_e4m3 or fp8_e5m2; an FP8 "
                       "cache of --kv-dtype takes one factor per K/V head from its own values)");
    }
    o.descale[i] = parse_float_list(a.str(flag), flag, "a finite positive factor (X, or X1,X2,... one per head)",
                                    [](double v) { return std::isfinite(v) && v > 0.0 && v < 3.0e38; });
    if (o.descale[i].size() != 1 && static_cast<std::int64_t>(o.descale[i].size()) != heads) {
      throw UsageError(std::string("--") + flag + ": " + std::to_string(o.descale[i].size()) + " values for " +
                       std::to_string(heads) + " heads (expected one, or one per head)");
    }
  }
  if (a.has("out-dtype") && !fa::is_fp8(o.dtype)) {
    throw UsageError("--out-dtype: applies to FP8 inputs only (O is in --dtype otherwise)");
  }
  const std::string layout = a.str("layout", "BSH");
  auto lt = fa::parse_layout(layout);
  if (!lt) throw UsageError("--layout: unknown layout '" + layout + "' (expected BSH, BSND or BNSD)");
  o.layout = *lt;
  p.kv_heads_side_by_side = o.layout != fa::Layout::kBNSD;  // the plan it prints is the forward's
  if (o.layout == fa::Layout::kTND || a.has("cu-seqlens-q") || a.has("cu-seqlens-kv")) {
    if (o.layout != fa::Layout::kTND || !a.has("cu-seqlens-q") || !a.has("cu-seqlens-kv")) {
      throw UsageError("--layout=TND, --cu-seqlens-q and --cu-seqlens-kv go together");
    }
    for (const char* flag : {"batch-size", "seq-q", "seq-kv"}) {  // what the lists set: one source, not two
      if (a.has(flag)) {
        throw UsageError(std::string("--") + flag + ": set by --cu-seqlens-q/--cu-seqlens-kv with --layout=TND (give one)");
      }
    }
    for (auto [flag, list] : {std::pair{"cu-seqlens-q", &o.cu_q}, std::pair{"cu-seqlens-kv", &o.cu_kv}}) {
      *list = parse_count_list(a.str(flag), flag, "a non-decreasing list of token counts starting at 0 (e.g. 0,100,250)",
                               [](long v, const std::vector<std::int32_t>& before) {
                                 return before.empty() ? v == 0 : v >= before.back();
                               });
    }
    if (o.cu_q.size() != o.cu_kv.size() || o.cu_q.size() < 2) {
      throw UsageError("--cu-seqlens-q and --cu-seqlens-kv must list the same number (>= 1) of sequences");
    }
    p.batch = static_cast<std::int64_t>(o.cu_q.size()) - 1;
    p.seq_q = o.cu_q.back();
    p.seq_kv = o.cu_kv.back();
    if (p.seq_q == 0 || p.seq_kv == 0) throw UsageError("--cu-seqlens-*: the totals must be positive");
  }
  if (a.has("seqlens-kv")) {
    if (o.layout == fa::Layout::kTND) {
      throw UsageError("--seqlens-kv: not with --layout=TND (give the key counts in --cu-seqlens-kv)");
    }
    if (a.has("batch-size")) throw UsageError("--batch-size: set by --seqlens-kv (give one)");
    o.seqlens_kv = parse_count_list(a.str("seqlens-kv"), "seqlens-kv", "a list of key counts (e.g. 100,4096,32768)",
                                    [](long, const std::vector<std::int32_t>&) { return true; });
    const std::int64_t longest = *std::max_element(o.seqlens_kv.begin(), o.seqlens_kv.end());
    p.batch = static_cast<std::int64_t>(o.seqlens_kv.size());
    if (!a.has("seq-kv")) {
      if (longest == 0) throw UsageError("--seqlens-kv: every sequence is empty (give --seq-kv for the cache's size)");
      p.seq_kv = longest;
    } else if (longest > p.seq_kv) {
      throw UsageError("--seqlens-kv: " + std::to_string(longest) + " keys do not fit the cache's --seq-kv=" +
                       std::to_string(p.seq_kv));
    }
  }
  o.append = a.flag("append");
  if (o.append && o.layout == fa::Layout::kTND) {
    throw UsageError("--append: not with --layout=TND (append_kv_cache writes a cache of [batch, kv_heads, seq, head_dim])");
  }
  o.paged = a.flag("paged");
  if (a.has("block-size") && !o.paged) throw UsageError("--block-size: applies to --paged only");
  o.block_size = static_cast<int>(a.integer("block-size", 128, 16, 512));
  if ((o.block_size & (o.block_size - 1)) != 0) {
    throw UsageError("--block-size: " + std::to_string(o.block_size) + " is not a power of two (expected 16, 32, ... 512)");
  }
  if (o.paged && o.layout == fa::Layout::kTND) {
    throw UsageError("--paged: not with --layout=TND (a paged cache holds every sequence at seq_kv keys)");
  }
  p.causal = a.flag("causal");
  if (a.has("sparse-mode")) {
    p.sparse_mode = static_cast<fa::SparseMode>(a.integer("sparse-mode", 1, 0, 4));
    if (p.causal && *p.sparse_mode != fa::SparseMode::kCausalBottomRight) {
      throw UsageError("--causal and --sparse-mode=" + std::to_string(static_cast<int>(*p.sparse_mode)) +
                       " disagree (--causal is --sparse-mode=3)");
    }
    p.causal = false;
  }
  p.pre_tokens = a.integer("pre-tokens", fa::kUnboundedTokens, 0, fa::kUnboundedTokens);
  p.next_tokens = a.integer("next-tokens", fa::kUnboundedTokens, 0, fa::kUnboundedTokens);
  // The band's sizes mean something in modes 0 and 4 only: elsewhere they
  // would do nothing, so they are refused rather than ignored.
  const bool band = p.sparse_mode && (*p.sparse_mode == fa::SparseMode::kMaskAndBand || *p.sparse_mode == fa::SparseMode::kBand);
  for (const char* flag : {"pre-tokens", "next-tokens"}) {
    if (a.has(flag) && !band) {
      throw UsageError(std::string("--") + flag + ": applies to --sparse-mode=0 or 4 (the band), not to " +
                       (p.sparse_mode ? "--sparse-mode=" + std::to_string(static_cast<int>(*p.sparse_mode))
                                      : std::string(p.causal ? "--causal" : "a call without a sparse mode")));
    }
  }
  if (a.has("softcap")) {
    const double cap = a.real("softcap", 0.0);
    if (!(cap > 0.0) || cap > 1e30) throw UsageError("--softcap: expected a positive finite number");
    p.softcap = static_cast<float>(cap);
  }
  if (a.has("keep-prob")) {
    const double keep = a.real("keep-prob", 1.0);
    if (!(keep > 0.0 && keep <= 1.0)) throw UsageError("--keep-prob: " + a.str("keep-prob") + " is not in (0, 1]");
    p.keep_prob = static_cast<float>(keep);
  }
  p.dropout_seed = static_cast<std::uint64_t>(a.integer("dropout-seed", 0, 0, std::numeric_limits<std::int64_t>::max()));
  if (a.flag("alibi")) {
    for (std::int64_t h = 0; h < p.num_heads; ++h) o.alibi.push_back(std::exp2(-8.0f * float(h + 1) / float(p.num_heads)));
  }
  o.bias_path = a.str("bias");
  if (a.has("sinks")) {
    o.sinks = parse_float_list(a.str("sinks"), "sinks", "a finite number (expected X or X1,X2,... one per head)",
                               [](double v) { return std::isfinite(v) && std::abs(v) < 3.0e38; });
    if (o.sinks.size() == 1) o.sinks.assign(static_cast<std::size_t>(p.num_heads), o.sinks[0]);
    if (static_cast<std::int64_t>(o.sinks.size()) != p.num_heads) {
      throw UsageError("--sinks: " + std::to_string(o.sinks.size()) + " values for " + std::to_string(p.num_heads) +
                       " heads (expected one, or one per head)");
    }
  }
  if (a.has("scale")) {
    const double s = a.real("scale", 0.0);
    if (!(s > 0.0) || s > 3.0e38) throw UsageError("--scale: expected a positive finite number");
    p.scale = static_cast<float>(s);
  }
  o.num_runs = static_cast<int>(a.integer("num-runs", 10, 1, 1000000));
  o.warmup_runs = static_cast<int>(a.integer("warmup-runs", 2, 0, 1000000));
  for (const char* flag : {"tile-q", "tile-kv"}) {
    if (!a.has(flag)) continue;
    if (a.str(flag) == "auto") {
      (std::string(flag) == "tile-q" ? p.tile_q : p.tile_kv) = fa::kTileAuto;
      continue;
    }
    const std::int64_t t = a.integer(flag, 0, 0, 1 << 20);
    if (t < 16 || t > 512 || (t & (t - 1)) != 0) {
      throw UsageError(std::string("--") + flag + ": " + std::to_string(t) +
                       " is not a valid tile (expected a power of two from 16 to 512, or auto)");
    }
    (std::string(flag) == "tile-q" ? p.tile_q : p.tile_kv) = static_cast<int>(t);
  }
  p.threads = static_cast<int>(a.integer("threads", 0, 1, fa::kMaxThreads));
  if (a.has("num-splits")) {
    p.num_splits = a.str("num-splits") == "auto" ? fa::kSplitsAuto
                                                 : static_cast<int>(a.integer("num-splits", 1, 1, fa::kMaxSplits));
  }
  if (a.flag("async") && a.flag("no-async")) throw UsageError("--async and --no-async disagree (give one)");
  if (a.flag("async")) p.async_prefetch = true;
  if (a.flag("no-async")) p.async_prefetch = false;
  o.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, std::numeric_limits<std::int64_t>::max()));
  o.input_q = a.str("input-q");
  o.input_k = a.str("input-k");
  o.input_v = a.str("input-v");
  const int given = !o.input_q.empty() + !o.input_k.empty() + !o.input_v.empty();
  if (given != 0 && given != 3) {
    throw UsageError("--input-q, --input-k and --input-v must be given together (got " + std::to_string(given) +
                     " of 3)");
  }
  o.mask_path = a.str("causal-mask");
  o.output = a.str("output");
  if (!o.output.empty()) check_destination(o.output, "output");
  o.output_lse = a.str("output-lse");
  if (!o.output_lse.empty()) check_destination(o.output_lse, "output-lse");
  o.backward = a.flag("backward");
  o.input_do = a.str("input-do");
  o.output_dq = a.str("output-dq");
  o.output_dk = a.str("output-dk");
  o.output_dv = a.str("output-dv");
  for (auto [flag, path] : {std::pair<const char*, const std::string*>{"input-do", &o.input_do}, {"output-dq", &o.output_dq},
                            {"output-dk", &o.output_dk}, {"output-dv", &o.output_dv}}) {
    if (path->empty()) continue;
    if (!o.backward) throw UsageError(std::string("--") + flag + ": applies to --backward only");
    if (flag[0] == 'o') check_destination(*path, flag);
  }
  if (o.backward) {
    // The backward pass is a training call: no inference cache layouts.
    for (auto [flag, given] : {std::pair<const char*, bool>{"kv-dtype", o.kv_dtype.has_value()}, {"paged", o.paged},
                               {"seqlens-kv", !o.seqlens_kv.empty()}, {"append", o.append}, {"sweep", a.flag("sweep")}}) {
      if (given) {
        throw UsageError(std::string("--backward: not with --") + flag +
                         (std::string(flag) == "sweep" ? " (the sweep times the forward's tiles)"
                                                       : " (a KV-cache feature of inference; train on contiguous or TND tensors)"));
      }
    }
    if (fa::is_fp8(o.dtype)) {
      throw UsageError("--backward: --dtype=" + std::string(fa::dtype_name(o.dtype)) +
                       " has no backward pass (expected fp16, bf16 or fp32)");
    }
  }
  if (a.has("isa")) {
    auto isa = fa::parse_isa(a.str("isa"));
    if (!isa) throw UsageError("--isa: unknown kernel path '" + a.str("isa") + "' (expected generic, avx2, avx512, avx512bf16 or amx)");
    p.isa = *isa;
  }
  o.probe = !a.flag("no-probe");
  o.huge_pages = a.flag("huge-pages");
  o.sweep = a.flag("sweep");
  o.cache_update = !a.flag("no-cache-update");
  o.sweep_tiles = parse_tile_list(a.str("sweep-tiles", "64x32,64x64,64x128,128x32,128x64,128x128,256x32,256x64,256x128"));
  o.check = a.flag("check");
  o.reference = a.str("reference", "float64");
  if (o.reference != "float64" && o.reference != "naive-fp16" && o.reference != "same-dtype") {
    throw UsageError("--reference: unknown reference '" + o.reference + "' (expected float64, naive-fp16 or same-dtype)");
  }
  if (o.reference != "float64") o.check = true;
  o.json = a.flag("json");
  o.json_file = a.str("json-file");
  if (!o.json_file.empty()) check_destination(o.json_file, "json-file");
  o.profile_dir = a.str("profile");
  if (!o.profile_dir.empty()) {
    if (o.sweep) throw UsageError("--profile: not with --sweep (it profiles one configuration's timed calls)");
    check_profile_dir(o.profile_dir);
  }
  if (!o.json_file.empty() && o.sweep) {
    throw UsageError("--json-file: not with --sweep (its --json prints a JSON line per tile)");
  }
  return o;
}


void bind_pointers(BenchmarkOptions& o) {
  fa::AttentionParams& p = o.params;
  if (!o.sinks.empty()) p.sinks = o.sinks.data();
  if (!o.alibi.empty()) p.alibi_slopes = o.alibi.data();
  for (auto [list, values, count] : {std::tuple{&o.descale[0], &p.descale_q, &p.descale_q_count},
                                     std::tuple{&o.descale[1], &p.descale_k, &p.descale_k_count},
                                     std::tuple{&o.descale[2], &p.descale_v, &p.descale_v_count}}) {
    if (list->empty()) continue;
    *values = list->data();
    *count = static_cast<std::int64_t>(list->size());
  }
  if (!o.cu_q.empty()) {
    p.cu_seqlens_q = o.cu_q.data();
    p.cu_seqlens_kv = o.cu_kv.data();
  }
  if (!o.seqlens_kv.empty()) p.seqlens_kv = o.seqlens_kv.data();
}

}  // namespace fa::cli
