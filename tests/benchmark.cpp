// <version>_benchmark: runs the forward pass on the guide's command line,
// times it, and prints the lines the guide's scripts parse:
//   Latency: <median ms> ms / Throughput: <x> TFLOPS / Peak Memory: <MB> MB
//   (and with --check) Max Abs Error: <e>
// With --backward (FA2), the backward pass too: Backward Latency / Backward
// Throughput.
// Exit status: 0 success, 1 --check failed, 2 bad input.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <new>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "../flash_attention/common/dtype_convert.h"
#include "driver/benchmark_config.h"
#include "driver/benchmark_options.h"
#include "driver/cli_args.h"
#include "driver/host_tensor.h"
#include "driver/paged_cache.h"
#include "driver/quantized_cache.h"
#include "driver/report.h"
#include "driver/trace.h"
#include "driver/version_entry.h"

namespace {

using fa::cli::Args;
using fa::cli::BenchmarkOptions;
using fa::cli::Json;
using fa::cli::median_of;
using fa::cli::UsageError;

const char* unit_name(fa::Isa isa, bool matrix) {
  if (matrix) return isa == fa::Isa::kAmx ? "AMX TDPBF16PS" : "AVX512-BF16 VDPBF16PS";
  switch (isa) {
    case fa::Isa::kGeneric: return "SSE2 mul+add";
    case fa::Isa::kAvx2: return "AVX2 FMA";
    case fa::Isa::kAvx512:
    case fa::Isa::kAvx512Bf16:
    case fa::Isa::kAmx: return "AVX-512 FMA";
  }
  return "?";
}

// The kernel's short name (the JSON record's "kernel"): the path, amx-bf16
// when the amx path runs the products on its tiles.
std::string kernel_id(fa::Isa isa, bool matrix) {
  return isa == fa::Isa::kAmx && matrix ? "amx-bf16" : std::string(fa::isa_name(isa));
}

// The Kernel line: the path, and on the paths with a bf16 engine (amx,
// avx512bf16) which units the products and the softmax use; for an int8
// cache on the AVX-512 paths, the row path's integer products; for an FP8
// cache on the bf16 engines' paths, the row path's pair products on the
// cache widened to bf16.
std::string kernel_name(fa::Isa isa, bool matrix, fa::DType dtype, std::optional<fa::DType> kv_dtype) {
  const bool avx512 = isa == fa::Isa::kAvx512 || isa == fa::Isa::kAvx512Bf16 || isa == fa::Isa::kAmx;
  if (kv_dtype == fa::DType::kI8 && avx512 && !matrix) {
    return std::string(fa::isa_name(isa)) + (isa == fa::Isa::kAvx512 ? " (int8 cache: decoding's products as VPMADDWD on int16"
                                                                     : " (int8 cache: decoding's products as VPDPWSSD on int16") +
           " Q and P; longer queries on AVX-512 FMA)";
  }
  if (isa != fa::Isa::kAmx && isa != fa::Isa::kAvx512Bf16) return std::string(fa::isa_name(isa));
  std::vector<std::string> notes;
  if (kv_dtype && isa == fa::Isa::kAmx && matrix) {
    notes.push_back(std::string(fa::dtype_name(*kv_dtype)) +
                    " cache: the GQA group's products on the AMX tiles, each K/V tile widened to bf16 rows by byte tables" +
                    (*kv_dtype == fa::DType::kI8 ? ", its per-key scales on the scores and P" : ""));
  } else if (kv_dtype) {
    notes.push_back(std::string(fa::dtype_name(*kv_dtype)) +
                    " cache: decoding's products as VDPBF16PS on K and V widened to bf16 by byte tables" +
                    (dtype == fa::DType::kF16 ? ", fp16 Q and P as two bf16s each" : "") +
                    "; longer queries on AVX-512 FMA");
  } else if (!matrix) {
    if (dtype == fa::DType::kBF16 || (isa == fa::Isa::kAmx && dtype == fa::DType::kF16)) {
      notes.push_back("products on AVX-512 FMA: the pair path needs head_dim a multiple of 32");
    } else {
      notes.push_back(std::string(fa::dtype_name(dtype)) + " products on AVX-512 FMA");
    }
  } else if (isa == fa::Isa::kAvx512Bf16) {
    notes.push_back("bf16 products with VDPBF16PS");
  } else if (dtype == fa::DType::kF16) {
    notes.push_back("fp16 as two exact bf16 pieces, three products each");
  }
  if (isa == fa::Isa::kAmx && dtype == fa::DType::kF16 && !fa::mixed_precision_softmax()) {
    notes.push_back("fp16 softmax on AVX512-FP16");
  }
  std::string name = kernel_id(isa, matrix);
  for (std::size_t i = 0; i < notes.size(); ++i) name += (i ? "; " : " (") + notes[i];
  return notes.empty() ? name : name + ")";
}

// True when `mask` is exactly the bottom-right causal pattern: then the
// kernel can run in causal mode and skip the tiles above the diagonal.
bool is_causal_pattern(const std::int8_t* mask, std::int64_t sq, std::int64_t skv) {
  for (std::int64_t i = 0; i < sq; ++i) {
    const std::int64_t end = std::clamp<std::int64_t>(i + skv - sq + 1, 0, skv);
    for (std::int64_t j = 0; j < skv; ++j) {
      if ((mask[i * skv + j] != 0) != (j < end)) return false;
    }
  }
  return true;
}

std::string shape_text(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, fa::DType dt,
                       fa::Layout layout) {
  return "[batch=" + std::to_string(b) + ", seq=" + std::to_string(s) + ", heads=" + std::to_string(h) +
         ", head_dim=" + std::to_string(d) + "] " + std::string(fa::dtype_name(dt)) + " in " +
         std::string(fa::layout_name(layout));
}

// --seqlens-kv in the Config line: "[16 sequences, 100 ... 32768 keys, 211300 in all]".
std::string seqlens_text(const std::vector<std::int32_t>& lens) {
  const auto [lo, hi] = std::minmax_element(lens.begin(), lens.end());
  const std::int64_t sum = std::accumulate(lens.begin(), lens.end(), std::int64_t{0});
  return "[" + std::to_string(lens.size()) + " sequences, " + std::to_string(*lo) + " ... " + std::to_string(*hi) +
         " keys, " + std::to_string(sum) + " in all]";
}

struct ErrorStats {
  double max_abs = 0.0, rel_l2 = 0.0;
  std::int64_t inf = 0, nan = 0;
};

// Errors of `got(i)` against the float64 reference; Inf and NaN are counted,
// not folded into the error.
template <class Got>
ErrorStats compare(const std::vector<double>& ref, Got&& got) {
  ErrorStats e;
  double err2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got(i);
    if (std::isnan(g)) {
      ++e.nan;
      continue;
    }
    if (std::isinf(g)) {
      ++e.inf;
      continue;
    }
    const double d = std::abs(g - ref[i]);
    e.max_abs = std::max(e.max_abs, d);
    err2 += d * d;
    ref2 += ref[i] * ref[i];
  }
  e.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return e;
}

// --sweep: every tile of the list on the same inputs; plans the planner
// refuses are listed as EXCEEDS_LIMIT, not run.  The best goes to the
// tuning cache that --tile-q=auto reads.
template <class TimeRuns>
int run_sweep(const BenchmarkOptions& o, const fa::AttentionParams& p, fa::Isa isa, double flops, TimeRuns&& time_runs) {
  struct Row {
    int tile_q, tile_kv;
    double latency_ms, tflops;
    std::string status;
  };
  std::vector<Row> rows;
  const bool bar = ::isatty(2);  // progress on a terminal; results go to stdout
  const std::size_t n = o.sweep_tiles.size();
  if (!o.json) std::printf("%8s %8s %12s %14s\n", "Tile_Q", "Tile_KV", "Throughput", "Status");
  for (std::size_t i = 0; i < n; ++i) {
    const auto [tq, tkv] = o.sweep_tiles[i];
    if (bar) {
      const int done = static_cast<int>(30 * i / n);
      std::fprintf(stderr, "\r[%s%s] %zu/%zu tile %dx%d ", std::string(done, '#').c_str(),
                   std::string(30 - done, '.').c_str(), i, n, tq, tkv);
      std::fflush(stderr);
    }
    fa::AttentionParams sp = p;
    sp.tile_q = tq;
    sp.tile_kv = tkv;
    fa::TilePlan plan;
    Row row{tq, tkv, 0.0, 0.0, "OK"};
    if (!fa::plan(fa::cli::kVersion, sp, o.dtype, o.kv_dtype.value_or(o.dtype), &plan).ok()) {
      row.status = "EXCEEDS_LIMIT";
    } else {
      row.latency_ms = median_of(time_runs(sp));
      row.tflops = flops / (row.latency_ms * 1e-3) / 1e12;
    }
    rows.push_back(row);
    if (bar) std::fprintf(stderr, "\r%60s\r", "");
    if (o.json) {
      Json j;
      j["tile_q"] = tq;
      j["tile_kv"] = tkv;
      j["latency_ms"] = row.latency_ms;
      j["throughput_tflops"] = row.tflops;
      j["status"] = row.status;
      std::cout << fa::cli::json_text(j) << "\n";
    } else if (row.status == "OK") {
      std::printf("%8d %8d %7.5f TFLOPS %10s\n", tq, tkv, row.tflops, row.status.c_str());
    } else {
      std::printf("%8d %8d %12s %14s\n", tq, tkv, "N/A", row.status.c_str());
    }
    std::fflush(stdout);
  }
  const Row* best = nullptr;
  for (const Row& r : rows) {
    if (r.status == "OK" && (!best || r.tflops > best->tflops)) best = &r;
  }
  if (!best) {
    std::fprintf(stderr, "error: --sweep: no tile of the list fits this CPU's limits\n");
    return 2;
  }
  std::string cache_note = "not updated (--no-cache-update)";
  if (o.cache_update) {
    const fa::Status s = fa::tuning_cache_store(fa::cli::kVersion, p, o.dtype, isa, best->tile_q, best->tile_kv, best->tflops);
    cache_note = s.ok() ? "updated " + fa::tuning_cache_path() : "not updated: " + s.message();
  }
  if (o.json) {
    Json j;
    j["best_tile_q"] = best->tile_q;
    j["best_tile_kv"] = best->tile_kv;
    j["best_throughput_tflops"] = best->tflops;
    j["kernel"] = fa::isa_name(isa);
    j["tuning_cache"] = cache_note;
    std::cout << fa::cli::json_text(j) << "\n";
  } else {
    std::printf("\nBest config: Tile_Q=%d, Tile_KV=%d @ %.5f TFLOPS (%s)\nTuning cache: %s\n", best->tile_q,
                best->tile_kv, best->tflops, std::string(fa::isa_name(isa)).c_str(), cache_note.c_str());
  }
  return 0;
}

int run(int argc, char** argv) {
  Args args(std::string(fa::cli::kVersionTag) + "_benchmark", fa::cli::benchmark_flags());
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << fa::cli::kVersionTitle << " forward benchmark\n" << args.help_text();
    return 0;
  }
  // --config FILE: the file's settings as flags before the command line's
  // own, which win.
  fa::cli::ConfigFlags config;
  const std::vector<std::string> command_line(argv + 1, argv + argc);
  if (args.has("config")) {
    config = fa::cli::read_benchmark_config(args.str("config"), fa::cli::kVersion);
    std::vector<std::string> merged = fa::cli::merge_config_flags(config, command_line);
    std::vector<char*> merged_argv{argv[0]};
    for (std::string& arg : merged) merged_argv.push_back(arg.data());
    Args with_config(std::string(fa::cli::kVersionTag) + "_benchmark", fa::cli::benchmark_flags());
    try {
      with_config.parse(static_cast<int>(merged_argv.size()), merged_argv.data());
    } catch (const UsageError& e) {
      throw UsageError(fa::cli::name_config_key(config, command_line, e.what()));
    }
    args = std::move(with_config);
  }
  BenchmarkOptions o;
  try {
    o = fa::cli::read_benchmark_options(args);
  } catch (const UsageError& e) {
    throw UsageError(fa::cli::name_config_key(config, command_line, e.what()));
  }
  // The file's keys that mean nothing here, once each (after the options
  // are known good: a refused run prints its one error line only).
  for (const std::string& w : config.warnings) std::cerr << "warning: " << w << "\n";
  fa::cli::bind_pointers(o);
  fa::cli::set_huge_page_buffers(o.huge_pages);  // before the first tensor is allocated
  fa::AttentionParams& p = o.params;
  if (o.backward && !fa::cli::kBackward) {
    throw UsageError(std::string("--backward: ") + fa::cli::kVersionTag +
                     " has no backward pass (FA2 has one: fa2_benchmark --backward)");
  }
  fa::Isa isa;
  if (fa::Status s = fa::select_isa(p, &isa); !s.ok()) throw UsageError(s.message());
  if (fa::Status s = fa::version_supports(fa::cli::kVersion, p, o.dtype, o.kv_dtype); !s.ok()) throw UsageError(s.message());
  // Packed variable-length tensors are views of batch 1.
  const std::int64_t B = p.cu_seqlens_q ? 1 : p.batch, Sq = p.seq_q, Skv = p.seq_kv, H = p.num_heads, Hkv = p.kv_heads(),
                     D = p.head_dim;
  const std::size_t es = fa::dtype_size(o.dtype);
  // --kv-dtype: K and V drawn (or read) in --dtype, then stored quantized
  // (int8 with a 4-byte scale per token and K/V head).
  const fa::DType kv_dtype = o.kv_dtype.value_or(o.dtype);
  const std::size_t kv_es = fa::dtype_size(kv_dtype);
  const std::size_t q_bytes = fa::cli::checked_product({B, Sq, H, D, std::int64_t(es)}, "Q");
  const std::size_t kv_in_bytes = fa::cli::checked_product({B, Skv, Hkv, D, std::int64_t(es)}, "K/V");
  const std::size_t scale_bytes = kv_dtype == fa::DType::kI8 ? fa::cli::checked_product({B, Skv, Hkv, 4}, "K/V scales") : 0;
  const std::size_t kv_bytes = fa::cli::checked_product({B, Skv, Hkv, D, std::int64_t(kv_es)}, "K/V") + scale_bytes;
  const std::size_t mask_bytes = o.mask_path.empty() ? 0 : fa::cli::checked_product({Sq, Skv}, "mask");
  const std::size_t o_bytes = fa::cli::checked_product({B, Sq, H, D, std::int64_t(fa::dtype_size(o.out_dtype))}, "O");
  const std::size_t lse_bytes = fa::cli::checked_product({B, H, Sq, 4}, "LSE");
  // The tensors alone first: a shape that cannot fit is refused before the
  // planner walks its items.
  fa::cli::check_fits_in_memory(q_bytes + o_bytes + 2 * (kv_bytes + (kv_dtype != o.dtype ? kv_in_bytes : 0)) + lse_bytes,
                                "this shape");
  // --paged: a block table over a pool of every sequence's blocks, in a
  // random order (the pool itself is filled from the inputs below).
  fa::cli::PagedCache paged;
  if (o.paged) {
    paged = fa::cli::make_paged_cache(B, Skv, o.block_size, o.seed);
    paged.bind(p);
  }
  // The tile plan, checked against the CPU's resources before anything is
  // allocated (a plan that does not fit is the guide's first trap).
  fa::TilePlan plan;
  if (fa::Status s = fa::plan(fa::cli::kVersion, p, o.dtype, o.kv_dtype.value_or(o.dtype), &plan); !s.ok()) {
    throw UsageError(s.message());
  }
  const int threads = p.threads > 0 ? p.threads : fa::default_thread_count();
  const std::size_t workspace = fa::cli::version_workspace_bytes(p, o.dtype, threads);
  const std::size_t set_bytes = q_bytes + o_bytes + 2 * kv_bytes;  // Q, K, V, O
  // Several copies of the inputs when they would fit in cache, so the timed
  // runs read memory the way a real model's call would, not a warm cache.
  const int sets = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / std::max<std::size_t>(set_bytes, 1), 1, 8));
  // The bandwidth probe streams a buffer as large as the sets (at most 1
  // GiB), allocated while they are.
  // A working set just past the last-level cache would still be read partly
  // from it (an int8 cache's 66 MiB on a 32 MiB L3 measured 20% above the
  // DRAM figure): one beyond it is probed at four times the cache at least.
  const std::size_t llc_bytes = fa::cpu_last_level_cache_bytes();
  std::size_t probe_bytes = std::min<std::size_t>(set_bytes * sets, std::size_t{1} << 30);
  if (llc_bytes > 0 && probe_bytes > llc_bytes) probe_bytes = std::min<std::size_t>(std::max(probe_bytes, 4 * llc_bytes), std::size_t{1} << 30);
  std::size_t total = set_bytes * sets + mask_bytes + lse_bytes + workspace + (o.probe ? probe_bytes : 0);
  if (o.check) total += fa::cli::checked_product({B, Sq, H, D, 8}, "reference") + lse_bytes * 2 +
                        std::size_t(threads) * (Skv * D * 16 + Skv * 8 + D * 8);
  fa::cli::check_fits_in_memory(total, "this shape");

  // Inputs: files, or random normal values.
  const std::string q_what = shape_text(B, Sq, H, D, o.dtype, o.layout);
  const std::string kv_what = shape_text(B, Skv, Hkv, D, o.dtype, o.layout);
  std::vector<fa::cli::HostBuffer> qs, ks, vs, os;
  if (!o.input_q.empty()) {
    qs.push_back(fa::cli::read_exact(o.input_q, q_bytes, "input-q", q_what));
    ks.push_back(fa::cli::read_exact(o.input_k, kv_in_bytes, "input-k", kv_what));
    vs.push_back(fa::cli::read_exact(o.input_v, kv_in_bytes, "input-v", kv_what));
  } else {
    qs.emplace_back(q_bytes);
    ks.emplace_back(kv_in_bytes);
    vs.emplace_back(kv_in_bytes);
    fa::cli::fill_normal(qs[0].data(), o.dtype, B * Sq * H * D, o.seed * 3 + 0, 1.0);
    fa::cli::fill_normal(ks[0].data(), o.dtype, B * Skv * Hkv * D, o.seed * 3 + 1, 1.0);
    fa::cli::fill_normal(vs[0].data(), o.dtype, B * Skv * Hkv * D, o.seed * 3 + 2, 1.0);
  }
  fa::cli::HostBuffer mask;
  std::string mask_note = p.sparse_mode ? "sparse_mode " + std::to_string(static_cast<int>(*p.sparse_mode))
                                      : (p.causal ? "causal" : "none");
  if (!o.mask_path.empty()) {
    mask = fa::cli::read_exact(o.mask_path, mask_bytes, "causal-mask",
                               "an int8 mask [seq_q=" + std::to_string(Sq) + ", seq_kv=" + std::to_string(Skv) + "]");
    const auto* m = static_cast<const std::int8_t*>(mask.data());
    if (!p.sparse_mode && is_causal_pattern(m, Sq, Skv)) {
      p.causal = true;  // same pairs attend; the kernel skips masked tiles
      mask_note = "file (causal pattern, run as causal)";
    } else {
      p.mask = m;
      mask_note = (p.causal || p.sparse_mode) ? "file AND " + mask_note : "file";
    }
  }
  fa::cli::HostBuffer bias;
  if (!o.bias_path.empty()) {
    // [1 or heads, seq_q, seq_kv] fp32: the file size says which.
    const std::size_t one = fa::cli::checked_product({Sq, Skv, 4}, "bias");
    std::ifstream probe(o.bias_path, std::ios::binary | std::ios::ate);
    const std::streamoff size = probe ? static_cast<std::streamoff>(probe.tellg()) : -1;
    const std::int64_t heads = size == static_cast<std::streamoff>(one * H) ? H : 1;
    bias = fa::cli::read_exact(o.bias_path, one * static_cast<std::size_t>(heads), "bias",
                               "an fp32 bias [1 or " + std::to_string(H) + " heads, seq_q=" + std::to_string(Sq) +
                                   ", seq_kv=" + std::to_string(Skv) + "]");
    p.bias = static_cast<const float*>(bias.data());
    p.bias_heads = heads;
    // The NaN rule: -inf in a bias masks; NaN and +inf are refused here (the
    // library would turn the rows they touch into NaN).
    const std::size_t count = one / 4 * static_cast<std::size_t>(heads);
    for (std::size_t i = 0; i < count; ++i) {
      if (std::isnan(p.bias[i]) || p.bias[i] == std::numeric_limits<float>::infinity()) {
        throw UsageError("--bias: element " + std::to_string(i) + " of '" + o.bias_path + "' is " +
                         (std::isnan(p.bias[i]) ? "NaN" : "+inf") + " (expected finite values, or -inf to mask)");
      }
    }
  }
  // --kv-dtype: the cache quantized (through append_kv_cache, as a serving
  // engine fills one); an int8 cache's scales are per-set buffers like K/V.
  std::vector<fa::cli::HostBuffer> k_scales, v_scales;
  std::vector<float> descale_k, descale_v;
  if (o.kv_dtype) {
    fa::cli::QuantizedCache quantized;
    const fa::TensorView k_in = fa::make_view(ks[0].data(), o.dtype, o.layout, B, Hkv, Skv, D);
    const fa::TensorView v_in = fa::make_view(vs[0].data(), o.dtype, o.layout, B, Hkv, Skv, D);
    if (fa::Status s = fa::cli::quantize_cache(k_in, v_in, o.layout, kv_dtype, &quantized); !s.ok()) {
      throw UsageError(s.message());
    }
    ks[0] = std::move(quantized.k);
    vs[0] = std::move(quantized.v);
    if (kv_dtype == fa::DType::kI8) {
      k_scales.push_back(std::move(quantized.k_scale));
      v_scales.push_back(std::move(quantized.v_scale));
    }
    descale_k = quantized.descale_k;
    descale_v = quantized.descale_v;
    if (!descale_k.empty()) {
      p.descale_k = descale_k.data();
      p.descale_v = descale_v.data();
      p.descale_k_count = p.descale_v_count = Hkv;
    }
  }
  for (int s = 1; s < sets; ++s) {
    for (auto* list : {&qs, &ks, &vs, &k_scales, &v_scales}) {
      if (list->empty()) continue;
      fa::cli::HostBuffer copy((*list)[0].bytes());
      std::copy_n(static_cast<const char*>((*list)[0].data()), copy.bytes(), static_cast<char*>(copy.data()));
      list->push_back(std::move(copy));
    }
  }
  // --paged: each set's K and V moved into their pools (with --seqlens-kv,
  // each sequence's keys only).
  const std::int64_t pool_tokens = paged.pool_tokens();
  if (p.block_table) {
    for (auto* list : {&ks, &vs, &k_scales, &v_scales}) {
      const bool scales = list == &k_scales || list == &v_scales;
      for (fa::cli::HostBuffer& contiguous : *list) {
        const fa::TensorView from = scales ? fa::make_view(contiguous.data(), fa::DType::kF32, o.layout, B, Hkv, Skv, 1)
                                           : fa::make_view(contiguous.data(), kv_dtype, o.layout, B, Hkv, Skv, D);
        contiguous = fa::cli::scatter_to_pool(paged, from, o.layout, p.seqlens_kv);
      }
    }
  }
  // Output buffers written once before timing, as a framework's caching
  // allocator hands them out: otherwise the timed runs that first use a set
  // would time the page faults of its fresh pages (measured: a sixth of the
  // guide's causal B2 S512 H12 D64 bf16 call, in its epilogue).
  for (int s = 0; s < sets; ++s) {
    os.emplace_back(o_bytes);
    std::memset(os.back().data(), 0, o_bytes);
  }
  std::vector<float> lse(static_cast<std::size_t>(B * H * Sq));

  auto tensors_for = [&](int s) {
    fa::AttentionTensors t;
    t.q = fa::make_view(qs[s].data(), o.dtype, o.layout, B, H, Sq, D);
    const std::int64_t kv_batch = p.block_table ? 1 : B, kv_seq = p.block_table ? pool_tokens : Skv;
    t.k = fa::make_view(ks[s].data(), kv_dtype, o.layout, kv_batch, Hkv, kv_seq, D);
    t.v = fa::make_view(vs[s].data(), kv_dtype, o.layout, kv_batch, Hkv, kv_seq, D);
    if (!k_scales.empty()) {
      t.k_scale = fa::make_view(k_scales[s].data(), fa::DType::kF32, o.layout, kv_batch, Hkv, kv_seq, 1);
      t.v_scale = fa::make_view(v_scales[s].data(), fa::DType::kF32, o.layout, kv_batch, Hkv, kv_seq, 1);
    }
    t.o = fa::make_view(os[s].data(), o.out_dtype, fa::Layout::kBSH, B, H, Sq, D);  // --output is always BSH
    t.lse = lse.data();
    return t;
  };

  const int used_threads = plan.threads;
  // The products' unit: the AMX tiles (amx path, bf16 and fp16) or
  // VDPBF16PS (avx512bf16 path, bf16) where the pair path runs, and
  // VDPBF16PS for an FP8 cache's short queries on the avx512bf16 row path,
  // the AMX tiles for a packed GQA group of bf16 queries over an FP8 or
  // int8 cache on the amx path (widened tile by tile); else the path's
  // vector FMA (a quantized cache's tile loops, an int8 cache's integer
  // products on the row path).
  const bool fp8_row_pairs = o.kv_dtype && fa::is_fp8(*o.kv_dtype) && isa == fa::Isa::kAvx512Bf16 && !plan.pack_tile &&
                             p.seq_q <= plan.row_rows;
  const bool quantized_tiles = o.kv_dtype && (fa::is_fp8(*o.kv_dtype) || *o.kv_dtype == fa::DType::kI8) &&
                               isa == fa::Isa::kAmx && o.dtype == fa::DType::kBF16 && plan.pack_tile && D % 32 == 0 &&
                               plan.tile_kv % 32 == 0 && plan.tile_q % 16 == 0;
  const bool matrix = o.kv_dtype ? fp8_row_pairs || quantized_tiles : fa::uses_matrix_unit(isa, o.dtype, D);
  auto measure_peak = [&] {
    return matrix ? fa::measure_matrix_peak_gflops(isa, used_threads, 0.2)
                  : fa::measure_fma_peak_gflops(isa, used_threads, 0.2);
  };
  // The unit's peak on the same threads, right before the kernel runs
  // (and again right after, below): on a shared machine a neighbour can take
  // a core during one probe, so the higher of the two is the ceiling used.
  const double peak_before = o.probe ? measure_peak() : 0.0;
  // The streaming-read bandwidth on the same threads over as many bytes as
  // the timed runs cycle through (the input sets): beyond the last-level
  // cache that is DRAM, within it the cache; capped at 1 GiB, far beyond any
  // cache.  Before and after, like the peak.
  auto measure_bandwidth = [&] {
    return fa::measure_read_bandwidth_gbps(isa, used_threads, probe_bytes, 0.2, o.huge_pages);  // on the tensors' pages
  };
  const double bandwidth_before = o.probe ? measure_bandwidth() : 0.0;

  // Warm-up and timed runs of one configuration; run 0 always uses set 0,
  // whose output is written and checked.
  // With `profiles`, each timed call records its items (--profile).
  auto time_runs = [&](const fa::AttentionParams& params, std::vector<fa::CallProfile>* profiles = nullptr) {
    std::vector<double> times;
    fa::AttentionParams call = params;
    for (int r = 0; r < o.warmup_runs + o.num_runs; ++r) {
      const fa::AttentionTensors t = tensors_for(r % sets);
      if (profiles && r >= o.warmup_runs) call.profile = &profiles->emplace_back();
      const auto start = std::chrono::steady_clock::now();
      const fa::Status status = fa::cli::kForward(call, t);
      const auto stop = std::chrono::steady_clock::now();
      if (!status.ok()) throw UsageError(status.message());
      if (r >= o.warmup_runs) times.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    std::sort(times.begin(), times.end());
    return times;
  };
  // (attended_pairs sums a call's sequences when each has its own lengths.)
  const double pair_batches = p.cu_seqlens_q || p.seqlens_kv ? 1.0 : double(B);
  const double flops = 4.0 * pair_batches * double(H) * double(D) * double(fa::attended_pairs(p));
  if (o.sweep) return run_sweep(o, p, isa, flops, time_runs);

  std::vector<fa::CallProfile> profiles;
  const std::vector<double> times_ms = time_runs(p, o.profile_dir.empty() ? nullptr : &profiles);
  const double peak_after = o.probe ? measure_peak() : 0.0;
  const double bandwidth_after = o.probe ? measure_bandwidth() : 0.0;
  // The bytes the call must move: Q, K, V (with --seqlens-kv, each
  // sequence's keys), the mask and bias read once, O and the LSE written once.
  double cache_bytes = double(2 * kv_bytes);
  if (p.seqlens_kv) {
    cache_bytes = 0.0;
    for (std::int64_t b = 0; b < B; ++b) {
      cache_bytes += 2.0 * double(p.seqlens_kv[b]) * double(Hkv) * (double(D * kv_es) + (scale_bytes ? 4.0 : 0.0));
    }
  }
  fa::cli::RunFigures run;
  run.sorted_ms = times_ms;
  run.flops = flops;
  run.peak_memory_mb = double(set_bytes + mask_bytes + lse_bytes + workspace) / double(1 << 20);
  run.threads = used_threads;
  run.probed = o.probe;
  run.peak_unit = unit_name(isa, matrix);
  run.peak_before_gflops = peak_before;
  run.peak_after_gflops = peak_after;
  run.bytes_moved = double(q_bytes + o_bytes + lse_bytes + mask_bytes + bias.bytes()) + cache_bytes;
  run.bandwidth_before_gbps = bandwidth_before;
  run.bandwidth_after_gbps = bandwidth_after;
  run.probe_bytes = probe_bytes;
  run.bandwidth_source = llc_bytes > 0 && probe_bytes <= llc_bytes ? "cache-resident" : "DRAM";

  // Check set 0's output against the float64 reference; with --reference,
  // a same-dtype attention (naive or max-subtracted) is measured beside it.
  ErrorStats ours, yardstick;
  bool check_pass = true;
  if (o.check) {
    std::vector<double> ref(static_cast<std::size_t>(B * Sq * H * D));
    const fa::AttentionTensors t = tensors_for(0);
    if (fa::Status s = fa::reference_forward(p, t, ref.data(), nullptr); !s.ok()) throw UsageError(s.message());
    ours = compare(ref, [&](std::size_t i) {
      return double(fa::detail::load_as_f32(os[0].data(), o.out_dtype, static_cast<std::int64_t>(i)));
    });
    check_pass = ours.inf == 0 && ours.nan == 0 && ours.rel_l2 <= fa::cli::rel_l2_bound(o.dtype);
    if (o.reference != "float64") {
      std::vector<double> other(ref.size());
      const fa::DType compute = o.reference == "naive-fp16" ? fa::DType::kF16 : o.dtype;
      if (fa::Status s = fa::same_dtype_attention(p, t, compute, o.reference != "naive-fp16", other.data()); !s.ok()) {
        throw UsageError(s.message());
      }
      yardstick = compare(ref, [&](std::size_t i) { return other[i]; });
    }
  }
  // --append: the call's new tokens (seq_q per sequence, the last positions
  // of its keys) written into set 0's cache with append_kv_cache, timed like
  // the call (after the check, which read that cache).
  std::vector<double> append_ms;
  std::int64_t append_tokens = 0;
  if (o.append) {
    append_tokens = B * Sq;
    std::vector<std::int64_t> slots(static_cast<std::size_t>(append_tokens));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t keys = p.seqlens_kv ? p.seqlens_kv[b] : Skv;
      for (std::int64_t i = 0; i < Sq; ++i) {
        const std::int64_t pos = keys - Sq + i;
        std::int64_t& slot = slots[static_cast<std::size_t>(b * Sq + i)];
        slot = pos < 0 ? -1  // fewer keys than new tokens: skipped
               : p.block_table ? paged.pool_row(b, pos)
                               : b * Skv + pos;
      }
    }
    fa::cli::HostBuffer k_new(static_cast<std::size_t>(append_tokens * Hkv * D) * es), v_new(k_new.bytes());
    fa::cli::fill_normal(k_new.data(), o.dtype, append_tokens * Hkv * D, o.seed * 3 + 7, 1.0);
    fa::cli::fill_normal(v_new.data(), o.dtype, append_tokens * Hkv * D, o.seed * 3 + 8, 1.0);
    const fa::TensorView kn = fa::make_view(k_new.data(), o.dtype, o.layout, 1, Hkv, append_tokens, D);
    const fa::TensorView vn = fa::make_view(v_new.data(), o.dtype, o.layout, 1, Hkv, append_tokens, D);
    const fa::AttentionTensors cache = tensors_for(0);
    // A quantized cache's: the new rows are quantized as they are written.
    const fa::KvCacheScales cache_scales = fa::cli::append_scales(p, cache);
    for (int r = 0; r < o.warmup_runs + o.num_runs; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const fa::Status status = fa::append_kv_cache(kn, vn, slots.data(), cache.k, cache.v, cache_scales, p.threads);
      const auto stop = std::chrono::steady_clock::now();
      if (!status.ok()) throw UsageError(status.message());
      if (r >= o.warmup_runs) append_ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    std::sort(append_ms.begin(), append_ms.end());
  }
  const double append_median = median_of(append_ms);

  // --backward: the gradients of set 0's call, timed like the forward.
  // The forward runs once more on set 0 first (untimed): its O and LSE are
  // what the backward reads (the LSE buffer is shared by the sets), and
  // what --output-lse writes.
  const fa::AttentionTensors t0 = tensors_for(0);
  if (o.backward || !o.output_lse.empty()) {
    if (fa::Status s = fa::cli::kForward(p, t0); !s.ok()) throw UsageError(s.message());
  }
  std::vector<double> backward_ms;
  fa::cli::HostBuffer dout, grads[3];
  fa::cli::GradientCheck grad_check;
  bool backward_pass = true;
  if (o.backward) {
    if (!o.input_do.empty()) {
      dout = fa::cli::read_exact(o.input_do, q_bytes, "input-do", q_what);
    } else {
      dout = fa::cli::HostBuffer(q_bytes);
      fa::cli::fill_normal(dout.data(), o.dtype, B * Sq * H * D, o.seed * 3 + 9, 1.0);
    }
    grads[0] = fa::cli::HostBuffer(q_bytes);
    grads[1] = fa::cli::HostBuffer(kv_in_bytes);
    grads[2] = fa::cli::HostBuffer(kv_in_bytes);
    for (auto& g : grads) std::memset(g.data(), 0, g.bytes());  // pages faulted in before timing
    fa::AttentionGrads g;
    g.dout = fa::make_view(dout.data(), o.dtype, o.layout, B, H, Sq, D);
    g.dq = fa::make_view(grads[0].data(), o.dtype, o.layout, B, H, Sq, D);
    g.dk = fa::make_view(grads[1].data(), o.dtype, o.layout, B, Hkv, Skv, D);
    g.dv = fa::make_view(grads[2].data(), o.dtype, o.layout, B, Hkv, Skv, D);
    std::vector<float> dbias(p.bias ? static_cast<std::size_t>(p.bias_heads * Sq * Skv) : 0);
    std::vector<float> dsinks(p.sinks ? static_cast<std::size_t>(H) : 0);
    g.dbias = p.bias ? dbias.data() : nullptr;
    g.dsinks = p.sinks ? dsinks.data() : nullptr;
    for (int r = 0; r < o.warmup_runs + o.num_runs; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const fa::Status status = fa::cli::kBackward(p, t0, g);
      const auto stop = std::chrono::steady_clock::now();
      if (!status.ok()) throw UsageError(status.message());
      if (r >= o.warmup_runs) backward_ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    std::sort(backward_ms.begin(), backward_ms.end());
    if (o.check) {
      grad_check = fa::cli::compare_gradients(p, t0, g, o.dtype);
      if (!grad_check.status.ok()) throw UsageError(grad_check.status.message());
      backward_pass = grad_check.passed && grad_check.nonfinite == 0;
    }
  }
  // FlashAttention's convention: the backward does 2.5x the forward's FLOPs
  // (five products to the forward's two).
  const double backward_flops = 2.5 * flops;
  const double backward_median = median_of(backward_ms);
  // The backward call's footprint: its inputs (Q, K, V, O, the LSE, dO),
  // the gradients and its workspace: linear in the sequence lengths.
  const std::size_t backward_bytes =
      o.backward ? q_bytes * 2 + kv_in_bytes * 2 + o_bytes + lse_bytes + q_bytes + 2 * kv_in_bytes + bias.bytes() +
                       fa::cli::backward_workspace_bytes(p, o.dtype, used_threads)
                 : 0;
  const double backward_peak_mb = double(backward_bytes) / double(1 << 20);
  const double backward_tflops = backward_median > 0 ? backward_flops / (backward_median * 1e-3) / 1e12 : 0.0;
  check_pass = check_pass && backward_pass;

  // Files last, once everything ran: no partial set of outputs.
  if (!o.output.empty()) fa::cli::write_atomic(o.output, os[0].data(), o_bytes, "output");
  if (!o.output_lse.empty()) fa::cli::write_atomic(o.output_lse, lse.data(), lse_bytes, "output-lse");
  for (auto [path, i, flag] : {std::tuple{&o.output_dq, 0, "output-dq"}, std::tuple{&o.output_dk, 1, "output-dk"},
                               std::tuple{&o.output_dv, 2, "output-dv"}}) {
    if (!path->empty()) fa::cli::write_atomic(*path, grads[i].data(), grads[i].bytes(), flag);
  }

  // The prefetch the call ran with (FA1 has none).
  const bool async_prefetch =
      fa::cli::kVersion != fa::Version::kFA1 && p.async_prefetch.value_or(fa::default_async_prefetch());
  const int tq = plan.tile_q, tkv = plan.tile_kv;
  char line[1024];
  std::string trace_path;
  if (o.json || !o.json_file.empty() || !o.profile_dir.empty()) {
    Json j;
    j["version"] = fa::cli::kVersionTag;
    j["batch"] = p.batch;
    j["seq_q"] = Sq;
    j["seq_kv"] = Skv;
    j["num_heads"] = H;
    j["num_kv_heads"] = Hkv;
    j["head_dim"] = D;
    j["dtype"] = fa::dtype_name(o.dtype);
    j["out_dtype"] = fa::dtype_name(o.out_dtype);
    j["kv_dtype"] = fa::dtype_name(kv_dtype);
    j["layout"] = fa::layout_name(o.layout);
    j["causal"] = p.causal;
    j["mask"] = p.mask != nullptr;
    j["tile_q"] = tq;
    j["tile_kv"] = tkv;
    j["tile_source"] = plan.source;
    j["l2_working_set_bytes"] = plan.working_set_bytes;
    j["l2_limit_bytes"] = plan.limit_bytes;
    j["threads"] = used_threads;
    j["core_occupancy_percent"] = 100.0 * plan.occupancy;
    j["num_splits"] = plan.num_splits;
    j["async_prefetch"] = async_prefetch;
    j["kernel"] = kernel_id(isa, matrix);
    j["block_size"] = p.block_table ? p.block_size : 0;
    j["work_items"] = plan.work_items;
    j["huge_pages"] = o.huge_pages;
    j["transparent_huge_pages"] = fa::transparent_huge_pages();
    run.write_json(j);
    if (o.append) {
      j["append_latency_ms"] = append_median;
      j["append_tokens"] = append_tokens;
    }
    if (o.backward) {
      j["backward_latency_ms"] = backward_median;
      j["backward_throughput_tflops"] = backward_tflops;
      j["backward_peak_memory_mb"] = backward_peak_mb;
      if (o.check) {
        j["backward_rel_l2_error"] = {{"dq", grad_check.rel_l2[0]}, {"dk", grad_check.rel_l2[1]}, {"dv", grad_check.rel_l2[2]}};
        j["backward_check"] = backward_pass ? "PASS" : "FAIL";
      }
    }
    if (o.check) {
      j["max_abs_error"] = ours.max_abs;
      j["rel_l2_error"] = ours.rel_l2;
      j["inf_count"] = ours.inf;
      j["nan_count"] = ours.nan;
      j["check"] = check_pass ? "PASS" : "FAIL";
    }
    if (!o.output.empty()) j["output"] = o.output;
    if (!o.profile_dir.empty()) {
      fa::cli::TraceInfo info;
      info.program = std::string(fa::cli::kVersionTag) + "_benchmark";
      info.run = j;
      info.host_bytes = static_cast<std::size_t>(sets) * set_bytes + mask_bytes + lse_bytes;
      trace_path = fa::cli::write_trace(o.profile_dir, info.program, fa::cli::chrome_trace(profiles, info));
      j["profile"] = trace_path;
    }
    fa::cli::emit_json(j, o.json, o.json_file);
  }
  if (!o.json) {
    std::cout << fa::cli::kVersionTitle << " benchmark (" << fa::cli::kVersionTag << ")\n";
    // FA1 had no asynchronous prefetch: say so rather than drop the request silently.
    if (fa::cli::kVersion == fa::Version::kFA1 && p.async_prefetch.value_or(fa::default_async_prefetch())) {
      std::cout << "Note: FA1 has no asynchronous K/V prefetch; " << (p.async_prefetch ? "--async" : "FA_ENABLE_ASYNC=ON")
                << " ignored\n";
    }
    std::cout << "Config: batch=" << p.batch << " seq_q=" << Sq << " seq_kv=" << Skv << " heads=" << H
              << " kv_heads=" << Hkv << " head_dim=" << D << " dtype=" << fa::dtype_name(o.dtype)
              << (fa::is_fp8(o.dtype) ? " out_dtype=" + std::string(fa::dtype_name(o.out_dtype)) : std::string())
              << (o.kv_dtype ? " kv_dtype=" + std::string(fa::dtype_name(kv_dtype)) : std::string())
              << " layout=" << fa::layout_name(o.layout)
              << (p.block_table ? " kv_cache=paged(block_size=" + std::to_string(p.block_size) + ")" : std::string())
              << (p.seqlens_kv ? " seqlens_kv=" + seqlens_text(o.seqlens_kv) : std::string())
              << " mask=" << mask_note
              << " scale=" << p.softmax_scale() << "\n";
    std::snprintf(line, sizeof line, "Tile: Q=%d KV=%d (%s; L2 working set %.0f of %.0f KiB)  Threads: %d  Input sets: %d\n",
                  tq, tkv, plan.source.c_str(), plan.working_set_bytes / 1024.0, plan.limit_bytes / 1024.0, used_threads, sets);
    std::cout << line;
    if (o.huge_pages) {
      const std::string thp = fa::transparent_huge_pages();
      std::cout << "Memory: Q, K, V, O and the bandwidth probe asked onto transparent huge pages (kernel policy: "
                << (thp.empty() ? "unknown" : thp)
                << (thp == "never" ? "; so 4 KiB pages, as without --huge-pages" : "") << ")\n";
    }
    std::snprintf(line, sizeof line, "Core occupancy: %.1f%% (%lld work items on %d threads)\n", 100.0 * plan.occupancy,
                  static_cast<long long>(plan.work_items), used_threads);
    std::cout << line;
    if (plan.num_splits > 1) {
      std::snprintf(line, sizeof line, "Split-KV: %d chunks of %lld keys%s\n", plan.num_splits,
                    static_cast<long long>(plan.split_keys),
                    p.cu_seqlens_q || p.seqlens_kv ? " (the longest sequence's; each sequence in chunks of that size)" : "");
      std::cout << line;
    }
    std::cout << "Kernel: " << kernel_name(isa, matrix, o.dtype, o.kv_dtype) << "\n";
    run.write_text(std::cout);
    if (o.append) {
      std::snprintf(line, sizeof line, "Append: %.4f ms for %lld new tokens' K/V rows (append_kv_cache, %d runs)\n",
                    append_median, static_cast<long long>(append_tokens), o.num_runs);
      std::cout << line;
    }
    if (o.backward) {
      std::snprintf(line, sizeof line,
                    "Backward Latency: %.4f ms (min %.4f, max %.4f over %zu runs)\nBackward Throughput: %.5f TFLOPS\n"
                    "Backward Peak Memory: %.2f MB\n",
                    backward_median, backward_ms.front(), backward_ms.back(), backward_ms.size(), backward_tflops,
                    backward_peak_mb);
      std::cout << line;
    }
    if (o.check && o.backward) {
      std::snprintf(line, sizeof line,
                    "Backward Relative L2 Error: dQ %.3e, dK %.3e, dV %.3e (bound %.0e, or max error within 2x the same-dtype backward's)\nBackward Check: %s\n",
                    grad_check.rel_l2[0], grad_check.rel_l2[1], grad_check.rel_l2[2], fa::cli::grad_rel_l2_bound(o.dtype),
                    backward_pass ? "PASS" : "FAIL");
      std::cout << line;
    }
    if (o.check) {
      std::snprintf(line, sizeof line, "Max Abs Error: %.6e\nRelative L2 Error: %.6e (bound %.0e)\nInf: %lld  NaN: %lld\n",
                    ours.max_abs, ours.rel_l2, fa::cli::rel_l2_bound(o.dtype), (long long)ours.inf, (long long)ours.nan);
      std::cout << line;
      if (o.reference != "float64") {
        const char* what = o.reference == "naive-fp16" ? "Naive fp16 softmax (exp without max subtraction)"
                                                       : "Same-dtype attention (the accuracy yardstick)";
        std::snprintf(line, sizeof line,
                      "%s: Inf %lld, NaN %lld, Max Abs Error %.6e, Relative L2 Error %.6e (of the finite outputs)\n", what,
                      (long long)yardstick.inf, (long long)yardstick.nan, yardstick.max_abs, yardstick.rel_l2);
        std::cout << line;
      }
      std::cout << "Check: " << (check_pass ? "PASS" : "FAIL") << "\n";
    }
    if (!o.output.empty()) std::cout << "Output saved to: " << o.output << "\n";
    if (!o.output_lse.empty()) std::cout << "LSE saved to: " << o.output_lse << "\n";
    for (const std::string* path : {&o.output_dq, &o.output_dk, &o.output_dv}) {
      if (!path->empty()) std::cout << "Gradient saved to: " << *path << "\n";
    }
    if (!trace_path.empty()) {
      std::cout << "Profile: " << trace_path << " (Chrome trace of the " << o.num_runs << " timed calls, "
                << plan.work_items << " work items each; open in ui.perfetto.dev or chrome://tracing)\n";
    }
  }
  return check_pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    const std::string what = e.what();
    // The planner's message already starts with the guide's "Error: ...".
    std::cerr << (what.rfind("Error: ", 0) == 0 ? "" : "error: ") << what << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory; use a smaller shape\n";
    return 2;
  }
}
