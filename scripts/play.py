"""Play a controller or a trained policy in a task headless and write a video of the cameras.

Examples:
  python scripts/play.py --task R2S2R-PickSort-v0 --controller scripted --video outputs/play.mp4
  isaaclab -p scripts/play.py --task R2S2R-PickSort-v0 --controller scripted --episodes 3 --condition lighting
  isaaclab -p scripts/play.py --task Isaac-R2S2R-PickSort-Grounded-v0 --controller generator --generator planner \
      --cameras head_left,right_wrist --size 96
  isaaclab -p scripts/play.py --task Isaac-R2S2R-PickSort-Twin-v0 --checkpoint outputs/train/wg_bg/policy.pt \
      --episodes 8 --num_envs 4
  python scripts/play.py --task R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0 --controller generator \
      --source outputs/real/real.hdf5 --condition belt_speed
  python scripts/play.py --task R2S2R-PickSort-Real-v0 --checkpoint outputs/train/wg_bg/policy.pt --episodes 5

Controllers: `scripted` (the privileged scripted controller) or `generator` (the task's behaviour generator, as
generate.py runs it: transformed real demos from --source, or the grasp generator + planner). --checkpoint plays a
trained policy instead (scripts/train.py): it sees only the cameras it was trained on, at its image size, and the
proprioception; the environment renders exactly those, and the video shows them enlarged to --size.

An Isaac Lab task ID of the cell (Isaac-R2S2R-PickSort-{Grounded,Ungrounded,Twin}-v0) plays the same controllers
on the Isaac Lab environment (Newton physics, MuJoCo Warp solver; its cameras are Isaac Lab camera sensors) under
Isaac Lab's launcher (launch_simulation; its options below, e.g. --device): Kit starts only for --renderer
isaac_rtx. Its physics is its config's, so Isaac Lab's own --physics is not taken; a MuJoCo task's backend is
--mujoco-physics. With --num_envs N it plays N episodes at a time side by side, episode k in environment k mod N,
each as it plays alone (its seed, its draw, its own copy of the controller).

Each video frame tiles the chosen cameras side by side (after the lens model), one row per environment. The
episode outcome (success or the named failure) is printed per episode. The video is written to a temporary name and
renamed when complete.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402
from r2s2r.isaaclab_tasks.launcher import add_launcher_options, launch, launcher_device  # noqa: E402

PHYSICS_REFUSED = ("not taken: it is Isaac Lab's option, whose launcher would put a default physics config in place "
                   "of an Isaac Lab task's own (Newton with the MuJoCo Warp solver and the cell's options); a MuJoCo "
                   "task's backend is --mujoco-physics")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="R2S2R-PickSort-v0", help="task ID, or an Isaac Lab task ID of the cell (see "
                   "scripts/list_tasks.py)")
    p.add_argument("--controller", default="scripted", choices=["scripted", "generator"], help="who acts")
    p.add_argument("--generator", default=None, choices=["mimic", "planner"],
                   help="the behaviour generator of --controller generator (default: the task's; an Isaac Lab task "
                   "ID names a world only and needs one)")
    p.add_argument("--checkpoint", default=None, help="play this trained policy (policy.pt) instead of --controller")
    p.add_argument("--source", default=None, help="real demos for a grounded-behaviour generator (default: its "
                   "config's, outputs/real/real.hdf5)")
    p.add_argument("--video", type=cli.output_file, default="outputs/play.mp4", help="output MP4 path")
    p.add_argument("--episodes", type=cli.positive_int, default=1, help="number of episodes, played back to back")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the first episode (then +1 per episode)")
    p.add_argument("--max-steps", type=cli.positive_int, default=None,
                   help="cap on control steps per episode, as evaluate.py's (default: the task's episode length); "
                        "an episode cut there ends as 'max_steps'")
    p.add_argument("--condition", default="nominal", help="reset condition: nominal, lighting, belt_speed, "
                   "novel_objects, combined")
    p.add_argument("--cameras", default="head_left,head_right,right_wrist,left_wrist",
                   help="comma-separated camera names")
    p.add_argument("--size", type=cli.image_size, default=192, help="image height and width in pixels")
    p.add_argument("--mujoco-physics", default="mujoco",
                   help="physics backend of a MuJoCo task: mujoco (MuJoCo C, CPU) or mujoco_warp")
    p.add_argument("--renderer", default=None, help="render backend: mujoco_gl (default), mujoco_warp or auto (the "
                   "faster of the two here, where they draw the same images) for a MuJoCo task; newton_warp "
                   "(default, kit-less) or isaac_rtx (needs Kit) for an Isaac Lab task")
    p.add_argument("--fps", type=cli.int_in(1, 240), default=20,
                   help="video frame rate (the control rate plays in real time)")
    p.add_argument("--num_envs", type=cli.positive_int, default=1,
                   help="Isaac Lab task IDs: environments stepped together, each playing its own episodes")
    p.add_argument("--physics", dest="refused_physics", default=None, help=argparse.SUPPRESS)
    cli.add_execution_args(p)
    isaaclab = add_launcher_options(p, argv)
    args = p.parse_args(argv)
    if args.refused_physics is not None:
        p.error(f"--physics {args.refused_physics}: {PHYSICS_REFUSED}")
    if args.num_envs > 1 and not isaaclab:
        p.error(f"--num_envs {args.num_envs}: only an Isaac Lab task ID (Isaac-R2S2R-PickSort-*) steps several "
                "environments at once; a MuJoCo task plays one")
    if args.checkpoint is None and cli.execution_of(args):
        p.error("--execute / --ensemble / --hand-cover: they set how a trained policy executes its chunks and "
                "which frames it tracks; give --checkpoint")
    args.isaaclab = isaaclab
    return args


def make_controller(args: argparse.Namespace, env, agent=None):
    """The acting controller, behind the behaviour-generator interface (reset(env, obs, rng), __call__(obs))."""
    import r2s2r.tasks as tasks
    from r2s2r.behavior import generator_cfg, make_generator

    if agent is not None:
        from r2s2r.policy.agent import PolicyController

        return PolicyController(agent)
    if args.controller == "scripted":
        return make_generator("scripted")
    name = args.generator or (tasks.TASKS[args.task].generator if args.task in tasks.TASKS else None)
    if name is None:
        raise ConfigError(f"--controller generator: task {args.task!r} has no behaviour generator; expected "
                          "--generator mimic or planner")
    cfg = generator_cfg(name)
    if args.source is not None:
        cfg = dataclasses.replace(cfg, source=args.source)
    return make_generator(name, cfg)


def tile(images: dict, cameras: tuple[str, ...], size: int) -> np.ndarray:
    """The cameras side by side, each enlarged (nearest neighbour, so pixels stay visible) to about `size` high."""
    frames = [images[c] for c in cameras]
    scale = max(1, size // frames[0].shape[0])
    return np.concatenate([f.repeat(scale, axis=0).repeat(scale, axis=1) for f in frames], axis=1)


def main(argv=None) -> int:
    args = parse_args(argv)
    import r2s2r.tasks as tasks

    agent = None
    view = {"cameras": tuple(args.cameras.split(",")), "image_size": (args.size, args.size)}
    try:
        if args.checkpoint is not None:
            from r2s2r.policy.agent import load_agent

            agent = load_agent(args.checkpoint, seed=args.seed, execution=cli.execution_of(args))
            view = agent.env_overrides
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.isaaclab:
        return run(args, agent, lambda: tasks.make(args.task, condition=args.condition, physics=args.mujoco_physics,
                                                   renderer=args.renderer or "mujoco_gl", **view))
    from r2s2r.isaaclab_tasks.pick_sort.task import cell_env_cfg, make_cell_task

    cfg = cell_env_cfg(args.task, view["cameras"], view["image_size"], renderer=args.renderer or "newton_warp",
                       device=launcher_device(args))
    cfg.scene.num_envs = args.num_envs
    with launch(cfg, args):
        if args.num_envs == 1:
            return run(args, agent, lambda: make_cell_task(cfg, args.condition))
        return run(args, agent, lambda: SideBySide(cfg, args.condition))


class SideBySide:
    """The environments of one Isaac Lab environment of several (--num_envs), each behind the task interface."""

    def __init__(self, cfg, condition: str):
        from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
        from r2s2r.isaaclab_tasks.pick_sort.task import CellTask

        self.env = PickSortCellEnv(cfg)
        self.views = [CellTask(self.env, condition, env_id=i) for i in range(self.env.num_envs)]
        self.cfg, self.max_steps = self.views[0].cfg, self.views[0].max_steps

    def close(self) -> None:
        self.env.close()


def run(args: argparse.Namespace, agent, make_env) -> int:
    """Play into the video; errors are reported here (inside Isaac Lab's launcher, which would print a traceback for
    any it sees)."""
    import imageio.v2 as imageio

    video = Path(args.video)
    try:
        env = make_env()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:  # a controller (and a policy's chunk state) per environment
        views = env.views if isinstance(env, SideBySide) else [env]
        controllers = [make_controller(args, v, None if agent is None else copy.deepcopy(agent)) for v in views]
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    partial = video.with_name(video.stem + ".partial" + video.suffix)
    try:
        video.parent.mkdir(parents=True, exist_ok=True)
        writer = imageio.get_writer(partial, fps=args.fps, macro_block_size=1)
    except (OSError, ValueError) as e:
        partial.unlink(missing_ok=True)
        print(f"error: cannot write video {str(video)!r}: {e}", file=sys.stderr)
        return 2
    try:
        outcomes = (play_side_by_side if isinstance(env, SideBySide) else play)(args, env, controllers, writer)
        os.replace(partial, video)
    except BaseException as e:
        partial.unlink(missing_ok=True)  # a video is published whole or not at all
        if isinstance(e, ConfigError | OSError):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise
    env.close()
    print(f"wrote {video} ({sum(o == 'success' for o in outcomes)}/{len(outcomes)} successful)")
    return 0


def play(args: argparse.Namespace, env, controllers: list, writer) -> list[str]:
    """Play `args.episodes` episodes into `writer`; returns each episode's outcome."""
    controller, outcomes = controllers[0], []
    with writer:
        for ep in range(args.episodes):
            obs, info = env.reset(seed=args.seed + ep)
            controller.reset(env, obs, np.random.default_rng(args.seed + ep))
            steps = env.max_steps if args.max_steps is None else min(args.max_steps, env.max_steps)
            bar = tqdm(total=steps, desc=f"episode {ep} ({info['object']}, {info['colour']})", unit="step")
            for _ in range(steps):
                writer.append_data(tile(obs["images"], env.cfg.cameras, args.size))
                obs, _, terminated, truncated, info = env.step(controller(obs))
                bar.update(1)
                if terminated or truncated:
                    break
            bar.close()
            ended = terminated or truncated
            outcome = "success" if info["success"] else info["failure"] if ended else "max_steps"
            outcomes.append(outcome)
            report(ep, outcome, info["time"], info)
    return outcomes


def play_side_by_side(args: argparse.Namespace, cells: SideBySide, controllers: list, writer) -> list[str]:
    """Play `args.episodes` episodes into `writer`, `--num_envs` at a time: each round starts the next episodes
    together (episode k in environment k mod N, with seed --seed + k) and steps until all have ended, an environment
    whose episode has ended (or that has none this round) holding still. Each frame stacks the environments' rows,
    an ended episode's row showing its last frame. Returns each episode's outcome."""
    import torch

    env, n = cells.env, len(cells.views)
    steps = cells.max_steps if args.max_steps is None else min(args.max_steps, cells.max_steps)
    outcomes = []
    with writer:
        for first in range(0, args.episodes, n):
            episodes = range(first, min(first + n, args.episodes))
            ids = list(range(len(episodes)))
            obs = env.start_episodes(ids, [args.seed + ep for ep in episodes], [args.condition] * len(ids))
            infos, ended, rows = {}, {}, [None] * n
            for i, ep in zip(ids, episodes):
                controllers[i].reset(cells.views[i], env.observation_dict(obs, i), np.random.default_rng(args.seed + ep))
                infos[i] = cells.views[i].episode_info()
            bar = tqdm(total=steps, desc=f"episodes {episodes.start}-{episodes.stop - 1}", unit="step")
            for step in range(steps):
                running = [i for i in ids if i not in ended]
                mine = {i: env.observation_dict(obs, i) for i in running}
                for i in running:
                    rows[i] = tile(mine[i]["images"], cells.cfg.cameras, args.size)
                blank = np.zeros_like(next(r for r in rows if r is not None))
                writer.append_data(np.concatenate([blank if r is None else r for r in rows], axis=0))
                actions = env.hold_actions(obs)
                for i in running:
                    actions[i] = controllers[i](mine[i])
                obs, _, terminated, truncated, extras = env.step(torch.tensor(actions, dtype=torch.float32,
                                                                              device=env.device))
                bar.update(1)
                for i in running:
                    if terminated[i] or truncated[i]:
                        ended[i] = (extras["outcome"][i] or "failed", step + 1)
                if len(ended) == len(ids):
                    break
            bar.close()
            for i, ep in zip(ids, episodes):
                outcome, taken = ended.get(i, ("max_steps", steps))
                outcomes.append(outcome)
                report(ep, outcome, taken / cells.cfg.control_hz, infos[i])
    return outcomes


def report(episode: int, outcome: str, seconds: float, info: dict) -> None:
    print(f"episode {episode}: {outcome} after {seconds:.1f} s "
          f"({info['object']}, {info['colour']}, belt {info['belt_speed']:.3f} m/s)")


if __name__ == "__main__":
    sys.exit(main())
