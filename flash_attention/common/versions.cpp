// What each FlashAttention version offers.  FA2 and FA3 take every feature
// of AttentionParams, and FA3 FP8 inputs too; FA1 takes what the 2022 algorithm had (every dtype,
// layout, mask mode and GQA, the score modifiers and dropout) on its fixed
// 64 x 64 tiles, and refuses what came later: variable-length batches,
// split-KV, attention sinks and the KV-cache features (paged blocks,
// per-sequence key counts, quantized caches).  The planner and the dispatcher both ask
// here, so a tool refuses before it allocates and a library call before it
// touches data.
#include <string>

#include "flash_attention/flash_attention.h"

namespace fa {

std::string_view version_name(Version version) {
  switch (version) {
    case Version::kFA1: return "fa1";
    case Version::kFA2: return "fa2";
    case Version::kFA3: return "fa3";
  }
  return "?";
}

namespace {

// FA1's block size: the FlashAttention-1 kernel's fixed 64 x 64.
constexpr int kFa1Tile = 64;

Status fa1_lacks(const std::string& what) {
  return Status::Unsupported("FlashAttention-1 does not offer " + what + "; use FA2 or FA3");
}

}  // namespace

Status version_supports(Version version, const AttentionParams& p, DType dtype, std::optional<DType> kv_dtype) {
  if (kv_dtype && *kv_dtype != dtype && version == Version::kFA1) {
    return fa1_lacks("a quantized K/V cache (" + std::string(dtype_name(*kv_dtype)) + ")");
  }
  if (is_fp8(dtype) && version != Version::kFA3) {
    return Status::Unsupported("FP8 inputs (" + std::string(dtype_name(dtype)) + ") run on FlashAttention-3 only: use "
                               "fa3_forward (fa3_benchmark, fa3_test)");
  }
  if (version != Version::kFA1) return Status::Ok();
  if (p.cu_seqlens_q || p.cu_seqlens_kv) return fa1_lacks("variable-length sequences (layout TND, cu_seqlens)");
  if (p.num_splits > 1) {
    return fa1_lacks("split-KV (num_splits=" + std::to_string(p.num_splits) +
                     "): its K/V loop is the outer one and it runs in parallel over (batch, head) only");
  }
  if (p.sinks) return fa1_lacks("attention sinks");
  if (p.block_table) return fa1_lacks("a paged KV cache (block_table)");
  if (p.seqlens_kv) return fa1_lacks("per-sequence key counts (seqlens_kv)");
  for (auto [name, tile] : {std::pair{"tile_q", p.tile_q}, std::pair{"tile_kv", p.tile_kv}}) {
    if (tile != 0 && tile != kTileAuto && tile != kFa1Tile) {
      return Status::Unsupported(std::string("FlashAttention-1 runs 64x64 tiles only (its kernel's fixed block); ") +
                                 name + "=" + std::to_string(tile) + " is not accepted (use 64, or FA2/FA3 for other tiles)");
    }
  }
  return Status::Ok();
}

}  // namespace fa
