"""Play a controller in a task headless and write a video of the cameras.

Examples:
  python scripts/play.py --task R2S2R-PickSort-v0 --controller scripted --video outputs/play.mp4
  isaaclab.sh -p scripts/play.py --task R2S2R-PickSort-v0 --controller scripted --episodes 3 --condition lighting
  python scripts/play.py --task R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0 --controller generator \
      --source outputs/real/real.hdf5 --condition belt_speed

Controllers: `scripted` (the privileged scripted controller) or `generator` (the task's behaviour generator, as
generate.py runs it: transformed real demos from --source, or the grasp generator + planner).

Each video frame tiles the chosen cameras side by side (after the lens model). The episode outcome (success or
the named failure) is printed per episode. The video is written to a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from r2s2r.cell.spec import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="R2S2R-PickSort-v0", help="task ID (see scripts/list_tasks.py)")
    p.add_argument("--controller", default="scripted", choices=["scripted", "generator"], help="who acts")
    p.add_argument("--source", default=None, help="real demos for a grounded-behaviour generator (default: its "
                   "config's, outputs/real/real.hdf5)")
    p.add_argument("--video", default="outputs/play.mp4", help="output MP4 path")
    p.add_argument("--episodes", type=int, default=1, help="number of episodes, played back to back")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode (then +1 per episode)")
    p.add_argument("--condition", default="nominal", help="reset condition: nominal, lighting, belt_speed, "
                   "novel_objects, combined")
    p.add_argument("--cameras", default="head_left,head_right,right_wrist,left_wrist",
                   help="comma-separated camera names")
    p.add_argument("--size", type=int, default=192, help="image height and width in pixels")
    p.add_argument("--physics", default="mujoco", help="physics backend: mujoco (CPU) or mujoco_warp")
    p.add_argument("--renderer", default="mujoco_gl", help="render backend: mujoco_gl or mujoco_warp")
    p.add_argument("--fps", type=int, default=20, help="video frame rate (the control rate plays in real time)")
    return p.parse_args(argv)


def make_controller(args: argparse.Namespace, env):
    """The acting controller, behind the behaviour-generator interface (reset(env, obs, rng), __call__(obs))."""
    import r2s2r.tasks as tasks
    from r2s2r.behavior import generator_cfg, make_generator
    from r2s2r.control.scripted import ScriptedPickPlace

    if args.controller == "scripted":
        return ScriptedPickPlace(env.cfg.control_hz)
    name = tasks.TASKS[args.task].generator
    if name is None:
        raise ConfigError(f"--controller generator: task {args.task!r} has no behaviour generator")
    cfg = generator_cfg(name)
    if args.source is not None:
        cfg = dataclasses.replace(cfg, source=args.source)
    return make_generator(name, cfg)


def main(argv=None) -> int:
    args = parse_args(argv)
    import imageio.v2 as imageio

    import r2s2r.tasks as tasks

    video = Path(args.video)
    try:
        env = tasks.make(args.task, condition=args.condition, cameras=tuple(args.cameras.split(",")),
                         image_size=(args.size, args.size), physics=args.physics, renderer=args.renderer)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        video.parent.mkdir(parents=True, exist_ok=True)
        partial = video.with_name(video.stem + ".partial" + video.suffix)
        writer = imageio.get_writer(partial, fps=args.fps, macro_block_size=1)
    except OSError as e:
        print(f"error: cannot write video {str(video)!r}: {e}", file=sys.stderr)
        return 2
    try:
        controller = make_controller(args, env)
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    outcomes = []
    with writer:
        for ep in range(args.episodes):
            obs, info = env.reset(seed=args.seed + ep)
            controller.reset(env, obs, np.random.default_rng(args.seed + ep))
            bar = tqdm(total=env.max_steps, desc=f"episode {ep} ({info['object']}, {info['colour']})", unit="step")
            while True:
                writer.append_data(np.concatenate([obs["images"][c] for c in env.cfg.cameras], axis=1))
                obs, _, terminated, truncated, info = env.step(controller(obs))
                bar.update(1)
                if terminated or truncated:
                    break
            bar.close()
            outcome = "success" if info["success"] else info["failure"]
            outcomes.append(outcome)
            print(f"episode {ep}: {outcome} after {info['time']:.1f} s "
                  f"({info['object']}, {info['colour']}, belt {info['belt_speed']:.3f} m/s)")
    os.replace(partial, video)
    env.close()
    print(f"wrote {video} ({sum(o == 'success' for o in outcomes)}/{len(outcomes)} successful)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
