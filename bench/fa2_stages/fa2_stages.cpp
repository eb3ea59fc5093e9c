// fa2_stages: where the time of the FA2 tile loop goes, per stage, on one
// thread with the data in cache, for one kernel path.  The timer is the
// library's (flash_attention/fa2/fa2_stage_timer.h, compiled with the loop).
#include <cstdio>
#include <iostream>
#include <string>

#include "driver/cli_args.h"
#include "flash_attention/testing.h"

namespace {

int main_impl(int argc, char** argv) {
  using K = fa::cli::FlagKind;
  fa::cli::Args args("fa2_stages", {
      {"isa", K::kString, "generic|avx2|avx512|avx512bf16|amx", "kernel path (default: the fastest available)"},
      {"dtype", K::kString, "fp16|bf16|fp32", "input dtype (default bf16)"},
      {"head-dim", K::kInt, "N", "head dimension, a multiple of 8 (default 128)"},
      {"tile-q", K::kInt, "N", "Q tile (default: FA_TILE_Q, 128 when auto)"},
      {"tile-kv", K::kInt, "N", "K/V tile (default: FA_TILE_KV, 64 when auto)"},
      {"tiles", K::kInt, "N", "K/V tiles per work item for the per-item overhead (default 32)"},
      {"seconds", K::kFloat, "S", "time per measurement (default 0.2)"},
      {"help", K::kBool, "", "print this help"},
  });
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "Time the FA2 tile loop's stages on one thread\n" << args.help_text();
    return 0;
  }
  fa::AttentionParams probe;
  if (args.has("isa")) {
    probe.isa = fa::parse_isa(args.str("isa"));
    if (!probe.isa) throw fa::cli::UsageError("--isa: unknown path '" + args.str("isa") + "' (expected generic, avx2, avx512, avx512bf16 or amx)");
  }
  fa::Isa isa;
  if (fa::Status s = fa::select_isa(probe, &isa); !s.ok()) throw fa::cli::UsageError("--isa: " + s.message());
  fa::testing::StageConfig cfg;
  auto dt = fa::parse_dtype(args.str("dtype", "bf16"));
  if (!dt || fa::is_fp8(*dt)) throw fa::cli::UsageError("--dtype: expected fp16, bf16 or fp32");
  cfg.dtype = *dt;
  cfg.head_dim = static_cast<int>(args.integer("head-dim", 128, 8, fa::kMaxHeadDim));
  if (cfg.head_dim % 8) throw fa::cli::UsageError("--head-dim: expected a multiple of 8");
  // Default: the build's tiles, or 128 x 64 when the build leaves them to the planner.
  const int build_q = fa::default_tile_q() > 0 ? fa::default_tile_q() : 128;
  const int build_kv = fa::default_tile_kv() > 0 ? fa::default_tile_kv() : 64;
  cfg.tile_q = static_cast<int>(args.integer("tile-q", build_q, 16, 512));
  cfg.tile_kv = static_cast<int>(args.integer("tile-kv", build_kv, 16, 512));
  for (int t : {cfg.tile_q, cfg.tile_kv}) {
    if (t & (t - 1)) throw fa::cli::UsageError("--tile-q/--tile-kv: expected a power of two from 16 to 512");
  }
  cfg.tiles_per_item = static_cast<int>(args.integer("tiles", 32, 1, 4096));
  cfg.seconds = args.real("seconds", 0.2);
  if (!(cfg.seconds > 0 && cfg.seconds <= 60)) throw fa::cli::UsageError("--seconds: expected 0 < S <= 60");

  fa::testing::StageReport r{};
  if (!fa::testing::time_tile_stages(isa, cfg, &r)) throw fa::cli::UsageError("--isa: path not in this build");
  const double tq = cfg.tile_q, tkv = cfg.tile_kv, D = cfg.head_dim;
  const double gemm_flops = 2.0 * tq * tkv * D;
  double tile_ns = 0;
  for (int i = 0; i < r.count; ++i) tile_ns += r.stages[i].reference ? 0.0 : r.stages[i].ns;
  const double item_ns = tile_ns * cfg.tiles_per_item + r.item_overhead_ns;
  std::printf("fa2 stages: path=%s dtype=%s head_dim=%d tile=%dx%d, one thread, data in cache\n",
              std::string(fa::isa_name(isa)).c_str(), std::string(fa::dtype_name(cfg.dtype)).c_str(), cfg.head_dim,
              cfg.tile_q, cfg.tile_kv);
  std::printf("%-28s %10s %8s %10s %9s\n", "stage", "ns/tile", "share", "GFLOP/s", "of peak");
  for (int i = 0; i < r.count; ++i) {
    const fa::testing::Stage& s = r.stages[i];
    if (s.reference) continue;
    if (s.flops > 0) {
      std::printf("%-28s %10.0f %7.1f%% %10.1f %8.1f%%\n", s.name, s.ns, 100 * s.ns / tile_ns, s.flops / s.ns,
                  100 * s.flops / s.ns / r.peak_gflops_one_thread);
    } else {
      std::printf("%-28s %10.0f %7.1f%% %10s %9s\n", s.name, s.ns, 100 * s.ns / tile_ns, "-", "-");
    }
  }
  std::printf("%-28s %10.0f %7.1f%% %10.1f %8.1f%%\n", "tile total", tile_ns, 100.0, 2 * gemm_flops / tile_ns,
              100 * 2 * gemm_flops / tile_ns / r.peak_gflops_one_thread);
  for (int i = 0; i < r.count; ++i) {
    const fa::testing::Stage& s = r.stages[i];
    if (!s.reference) continue;
    std::printf("%-28s %10.0f %8s %10.1f %8.1f%%   (ceiling, not in the total)\n", s.name, s.ns, "", s.flops / s.ns,
                100 * s.flops / s.ns / r.peak_gflops_one_thread);
  }
  std::printf("per work item beyond its %d tiles (Q load, epilogue): %.0f ns = %.1f%% of the item\n",
              cfg.tiles_per_item, r.item_overhead_ns, 100 * r.item_overhead_ns / item_ns);
  std::printf("peak (%s probe, one thread): %.1f GFLOP/s\n", r.peak_unit, r.peak_gflops_one_thread);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return main_impl(argc, argv);
  } catch (const fa::cli::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
