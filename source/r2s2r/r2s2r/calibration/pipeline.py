"""Ground a world from one recorded calibration session: every estimator, in dependency order.

Starting point is the hand-written ungrounded world (datasheet and tape measure). Each stage replaces that
world's guesses with estimates from the session: cameras (intrinsics, distortion, blur, exposure, head extrinsics),
registration of the robot base and conveyor, link-length offsets (given the registered base), actuator gains,
damping, friction and latency (given base and kinematics), belt speed, object masses and, through the calibrated
camera, object colours. The result is a world file
of kind `grounded` whose `provenance` section records the session's hash and every estimator's residuals.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from r2s2r.calibration import CalibrationError
from r2s2r.cell.spec import BoardCfg, CellCfg
from r2s2r.cell.world import World, calibrated_paths, get_path

# Reference renders for blur and exposure come from a simulated rig of the starting world, whose lenses are ideal
# (no blur, unit exposure): the estimators compare the session's images with those to remove their own bias.
EXTRA_PATHS = ("belt.speed_jitter",)


def _replace_arm(cell: CellCfg, **changes) -> CellCfg:
    arms = tuple(dataclasses.replace(a, **changes) if a.name == "right" else a for a in cell.arms)
    return cell.replace(arms=arms)


def _replace_item(items: tuple, name: str, **changes) -> tuple:
    return tuple(dataclasses.replace(x, **changes) if x.name == name else x for x in items)


def ground(session_path: Path, start: World, progress: Callable[[str], None] | None = None) -> tuple[CellCfg, dict]:
    """Estimate every calibrated parameter from the session file. Returns the grounded cell and the residuals."""
    import h5py

    from r2s2r.calibration import actuators, appearance, belt, camera, kinematics, registration
    from r2s2r.cell.fiducials import BOARD_FIXTURE_POS, BOARD_FIXTURE_RPY
    from r2s2r.real.twin import TwinRig

    step = progress or (lambda what: None)
    cell = start.cell
    residuals: dict = {}
    try:
        f = h5py.File(session_path, "r")
    except OSError as e:
        raise CalibrationError(f"{session_path}: cannot open the session file ({e})") from None
    with f:
        for group in ("cameras", "survey", "kinematics", "actuators", "belt", "masses", "appearance"):
            if group not in f:
                raise CalibrationError(f"{session_path}: missing group {group!r}; record it with "
                                       "scripts/record_calibration.py")
        board = BoardCfg(tuple(int(n) for n in f.attrs["board_squares"]), float(f.attrs["board_square_size"]))

        # -- cameras ---------------------------------------------------------------------------------------
        reference_rig = TwinRig(start.path)
        cameras = []
        for cam in cell.cameras:
            step(f"camera {cam.name}")
            if cam.name not in f["cameras"]:
                raise CalibrationError(f"{session_path}: no images of camera {cam.name!r} (cameras/{cam.name})")
            views = f[f"cameras/{cam.name}/views"][()]
            size = views.shape[1]
            intr = camera.calibrate_intrinsics(list(views), board, cam.lens.model)
            # Same seed as the session: the operator's board poses relative to the camera are alike.
            reference = reference_rig.board_views(cam.name, min(len(views), 8), size, size,
                                                  seed=int(f[f"cameras/{cam.name}"].attrs["seed"]))
            blur = camera.estimate_blur(list(views), board, reference)
            pose = cam.pose
            if "fixture" in f[f"cameras/{cam.name}"]:
                fixture = f[f"cameras/{cam.name}/fixture"][()]
                reference_fixture = reference_rig.board_on_fixture(cam.name, size, size)
                exposure = camera.estimate_exposure(fixture, reference_fixture, board)
                pos, rpy = camera.estimate_extrinsics(fixture, board, intr, BOARD_FIXTURE_POS, BOARD_FIXTURE_RPY)
                pose = dataclasses.replace(pose, pos=tuple(map(float, pos)), rpy=tuple(map(float, rpy)))
            else:
                group = f[f"cameras/{cam.name}"]
                seeds = [int(x) for x in group.attrs["exposure_seeds"]]
                reference_views = [reference_rig.board_views(cam.name, 1, size, size, s)[0] for s in seeds]
                exposure = _median_exposure(camera, group["exposure_views"][()], reference_views, board, cam.name)
            lens = dataclasses.replace(cam.lens, fx=intr.fx, fy=intr.fy, cx=intr.cx, cy=intr.cy,
                                       distortion=tuple(intr.distortion), blur_sigma=blur, exposure=exposure)
            cameras.append(dataclasses.replace(cam, lens=lens, pose=pose))
            residuals[f"camera.{cam.name}"] = {"reprojection_rms_px": intr.rms_px, "views_used": intr.views_used,
                                               "views_rejected": intr.views_rejected}
        cell = cell.replace(cameras=tuple(cameras))

        # -- registration ----------------------------------------------------------------------------------
        step("registration")
        base_pos, base_rpy, base_rms = registration.register_base(f["survey/robot_base"][()])
        arm = cell.arm("right")
        cell = _replace_arm(cell, base=dataclasses.replace(arm.base, pos=tuple(map(float, base_pos)),
                                                           rpy=tuple(map(float, base_rpy))))
        center, yaw, belt_rms = registration.register_conveyor(f["survey/conveyor"][()], cell.belt)
        cell = cell.replace(belt=dataclasses.replace(cell.belt, center=tuple(map(float, center)), yaw=float(yaw)))
        residuals["registration"] = {"robot_base_rms_m": base_rms, "conveyor_rms_m": belt_rms}

        # -- kinematics, then actuators on the registered and kinematically calibrated arm ---------------------
        step("kinematics")
        offsets, kin_rms = kinematics.fit_link_offsets(cell, f["kinematics/q"][()], f["kinematics/flange"][()])
        cell = _replace_arm(cell, link_length_offsets=tuple(map(float, offsets)))
        residuals["kinematics"] = {"flange_rms_m": kin_rms}
        step("actuators")
        est = actuators.identify_actuators(cell, f["actuators/targets"][()], f["actuators/log"][()])
        cell = _replace_arm(cell, kp=tuple(est.kp), joint_damping=tuple(est.joint_damping),
                            joint_frictionloss=tuple(est.joint_frictionloss), latency_steps=int(est.latency_steps))
        residuals["actuators"] = {"response_rms_rad": est.rms}

        # -- belt and masses -------------------------------------------------------------------------------
        step("belt and masses")
        runs = [(float(g.attrs["commanded_speed"]), g["times"][()], g["positions"][()]) for g in f["belt"].values()]
        scale, jitter = belt.belt_speed_scale(runs)
        cell = cell.replace(belt=dataclasses.replace(cell.belt, speed_scale=float(scale), speed_jitter=float(jitter)))
        masses = belt.object_masses({name: ds[()] for name, ds in f["masses"].items()})
        objects, novel = cell.objects, cell.novel_objects
        for name, mass in masses.items():
            objects = _replace_item(objects, name, mass=float(mass))
            novel = _replace_item(novel, name, mass=float(mass))
        cell = cell.replace(objects=objects, novel_objects=novel)
        residuals["belt"] = {"speed_scale": scale, "speed_jitter": jitter}

        # -- appearance, last: it renders through the calibrated camera ------------------------------------
        step("object colours and lighting")
        for cam_name, group in f["appearance"].items():
            scenes = list(zip(group["images"][()], json.loads(group.attrs["tracking"])))
            cell = cell.replace(colours=appearance.estimate_colours(scenes, cell, cam_name))
            cell = cell.replace(lighting=appearance.estimate_lighting(scenes, cell, cam_name))
    return cell.validate(), residuals


def _median_exposure(camera, views, reference, board: BoardCfg, name: str) -> float:
    """Exposure from view pairs (session, reference) taken with the same seed, over the pairs that show the board."""
    ratios = []
    for view, ref in zip(views, reference):
        try:
            ratios.append(camera.estimate_exposure(view, ref, board))
        except CalibrationError:  # a finger hides part of the board in one of the two views: skip the pair
            continue
    if not ratios:
        raise CalibrationError(f"camera {name}: exposure: no view pair shows the whole board in both images")
    return float(np.median(ratios))


def grounded_world_data(cell: CellCfg, start: World, session_path: Path, residuals: dict) -> dict:
    """The grounded world file's content: the starting world's file with every calibrated value replaced."""
    data = {"name": "grounded", "kind": "grounded",
            "description": f"Calibrated from {session_path.name}, starting from the {start.name} world.",
            "cell": dict(start.data["cell"])}
    for dotted in calibrated_paths(cell) + list(EXTRA_PATHS):
        node = data["cell"]
        parts = dotted.split(".")
        for part in parts[:-1]:
            node[part] = dict(node.get(part, {}))
            node = node[part]
        value = get_path(cell, dotted)
        node[parts[-1]] = [_plain(v) for v in value] if isinstance(value, tuple) else _plain(value)
    data["provenance"] = {"session_sha256": hashlib.sha256(session_path.read_bytes()).hexdigest(),
                          "start_world": str(start.path.name), "residuals": _plain(residuals)}
    return data


def _plain(x):
    """YAML-friendly Python scalars, rounded to what the estimators resolve."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, bool | int | str) or x is None:
        return x
    if isinstance(x, np.integer):
        return int(x)
    return float(f"{float(x):.6g}")
