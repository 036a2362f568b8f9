"""Export the conveyor cell as a USD stage for Isaac Sim, optionally animated by MuJoCo physics.

Runs as `python scripts/export_usd.py` or `isaaclab.sh -p scripts/export_usd.py`; it needs mujoco and pxr
(usd-core or Isaac Sim's own), no Isaac Sim modules.
"""

from __future__ import annotations

import argparse
import os
import sys

FPS = 30
BELT_SPEED = 0.2  # m/s
CUBE_BODY = "obj_cube"
CUBE_START_X = -0.6  # upstream end of the belt, so the whole clip shows the cube travelling


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Build the conveyor cell of a world file (default: the design cell, CellCfg()), compile it with MuJoCo and write the USD stage "
        "built from the compiled model (bodies, geoms, joints, drives, cameras, lights, materials).",
        epilog="With --animate, MuJoCo steps the cell from its home keyframe with the belt running at "
        f"{BELT_SPEED} m/s and {CUBE_BODY} placed on the belt, and every body pose is written as time samples at "
        f"{FPS} fps (time code = frame number), so the file plays back the rollout in the Isaac Sim GUI. "
        "Exit status 2 means a bad argument, a bad world file or an output path that cannot be written.",
    )
    from r2s2r import cli

    parser.add_argument("--output", "-o", type=cli.output_file, default="outputs/cell.usda",
                        help="stage file to write, .usda (text) or .usd/.usdc (binary); missing folders are "
                        "created; the file is replaced atomically (default: %(default)s)")
    parser.add_argument("--world", metavar="NAME_OR_PATH", default=None,
                        help="world file to build the cell from: a name registered under configs/world/ or a path "
                        "to a .yaml file (default: the design cell, CellCfg())")
    parser.add_argument("--animate", type=cli.float_in(0.0, 3600.0, unit="s"), default=0.0, metavar="SECONDS",
                        help="record SECONDS of simulated motion as time samples (default: 0, a static stage in "
                        "the home posture)")
    args = parser.parse_args(argv)
    if os.path.splitext(args.output)[1] not in (".usd", ".usda", ".usdc"):
        parser.error(f"--output {args.output}: expected a .usd, .usda or .usdc file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import mujoco
        from pxr import UsdGeom, UsdLux, UsdPhysics, UsdShade

        from r2s2r.cell import usd
        from r2s2r.cell.mjcf import belt_periodic, build_model
        from r2s2r.cell.spec import CellCfg
        from r2s2r.cell.world import load_world
        from r2s2r.core import ConfigError
    except ImportError as e:
        print(f"error: {e}; this script needs mujoco and pxr (pip install mujoco usd-core)", file=sys.stderr)
        return 1

    try:
        cell = CellCfg() if args.world is None else load_world(args.world).cell
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = build_model(cell)
    stage = usd.build_stage(model, cell)
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    data.actuator("belt_drive").ctrl = BELT_SPEED
    cube = next(o for o in cell.objects if f"obj_{o.name}" == CUBE_BODY)
    adr = int(model.jnt_qposadr[model.body(CUBE_BODY).jntadr[0]])
    data.qpos[adr:adr + 7] = (CUBE_START_X, cell.belt.center[1], cell.belt.center[2] + cube.half_height, 1, 0, 0, 0)
    mujoco.mj_forward(model, data)
    usd.sync_poses(stage, model, data)  # the default (un-animated) pose is the start of the clip

    frames = round(args.animate * FPS)
    if frames > 0:
        belt = belt_periodic(model, cell)
        for frame in range(frames + 1):
            while data.time < frame / FPS - 0.5 * model.opt.timestep:
                mujoco.mj_step(model, data)
                # The cell's physics backends wrap the belt by one slat pitch, so it never runs out.
                q = data.qpos[belt.qpos_adr]
                data.qpos[belt.qpos_adr] = (q + belt.period / 2) % belt.period - belt.period / 2
            mujoco.mj_kinematics(model, data)
            usd.sync_poses(stage, model, data, frame)
        stage.SetTimeCodesPerSecond(FPS)
        stage.SetFramesPerSecond(FPS)
        stage.SetStartTimeCode(0)
        stage.SetEndTimeCode(frames)

    output = os.path.abspath(args.output)
    try:
        os.makedirs(os.path.dirname(output), exist_ok=True)
        usd.write_stage(stage, output)
    except (OSError, ValueError) as e:
        msg = str(e) if output in str(e) else f"cannot write USD stage to {output}: {e}"
        print(f"error: {msg}", file=sys.stderr)
        return 2

    prims = list(stage.Traverse())
    counts = {
        "bodies": model.nbody - 1,
        "geoms": sum(p.IsA(UsdGeom.Gprim) for p in prims),
        "joints": sum(p.IsA(UsdPhysics.Joint) for p in prims),
        "cameras": sum(p.IsA(UsdGeom.Camera) for p in prims),
        "lights": sum(p.HasAPI(UsdLux.LightAPI) for p in prims),
        "materials": sum(p.IsA(UsdShade.Material) for p in prims),
    }
    print(f"wrote {output}")
    print(f"{len(prims)} prims: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    if frames > 0:
        end = data.body(CUBE_BODY).xpos
        print(f"animated {frames + 1} frames at {FPS} fps ({frames / FPS:.2f} s); {CUBE_BODY} ends at "
              f"({end[0]:.3f}, {end[1]:.3f}, {end[2]:.3f}) m")
    return 0


if __name__ == "__main__":
    sys.exit(main())
