#!/usr/bin/env python3
"""The guide's performance report (its code block 7): run a configuration
matrix through the fa<N>_benchmark binaries and write perf_report.md (the
guide's table), perf_results.csv and charts of throughput against sequence
length per version and dtype (PNG and SVG).

  automated_perf_test.py [--config configs/perf_test_config.json]
                         [--bin-dir ./install/bin] [--output-dir .]
                         [--repeats 1] [-- EXTRA BENCHMARK FLAGS]

The matrix file (JSON) gives versions, dtypes, seq_lens and causal (lists:
every combination runs), and batch, num_heads, head_dim, tile_q, tile_kv
(numbers or "auto"; FA1 runs its fixed 64x64 tiles), num_runs, warmup_runs.
Or an explicit list, as in the guide: "configs": [{"version": 2,
"tile_q": 128, "tile_kv": 64, "dtype": "bf16", "seq": 512, "batch": 2}, ...].
Each run is checked against the float64 reference (--check) on random
inputs of its own shape; the Correctness column is its PASS or FAIL, and
figures come from the benchmark's --json, not its text.  A progress bar shows
on a terminal, plain lines otherwise.  --repeats N runs the matrix N times,
in rounds, and reports each configuration's median throughput.

Exit status: 0 every run passed its check; 1 a run failed (its row says
how); 2 bad arguments or a bad config file (one line).  Files are written
through a temporary file and a rename.
"""
import argparse
import csv
import io
import json
import os
import sys
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_bench  # noqa: E402
import fa_charts  # noqa: E402

MATRIX_KEYS = {"description", "versions", "dtypes", "seq_lens", "causal", "batch", "num_heads", "head_dim",
               "tile_q", "tile_kv", "num_runs", "warmup_runs", "configs"}
ENTRY_KEYS = {"version", "tile_q", "tile_kv", "dtype", "seq", "batch", "causal", "num_heads", "head_dim"}
DTYPES = ("fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2")


def usage_error(message):
    print(f"automated_perf_test.py: {message}", file=sys.stderr)
    sys.exit(2)


def check_int(value, where, allow_auto=False):
    if allow_auto and value == "auto":
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        what = 'a positive integer or "auto"' if allow_auto else "a positive integer"
        usage_error(f"{where}: expected {what}, got {json.dumps(value)}")
    return value


def load_matrix(path):
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        usage_error(f"--config: cannot read '{path}': {e.strerror}")
    except json.JSONDecodeError as e:
        usage_error(f"--config {path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}")
    if not isinstance(cfg, dict):
        usage_error(f"--config {path}: expected an object at the top level")
    unknown = sorted(set(cfg) - MATRIX_KEYS)
    if unknown:
        usage_error(f"--config {path}: unknown key '{unknown[0]}' (expected: {', '.join(sorted(MATRIX_KEYS))})")
    common = {"batch": check_int(cfg.get("batch", 2), f"{path}: batch"),
              "num_heads": check_int(cfg.get("num_heads", 12), f"{path}: num_heads"),
              "head_dim": check_int(cfg.get("head_dim", 64), f"{path}: head_dim"),
              "tile_q": check_int(cfg.get("tile_q", "auto"), f"{path}: tile_q", True),
              "tile_kv": check_int(cfg.get("tile_kv", "auto"), f"{path}: tile_kv", True)}
    runs = (check_int(cfg.get("num_runs", 10), f"{path}: num_runs"), cfg.get("warmup_runs", 2))
    if not isinstance(runs[1], int) or isinstance(runs[1], bool) or runs[1] < 0:
        usage_error(f"{path}: warmup_runs: expected a non-negative integer, got {json.dumps(runs[1])}")
    entries = []
    if "configs" in cfg:
        if not isinstance(cfg["configs"], list) or not cfg["configs"]:
            usage_error(f"{path}: configs: expected a non-empty list of runs")
        for i, e in enumerate(cfg["configs"]):
            where = f"{path}: configs[{i}]"
            if not isinstance(e, dict):
                usage_error(f"{where}: expected an object")
            bad = sorted(set(e) - ENTRY_KEYS)
            if bad:
                usage_error(f"{where}: unknown key '{bad[0]}' (expected: {', '.join(sorted(ENTRY_KEYS))})")
            entry = dict(common, causal=False)
            entry.update(e)
            entries.append(entry)
    else:
        lists = {}
        for key in ("versions", "dtypes", "seq_lens", "causal"):
            value = cfg.get(key)
            if not isinstance(value, list) or not value:
                usage_error(f"{path}: {key}: expected a non-empty list")
            lists[key] = value
        for v in lists["versions"]:
            for dt in lists["dtypes"]:
                for s in lists["seq_lens"]:
                    for c in lists["causal"]:
                        entries.append(dict(common, version=v, dtype=dt, seq=s, causal=c))
    for i, e in enumerate(entries):
        where = f"{path}: run {i + 1}"
        if e.get("version") not in (1, 2, 3):
            usage_error(f"{where}: version {json.dumps(e.get('version'))} is not 1, 2 or 3")
        if e.get("dtype") not in DTYPES:
            usage_error(f"{where}: dtype {json.dumps(e.get('dtype'))} is not one of {', '.join(DTYPES)}")
        check_int(e.get("seq"), f"{where}: seq")
        if not isinstance(e.get("causal"), bool):
            usage_error(f"{where}: causal: expected true or false, got {json.dumps(e.get('causal'))}")
        for key in ("batch", "num_heads", "head_dim"):
            check_int(e[key], f"{where}: {key}")
        for key in ("tile_q", "tile_kv"):
            check_int(e[key], f"{where}: {key}", True)
    return entries, runs


def benchmark_args(e, runs, extra):
    args = [f"--batch-size={e['batch']}", f"--seq-q={e['seq']}", f"--seq-kv={e['seq']}",
            f"--num-heads={e['num_heads']}", f"--head-dim={e['head_dim']}", f"--dtype={e['dtype']}",
            f"--num-runs={runs[0]}", f"--warmup-runs={runs[1]}", "--check", "--no-probe", "--output=/dev/null"]
    if e["version"] != 1:  # FA1's tiles are fixed at 64x64
        args += [f"--tile-q={e['tile_q']}", f"--tile-kv={e['tile_kv']}"]
    if e["causal"]:
        args.append("--causal")
    return args + extra


class Progress:
    """A bar on a terminal, a line per run otherwise."""

    def __init__(self, total):
        self.total, self.done, self.tty = total, 0, sys.stderr.isatty()

    def step(self, label, result):
        self.done += 1
        if self.tty:
            filled = 30 * self.done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {label[:40]:<40}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        else:
            print(f"[{self.done}/{self.total}] {label}: {result}", flush=True)


def label_of(e):
    return (f"FA{e['version']} {e['dtype']} B={e['batch']} S={e['seq']} H={e['num_heads']} D={e['head_dim']} "
            f"{'causal' if e['causal'] else 'full'}")


def report_markdown(rows, machine):
    now = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    out = ["# FlashAttention performance report", "", f"Generated: {now}  ", f"Machine: {machine}", "",
           "| Version | Tile_Q | Tile_KV | dtype | Seq | Batch | Causal | Kernel | Throughput (TFLOPS) | "
           "Latency (ms) | Memory (MB) | Correctness |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| FA{r['version']} | {r['tile_q']} | {r['tile_kv']} | {r['dtype']} | {r['seq']} | {r['batch']} "
                       f"| {'yes' if r['causal'] else 'no'} | - | - | - | - | FAIL: {r['error']} |")
            continue
        out.append(f"| FA{r['version']} | {r['tile_q']} | {r['tile_kv']} | {r['dtype']} | {r['seq']} | {r['batch']} "
                   f"| {'yes' if r['causal'] else 'no'} | {r['kernel']} | {r['throughput_tflops']:.5f} | "
                   f"{r['latency_ms']:.4f} | {r['peak_memory_mb']:.2f} | "
                   f"{r['check']} (max abs error {r['max_abs_error']:.2e}) |")
    return "\n".join(out) + "\n"


def chart(rows, out_dir, machine):
    plt = fa_charts.pyplot()
    if plt is None:
        return [fa_charts.SKIPPED]
    ok = [r for r in rows if not r.get("error")]
    if not ok:
        return []
    masks = sorted({r["causal"] for r in ok})
    fig, axes = plt.subplots(1, len(masks), figsize=(6 * len(masks), 4.2), squeeze=False)
    for ax, causal in zip(axes[0], masks):
        series = sorted({(r["version"], r["dtype"]) for r in ok if r["causal"] == causal})
        for version, dtype in series:
            pts = sorted((r["seq"], r["throughput_tflops"]) for r in ok
                         if (r["version"], r["dtype"], r["causal"]) == (version, dtype, causal))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"FA{version} {dtype}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_ylabel("throughput (TFLOPS)")
        ax.set_title("causal" if causal else "no mask")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"FlashAttention throughput, {ok[0]['kernel']} path ({machine})")
    fig.tight_layout()
    paths = fa_charts.save(fig, os.path.join(out_dir, "perf_report"))
    plt.close(fig)
    return [f"chart: {p}" for p in paths]


def machine_name():
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    except OSError:
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} CPUs"


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    here = os.path.dirname(os.path.abspath(__file__))
    ap = fa_bench.OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(here, "..", "configs", "perf_test_config.json"))
    ap.add_argument("--bin-dir", default="./install/bin", help="where fa<N>_benchmark are (./install/bin)")
    ap.add_argument("--output-dir", default=".")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args(argv)
    if a.repeats < 1:
        usage_error(f"--repeats: {a.repeats} is not a positive integer")
    if not os.path.isdir(a.output_dir):
        usage_error(f"--output-dir: '{a.output_dir}' is not a directory")
    entries, runs = load_matrix(a.config)
    binaries = {}
    for v in sorted({e["version"] for e in entries}):
        path = os.path.join(a.bin_dir, f"fa{v}_benchmark")
        if not os.access(path, os.X_OK):
            usage_error(f"--bin-dir: no executable fa{v}_benchmark in '{a.bin_dir}' (the matrix runs FA{v})")
        binaries[v] = path

    print(f"Running {len(entries)} benchmark configurations{f' x {a.repeats} rounds' if a.repeats > 1 else ''}...")
    progress = Progress(len(entries) * a.repeats)
    samples = [[] for _ in entries]
    errors = [None] * len(entries)
    for _ in range(a.repeats):
        for i, e in enumerate(entries):
            if errors[i]:
                progress.step(label_of(e), "skipped (failed before)")
                continue
            try:
                r = fa_bench.run_json(binaries[e["version"]], benchmark_args(e, runs, extra))
                samples[i].append(r)
                progress.step(label_of(e), f"{r['throughput_tflops']:.5f} TFLOPS, check {r.get('check')}")
            except fa_bench.BenchmarkError as err:
                errors[i] = str(err).replace("|", "/")
                progress.step(label_of(e), f"FAILED: {err}")
    rows = []
    failed = 0
    for e, s, err in zip(entries, samples, errors):
        row = dict(e)
        if err or not s:
            row["error"] = err or "no result"
            failed += 1
        else:
            best = sorted(s, key=lambda r: r["throughput_tflops"])[len(s) // 2]  # the median run
            row.update(kernel=best["kernel"], tile_q=best["tile_q"], tile_kv=best["tile_kv"],
                       throughput_tflops=fa_bench.median([r["throughput_tflops"] for r in s]),
                       latency_ms=fa_bench.median([r["latency_ms"] for r in s]),
                       peak_memory_mb=best["peak_memory_mb"], max_abs_error=max(r["max_abs_error"] for r in s),
                       check="PASS" if all(r.get("check") == "PASS" for r in s) else "FAIL")
            failed += row["check"] != "PASS"
        rows.append(row)

    machine = machine_name()
    report = os.path.join(a.output_dir, "perf_report.md")
    fa_bench.write_atomic(report, report_markdown(rows, machine))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["version", "dtype", "seq", "batch", "num_heads", "head_dim", "causal", "tile_q", "tile_kv", "kernel",
                "throughput_tflops", "latency_ms", "peak_memory_mb", "max_abs_error", "check", "error"])
    for r in rows:
        w.writerow([r["version"], r["dtype"], r["seq"], r["batch"], r["num_heads"], r["head_dim"], int(r["causal"]),
                    r["tile_q"], r["tile_kv"], r.get("kernel", ""), r.get("throughput_tflops", ""),
                    r.get("latency_ms", ""), r.get("peak_memory_mb", ""), r.get("max_abs_error", ""),
                    r.get("check", "FAIL"), r.get("error", "")])
    csv_path = os.path.join(a.output_dir, "perf_results.csv")
    fa_bench.write_atomic(csv_path, buf.getvalue())
    print(f"Report saved to: {report}")
    print(f"Results saved to: {csv_path}")
    for line in chart(rows, a.output_dir, machine):
        print(line)
    print(f"\n{len(rows) - failed} of {len(rows)} configurations passed ({machine}).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
