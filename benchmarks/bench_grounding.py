"""World grounding on any plausible cell: whole calibration sessions recorded on the twin of each truth and grounded by
calibrate.py, every calibrated parameter checked against its tolerance.

Truths: the shipped ones (`--truths reality reality_alt`) and/or `--sampled N` drawn by `r2s2r.real.truths`
(seeds `--seed` .. `--seed + N - 1`, as scripts/sample_truths.py writes them). Each session uses
record_calibration.py's defaults (seed 0) unless `--views`, `--fisheye-views` or `--arm-poses` say otherwise.
Tolerances (the study's, per item; a parameter passes on a truth when every item does):

    reprojection RMS < 0.5 px, focal length within 1 %, head camera extrinsics within 3 mm and 0.2 deg, robot base
    and conveyor registration within 3 mm, link-length offsets within 0.5 mm, drive gains, joint damping and joint
    friction within 10 %, latency exact, belt speed scale within 2 %, object masses within 2 %, exposure and light
    intensity within 5 %.

The table (pass rate per parameter over the truths, worst error) goes to stdout in Markdown, every item to the JSON
output. `--check` exits 1 if any parameter misses on any truth (the test suite runs `--sampled 2 --views 12
--fisheye-views 16 --arm-poses 80 --check`: tests/calibration/grounding_runs.py).

Usage: python benchmarks/bench_grounding.py [--truths reality reality_alt] [--sampled 12 --seed 0] [--check]
           [--views 30 --fisheye-views 60 --arm-poses 150] [--output outputs/bench_grounding.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from _common import write_json  # noqa: E402
from r2s2r import cli  # noqa: E402
from r2s2r.cell.spec import CellCfg  # noqa: E402
from r2s2r.cell.world import load_world  # noqa: E402
from r2s2r.files import write_text_atomic  # noqa: E402
from r2s2r.geometry import rotation_error, rpy_to_mat  # noqa: E402
from r2s2r.real.truths import sample_truth, truth_text  # noqa: E402
from r2s2r.real.twin import TwinRig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import calibrate  # noqa: E402
import record_calibration  # noqa: E402

HEADS = ("head_left", "head_right")


def _relative(a, b) -> np.ndarray:
    return 100.0 * np.abs(np.asarray(a, float) / np.asarray(b, float) - 1.0)


def _by_name(items) -> dict:
    return {x.name: x for x in items}


# Parameter -> (unit, bound, errors per item from (grounded cell, truth cell, residuals)). An item passes when its
# error is below the bound (latency: equal to it, bound 0).
Errors = Callable[[CellCfg, CellCfg, dict], dict[str, float]]
PARAMETERS: dict[str, tuple[str, float, Errors]] = {
    "reprojection RMS": ("px", 0.5, lambda g, t, r: {
        c.name: r[f"camera.{c.name}"]["reprojection_rms_px"] for c in t.cameras}),
    "focal length": ("%", 1.0, lambda g, t, r: {
        c.name: float(max(_relative(_by_name(g.cameras)[c.name].lens.fx, c.lens.fx),
                          _relative(_by_name(g.cameras)[c.name].lens.fy, c.lens.fy))) for c in t.cameras}),
    "head extrinsics position": ("mm", 3.0, lambda g, t, r: {
        c: 1000 * float(np.linalg.norm(np.subtract(_by_name(g.cameras)[c].pose.pos, _by_name(t.cameras)[c].pose.pos)))
        for c in HEADS}),
    "head extrinsics orientation": ("deg", 0.2, lambda g, t, r: {
        c: float(np.degrees(np.linalg.norm(rotation_error(rpy_to_mat(_by_name(g.cameras)[c].pose.rpy),
                                                          rpy_to_mat(_by_name(t.cameras)[c].pose.rpy)))))
        for c in HEADS}),
    "registration": ("mm", 3.0, lambda g, t, r: {
        "robot base": 1000 * float(np.linalg.norm(np.subtract(g.arm("right").base.pos, t.arm("right").base.pos))),
        "conveyor": 1000 * float(np.linalg.norm(np.subtract(g.belt.center, t.belt.center)))}),
    "link-length offsets": ("mm", 0.5, lambda g, t, r: {
        f"link {i + 1}": 1000 * abs(a - b)
        for i, (a, b) in enumerate(zip(g.arm("right").link_length_offsets, t.arm("right").link_length_offsets))}),
    "drive gains": ("%", 10.0, lambda g, t, r: {
        f"joint {i + 1}": float(e) for i, e in enumerate(_relative(g.arm("right").kp, t.arm("right").kp))}),
    "joint damping": ("%", 10.0, lambda g, t, r: {
        f"joint {i + 1}": float(e)
        for i, e in enumerate(_relative(g.arm("right").joint_damping, t.arm("right").joint_damping))}),
    "joint friction": ("%", 10.0, lambda g, t, r: {
        f"joint {i + 1}": float(e)
        for i, e in enumerate(_relative(g.arm("right").joint_frictionloss, t.arm("right").joint_frictionloss))}),
    "latency": ("steps", 0, lambda g, t, r: {
        "right arm": float(abs(g.arm("right").latency_steps - t.arm("right").latency_steps))}),
    "belt speed scale": ("%", 2.0, lambda g, t, r: {"belt": float(_relative(g.belt.speed_scale, t.belt.speed_scale))}),
    "object masses": ("%", 2.0, lambda g, t, r: {
        o.name: float(_relative(_by_name(g.objects + g.novel_objects)[o.name].mass, o.mass))
        for o in t.objects + t.novel_objects}),
    "exposure": ("%", 5.0, lambda g, t, r: {
        c.name: float(_relative(_by_name(g.cameras)[c.name].lens.exposure, c.lens.exposure)) for c in t.cameras}),
    "light intensity": ("%", 5.0, lambda g, t, r: {
        light.name: float(_relative(_by_name(g.lights)[light.name].intensity, light.intensity)) for light in t.lights}),
}


def passes(error: float, bound: float) -> bool:
    return error == 0 if bound == 0 else error < bound


def ground(truth_path: Path, tmp: Path, views: int, fisheye_views: int,
           arm_poses: int) -> tuple[dict, float, float, str | None]:
    """Record a session of these sizes on the twin of `truth_path` and ground it: (errors per parameter and item,
    record s, calibrate s, the calibration's error message if it stopped). Session and grounded world stay in
    `tmp`."""
    session, output = tmp / f"{truth_path.stem}_session.h5", tmp / f"{truth_path.stem}_grounded.yaml"
    t0 = time.perf_counter()
    record_calibration.record(TwinRig(truth_path), session, views=views, fisheye_views=fisheye_views, size=512,
                              arm_poses=arm_poses, seed=0)
    t1 = time.perf_counter()
    code = calibrate.main(["--session", str(session), "--output", str(output)])
    t2 = time.perf_counter()
    if code != 0:
        return {}, t1 - t0, t2 - t1, f"calibrate.py exited {code}"
    world, truth = load_world(output), load_world(truth_path)
    residuals = world.data["provenance"]["residuals"]
    errors = {name: fn(world.cell, truth.cell, residuals) for name, (_, _, fn) in PARAMETERS.items()}
    return errors, t1 - t0, t2 - t1, None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--truths", nargs="*", default=[], help="shipped truth names or world files")
    p.add_argument("--sampled", type=int, default=12, help="sampled truths to add (0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first sampled truth")
    p.add_argument("--check", action="store_true", help="exit 1 unless every parameter passes on every truth")
    # The sessions' sizes: record_calibration.py's defaults and bounds.
    p.add_argument("--views", type=cli.int_in(6, 1000), default=30,
                   help="chessboard views per head camera in each session")
    p.add_argument("--fisheye-views", type=cli.int_in(6, 1000), default=60,
                   help="chessboard views per wrist camera in each session")
    p.add_argument("--arm-poses", type=cli.int_in(10, 10000), default=150,
                   help="arm configurations measured in each session")
    p.add_argument("--output", default="outputs/bench_grounding.json")
    args = p.parse_args()
    if args.sampled < 0 or (args.sampled == 0 and not args.truths):
        p.error("expected --sampled N >= 1 or --truths NAME ...")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = [load_world(name).path for name in args.truths]
        base = load_world("ungrounded").data
        for seed in range(args.seed, args.seed + args.sampled):
            path = tmp / f"truth_{seed:06d}.yaml"
            write_text_atomic(path, truth_text(sample_truth(seed, base)))
            paths.append(path)
        for path in paths:
            errors, record_s, calibrate_s, stopped = ground(Path(path), tmp, args.views, args.fisheye_views,
                                                            args.arm_poses)
            rows.append({"truth": Path(path).stem, "record_s": round(record_s, 1),
                         "calibrate_s": round(calibrate_s, 1), "stopped": stopped, "errors": errors})
            print(rows[-1], file=sys.stderr)
    failed = False
    print(f"| parameter | tolerance | passed (of {len(rows)} truths) | worst error | worst on |")
    print("|---|---|---:|---:|---|")
    for name, (unit, bound, _) in PARAMETERS.items():
        worst, where, passed = 0.0, "", 0
        for r in rows:
            items = r["errors"].get(name)
            if items is None:  # calibration stopped: nothing passes
                continue
            passed += all(passes(e, bound) for e in items.values())
            item, err = max(items.items(), key=lambda kv: kv[1])
            if err >= worst:
                worst, where = err, f"{r['truth']} {item}"
        failed |= passed < len(rows)
        tolerance = "exact" if bound == 0 else f"< {bound:g} {unit}"
        print(f"| {name} | {tolerance} | {passed} | {worst:.3g} {unit} | {where} |")
    stopped = [f"{r['truth']} ({r['stopped']})" for r in rows if r["stopped"]]
    if stopped:
        print(f"\nCalibration stopped on: {', '.join(stopped)}")
    times = [(r["record_s"], r["calibrate_s"]) for r in rows]
    print(f"\nPer truth: record {np.median([t[0] for t in times]):.0f} s, calibrate {np.median([t[1] for t in times]):.0f} "
          f"s (median over {len(rows)})")
    write_json(args.output, {"truths": rows, "tolerances": {n: [u, b] for n, (u, b, _) in PARAMETERS.items()}})
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
