"""Calibration accuracy against the reality twin's truth files, at the sizes a calibration session uses: 512 x 512
chessboard views (head cameras rendered 2x supersampled, wrist fisheyes 4x, i.e. from 2048 x 2048 sources).

cameras   The camera estimators on their own (as tests/calibration/test_camera_calibration.py, which pins three of
          these cases at fewer views): intrinsics from 30 views per head camera and 60 per wrist fisheye, head
          extrinsics from the board on its fixture, blur against 8 ungrounded reference renders, exposure against the
          same scene with an ideal lens. All four cameras of reality.yaml, head_left and right_wrist of
          reality_alt.yaml. Targets: principal point within 0.01, focal length within 1 %, reprojection RMS below
          0.5 px, the fisheye mapping closer to the truth than the datasheet's, extrinsics within 5 mm and 10 mrad,
          blur within 25 % (or 0.15 px), exposure within 5 %.
pipeline  A whole session recorded with record_calibration.py's defaults and grounded by calibrate.py (as
          tests/calibration/test_grounding_pipeline.py, which pins one small session), per truth file: the study's
          recovery targets (every camera within 1 % focal length and 0.5 px RMS, robot base and conveyor within 3 mm,
          drive gains within 10 %, latency exact, belt speed within 2 %) and the parameter axes on which the
          grounded world is closer to the truth than the ungrounded one.

Usage: python benchmarks/bench_calibration.py [--parts cameras pipeline] [--output outputs/bench_calibration.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from _common import write_json  # noqa: E402
from r2s2r.calibration.camera import (  # noqa: E402
    calibrate_intrinsics,
    estimate_blur,
    estimate_exposure,
    estimate_extrinsics,
    find_corners,
)
from r2s2r.calibration.report import distorted_angle, parameter_errors  # noqa: E402
from r2s2r.calibration.rig import CALIBRATION_BOARD  # noqa: E402
from r2s2r.cell.fiducials import BOARD_FIXTURE_POS, BOARD_FIXTURE_RPY  # noqa: E402
from r2s2r.cell.world import load_world  # noqa: E402
from r2s2r.core import configs_dir  # noqa: E402
from r2s2r.geometry import rotation_error, rpy_to_mat  # noqa: E402
from r2s2r.real.twin import TwinRig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZE, SEED = 512, 0
HEAD_VIEWS, FISHEYE_VIEWS, BLUR_VIEWS, BLUR_REFERENCES = 30, 60, 20, 8
CASES = [("reality.yaml", "head_left"), ("reality.yaml", "head_right"), ("reality.yaml", "right_wrist"),
         ("reality.yaml", "left_wrist"), ("reality_alt.yaml", "head_left"), ("reality_alt.yaml", "right_wrist")]
TRUTHS = ("reality", "reality_alt")


def _camera(cell, name):
    return next(c for c in cell.cameras if c.name == name)


def camera_case(world: str, cam: str, rigs: dict, tmp: Path) -> dict:
    if world not in rigs:
        path = configs_dir() / "world" / world
        data = yaml.safe_load(path.read_text())
        for c in data["cell"]["cameras"].values():
            c["lens"].update(exposure=1.0, blur_sigma=0.0, noise_std=0.0)
        ideal = tmp / world
        ideal.write_text(yaml.safe_dump(data))
        rigs[world] = {"twin": TwinRig(path), "ideal": TwinRig(ideal), "truth": load_world(path).cell}
    twin, ideal, truth = rigs[world]["twin"], rigs[world]["ideal"], rigs[world]["truth"]
    ungrounded = rigs.setdefault("ungrounded", TwinRig(configs_dir() / "world" / "ungrounded.yaml"))
    lens, pose = _camera(truth, cam).lens, _camera(truth, cam).pose
    head = cam.startswith("head")
    t0 = time.perf_counter()
    views = twin.board_views(cam, HEAD_VIEWS if head else FISHEYE_VIEWS, SIZE, SIZE, seed=SEED)
    est = calibrate_intrinsics(views, CALIBRATION_BOARD, lens.model, camera=cam)
    row = {"world": world, "camera": cam, "views": len(views), "views_used": est.views_used,
           "rms_px": est.rms_px, "fx_err": est.fx / lens.fx - 1, "fy_err": est.fy / lens.fy - 1,
           "cx_err": est.cx - lens.cx, "cy_err": est.cy - lens.cy}
    if head:
        fixture = twin.board_on_fixture(cam, SIZE, SIZE)
        pos, rpy = estimate_extrinsics(fixture, CALIBRATION_BOARD, est, BOARD_FIXTURE_POS, BOARD_FIXTURE_RPY)
        row["extrinsics_mm"] = 1000 * float(np.linalg.norm(pos - np.array(pose.pos)))
        row["extrinsics_mrad"] = 1000 * float(np.linalg.norm(rotation_error(rpy_to_mat(rpy), rpy_to_mat(pose.rpy))))
        gain = estimate_exposure(fixture, ideal.board_on_fixture(cam, SIZE, SIZE), CALIBRATION_BOARD)
    else:
        datasheet = _camera(ungrounded.cell, cam).lens
        row["mapping_rad"] = float(np.abs(distorted_angle(est.distortion) - distorted_angle(lens.distortion)).max())
        row["datasheet_mapping_rad"] = float(np.abs(distorted_angle(datasheet.distortion)
                                                    - distorted_angle(lens.distortion)).max())
        gain = None
        for seed in range(SEED, SEED + 8):  # the first seed whose board is found in both images
            pair = [rig.board_views(cam, 1, SIZE, SIZE, seed=seed)[0] for rig in (twin, ideal)]
            if all(find_corners(img, CALIBRATION_BOARD) is not None for img in pair):
                gain = estimate_exposure(*pair, CALIBRATION_BOARD)
                break
    references = ungrounded.board_views(cam, BLUR_REFERENCES, SIZE, SIZE, seed=SEED)
    blur = estimate_blur(views[:BLUR_VIEWS], CALIBRATION_BOARD, references)
    row.update(blur=blur, blur_truth=lens.blur_sigma, exposure=gain, exposure_truth=lens.exposure,
               wall_s=round(time.perf_counter() - t0, 1))
    row["meets_targets"] = bool(
        abs(row["cx_err"]) < 0.01 and abs(row["cy_err"]) < 0.01 and row["rms_px"] < 0.5
        and max(abs(row["fx_err"]), abs(row["fy_err"])) < 0.01
        and (row["mapping_rad"] < row["datasheet_mapping_rad"] if not head else
             row["extrinsics_mm"] < 5 and row["extrinsics_mrad"] < 10)
        and abs(blur - lens.blur_sigma) < max(0.25 * lens.blur_sigma, 0.15)
        and gain is not None and abs(gain / lens.exposure - 1) < 0.05)
    return row


def pipeline_case(name: str, tmp: Path) -> dict:
    sys.path.insert(0, str(ROOT / "scripts"))
    import calibrate
    import record_calibration

    truth = load_world(name)
    session, output = tmp / f"{name}_session.h5", tmp / f"{name}_grounded.yaml"
    t0 = time.perf_counter()
    record_calibration.record(TwinRig(truth.path), session, views=30, fisheye_views=60, size=512, arm_poses=150,
                              seed=0)
    t1 = time.perf_counter()
    assert calibrate.main(["--session", str(session), "--output", str(output)]) == 0
    t2 = time.perf_counter()
    world = load_world(output)
    t, g = truth.cell, world.cell
    residuals = world.data["provenance"]["residuals"]
    cameras = {c.name: {"rms_px": residuals[f"camera.{c.name}"]["reprojection_rms_px"],
                        "fx_err": _camera(g, c.name).lens.fx / c.lens.fx - 1,
                        "fy_err": _camera(g, c.name).lens.fy / c.lens.fy - 1} for c in t.cameras}
    arm_t, arm_g = t.arm("right"), g.arm("right")
    grounded, ungrounded = parameter_errors(g, t), parameter_errors(load_world("ungrounded").cell, t)
    row = {"truth": name, "record_s": round(t1 - t0, 1), "calibrate_s": round(t2 - t1, 1), "cameras": cameras,
           "base_mm": 1000 * float(np.linalg.norm(np.subtract(arm_g.base.pos, arm_t.base.pos))),
           "belt_mm": 1000 * float(np.linalg.norm(np.subtract(g.belt.center, t.belt.center))),
           "kp_max_err": float(np.max(np.abs(np.array(arm_g.kp) / np.array(arm_t.kp) - 1))),
           "latency": [arm_g.latency_steps, arm_t.latency_steps],
           "belt_speed_err": g.belt.speed_scale / t.belt.speed_scale - 1,
           "axes_closer": sum(grounded[a] < ungrounded[a] for a in ungrounded), "axes": len(ungrounded),
           "axes_not_closer": [a for a in ungrounded if not grounded[a] < ungrounded[a]]}
    row["meets_targets"] = bool(
        all(c["rms_px"] < 0.5 and max(abs(c["fx_err"]), abs(c["fy_err"])) < 0.01 for c in cameras.values())
        and row["base_mm"] < 3 and row["belt_mm"] < 3 and row["kp_max_err"] < 0.10
        and row["latency"][0] == row["latency"][1] and abs(row["belt_speed_err"]) < 0.02)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", default=["cameras", "pipeline"], choices=["cameras", "pipeline"])
    p.add_argument("--output", default="outputs/bench_calibration.json")
    args = p.parse_args()
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "cameras" in args.parts:
            rigs: dict = {}
            result["cameras"] = []
            for world, cam in CASES:
                result["cameras"].append(camera_case(world, cam, rigs, Path(tmp)))
                print(result["cameras"][-1], file=sys.stderr)
        if "pipeline" in args.parts:
            result["pipeline"] = []
            for name in TRUTHS:
                result["pipeline"].append(pipeline_case(name, Path(tmp)))
                print(result["pipeline"][-1], file=sys.stderr)
    if "cameras" in result:
        print("| truth | camera | views used | RMS px | fx / fy error | cx / cy error | fisheye mapping (datasheet) "
              "rad | extrinsics mm / mrad | blur (truth) | exposure (truth) | targets |")
        print("|---|---|---:|---:|---|---|---|---|---|---|---|")
        for r in result["cameras"]:
            mapping = f"{r['mapping_rad']:.4f} ({r['datasheet_mapping_rad']:.4f})" if "mapping_rad" in r else ""
            extr = f"{r['extrinsics_mm']:.2f} / {r['extrinsics_mrad']:.2f}" if "extrinsics_mm" in r else ""
            exposure = f"{r['exposure']:.3f}" if r["exposure"] is not None else "not found"
            print(f"| {r['world'][:-5]} | {r['camera']} | {r['views_used']}/{r['views']} | {r['rms_px']:.3f} | "
                  f"{r['fx_err']:+.2%} / {r['fy_err']:+.2%} | {r['cx_err']:+.4f} / {r['cy_err']:+.4f} | {mapping} | "
                  f"{extr} | {r['blur']:.3f} ({r['blur_truth']}) | {exposure} ({r['exposure_truth']}) | "
                  f"{'met' if r['meets_targets'] else 'MISSED'} |")
    if "pipeline" in result:
        print("\n| truth | record s | calibrate s | worst focal error | worst RMS px | base / conveyor mm | kp worst | "
              "latency | belt speed | axes closer | targets |")
        print("|---|---:|---:|---:|---:|---|---:|---|---:|---|---|")
        for r in result["pipeline"]:
            focal = max(max(abs(c["fx_err"]), abs(c["fy_err"])) for c in r["cameras"].values())
            rms = max(c["rms_px"] for c in r["cameras"].values())
            print(f"| {r['truth']} | {r['record_s']} | {r['calibrate_s']} | {focal:.2%} | {rms:.3f} | "
                  f"{r['base_mm']:.2f} / {r['belt_mm']:.2f} | {r['kp_max_err']:.2%} | {r['latency'][0]} "
                  f"(truth {r['latency'][1]}) | {r['belt_speed_err']:+.2%} | {r['axes_closer']}/{r['axes']} | "
                  f"{'met' if r['meets_targets'] else 'MISSED'} |")
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
