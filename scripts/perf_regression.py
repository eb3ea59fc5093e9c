#!/usr/bin/env python3
"""The performance stage of scripts/regression_test.sh (the guide's code
block 10): measure a set of configurations, write current_results.csv, and
compare each configuration's throughput with the baseline.

  perf_regression.py --benchmark 2=PATH [--benchmark 1=PATH ...]
                     [--configs LIST] [--repeats 3] [--num-runs 10]
                     [--current current_results.csv] [--baseline baseline_results.csv]
                     [--threshold 10] [--update-baseline] [-- EXTRA BENCHMARK FLAGS]

A configuration is DTYPE/BxSxHxD[/causal], e.g. fp16/2x512x12x64/causal (the
guide's default shape); --configs takes a comma-separated list.  Each
configuration runs --repeats times, in rounds (every configuration once, then
again), each run itself the median of --num-runs timed calls; the figure
compared is the median of the repeats, so one slow moment of a shared machine
does not read as a regression.  A configuration whose median throughput is
more than --threshold percent below the baseline's is printed as
  REGRESSION: <config>: <now> vs baseline <then> TFLOPS (drop <x>%)
and the exit status is 1.  Exit 0: no regression (or no baseline yet: say
so, and --update-baseline writes one); 2: bad arguments or unreadable files.
The CSVs are written through a temporary file and a rename.
"""
import argparse
import csv
import io
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_bench  # noqa: E402

DEFAULT_CONFIGS = "fp16/2x512x12x64/causal,bf16/1x2048x16x128/causal"
DTYPES = ("fp16", "bf16", "fp32")


def usage_error(message):
    print(f"perf_regression.py: {message}", file=sys.stderr)
    sys.exit(2)


def parse_config(text):
    parts = text.split("/")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("causal", "full")):
        usage_error(f"--configs: '{text}' is not DTYPE/BxSxHxD[/causal] (e.g. fp16/2x512x12x64/causal)")
    dtype = parts[0]
    if dtype not in DTYPES:
        usage_error(f"--configs: '{text}': dtype '{dtype}' is not one of {', '.join(DTYPES)}")
    dims = parts[1].split("x")
    if len(dims) != 4 or not all(d.isdigit() and int(d) > 0 for d in dims):
        usage_error(f"--configs: '{text}': shape '{parts[1]}' is not BxSxHxD with positive integers")
    b, s, h, d = (int(x) for x in dims)
    causal = len(parts) == 3 and parts[2] == "causal"
    return {"dtype": dtype, "batch": b, "seq": s, "heads": h, "head_dim": d, "causal": causal}


def config_name(version, c):
    return (f"fa{version} {c['dtype']} B{c['batch']} S{c['seq']} H{c['heads']} D{c['head_dim']} "
            f"{'causal' if c['causal'] else 'full'}")


def benchmark_args(c, num_runs, extra):
    args = [f"--batch-size={c['batch']}", f"--seq-q={c['seq']}", f"--seq-kv={c['seq']}",
            f"--num-heads={c['heads']}", f"--head-dim={c['head_dim']}", f"--dtype={c['dtype']}",
            f"--num-runs={num_runs}", "--warmup-runs=2", "--no-probe", *extra]
    return args + (["--causal"] if c["causal"] else [])


def read_results(path, what):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        usage_error(f"{what} '{path}': {e.strerror}")
    out = {}
    for i, row in enumerate(rows, start=2):
        try:
            out[row["config"]] = float(row["throughput_tflops"])
        except (KeyError, TypeError, ValueError):
            usage_error(f"{what} '{path}' line {i}: expected the columns config,throughput_tflops with a number")
    return out


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = fa_bench.OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", action="append", default=[], metavar="N=PATH",
                    help="version N's benchmark binary (repeat for each version)")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-runs", type=int, default=10)
    ap.add_argument("--current", default="current_results.csv")
    ap.add_argument("--baseline", default="baseline_results.csv")
    ap.add_argument("--threshold", type=float, default=10.0, help="percent drop flagged as a regression (10)")
    ap.add_argument("--update-baseline", action="store_true", help="write the current results as the baseline")
    a = ap.parse_args(argv)
    if not a.benchmark:
        usage_error("--benchmark N=PATH is required (the binary of each version to measure)")
    binaries = []
    for item in a.benchmark:
        version, _, path = item.partition("=")
        if version not in ("1", "2", "3") or not path:
            usage_error(f"--benchmark: '{item}' is not N=PATH with N 1, 2 or 3")
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            usage_error(f"--benchmark: '{path}' is not an executable file")
        binaries.append((version, path))
    if a.repeats < 1 or a.num_runs < 1:
        usage_error("--repeats and --num-runs must be positive integers")
    if not 0 < a.threshold < 100:
        usage_error(f"--threshold: {a.threshold} is not a percentage between 0 and 100")
    configs = [parse_config(t) for t in a.configs.split(",") if t]
    if not configs:
        usage_error("--configs is empty")
    baseline = read_results(a.baseline, "baseline") if os.path.exists(a.baseline) else None

    # Rounds: every (version, configuration) once, then again, so a slow
    # stretch of the machine spreads over all of them instead of one.
    samples = {}
    meta = {}
    for round_index in range(a.repeats):
        for version, binary in binaries:
            for c in configs:
                name = config_name(version, c)
                try:
                    r = fa_bench.run_json(binary, benchmark_args(c, a.num_runs, extra))
                except fa_bench.BenchmarkError as e:
                    print(f"perf_regression.py: {e}", file=sys.stderr)
                    return 1
                samples.setdefault(name, []).append((r["throughput_tflops"], r["latency_ms"]))
                meta[name] = (r.get("kernel", ""), r.get("threads", ""))
        print(f"  round {round_index + 1}/{a.repeats} done", flush=True)

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["config", "throughput_tflops", "latency_ms", "repeats", "kernel", "threads", "cpu"])
    current = {}
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    for name, values in samples.items():
        tflops = fa_bench.median([t for t, _ in values])
        latency = fa_bench.median([ms for _, ms in values])
        current[name] = tflops
        w.writerow([name, f"{tflops:.6f}", f"{latency:.4f}", len(values), *meta[name], cpu])
    fa_bench.write_atomic(a.current, out.getvalue())
    for name, tflops in current.items():
        print(f"  {name}: {tflops:.5f} TFLOPS (median of {a.repeats})")
    print(f"Current results: {a.current}")

    regressions = 0
    if baseline is None:
        print(f"No baseline found ({a.baseline}): nothing to compare"
              + ("" if a.update_baseline else "; --update-baseline writes one"))
    else:
        compared = 0
        for name, now in current.items():
            if name not in baseline:
                print(f"  {name}: not in the baseline")
                continue
            then = baseline[name]
            compared += 1
            drop = (then - now) / then * 100 if then > 0 else 0.0
            if drop > a.threshold:
                print(f"REGRESSION: {name}: {now:.3f} vs baseline {then:.3f} TFLOPS (drop {drop:.1f}%)")
                regressions += 1
            else:
                print(f"  {name}: {now:.3f} vs baseline {then:.3f} TFLOPS ({-drop:+.1f}%)")
        if regressions == 0:
            print(f"No significant performance regressions detected ({compared} configurations, "
                  f"threshold {a.threshold:g}%).")
        else:
            print(f"{regressions} regression(s) detected (threshold {a.threshold:g}%).")
    if a.update_baseline:
        fa_bench.write_atomic(a.baseline, out.getvalue())
        print(f"Baseline updated: {a.baseline}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
