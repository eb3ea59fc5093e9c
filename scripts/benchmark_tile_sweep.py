#!/usr/bin/env python3
"""Tile sweep (the guide's section 5.1): time a grid of (Tile_Q, Tile_KV) and
find the best for this machine.

Without --config: the guide's run — the data in --data-dir (input_Q/K/V.bin,
input_causal_mask.bin; shape from its config.txt), the guide's grid
Q 64/128/256 x KV 32/64/128, results in tile_sweep_results.csv
(tile_q,tile_kv,throughput,status).
With --config (configs/config_tile_sweep.json): every dataset x dtype of the
file on random inputs, tiles from its test_configs; the CSV gains dataset and
dtype columns in front.

Each sweep runs `fa2_benchmark --sweep`, which checks every plan against the
CPU's limits (EXCEEDS_LIMIT: listed, not run), shows a progress bar on a
terminal, and stores the best tiles in the tuning cache that --tile-q=auto
reads (unless --no-cache-update).  Exit status 2 on bad input.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_bench  # noqa: E402
import fa_charts  # noqa: E402
import fa_data  # noqa: E402

GUIDE_GRID = [(q, kv) for q in (64, 128, 256) for kv in (32, 64, 128)]

# Keys of the guide's file that have no meaning on a CPU, and what to use instead.
NOT_ON_CPU = {
    "hardware.npu_type": "Ascend NPU types do not apply; name a CPU path in hardware.target",
    "hardware.bhu_limit": "there are no BHUs; hardware.max_threads (FA_MAX_THREADS) caps the cores instead",
    "hardware.memory_bandwidth_gbps": "informational only; the sweep measures, it does not model bandwidth",
    "test_configs[].expected_bhu_usage": "the planner computes each plan's L2 working set itself",
    "metrics.bhu_utilization_percent": "reported as core occupancy by fa2_benchmark instead",
    "metrics.memory_footprint_mb": "see fa2_benchmark's Peak Memory line; the sweep records throughput",
    "metrics.max_abs_error_vs_ref": "run fa2_benchmark --check or fa2_test for accuracy; the sweep records throughput",
}
ALLOWED = {
    "": {"description", "hardware", "test_configs", "datasets", "dtypes", "metrics"},
    "hardware": {"target", "max_threads", "npu_type", "bhu_limit", "memory_bandwidth_gbps"},
    "test_configs[]": {"name", "tile_q", "tile_kv", "note", "expected_bhu_usage"},
    "datasets[]": {"name", "batch", "seq_q", "seq_kv", "heads", "head_dim", "num_kv_heads", "causal"},
}
KNOWN_METRICS = {"throughput_tflops", "latency_ms", "memory_footprint_mb", "bhu_utilization_percent",
                 "max_abs_error_vs_ref"}


_warned = set()


def warn(message):
    if message not in _warned:  # once per key, not once per list item
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr)


def check_keys(obj, where, path):
    if not isinstance(obj, dict):
        raise fa_data.InputError(f"{path}: {where or 'the file'} must be a JSON object")
    for key in obj:
        if key not in ALLOWED[where]:
            raise fa_data.InputError(f"{path}: unknown key '{(where + '.' if where else '') + key}' "
                                     f"(expected one of: {', '.join(sorted(ALLOWED[where]))})")
        dotted = (where + "." if where else "") + key
        if dotted in NOT_ON_CPU:
            warn(f"{path}: '{dotted}' ignored: {NOT_ON_CPU[dotted]}")


def positive_int(value, what, path):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise fa_data.InputError(f"{path}: {what} must be a positive integer (got {value!r})")
    return value


def load_config(path):
    try:
        with open(path) as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise fa_data.InputError(f"--config: file '{path}' not found") from None
    except json.JSONDecodeError as e:
        raise fa_data.InputError(f"--config: '{path}' is not valid JSON ({e})") from None
    check_keys(cfg, "", path)
    hw = cfg.get("hardware", {})
    check_keys(hw, "hardware", path)
    target = hw.get("target", "auto")
    if target not in ("auto", "generic", "avx2", "avx512", "avx512bf16", "amx"):
        raise fa_data.InputError(
            f"{path}: hardware.target '{target}' (expected auto, generic, avx2, avx512, avx512bf16 or amx)")
    max_threads = hw.get("max_threads", 0)
    if not isinstance(max_threads, int) or max_threads < 0:
        raise fa_data.InputError(f"{path}: hardware.max_threads must be 0 (all cores) or a positive integer")
    tiles = []
    for i, tc in enumerate(cfg.get("test_configs", [])):
        check_keys(tc, "test_configs[]", path)
        q = positive_int(tc.get("tile_q"), f"test_configs[{i}].tile_q", path)
        kv = positive_int(tc.get("tile_kv"), f"test_configs[{i}].tile_kv", path)
        tiles.append((q, kv))
    datasets = []
    for i, ds in enumerate(cfg.get("datasets", [])):
        check_keys(ds, "datasets[]", path)
        d = {k: positive_int(ds.get(k), f"datasets[{i}].{k}", path) for k in ("batch", "seq_q", "heads", "head_dim")}
        d["seq_kv"] = positive_int(ds.get("seq_kv", d["seq_q"]), f"datasets[{i}].seq_kv", path)
        d["num_kv_heads"] = positive_int(ds.get("num_kv_heads", d["heads"]), f"datasets[{i}].num_kv_heads", path)
        d["causal"] = bool(ds.get("causal", False))
        d["name"] = str(ds.get("name", f"dataset{i}"))
        datasets.append(d)
    if not datasets:
        raise fa_data.InputError(f"{path}: 'datasets' must list at least one dataset")
    dtypes = cfg.get("dtypes", ["fp16"])
    for dt in dtypes:
        if dt not in fa_data.DTYPES:
            raise fa_data.InputError(f"{path}: dtype '{dt}' (expected fp16, bf16 or fp32)")
    for m in cfg.get("metrics", []):
        if m not in KNOWN_METRICS:
            raise fa_data.InputError(f"{path}: unknown metric '{m}' (expected one of: {', '.join(sorted(KNOWN_METRICS))})")
        if f"metrics.{m}" in NOT_ON_CPU:
            warn(f"{path}: metric '{m}': {NOT_ON_CPU['metrics.' + m]}")
    return {"target": target, "max_threads": max_threads, "tiles": tiles or GUIDE_GRID, "datasets": datasets,
            "dtypes": dtypes}


def run_sweep(binary, shape_args, tiles, runs, warmups, cache_update, env):
    cmd = [binary, "--sweep", "--json", "--no-probe", "--sweep-tiles=" + ",".join(f"{q}x{kv}" for q, kv in tiles),
           f"--num-runs={runs}", f"--warmup-runs={warmups}"] + shape_args
    if not cache_update:
        cmd.append("--no-cache-update")
    # stderr stays the terminal's: the benchmark draws its progress bar there.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise fa_data.InputError(f"fa2_benchmark --sweep failed (exit {p.returncode}): {' '.join(cmd)}")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return [r for r in rows if "tile_q" in r], next((r for r in rows if "best_tile_q" in r), None)


def print_rows(rows):
    print(f"{'Tile_Q':>8} {'Tile_KV':>8} {'Throughput':>16} {'Status':>14}")
    print("-" * 50)
    for r in rows:
        tput = f"{r['throughput_tflops']:.5f} TFLOPS" if r["status"] == "OK" else "N/A"
        print(f"{r['tile_q']:>8} {r['tile_kv']:>8} {tput:>16} {r['status']:>14}")


def heatmap(sweeps, base_path):
    """One heat map of throughput over Tile_Q x Tile_KV per sweep (dataset and
    dtype); plans the planner refuses (EXCEEDS_LIMIT) are blank cells saying
    so, tiles not in the list blank."""
    plt = fa_charts.pyplot()
    if plt is None:
        return [fa_charts.SKIPPED]
    n = len(sweeps)
    cols = min(n, 3)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(4.2 * cols, 3.4 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, (labels, rows) in zip(axes.flat, sweeps):
        qs = sorted({r["tile_q"] for r in rows})
        kvs = sorted({r["tile_kv"] for r in rows})
        grid = [[float("nan")] * len(kvs) for _ in qs]
        status = {}
        for r in rows:
            status[(qs.index(r["tile_q"]), kvs.index(r["tile_kv"]))] = r["status"]
            if r["status"] == "OK":
                grid[qs.index(r["tile_q"])][kvs.index(r["tile_kv"])] = r["throughput_tflops"]
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(kvs)), [str(k) for k in kvs])
        ax.set_yticks(range(len(qs)), [str(q) for q in qs])
        ax.set_xlabel("Tile_KV")
        ax.set_ylabel("Tile_Q")
        ok = [v for line in grid for v in line if v == v]
        for y, line in enumerate(grid):
            for x, value in enumerate(line):
                if value != value:  # NaN: refused by the planner, or not in the list
                    if status.get((y, x)) == "EXCEEDS_LIMIT":
                        ax.text(x, y, "exceeds\nL2 limit", ha="center", va="center", fontsize=7, color="dimgray")
                    continue
                bright = value > (min(ok) + max(ok)) / 2
                ax.text(x, y, f"{value:.3f}", ha="center", va="center", fontsize=8, color="black" if bright else "white")
        ax.set_title(" ".join(labels) if labels else "tile sweep (TFLOPS)")
        fig.colorbar(image, ax=ax, label="TFLOPS")
    fig.tight_layout()
    paths = fa_charts.save(fig, base_path)
    plt.close(fig)
    return [f"chart: {path}" for path in paths]


def main():
    p = fa_bench.OneLineParser(description="Sweep FlashAttention tile sizes on this machine.")
    p.add_argument("--binary", default="./tests/fa2_benchmark")
    p.add_argument("--data-dir", default="./test_data", help="inputs for the run without --config")
    p.add_argument("--output", default="tile_sweep_results.csv")
    p.add_argument("--config", default=None, help="a sweep configuration (configs/config_tile_sweep.json)")
    p.add_argument("--num-runs", type=int, default=10)
    p.add_argument("--warmup-runs", type=int, default=2)
    p.add_argument("--no-cache-update", action="store_true", help="do not write the tuning cache")
    p.add_argument("--no-chart", action="store_true",
                   help="skip the heat map (written beside --output as <name>_heatmap.png and .svg)")
    a = p.parse_args()
    try:
        if not os.access(a.binary, os.X_OK):
            raise fa_data.InputError(f"--binary: '{a.binary}' is not an executable fa2_benchmark")
        if a.num_runs < 1 or a.warmup_runs < 0:
            raise fa_data.InputError("--num-runs must be >= 1 and --warmup-runs >= 0")
        env = dict(os.environ)
        jobs = []  # (label columns, shape args, tiles)
        if a.config:
            cfg = load_config(a.config)
            if cfg["target"] != "auto":
                env["FA_ISA"] = cfg["target"]
            if cfg["max_threads"]:
                env["FA_MAX_THREADS"] = str(cfg["max_threads"])
            for ds in cfg["datasets"]:
                for dt in cfg["dtypes"]:
                    args = [f"--batch-size={ds['batch']}", f"--seq-q={ds['seq_q']}", f"--seq-kv={ds['seq_kv']}",
                            f"--num-heads={ds['heads']}", f"--num-kv-heads={ds['num_kv_heads']}",
                            f"--head-dim={ds['head_dim']}", f"--dtype={dt}"] + (["--causal"] if ds["causal"] else [])
                    jobs.append(([ds["name"], dt], args, cfg["tiles"]))
        else:
            d = a.data_dir
            c = fa_data.read_config(os.path.join(d, "config.txt"))
            args = [f"--input-q={d}/input_Q.bin", f"--input-k={d}/input_K.bin", f"--input-v={d}/input_V.bin",
                    f"--batch-size={c['batch_size']}", f"--seq-q={c['seq_len_q']}", f"--seq-kv={c['seq_len_kv']}",
                    f"--num-heads={c['num_heads']}", f"--num-kv-heads={c['num_kv_heads']}",
                    f"--head-dim={c['head_dim']}", f"--dtype={c['dtype']}", f"--layout={c['layout']}"]
            if c["causal"] and os.path.isfile(f"{d}/input_causal_mask.bin"):
                args.append(f"--causal-mask={d}/input_causal_mask.bin")
            jobs.append(([], args, GUIDE_GRID))

        lines = []
        sweeps = []
        header = ("dataset,dtype," if a.config else "") + "tile_q,tile_kv,throughput,status"
        for labels, args, tiles in jobs:
            if labels:
                print(f"\n== {labels[0]} {labels[1]}")
            rows, best = run_sweep(a.binary, args, tiles, a.num_runs, a.warmup_runs, not a.no_cache_update, env)
            print_rows(rows)
            sweeps.append((labels, rows))
            for r in rows:
                tput = f"{r['throughput_tflops']:.6f}" if r["status"] == "OK" else "N/A"
                lines.append(",".join(labels + [str(r["tile_q"]), str(r["tile_kv"]), tput, r["status"]]))
            if best:
                print(f"\nBest config: Tile_Q={best['best_tile_q']}, Tile_KV={best['best_tile_kv']} "
                      f"@ {best['best_throughput_tflops']:.5f} TFLOPS ({best['kernel']})")
        fa_data.write_atomic(a.output, (header + "\n" + "\n".join(lines) + "\n").encode())
        print(f"\nResults saved to: {a.output}")
        if not a.no_chart:
            for line in heatmap(sweeps, os.path.splitext(a.output)[0] + "_heatmap"):
                print(line)
    except fa_data.InputError as e:
        fa_data.fail_input(str(e))


if __name__ == "__main__":
    main()
