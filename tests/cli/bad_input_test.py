#!/usr/bin/env python3
"""One bad-input case of a command-line tool, run as its own CTest.

  bad_input_test.py BENCHMARK_BINARY CASE      (or --list fa1|fa2|fa3|layer_norm|rope|glu)

Each case must exit with status 2, print one line on stderr naming the flag
and what was expected, print nothing that looks like a result, and leave no
output file (nor a temporary one) behind.  Standard library only.
"""
import os
import struct
import subprocess
import sys
import tempfile

SHAPE = ["--batch-size=1", "--seq-q=32", "--seq-kv=48", "--num-heads=2", "--head-dim=16", "--dtype=fp16",
         "--num-runs=1", "--warmup-runs=0"]
Q_BYTES = 1 * 32 * 2 * 16 * 2
KV_BYTES = 1 * 48 * 2 * 16 * 2


def write(path, nbytes):
    with open(path, "wb") as f:
        f.write(os.urandom(nbytes))
    return path


def write_floats(path, count, special):
    """`count` float32 zeros with the {index: value} entries of `special`."""
    values = [0.0] * count
    for i, x in special.items():
        values[i] = x
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{count}f", *values))
    return path


def inputs(d, q=Q_BYTES, k=KV_BYTES, v=KV_BYTES):
    return [f"--input-q={write(os.path.join(d, 'q.bin'), q)}", f"--input-k={write(os.path.join(d, 'k.bin'), k)}",
            f"--input-v={write(os.path.join(d, 'v.bin'), v)}"]


# name -> (function of the scratch dir returning extra args, text the message must contain)
def config(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return [f"--config={path}"]


CASES = {
    "config_malformed_json": (lambda d: config(d, "c.json", '{\n  "model_config": {\n    "seq_len": 64,,\n  }\n}\n'),
                              "malformed JSON at line 3, column 19"),
    "config_json_number_overflow": (lambda d: config(d, "c.json", '{"model_config": {"seq_len": 1e999}}'),
                                    "malformed JSON: number overflow"),
    "config_malformed_yaml": (lambda d: config(d, "c.yaml", "model:\n  num_heads: [2\n  head_dim: 16\n"),
                              "malformed YAML at line"),
    "config_unknown_key": (lambda d: config(d, "c.yaml", "flash_attention:\n  tile_qq: 64\n"),
                           "flash_attention.tile_qq (line 2, column 3): unknown key (expected one of: version, tile_q"),
    "config_wrong_type": (lambda d: config(d, "c.json", '{"model_config": {"num_heads": "two"}}'),
                          "model_config.num_heads: expected an integer, got \"two\""),
    "config_bad_value": (lambda d: config(d, "c.json", '{"flash_attention_config": {"tile_q": 100}}'),
                         "(from --config"),
    "config_other_version": (lambda d: config(d, "c.yaml", "flash_attention:\n  version: 7\n"),
                             "flash_attention.version (line 2, column 3): 7 is not a FlashAttention version"),
    "config_not_json_or_yaml": (lambda d: config(d, "c.ini", "[model]\n"), "neither .json nor .yaml"),
    "config_missing": (lambda d: ["--config=/nonexistent/c.json"], "--config: cannot open '/nonexistent/c.json'"),
    "json_file_dir_missing": (lambda d: [f"--json-file={d}/missing/r.json"], "--json-file: cannot write"),
    "json_file_is_directory": (lambda d: [f"--json-file={d}"], "is a directory"),
    "input_size_mismatch": (lambda d: SHAPE + inputs(d, q=Q_BYTES - 2), "--input-q: "),
    "kv_size_mismatch": (lambda d: SHAPE + inputs(d, v=KV_BYTES + 64), "expected 3072 for"),
    "missing_file": (lambda d: SHAPE + inputs(d)[:1] + ["--input-k=/nonexistent/k.bin", "--input-v=/nonexistent/v.bin"],
                     "--input-k: cannot open '/nonexistent/k.bin'"),
    "partial_inputs": (lambda d: SHAPE + inputs(d)[:1], "must be given together"),
    "mask_size_mismatch": (lambda d: SHAPE + [f"--causal-mask={write(os.path.join(d, 'm.bin'), 32 * 32)}"],
                           "--causal-mask: "),
    "unknown_dtype": (lambda d: ["--dtype=fp8"], "--dtype: unknown dtype 'fp8' (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)"),
    "unknown_layout": (lambda d: ["--layout=SBH"], "--layout: unknown layout 'SBH'"),
    "unknown_flag": (lambda d: ["--bhu-limit=32"], "unknown flag --bhu-limit"),
    # Found by fuzzing: a control character in what the user typed split the
    # one-line message; it is escaped now.
    "newline_in_value": (lambda d: ["--dtype=fp\n16"], "--dtype: unknown dtype 'fp\\n16'"),
    "head_dim_not_multiple_of_8": (lambda d: ["--head-dim=60"], "--head-dim: 60 is not valid (expected a multiple of 8"),
    "heads_not_divisible": (lambda d: ["--num-heads=12", "--num-kv-heads=5"], "--num-kv-heads: 5 does not divide"),
    "negative_number": (lambda d: ["--batch-size=-2"], "--batch-size: -2 is out of range"),
    "non_numeric": (lambda d: ["--seq-q=abc"], "--seq-q: 'abc' is not a number"),
    "missing_value": (lambda d: ["--seq-q"], "--seq-q: missing value"),
    "tile_not_power_of_two": (lambda d: ["--tile-q=100"], "--tile-q: 100 is not a valid tile (expected a power of two"),
    "tile_too_large": (lambda d: ["--tile-kv=1024"], "--tile-kv: 1024 is not a valid tile"),
    "zero_runs": (lambda d: ["--num-runs=0"], "--num-runs: 0 is out of range"),
    "tiles_exceed_l2": (lambda d: ["--dtype=fp32", "--head-dim=256", "--tile-q=512", "--tile-kv=512"],
                        "Error: Resource usage exceeds device limit. L2 working set: 3078 KiB per thread"),
    "bad_num_splits": (lambda d: ["--num-splits=0"], "--num-splits: 0 is out of range"),
    "unknown_reference": (lambda d: ["--reference=fp8"], "--reference: unknown reference 'fp8'"),
    "forced_isa_unknown": (lambda d: ["--isa=neon"], "--isa: unknown kernel path 'neon'"),
    "sparse_mode_out_of_range": (lambda d: ["--sparse-mode=7"], "--sparse-mode: 7 is out of range"),
    "negative_window": (lambda d: ["--sparse-mode=4", "--pre-tokens=-3"], "--pre-tokens: -3 is out of range"),
    "causal_and_band": (lambda d: ["--causal", "--sparse-mode=4"], "--causal and --sparse-mode=4 disagree"),
    "sinks_count": (lambda d: ["--num-heads=4", "--sinks=1,2"], "--sinks: 2 values for 4 heads"),
    "bad_softcap": (lambda d: ["--softcap=-1"], "--softcap: expected a positive finite number"),
    "cu_seqlens_decreasing": (lambda d: ["--layout=TND", "--cu-seqlens-q=0,100,50", "--cu-seqlens-kv=0,100,150"],
                              "--cu-seqlens-q: '0,100,50' is not a non-decreasing list"),
    "cu_seqlens_alone": (lambda d: ["--cu-seqlens-q=0,10"], "--layout=TND, --cu-seqlens-q and --cu-seqlens-kv go together"),
    "block_size_not_power_of_two": (lambda d: ["--paged", "--block-size=100"],
                                    "--block-size: 100 is not a power of two (expected 16, 32, ... 512)"),
    "block_size_out_of_range": (lambda d: ["--paged", "--block-size=8"], "--block-size: 8 is out of range"),
    "block_size_without_paged": (lambda d: ["--block-size=64"], "--block-size: applies to --paged only"),
    "paged_tile_larger_than_block": (lambda d: ["--paged", "--block-size=32", "--tile-kv=64"],
                                     "tile_kv 64 is larger than the paged cache's block_size 32"),
    "seqlens_kv_not_a_list": (lambda d: ["--seqlens-kv=5,x"], "--seqlens-kv: '5,x' is not a list of key counts"),
    "seqlens_kv_and_batch": (lambda d: ["--seqlens-kv=5,6", "--batch-size=2"], "--batch-size: set by --seqlens-kv"),
    "seqlens_kv_beyond_cache": (lambda d: ["--seqlens-kv=5,600", "--seq-kv=512"],
                                "--seqlens-kv: 600 keys do not fit the cache's --seq-kv=512"),
    "seqlens_kv_all_empty": (lambda d: ["--seqlens-kv=0,0"], "--seqlens-kv: every sequence is empty"),
    "seqlens_kv_with_tnd": (lambda d: ["--layout=TND", "--cu-seqlens-q=0,1", "--cu-seqlens-kv=0,5", "--seqlens-kv=5"],
                            "--seqlens-kv: not with --layout=TND"),
    "append_with_tnd": (lambda d: ["--layout=TND", "--cu-seqlens-q=0,1", "--cu-seqlens-kv=0,5", "--append"],
                        "--append: not with --layout=TND"),
    "cu_seqlens_and_batch": (lambda d: ["--layout=TND", "--cu-seqlens-q=0,10", "--cu-seqlens-kv=0,10", "--batch-size=3"],
                             "--batch-size: set by --cu-seqlens-q/--cu-seqlens-kv"),
    "band_without_band_mode": (lambda d: ["--causal", "--pre-tokens=5"],
                               "--pre-tokens: applies to --sparse-mode=0 or 4 (the band), not to --causal"),
    "band_with_mode_2": (lambda d: ["--sparse-mode=2", "--next-tokens=5"], "not to --sparse-mode=2"),
    "keep_prob_out_of_range": (lambda d: ["--keep-prob=1.5"], "--keep-prob: 1.5 is not in (0, 1]"),
    "bias_wrong_shape": (lambda d: SHAPE + [f"--bias={write(os.path.join(d, 'b.bin'), 32 * 48 * 4 * 3)}"],
                         "--bias: "),
    "bad_scale": (lambda d: ["--scale=-1"], "--scale"),
    "bias_nan": (lambda d: SHAPE + [f"--bias={write_floats(os.path.join(d, 'b.bin'), 32 * 48, {100: float('nan')})}"],
                 "--bias: element 100 of"),
    "bias_plus_inf": (lambda d: SHAPE + [f"--bias={write_floats(os.path.join(d, 'b.bin'), 32 * 48, {7: float('inf')})}"],
                      "is +inf (expected finite values, or -inf to mask)"),
    "shape_too_large": (lambda d: ["--batch-size=4096", "--seq-q=1048576", "--num-heads=64", "--head-dim=128"],
                        "memory is available"),
    "async_and_no_async": (lambda d: ["--async", "--no-async"], "--async and --no-async disagree"),
    "int8_as_dtype": (lambda d: ["--dtype=int8"], "--dtype: int8 is a K/V cache dtype (--kv-dtype=int8"),
    "kv_dtype_unknown": (lambda d: ["--kv-dtype=int4"], "--kv-dtype: 'int4' is not a quantized cache dtype"),
    "kv_dtype_bf16": (lambda d: ["--kv-dtype=bf16"], "--kv-dtype: 'bf16' is not a quantized cache dtype"),
    "kv_dtype_with_fp32": (lambda d: ["--dtype=fp32", "--kv-dtype=int8"],
                           "--kv-dtype: a quantized cache is read with --dtype=fp16 or bf16 (got fp32)"),
}

# What FA1 does not offer: refused by fa1_benchmark (and only there).
FA1_CASES = {
    "fa1_tile_not_64": (lambda d: ["--tile-q=128", "--tile-kv=64"], "FlashAttention-1 runs 64x64 tiles only"),
    "fa1_split_kv": (lambda d: ["--num-splits=2"], "FlashAttention-1 does not offer split-KV"),
    "fa1_sinks": (lambda d: ["--sinks=0.5"], "FlashAttention-1 does not offer attention sinks"),
    "fa1_paged": (lambda d: ["--paged"], "FlashAttention-1 does not offer a paged KV cache"),
    "fa1_varlen": (lambda d: ["--layout=TND", "--cu-seqlens-q=0,10,30", "--cu-seqlens-kv=0,10,30"],
                   "FlashAttention-1 does not offer variable-length sequences"),
    "fa1_quantized_cache": (lambda d: ["--kv-dtype=int8"], "FlashAttention-1 does not offer a quantized K/V cache (int8)"),
}
# FP8: fa3_benchmark checks its flags and data; the other versions refuse it.
FP8 = ["--dtype=fp8_e4m3"]
Q_FP8, KV_FP8 = Q_BYTES // 2, KV_BYTES // 2
FA3_CASES = {
    "fp8_input_size_mismatch": (lambda d: SHAPE + FP8 + inputs(d, q=Q_FP8, k=KV_FP8 * 2, v=KV_FP8),
                                "--input-k: "),
    "fp8_descale_zero": (lambda d: FP8 + ["--descale-q=0"], "--descale-q: '0' is not a finite positive factor"),
    "fp8_descale_negative": (lambda d: FP8 + ["--descale-k=-1"], "--descale-k: '-1' is not a finite positive factor"),
    "fp8_descale_nan": (lambda d: FP8 + ["--descale-v=nan"], "--descale-v: 'nan' is not a finite positive factor"),
    "fp8_descale_count": (lambda d: FP8 + ["--num-heads=4", "--descale-q=1,2"], "--descale-q: 2 values for 4 heads"),
    "fp8_out_dtype": (lambda d: FP8 + ["--out-dtype=fp8_e5m2"], "--out-dtype: 'fp8_e5m2' is not an output dtype"),
    "descale_without_fp8": (lambda d: ["--dtype=bf16", "--descale-q=2"], "--descale-q: applies to FP8 inputs only"),
}
FP8_REFUSED = {
    "fp8_needs_fa3": (lambda d: FP8, "FP8 inputs (fp8_e4m3) run on FlashAttention-3 only"),
}

# The backward pass (fa2_benchmark --backward): its flags and data; the
# other versions have none.  Each case also asks for dQ in the checked
# directory, so a refused run must leave no gradient file either.
def dq_out(d):
    return [f"--output-dq={os.path.join(d, 'out', 'dq.bin')}"]


BACKWARD_CASES = {
    "backward_input_do_size": (lambda d: SHAPE + ["--backward", f"--input-do={write(os.path.join(d, 'do.bin'), Q_BYTES - 2)}"]
                               + dq_out(d), "--input-do: "),
    "input_do_without_backward": (lambda d: [f"--input-do={write(os.path.join(d, 'do.bin'), Q_BYTES)}"],
                                  "--input-do: applies to --backward only"),
    "output_dk_without_backward": (lambda d: [f"--output-dk={os.path.join(d, 'out', 'dk.bin')}"],
                                   "--output-dk: applies to --backward only"),
    "backward_quantized_cache": (lambda d: ["--backward", "--kv-dtype=int8"] + dq_out(d),
                                 "--backward: not with --kv-dtype (a KV-cache feature of inference"),
    "backward_paged": (lambda d: ["--backward", "--paged"] + dq_out(d), "--backward: not with --paged"),
}
BACKWARD_REFUSED = {
    "backward_needs_fa2": (lambda d: ["--backward"] + dq_out(d), "has no backward pass (FA2 has one: fa2_benchmark --backward)"),
}

# A version's own expectation where the shared case meets its refusal first.
VERSION_EXPECTED = {
    ("fa1", "tiles_exceed_l2"): "FlashAttention-1 runs 64x64 tiles only",
    ("fa1", "paged_tile_larger_than_block"): "FlashAttention-1 does not offer a paged KV cache",
    ("fa3", "tiles_exceed_l2"): "L2 working set: 6156 KiB per thread",  # two Q tiles' state and K/V buffers
}


# layer_norm_benchmark: its own flags, the same rule.
NORM_CASES = {
    "norm_bad_op": (lambda d: ["--op=batchnorm"], "--op=batchnorm is not valid: expected layernorm or rmsnorm"),
    "norm_eps_zero": (lambda d: ["--eps=0"], "--eps=0 is not valid: expected a number > 0"),
    "norm_eps_negative": (lambda d: ["--eps=-1e-5"], "--eps=-1e-5 is not valid: expected a number > 0"),
    "norm_bad_dtype": (lambda d: ["--dtype=fp8_e4m3"], "--dtype=fp8_e4m3 is not valid: expected fp32, fp16 or bf16"),
    "norm_hidden_zero": (lambda d: ["--hidden=0"], "--hidden: 0 is out of range (expected an integer from 1"),
    "norm_param_dtype_mismatch": (lambda d: ["--dtype=bf16", "--param-dtype=fp16"],
                                  "--param-dtype=fp16 is not valid: expected fp32 or --dtype's bf16"),
    "norm_rmsnorm_no_beta": (lambda d: ["--op=rmsnorm", "--no-beta"], "--no-beta is not valid with --op=rmsnorm"),
    "norm_unknown_flag": (lambda d: ["--tile-q=64"], "unknown flag --tile-q"),
    "norm_bad_isa": (lambda d: ["--isa=sse9"], "--isa=sse9 is not valid"),
    "norm_bad_stream": (lambda d: ["--stream=maybe"], "--stream=maybe is not valid: expected auto, on or off"),
    "norm_unfused_without_residual": (lambda d: ["--compare-unfused"],
                                      "--compare-unfused is not valid without --residual"),
}

# rope_benchmark: its own flags, the same rule.
ROPE_CASES = {
    "rope_odd_head_dim": (lambda d: ["--head-dim=63"], "--head-dim=63 is not valid: expected an even number"),
    "rope_rotary_dim_too_large": (lambda d: ["--head-dim=64", "--rotary-dim=96"],
                                  "--rotary-dim: 96 is out of range (expected an integer from 2 to 64)"),
    "rope_odd_rotary_dim": (lambda d: ["--rotary-dim=33"], "--rotary-dim=33 is not valid: expected an even number"),
    "rope_bad_mode": (lambda d: ["--mode=rotate-quarter"],
                      "--mode=rotate-quarter is not valid: expected rotate-half or interleaved"),
    "rope_base_zero": (lambda d: ["--base=0"], "--base=0 is not valid: expected a number > 0"),
    "rope_bad_scaling": (lambda d: ["--scaling=yarn"], "--scaling=yarn is not valid: expected none, linear, ntk or llama3"),
    "rope_factor_below_one": (lambda d: ["--scaling=linear", "--factor=0.5"],
                              "--factor=0.5 is not valid: expected a number >= 1"),
    "rope_factor_without_scaling": (lambda d: ["--factor=2"], "--factor is not valid without --scaling"),
    "rope_llama3_flag_without_llama3": (lambda d: ["--low-freq-factor=2"],
                                        "--low-freq-factor is not valid without --scaling=llama3"),
    "rope_high_below_low": (lambda d: ["--scaling=llama3", "--high-freq-factor=0.5"],
                            "is not valid: expected > --low-freq-factor"),
    "rope_bad_dtype": (lambda d: ["--dtype=int8"], "--dtype=int8 is not valid: expected fp32, fp16 or bf16"),
    "rope_tnd_without_cu_seqlens": (lambda d: ["--layout=TND"], "--layout=TND and --cu-seqlens go together"),
    "rope_bad_cu_seqlens": (lambda d: ["--layout=TND", "--cu-seqlens=0,10,5"],
                            "--cu-seqlens: '0,10,5' is not a non-decreasing list"),
    "rope_position_past_range": (lambda d: ["--position-offset=16777215", "--seq-len=4"],
                                 "is out of range: expected 0 to 2^24 - 1 (computed angles)"),
    "rope_unknown_flag": (lambda d: ["--eps=1e-5"], "unknown flag --eps"),
}

# glu_benchmark: its own flags, the same rule.
GLU_CASES = {
    "glu_bad_op": (lambda d: ["--op=gelu"], "--op=gelu is not valid: expected swiglu, geglu, geglu-tanh or reglu"),
    "glu_bad_split": (lambda d: ["--split=middle"], "--split=middle is not valid: expected gate-first or up-first"),
    "glu_bad_activation": (lambda d: ["--activation=exact"], "--activation=exact is not valid: expected auto, table or computed"),
    "glu_bad_dtype": (lambda d: ["--dtype=fp8_e5m2"], "--dtype=fp8_e5m2 is not valid: expected fp32, fp16 or bf16"),
    "glu_bad_out_dtype": (lambda d: ["--out-dtype=int8"], "--out-dtype=int8 is not valid: expected fp32, fp16 or bf16"),
    "glu_hidden_zero": (lambda d: ["--hidden=0"], "--hidden: 0 is out of range (expected an integer from 1"),
    "glu_bad_isa": (lambda d: ["--isa=neon"], "--isa=neon is not valid"),
    "glu_unknown_flag": (lambda d: ["--eps=1"], "unknown flag --eps"),
}


def version_of(binary):
    name = os.path.basename(binary)
    if name.startswith("layer_norm"):
        return "layer_norm"
    return name.split("_")[0]


def cases_for(version):
    if version == "layer_norm":
        return NORM_CASES
    if version == "rope":
        return ROPE_CASES
    if version == "glu":
        return GLU_CASES
    own = {"fa1": {**FA1_CASES, **FP8_REFUSED, **BACKWARD_REFUSED}, "fa2": {**FP8_REFUSED, **BACKWARD_CASES},
           "fa3": {**FA3_CASES, **BACKWARD_REFUSED}}
    return {**CASES, **own.get(version, {})}


def run_case(binary, name):
    make_args, expected = cases_for(version_of(binary))[name]
    expected = VERSION_EXPECTED.get((version_of(binary), name), expected)
    with tempfile.TemporaryDirectory() as d:
        out_path = os.path.join(d, "out", "output_attention.bin")
        os.makedirs(os.path.dirname(out_path))
        proc = subprocess.run([binary] + make_args(d) + [f"--output={out_path}"], capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        problems = []
        if proc.returncode != 2:
            problems.append(f"exit status {proc.returncode}, expected 2")
        err_lines = [line for line in proc.stderr.splitlines() if line.strip()]
        if len(err_lines) != 1:
            problems.append(f"{len(err_lines)} lines on stderr, expected 1")
        if expected not in proc.stderr:
            problems.append(f"stderr lacks {expected!r}")
        if "Throughput:" in proc.stdout or "Latency:" in proc.stdout:
            problems.append("printed results")
        left = os.listdir(os.path.dirname(out_path))
        if left:
            problems.append(f"left files behind: {left}")
        print(f"$ {os.path.basename(binary)} ... ({name})\nstderr: {proc.stderr.strip()}")
        if problems:
            print("FAIL: " + "; ".join(problems))
            return 1
        print("PASS")
        return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--list":  # --list VERSION (fa1, fa2, fa3, layer_norm, rope, glu)
        print(";".join(cases_for(sys.argv[2])))
        return 0
    if len(sys.argv) != 3 or sys.argv[2] not in cases_for(version_of(sys.argv[1])):
        print(f"usage: {sys.argv[0]} BINARY CASE  (or --list VERSION)", file=sys.stderr)
        return 2
    return run_case(sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
