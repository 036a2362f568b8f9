"""Trajectory generation throughput: admitted trajectories per hour per CPU core, admission rate per generator,
and scaling from 1 to 2 workers, with four cameras rendered at 128x128 (generate.py's default).

The bare-engine ratio, measured in the same run: the time the physics of every attempt (admitted or not) took, plus
the time a bare `mujoco.Renderer` takes for the camera images of the admitted trajectories, divided by the
generation's wall time (so 1.0 would mean planning, IK, rendering the admitted frames from their stored states, the
generators and file writing cost nothing). The physics is timed in the run, around each control period's `mj_step`
calls (`RunSummary.physics_s`): the episodes' contacts (object on the belt, in the hand) make their steps slower than
bare `mj_step` from the home keyframe at rest, whose rate the earlier figures used (`bare_ratio_at_rest`,
`plan_share_at_rest`, measured before and after each run and kept for comparison). The earliest figure counted the
admitted trajectories' physics only (`admitted_ratio`).

Usage: python benchmarks/bench_datagen.py [--trajectories 4] [--output outputs/bench_datagen.json]
       python benchmarks/bench_datagen.py --cameras head_left right_wrist --image-size 64  # the policy's views
It also projects the wall time of --project trajectories (the paper scale's 6,000) from the 1-worker rates.
The grounded generator needs real demos: 8 are recorded first (no images) into outputs/bench/real.hdf5 if missing.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
import subprocess
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from _common import write_json  # noqa: E402
from bench_task import bare_steps_per_second  # noqa: E402
from r2s2r.cell.mjcf import build_model  # noqa: E402
from r2s2r.data import DemoReader  # noqa: E402
from r2s2r.core import parse_dotted  # noqa: E402
from r2s2r.datagen import generate, make_generate_cfg  # noqa: E402
from r2s2r.datagen.config import ALL_CAMERAS  # noqa: E402
from r2s2r.datagen.worker import single_thread_rasteriser  # noqa: E402
from r2s2r.tasks.pick_sort.renderer_choice import resolve_renderer  # noqa: E402

# The bare renderer rasterises as generation's workers do: set before this process's first GL context (generate() sets
# it too, but only after the bare renderer has drawn).
single_thread_rasteriser()

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"mimic": "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0",
         "planner": "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0"}


def _bare_renderers(model: mujoco.MjModel, cell, cameras: list[str], size: int):
    """Bare `mujoco.Renderer`s for `cameras` at the source sizes and fields of view our renderer uses (as in
    bench_render.py), without the lens model: (model, data at the home keyframe, renderer per size, size per camera)."""
    from r2s2r.render import make_renderer

    ours = make_renderer("mujoco_gl", model, cell, tuple(cameras), size, size)
    bare_model = copy.copy(model)
    sizes = {}
    for name, cm in ours.camera_models.items():
        bare_model.cam_fovy[ours.camera_ids[name]] = cm.render_fovy_deg
        sizes[name] = (cm.render_height, cm.render_width)
    ours.close()
    bare_model.vis.quality.offsamples = 0
    renderers = {s: mujoco.Renderer(bare_model, *s) for s in set(sizes.values())}
    data = mujoco.MjData(bare_model)
    mujoco.mj_resetDataKeyframe(bare_model, data, 0)
    mujoco.mj_forward(bare_model, data)
    return bare_model, data, renderers, sizes


def bare_images_per_second(model: mujoco.MjModel, cell, cameras: list[str], size: int, seconds: float) -> float:
    _, data, renderers, sizes = _bare_renderers(model, cell, cameras, size)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for cam in cameras:
            renderer = renderers[sizes[cam]]
            renderer.update_scene(data, cam)
            renderer.render()
            n += 1
    for renderer in renderers.values():
        renderer.close()
    return n / (time.perf_counter() - t0)


def _bare_control_steps(cell, cameras: list[str], size: int, substeps: int, seconds: float, start, rates) -> None:
    """One process of `bare_scaling`: control periods of bare `mj_step` from the home keyframe, each followed by one
    bare image per camera, for `seconds` after every process has reached `start` (a barrier)."""
    single_thread_rasteriser()
    model, data, renderers, sizes = _bare_renderers(build_model(cell), cell, cameras, size)
    start.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        for cam in cameras:
            renderers[sizes[cam]].update_scene(data, cam)
            renderers[sizes[cam]].render()
        n += 1
    rates.put(n / (time.perf_counter() - t0))


def bare_scaling(cell, cameras: list[str], size: int, substeps: int, seconds: float) -> float:
    """What 2 processes of the bare engine (physics, then the cameras' images) do together over what 1 does alone: the
    machine's own ceiling for generation's 1 -> 2 worker speedup (shared caches, memory and host)."""
    ctx = get_context("spawn")
    totals = []
    for n in (1, 2):
        start, rates = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_bare_control_steps, args=(cell, cameras, size, substeps, seconds, start, rates))
                 for _ in range(n)]
        for proc in procs:
            proc.start()
        totals.append(sum(rates.get() for _ in procs))
        for proc in procs:
            proc.join()
    return totals[1] / totals[0]


def run(task: str, trajectories: int, workers: int, source: Path, workdir: Path, cameras: list[str],
        size: int, chunk_size: int) -> dict:
    overrides = [f"env.cameras=[{','.join(cameras)}]", f"env.image_size=[{size},{size}]",
                 f"datagen.chunk_size={chunk_size}"]
    if "BehaviorGrounded" in task:
        overrides.append(f"generator.source={source}")
    cfg = make_generate_cfg(task, trajectories, 0, parse_dotted(overrides))
    workdir.mkdir(exist_ok=True)
    out = workdir / f"{task}-{workers}.hdf5"  # a new file each run: an existing one would be taken as done
    t0 = time.perf_counter()
    summary = generate(cfg, out, num_workers=workers, progress=False)
    wall = time.perf_counter() - t0
    with DemoReader(out) as reader:
        steps = reader.total
    return {"task": task, "workers": workers, "trajectories": summary.trajectories, "attempts": summary.attempts,
            "admission_rate": round(summary.admission_rate, 3), "reasons": dict(summary.reasons),
            "wall_s": round(wall, 1), "steps": steps, "attempt_steps": summary.steps,
            "admitted_steps": summary.admitted_steps,
            "plan_s": round(summary.plan_s, 2), "physics_s": round(summary.physics_s, 2),
            "per_hour_per_core": round(summary.trajectories / wall * 3600 / workers, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trajectories", type=int, default=4, help="admitted trajectories per measurement")
    p.add_argument("--generators", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--cameras", nargs="+", default=list(ALL_CAMERAS), choices=list(ALL_CAMERAS),
                   help="cameras recorded (default: all four, generate.py's default; the policy trains on 2)")
    p.add_argument("--image-size", type=int, default=128, help="their height and width (default 128)")
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="worker counts to run (default 1 2)")
    p.add_argument("--chunk-size", type=int, default=1,
                   help="attempts per chunk (default 1: two workers end a run together to within one attempt; with "
                        "chunks of 2, a run of 9 chunks has one worker alone for the last, which caps 1 -> 2 workers "
                        "at 9/5 = 1.8x; generate.py's default is 4, for runs of thousands)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run each generator's worker counts this many times, in alternating order (1 2, then 2 1, "
                        "...): the machine's speed drifts between runs, and alternating spreads it over both counts; "
                        "the speedup is the ratio of their summed wall times (default 1)")
    p.add_argument("--project", type=int, default=6000,
                   help="project the wall time of this many trajectories, split evenly over the generators (default 6000: the "
                        "paper scale's four configurations of 1,500)")
    p.add_argument("--output", default="outputs/bench_datagen.json")
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds = {args.rounds}: expected at least 1")
    source = ROOT / "outputs" / "bench" / "real.hdf5"
    if "mimic" in args.generators and not source.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "collect_real.py"), "--num-demos", "8", "--output",
                        str(source), "--cameras"], check=True, cwd=ROOT)
    cfg = make_generate_cfg(TASKS["mimic"])
    model = build_model(cfg.env.cell)
    substeps = round(1.0 / (cfg.env.control_hz * cfg.env.cell.physics.timestep))

    def bare_rates() -> tuple[float, float]:
        return (bare_steps_per_second(model, 3.0),
                bare_images_per_second(model, cfg.env.cell, args.cameras, args.image_size, 3.0))

    # `env.renderer="auto"` is decided once per machine and camera set and then cached: decide it before the timed
    # runs, which would otherwise count a one-time measurement (seconds to a minute) in the first run's wall time.
    warm = make_generate_cfg(TASKS["planner"], 1, 0, parse_dotted([f"env.cameras=[{','.join(args.cameras)}]",
                                                                 f"env.image_size=[{args.image_size},{args.image_size}]"]))
    print("renderer:", resolve_renderer(warm.env)[1], file=sys.stderr)
    # The bare engine is measured right before and after each run and the two averaged: on a shared machine the
    # load drifts over a run, and a single measurement at the start can be taken in another load than the run.
    rows, before = [], bare_rates()
    scaling = [bare_scaling(cfg.env.cell, args.cameras, args.image_size, substeps, 10.0)] if 2 in args.workers else []
    with tempfile.TemporaryDirectory() as tmp:
        for name, rnd in itertools.product(args.generators, range(args.rounds)):
            for workers in (args.workers if rnd % 2 == 0 else args.workers[::-1]):
                row = run(TASKS[name], args.trajectories, workers, source, Path(tmp) / f"round{rnd}", args.cameras,
                          args.image_size, args.chunk_size)
                after = bare_rates()
                rest_steps, bare_images = [(a + b) / 2 for a, b in zip(before, after)]
                before = after
                # Every admitted attempt's frames are rendered, also those of the last chunk's surplus admitted
                # attempts the output does not need (at most chunk_size - 1 per run: noticeable only in runs this
                # short).
                images = row["admitted_steps"] * len(args.cameras) / bare_images
                physics, physics_at_rest = row["physics_s"], row["attempt_steps"] * substeps / rest_steps
                # Planning against the physics time of the attempts it planned (the goal: at most 0.10).
                row.update(generator=name, round=rnd, bare_ratio=round((physics + images) / row["wall_s"], 3),
                           plan_share=round(row["plan_s"] / physics, 3),
                           bare_ratio_at_rest=round((physics_at_rest + images) / row["wall_s"], 3),
                           plan_share_at_rest=round(row["plan_s"] / physics_at_rest, 3),
                           admitted_ratio=round((row["steps"] * substeps / rest_steps + images) / row["wall_s"], 3),
                           steps_per_s=round(row["attempt_steps"] * substeps / physics),
                           bare_steps_at_rest_per_s=round(rest_steps), bare_images_per_s=round(bare_images, 1))
                rows.append(row)
                print(row, file=sys.stderr)
    if scaling:
        scaling.append(bare_scaling(cfg.env.cell, args.cameras, args.image_size, substeps, 10.0))
    speedups = {}
    if {1, 2} <= set(args.workers):
        for name in args.generators:
            one, two = [sum(r["wall_s"] for r in rows if r["generator"] == name and r["workers"] == w) for w in (1, 2)]
            speedups[name] = round(one / two, 2)
    # Projection from the 1-worker rates, as if every core ran one worker at that rate (the 2-worker speedup
    # says how far that holds on this machine).
    singles = [r for r in rows if r["workers"] == 1]
    core_hours = (sum(args.project / len(singles) / r["per_hour_per_core"] for r in singles)
                  if len(singles) == len(args.generators) * args.rounds else None)
    projection = {"trajectories": args.project, "core_hours": round(core_hours, 2) if core_hours else None,
                  "wall_h": {cores: round(core_hours / cores, 2) for cores in (2, 64)} if core_hours else None}
    write_json(args.output, {"cameras": args.cameras, "image_size": args.image_size, "rows": rows,
                             "speedup_2_workers": speedups, "bare_engine_2_processes": [round(x, 3) for x in scaling],
                             "projection": projection})
    print("| generator | round | workers | admitted / attempts | admission | wall s | traj/h/core | bare ratio | "
          "(at rest) | planning / physics | (at rest) | mj_step/s in the run (at rest) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['generator']} | {r['round']} | {r['workers']} | {r['trajectories']} / {r['attempts']} | "
              f"{r['admission_rate']:.0%} | {r['wall_s']} | {r['per_hour_per_core']} | {r['bare_ratio']} | "
              f"{r['bare_ratio_at_rest']} | {r['plan_share']} | {r['plan_share_at_rest']} | "
              f"{r['steps_per_s']} ({r['bare_steps_at_rest_per_s']}) |")
    for name, speedup in speedups.items():
        print(f"{name}: 1 -> 2 workers {speedup}x (summed wall times over {args.rounds} round(s))")
    if scaling:
        print("bare engine (physics + images), 2 processes over 1, before and after the runs: "
              + ", ".join(f"{x:.2f}x" for x in scaling))
    if core_hours:
        print(f"{args.project} trajectories (split evenly over {len(args.generators)} generator(s)): {core_hours:.1f} core-hours, "
              f"{core_hours / 2:.1f} h on 2 cores, {60 * core_hours / 64:.0f} min on 64 cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
