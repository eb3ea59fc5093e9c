#!/usr/bin/env python3
"""Extended correctness report (the guide's code block 8): max and mean
absolute error, max and mean relative error, ulps, Inf and NaN counts, the
relative L2 error, and Overall PASS/FAIL.

  extended_verification.py [OUTPUT [Q [K [V]]]] [--config PATH] [--mask PATH] [--tolerance X]
  extended_verification.py --in-process [--version N] [Q [K [V]]] [...]

Shapes, dtype, layout and causality come from config.txt beside Q (not the
guide's constants).  `ulps` is the largest error in units of the output
dtype's last place at the reference value (the guide divides by fp32's
epsilon whatever the dtype, which measures nothing in particular).
Overall PASS: max abs error below the tolerance (default by the output's
dtype: 1e-2 fp16, 2e-2 bf16, 1e-4 fp32) and no Inf or NaN.  For FP8 inputs
the report adds the error against attention on the unquantized data
(unquantized_{Q,K,V}.bin beside Q, written by gen_fa2_test_data.py): the
quantization error itself, reported, not judged.  Likewise for a quantized
K/V cache (config kv_dtype, fa2_benchmark --kv-dtype): judged against the
reference on the cache's dequantized values, and the error against the
inputs as given (the unquantized cache) reported beside it.
With --in-process (the Python package ops_transformer importable), the
output is computed here by the library from the same input files instead of
read from OUTPUT (see verify_correctness.py).
Exit status: 0 PASS, 1 FAIL, 2 bad input.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import fa_data  # noqa: E402

# Spacing of representable values at 1.0 (the ulp at x is this x 2^floor(log2 |x|)).
ULP_AT_ONE = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7, "fp32": 2.0 ** -23}


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fa_data.fail_input(message)


def metrics(out, ref, dtype):
    finite = np.isfinite(out)
    diff = np.abs(np.where(finite, out, 0.0) - ref)[finite]
    refs = ref[finite]
    rel = diff / (np.abs(refs) + 1e-8)
    # ulp of the dtype at each reference value (subnormals: the smallest normal's).
    exponent = np.floor(np.log2(np.maximum(np.abs(refs), 2.0 ** -14)))
    ulp = ULP_AT_ONE[dtype] * 2.0 ** exponent
    l2 = np.sqrt(np.sum((np.where(finite, out, 0.0) - ref) ** 2) / max(np.sum(ref ** 2), 1e-300))
    empty = diff.size == 0
    return {
        "max_abs_error": float("nan") if empty else float(diff.max()),
        "mean_abs_error": float("nan") if empty else float(diff.mean()),
        "max_rel_error": float("nan") if empty else float(rel.max()),
        "mean_rel_error": float("nan") if empty else float(rel.mean()),
        "ulps": 0 if empty else int(np.ceil((diff / ulp).max())),
        "inf_count": int(np.isinf(out).sum()),
        "nan_count": int(np.isnan(out).sum()),
        "rel_l2_error": float(l2),
    }


def unquantized_error(case, q_path):
    """The output's error against attention on the fp32 data before FP8
    quantization, when unquantized_{Q,K,V}.bin are beside Q."""
    cfg, d = case["cfg"], os.path.dirname(os.path.abspath(q_path))
    b, sq, skv, h, hkv, hd = (cfg[k] for k in ("batch_size", "seq_len_q", "seq_len_kv", "num_heads", "num_kv_heads",
                                                "head_dim"))
    raw = {}
    for name, seq, heads in (("Q", sq, h), ("K", skv, hkv), ("V", skv, hkv)):
        path = os.path.join(d, f"unquantized_{name}.bin")
        raw[name] = fa_data.to_bnsd(fa_data.load_tensor(path, "fp32", b * seq * heads * hd, f"unquantized {name}"),
                                    b, seq, heads, hd, cfg["layout"])
    ref = fa_data.reference_attention(raw["Q"], raw["K"], raw["V"], case["mask"])
    ref = ref.transpose(0, 2, 1, 3).reshape(case["out"].shape)
    diff = np.abs(case["out"] - ref)
    return {"max_abs_error": float(diff.max()),
            "rel_l2_error": float(np.sqrt(np.sum(diff ** 2) / max(np.sum(ref ** 2), 1e-300)))}


def unquantized_cache_error(case):
    """The output's error against attention on K and V as given, before the
    cache's quantization (kv_dtype)."""
    ref = fa_data.reference_attention(case["q"], case["k_unquantized"], case["v_unquantized"], case["mask"])
    ref = ref.transpose(0, 2, 1, 3).reshape(case["out"].shape)
    diff = np.abs(case["out"] - ref)
    return {"max_abs_error": float(diff.max()),
            "rel_l2_error": float(np.sqrt(np.sum(diff ** 2) / max(np.sum(ref ** 2), 1e-300)))}


def main():
    p = OneLineParser(description="Extended correctness metrics against a float64 reference.")
    p.add_argument("output", nargs="?", default="./output_attention.bin")
    p.add_argument("q", nargs="?", default="../../test_data/input_Q.bin")
    p.add_argument("k", nargs="?", default="../../test_data/input_K.bin")
    p.add_argument("v", nargs="?", default="../../test_data/input_V.bin")
    p.add_argument("--config", default=None)
    p.add_argument("--mask", default=None)
    p.add_argument("--tolerance", type=float, default=None)
    fa_data.add_in_process_arguments(p)
    a = p.parse_args()
    fa_data.shift_in_process_positionals(p, a)
    try:
        out = fa_data.in_process_output(a.q, a.k, a.v, a.config, a.mask, a.version) if a.in_process else None
        case = fa_data.load_case(a.output, a.q, a.k, a.v, a.config, a.mask, out=out)
    except fa_data.InputError as e:
        fa_data.fail_input(str(e))
    cfg = case["cfg"]
    dtype = cfg["out_dtype"]
    tol = fa_data.DEFAULT_TOLERANCE[dtype] if a.tolerance is None else a.tolerance
    m = metrics(case["out"], case["ref"], dtype)
    quantization = None
    if cfg["dtype"] in fa_data.FP8:
        quantization = unquantized_error(case, a.q)
    elif cfg["kv_dtype"]:
        quantization = unquantized_cache_error(case)
    print("\n" + "=" * 55)
    print("  Correctness Verification Report")
    print("=" * 55)
    for k, v in m.items():
        print(f"  {k:<22}: {v:.6e}" if isinstance(v, float) else f"  {k:<22}: {v}")
    if quantization is not None:
        print("\n  Against the unquantized " + (f"cache (the {cfg['kv_dtype']} K/V quantization error):"
                                               if cfg["kv_dtype"] else "inputs (the FP8 quantization error):"))
        for k, v in quantization.items():
            print(f"  {k:<22}: {v:.6e}")
    ok = m["inf_count"] == 0 and m["nan_count"] == 0 and m["max_abs_error"] < tol
    print(f"\n  Tolerance             : {tol}")
    print(f"  Overall: {'PASS' if ok else 'FAIL'}")
    print("=" * 55)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
