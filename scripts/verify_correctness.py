#!/usr/bin/env python3
"""Compare an operator output with a float64 reference (the guide's section 4.3).

  verify_correctness.py [OUTPUT [Q [K [V]]]] [--config PATH] [--mask PATH] [--tolerance X]
                        [--dq DQ --dk DK --dv DV [--do DO]]
  verify_correctness.py --in-process [--version N] [Q [K [V]]] [--config PATH] [--mask PATH] [--tolerance X]

Shapes, dtype, layout and causality come from config.txt beside the Q file
(written by gen_fa2_test_data.py), never from constants; for FP8 inputs so do
the output dtype and the descale factors (the reference sees the decoded
values times their factors).  The mask used is
input_causal_mask.bin beside Q when config.txt says causal=true (or --mask);
the reference is NumPy in float64.  If PyTorch is importable its
scaled_dot_product_attention, also in float64, is compared with the NumPy
reference as a second opinion.  OUTPUT is [batch, seq_q, heads * head_dim].

With --dq, --dk and --dv (fa2_benchmark --backward's files, in the layouts
of Q, K and V and the inputs' dtype), the gradients too: against a float64
NumPy backward of the same dO (--do, default input_dO.bin beside Q, from
gen_fa2_test_data.py --backward), each within the relative L2 bound of its
dtype (1e-4 fp32, 5e-3 fp16, 3e-2 bf16); PyTorch's float64 autograd, when
importable, is a second opinion on the reference gradients.

With --in-process (the Python package ops_transformer importable: `pip
install .`, or PYTHONPATH=<build>/python), the output is not read from a file
but computed here, by the library through the package, from the same input
files (--version 1, 2 or 3; default 2): verification without writing an
output file.  OUTPUT is then not given.  fp32, fp16 and bf16 inputs without
a quantized cache.

Exit status: 0 PASS, 1 FAIL, 2 bad input.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import fa_data  # noqa: E402

DEFAULT_TOLERANCE = fa_data.DEFAULT_TOLERANCE


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fa_data.fail_input(message)


def torch_second_opinion(q, k, v, mask, scale):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None, "PyTorch not importable: NumPy reference only"
    if not hasattr(F, "scaled_dot_product_attention"):
        return None, f"PyTorch {torch.__version__} has no scaled_dot_product_attention: NumPy reference only"
    group = q.shape[1] // k.shape[1]
    tq = torch.from_numpy(q)
    tk = torch.from_numpy(np.repeat(k, group, axis=1))
    tv = torch.from_numpy(np.repeat(v, group, axis=1))
    bias = None
    if mask is not None:
        bias = torch.from_numpy(np.where(mask, 0.0, -np.inf))
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=bias, scale=scale).numpy()
    return np.nan_to_num(out, nan=0.0), None  # torch gives NaN for fully masked rows; we define them as 0


def verify(output_path, q_path, k_path, v_path, config_path=None, mask_path=None, tolerance=None, out=None):
    case = fa_data.load_case(output_path, q_path, k_path, v_path, config_path, mask_path, out=out)
    cfg, out, ref_bsh = case["cfg"], case["out"], case["ref"]
    d = cfg["head_dim"]
    tolerance = DEFAULT_TOLERANCE[cfg["out_dtype"]] if tolerance is None else tolerance
    second, second_note = torch_second_opinion(case["q"], case["k"], case["v"], case["mask"], d ** -0.5)
    ref = case["ref_bnsd"]

    print("Comparing results...")
    finite = np.isfinite(out)
    nonfinite = int((~finite).sum())
    diff = np.where(finite, np.abs(out - ref_bsh), np.inf)
    max_abs = float(diff.max())
    mean_abs = float(np.where(finite, diff, 0).mean()) if nonfinite == 0 else float("inf")
    rel_l2 = float(np.sqrt(np.sum(np.where(finite, out - ref_bsh, 0) ** 2) / max(np.sum(ref_bsh ** 2), 1e-300)))
    passed = nonfinite == 0 and max_abs < tolerance

    line = "=" * 50
    print(f"\n{line}")
    print(f"  Max Absolute Difference: {max_abs:.6f}")
    print(f"  Mean Absolute Difference: {mean_abs:.6f}")
    print(f"  Relative L2 Error:       {rel_l2:.3e}")
    print(f"  Tolerance:               {tolerance}")
    if nonfinite:
        print(f"  Non-finite outputs:      {nonfinite}")
    print(f"  Status: {'PASS' if passed else 'FAIL'}")
    print(line)
    within = int((diff < tolerance).sum())
    print(f"  Elements within tolerance: {within}/{diff.size} ({100.0 * within / diff.size:.2f}%)")
    if second is not None:
        agree = float(np.abs(second - ref).max())
        print(f"  PyTorch float64 reference agrees with NumPy to {agree:.2e}")
    else:
        print(f"  {second_note}")
    return passed


def torch_grad_opinion(q, k, v, dout, mask, scale):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not hasattr(F, "scaled_dot_product_attention"):
        return None
    group = q.shape[1] // k.shape[1]
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x)).requires_grad_() for x in (q, k, v))
    bias = None if mask is None else torch.from_numpy(np.where(mask, 0.0, -np.inf))
    out = F.scaled_dot_product_attention(tq, tk.repeat_interleave(group, 1), tv.repeat_interleave(group, 1),
                                         attn_mask=bias, scale=scale)
    out.backward(torch.from_numpy(np.ascontiguousarray(dout)))
    return [np.nan_to_num(t.grad.numpy()) for t in (tq, tk, tv)]


def verify_gradients(case, q_path, dq_path, dk_path, dv_path, do_path=None):
    """The gradient files against the float64 NumPy backward; True when each
    is within its dtype's relative L2 bound."""
    cfg = case["cfg"]
    b, sq, skv, h, hkv, d = (cfg[key] for key in ("batch_size", "seq_len_q", "seq_len_kv", "num_heads", "num_kv_heads",
                                                  "head_dim"))
    dtype, layout = cfg["dtype"], cfg["layout"]
    if dtype in fa_data.FP8 or cfg["kv_dtype"]:
        raise fa_data.InputError(f"--dq: the backward pass has no {dtype}{' with kv_dtype' if cfg['kv_dtype'] else ''} "
                                 "inputs (expected fp16, bf16 or fp32 without a quantized cache)")
    do_path = do_path or os.path.join(os.path.dirname(os.path.abspath(q_path)), "input_dO.bin")
    dout = fa_data.to_bnsd(fa_data.load_tensor(do_path, dtype, b * sq * h * d, "dO"), b, sq, h, d, layout)
    got = [fa_data.to_bnsd(fa_data.load_tensor(path, dtype, b * seq * heads * d, name), b, seq, heads, d, layout)
           for path, seq, heads, name in ((dq_path, sq, h, "dQ"), (dk_path, skv, hkv, "dK"), (dv_path, skv, hkv, "dV"))]
    print("Computing reference gradients (NumPy, float64)...")
    want = fa_data.reference_attention_backward(case["q"], case["k"], case["v"], dout, case["mask"], d ** -0.5)
    bound = fa_data.GRAD_REL_L2_BOUND[dtype]
    passed = True
    line = "=" * 50
    print(f"\n{line}")
    for name, g, w in zip(("dQ", "dK", "dV"), got, want):
        finite = bool(np.all(np.isfinite(g)))
        rel = float(np.sqrt(np.sum((g - w) ** 2) / max(np.sum(w ** 2), 1e-300))) if finite else float("inf")
        ok = finite and rel <= bound
        passed = passed and ok
        print(f"  {name}: Relative L2 Error {rel:.3e}, Max Abs Difference {float(np.abs(g - w).max()):.6f}"
              f"{'' if finite else ' (non-finite values)'}  {'PASS' if ok else 'FAIL'}")
    print(f"  Gradient bound (relative L2): {bound}")
    print(f"  Gradient Status: {'PASS' if passed else 'FAIL'}")
    print(line)
    second = torch_grad_opinion(case["q"], case["k"], case["v"], dout, case["mask"], d ** -0.5)
    if second is not None:
        agree = max(float(np.abs(a - b_).max()) for a, b_ in zip(second, want))
        print(f"  PyTorch float64 autograd agrees with the NumPy gradients to {agree:.2e}")
    return passed


def main(argv=None):
    p = OneLineParser(description="Compare an attention output with a float64 reference.")
    p.add_argument("output", nargs="?", default="./output_attention.bin")
    p.add_argument("q", nargs="?", default="../../test_data/input_Q.bin")
    p.add_argument("k", nargs="?", default="../../test_data/input_K.bin")
    p.add_argument("v", nargs="?", default="../../test_data/input_V.bin")
    p.add_argument("--config", default=None, help="config.txt (default: beside Q)")
    p.add_argument("--mask", default=None, help="int8 mask [seq_q, seq_kv] (default: input_causal_mask.bin beside Q "
                                                "when config.txt says causal=true)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="max absolute difference allowed (default by the output's dtype: 1e-2 fp16, 2e-2 bf16, "
                        "1e-4 fp32)")
    p.add_argument("--dq", default=None, help="dQ file from fa2_benchmark --backward (with --dk and --dv)")
    p.add_argument("--dk", default=None, help="dK file")
    p.add_argument("--dv", default=None, help="dV file")
    p.add_argument("--do", default=None, help="the dO the gradients were taken of (default: input_dO.bin beside Q)")
    fa_data.add_in_process_arguments(p)
    a = p.parse_args(argv)
    if a.in_process and a.dq:
        fa_data.fail_input("--in-process: not with --dq/--dk/--dv (the gradient files come from fa2_benchmark)")
    fa_data.shift_in_process_positionals(p, a)
    grads = [a.dq, a.dk, a.dv]
    if any(grads) and not all(grads):
        fa_data.fail_input("--dq, --dk and --dv go together (got " + ", ".join(
            f"--{n}" for n, g in zip(("dq", "dk", "dv"), grads) if g) + ")")
    if a.do and not a.dq:
        fa_data.fail_input("--do: applies with --dq, --dk and --dv only")
    if a.tolerance is not None and not (a.tolerance > 0 and np.isfinite(a.tolerance)):
        fa_data.fail_input(f"--tolerance: expected a positive number (got {a.tolerance})")
    try:
        out = fa_data.in_process_output(a.q, a.k, a.v, a.config, a.mask, a.version) if a.in_process else None
        ok = verify(a.output, a.q, a.k, a.v, a.config, a.mask, a.tolerance, out=out)
        if a.dq:
            case = fa_data.load_case(a.output, a.q, a.k, a.v, a.config, a.mask)
            ok = verify_gradients(case, a.q, a.dq, a.dk, a.dv, a.do) and ok
    except fa_data.InputError as e:
        fa_data.fail_input(str(e))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
