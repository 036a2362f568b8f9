"""Render throughput on the cell: our render backends against bare MuJoCo rendering of the same cameras and size.

Every row renders the same four cameras (two head pinholes, two wrist fisheyes) of the same `nworld` worlds
(home posture, one object on the belt), at the source size and field of view the camera models ask for.
- GL: `MujocoGLRenderer.render` (RGB and depth, then the camera models) against bare `mujoco.Renderer`
  `update_scene` + `render` of RGB only, and of RGB plus a second, depth render (what `mujoco.Renderer` needs to
  give both). Shadows and multisampling are measured on our path as well.
- Warp: `MujocoWarpRenderer.render` (poses uploaded from MuJoCo C physics, or read in place from MuJoCo Warp
  physics; readback; camera models) against a bare `mjw.refit_bvh` + `mjw.render` of the same context, which
  leaves the images on the device.
Rows that are compared run interleaved (round-robin), and each reports its median time per frame, so load
from other processes skews all of them alike. Rates are images per second (nworld x cameras per frame / median
frame time); `ratio` divides a row's rate by its baseline's.

    python benchmarks/bench_render.py [--output outputs/bench_render.json] [--size 128] [--nworld 4] [--seconds 2]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # headless; must precede the first mujoco import

import mujoco  # noqa: E402

try:
    import r2s2r  # noqa: F401
except ImportError:  # not installed into the venv: import from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source" / "r2s2r"))

from _common import write_json  # noqa: E402
from r2s2r.cell.mjcf import build_model  # noqa: E402
from r2s2r.cell.spec import CellCfg  # noqa: E402
from r2s2r.physics import make_physics  # noqa: E402
from r2s2r.render import make_renderer  # noqa: E402
from r2s2r.render.camera_model import CameraModel  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, default=Path("outputs/bench_render.json"))
    p.add_argument("--size", type=int, default=128, help="output width and height of every camera")
    p.add_argument("--nworld", type=int, default=4)
    p.add_argument("--seconds", type=float, default=2.0, help="minimum timed duration per row")
    p.add_argument("--no-warp", action="store_true", help="GL rows only")
    return p.parse_args(argv)


def interleaved(fns: dict, seconds: float, warmup: int = 2, min_rounds: int = 5) -> dict[str, tuple[int, float]]:
    """Time several functions in round-robin, so load from other processes hits all of them alike.

    Each is called `warmup` times untimed, then once per round until every function has had `seconds` and at
    least `min_rounds` calls. Returns {name: (calls, median seconds per call)}.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    while True:
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
        if all(len(v) >= min_rounds and sum(v) >= seconds for v in times.values()):
            return {name: (len(v), statistics.median(v)) for name, v in times.items()}


def home_physics(model: mujoco.MjModel, nworld: int, backend: str = "mujoco", **kw):
    physics = make_physics(backend, model, nworld, **kw)
    key = model.key("home")
    qpos = key.qpos.copy()
    adr = model.joint("obj_cube").qposadr[0]
    qpos[adr:adr + 3] = (0.05, 0.0, 0.106)  # on the belt, in view of the head cameras
    physics.reset(qpos, key.qvel, key.ctrl)
    return physics


def rows_from(results: dict[str, tuple[int, float]], baselines: dict[str, str | None], nimages: int,
              **extra) -> list[dict]:
    return [dict(name=name, baseline=baselines.get(name), images_per_frame=nimages, frames=calls,
                 seconds_per_frame=per_call, images_per_s=nimages / per_call, **extra)
            for name, (calls, per_call) in results.items()]


def bench_gl(model, cell, cams, size, physics, seconds) -> list[dict]:
    n = physics.nworld * len(cams)
    ours = make_renderer("mujoco_gl", model, cell, cams, size, size)
    shadows = make_renderer("mujoco_gl", model, cell, cams, size, size, shadows=True)
    msaa = make_renderer("mujoco_gl", model, cell, cams, size, size, multisample=True)
    # Bare: the same source sizes and fields of view, set on a model copy as a user of mujoco.Renderer would.
    bare_model = copy.copy(model)
    for name, cm in ours.camera_models.items():
        bare_model.cam_fovy[ours.camera_ids[name]] = cm.render_fovy_deg
    bare_model.vis.quality.offsamples = 0  # our default; MuJoCo's is 4
    size_of = {name: (cm.render_width, cm.render_height) for name, cm in ours.camera_models.items()}
    bare = {s: mujoco.Renderer(bare_model, height=s[1], width=s[0]) for s in set(size_of.values())}

    def bare_render(depth: bool):
        for w in range(physics.nworld):
            d = physics.host_data(w)
            for name in cams:
                r = bare[size_of[name]]
                r.update_scene(d, name)
                r.render()
                if depth:  # mujoco.Renderer needs a second pass for depth
                    r.enable_depth_rendering()
                    r.render()
                    r.disable_depth_rendering()

    def bare_rgb():
        bare_render(depth=False)

    def bare_rgbd():
        bare_render(depth=True)

    try:
        results = interleaved({
            "mujoco.Renderer rgb (bare)": bare_rgb,
            "mujoco.Renderer rgb + depth pass (bare)": bare_rgbd,
            "MujocoGLRenderer.render": lambda: ours.render(physics),
            "MujocoGLRenderer.render, shadows": lambda: shadows.render(physics),
            "MujocoGLRenderer.render, multisample x4": lambda: msaa.render(physics),
        }, seconds)
    finally:
        for r in (*bare.values(), ours, shadows, msaa):
            r.close()
    return rows_from(results, {"MujocoGLRenderer.render": "mujoco.Renderer rgb (bare)",
                               "MujocoGLRenderer.render, shadows": "MujocoGLRenderer.render",
                               "MujocoGLRenderer.render, multisample x4": "MujocoGLRenderer.render"}, n)


def bench_warp(model, cell, cams, size, c_physics, seconds, device: str) -> list[dict]:
    import mujoco_warp as mjw
    import warp as wp

    n = c_physics.nworld * len(cams)
    with make_renderer("mujoco_warp", model, cell, cams, size, size, device=device) as ours:
        t = time.perf_counter()
        ours.render(c_physics)  # builds the context (and compiles or loads the kernels)
        w_physics = home_physics(model, c_physics.nworld, "mujoco_warp", device=device)
        ours.render(w_physics)
        setup = time.perf_counter() - t
        # Bare: our very render context (same rays, BVH and buffers), poses already on the device, images left
        # there; the private attributes are read so that only the per-frame work differs.
        rc = ours._rc
        with wp.ScopedDevice(device):
            m = mjw.put_model(ours._render_model)
            d = mjw.put_data(model, c_physics.host_data(0), nworld=c_physics.nworld)

        def bare():
            with wp.ScopedDevice(device):
                mjw.refit_bvh(m, d, rc)
                mjw.render(m, d, rc)
                wp.synchronize_device(device)

        base = f"mjw.refit_bvh + mjw.render (bare, {device})"
        results = interleaved({
            base: bare,
            f"MujocoWarpRenderer.render, MuJoCo C physics ({device})": lambda: ours.render(c_physics),
            f"MujocoWarpRenderer.render, MuJoCo Warp physics ({device})": lambda: ours.render(w_physics),
        }, seconds)
    return rows_from(results, {name: base for name in results if name != base}, n, device=device, setup_s=setup)


def markdown(rows: list[dict]) -> str:
    lines = ["| path | images/frame | frames | ms/frame (median) | images/s | ratio | baseline |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ""
        lines.append(f"| {r['name']} | {r['images_per_frame']} | {r['frames']} | {1e3 * r['seconds_per_frame']:.1f} | "
                     f"{r['images_per_s']:,.0f} | {ratio} | {r['baseline'] or ''} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    cell = CellCfg()
    model = build_model(cell)
    cams = cell.camera_names
    physics = home_physics(model, args.nworld)
    rows = bench_gl(model, cell, cams, args.size, physics, args.seconds)
    print("gl done", file=sys.stderr)
    versions = dict(mujoco=mujoco.__version__)
    if not args.no_warp:
        import mujoco_warp
        import warp as wp

        wp.init()
        versions.update(mujoco_warp=mujoco_warp.__version__, warp=wp.__version__)
        devices = ["cpu"] + (["cuda:0"] if wp.get_cuda_device_count() > 0 else [])
        for device in devices:
            rows += bench_warp(model, cell, cams, args.size, physics, args.seconds, device)
            print(f"warp {device} done", file=sys.stderr)

    sources = {}
    for c in cell.cameras:
        cm = CameraModel(c.lens, args.size, args.size)
        sources[c.name] = dict(width=cm.render_width, height=cm.render_height, fovy_deg=cm.render_fovy_deg)
    rate = {r["name"]: r["images_per_s"] for r in rows}
    for r in rows:
        r["ratio"] = r["images_per_s"] / rate[r["baseline"]] if r["baseline"] else None
    table = markdown(rows)
    print(table)

    result = dict(size=args.size, nworld=args.nworld, cameras=list(cams),
                  sources=sources, versions=versions,
                  mujoco_gl=os.environ.get("MUJOCO_GL"), platform=platform.platform(), cpu_count=os.cpu_count(),
                  rows=rows, markdown=table)
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
