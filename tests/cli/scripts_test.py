#!/usr/bin/env python3
"""Tests of the data scripts (generator and verifier) with the benchmark.

  scripts_test.py BENCHMARK_BINARY CASE      (or --list)

Needs NumPy (the scripts do).  Each case prints PASS or FAIL and its reason.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(ROOT, "scripts", "gen_fa2_test_data.py")
VERIFY = os.path.join(ROOT, "scripts", "verify_correctness.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fa_data  # noqa: E402


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, **kw)


def gen(d, *args):
    p = run([sys.executable, GEN, f"--output-dir={d}", *args])
    assert p.returncode == 0, p.stderr
    return p


def bench(binary, d, cfg, out, dtype, extra=()):
    c = fa_data.read_config(os.path.join(d, "config.txt"))
    args = [binary, f"--input-q={d}/input_Q.bin", f"--input-k={d}/input_K.bin", f"--input-v={d}/input_V.bin",
            f"--causal-mask={d}/input_causal_mask.bin", f"--batch-size={c['batch_size']}",
            f"--seq-q={c['seq_len_q']}", f"--seq-kv={c['seq_len_kv']}", f"--num-heads={c['num_heads']}",
            f"--num-kv-heads={c['num_kv_heads']}", f"--head-dim={c['head_dim']}", f"--dtype={dtype}",
            f"--layout={c['layout']}", "--num-runs=1", "--warmup-runs=0", f"--output={out}", *extra]
    p = run(args)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def verify(out, d, *extra):
    return run([sys.executable, VERIFY, out, f"{d}/input_Q.bin", f"{d}/input_K.bin", f"{d}/input_V.bin", *extra])


def case_generator_shapes_and_mask(binary, d):
    gen(d, "--batch-size=1", "--seq-len-q=40", "--seq-len-kv=25", "--num-heads=4", "--num-kv-heads=2",
        "--head-dim=16", "--dtype=bf16")
    sizes = {n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)}
    assert sizes["input_Q.bin"] == 40 * 4 * 16 * 2, sizes
    assert sizes["input_K.bin"] == 25 * 2 * 16 * 2, sizes
    mask = np.fromfile(os.path.join(d, "input_causal_mask.bin"), np.int8).reshape(40, 25)
    # Bottom-right: query i sees keys j <= i - 15; rows 0..14 see nothing.
    assert mask[:15].sum() == 0, "rows before the first key must be fully masked"
    assert mask[15, 0] == 1 and mask[15, 1] == 0 and mask[39].sum() == 25, mask[15:17]
    cfg = fa_data.read_config(os.path.join(d, "config.txt"))
    assert cfg["num_kv_heads"] == 2 and cfg["dtype"] == "bf16" and cfg["seq_len_kv"] == 25, cfg


def case_verify_passes_real_output(binary, d):
    for dtype in ("fp16", "bf16", "fp32"):
        sub = os.path.join(d, dtype)
        gen(sub, "--batch-size=2", "--seq-len-q=70", "--seq-len-kv=90", "--num-heads=4", "--num-kv-heads=2",
            "--head-dim=32", f"--dtype={dtype}", "--layout=BNSD")
        out = os.path.join(sub, "out.bin")
        bench(binary, sub, None, out, dtype)
        p = verify(out, sub)
        assert p.returncode == 0 and "Status: PASS" in p.stdout, p.stdout + p.stderr


def case_verify_catches_wrong_output(binary, d):
    gen(d, "--batch-size=1", "--seq-len-q=64", "--num-heads=2", "--head-dim=32")
    out = os.path.join(d, "out.bin")
    bench(binary, d, None, out, "fp16")
    good = np.fromfile(out, np.float16)
    bad = good.copy()
    bad[1234] += np.float16(0.05)
    bad.tofile(out)
    p = verify(out, d)
    assert p.returncode == 1 and "Status: FAIL" in p.stdout, p.stdout
    bad = good.copy()
    bad[7] = np.float16("nan")
    bad.tofile(out)
    p = verify(out, d)
    assert p.returncode == 1 and "Non-finite outputs:      1" in p.stdout, p.stdout
    good.tofile(out)
    p = verify(out, d, "--mask=" + os.path.join(d, "nomask.bin"))
    assert p.returncode == 2 and "not found" in p.stderr, p.stderr


def case_fp16_trap_reproduced_and_fixed(binary, d):
    # Logits of order 1e4 (--logit-scale 100): a naive fp16 softmax overflows
    # to Inf/NaN, our kernels stay finite and accurate, for fp16 and bf16.
    for dtype in ("fp16", "bf16"):
        sub = os.path.join(d, dtype)
        gen(sub, "--batch-size=1", "--seq-len-q=96", "--num-heads=2", "--head-dim=64", f"--dtype={dtype}",
            "--logit-scale=100")
        out = os.path.join(sub, "out.bin")
        p = bench(binary, sub, None, out, dtype, extra=["--reference=naive-fp16", "--no-probe"])
        assert "Inf: 0  NaN: 0" in p.stdout and "Check: PASS" in p.stdout, p.stdout
        naive = next(line for line in p.stdout.splitlines() if line.startswith("Naive fp16 softmax"))
        counts = [int(x) for x in re.findall(r"(?:Inf|NaN) (\d+)", naive)]
        assert sum(counts) > 0, f"the naive softmax should overflow: {naive}"
        v = verify(out, sub)
        assert v.returncode == 0 and "Status: PASS" in v.stdout, v.stdout


def case_extended_verification(binary, d):
    ext = os.path.join(ROOT, "scripts", "extended_verification.py")
    gen(d, "--batch-size=1", "--seq-len-q=48", "--seq-len-kv=80", "--num-heads=2", "--head-dim=32", "--dtype=bf16")
    out = os.path.join(d, "out.bin")
    bench(binary, d, None, out, "bf16")
    args = [sys.executable, ext, out, f"{d}/input_Q.bin", f"{d}/input_K.bin", f"{d}/input_V.bin"]
    p = run(args)
    assert p.returncode == 0 and "Overall: PASS" in p.stdout and "nan_count             : 0" in p.stdout, p.stdout
    bits = np.fromfile(out, np.uint16)
    bits[5] = 0x7fc0  # a bf16 NaN
    bits[9] = 0x7f80  # a bf16 Inf
    bits.tofile(out)
    p = run(args)
    assert p.returncode == 1 and "Overall: FAIL" in p.stdout, p.stdout
    assert "nan_count             : 1" in p.stdout and "inf_count             : 1" in p.stdout, p.stdout


def case_verify_rejects_bad_input(binary, d):
    gen(d, "--batch-size=1", "--seq-len-q=16", "--num-heads=2", "--head-dim=16")
    short = os.path.join(d, "short.bin")
    np.zeros(10, np.float16).tofile(short)
    p = verify(short, d)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "expected 1024" in p.stderr, p.stderr
    os.remove(os.path.join(d, "config.txt"))
    p = verify(short, d)
    assert p.returncode == 2 and "config" in p.stderr, p.stderr


def case_generator_rejects_bad_input(binary, d):
    target = os.path.join(d, "data")
    for args, text in ((["--head-dim=30"], "--head-dim: 30 is not a multiple of 8"),
                       (["--num-heads=6", "--num-kv-heads=4"], "--num-kv-heads: 4 does not divide"),
                       (["--dtype=int4"], "--dtype: unknown dtype 'int4'"),
                       (["--seq-len-q=-5"], "--seq-len-q"),
                       (["--batch-size=x"], "--batch-size")):
        p = run([sys.executable, GEN, f"--output-dir={target}", *args])
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and text in p.stderr, (args, p.returncode, p.stderr)
        assert not os.path.exists(target), "no output on bad input"


def case_fp8_generate_run_verify(binary, d):
    # The generator quantizes with per-tensor scales and records them; FA3
    # runs the data with those factors and the verifiers pass it (the
    # extended one also reporting the quantization error); a wrong factor in
    # config.txt fails verification.  FA1 and FA2 refuse FP8.
    gen(d, "--batch-size=1", "--seq-len-q=80", "--seq-len-kv=96", "--num-heads=4", "--num-kv-heads=2",
        "--head-dim=32", "--dtype=fp8_e4m3", "--out-dtype=fp16")
    assert os.path.getsize(os.path.join(d, "input_K.bin")) == 96 * 2 * 32, "one byte per FP8 element"
    cfg = fa_data.read_config(os.path.join(d, "config.txt"))
    out = os.path.join(d, "out.bin")
    flags = ["--out-dtype=fp16", *(f"--descale-{t}={cfg['descale_' + t]!r}" for t in "qkv")]
    if not os.path.basename(binary).startswith("fa3"):
        p = run([binary, "--dtype=fp8_e4m3", "--num-runs=1"])
        assert p.returncode == 2 and "run on FlashAttention-3 only" in p.stderr, p.stderr
        return
    bench(binary, d, None, out, "fp8_e4m3", extra=flags)
    assert os.path.getsize(out) == 80 * 4 * 32 * 2, "fp16 output"
    p = verify(out, d)
    assert p.returncode == 0 and "Status: PASS" in p.stdout, p.stdout + p.stderr
    ext = os.path.join(ROOT, "scripts", "extended_verification.py")
    p = run([sys.executable, ext, out, f"{d}/input_Q.bin", f"{d}/input_K.bin", f"{d}/input_V.bin"])
    assert p.returncode == 0 and "the FP8 quantization error" in p.stdout, p.stdout + p.stderr
    config = os.path.join(d, "config.txt")
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace(f"descale_v={cfg['descale_v']!r}", f"descale_v={cfg['descale_v'] * 1.1!r}"))
    p = verify(out, d)
    assert p.returncode == 1 and "Status: FAIL" in p.stdout, p.stdout


def case_quantized_cache_generate_run_verify(binary, d):
    # A quantized K/V cache: the generator records kv_dtype; the benchmark
    # quantizes K and V as it loads them (--kv-dtype); both verifiers compute
    # the reference on the same quantized values and pass, the extended one
    # reporting the error against the unquantized cache too; a verifier that
    # is told the wrong cache dtype fails.  FA1 refuses a quantized cache.
    gen(d, "--batch-size=2", "--seq-len-q=3", "--seq-len-kv=200", "--num-heads=4", "--num-kv-heads=2",
        "--head-dim=32", "--dtype=bf16", "--kv-dtype=int8", "--no-causal")
    out = os.path.join(d, "out.bin")
    if os.path.basename(binary).startswith("fa1"):
        p = run([binary, "--dtype=bf16", "--kv-dtype=int8", "--num-runs=1"])
        assert p.returncode == 2 and "does not offer a quantized K/V cache" in p.stderr, p.stderr
        return
    config = os.path.join(d, "config.txt")
    with open(config) as f:
        text = f.read()
    for kv in ("int8", "fp8_e4m3"):
        with open(config, "w") as f:
            f.write(text.replace("kv_dtype=int8", f"kv_dtype={kv}"))
        bench(binary, d, None, out, "bf16", extra=[f"--kv-dtype={kv}", "--no-probe"])
        p = verify(out, d)
        assert p.returncode == 0 and "Status: PASS" in p.stdout, p.stdout + p.stderr
        ext = os.path.join(ROOT, "scripts", "extended_verification.py")
        p = run([sys.executable, ext, out, f"{d}/input_Q.bin", f"{d}/input_K.bin", f"{d}/input_V.bin"])
        assert p.returncode == 0 and f"the {kv} K/V quantization error" in p.stdout, p.stdout + p.stderr
        # The quantized cache's own error is the output rounding; the
        # quantization's, against the unquantized cache, is larger.
        errors = [float(x) for x in re.findall(r"rel_l2_error\s+: ([0-9.e+-]+)", p.stdout)]
        assert len(errors) == 2 and errors[0] <= 1e-2 and errors[1] > errors[0], p.stdout
    with open(config, "w") as f:  # the output of an fp8_e4m3 cache checked as an int8 one
        f.write(text)
    p = run([sys.executable, os.path.join(ROOT, "scripts", "extended_verification.py"), out, f"{d}/input_Q.bin",
             f"{d}/input_K.bin", f"{d}/input_V.bin", "--tolerance=1e-3"])
    assert p.returncode == 1 and "Overall: FAIL" in p.stdout, p.stdout


SWEEP = os.path.join(ROOT, "bench", "shape_sweep")


def case_shape_sweep_small_grid(binary, d):
    out = os.path.join(d, "sweep")
    p = run([sys.executable, SWEEP, f"--benchmark={binary}", f"--out={out}", "--head-dims=40,64", "--seq-q=1,8",
             "--gqa=1,4", "--seq-kv=256", "--prefill-seq=64", "--block-sizes=16,128", "--dtypes=bf16", "--causal=off",
             "--runs=1", "--passes=2"])
    assert p.returncode == 0, p.stdout + p.stderr
    import csv
    with open(os.path.join(out, "shape_sweep.csv")) as f:
        rows = list(csv.DictReader(f))
    # Two head_dims, then two query counts at each of two GQA ratios, then
    # decoding from a paged cache at two block sizes for each ratio.
    assert [(r["slice"], r["head_dim"], r["seq_q"], r["gqa"], r["block_size"]) for r in rows] == \
        [("head_dim", "40", "64", "1", "0"), ("head_dim", "64", "64", "1", "0"), ("seq_q", "128", "1", "1", "0"),
         ("seq_q", "128", "8", "1", "0"), ("seq_q", "128", "1", "4", "0"), ("seq_q", "128", "8", "4", "0"),
         ("block", "128", "1", "1", "16"), ("block", "128", "1", "1", "128"), ("block", "128", "1", "4", "16"),
         ("block", "128", "1", "4", "128")], rows
    for r in rows:
        assert r["status"] == "OK" and r["bound"] in ("compute", "memory"), r
        assert float(r["tflops"]) > 0 and float(r["bound_tflops"]) > 0, r
        assert abs(float(r["share"]) - float(r["tflops"]) / float(r["bound_tflops"])) < 1e-9, r
        # Two passes: the best share kept, the worst beside it.
        assert r["passes"] == "2" and 0 < float(r["share_worst"]) <= float(r["share"]), r
    assert len(re.findall(r"^\[\d+/20\] pass [12] ", p.stdout, re.M)) == 20, p.stdout
    assert len(re.findall(r" paged block 16: ", p.stdout)) == 4, p.stdout
    assert os.path.exists(os.path.join(out, "flagged.txt"))
    assert re.search(r"flagged \(below half of their class's best share\): \d+", p.stdout), p.stdout
    try:
        import matplotlib  # noqa: F401
        for name in ("shape_sweep_head_dim.png", "shape_sweep_seq_q.png", "shape_sweep_block.png"):
            with open(os.path.join(out, name), "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
    except ImportError:
        assert "chart skipped: matplotlib not importable" in p.stdout, p.stdout


def case_shape_sweep_quantized_cache(binary, d):
    """--kv-dtypes: each 16-bit Q dtype beside each cache dtype asked for
    (fp32 Q with its own K/V only), the cache's dtype in the CSV and in the
    names of the lines."""
    out = os.path.join(d, "sweep")
    p = run([sys.executable, SWEEP, f"--benchmark={binary}", f"--out={out}", "--head-dims=64", "--seq-q=8",
             "--gqa=4", "--seq-kv=128", "--prefill-seq=64", "--block-sizes=none", "--dtypes=fp32,bf16", "--kv-dtypes=same,int8",
             "--causal=on", "--runs=1", "--no-chart"])
    assert p.returncode == 0, p.stdout + p.stderr
    import csv
    with open(os.path.join(out, "shape_sweep.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [(r["dtype"], r["kv_dtype"], r["slice"]) for r in rows] == \
        [("fp32", "fp32", "head_dim"), ("fp32", "fp32", "seq_q"), ("bf16", "bf16", "head_dim"),
         ("bf16", "bf16", "seq_q"), ("bf16", "int8", "head_dim"), ("bf16", "int8", "seq_q")], rows
    assert all(r["status"] == "OK" and float(r["share"]) > 0 for r in rows), rows
    assert len(re.findall(r"^\[\d+/6\] auto bf16/int8 causal ", p.stdout, re.M)) == 2, p.stdout


def case_shape_sweep_rejects_bad_input(binary, d):
    out = os.path.join(d, "sweep")
    for args, text in ((["--head-dims=12"], "--head-dims: every head_dim must be a multiple of 8"),
                       (["--head-dims=8,x"], "--head-dims: '8,x' is not a comma-separated list"),
                       (["--dtypes=int4"], "--dtypes: 'int4'"),
                       (["--kv-dtypes=int4"], "--kv-dtypes: 'int4'"),
                       (["--kv-dtypes=int8", "--dtypes=fp32"], "--kv-dtypes: a quantized cache is read with fp16 or bf16 Q"),
                       (["--isas=npu"], "--isas: 'npu'"),
                       (["--runs=0"], "--runs must be >= 1"),
                       (["--passes=0"], "--passes must be >= 1"),
                       (["--warmup-runs=-1"], "--warmup-runs must be >= 0"),
                       (["--block-sizes=24"], "--block-sizes: every block size must be a power of two from 16 to 512"),
                       (["--block-sizes=1024"], "--block-sizes: '1024' is not a comma-separated list of integers from 16 to 512")):
        p = run([sys.executable, SWEEP, f"--benchmark={binary}", f"--out={out}", *args])
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and text in p.stderr, (args, p.returncode, p.stderr)
        assert not os.path.exists(out), "no output on bad input"


def case_backward_generate_run_verify(binary, d):
    """gen --backward, fa2_benchmark --backward on its files, verify_correctness
    --dq/--dk/--dv: PASS; a perturbed gradient FAILs; half the flags refused.
    The other versions' benchmarks refuse --backward."""
    gen(d, "--batch-size=2", "--seq-len-q=40", "--seq-len-kv=56", "--num-heads=4", "--num-kv-heads=2",
        "--head-dim=24", "--dtype=fp16", "--layout=BNSD", "--backward")
    assert os.path.getsize(os.path.join(d, "input_dO.bin")) == 2 * 40 * 4 * 24 * 2
    out = os.path.join(d, "out.bin")
    grads = [os.path.join(d, f"{g}.bin") for g in ("dq", "dk", "dv")]
    flags = ["--causal", "--backward", f"--input-do={d}/input_dO.bin", f"--output-dq={grads[0]}",
             f"--output-dk={grads[1]}", f"--output-dv={grads[2]}"]
    if not os.path.basename(binary).startswith("fa2"):
        p = run([binary, "--backward"])
        assert p.returncode == 2 and "has no backward pass" in p.stderr, p.stderr
        return
    bench(binary, d, None, out, "fp16", flags)
    grad_args = [f"--dq={grads[0]}", f"--dk={grads[1]}", f"--dv={grads[2]}"]
    p = verify(out, d, *grad_args)
    assert p.returncode == 0 and "Gradient Status: PASS" in p.stdout, p.stdout + p.stderr
    dk = np.fromfile(grads[1], np.float16)
    dk[100] += np.float16(4.0)
    dk.tofile(grads[1])
    p = verify(out, d, *grad_args)
    assert p.returncode == 1 and "dK: Relative L2 Error" in p.stdout and "Gradient Status: FAIL" in p.stdout, p.stdout
    p = verify(out, d, grad_args[0])
    assert p.returncode == 2 and "--dq, --dk and --dv go together" in p.stderr, p.stderr


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--list":
        print(";".join(CASES))
        return 0
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: {sys.argv[0]} BINARY CASE  (cases: {', '.join(CASES)})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        try:
            CASES[sys.argv[2]](sys.argv[1], d)
        except AssertionError as e:
            print(f"FAIL: {e}")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
