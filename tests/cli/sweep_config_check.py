#!/usr/bin/env python3
"""A sweep config with an unknown key is refused: exit 2, one line naming the
key, no CSV written.  usage: sweep_config_check.py SWEEP_SCRIPT BENCHMARK"""
import json
import os
import subprocess
import sys
import tempfile

script, binary = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as d:
    cfg = {"datasets": [{"name": "x", "batch": 1, "seq_q": 16, "heads": 1, "head_dim": 8}], "bhu_count": 4}
    path = os.path.join(d, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(d, "out.csv")
    p = subprocess.run([sys.executable, script, "--binary", binary, "--config", path, "--output", out],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    lines = p.stderr.strip().splitlines()
    ok = p.returncode == 2 and len(lines) == 1 and "unknown key 'bhu_count'" in p.stderr and not os.path.exists(out)
    print(("PASS" if ok else "FAIL") + f": exit {p.returncode}, stderr: {p.stderr.strip()}")
    sys.exit(0 if ok else 1)
