#!/usr/bin/env python3
"""Tests of the guide's tooling scripts (its section 7): the build script and
an install built with it, the post-build and environment checks, the
regression test, the benchmark runner and the Dockerfile.

  tooling_test.py --list
  tooling_test.py CASE WORK_DIR [BENCHMARK_BINARY]

WORK_DIR holds what the cases share: the build_and_install case (a CTest
fixture) builds FA2 for the generic target with scripts/build_flash_attention.sh
into WORK_DIR/install_fa2; the cases after it use that install.  Each case
prints PASS or FAIL and its reason.  Stdlib only.
"""
import csv
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, **kw)


def script(name):
    return os.path.join(SCRIPTS, name)


def one_line_error(p, *needles):
    """Bad input: exit 2, exactly one line on stderr naming what was wrong."""
    assert p.returncode == 2, f"exit {p.returncode}, expected 2: {p.stdout}{p.stderr}"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {p.stderr!r}"
    for n in needles:
        assert n in lines[0], f"'{n}' not in: {lines[0]}"


def install_dir(work):
    return os.path.join(work, "install_fa2")


# --- build_flash_attention.sh (block 1) -------------------------------------

def case_build_script_refuses_npu_target(work, _):
    target = os.path.join(work, "refused_install")
    p = run(["bash", script("build_flash_attention.sh"), "2", "ascend910B", target])
    one_line_error(p, "ascend910B", "Ascend NPU", "auto", "avx2", "avx512", "avx512bf16", "amx")
    assert not os.path.exists(target), "a refused build must not create its install directory"
    p = run(["bash", script("build_flash_attention.sh"), "2", "sse9", target])
    one_line_error(p, "TARGET 'sse9' is not valid", "avx512bf16")
    p = run(["bash", script("build_flash_attention.sh"), "4"])
    one_line_error(p, "VERSION '4'", "1, 2, 3 or all")
    p = run(["bash", script("build_flash_attention.sh"), "2", "auto", target, "--tile-q=100"])
    one_line_error(p, "--tile-q", "power of two")
    p = run(["bash", script("build_flash_attention.sh"), "--help"])
    assert p.returncode == 0 and "VERSION" in p.stdout and "INSTALL_DIR" in p.stdout, p.stdout


def case_build_and_install(work, _):
    shutil.rmtree(install_dir(work), ignore_errors=True)
    # The install the cases use holds FA2 and one other operator (RoPE, which
    # the consumer cases link): LayerNorm and the GLUs (and with them the
    # decoder-layer example) are left out to keep the suite's time; the main
    # build has them.
    p = run(["bash", script("build_flash_attention.sh"), "2", "generic", install_dir(work),
             "--build-dir", os.path.join(work, "build_fa2"), "--jobs", "2",
             "--", "-DENABLE_LAYER_NORM=OFF", "-DENABLE_GLU=OFF"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Build completed successfully!" in p.stdout, p.stdout
    for f in ("lib/libflash_attention_fa2.so", "bin/fa2_benchmark", "bin/fa2_test",
              "include/flash_attention/flash_attention.h", "lib/cmake/FlashAttention/FlashAttentionConfig.cmake",
              "lib/cmake/FlashAttention/FlashAttentionFa2Targets.cmake", "lib/pkgconfig/flash_attention_fa2.pc",
              "lib/cmake/FlashAttention/FlashAttention_ropeTargets.cmake", "lib/pkgconfig/ops_transformer_rope.pc"):
        assert os.path.exists(os.path.join(install_dir(work), f)), f"{f} missing from the install"


def consumer(work, way):
    p = run(["bash", os.path.join(ROOT, "tests", "install", "consumer_test.sh"), way, install_dir(work),
             os.path.join(work, f"consumer_{way}")])
    if p.returncode == 77:
        print(p.stdout.strip())
        sys.exit(77)
    assert p.returncode == 0 and "consumer: fa2_forward vs reference" in p.stdout and ": PASS" in p.stdout, \
        p.stdout + p.stderr


def case_consumer_cmake(work, _):
    consumer(work, "cmake")


def case_consumer_pkg_config(work, _):
    consumer(work, "pkg-config")


# --- post_build_check.sh (block 6) ------------------------------------------

def case_post_build_check_passes(work, _):
    p = run(["bash", script("post_build_check.sh"), install_dir(work)])
    assert p.returncode == 0, p.stdout + p.stderr
    for needle in ("[PASS] FA2 library found", "all public API", "passed its reference check", "All checks PASSED",
                   "Instruction sets:"):
        assert needle in p.stdout, f"'{needle}' not in:\n{p.stdout}"
    assert "[FAIL]" not in p.stdout, p.stdout


def case_post_build_check_counts_failures(work, _):
    with tempfile.TemporaryDirectory() as d:
        broken = os.path.join(d, "install")
        shutil.copytree(install_dir(work), broken, symlinks=True)
        # Three faults: a test binary that is not executable, a missing
        # pkg-config file, and a benchmark that cannot load its library.
        test_bin = os.path.join(broken, "bin", "fa2_test")
        os.chmod(test_bin, os.stat(test_bin).st_mode & ~(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
        os.unlink(os.path.join(broken, "lib", "pkgconfig", "flash_attention_fa2.pc"))
        for name in os.listdir(os.path.join(broken, "lib")):
            if name.startswith("libflash_attention_fa2.so."):
                os.unlink(os.path.join(broken, "lib", name))
        p = run(["bash", script("post_build_check.sh"), broken, "--versions", "2"])
        fails = [line for line in p.stdout.splitlines() if line.startswith("[FAIL]")]
        # The library itself (a dangling link), the test's exec bit, the .pc
        # file, ldd of the benchmark, and the benchmark's run.
        assert p.returncode == len(fails) and p.returncode >= 4, f"exit {p.returncode}, fails {fails}:\n{p.stdout}"
        assert any("NOT executable" in f for f in fails), fails
        assert any("pkg-config file NOT found" in f for f in fails), fails
        assert any("unresolved dependencies" in f for f in fails), fails
        assert f"{p.returncode} check(s) FAILED" in p.stdout, p.stdout
    p = run(["bash", script("post_build_check.sh"), "/nonexistent/install"])
    one_line_error(p, "/nonexistent/install", "not a directory")


# --- env_health_check.sh (block 9) ------------------------------------------

def case_env_health_check(work, _):
    p = run(["bash", script("env_health_check.sh")])
    assert p.returncode == p.stdout.count("[ FAIL ]"), p.stdout
    for needle in ("g++", "CMake", "Model:", "Instruction sets:", "Cores:", "Caches", "Memory:", "Huge pages:",
                   "CUDA toolkit:"):
        assert needle in p.stdout, f"'{needle}' not in:\n{p.stdout}"
    # The suite runs here, so the toolchain it needs is present.
    assert p.returncode == 0, p.stdout
    # An old CMake first on the PATH is a problem, named with its fix.
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "cmake")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'cmake version 3.10.2'\n")
        os.chmod(fake, 0o755)
        env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
        p = run(["bash", script("env_health_check.sh")], env=env)
        assert p.returncode == 1, f"exit {p.returncode}:\n{p.stdout}"
        assert re.search(r"\[ FAIL \] CMake 3\.10\.2 is older than 3\.20\n\s+fix: apt-get install cmake", p.stdout), p.stdout
        assert "1 issue(s) found" in p.stdout, p.stdout
    p = run(["bash", script("env_health_check.sh"), "--frobnicate"])
    one_line_error(p, "--frobnicate")


# --- regression_test.sh (block 10) ------------------------------------------

def write_baseline(path, config, tflops):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "throughput_tflops"])
        w.writerow([config, tflops])


def case_regression_test(work, _):
    config_arg = "fp32/1x128x2x32/causal"
    config_name = "fa2 fp32 B1 S128 H2 D32 causal"
    with tempfile.TemporaryDirectory() as d:
        base = os.path.join(d, "base")
        os.symlink(install_dir(work), base + "_fa2")
        common = ["bash", script("regression_test.sh"), "--versions", "2", "--install-base", base, "--skip-build",
                  "--configs", config_arg, "--repeats", "2", "--num-runs", "3", "--report-dir", d,
                  "--baseline", os.path.join(d, "baseline_results.csv"), "--current", os.path.join(d, "current.csv"),
                  "--test-args", "--quick --dtype=fp32"]
        # No baseline yet: passes, says so; --update-baseline writes one.
        p = run(common + ["--update-baseline"])
        assert p.returncode == 0, p.stdout + p.stderr
        assert "No baseline found" in p.stdout and "Baseline updated" in p.stdout, p.stdout
        rows = list(csv.DictReader(open(os.path.join(d, "baseline_results.csv"))))
        assert [r["config"] for r in rows] == [config_name], rows
        measured = float(rows[0]["throughput_tflops"])
        assert measured > 0, rows
        # A baseline far above anything this machine does: a regression,
        # named, and a failing exit status.
        write_baseline(os.path.join(d, "baseline_results.csv"), config_name, measured * 1000)
        p = run(common)
        assert p.returncode == 1, f"exit {p.returncode}:\n{p.stdout}{p.stderr}"
        assert re.search(rf"REGRESSION: {config_name}: [0-9.]+ vs baseline [0-9.]+ TFLOPS \(drop [0-9.]+%\)", p.stdout), \
            p.stdout
        assert "FAILED: 1 (Performance regression check" in p.stdout, p.stdout
        # A baseline well below: no regression, exit 0.
        write_baseline(os.path.join(d, "baseline_results.csv"), config_name, measured / 1000)
        p = run(common)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "No significant performance regressions detected" in p.stdout, p.stdout
        reports = [f for f in os.listdir(d) if re.fullmatch(r"regression_report_\d{8}_\d{6}\.txt", f)]
        assert reports, os.listdir(d)
        assert not [f for f in os.listdir(d) if f.endswith(".partial")], os.listdir(d)
        current = list(csv.DictReader(open(os.path.join(d, "current.csv"))))
        assert current[0]["config"] == config_name and float(current[0]["throughput_tflops"]) > 0, current
        # A failing correctness stage fails the run too.
        p = run(common[:-1] + ["--quick --isa=sse9"])
        assert p.returncode == 1 and "FA2 correctness" in p.stdout and "FAIL" in p.stdout, p.stdout
        # Bad arguments: one line, exit 2.
        one_line_error(run(["bash", script("regression_test.sh"), "--threshold", "ten"]), "--threshold", "ten")
        one_line_error(run(["bash", script("regression_test.sh"), "--versions", "4"]), "--versions", "'4'")


# --- configs/ and --config (blocks 11 and 12) ---------------------------------

def last_json(p):
    """The JSON object a --json run prints on its last line."""
    return json.loads(p.stdout.strip().splitlines()[-1])


def bench_json(benchmark, *args, cwd=None):
    p = run([benchmark, "--num-runs=1", "--warmup-runs=0", "--no-probe", *args, "--json"], cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return last_json(p), p.stderr


def case_benchmark_config_files(work, benchmark):
    configs = os.path.join(ROOT, "configs")
    # The long-sequence config, at a shorter length given on the command
    # line (which wins) and the config's tiles, dtype and prefetch.
    # Its profiling section writes the trace into ./profiling_results.
    # On a core whose L2 the config's 256 x 128 tiles overflow (512 KiB:
    # Zen 2 and 3), the benchmark refuses them as the guide's trap says, and
    # the rest is checked with the tile the refusal proposes.
    long_args = [f"--config={configs}/long_sequence_config.json", "--seq-q=256", "--num-heads=2"]
    tile_q = 256
    with tempfile.TemporaryDirectory() as d:
        def long_run():
            return run([benchmark, "--num-runs=1", "--warmup-runs=0", "--no-probe", *long_args, "--json"], cwd=d)
        p = long_run()
        if p.returncode != 0:
            assert p.returncode == 2 and "Error: Resource usage exceeds device limit." in p.stderr and \
                "use a smaller tile_q (128 fits with tile_kv 128)" in p.stderr, p.stdout + p.stderr
            assert not os.path.exists(os.path.join(d, "profiling_results")), os.listdir(d)
            tile_q = 128
            long_args.append("--tile-q=128")
            p = long_run()
        assert p.returncode == 0, p.stdout + p.stderr
        r, err = last_json(p), p.stderr
        assert os.path.isfile(os.path.join(d, "profiling_results", "fa2_benchmark_trace.json")), os.listdir(d)
    assert (r["seq_q"], r["seq_kv"], r["num_heads"], r["head_dim"], r["batch"]) == (256, 256, 2, 128, 1), r
    assert (r["dtype"], r["tile_q"], r["tile_kv"], r["causal"], r["async_prefetch"]) == ("bf16", tile_q, 128, False, True), r
    assert r["profile"] == "./profiling_results/fa2_benchmark_trace.json", r
    for key in ("memory_optimization.max_kv_cache_length", "memory_optimization.preallocate_kv_cache",
                "profiling.trace_level", "profiling.include_tc_utilization"):
        assert f"long_sequence_config.json: {key}" in err, err
    assert len(err.strip().splitlines()) == 4, f"one warning per meaningless key, nothing else: {err}"
    # --no-async on the command line beats the file's enable_async.
    with tempfile.TemporaryDirectory() as d:
        r, _ = bench_json(benchmark, *long_args[:1], *long_args[3:], "--seq-q=64", "--num-heads=1", "--no-async", cwd=d)
    assert r["async_prefetch"] is False, r
    # The mixed-precision YAML: bf16, causal, 128x64 tiles, 32 heads of 128.
    r, err = bench_json(benchmark, f"--config={configs}/mixed_precision_config.yaml", "--seq-q=64", "--batch-size=1")
    assert (r["dtype"], r["causal"], r["tile_q"], r["tile_kv"], r["num_heads"], r["head_dim"]) == \
        ("bf16", True, 128, 64, 32, 128), r
    for key in ("model.num_layers", "precision_strategy.gemm_compute", "precision_strategy.layer_overrides",
                "loss_scaling", "performance.enable_kernel_fusion", "performance.fusion_list",
                "precision_strategy.attention_compute.softmax_dtype"):
        assert re.search(rf"warning: .*mixed_precision_config.yaml: {re.escape(key)} \(line \d+, column \d+\)", err), \
            f"{key}: {err}"
    # --json-file beside the text lines: the same object, indented.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.json")
        p = run([benchmark, "--seq-q=64", "--num-heads=1", "--num-runs=1", "--warmup-runs=0", "--no-probe",
                 f"--json-file={path}"])
        assert p.returncode == 0 and "Throughput:" in p.stdout, p.stdout + p.stderr
        r = json.load(open(path))
        assert r["seq_q"] == 64 and r["throughput_tflops"] > 0, r


# --- --profile: a Chrome trace of the timed calls ---------------------------

def case_benchmark_profile_trace(work, benchmark):
    with tempfile.TemporaryDirectory() as d:
        runs = 3
        # A causal call (items of different lengths) and a decoding call with
        # split-KV and GQA (the row path, not lapped), both per thread.
        for args in (["--seq-q=300", "--num-heads=3", "--head-dim=64", "--dtype=bf16", "--causal"],
                     ["--seq-q=1", "--seq-kv=3000", "--num-heads=8", "--num-kv-heads=2", "--head-dim=64"]):
            out = os.path.join(d, "trace")
            r, _ = bench_json(benchmark, *args, f"--num-runs={runs}", f"--profile={out}")
            trace = json.load(open(r["profile"]))
            events = trace["traceEvents"]
            assert trace["otherData"]["work_items"] == r["work_items"] > 0, trace["otherData"]
            calls = [e for e in events if e.get("cat") == "call"]
            items = [e for e in events if e.get("cat") == "item"]
            stages = [e for e in events if e.get("cat") == "stage"]
            assert len(calls) == runs, len(calls)
            assert len(items) == runs * r["work_items"], (len(items), r["work_items"])
            names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
            assert names[0] == "calls" and all(names[e["tid"]].startswith("worker ") for e in items), names
            assert {e["tid"] for e in items} <= set(range(1, r["threads"] + 1)), {e["tid"] for e in items}
            for call in calls:  # every item inside its call's span, with a positive duration
                inside = [e for e in items if call["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= call["ts"] + call["dur"] + 1]
                assert len(inside) >= r["work_items"], (call, len(inside))
            assert all(e["dur"] > 0 for e in items), [e for e in items if e["dur"] <= 0][:3]
            by_tid = {}
            for e in items:  # one thread runs one item at a time
                by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
            for spans in by_tid.values():
                spans.sort()
                assert all(a[1] <= b[0] + 1e-3 for a, b in zip(spans, spans[1:])), spans[:4]
            counters = [e for e in events if e["ph"] == "C"]
            assert len(counters) == 2 * runs and all(c["args"]["buffers"] > 0 for c in counters), counters[:2]
            if args[0] == "--seq-q=300":  # the tile loop's stages, inside their item, summing to at most its span
                assert stages and {s["name"] for s in stages} >= {"Q*K^T", "softmax", "P*V"}, {s["name"] for s in stages}
                item = items[0]
                mine = [s for s in stages if s["tid"] == item["tid"] and item["ts"] <= s["ts"] < item["ts"] + item["dur"]]
                assert mine and sum(s["dur"] for s in mine) <= item["dur"] * 1.01, (item, mine)
            else:  # decoding: the row path, said so
                assert all("row path" in e["args"].get("note", "") for e in items), items[:2]
        # Bad input: a file where the directory should go.
        open(os.path.join(d, "file"), "w").close()
        one_line_error(run([benchmark, "--seq-q=64", f"--profile={d}/file"]), "--profile", "not a directory")
        one_line_error(run([benchmark, "--seq-q=64", f"--profile={d}/no/such/dir"]), "--profile", "does not exist")


# --- automated_perf_test.py (block 7) ----------------------------------------

def has_matplotlib():
    return run([sys.executable, "-c", "import matplotlib"]).returncode == 0


def check_chart(path_base):
    png, svg = open(path_base + ".png", "rb").read(), open(path_base + ".svg").read()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000, f"{path_base}.png is not a PNG chart"
    assert "<svg" in svg and "</svg>" in svg, f"{path_base}.svg is not an SVG"


def case_perf_report(work, benchmark):
    bin_dir = os.path.dirname(benchmark)
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "matrix.json")
        json.dump({"versions": [2], "dtypes": ["bf16", "fp32"], "seq_lens": [48, 96], "causal": [False, True],
                   "batch": 1, "num_heads": 2, "head_dim": 32, "tile_q": "auto", "tile_kv": "auto",
                   "num_runs": 2, "warmup_runs": 0}, open(cfg, "w"))
        p = run([sys.executable, script("automated_perf_test.py"), "--config", cfg, "--bin-dir", bin_dir,
                 "--output-dir", d])
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.count("check PASS") == 8 and "[8/8]" in p.stdout, p.stdout  # not a terminal: plain lines
        report = open(os.path.join(d, "perf_report.md")).read()
        rows = [line for line in report.splitlines() if line.startswith("| FA2 ")]
        assert len(rows) == 8 and all("PASS (max abs error" in r for r in rows), report
        assert "| Version | Tile_Q | Tile_KV | dtype | Seq | Batch |" in report, report
        results = list(csv.DictReader(open(os.path.join(d, "perf_results.csv"))))
        assert len(results) == 8 and all(float(r["throughput_tflops"]) > 0 for r in results), results
        assert {(r["dtype"], r["seq"], r["causal"]) for r in results} == \
            {(dt, s, c) for dt in ("bf16", "fp32") for s in ("48", "96") for c in ("0", "1")}, results
        if has_matplotlib():
            check_chart(os.path.join(d, "perf_report"))
        else:
            assert "chart skipped" in p.stdout, p.stdout
        # The guide's explicit list; a failing run (an ISA this build cannot
        # run) fails the script and says so in its row.
        json.dump({"configs": [{"version": 2, "tile_q": 64, "tile_kv": 64, "dtype": "fp16", "seq": 64, "batch": 1}],
                   "num_heads": 2, "head_dim": 16, "num_runs": 1, "warmup_runs": 0}, open(cfg, "w"))
        p = run([sys.executable, script("automated_perf_test.py"), "--config", cfg, "--bin-dir", bin_dir,
                 "--output-dir", d, "--", "--isa=sse9"])
        assert p.returncode == 1 and "0 of 1 configurations passed" in p.stdout, p.stdout + p.stderr
        assert "| FA2 | 64 | 64 | fp16 | 64 | 1 | no | - | - | - | - | FAIL: " in open(os.path.join(d, "perf_report.md")).read()
        # Bad config files: one line, exit 2, no report written over.
        for text, needle in (('{"versions": [2], "dtypes": ["bf16"], "seq_lens": [64], "causal": [true], "heads": 4}',
                              "unknown key 'heads'"),
                             ('{"versions": [2],\n "dtypes": ["bf16"' , "malformed JSON at line 2"),
                             ('{"versions": [5], "dtypes": ["bf16"], "seq_lens": [64], "causal": [true]}',
                              "version 5 is not 1, 2 or 3")):
            open(cfg, "w").write(text)
            one_line_error(run([sys.executable, script("automated_perf_test.py"), "--config", cfg, "--bin-dir", bin_dir,
                                "--output-dir", d]), needle)


# --- run_fa2_benchmark.sh (block 2) -----------------------------------------

def case_benchmark_runner(work, benchmark):
    with tempfile.TemporaryDirectory() as d:
        common = ["bash", script("run_fa2_benchmark.sh"), "--binary", benchmark, "--data-dir", f"{d}/data",
                  "--output-dir", f"{d}/results", "--seq-q", "96", "--heads", "2", "--num-runs", "2",
                  "--warmup-runs", "0"]
        p = run(common + ["--variants", "--verify", "--", "--no-probe"])
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.count("Status: PASS") == 4, p.stdout
        summary = p.stdout[p.stdout.index("Summary ("):].splitlines()[1:]
        tiles = [re.match(r"\s+tile\s+(\d+)x(\d+)\s", line).groups() for line in summary]
        assert tiles == [("128", "64"), ("64", "64"), ("128", "128"), ("256", "128")], summary
        assert sum("<- best" in line for line in summary) == 1, summary
        name = "b2_s96_h2_d64_tq128_tkv64_fp16"
        for f in (f"output_{name}.bin", f"benchmark_log_{name}.txt", f"result_{name}.json"):
            assert os.path.exists(os.path.join(d, "results", f)), f
        assert "Throughput:" in open(os.path.join(d, "results", f"benchmark_log_{name}.txt")).read()
        # A run that fails fails the script.
        p = run(common + ["--", "--isa=sse9"])
        assert p.returncode == 1 and "FAILED: tile 128x64" in p.stdout, p.stdout + p.stderr
        one_line_error(run(common + ["--dtype", "int4"]), "--dtype", "int4")
        one_line_error(run(["bash", script("run_fa2_benchmark.sh"), "--binary", "/nonexistent/fa2_benchmark"]),
                       "--binary", "not an executable")


# --- Dockerfile (block 13) ---------------------------------------------------

def case_dockerfile(work, _):
    """No Docker daemon here: check what the Dockerfile copies and runs
    exists, that its RUN steps are the scripts the other cases test, and
    that the runtime stage installs no compiler."""
    text = open(os.path.join(ROOT, "Dockerfile")).read()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2, "a build stage and a runtime stage"
    copied = set()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.M):
        for source in line.split()[:-1]:
            assert os.path.exists(os.path.join(ROOT, source)), f"COPY {source}: not in the repository"
            copied.add(source.rstrip("/"))
    # Every module the top-level CMakeLists.txt adds must be in the image,
    # or the build stage's configure fails.
    top = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    for sub in re.findall(r"add_subdirectory\((\w+)\)", top):
        assert sub in copied, f"CMakeLists.txt adds {sub}/, which the Dockerfile does not copy"
    runs = re.findall(r"^RUN bash (scripts/\S+)", text, flags=re.M)
    assert runs == ["scripts/env_health_check.sh", "scripts/build_flash_attention.sh", "scripts/post_build_check.sh"], runs
    for r in runs:
        assert os.access(os.path.join(ROOT, r), os.X_OK), f"{r} is not an executable script"
    build_cmd = re.search(r"^RUN bash scripts/build_flash_attention.sh (.+)$", text, flags=re.M).group(1).split()
    assert build_cmd[2] == "/opt/flash_attention", build_cmd
    runtime = stages[1]
    packages = " ".join(re.findall(r"apt-get install[^\n]*\n((?:\s+[^\n]*\\\n)*)", runtime)[0].split())
    for compiler in ("g++", "gcc", "cmake", "clang", "build-essential", "make "):
        assert compiler not in packages + " ", f"the runtime image installs {compiler}: {packages}"
    # The runtime stage needs the libraries the installed binaries load.
    install = install_dir(work)
    if os.path.exists(os.path.join(install, "bin", "fa2_benchmark")):
        libs = run(["ldd", os.path.join(install, "bin", "fa2_benchmark")]).stdout
        if "libyaml-cpp" in libs:
            assert "libyaml-cpp0" in packages, f"fa2_benchmark loads yaml-cpp; the runtime installs: {packages}"


# --- every tooling script: --help, and one line for a bad argument ----------

def case_scripts_help_and_bad_arguments(work, _):
    bench = os.path.join(ROOT, "bench")
    commands = [["bash", script(n)] for n in ("build_flash_attention.sh", "run_fa2_benchmark.sh", "post_build_check.sh",
                                              "env_health_check.sh", "regression_test.sh", "compare_all_versions.sh")]
    commands += [[sys.executable, script(n)] for n in ("automated_perf_test.py", "perf_regression.py",
                                                       "benchmark_tile_sweep.py")]
    commands += [[sys.executable, os.path.join(bench, n)] for n in ("shape_sweep", "compare_peers")]
    for cmd in commands:
        p = run(cmd + ["--help"])
        assert p.returncode == 0 and len(p.stdout.strip().splitlines()) >= 3, f"{cmd[-1]} --help: {p.stdout}{p.stderr}"
        one_line_error(run(cmd + ["--no-such-flag"]), "--no-such-flag")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--list":
        print(";".join(CASES))
        return 0
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in CASES:
        print(f"usage: {sys.argv[0]} CASE WORK_DIR [BENCHMARK]  (cases: {', '.join(CASES)})", file=sys.stderr)
        return 2
    os.makedirs(sys.argv[2], exist_ok=True)
    try:
        CASES[sys.argv[1]](os.path.abspath(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else None)
    except AssertionError as e:
        print(f"FAIL: {sys.argv[1]}: {e}")
        return 1
    print(f"PASS: {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
