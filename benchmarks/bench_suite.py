"""The test suite's time: the README's test command (`python -m pytest -q`) run once, its wall time and CPU time
(the pytest process and everything it waited for), and each test's CPU and wall seconds (module and session
fixtures count toward the test that first opened them), through the `_suite_cpu` plugin.

Prints the totals and the slowest tests by CPU seconds as a Markdown table; --output writes every test's figures as
JSON. The goal (docs/benchmarks.md): the suite in 6 minutes or less on an idle 2-core machine from a fresh clone
with Warp's kernel cache warm.

Usage: python benchmarks/bench_suite.py [--top 20] [--output outputs/bench_suite.json] [-- PYTEST ARGS ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_json

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--top", type=int, default=20, help="how many of the slowest tests to list")
    p.add_argument("--output", default=None, help="write every test's figures here (JSON)")
    p.add_argument("pytest_args", nargs="*", help="further pytest arguments (after --)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "tests.jsonl"
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "R2S2R_SUITE_CPU_LOG": str(log),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_suite_cpu", *args.pytest_args],
                              cwd=ROOT, env=env).returncode
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        tests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    tests.sort(key=lambda t: -t["cpu_s"])
    print(f"\nsuite: {wall:.0f} s wall ({int(wall // 60)} min {wall % 60:.0f} s), {cpu:.0f} CPU-s, {len(tests)} tests, "
          f"pytest exit {code}; the tests' own CPU-s add up to {sum(t['cpu_s'] for t in tests):.0f}\n")
    print("| test | CPU s | wall s |\n|---|---:|---:|")
    for t in tests[:args.top]:
        print(f"| `{t['test'].removeprefix('tests/')}` | {t['cpu_s']:.1f} | {t['wall_s']:.1f} |")
    if args.output:
        write_json(args.output, {"wall_s": wall, "cpu_s": cpu, "exit": code, "tests": tests})
    return code


if __name__ == "__main__":
    sys.exit(main())
