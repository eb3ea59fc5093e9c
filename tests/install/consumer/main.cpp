// Runs one small RoPE and one small attention call through an installed
// librope and libflash_attention_fa2 and checks each against its library's
// float64 reference: proves the headers,
// the link and the run-time loading of an install, not the kernels (the
// test suite checks those).
#include <flash_attention/flash_attention.h>
#include <rope/rope.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  fa::AttentionParams p;
  p.batch = 1;
  p.seq_q = 37;
  p.seq_kv = 53;
  p.num_heads = 2;
  p.head_dim = 16;
  p.causal = true;
  const std::size_t q_n = std::size_t(p.seq_q) * p.num_heads * p.head_dim;
  const std::size_t kv_n = std::size_t(p.seq_kv) * p.num_heads * p.head_dim;
  std::vector<float> q(q_n), k(kv_n), v(kv_n), o(q_n, NAN);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);
  fa::AttentionTensors t;
  t.q = fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
  t.k = fa::make_view(k.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_kv, p.head_dim);
  t.v = fa::make_view(v.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_kv, p.head_dim);
  t.o = fa::make_view(o.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
  // RoPE on Q first (in place), against its reference taken before.
  fa::RopeTensors rt;
  rt.q = t.q;
  std::vector<double> q_ref(q_n);
  fa::Status s = fa::rope_reference(fa::RopeParams{}, rt, q_ref.data(), nullptr);
  if (s.ok()) s = fa::rope_forward(fa::RopeParams{}, rt);
  if (!s.ok()) {
    std::printf("consumer: rope failed: %s\n", s.message().c_str());
    return 1;
  }
  double rope_worst = 0;
  for (std::int64_t h = 0; h < p.num_heads; ++h)
    for (std::int64_t i = 0; i < p.seq_q; ++i)
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        const double err = std::fabs(q[static_cast<std::size_t>(rt.q.offset(0, h, i, d))] - q_ref[static_cast<std::size_t>((h * p.seq_q + i) * p.head_dim + d)]);
        if (!(err <= rope_worst)) rope_worst = err;
      }
  const bool rope_pass = rope_worst <= 1e-5;
  std::printf("consumer: rope_forward vs reference, max abs error %.3g: %s\n", rope_worst, rope_pass ? "PASS" : "FAIL");
  if (!rope_pass) return 1;

  s = fa::fa2_forward(p, t);
  if (!s.ok()) {
    std::printf("consumer: fa2_forward failed: %s\n", s.message().c_str());
    return 1;
  }
  std::vector<double> ref(q_n);
  s = fa::reference_forward(p, t, ref.data(), nullptr);
  if (!s.ok()) {
    std::printf("consumer: reference_forward failed: %s\n", s.message().c_str());
    return 1;
  }
  double worst = 0;
  for (std::size_t i = 0; i < q_n; ++i) {
    const double err = std::fabs(o[i] - ref[i]);
    if (!(err <= worst)) worst = err;  // a NaN makes worst NaN, which fails below
  }
  const bool pass = worst <= 1e-5;
  std::printf("consumer: fa2_forward vs reference, max abs error %.3g: %s\n", worst, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
