"""Run the study end to end on the twin: real demos, simulated data for the four grounding configurations, the
real-only baseline and the co-trained policies, the real-side evaluation, and the 2x2 table.

Examples:
  python scripts/experiment.py --scale smoke                # checks the pipeline makes the full table
  python scripts/experiment.py --scale study --jobs 2       # the object-centric policy: 100 real + 200 sim
  python scripts/experiment.py --scale medium --jobs 2      # flow transformer, 100 real + 100 sim, 50 trials
  python scripts/experiment.py --scale study1500 --jobs 2  # the study's scale, over several runs (~34 CPU-hours)

Scales (r2s2r/experiment.py SCALES): smoke, study (the object-centric policy on a 128^2 head view, 200 simulated
per configuration), study1500 (the same policy at the study's 1,500 simulated per configuration with corrective
noise, two training seeds, two evaluation blocks), medium (the flow transformer at 64^2, sized for a CPU machine),
paper (the flow transformer with 1,500 simulated per configuration, the 10-real diagnostic). Stages:
collect_real.py, generate.py per configuration, train.py per policy and training seed, evaluate.py per run and
block on the real side and in the grounded and ungrounded sim worlds (sim as evaluator), then the report.

Resuming: every finished stage is skipped and every unfinished one resumes its own work; rerun the same command.
Outputs in --run-dir (default outputs/experiment/<scale>): data/, train/, eval/, logs/<stage>.log,
stages.json (wall time per stage) and report/experiment.md (the table, main effects with intervals, nominal vs
shifted, sim-as-evaluator ranking), report/experiment.json, report/<task>/results.{md,png}.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    from r2s2r.experiment import SCALES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", required=True, choices=list(SCALES), help="how big every stage is")
    p.add_argument("--run-dir", type=cli.output_dir, default=None,
                   help="run folder (default outputs/experiment/<scale>)")
    p.add_argument("--jobs", type=cli.int_in(1, 256), default=2, help="stages run side by side (one CPU core each)")
    p.add_argument("--dry-run", action="store_true", help="list the stages and whether each is done; run nothing")
    args = p.parse_args(argv)
    if args.run_dir is None:
        try:
            cli.output_dir(f"outputs/experiment/{args.scale}")
        except argparse.ArgumentTypeError as e:
            p.error(f"--run-dir (default): {e}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from r2s2r.experiment import SCALES, plan, report, run_stages

    scale = SCALES[args.scale]
    run_dir = Path(args.run_dir or f"outputs/experiment/{args.scale}").absolute()
    stages = plan(run_dir, scale, threads=1 if args.jobs > 1 else 0)
    if args.dry_run:
        for s in stages:
            print(f"{'done' if s.done() else 'todo'}  {s.name}: {' '.join(s.command[1:])}")
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    if not run_stages(stages, run_dir, args.jobs, echo=lambda m: print(m, flush=True)):
        print("error: some stages failed; fix the cause and rerun the same command (finished stages are kept)",
              file=sys.stderr)
        return 1
    try:
        report(run_dir, scale, args.scale)
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as e:
        print(f"error: the report could not be made: {e}", file=sys.stderr)
        return 1
    print(f"wrote {run_dir / 'report' / 'experiment.md'} ({time.time() - start:.0f} s this run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
