// <version>_test: a matrix of correctness cases against the float64
// reference (dtypes, layouts, masks, GQA, odd and unequal lengths, tiles,
// thread counts, head dims), one line per case and a final
// "N passed, N failed" line.  Exit status 0 only when every case passes.
#include <array>
#include <iostream>
#include <string>
#include <vector>

#include "driver/attention_case.h"
#include "driver/cli_args.h"
#include "driver/test_options.h"
#include "driver/version_entry.h"

namespace {

using fa::DType;
using fa::Layout;
using fa::cli::CaseSpec;
using fa::cli::MaskMode;

struct Shape {
  std::int64_t batch, seq_q, seq_kv, heads, kv_heads, head_dim;
};

CaseSpec make_case(DType dtype, Layout layout, MaskMode mask, Shape s, int tile_q, int tile_kv, int threads,
                   int splits = 1) {
  CaseSpec c;
  c.dtype = dtype;
  c.layout = layout;
  c.mask = mask;
  c.params.batch = s.batch;
  c.params.seq_q = s.seq_q;
  c.params.seq_kv = s.seq_kv;
  c.params.num_heads = s.heads;
  c.params.num_kv_heads = s.kv_heads;
  c.params.head_dim = s.head_dim;
  c.params.tile_q = tile_q;
  c.params.tile_kv = tile_kv;
  c.params.threads = threads;
  c.params.num_splits = splits;
  return c;
}

std::vector<CaseSpec> build_matrix(DType dtype, bool quick) {
  std::vector<CaseSpec> cases;
  const Shape odd{2, 77, 77, 4, 2, 40};
  const MaskMode all_masks[] = {MaskMode::kNone, MaskMode::kCausal, MaskMode::kExplicit,
                                MaskMode::kCausalAndExplicit};
  // Every layout with every mask mode, on an odd shape with small tiles.
  for (Layout layout : {Layout::kBSH, Layout::kBSND, Layout::kBNSD}) {
    for (MaskMode mask : all_masks) {
      if (quick && layout == Layout::kBSND) continue;
      cases.push_back(make_case(dtype, layout, mask, odd, 32, 16, 2));
    }
  }
  // seq_q != seq_kv in both directions, and decoding (one query row).
  for (Shape s : {Shape{1, 33, 130, 2, 2, 64}, Shape{1, 130, 33, 2, 2, 64}, Shape{2, 1, 300, 4, 4, 64},
                  Shape{1, 5, 517, 3, 1, 32}}) {
    for (MaskMode mask : {MaskMode::kNone, MaskMode::kCausal}) {
      cases.push_back(make_case(dtype, Layout::kBSH, mask, s, 64, 32, 2));
    }
  }
  // Short queries packing every head of the batch (GQA 12/4, 3 rows: whole
  // and partial register blocks, keys not a multiple of the key blocks), in
  // a head-interleaved and a head-major layout.
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    cases.push_back(make_case(dtype, layout, MaskMode::kCausal, Shape{2, 3, 301, 12, 4, 40}, 16, 32, 1));
  }
  // Split-KV: decoding over a long cache, causal with seq_q != seq_kv (chunks
  // that see no key), an explicit mask, and the planner's automatic choice.
  cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kNone, Shape{1, 1, 1000, 2, 1, 64}, 16, 64, 2, 4));
  cases.push_back(make_case(dtype, Layout::kBNSD, MaskMode::kCausal, Shape{1, 40, 300, 2, 2, 32}, 16, 32, 2, 5));
  cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kCausalAndExplicit, Shape{2, 77, 77, 2, 1, 40}, 32, 16, 3, 3));
  cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 3, 700, 1, 1, 64}, 16, 32, 2, fa::kSplitsAuto));
  // Sparse modes: top-left causal, a sliding-window band, the explicit mask
  // with a band, and attention sinks (alone, and with a window and splits).
  {
    CaseSpec c = make_case(dtype, Layout::kBSH, MaskMode::kNone, Shape{1, 90, 130, 3, 3, 32}, 32, 16, 2);
    c.params.sparse_mode = fa::SparseMode::kCausalTopLeft;
    cases.push_back(c);
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 37;
    c.params.next_tokens = 5;
    cases.push_back(c);
    c.mask = MaskMode::kExplicit;
    c.params.sparse_mode = fa::SparseMode::kMaskAndBand;
    c.params.pre_tokens = 20;
    c.params.next_tokens = 64;
    cases.push_back(c);
    CaseSpec sinks = make_case(dtype, Layout::kBNSD, MaskMode::kCausal, Shape{2, 70, 50, 4, 2, 40}, 32, 16, 2);
    sinks.with_sinks = true;
    cases.push_back(sinks);
    sinks.mask = MaskMode::kNone;
    sinks.params.sparse_mode = fa::SparseMode::kBand;
    sinks.params.pre_tokens = 8;
    sinks.params.next_tokens = 0;
    sinks.params.num_splits = 3;
    cases.push_back(sinks);
  }
  // Score modifiers: soft-capping, ALiBi, an additive bias (shared and per
  // head), and all together with GQA, a band, sinks and splits.
  {
    CaseSpec c = make_case(dtype, Layout::kBSH, MaskMode::kNone, Shape{1, 60, 75, 4, 2, 32}, 32, 16, 2);
    c.params.softcap = 3.0f;
    c.input_scale = 3.0;  // logits well past the cap
    cases.push_back(c);
    c.params.softcap = 0.0f;
    c.input_scale = 1.0;
    c.with_alibi = true;
    c.mask = MaskMode::kCausal;
    cases.push_back(c);
    c.with_alibi = false;
    c.bias_heads = 1;
    cases.push_back(c);
    c.bias_heads = 4;
    c.with_alibi = true;
    c.with_sinks = true;
    c.params.softcap = 5.0f;
    c.mask = MaskMode::kNone;
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 30;
    c.params.next_tokens = 2;
    c.params.num_splits = 2;
    cases.push_back(c);
  }
  // Dropout, with GQA and causal, split and not.
  {
    CaseSpec c = make_case(dtype, Layout::kBNSD, MaskMode::kCausal, Shape{2, 66, 66, 6, 2, 40}, 32, 16, 3);
    c.params.keep_prob = 0.75f;
    c.params.dropout_seed = 42;
    cases.push_back(c);
    c.params.num_splits = 2;
    c.with_sinks = true;
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 16;
    c.params.next_tokens = 0;
    c.mask = MaskMode::kNone;
    cases.push_back(c);
  }
  // Variable-length packed sequences (TND): GQA + causal + dropout, an empty
  // sequence, and a sequence with queries but no keys; a sliding window with
  // sinks and ALiBi.
  {
    // (The shape's lengths are placeholders: run_case packs the sequences.)
    CaseSpec c = make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 64, 64, 6, 2, 32}, 32, 16, 3);
    c.seq_lens_q = {37, 0, 5, 64, 1};
    c.seq_lens_kv = {50, 10, 0, 64, 300};
    c.params.keep_prob = 0.8f;
    c.params.dropout_seed = 7;
    cases.push_back(c);
    c.params.keep_prob = 1.0f;
    c.mask = MaskMode::kNone;
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 12;
    c.params.next_tokens = 3;
    c.with_sinks = true;
    c.with_alibi = true;
    cases.push_back(c);
  }
  // A KV cache of mixed lengths (continuous batching): per-sequence key
  // counts with an empty sequence and one shorter than its queries (rows
  // with no key), GQA and causal; decoding split automatically, speculative
  // rows in a paged cache with sinks, and a tile-path chunk in explicit
  // splits with a window and ALiBi.  The keys past each count are NaN.
  {
    CaseSpec c = make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 1, 700, 8, 2, 64}, 16, 32, 2, fa::kSplitsAuto);
    c.cache_seqlens_kv = {700, 0, 33, 301};
    cases.push_back(c);
    c.params.seq_q = 3;
    c.layout = Layout::kBNSD;
    c.paged_block_size = 32;
    c.with_sinks = true;
    cases.push_back(c);
    c = make_case(dtype, Layout::kBSH, MaskMode::kNone, Shape{1, 20, 400, 4, 4, 32}, 16, 32, 3, 3);
    c.cache_seqlens_kv = {5, 400, 130};
    c.paged_block_size = 64;
    c.with_alibi = true;
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 90;
    c.params.next_tokens = 0;
    cases.push_back(c);
  }
  // The accuracy rule, every dtype: at most twice a same-dtype attention's
  // max error, on logits of a few units (a real softmax), with and without a
  // causal mask.
  for (MaskMode mask : {MaskMode::kNone, MaskMode::kCausal}) {
    CaseSpec c = make_case(dtype, Layout::kBSH, mask, Shape{1, 100, 140, 2, 2, 64}, 32, 32, 2);
    c.input_scale = 2.0;
    c.accuracy_rule = true;
    cases.push_back(c);
  }
  // GQA packing (short queries: one item per K/V head): group 4 with 3 query
  // rows, MQA with 16 heads, with a window, sinks, ALiBi and dropout.
  {
    CaseSpec c = make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{2, 3, 200, 8, 2, 48}, 16, 32, 2);
    cases.push_back(c);
    c = make_case(dtype, Layout::kBNSD, MaskMode::kNone, Shape{1, 1, 333, 16, 1, 64}, 16, 64, 2, fa::kSplitsAuto);
    c.with_sinks = true;
    c.with_alibi = true;
    c.params.keep_prob = 0.9f;
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 100;
    c.params.next_tokens = 0;
    cases.push_back(c);
  }
  // GQA and MQA.
  for (Shape s : {Shape{1, 96, 96, 8, 1, 64}, Shape{2, 50, 70, 6, 3, 48}}) {
    cases.push_back(make_case(dtype, Layout::kBNSD, MaskMode::kCausal, s, 32, 32, 2));
  }
  // Head dims from 8 to 256.
  for (std::int64_t d : {8, 24, 128, 256}) {
    if (quick && d == 24) continue;
    cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 70, 90, 2, 2, d}, 32, 32, 2));
  }
  if (!quick) {
    // Tile shapes, including tiles larger than the sequence.
    for (auto [tq, tkv] : {std::pair{16, 16}, {64, 32}, {128, 64}, {256, 128}, {512, 64}, {16, 512}}) {
      cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 200, 200, 2, 2, 64}, tq, tkv, 2));
    }
    // Thread counts: serial, odd, more threads than cores and than work items.
    for (int threads : {1, 3, 8, 64}) {
      cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{2, 150, 150, 3, 3, 32}, 32, 32, threads));
    }
    // Build defaults (tile 0 = FA_TILE_Q x FA_TILE_KV, threads 0 = all cores).
    cases.push_back(make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 300, 300, 2, 2, 64}, 0, 0, 0));
  }
  // Large logits (scores with a standard deviation of about 16).
  CaseSpec large = make_case(dtype, Layout::kBSH, MaskMode::kCausal, Shape{1, 64, 64, 2, 2, 64}, 32, 32, 2);
  large.input_scale = 4.0;
  cases.push_back(large);
  return cases;
}

int run(int argc, char** argv) {
  fa::cli::Args args(std::string(fa::cli::kVersionTag) + "_test", fa::cli::test_flags());
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << fa::cli::kVersionTitle << " correctness tests against the float64 reference\n"
              << args.help_text();
    return 0;
  }
  const fa::cli::TestOptions options = fa::cli::read_test_options(args, fa::cli::kVersion);
  const std::vector<DType>& dtypes = options.dtypes;
  const std::vector<fa::Isa>& paths = options.paths;
  const bool quick = options.quick, async = options.async;
  const std::uint64_t seed = options.seed;

  int passed = 0, failed = 0, skipped = 0;
  std::uint64_t case_seed = seed * 1000;
  for (fa::Isa isa : paths) {
  for (DType dtype : dtypes) {
    int index = 0;
    for (CaseSpec c : build_matrix(dtype, quick)) {
      c.seed = ++case_seed;
      if (async) c.params.async_prefetch = true;
      if (options.kv_dtype) {  // the reference reads the dequantized cache; no same-dtype yardstick for it
        c.kv_dtype = options.kv_dtype;
        c.accuracy_rule = false;
      }
      if (fa::is_fp8(dtype)) {  // every output dtype, and descale factors none, per tensor, per head
        c.out_dtype = std::array{DType::kBF16, DType::kF16, DType::kF32}[index % 3];
        c.descale = (index / 3) % 3;
        c.accuracy_rule = false;  // no same-dtype FP8 attention to compare with
      }
      ++index;
      c.params.isa = isa;
      // FA1 runs its fixed 64 x 64 tiles (0 = the version's default) on the
      // same shapes and features; what it does not offer (varlen, split-KV,
      // sinks) must be refused, cleanly, before any data is touched.
      if (fa::cli::kVersion == fa::Version::kFA1) c.params.tile_q = c.params.tile_kv = 0;
      if (const fa::Status lacks = fa::cli::case_supported(fa::cli::kVersion, c); !lacks.ok()) {
        const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
        const bool ok = r.status.code() == fa::StatusCode::kUnsupported && r.status.message() == lacks.message();
        (ok ? passed : failed)++;
        std::printf("[%s] %s  refused: %s\n", ok ? "PASS" : "FAIL", fa::cli::describe(c).c_str(),
                    r.status.ok() ? "(ran instead)" : r.status.message().c_str());
        continue;
      }
      // A plan beyond this CPU's L2 budget is refused by design (the planner
      // has its own tests); such a case is skipped here, not failed.
      fa::TilePlan plan;
      if (const fa::Status s = fa::plan(fa::cli::kVersion, c.params, dtype, &plan); !s.ok()) {
        ++skipped;
        std::printf("[SKIP] %s  %s\n", fa::cli::describe(c).c_str(), s.message().c_str());
        continue;
      }
      const bool kv_cache = !c.cache_seqlens_kv.empty() || c.paged_block_size > 0;
      if (options.backward && kv_cache) {  // an inference layout: the backward must refuse it
        const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward, fa::cli::kBackward);
        const bool ok = r.status.code() == fa::StatusCode::kUnsupported &&
                        r.status.message().find("inference") != std::string::npos;
        (ok ? passed : failed)++;
        std::printf("[%s] %s  backward refused: %s\n", ok ? "PASS" : "FAIL", fa::cli::describe(c).c_str(),
                    r.status.ok() ? "(ran instead)" : r.status.message().c_str());
        continue;
      }
      const fa::cli::CaseResult r =
          fa::cli::run_case(c, fa::cli::kForward, options.backward ? fa::cli::kBackward : nullptr);
      const bool ok = r.status.ok() && r.passed;
      (ok ? passed : failed)++;
      std::printf("[%s] %s", ok ? "PASS" : "FAIL", fa::cli::describe(c).c_str());
      if (!r.status.ok()) {
        std::printf("  error: %s\n", r.status.message().c_str());
      } else {
        std::printf("  rel_l2=%.2e (bound %.0e) max_abs=%.2e lse_err=%.1e nonfinite=%lld", r.rel_l2_error,
                    fa::cli::rel_l2_bound(dtype), r.max_abs_error, r.lse_max_error, (long long)r.nonfinite);
        if (c.accuracy_rule) std::printf(" same-dtype max_abs=%.2e (ours <= 2x)", r.yardstick_max_abs);
        if (options.backward) {
          std::printf(" grad_rel_l2=%.2e (%s; bound %.0e or the accuracy rule)", r.grad_rel_l2_error, r.worst_grad.c_str(),
                      fa::cli::grad_rel_l2_bound(dtype));
        }
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  }
  if (skipped) {
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  } else {
    std::printf("%d passed, %d failed\n", passed, failed);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const fa::cli::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
