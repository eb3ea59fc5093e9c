// The backward pass's argument checks (backward_checks.h).
#include "backward_checks.h"

#include <string>

#include "tensor_checks.h"

namespace fa::detail {

Status check_backward_inputs(const AttentionParams& p, const AttentionTensors& t, const TensorView& dout, const char* who) {
  const DType dt = t.q.dtype;
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) {
    return Status::Unsupported(std::string(who) + ": Q is " + std::string(dtype_name(dt)) +
                               " (the backward pass takes fp32, fp16 or bf16)");
  }
  if (t.k.dtype != dt || t.v.dtype != dt) {
    return Status::Unsupported(std::string(who) + ": K and V must have Q's dtype " + std::string(dtype_name(dt)) +
                               " (got " + std::string(dtype_name(t.k.dtype)) + " and " +
                               std::string(dtype_name(t.v.dtype)) + "; quantized caches are for inference)");
  }
  if (p.block_table || p.seqlens_kv) {
    return Status::Unsupported(std::string(who) + ": a paged KV cache or per-sequence key counts (seqlens_kv) are "
                               "inference layouts; train with contiguous or variable-length (cu_seqlens) tensors");
  }
  if (Status s = validate(p, t); !s.ok()) return s;
  const bool varlen = p.cu_seqlens_q || p.cu_seqlens_kv;
  return check_view("dO", dout, varlen ? 1 : p.batch, p.num_heads, p.seq_q, p.head_dim, dt);
}

Status check_backward_outputs(const AttentionParams& p, const AttentionTensors& t, const AttentionGrads& g) {
  const bool varlen = p.cu_seqlens_q || p.cu_seqlens_kv;
  const std::int64_t batch = varlen ? 1 : p.batch;
  // Each gradient in its input's dtype or in fp32.
  auto dtype_for = [&](const TensorView& v) { return v.dtype == DType::kF32 ? DType::kF32 : t.q.dtype; };
  if (Status s = check_view("dQ", g.dq, batch, p.num_heads, p.seq_q, p.head_dim, dtype_for(g.dq)); !s.ok()) return s;
  if (Status s = check_view("dK", g.dk, batch, p.kv_heads(), p.seq_kv, p.head_dim, dtype_for(g.dk), "K"); !s.ok()) return s;
  if (Status s = check_view("dV", g.dv, batch, p.kv_heads(), p.seq_kv, p.head_dim, dtype_for(g.dv), "V"); !s.ok()) return s;
  if (!t.lse) {
    return Status::Invalid("LSE: the backward pass needs the forward's log-sum-exp (tensors.lse, fp32 [batch, heads, seq_q])");
  }
  if (g.dbias && !p.bias) return Status::Invalid("dbias: the call has no bias tensor to take the gradient of");
  if (g.dsinks && !p.sinks) return Status::Invalid("dsinks: the call has no attention sinks to take the gradient of");
  return Status::Ok();
}

}  // namespace fa::detail
