"""Isaac Lab environment throughput on the CPU: `PickSortCellEnv` against a bare Newton `SolverMuJoCo` of the same model.

Rates are environment steps per second: control steps x environments / s. The bare engine's control step is
`decimation` solver steps (one substep each, as the environment's physics takes them) on a Newton model built
from the same USD stage with `ModelBuilder.add_usd` and `replicate` (one world per environment, at the
environments' origins), with the environment's solver options and shape defaults, from the environment's state
and drive targets after its reset and first step, replayed as a Warp graph as the environment's physics manager
replays its own (r2s2r/isaaclab_tasks/pick_sort/cpu_graph.py). It has no Isaac Lab layer: no actuators, asset buffers or scene
updates, and none of the task's rules (outcomes, observations, episode state). `ratio` = environment / bare.

Isaac Lab holds one simulation per process, so each environment count runs in a child process (this script with
`--worker`). Both sides take one untimed control step first (Warp kernels compile or load from the cache), then
alternate timed blocks of `--steps` control steps, `--rounds` times each, so other load on the machine falls on
both alike. Held joint targets: the arms keep their posture, the belt carries the episode's object.

    python benchmarks/bench_isaaclab.py [--envs 1,16,64] [--steps 4] [--rounds 2] [--output outputs/bench/isaaclab.json]

Writes the JSON and, beside it, the table as markdown (`.md`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_json

TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
SEED = 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=_ints, default=[1, 16, 64], help="comma-separated environment counts")
    p.add_argument("--steps", type=int, default=4, help="control steps per timed block")
    p.add_argument("--rounds", type=int, default=2, help="timed blocks per side")
    p.add_argument("--output", type=Path, default=Path("outputs/bench/isaaclab.json"))
    p.add_argument("--timeout", type=float, default=3600, help="seconds per environment count")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # child: this many environments, JSON to --output
    args = p.parse_args(argv)
    for name in ("steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} = {getattr(args, name)}: expected an integer >= 1")
    if not args.envs or min(args.envs) < 1:
        p.error(f"--envs = {args.envs}: expected positive counts")
    return args


def bare_solver(cfg, origins, manager):
    """Newton's MuJoCo solver on the stage `cfg` spawns, one world per environment at its origin, with the
    environment's solver options, state and drive targets; returns (step function for one control period, nacon)."""
    import newton
    import warp as wp
    from newton.solvers import SolverMuJoCo

    cell = newton.ModelBuilder()
    SolverMuJoCo.register_custom_attributes(cell)
    # The shape defaults Isaac Lab gives its builders and its importer's settings (the stage's mjc: attributes
    # override both where the cell sets them); no visual shapes, as without cameras.
    for key, value in cfg.sim.physics.default_shape_cfg.to_dict().items():
        setattr(cell.default_shape_cfg, key, value)
    resolvers = [newton.usd.SchemaResolverNewton(), newton.usd.SchemaResolverPhysx(), newton.usd.SchemaResolverMjc()]
    cell.add_usd(cfg.scene.cell.spawn.usd_path, load_visual_shapes=False, schema_resolvers=resolvers)
    builder = newton.ModelBuilder()
    SolverMuJoCo.register_custom_attributes(builder)
    builder.replicate(cell, len(origins), xforms=[wp.transform(tuple(map(float, o)), wp.quat_identity())
                                                  for o in origins])
    model = builder.finalize(device="cpu")
    source = manager.get_model()
    if (model.joint_coord_count, model.joint_dof_count, model.shape_count) != (
            source.joint_coord_count, source.joint_dof_count, source.shape_count):
        raise RuntimeError("the bare model's layout differs from the environment's: its state cannot be copied")
    # The solver options as Isaac Lab passes them: the cfg's fields that SolverMuJoCo's constructor takes.
    options = cfg.sim.physics.solver_cfg.to_dict()
    accepted = set(inspect.signature(SolverMuJoCo.__init__).parameters) - {"self", "model", "ls_parallel"}
    solver = SolverMuJoCo(model, **{k: v for k, v in options.items() if k in accepted})
    state, control = model.state(), model.control()
    env_state, env_control = manager.get_state_0(), manager.get_control()
    for name in ("joint_q", "joint_qd", "body_q", "body_qd"):
        getattr(state, name).assign(getattr(env_state, name))
    for name in ("joint_target_q", "joint_target_qd"):
        getattr(control, name).assign(getattr(env_control, name))
    dt = cfg.sim.dt
    solver.step(state, state, control, None, dt)  # untimed: the solver's kernels compile, its buffers appear
    # One physics step recorded as a Warp graph and replayed, as the environment's manager does (cpu_graph.py).
    with wp.ScopedCapture(device="cpu") as capture:
        solver.step(state, state, control, None, dt)  # one state in and out, as Isaac Lab runs this solver

    def period() -> None:
        for _ in range(cfg.decimation):
            wp.capture_launch(capture.graph)
        wp.synchronize_device("cpu")

    return period, lambda: int(solver.mjw_data.nacon.numpy()[0])


def worker(num_envs: int, steps: int, rounds: int) -> dict:
    import numpy as np
    import torch
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    import r2s2r.isaaclab_tasks  # noqa: F401  (registers the IDs)
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv

    start = time.perf_counter()
    cfg = parse_env_cfg(TASK, num_envs=num_envs)
    env = PickSortCellEnv(cfg)
    obs, _ = env.reset(seed=SEED)
    build_s = time.perf_counter() - start
    policy = obs["policy"].numpy()
    hold = torch.tensor(np.concatenate([policy[:, :7], policy[:, 14:34]], axis=1))

    start = time.perf_counter()
    env.step(hold)  # untimed: kernels, and the held targets reach the drives
    env_warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    period, nacon = bare_solver(cfg, env.scene.env_origins.numpy(), env.sim.physics_manager)
    period()  # untimed: the solver's kernels
    bare_warmup_s = time.perf_counter() - start

    seconds = {"env": 0.0, "bare": 0.0}
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            env.step(hold)
        seconds["env"] += time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            period()
        seconds["bare"] += time.perf_counter() - start
    done = steps * rounds * num_envs
    row = dict(envs=num_envs, control_steps=steps * rounds, decimation=cfg.decimation,
               env_seconds=seconds["env"], bare_seconds=seconds["bare"],
               env_steps_per_s=done / seconds["env"], bare_steps_per_s=done / seconds["bare"],
               build_s=build_s, env_warmup_s=env_warmup_s, bare_warmup_s=bare_warmup_s, bare_nacon=nacon(),
               max_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, load_avg=os.getloadavg()[0])
    row["ratio"] = row["env_steps_per_s"] / row["bare_steps_per_s"]
    env.close()
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["| envs | control steps | env steps/s | bare Newton steps/s | ratio env/bare | build s | peak RSS GiB |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['envs']} | | not measured: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['envs']} | {r['control_steps']} | {r['env_steps_per_s']:.2f} | "
                     f"{r['bare_steps_per_s']:.2f} | {r['ratio']:.3f} | {r['build_s']:.0f} | {r['max_rss_gib']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        write_json(args.output, worker(args.worker, args.steps, args.rounds))
        return 0
    rows = []
    for n in args.envs:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "row.json"
            cmd = [sys.executable, __file__, "--worker", str(n), "--steps", str(args.steps), "--rounds",
                   str(args.rounds), "--output", str(out)]
            try:
                result = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                row = json.loads(out.read_text()) if result.returncode == 0 else dict(
                    envs=n, error=f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1:]}")
            except subprocess.TimeoutExpired:
                row = dict(envs=n, error=f"over {args.timeout:.0f} s")
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    table = markdown(rows)
    print(table)
    import isaaclab
    import newton
    import warp

    versions = dict(isaaclab=isaaclab.__version__, newton=newton.__version__, warp=warp.__version__)
    write_json(args.output, dict(task=TASK, seed=SEED, versions=versions, platform=platform.platform(),
                                 cpu_count=os.cpu_count(), rows=rows, markdown=table))
    args.output.with_suffix(".md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
