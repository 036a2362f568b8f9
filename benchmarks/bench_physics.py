"""Physics throughput on the cell model: bare MuJoCo C, our MuJoCo C backend, and MuJoCo Warp (CPU, and CUDA if any).

Every backend starts from the same settled state (home keyframe, belt running at 0.2 m/s, the objects resting
in their parking spots: ~27 contacts) and runs the same controls, so the numbers compare like with like. MuJoCo
Warp is timed after its first step, which compiles kernels (or loads them from Warp's cache) and captures the
step graph; that first step is reported separately as `setup_s`. Rates are world-steps per second (nworld x steps
/ s); `ratio` divides by bare single-world `mujoco.mj_step`.

    python benchmarks/bench_physics.py [--output outputs/bench_physics.json] [--c-steps 2000] [--warp-steps 100]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import mujoco
import numpy as np

try:
    import r2s2r  # noqa: F401
except ImportError:  # not installed into the venv: import from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source" / "r2s2r"))

from _common import write_json  # noqa: E402
from r2s2r.cell.mjcf import belt_periodic, build_model  # noqa: E402
from r2s2r.cell.spec import CellCfg  # noqa: E402
from r2s2r.physics.mujoco_c import MujocoCBackend  # noqa: E402

SETTLE_STEPS = 100  # let the objects come to rest on the floor so every backend sees the same contacts


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, default=Path("outputs/bench_physics.json"))
    p.add_argument("--c-steps", type=int, default=2000, help="steps for bare MuJoCo C and our C backend")
    p.add_argument("--warp-steps", type=int, default=100, help="timed steps per MuJoCo Warp configuration")
    p.add_argument("--cpu-nworlds", type=_ints, default=[1, 16, 64], help="comma-separated, Warp CPU device")
    p.add_argument("--cuda-nworlds", type=_ints, default=[1, 16, 64, 1024, 4096], help="comma-separated")
    p.add_argument("--no-eager", action="store_true",
                   help="skip the eager-launch (no graph) Warp CPU rows, which show what graph replay buys")
    p.add_argument("--no-warp", action="store_true", help="MuJoCo C rows only")
    return p.parse_args(argv)


def settled_state(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, d, 0)
    d.ctrl[model.actuator("belt_drive").id] = 0.2
    for _ in range(SETTLE_STEPS):
        mujoco.mj_step(model, d)
    return d.qpos.copy(), d.qvel.copy(), d.ctrl.copy()


def bench_bare_c(model, state, steps: int) -> dict:
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:], d.ctrl[:] = state
    mujoco.mj_forward(model, d)
    t = time.perf_counter()
    for _ in range(steps):
        mujoco.mj_step(model, d)
    dt = time.perf_counter() - t
    return dict(backend="mujoco.mj_step (bare)", device="cpu", nworld=1, graph=None, steps=steps, seconds=dt,
                ncon=int(d.ncon), nefc=int(d.nefc))


def bench_c_backend(model, periodic, state, steps: int) -> dict:
    b = MujocoCBackend(model, 1, periodic)
    b.reset(*state)
    # One step per call, as a control loop with decimation 1 would: the per-call overhead is included.
    t = time.perf_counter()
    for _ in range(steps):
        b.step(1)
    dt = time.perf_counter() - t
    return dict(backend="MujocoCBackend.step", device="cpu", nworld=1, graph=None, steps=steps, seconds=dt)


def bench_warp(model, periodic, state, device: str, nworld: int, steps: int, graph: bool) -> dict:
    import warp as wp

    from r2s2r.physics.mujoco_warp import MujocoWarpBackend

    t = time.perf_counter()
    b = MujocoWarpBackend(model, nworld, periodic, device=device, graph=graph)
    b.reset(*state)
    b.step(2)  # compile/load kernels, capture the graph, then one replay
    wp.synchronize_device(b.device)
    setup = time.perf_counter() - t
    t = time.perf_counter()
    b.step(steps)
    wp.synchronize_device(b.device)
    dt = time.perf_counter() - t
    return dict(backend="MujocoWarpBackend.step", device=str(b.device), nworld=nworld, graph=graph, steps=steps,
                seconds=dt, setup_s=setup, unstable=int(b.unstable().sum()),
                nacon=int(b.wdata.nacon.numpy()[0]), nefc_max=int(b.wdata.nefc.numpy().max()))


def markdown(rows: list[dict]) -> str:
    lines = ["| backend | device | nworld | graph | steps | world-steps/s | ratio to bare C | setup s |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        graph = "" if r["graph"] is None else ("yes" if r["graph"] else "no")
        setup = f"{r['setup_s']:.1f}" if "setup_s" in r else ""
        lines.append(f"| {r['backend']} | {r['device']} | {r['nworld']} | {graph} | {r['steps']} | "
                     f"{r['world_steps_per_s']:,.0f} | {r['ratio_to_bare_c']:.3f} | {setup} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    cell = CellCfg()
    model = build_model(cell)
    periodic = (belt_periodic(model, cell),)
    state = settled_state(model)

    rows = [bench_bare_c(model, state, args.c_steps), bench_c_backend(model, periodic, state, args.c_steps)]
    versions = dict(mujoco=mujoco.__version__)
    if not args.no_warp:
        import mujoco_warp
        import warp as wp

        wp.init()
        versions.update(mujoco_warp=mujoco_warp.__version__, warp=wp.__version__)
        for nworld in args.cpu_nworlds:
            for graph in (True,) if args.no_eager else (True, False):
                rows.append(bench_warp(model, periodic, state, "cpu", nworld, args.warp_steps, graph))
                print(f"warp cpu nworld={nworld} graph={graph}: {rows[-1]['seconds']:.2f} s", file=sys.stderr)
        if wp.get_cuda_device_count() > 0:
            for nworld in args.cuda_nworlds:
                rows.append(bench_warp(model, periodic, state, "cuda:0", nworld, args.warp_steps, True))

    bare = rows[0]["steps"] / rows[0]["seconds"]
    for r in rows:
        r["world_steps_per_s"] = r["nworld"] * r["steps"] / r["seconds"]
        r["ratio_to_bare_c"] = r["world_steps_per_s"] / bare
    table = markdown(rows)
    print(table)

    result = dict(
        model=dict(nq=model.nq, nv=model.nv, nu=model.nu, nbody=model.nbody, ngeom=model.ngeom,
                   timestep=model.opt.timestep),
        versions=versions, platform=platform.platform(), cpu_count=os.cpu_count(), rows=rows, markdown=table,
    )
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
