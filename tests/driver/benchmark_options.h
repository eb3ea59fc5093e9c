// The <version>_benchmark command line: the flag table and the options
// read from it (benchmark_options.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli_args.h"
#include "flash_attention/flash_attention.h"

namespace fa::cli {

std::vector<FlagSpec> benchmark_flags();

struct BenchmarkOptions {
  fa::AttentionParams params;
  fa::DType dtype = fa::DType::kF16;
  fa::DType out_dtype = fa::DType::kF16;  // = dtype, but for FP8 inputs
  std::optional<fa::DType> kv_dtype;      // --kv-dtype: a quantized K/V cache
  fa::Layout layout = fa::Layout::kBSH;
  std::string input_q, input_k, input_v, mask_path, output;
  std::string json_file;  // --json-file: the --json object, also written to this file
  std::string profile_dir;  // --profile: a Chrome trace of the timed calls in this directory
  int num_runs = 10, warmup_runs = 2;
  std::uint64_t seed = 1;
  bool check = false, json = false, probe = true;
  bool huge_pages = false;  // --huge-pages: the tensors and the probe on transparent huge pages
  bool sweep = false, cache_update = true;
  std::string reference = "float64";
  std::vector<float> sinks;  // per head; p.sinks points here
  std::vector<float> descale[3];  // Q, K, V (FP8); p.descale_* point here
  std::vector<float> alibi;  // per head; p.alibi_slopes points here
  std::vector<std::int32_t> cu_q, cu_kv;  // TND; p.cu_seqlens_* point here
  std::vector<std::int32_t> seqlens_kv;   // per-sequence keys of the cache; p.seqlens_kv points here
  bool append = false;                    // also time append_kv_cache for the call's new tokens
  bool paged = false;                     // K/V moved into a paged pool (the benchmark builds the table)
  int block_size = 128;
  std::string bias_path;
  std::vector<std::pair<int, int>> sweep_tiles;
  // --backward: also time the backward pass (FA2) on dO (--input-do, else
  // random); the gradients (and the forward's LSE) written where asked.
  bool backward = false;
  std::string input_do, output_dq, output_dk, output_dv, output_lse;
};

bool is_tile(std::int64_t t);
// "64x32,128x64" -> {(64, 32), (128, 64)}; a bad item is a UsageError.
std::vector<std::pair<int, int>> parse_tile_list(const std::string& text);

// Every flag's value, checked; a bad one throws one UsageError line.
BenchmarkOptions read_benchmark_options(const Args& a);
// Points the params at the option lists (sinks, ALiBi slopes, descale
// factors, cu_seqlens, seqlens_kv) the options own: call after the options stop moving.
void bind_pointers(BenchmarkOptions& o);

}  // namespace fa::cli
