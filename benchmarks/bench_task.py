"""Task step throughput without rendering, as a ratio to bare `mujoco.mj_step` on the same model, same run.

Each task control step is `substeps` physics steps plus the action conversion (IK for `ee_pose`), success checks and
the observation; the ratio compares physics steps per second inside the task with bare stepping.

Usage: python benchmarks/bench_task.py [--seconds 5] [--output outputs/bench_task.json]
"""

from __future__ import annotations

import argparse
import time

import mujoco
import numpy as np

import r2s2r.tasks as tasks
from _common import write_json


def bare_steps_per_second(model: mujoco.MjModel, seconds: float) -> float:
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(100):
            mujoco.mj_step(model, data)
        n += 100
    return n / (time.perf_counter() - t0)


def task_steps_per_second(action_mode: str, seconds: float) -> float:
    env = tasks.make("R2S2R-PickSort-v0", cameras=(), action_mode=action_mode)
    obs, _ = env.reset(seed=0)
    hold = obs["proprio"]["ee_pose"] if action_mode == "ee_pose" else obs["proprio"]["arm_q"]
    action = np.concatenate([hold, np.zeros(20)])
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(action)
        n += env.substeps
        if term or trunc:
            env.reset(seed=n)
    return n / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="measuring time per configuration")
    p.add_argument("--output", default="outputs/bench_task.json")
    args = p.parse_args()
    model = tasks.make("R2S2R-PickSort-v0", cameras=()).model
    bare = bare_steps_per_second(model, args.seconds)
    rows = {"bare_mj_step": bare}
    for mode in ("joint", "ee_pose"):
        rows[f"task_{mode}"] = task_steps_per_second(mode, args.seconds)
    print("| configuration | physics steps/s | ratio to bare mj_step |\n|---|---|---|")
    for name, sps in rows.items():
        print(f"| {name} | {sps:,.0f} | {sps / bare:.3f} |")
    write_json(args.output, {k: {"steps_per_s": v, "ratio": v / bare} for k, v in rows.items()})


if __name__ == "__main__":
    main()
