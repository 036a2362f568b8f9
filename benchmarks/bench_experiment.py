"""The smoke experiment end to end with the real stage scripts: wall time per stage, the whole run, and a rerun that
must skip every stage. This is the integration run tests/test_experiment.py does with stand-in stage scripts (the
scripts are each tested end to end on their own).

Usage: python benchmarks/bench_experiment.py [--scale smoke] [--jobs 2] [--run-dir DIR] [--output outputs/bench_experiment.json]
Exits 1 if the run fails, the rerun starts any stage, or the report lacks a policy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_json

ROOT = Path(__file__).resolve().parents[1]


def run(scale: str, run_dir: Path, jobs: int) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "experiment.py"), "--scale", scale, "--run-dir",
                             str(run_dir), "--jobs", str(jobs)], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
    return result, time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="smoke")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--run-dir", default=None, help="run folder (default: a temporary one, removed afterwards)")
    p.add_argument("--output", default="outputs/bench_experiment.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.run_dir or Path(tmp) / args.scale)
        first, wall = run(args.scale, run_dir, args.jobs)
        print(first.stdout, file=sys.stderr)
        if first.returncode != 0:
            print(first.stderr, file=sys.stderr)
            return 1
        again, rerun_wall = run(args.scale, run_dir, args.jobs)
        stages = json.loads((run_dir / "stages.json").read_text())
        report = json.loads((run_dir / "report" / "experiment.json").read_text())
    ok = again.returncode == 0 and "[start]" not in again.stdout and again.stdout.count("[skip]") == len(stages)
    result = {"scale": args.scale, "jobs": args.jobs, "wall_s": round(wall, 1), "rerun_wall_s": round(rerun_wall, 1),
              "rerun_skipped_every_stage": ok, "policies": sorted(report["real"]),
              "stages": {name: e["wall_s"] for name, e in stages.items()}}
    kinds: dict[str, list[float]] = {}
    for name, seconds in result["stages"].items():
        kinds.setdefault(name.split("_")[0], []).append(seconds)
    print(f"{args.scale}, {args.jobs} jobs: {len(stages)} stages in {wall:.0f} s; rerun {rerun_wall:.1f} s "
          f"({'every stage skipped' if ok else 'NOT ALL SKIPPED'})\n")
    print("| stage kind | stages | wall s each (min-max) | sum s |\n|---|---:|---|---:|")
    for kind, times in kinds.items():
        print(f"| {kind} | {len(times)} | {min(times):.0f}-{max(times):.0f} | {sum(times):.0f} |")
    write_json(args.output, result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
