"""Isaac Lab Mimic's own generation (`isaaclab_mimic.datagen`) on the cell's Isaac Lab environment, from our demos.

Mimic's `DataGenInfoPool` loads the source demos with its own loader (`load_from_dataset_file`, our demo files are
in its source-demo layout) and Mimic's `DataGenerator.generate` produces each trajectory, unchanged: it picks a
source demo, transforms each subtask segment with the subtask object's pose at the segment's start, and pushes
actions (through our `target_eef_pose_to_action`) to an action queue and env ids to a reset queue.

Mimic's entry points (`generation.setup_env_config`, `generation.env_loop`) are written for a manager-based
environment; `PickSortCellEnv` is a `DirectRLEnv`. The glue here is what such an environment needs, nothing of
Mimic's logic:
- the env loop (`run`): serves Mimic's queues as `generation.env_loop` does, but resets with our environment's
  `reset(seed=)` (trajectory k gets seed `seed + k`, so runs repeat) instead of `reset(env_ids=)`;
- the success term: a `TerminationTermCfg` whose func (`env_success`) returns `env.success`, the reference's
  success rule judged on the last step;
- the recorder manager Mimic calls (`reset`, `set_success_to_episodes`, `export_episodes`): Isaac Lab's own
  `RecorderManager` without terms, whose calls do nothing. A `DirectRLEnv`'s `step` calls no recorder hooks, so
  terms would record nothing of a generated episode; the results here are Mimic's return value and our outcome.

Our environment ends an episode itself (success or one of the reference's failures, or the time limit) and resets
within that step, where a manager-based Mimic environment has its terminations switched off during generation.
After that end the loop takes Mimic's remaining actions without stepping: stepping them would play the rest of
Mimic's trajectory into the next seed's episode, which Mimic did not reset. `env.success` then keeps the end's
judgement, so Mimic's `success` is the outcome of the episode it generated.

Stock Mimic moves each segment rigidly with the object's pose at the segment's start; it does not model an object
the belt carries on (`r2s2r.behavior.mimic`, the project's generator, follows it). Run as

    python -m r2s2r.isaaclab_tasks.pick_sort.mimic_datagen --source demos.hdf5 --trajectories 4 --world twin

(or `isaaclab -p -m ...`); Isaac Lab's launcher options apply (`add_launcher_args`; no Kit for this task).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from r2s2r.core import ConfigError
from r2s2r.data.annotate import SUBTASKS
from r2s2r.data.datagen_info import EEF, OBJECT


def env_success(env) -> torch.Tensor:
    """Mimic's success term: the reference's success rule on the environment's last step, per environment."""
    return env.success


@dataclass
class Trajectory:
    """One trajectory of Mimic's generation on the environment."""

    seed: int  # the environment's episode seed
    success: bool  # Mimic's `generate(...)["success"]`
    outcome: str | None  # ours: "success", a failure of the reference, "timeout", or None (Mimic stopped first)
    steps: int  # environment steps taken (up to and including the episode's end)
    mimic_actions: int  # actions Mimic's trajectory sent (those after the end were not stepped)
    src_demo_inds: dict[str, int] = field(default_factory=dict)  # subtask -> source demo index Mimic used
    subtask_starts: dict[str, int] = field(default_factory=dict)  # subtask -> step at which Mimic built it
    cpu_s: float = 0.0
    # Grasp-site and object positions (n, 3), environment frame: before each step, and after the last one unless it
    # ended the episode (the environment has reset by then).
    eef_pos: np.ndarray | None = None
    object_pos: np.ndarray | None = None

    def summary(self) -> dict:
        """The fields but the traces, and from those: the closest the hand came to the object and the most the
        object rose above its start (metres)."""
        row = {k: v for k, v in self.__dict__.items() if k not in ("eef_pos", "object_pos")}
        row["cpu_s"] = round(self.cpu_s, 1)
        if self.eef_pos is not None and len(self.eef_pos):
            row["closest_m"] = round(float(np.linalg.norm(self.eef_pos - self.object_pos, axis=1).min()), 4)
            row["object_rise_m"] = round(float(self.object_pos[:, 2].max() - self.object_pos[0, 2]), 4)
        return row


def load_pool(env, source: str | Path):
    """Mimic's `DataGenInfoPool` of the demos in `source`, by Mimic's own loader."""
    from isaaclab_mimic.datagen.datagen_info_pool import DataGenInfoPool

    pool = DataGenInfoPool(env, env.cfg, env.device)
    pool.load_from_dataset_file(str(source))
    return pool


def run(env, source: str | Path, trajectories: int, seed: int = 0) -> list[Trajectory]:
    """`trajectories` trajectories of Isaac Lab Mimic's `DataGenerator.generate` on `env` (a `PickSortCellEnv` of
    one environment, any action mode) from the demos in `source`. Trajectory k plays the episode of seed
    `seed + k`; Mimic's own random draws (boundary offsets, nearest-neighbour pick, action noise) are seeded with
    `seed` (numpy's and torch's global generators, which it uses)."""
    from isaaclab.managers import TerminationTermCfg
    from isaaclab.managers.recorder_manager import RecorderManager
    from isaaclab_mimic.datagen.data_generator import DataGenerator

    if env.num_envs != 1:
        raise ConfigError(f"scene.num_envs = {env.num_envs}: expected 1 (a DirectRLEnv resets all its environments "
                          "at once, and Mimic resets one)")
    if trajectories < 1:
        raise ConfigError(f"trajectories = {trajectories}: expected at least 1")
    np.random.seed(seed)
    torch.manual_seed(seed)
    pool = load_pool(env, source)
    generator = DataGenerator(env=env, src_demo_datagen_info_pool=pool)
    success_term = TerminationTermCfg(func=env_success)
    current: list[Trajectory] = []

    # Which source demo Mimic used for each subtask: its own method, observed (the result it returns has only
    # `success` and `initial_state`). The dict it is handed is updated in place with the selection.
    build = generator.generate_eef_subtask_trajectory

    def observed_build(env_id, eef_name, subtask_ind, boundaries, constraints, selected, *args, **kwargs):
        trajectory = build(env_id, eef_name, subtask_ind, boundaries, constraints, selected, *args, **kwargs)
        name = SUBTASKS[subtask_ind]
        current[-1].src_demo_inds[name] = int(selected[eef_name])
        current[-1].subtask_starts[name] = current[-1].steps
        return trajectory

    generator.generate_eef_subtask_trajectory = observed_build

    reset_queue: asyncio.Queue = asyncio.Queue()
    action_queue: asyncio.Queue = asyncio.Queue()
    results: list[dict] = []

    async def generate_all() -> None:
        for _ in range(trajectories):
            results.append(await generator.generate(env_id=0, success_term=success_term, env_reset_queue=reset_queue,
                                                    env_action_queue=action_queue))
            current[-1].success = bool(results[-1]["success"])
            current[-1].cpu_s = time.process_time() - current[-1].cpu_s

    def positions() -> tuple[np.ndarray, np.ndarray]:
        return (env.get_robot_eef_pose(EEF)[0, :3, 3].cpu().numpy().copy(),
                env.get_object_poses()[OBJECT][0, :3, 3].cpu().numpy().copy())

    had = getattr(env, "recorder_manager", None)
    env.recorder_manager = RecorderManager({}, env)  # Isaac Lab's, without terms: see the module docstring
    loop = asyncio.new_event_loop()
    trace: tuple[list, list] = ([], [])
    try:
        task = loop.create_task(generate_all())
        with torch.no_grad():
            while not task.done():
                loop.run_until_complete(asyncio.sleep(0))  # Mimic runs until it waits on a queue
                while not reset_queue.empty():
                    reset_queue.get_nowait()
                    if current:
                        current[-1].eef_pos, current[-1].object_pos = map(np.array, trace)
                    current.append(Trajectory(seed=seed + len(current), success=False, outcome=None, steps=0,
                                              mimic_actions=0, cpu_s=time.process_time()))
                    env.reset(seed=current[-1].seed)
                    trace = tuple([p] for p in positions())
                    reset_queue.task_done()
                if action_queue.qsize() == 0:
                    continue
                _, action = action_queue.get_nowait()
                t = current[-1]
                t.mimic_actions += 1
                if t.outcome is None:
                    _, _, terminated, truncated, extras = env.step(action[None].to(env.device))
                    t.steps += 1
                    if terminated[0] or truncated[0]:
                        t.outcome = extras["outcome"][0]
                    else:
                        for row, p in zip(trace, positions()):
                            row.append(p)
                action_queue.task_done()
        task.result()  # Mimic's exception, if it raised one
        current[-1].eef_pos, current[-1].object_pos = map(np.array, trace)
    finally:
        if not task.done():
            task.cancel()
        loop.close()
        if had is None:
            del env.recorder_manager
        else:
            env.recorder_manager = had
    return current


def admission(rows: list[Trajectory]) -> dict:
    """Mimic's admission (its success flags) and ours (the environment's outcomes) over `rows`."""
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[str(r.outcome)] = outcomes.get(str(r.outcome), 0) + 1
    return {"mimic": f"{sum(r.success for r in rows)}/{len(rows)}",
            "ours": f"{sum(r.outcome == 'success' for r in rows)}/{len(rows)}", "outcomes": outcomes}


def main(argv: list[str] | None = None) -> int:
    from r2s2r.isaaclab_tasks import TASKS

    worlds = [task.split("-")[3].lower() for task in TASKS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="source demo file (HDF5, the project's demo layout)")
    parser.add_argument("--trajectories", type=int, default=4, help="trajectories to generate (default 4)")
    parser.add_argument("--world", choices=worlds, default="twin", help="the cell's world (default twin)")
    parser.add_argument("--seed", type=int, default=0, help="first episode seed; Mimic's random draws too")
    from isaaclab.app import add_launcher_args

    add_launcher_args(parser)
    args = parser.parse_args(argv)
    if args.trajectories < 1:
        parser.error(f"--trajectories = {args.trajectories}: expected at least 1")
    if not Path(args.source).is_file():
        parser.error(f"--source = {args.source!r}: no such file")
    import h5py

    try:
        with h5py.File(args.source, "r") as f:
            demos = [k for k in f.get("data", {}) if k.startswith("demo_")]
    except OSError as e:
        parser.error(f"--source = {args.source!r}: not an HDF5 file ({e})")
    if not demos:
        parser.error(f"--source = {args.source!r}: no demos (data/demo_N)")
    from r2s2r.isaaclab_tasks.launcher import launch, launcher_device
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
    from r2s2r.isaaclab_tasks.pick_sort.task import cell_env_cfg

    cfg = cell_env_cfg(f"Isaac-R2S2R-PickSort-{args.world.capitalize()}-v0", device=launcher_device(args),
                       action_mode="joint")
    with launch(cfg, args):
        env = PickSortCellEnv(cfg)
        try:
            rows = run(env, args.source, args.trajectories, seed=args.seed)
        finally:
            env.close()
    print(json.dumps({"world": args.world, "source": str(args.source), "source_demos": len(demos),
                      "admission": admission(rows), "trajectories": [r.summary() for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
