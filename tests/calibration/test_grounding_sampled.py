"""The grounding benchmark's two-truth version, as CI runs it: whole calibration sessions recorded on the twins of
sampled truths 0 and 1 (their lenses blurred up to 1.9 px, frictions, gains, lamps and geometry all off the
ungrounded world's), grounded by calibrate.py, and every calibrated parameter held to the study's tolerance
(`benchmarks/bench_grounding.py --sampled 2 --seed 0 --check`; the twelve-truth run is in docs/world_grounding.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_two_sampled_truths_ground_within_every_tolerance(tmp_path):
    output = tmp_path / "bench_grounding.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_grounding.py"), "--sampled", "2",
                          "--seed", "0", "--check", "--output", str(output)],
                         capture_output=True, text=True, env={**os.environ, "MUJOCO_GL": "egl"}, timeout=1800)
    print(run.stdout)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr[-3000:]}"
    rows = json.loads(output.read_text())["truths"]
    assert [r["truth"] for r in rows] == ["truth_000000", "truth_000001"]
    assert not any(r["stopped"] for r in rows)
