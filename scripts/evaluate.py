"""Evaluate trained policies with the study's protocol on the real side, and optionally with sim as the evaluator.

Examples:
  python scripts/evaluate.py --checkpoint outputs/train/real_only/policy.pt outputs/train/wg_bg/policy.pt \\
      --output outputs/eval/main
  python scripts/evaluate.py --checkpoint a/policy.pt b/policy.pt c/policy.pt --output outputs/eval/rank \\
      --sim-tasks R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0 R2S2R-PickSort-WorldUngrounded-BehaviorGrounded-v0

Protocol (r2s2r.evaluation.protocol): 50 trials by default, 24 nominal and 26 shifted (lighting 7, belt_speed 7,
novel_objects 6, combined 6); trial i has seed 10000 + i and the same condition for every policy, so policies are
compared on the same trials. The real side is --task (default the reality twin, R2S2R-PickSort-Real-v0; a
hardware cell plugs in behind the same RealCell interface). Each policy sees only the cameras it was trained on,
rendered at its image size, and proprioception.

Cameras are rendered by the faster of MuJoCo GL and the MuJoCo Warp ray tracer on this machine where both draw
the same images (renderer "auto", r2s2r.tasks.pick_sort.renderer_choice); <task>/<policy>/renderer.json says which.

Outputs in --output, per task: <task>/<policy>/trials.jsonl (one line per trial), <task>/results.json,
results.md (success counts with Wilson 95 % intervals per condition) and results.png (bars with intervals). With
--sim-tasks, every policy runs the same protocol in each sim variant too, and ranking.json / ranking.md report how
well each sim variant ranks the policies as the real side does (Pearson r, Spearman rho, MMRV).

--base-seed N gives trial i the seed N + i instead: another block of the same protocol (same conditions in the same
order, other episodes), to pool with the first for a narrower interval.

--seeds-from DATASET runs the real side's trials at the seeds of that dataset's demos instead (nominal condition,
the first --trials demos): the policy replayed on the episodes it was trained on, a diagnostic of whether it
reproduces its own demonstrations before asking whether it generalizes.

Resuming: rerun the same command; finished trials are kept and only the rest run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    from r2s2r.tasks import REAL_TASK

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", nargs="+", required=True, help="policy checkpoints (policy.pt of train.py)")
    p.add_argument("--names", nargs="+", default=None,
                   help="a name per checkpoint for tables (default: the checkpoint's run folder name)")
    p.add_argument("--task", default=REAL_TASK, help="the real side's task ID (default: the reality twin)")
    p.add_argument("--trials", type=cli.positive_int, default=50, help="trials per policy on the real side (study: 50)")
    p.add_argument("--sim-tasks", nargs="*", default=[], help="sim variants to evaluate the same policies in")
    p.add_argument("--sim-trials", type=cli.positive_int, default=None,
                   help="trials per policy in each sim task (default: --trials)")
    p.add_argument("--base-seed", type=cli.seed, default=None,
                   help="seed of trial 0 (trial i: base + i; default 10000, the study's block)")
    p.add_argument("--seeds-from", default=None, metavar="DATASET",
                   help="run the real side's trials at the seeds of this dataset's demos (nominal condition)")
    p.add_argument("--max-steps", type=cli.positive_int, default=None,
                   help="cap on control steps per trial (default: the task's episode length)")
    p.add_argument("--output", type=cli.output_dir, default="outputs/eval/run", help="results folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    cli.add_execution_args(p)
    args = p.parse_args(argv)
    if args.names is None:
        args.names = [Path(c).parent.name or Path(c).stem for c in args.checkpoint]
    if len(args.names) != len(args.checkpoint):
        p.error(f"--names: {len(args.names)} names for {len(args.checkpoint)} checkpoints; expected one each")
    if len(set(args.names)) != len(args.names):
        p.error(f"--names = {args.names}: names must differ (give --names when run folders share a name)")
    if args.seeds_from is not None and args.base_seed is not None:
        p.error("--base-seed and --seeds-from: give one; --seeds-from takes every trial's seed from the dataset")
    if args.seeds_from is not None and not Path(args.seeds_from).is_file():
        p.error(f"--seeds-from = {args.seeds_from!r}: no such file; expected a demo dataset (HDF5)")
    if args.sim_tasks and len(args.checkpoint) < 2:
        p.error("--sim-tasks: ranking needs at least 2 checkpoints")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from r2s2r.evaluation.policies import evaluate_checkpoint, ranking, report_task, training_trials, trials_path
    from r2s2r.evaluation.protocol import BASE_SEED, make_protocol
    from r2s2r.policy.agent import load_agent
    from r2s2r.tasks import TASKS

    for task in [args.task, *args.sim_tasks]:
        if task not in TASKS:
            print(f"error: task = {task!r}: unknown task ID; expected one of {', '.join(TASKS)}", file=sys.stderr)
            return 2
    out = Path(args.output)
    summaries = {}
    try:
        execution = cli.execution_of(args)
        for checkpoint in args.checkpoint:  # every checkpoint checked before any trial runs
            load_agent(checkpoint, execution=execution)
        own = training_trials(args.seeds_from, args.trials) if args.seeds_from else None
        base_seed = BASE_SEED if args.base_seed is None else args.base_seed
        for task in [args.task, *args.sim_tasks]:
            trials = args.trials if task == args.task else (args.sim_trials or args.trials)
            protocol = own if own is not None and task == args.task else make_protocol(trials, base_seed)
            rows = {}
            for name, checkpoint in zip(args.names, args.checkpoint):
                print(f"{name} on {task}: {trials} trials", file=sys.stderr)
                rows[name] = evaluate_checkpoint(checkpoint, task, trials, trials_path(out, task, name),
                                                 args.max_steps, progress=not args.no_progress, trials=protocol,
                                                 execution=execution)
            summaries[task] = report_task(out, task, rows)
    except (ConfigError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    real = summaries[args.task]
    for name, s in real.items():
        o = s["overall"]
        print(f"{name}: {o['successes']}/{o['trials']} ({100 * o['rate']:.0f} %, Wilson 95 % "
              f"[{100 * o['interval'][0]:.0f}, {100 * o['interval'][1]:.0f}]) on {args.task}")
    print(f"wrote {out / args.task / 'results.md'}")
    if args.sim_tasks:
        report = {task: ranking(real, summaries[task]) for task in args.sim_tasks}
        write_ranking(out, report)
        for task, r in report.items():
            print(f"{task}: Pearson {_fmt(r['pearson'])}, Spearman {_fmt(r['spearman'])}, MMRV {r['mmrv']:.3f}")
    return 0


def _fmt(value) -> str:
    return "undefined" if value is None else f"{value:.2f}"


def write_ranking(out: Path, report: dict) -> None:
    from r2s2r.files import write_text_atomic

    lines = ["# Sim as evaluator: does sim rank the policies as the real side does?", "",
             "| sim task | Pearson r | Spearman rho | MMRV (lower is better) |", "|---|---:|---:|---:|"]
    lines += [f"| {t} | {_fmt(r['pearson'])} | {_fmt(r['spearman'])} | {r['mmrv']:.3f} |" for t, r in report.items()]
    for path, text in ((out / "ranking.json", json.dumps(report, indent=2)), (out / "ranking.md", "\n".join(lines))):
        write_text_atomic(path, text + "\n")


if __name__ == "__main__":
    sys.exit(main())
