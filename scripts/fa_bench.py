"""Running the benchmark binaries from the scripts: one call, its --json.

Stdlib only, so every tooling script (regression check, perf report) can use
it on any Python 3.  The binaries print their --json object as the last line
of stdout; a failed run raises BenchmarkError with the binary's own message.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


class BenchmarkError(RuntimeError):
    pass


class OneLineParser(argparse.ArgumentParser):
    """argparse whose bad arguments give the project's one line, exit 2
    (not argparse's usage block)."""

    def error(self, message):
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def run_json(binary, args, timeout=900, env=None):
    """Runs `binary args... --json` and returns the parsed object."""
    cmd = [binary, *args, "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchmarkError(f"{os.path.basename(binary)}: {e}") from e
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        why = (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}").splitlines()[-1]
        raise BenchmarkError(f"{os.path.basename(binary)} {' '.join(args)}: {why}")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise BenchmarkError(f"{os.path.basename(binary)}: its --json line did not parse ({e})") from e


def median(values):
    return statistics.median(values)


def write_atomic(path, data):
    """Writes `data` (text or bytes) to `path` through a temporary file in the
    same directory and a rename: a reader never sees half a file, a failure
    leaves none."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for the temporary name only
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
