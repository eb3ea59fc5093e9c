#!/usr/bin/env python3
"""Generate FlashAttention test inputs (the guide's section 4.1).

Writes, into --output-dir (default ./test_data):
  input_Q.bin            [batch, seq_len_q,  num_heads    * head_dim]  dtype
  input_K.bin            [batch, seq_len_kv, num_kv_heads * head_dim]  dtype
  input_V.bin            [batch, seq_len_kv, num_kv_heads * head_dim]  dtype
  input_causal_mask.bin  [seq_len_q, seq_len_kv] int8, 1 = may attend
  config.txt             key=value lines describing the above

Defaults are the guide's: batch 2, sequence 512, 12 heads, head_dim 64, fp16.
The mask is the causal one aligned bottom-right (query i may attend key j when
j <= i + seq_len_kv - seq_len_q) with --causal (the default), all ones with
--no-causal.  bf16 data is stored as its 16-bit patterns (NumPy has no bf16).
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


def generate_attention_inputs(batch_size=2, seq_len_q=512, seq_len_kv=512, num_heads=12, num_kv_heads=None,
                              head_dim=64, dtype="fp16", output_dir="./test_data", seed=0, causal=True,
                              layout="BSH", logit_scale=1.0):
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
    files = [("input_Q", fa_data.to_storage(np.ascontiguousarray(q), dtype)),
             ("input_K", fa_data.to_storage(np.ascontiguousarray(k), dtype)),
             ("input_V", fa_data.to_storage(np.ascontiguousarray(v), dtype)),
             ("input_causal_mask", mask)]
    for name, arr in files:
        path = os.path.join(output_dir, f"{name}.bin")
        fa_data.write_atomic(path, arr.tobytes())
        shown = "int8" if name == "input_causal_mask" else dtype
        print(f"  Saved: {path}  shape={arr.shape}  dtype={shown}")
    config = (f"batch_size={batch_size}\nseq_len_q={seq_len_q}\nseq_len_kv={seq_len_kv}\n"
              f"num_heads={num_heads}\nnum_kv_heads={num_kv_heads}\nhead_dim={head_dim}\n"
              f"dtype={fa_data.DTYPES[dtype][0]}\nlayout={layout}\ncausal={'true' if causal else 'false'}\n"
              f"seed={seed}\nlogit_scale={logit_scale}\n")
    fa_data.write_atomic(os.path.join(output_dir, "config.txt"), config.encode())
    print(f"  Saved: {os.path.join(output_dir, 'config.txt')}")
    print("Done.")


def main(argv=None):
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=positive, default=2)
    p.add_argument("--seq-len-q", type=positive, default=512)
    p.add_argument("--seq-len-kv", type=positive, default=None, help="default: --seq-len-q")
    p.add_argument("--num-heads", type=positive, default=12)
    p.add_argument("--num-kv-heads", type=positive, default=None, help="GQA/MQA; default: --num-heads")
    p.add_argument("--head-dim", type=positive, default=64)
    p.add_argument("--dtype", default="fp16", help="fp16, bf16 or fp32 (default fp16)")
    p.add_argument("--layout", default="BSH", help="BSH (default), BSND or BNSD")
    p.add_argument("--output-dir", default="./test_data")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True,
                   help="write the causal mask (default) or an all-ones mask")
    p.add_argument("--logit-scale", type=float, default=1.0,
                   help="multiply Q and K by this (logits grow with its square)")
    a = p.parse_args(argv)
    try:
        dtype = fa_data.parse_dtype(a.dtype)
    except fa_data.InputError as e:
        fa_data.fail_input(f"--dtype: {e}")
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
                                  a.head_dim, dtype, a.output_dir, a.seed, a.causal, layout, a.logit_scale)
    except MemoryError:
        fa_data.fail_input("this shape does not fit in memory; use a smaller shape")
    except OSError as e:
        fa_data.fail_input(f"--output-dir: {e}")


if __name__ == "__main__":
    main()
