"""Calibration accuracy against the reality twin's truth files, at the sizes a calibration session uses: 512 x 512
chessboard views (head cameras rendered 2x supersampled, wrist fisheyes 4x, i.e. from 2048 x 2048 sources).

The camera estimators on their own (as tests/calibration/test_camera_calibration.py, which pins three of these
cases at fewer views): intrinsics from 30 views per head camera and 60 per wrist fisheye, head extrinsics from the
board on its fixture, blur against 8 ungrounded reference renders, exposure from a flat-field panel against the
ungrounded world's. All four cameras of reality.yaml, head_left and right_wrist of reality_alt.yaml. Targets:
principal point within 0.01, focal length within 1 %, reprojection RMS below 0.5 px, the fisheye mapping closer to
the truth than the datasheet's, extrinsics within 5 mm and 10 mrad, blur within 25 % (or 0.15 px), exposure within
5 %.

Whole sessions, every parameter against its tolerance on shipped and sampled truths: benchmarks/bench_grounding.py.

Usage: python benchmarks/bench_calibration.py [--output outputs/bench_calibration.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from _common import write_json  # noqa: E402
from r2s2r.calibration.camera import (  # noqa: E402
    calibrate_intrinsics,
    estimate_blur,
    estimate_exposure,
    estimate_extrinsics,
)
from r2s2r.calibration.report import distorted_angle  # noqa: E402
from r2s2r.calibration.rig import CALIBRATION_BOARD  # noqa: E402
from r2s2r.cell.fiducials import BOARD_FIXTURE_POSES  # noqa: E402
from r2s2r.cell.world import load_world  # noqa: E402
from r2s2r.core import configs_dir  # noqa: E402
from r2s2r.geometry import rotation_error, rpy_to_mat  # noqa: E402
from r2s2r.real.twin import TwinRig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZE, SEED = 512, 0
HEAD_VIEWS, FISHEYE_VIEWS, BLUR_VIEWS, BLUR_REFERENCES = 30, 60, 20, 8
CASES = [("reality.yaml", "head_left"), ("reality.yaml", "head_right"), ("reality.yaml", "right_wrist"),
         ("reality.yaml", "left_wrist"), ("reality_alt.yaml", "head_left"), ("reality_alt.yaml", "right_wrist")]


def _camera(cell, name):
    return next(c for c in cell.cameras if c.name == name)


def camera_case(world: str, cam: str, rigs: dict) -> dict:
    if world not in rigs:
        path = configs_dir() / "world" / world
        rigs[world] = {"twin": TwinRig(path), "truth": load_world(path).cell}
    twin, truth = rigs[world]["twin"], rigs[world]["truth"]
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
        pos, rpy = estimate_extrinsics(fixture, CALIBRATION_BOARD, est, BOARD_FIXTURE_POSES)
        row["extrinsics_mm"] = 1000 * float(np.linalg.norm(pos - np.array(pose.pos)))
        row["extrinsics_mrad"] = 1000 * float(np.linalg.norm(rotation_error(rpy_to_mat(rpy), rpy_to_mat(pose.rpy))))
    else:
        datasheet = _camera(ungrounded.cell, cam).lens
        row["mapping_rad"] = float(np.abs(distorted_angle(est.distortion) - distorted_angle(lens.distortion)).max())
        row["datasheet_mapping_rad"] = float(np.abs(distorted_angle(datasheet.distortion)
                                                    - distorted_angle(lens.distortion)).max())
    gain = estimate_exposure(twin.flat_field(cam, SIZE, SIZE), ungrounded.flat_field(cam, SIZE, SIZE), camera=cam)
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
        and abs(gain / lens.exposure - 1) < 0.05)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="outputs/bench_calibration.json")
    args = p.parse_args()
    rows, rigs = [], {}
    for world, cam in CASES:
        rows.append(camera_case(world, cam, rigs))
        print(rows[-1], file=sys.stderr)
    print("| truth | camera | views used | RMS px | fx / fy error | cx / cy error | fisheye mapping (datasheet) "
          "rad | extrinsics mm / mrad | blur (truth) | exposure (truth) | targets |")
    print("|---|---|---:|---:|---|---|---|---|---|---|---|")
    for r in rows:
        mapping = f"{r['mapping_rad']:.4f} ({r['datasheet_mapping_rad']:.4f})" if "mapping_rad" in r else ""
        extr = f"{r['extrinsics_mm']:.2f} / {r['extrinsics_mrad']:.2f}" if "extrinsics_mm" in r else ""
        print(f"| {r['world'][:-5]} | {r['camera']} | {r['views_used']}/{r['views']} | {r['rms_px']:.3f} | "
              f"{r['fx_err']:+.2%} / {r['fy_err']:+.2%} | {r['cx_err']:+.4f} / {r['cy_err']:+.4f} | {mapping} | "
              f"{extr} | {r['blur']:.3f} ({r['blur_truth']}) | {r['exposure']:.3f} ({r['exposure_truth']}) | "
              f"{'met' if r['meets_targets'] else 'MISSED'} |")
    result = {"cameras": rows}
    write_json(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
