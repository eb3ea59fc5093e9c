#!/usr/bin/env python3
"""Generate FlashAttention test inputs (the guide's section 4.1).

Writes, into --output-dir (default ./test_data):
  input_Q.bin            [batch, seq_len_q,  num_heads    * head_dim]  dtype
  input_K.bin            [batch, seq_len_kv, num_kv_heads * head_dim]  dtype
  input_V.bin            [batch, seq_len_kv, num_kv_heads * head_dim]  dtype
  input_causal_mask.bin  [seq_len_q, seq_len_kv] int8, 1 = may attend
  input_dO.bin           with --backward: the upstream gradient dO, Q's shape and dtype
  config.txt             key=value lines describing the above

Defaults are the guide's: batch 2, sequence 512, 12 heads, head_dim 64, fp16.
The mask is the causal one aligned bottom-right (query i may attend key j when
j <= i + seq_len_kv - seq_len_q) with --causal (the default), all ones with
--no-causal.  bf16 data is stored as its 16-bit patterns (NumPy has no bf16).

FP8 (--dtype fp8_e4m3 or fp8_e5m2, for FA3): each tensor is quantized with
one scale, its largest magnitude mapped to the format's largest finite value;
config.txt records the dequantization factors (descale_q, descale_k,
descale_v) and the output dtype (--out-dtype, default bf16), and
unquantized_{Q,K,V}.bin keep the fp32 values before quantization (for
extended_verification.py's quantization error).

A quantized K/V cache (--kv-dtype int8, fp8_e4m3 or fp8_e5m2, with --dtype
fp16 or bf16): the inputs are written as usual and config.txt records
kv_dtype; fa2_benchmark --kv-dtype quantizes K and V as it loads them, and
the verification scripts compute the reference on the same quantized
values (and report the error against the unquantized ones).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import fa_data  # noqa: E402


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fa_data.fail_input(message)


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def quantize_fp8(x, dtype):
    """One scale per tensor: the largest magnitude maps to the largest finite
    value.  Returns (FP8 codes, descale factor)."""
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    descale = amax / fa_data.FP8_FORMATS[dtype][2] if amax > 0 else 1.0
    return fa_data.f32_to_fp8_bits(x / descale, dtype), descale


def generate_attention_inputs(batch_size=2, seq_len_q=512, seq_len_kv=512, num_heads=12, num_kv_heads=None,
                              head_dim=64, dtype="fp16", output_dir="./test_data", seed=0, causal=True,
                              layout="BSH", logit_scale=1.0, out_dtype=None, kv_dtype=None, backward=False):
    num_kv_heads = num_kv_heads or num_heads
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch_size, seq_len_q, num_heads * head_dim), dtype=np.float32)
    k = rng.standard_normal((batch_size, seq_len_kv, num_kv_heads * head_dim), dtype=np.float32)
    v = rng.standard_normal((batch_size, seq_len_kv, num_kv_heads * head_dim), dtype=np.float32)
    q *= np.float32(logit_scale)
    k *= np.float32(logit_scale)
    if layout == "BNSD":  # [B, S, N*D] -> [B, N, S, D]
        q = q.reshape(batch_size, seq_len_q, num_heads, head_dim).transpose(0, 2, 1, 3)
        k = k.reshape(batch_size, seq_len_kv, num_kv_heads, head_dim).transpose(0, 2, 1, 3)
        v = v.reshape(batch_size, seq_len_kv, num_kv_heads, head_dim).transpose(0, 2, 1, 3)
    mask = fa_data.causal_mask(seq_len_q, seq_len_kv) if causal else np.ones((seq_len_q, seq_len_kv), np.int8)

    os.makedirs(output_dir, exist_ok=True)
    print("Generating FlashAttention test data...")
    tensors = {"Q": np.ascontiguousarray(q), "K": np.ascontiguousarray(k), "V": np.ascontiguousarray(v)}
    if backward:  # dO: Q's shape and layout, drawn after Q, K and V so they stay the same
        tensors["dO"] = np.ascontiguousarray(rng.standard_normal(q.shape, dtype=np.float32))
    descale = {}
    if dtype in fa_data.FP8:
        files = []
        for name, x in tensors.items():
            codes, descale[name] = quantize_fp8(x, dtype)
            files.append((f"input_{name}", codes))
        files += [(f"unquantized_{name}", x.astype(np.float32)) for name, x in tensors.items()]
        files.append(("input_causal_mask", mask))
    else:
        files = [(f"input_{name}", fa_data.to_storage(x, dtype)) for name, x in tensors.items()]
        files.append(("input_causal_mask", mask))
    for name, arr in files:
        path = os.path.join(output_dir, f"{name}.bin")
        fa_data.write_atomic(path, arr.tobytes())
        shown = "int8" if name == "input_causal_mask" else "fp32" if name.startswith("unquantized") else dtype
        print(f"  Saved: {path}  shape={arr.shape}  dtype={shown}")
    config = (f"batch_size={batch_size}\nseq_len_q={seq_len_q}\nseq_len_kv={seq_len_kv}\n"
              f"num_heads={num_heads}\nnum_kv_heads={num_kv_heads}\nhead_dim={head_dim}\n"
              f"dtype={fa_data.DTYPES[dtype][0]}\nlayout={layout}\ncausal={'true' if causal else 'false'}\n"
              f"seed={seed}\nlogit_scale={logit_scale}\n")
    if kv_dtype:
        config += f"kv_dtype={kv_dtype}\n"
    if backward:
        config += "backward=true\n"
    if dtype in fa_data.FP8:
        out_dtype = out_dtype or "bf16"
        config += (f"out_dtype={fa_data.DTYPES[out_dtype][0]}\ndescale_q={descale['Q']!r}\n"
                   f"descale_k={descale['K']!r}\ndescale_v={descale['V']!r}\n")
    fa_data.write_atomic(os.path.join(output_dir, "config.txt"), config.encode())
    print(f"  Saved: {os.path.join(output_dir, 'config.txt')}")
    if dtype in fa_data.FP8:
        print(f"  Run fa3_benchmark with: --dtype={dtype} --out-dtype={out_dtype} --descale-q={descale['Q']!r} "
              f"--descale-k={descale['K']!r} --descale-v={descale['V']!r}")
    if kv_dtype:
        print(f"  Run fa2_benchmark (or fa3_benchmark) with: --dtype={dtype} --kv-dtype={kv_dtype}")
    if backward:
        print(f"  Run fa2_benchmark with: --backward --input-do={os.path.join(output_dir, 'input_dO.bin')} "
              "--output-dq=dq.bin --output-dk=dk.bin --output-dv=dv.bin")
    print("Done.")


def main(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=positive, default=2)
    p.add_argument("--seq-len-q", type=positive, default=512)
    p.add_argument("--seq-len-kv", type=positive, default=None, help="default: --seq-len-q")
    p.add_argument("--num-heads", type=positive, default=12)
    p.add_argument("--num-kv-heads", type=positive, default=None, help="GQA/MQA; default: --num-heads")
    p.add_argument("--head-dim", type=positive, default=64)
    p.add_argument("--dtype", default="fp16", help="fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2 (default fp16)")
    p.add_argument("--out-dtype", default=None, help="FP8 inputs: the output's dtype, bf16 (default), fp16 or fp32")
    p.add_argument("--kv-dtype", default=None,
                   help="a quantized K/V cache read with fp16 or bf16 Q: int8, fp8_e4m3 or fp8_e5m2 (recorded in config.txt)")
    p.add_argument("--layout", default="BSH", help="BSH (default), BSND or BNSD")
    p.add_argument("--output-dir", default="./test_data")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="write the causal mask (default) or an all-ones mask")
    p.add_argument("--logit-scale", type=float, default=1.0,
                   help="multiply Q and K by this (logits grow with its square)")
    p.add_argument("--backward", action="store_true",
                   help="also write input_dO.bin, the upstream gradient for fa2_benchmark --backward")
    a = p.parse_args(argv)
    try:
        dtype = fa_data.parse_dtype(a.dtype)
    except fa_data.InputError as e:
        fa_data.fail_input(f"--dtype: {e}")
    if a.out_dtype is not None and (dtype not in fa_data.FP8 or a.out_dtype not in fa_data.OUTPUT_DTYPES):
        fa_data.fail_input(f"--out-dtype: '{a.out_dtype}' needs FP8 --dtype and one of bf16, fp16 or fp32")
    if a.kv_dtype is not None and (a.kv_dtype not in fa_data.KV_CACHE_DTYPES or dtype not in ("fp16", "bf16")):
        fa_data.fail_input(f"--kv-dtype: '{a.kv_dtype}' needs --dtype fp16 or bf16 and one of int8, fp8_e4m3 or fp8_e5m2")
    if a.backward and (dtype in fa_data.FP8 or a.kv_dtype is not None):
        fa_data.fail_input("--backward: the backward pass takes fp16, bf16 or fp32 inputs without a quantized cache "
                           f"(got --dtype {dtype}{' --kv-dtype ' + a.kv_dtype if a.kv_dtype else ''})")
    layout = a.layout.upper()
    if layout not in fa_data.LAYOUTS:
        fa_data.fail_input(f"--layout: unknown layout '{a.layout}' (expected BSH, BSND or BNSD)")
    if a.head_dim % 8:
        fa_data.fail_input(f"--head-dim: {a.head_dim} is not a multiple of 8")
    kv_heads = a.num_kv_heads or a.num_heads
    if a.num_heads % kv_heads:
        fa_data.fail_input(f"--num-kv-heads: {kv_heads} does not divide --num-heads={a.num_heads}")
    if not np.isfinite(a.logit_scale) or a.logit_scale <= 0:
        fa_data.fail_input(f"--logit-scale: expected a positive finite number (got {a.logit_scale})")
    try:
        generate_attention_inputs(a.batch_size, a.seq_len_q, a.seq_len_kv or a.seq_len_q, a.num_heads, kv_heads,
                                  a.head_dim, dtype, a.output_dir, a.seed, a.causal, layout, a.logit_scale,
                                  a.out_dtype, a.kv_dtype, a.backward)
    except MemoryError:
        fa_data.fail_input("this shape does not fit in memory; use a smaller shape")
    except OSError as e:
        fa_data.fail_input(f"--output-dir: {e}")


if __name__ == "__main__":
    main()
