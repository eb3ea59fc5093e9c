// onednn_products: the two products of attention alone, on oneDNN's bf16
// matmul, as the ceiling a FlashAttention kernel's products can be held to.
//
// For every (batch, query head, block of query rows), one thread runs, over
// blocks of keys: S = Q_blk · K_blkᵀ (bf16 in, fp32 out), then
// O += P_blk · V_blk (bf16 P, fp32 O accumulated by oneDNN's sum post-op).
// P is a fixed random bf16 block: no softmax, no masking arithmetic, no
// rescaling.  That is how a flash kernel's products run (blocks that stay in
// the core's cache, as PyTorch's CPU flash attention drives oneDNN's brgemm),
// so the time is "the products at the speed of the best GEMM library": our
// kernel, softmax included, is measured against it.  With --causal, key
// blocks wholly above the diagonal (bottom-right aligned, as ours) are
// skipped and the diagonal blocks run whole.
//
// Each blocking runs twice: with K and V read in place (oneDNN packs them
// as it goes, as our kernel packs them), and with K and V reordered into
// oneDNN's own layout before timing (the products alone, strictly).
//
// Work items are spread over OpenMP threads; oneDNN (OpenMP runtime in
// Debian's build) runs each call on its calling thread.  Each blocking of a
// small set (or the one given) is timed, and the fastest is reported: the
// peer gets its best.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>
#include <vector>

#include "driver/cli_args.h"
#include "driver/host_tensor.h"
#include "driver/report.h"

namespace {

using fa::cli::Args;
using fa::cli::FlagKind;
using fa::cli::Json;
using fa::cli::UsageError;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Shape {
  std::int64_t batch, seq_q, seq_kv, heads, kv_heads, head_dim;
  bool causal;
};

// `count` bf16 values, normal(0, scale), from the drivers' seeded generator.
std::vector<std::uint16_t> random_bf16(std::int64_t count, std::uint64_t seed, double scale) {
  std::vector<std::uint16_t> v(static_cast<std::size_t>(count));
  fa::cli::fill_normal(v.data(), fa::DType::kBF16, count, seed, scale);
  return v;
}

// One matmul shape: dst[m, n] (+)= src[m, k] · wei[k, n], the weights read
// through strides (Kᵀ of a row-major K block is wei with strides {1, D}), or,
// `packed`, in the layout oneDNN picks (`packed_as`: the one it picked for
// the whole block, so a cut block reads the same packed weights).
struct Product {
  dnnl::matmul prim;
  dnnl::memory::desc src, user_wei, wei, dst;  // wei: the layout the primitive reads (oneDNN's own when packed)
};

Product make_product(const dnnl::engine& eng, std::int64_t m, std::int64_t k, std::int64_t n, const dnnl::memory::dims& wei_strides,
                     dt dst_type, bool accumulate, bool packed, const dnnl::memory::desc* packed_as) {
  Product p;
  p.src = dnnl::memory::desc({m, k}, dt::bf16, tag::ab);
  p.user_wei = dnnl::memory::desc({k, n}, dt::bf16, wei_strides);
  p.wei = !packed ? p.user_wei : packed_as ? *packed_as : dnnl::memory::desc({k, n}, dt::bf16, tag::any);
  p.dst = dnnl::memory::desc({m, n}, dst_type, tag::ab);
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, p.wei, p.dst), attr, eng);
  p.prim = dnnl::matmul(pd);
  p.wei = pd.weights_desc();
  return p;
}

// The products of one whole call with query blocks of bq rows and key blocks
// of bk keys; returns the median wall time of `runs` timed calls, ms.
// `packed`: K and V blocks reordered into oneDNN's layout before timing (the
// products alone); else oneDNN reads them in place and packs as it goes.
double time_blocking(const Shape& s, std::int64_t bq, std::int64_t bk, bool packed, int threads, int warmups, int runs,
                     const std::vector<std::uint16_t>& q, const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v,
                     std::string* isa) {
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const std::int64_t D = s.head_dim;
  // Every shape a block can have: whole, or cut at the ends of the sequences.
  std::map<std::pair<std::int64_t, std::int64_t>, std::pair<Product, Product>> products;
  std::function<std::pair<Product, Product>&(std::int64_t, std::int64_t)> product_for = [&](std::int64_t m, std::int64_t n) -> std::pair<Product, Product>& {
    auto it = products.find({m, n});
    if (it == products.end()) {
      const dnnl::memory::desc *qk_as = nullptr, *pv_as = nullptr;
      if (packed && m != bq) {
        const auto& whole = product_for(bq, n);
        qk_as = &whole.first.wei;
        pv_as = &whole.second.wei;
      }
      it = products
               .emplace(std::make_pair(m, n), std::make_pair(make_product(eng, m, D, n, {1, D}, dt::f32, false, packed, qk_as),
                                                             make_product(eng, m, n, D, {D, 1}, dt::f32, true, packed, pv_as)))
               .first;
    }
    return it->second;
  };
  for (std::int64_t q0 = 0; q0 < s.seq_q; q0 += bq) {
    for (std::int64_t k0 = 0; k0 < s.seq_kv; k0 += bk) product_for(std::min(bq, s.seq_q - q0), std::min(bk, s.seq_kv - k0));
  }
  // The packed K and V blocks, [batch * kv_heads][key block].
  const std::int64_t kv_blocks = (s.seq_kv + bk - 1) / bk;
  std::vector<dnnl::memory> packed_k, packed_v;
  if (packed) {
    dnnl::stream stream(eng);
    for (std::int64_t bh = 0; bh < s.batch * s.kv_heads; ++bh) {
      for (std::int64_t k0 = 0; k0 < s.seq_kv; k0 += bk) {
        auto& [qk, pv] = product_for(std::min(bq, s.seq_q), std::min(bk, s.seq_kv - k0));
        dnnl::memory ku(qk.user_wei, eng, const_cast<std::uint16_t*>(k.data() + (bh * s.seq_kv + k0) * D)),
            vu(pv.user_wei, eng, const_cast<std::uint16_t*>(v.data() + (bh * s.seq_kv + k0) * D));
        packed_k.emplace_back(qk.wei, eng);
        packed_v.emplace_back(pv.wei, eng);
        dnnl::reorder(ku, packed_k.back()).execute(stream, ku, packed_k.back());
        dnnl::reorder(vu, packed_v.back()).execute(stream, vu, packed_v.back());
      }
    }
    stream.wait();
  }
  const std::int64_t q_blocks = (s.seq_q + bq - 1) / bq, items = s.batch * s.heads * q_blocks;
  const std::int64_t group = s.heads / s.kv_heads, shift = s.seq_kv - s.seq_q;  // causal diagonal, bottom-right
  std::vector<std::vector<float>> scores(threads), outputs(threads);
  std::vector<std::vector<std::uint16_t>> probs(threads);
  for (int t = 0; t < threads; ++t) {
    scores[t].assign(static_cast<std::size_t>(bq * bk), 0.0f);
    outputs[t].assign(static_cast<std::size_t>(bq * D), 0.0f);
    probs[t] = random_bf16(bq * bk, 7 + t, 0.5);
  }
  auto call = [&] {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      dnnl::stream stream(eng);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t item = 0; item < items; ++item) {
        const std::int64_t b = item / (s.heads * q_blocks), h = item / q_blocks % s.heads, q0 = item % q_blocks * bq;
        const std::int64_t m = std::min(bq, s.seq_q - q0), kvh = h / group;
        const std::uint16_t* qp = q.data() + ((b * s.heads + h) * s.seq_q + q0) * D;
        const std::uint16_t* kp = k.data() + (b * s.kv_heads + kvh) * s.seq_kv * D;
        const std::uint16_t* vp = v.data() + (b * s.kv_heads + kvh) * s.seq_kv * D;
        const std::int64_t kv_end = s.causal ? std::min(s.seq_kv, q0 + m + shift) : s.seq_kv;
        bool first = true;
        for (std::int64_t k0 = 0; k0 < kv_end; k0 += bk) {
          const std::int64_t n = std::min(bk, s.seq_kv - k0);
          auto& [qk, pv] = product_for(m, n);
          const std::int64_t block = (b * s.kv_heads + kvh) * kv_blocks + k0 / bk;
          dnnl::memory src(qk.src, eng, const_cast<std::uint16_t*>(qp)), dst(qk.dst, eng, scores[t].data());
          const dnnl::memory wei = packed ? packed_k[block] : dnnl::memory(qk.wei, eng, const_cast<std::uint16_t*>(kp + k0 * D));
          qk.prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
          if (first) std::fill(outputs[t].begin(), outputs[t].end(), 0.0f);  // the first block's sum reads O
          first = false;
          dnnl::memory p(pv.src, eng, probs[t].data()), o(pv.dst, eng, outputs[t].data());
          const dnnl::memory vv = packed ? packed_v[block] : dnnl::memory(pv.wei, eng, const_cast<std::uint16_t*>(vp + k0 * D));
          pv.prim.execute(stream, {{DNNL_ARG_SRC, p}, {DNNL_ARG_WEIGHTS, vv}, {DNNL_ARG_DST, o}});
        }
        stream.wait();
      }
    }
  };
  for (int i = 0; i < warmups; ++i) call();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  if (isa) {
    const int effective = static_cast<int>(dnnl::get_effective_cpu_isa()), amx = static_cast<int>(dnnl_cpu_isa_avx512_core_amx);
    *isa = (effective & amx) == amx ? "AMX" : "no AMX";
  }
  return ms[ms.size() / 2];
}

int run(int argc, char** argv) {
  using K = FlagKind;
  Args args("onednn_products",
            {{"batch-size", K::kInt, "N", "batch (default 1)"},
             {"seq-q", K::kInt, "N", "query rows (default 4096)"},
             {"seq-kv", K::kInt, "N", "keys (default: --seq-q)"},
             {"num-heads", K::kInt, "N", "query heads (default 16)"},
             {"num-kv-heads", K::kInt, "N", "key/value heads, divides --num-heads (default: --num-heads)"},
             {"head-dim", K::kInt, "N", "head dimension (default 128)"},
             {"dtype", K::kString, "bf16", "the inputs' type (bf16 only: the tile unit's)"},
             {"causal", K::kBool, "", "skip the key blocks above the diagonal (bottom-right aligned)"},
             {"threads", K::kInt, "N", "threads (default: all cores)"},
             {"num-runs", K::kInt, "N", "timed calls per blocking; the median is kept (default 5)"},
             {"warmup-runs", K::kInt, "N", "untimed calls per blocking first (default 5)"},
             {"block-q", K::kInt, "N", "query rows per block (default: the fastest of 64, 128, 256)"},
             {"block-kv", K::kInt, "N", "keys per block (default: the fastest of 256, 512, 1024)"},
             {"json", K::kBool, "", "print the results as one JSON object on the last line"},
             {"help", K::kBool, "", "print this help"}});
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "The products of attention alone (Q·Kᵀ and P·V, bf16, fp32 accumulation) on oneDNN's matmul\n"
              << args.help_text();
    return 0;
  }
  Shape s;
  s.batch = args.integer("batch-size", 1, 1, 1 << 16);
  s.seq_q = args.integer("seq-q", 4096, 1, 1 << 20);
  s.seq_kv = args.integer("seq-kv", s.seq_q, 1, 1 << 20);
  s.heads = args.integer("num-heads", 16, 1, 4096);
  s.kv_heads = args.integer("num-kv-heads", s.heads, 1, 4096);
  s.head_dim = args.integer("head-dim", 128, 1, 1024);
  s.causal = args.flag("causal");
  if (s.heads % s.kv_heads != 0) {
    throw UsageError("--num-kv-heads=" + std::to_string(s.kv_heads) + " is not valid: expected a divisor of --num-heads " +
                     std::to_string(s.heads));
  }
  if (args.str("dtype", "bf16") != "bf16") throw UsageError("--dtype=" + args.str("dtype") + " is not valid: expected bf16");
  if (s.causal && s.seq_q > s.seq_kv) {
    throw UsageError("--causal: seq_q " + std::to_string(s.seq_q) + " > seq_kv " + std::to_string(s.seq_kv) +
                     " leaves rows with no key: expected seq_q <= seq_kv");
  }
  const int threads = static_cast<int>(args.integer("threads", omp_get_num_procs(), 1, 4096));
  const int runs = static_cast<int>(args.integer("num-runs", 5, 1, 100000));
  const int warmups = static_cast<int>(args.integer("warmup-runs", 5, 0, 100000));
  std::vector<std::int64_t> bqs{64, 128, 256}, bks{256, 512, 1024};
  if (args.has("block-q")) bqs = {args.integer("block-q", 0, 1, 1 << 20)};
  if (args.has("block-kv")) bks = {args.integer("block-kv", 0, 1, 1 << 20)};

  const auto q = random_bf16(s.batch * s.heads * s.seq_q * s.head_dim, 1, 1.0);
  const auto k = random_bf16(s.batch * s.kv_heads * s.seq_kv * s.head_dim, 2, 1.0);
  const auto v = random_bf16(s.batch * s.kv_heads * s.seq_kv * s.head_dim, 3, 1.0);
  // FLOPs as fa2_benchmark counts them: the query-key pairs that may attend.
  double pairs = 0;
  for (std::int64_t i = 0; i < s.seq_q; ++i) pairs += s.causal ? double(std::min(s.seq_kv, i + 1 + s.seq_kv - s.seq_q)) : double(s.seq_kv);
  const double flops = 4.0 * double(s.batch * s.heads * s.head_dim) * pairs;

  double best = 0;
  std::int64_t best_q = 0, best_kv = 0;
  bool best_packed = false;
  std::string isa;
  for (const std::int64_t bq : bqs) {
    for (const std::int64_t bk : bks) {
      std::printf("Blocking: Q=%lld KV=%lld ", static_cast<long long>(bq), static_cast<long long>(bk));
      for (const bool packed : {false, true}) {
        const double ms = time_blocking(s, std::min(bq, s.seq_q), std::min(bk, s.seq_kv), packed, threads, warmups, runs, q, k, v, &isa);
        std::printf(" K/V packed %s: %.4f ms", packed ? "ahead" : "in the call", ms);
        if (best == 0 || ms < best) best = ms, best_q = bq, best_kv = bk, best_packed = packed;
      }
      std::printf("\n");
    }
  }
  const dnnl_version_t* ver = dnnl_version();
  std::printf("Config: batch=%lld seq_q=%lld seq_kv=%lld heads=%lld kv_heads=%lld head_dim=%lld dtype=bf16 causal=%d threads=%d\n",
              static_cast<long long>(s.batch), static_cast<long long>(s.seq_q), static_cast<long long>(s.seq_kv),
              static_cast<long long>(s.heads), static_cast<long long>(s.kv_heads), static_cast<long long>(s.head_dim), s.causal ? 1 : 0,
              threads);
  std::printf("Kernel: oneDNN %d.%d.%d matmul (%s), products only, blocks Q=%lld KV=%lld, K/V packed %s\n", ver->major, ver->minor,
              ver->patch, isa.c_str(), static_cast<long long>(best_q), static_cast<long long>(best_kv),
              best_packed ? "ahead (untimed)" : "in the call");
  std::printf("Latency: %.4f ms (median of %d runs)\n", best, runs);
  std::printf("Throughput: %.5g TFLOPS\n", flops / (best * 1e-3) / 1e12);
  if (args.flag("json")) {
    Json j;
    j["kernel"] = "onednn-products";
    j["onednn_version"] = std::to_string(ver->major) + "." + std::to_string(ver->minor) + "." + std::to_string(ver->patch);
    j["amx"] = isa == "AMX";
    j["block_q"] = best_q;
    j["block_kv"] = best_kv;
    j["kv_packed_ahead"] = best_packed;
    j["threads"] = threads;
    j["latency_ms"] = best;
    j["tflops"] = flops / (best * 1e-3) / 1e12;
    std::cout << fa::cli::json_text(j) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return fa::cli::run_guarded(run, argc, argv);
  } catch (const dnnl::error& e) {
    // No bf16 matmul in this oneDNN for this CPU (2.x: none without
    // AVX-512): exit 77, the test runners' "skipped" (bench/compare_peers
    // lists the peer as skipped).
    if (e.status == dnnl_unimplemented) {
      const dnnl_version_t* v = dnnl_version();
      std::fprintf(stderr, "skipped: oneDNN %d.%d has no bf16 matmul on this CPU (%s)\n", v->major, v->minor, e.what());
      return 77;
    }
    std::fprintf(stderr, "error: oneDNN: %s\n", e.what());
    return 1;
  }
}
