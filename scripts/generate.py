"""Generate admitted simulated trajectories for one grounding task variant into an HDF5 dataset.

Examples:
  python scripts/generate.py --task R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0 --num-trajectories 1500 \\
      --output outputs/sim/wg_bg.hdf5
  python scripts/generate.py --task R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0 --num-workers 2 \\
      --output outputs/sim/wu_bu.hdf5 env.image_size=[64,64] datagen.chunk_size=8
  python scripts/generate.py --task ... --ray-address 10.0.0.5:6379 --output outputs/sim/sim.hdf5 \\
      --log-json outputs/sim/sim.chunks.jsonl
  isaaclab -p scripts/generate.py --task ...   (the same under Isaac Lab's Python; or isaaclab.sh -p)
  isaaclab -p scripts/generate.py --task Isaac-R2S2R-PickSort-Grounded-v0 --generator planner \
      --num-trajectories 10 --output outputs/sim/isaaclab_wg_bu.hdf5 env.cameras=[right_wrist]
  isaaclab -p scripts/generate.py --task Isaac-R2S2R-PickSort-Grounded-v0 --generator mimic --num_envs 16 \
      --num-trajectories 100 --output outputs/sim/isaaclab_wg_bg.hdf5 env.renderer=isaac_rtx   (an RTX GPU)

Each attempt resets the task (seed and condition derived from --seed and the attempt number), lets the task's
behaviour generator act until the episode ends, and is admitted only if the object was picked up and placed in
its assigned bin. Admitted attempts are replayed with the cameras on and recorded (layout of
r2s2r.data.hdf5, read by Isaac Lab Mimic / robomimic tools): actions, obs (cameras, proprioception,
datagen_info), states, initial_state; attrs seed, success, task, condition, object, colour, belt_speed,
generator, source_demo, world_file, world_sha256. Rejected attempts are counted by reason.

Isaac Lab task IDs (Isaac-R2S2R-PickSort-Grounded-v0, -Ungrounded-v0) name a world only: --generator picks the
behaviour (mimic: grounded, planner: ungrounded). The same generators act, the same rule admits, and the dataset
has the same layout (its task attr is the Isaac Lab ID, its states MuJoCo's), but the physics is the Isaac Lab
environment's: Newton with the MuJoCo Warp solver, kit-less, on its config's device (the CPU; --device sets
another). The images come from Isaac Lab camera sensors: Newton's Warp ray tracer, or Isaac Sim's RTX with
env.renderer=isaac_rtx. Such a run goes through Isaac Lab's launcher (launch_simulation; its options below), which
starts Kit only for RTX cameras (and enables camera rendering for them). Of the env.* overrides it takes
env.cameras, env.image_size, env.depth and env.renderer (auto: Newton's Warp; isaac_rtx). It is slower than MuJoCo C on a CPU: one environment per process, with
the cameras rendered during every attempt (Isaac Lab holds one simulation per process, so there is no camera-less
copy to run attempts on).

Overrides (after the options, Hydra style) set any config field:
  env.<field>        the task config (r2s2r.tasks.pick_sort.env_cfg.PickSortEnvCfg), e.g. env.cameras=[head_left]
                     env.image_size=[64,64] env.cell.belt.length=2.5 (default: all four cameras at 128x128)
  generator.<field>  the behaviour generator's config: MimicCfg (r2s2r.behavior.mimic; e.g. generator.source=
                     outputs/real/real.hdf5 generator.nn_k=5 generator.action_noise=0.002) or PlannerCfg
                     (r2s2r.behavior.planner)
  datagen.<field>    the run (r2s2r.datagen.config.DatagenCfg): chunk_size, max_attempts, and the condition mix,
                     e.g. datagen.conditions.nominal=1.0 datagen.conditions.combined=0

Determinism: the same seed and config give the same dataset, with any number of workers.
Resuming: work is written in shards to OUTPUT.shards/; after an interruption (Ctrl-C, kill -9, a crash) rerun the
same command: finished shards are kept and the rest is done. OUTPUT appears only when complete.
Ray: the cluster's nodes need no access to OUTPUT's folder (no shared file system). Each task works in a scratch
folder on its node ($R2S2R_SCRATCH there, else its temporary folder) and returns the finished shard through
Ray's object store; this process writes it into OUTPUT.shards/. A chunk whose node is lost is run again
elsewhere. An address that cannot be reached fails within seconds.
Progress: the bar shows admitted / wanted, attempted, the admission rate, rejections by reason and an ETA;
--log-json appends the same, per finished chunk, with the chunk's own counts, its time and its worker and node.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.annotate import AnnotationError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402
from r2s2r.datagen.config import BEHAVIOURS  # noqa: E402
from r2s2r.isaaclab_tasks.launcher import add_launcher_options, launch, launcher_device  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task ID with a behaviour generator, or an Isaac Lab task ID of a "
                   "world (see scripts/list_tasks.py)")
    p.add_argument("--generator", choices=BEHAVIOURS, default=None,
                   help="the behaviour generator, for an Isaac Lab task ID (required there): mimic (grounded "
                   "behaviour; its demos: generator.source=...) or planner (ungrounded). A MuJoCo task ID binds its "
                   "own")
    p.add_argument("--num-trajectories", type=cli.positive_int, default=1500, help="admitted trajectories to write")
    p.add_argument("--output", type=cli.output_file, required=True,
                   help="dataset path (.hdf5); written only when complete")
    p.add_argument("--seed", type=cli.seed, default=0,
                   help="run seed: every attempt's seed and condition derive from it")
    p.add_argument("--num-workers", type=cli.positive_int, default=1, help="worker processes on this machine")
    p.add_argument("--num_envs", type=cli.positive_int, default=1,
                   help="Isaac Lab task IDs: environments per worker, each running one attempt at a time (attempts "
                   "are the same whichever environment runs them)")
    p.add_argument("--ray-address", default=None,
                   help="run the workers on this Ray cluster (HOST:PORT of its head, e.g. 10.0.0.5:6379, or "
                   "'auto'); its nodes need not see OUTPUT's folder. With --num-workers > 1 that many chunks run "
                   "at once, else one per cluster CPU")
    p.add_argument("--keep-shards", action="store_true", help="keep OUTPUT.shards/ after the merge")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in logs)")
    p.add_argument("--log-json", type=cli.output_file, default=None, metavar="PATH",
                   help="append one JSON line per finished chunk: chunk, admitted, attempted, rejected (by "
                   "reason), seconds, worker, node, elapsed, and the run's totals with its ETA")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, see above")
    add_launcher_options(p, argv)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from r2s2r.core import parse_dotted
    from r2s2r.datagen import make_generate_cfg

    try:
        cfg = make_generate_cfg(args.task, args.num_trajectories, args.seed, parse_dotted(args.overrides),
                                args.generator, launcher_device(args), args.num_envs)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with simulation(cfg, args):
        return run(cfg, args)


def simulation(cfg, args: argparse.Namespace):
    """Isaac Lab's launcher around an Isaac Lab task's run (kit-less for this task's config: Newton physics, Newton
    Warp cameras); nothing for a MuJoCo task."""
    if not cfg.isaaclab:
        return contextlib.nullcontext()
    from r2s2r.isaaclab_tasks.pick_sort.task import generation_env_cfg

    return launch(generation_env_cfg(cfg), args)


def run(cfg, args: argparse.Namespace) -> int:
    """Generate; errors are reported here, inside the launcher, which would print a traceback for any it sees."""
    from r2s2r.datagen import generate
    from r2s2r.datagen.runner import ClusterError

    try:
        if hasattr(cfg.generator, "source"):  # workers (other processes, other nodes) must not depend on the cwd
            cfg = dataclasses.replace(cfg, generator=dataclasses.replace(
                cfg.generator, source=str(Path(cfg.generator.source).absolute())))
        summary = generate(cfg, args.output, num_workers=args.num_workers, ray_address=args.ray_address,
                           progress=not args.no_progress, keep_shards=args.keep_shards, log_json=args.log_json)
    except (ConfigError, DatasetError, AnnotationError, FileNotFoundError, ClusterError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished work is kept in {args.output}.shards/; rerun the same command to resume",
              file=sys.stderr)
        return 130
    print(summary.table())
    print(json.dumps(summary.as_dict()))
    if summary.trajectories < args.num_trajectories:
        print(f"error: only {summary.trajectories} of {args.num_trajectories} trajectories within "
              f"{cfg.datagen.attempt_limit} attempts (datagen.max_attempts); {args.output} was not written. The "
              f"finished chunks are kept in {args.output}.shards/: rerun with a larger datagen.max_attempts to "
              f"resume from them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
