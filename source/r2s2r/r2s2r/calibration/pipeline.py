"""Ground a world from one recorded calibration session: every estimator, in dependency order.

Starting point is the hand-written ungrounded world (datasheet and tape measure). Each stage replaces that
world's guesses with estimates from the session: registration of the robot base and conveyor, link-length offsets
(given the registered base), actuator gains, damping, friction and latency (given base and kinematics), belt speed,
object masses, cameras (intrinsics, distortion, blur, exposure, head extrinsics), the lamps and, through the
calibrated camera, object colours and lighting. The result is a world file of kind `grounded` whose `provenance`
section records the session's hash, every estimator's residuals and each self-check's residual and bound.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from r2s2r.calibration import CalibrationError
from r2s2r.cell.fiducials import BOARD_FIXTURE_POSES
from r2s2r.cell.spec import BoardCfg, CellCfg
from r2s2r.cell.world import World, calibrated_paths, get_path

# Reference renders for blur, exposure and the lamps come from a simulated rig of the starting world, whose lenses are
# ideal (no blur, unit exposure): the estimators compare the session's images with those to remove their own bias.
EXTRA_PATHS = ("belt.speed_jitter",)


def _replace_arm(cell: CellCfg, **changes) -> CellCfg:
    arms = tuple(dataclasses.replace(a, **changes) if a.name == "right" else a for a in cell.arms)
    return cell.replace(arms=arms)


def _replace_item(items: tuple, name: str, **changes) -> tuple:
    return tuple(dataclasses.replace(x, **changes) if x.name == name else x for x in items)


SESSION_GROUPS = ("cameras", "survey", "kinematics", "actuators", "belt", "masses", "lamps", "appearance")
SURVEY_PARTS = ("robot_base", "conveyor")
ARM_DOF = 7


class _Session:
    """Reads and checks one session file: every dataset and attr `ground` uses, before any computation. Errors
    name the file, the dataset or attr path, the value found and what was expected."""

    def __init__(self, path: Path, f):
        self.path, self.f = path, f

    def fail(self, what: str, found: str, expected: str):
        raise CalibrationError(f"{self.path}: {what} {found}: expected {expected}")

    def group(self, name: str):
        if name not in self.f:
            raise CalibrationError(f"{self.path}: missing group {name!r}; record it with scripts/record_calibration.py")
        item = self.f[name]
        if not hasattr(item, "keys"):
            self.fail(f"{name!r}", "is a dataset", "a group")
        return item

    def attr(self, obj: str, key: str):
        attrs = self.f[obj].attrs if obj else self.f.attrs
        where = f"attr '{obj}/{key}'" if obj else f"attr {key!r}"
        if key not in attrs:
            raise CalibrationError(f"{self.path}: {where} is missing; record the session with "
                                   f"scripts/record_calibration.py")
        value = attrs[key]
        return value.decode() if isinstance(value, bytes) else value

    def array(self, name: str, shape: tuple, kind: str = "float", min_rows: int = 1, finite: bool = True):
        """Dataset `name` with `shape` (None or a letter: any length; the first axis holds N >= `min_rows`)."""
        if name not in self.f:
            raise CalibrationError(f"{self.path}: dataset {name!r} is missing; record the session with "
                                   f"scripts/record_calibration.py")
        ds = self.f[name]
        if not hasattr(ds, "dtype"):
            self.fail(f"{name!r}", "is a group", "a dataset")
        shown = "(" + ", ".join("N" if n is None else str(n) for n in shape) + (",)" if len(shape) == 1 else ")")
        shape = tuple(None if isinstance(n, str) else n for n in shape)
        ok_kind = ds.dtype == np.uint8 if kind == "uint8" else ds.dtype.kind in "iuf"
        ok_shape = len(ds.shape) == len(shape) and all(n is None or n == m for n, m in zip(shape, ds.shape))
        rows = ds.shape[0] if ds.shape else 0
        if not ok_kind or not ok_shape or rows < min_rows:
            self.fail(f"dataset {name!r}", f"has shape {ds.shape} ({ds.dtype})",
                      f"{shown} {'uint8 images' if kind == 'uint8' else 'numbers'}, N >= {min_rows}")
        value = ds[()]
        if finite and kind != "uint8" and not np.isfinite(value).all():
            self.fail(f"dataset {name!r}", "holds NaN or infinite values", "finite numbers")
        return value

    def number(self, obj: str, key: str, integer: bool = False, low: float = -np.inf, high: float = np.inf):
        value = self.attr(obj, key)
        where = f"attr '{obj}/{key}'" if obj else f"attr {key!r}"
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        ok = ok and np.isfinite(value) and (not integer or float(value).is_integer()) and low <= value <= high
        if not ok:
            self.fail(where, f"= {value!r}", f"{'an integer' if integer else 'a finite number'} in [{low}, {high}]")
        return int(value) if integer else float(value)


def read_session(session_path: Path, cell: CellCfg) -> dict:
    """Every dataset and attr of a session file that `ground` uses, checked (shapes, dtypes, finite values, board
    attrs) and read into memory. Raises `CalibrationError` naming the file, the path in it, the value and what was
    expected; a file HDF5 cannot read (truncated, corrupt) is named with what HDF5 reported."""
    import h5py

    try:
        f = h5py.File(session_path, "r")
    except Exception as e:
        raise CalibrationError(f"{session_path}: cannot open the session file ({' '.join(str(e).split())}); "
                               f"expected an intact HDF5 file recorded by scripts/record_calibration.py") from None
    with f:
        s = _Session(session_path, f)
        try:
            return _read_session(s, cell)
        except CalibrationError:
            raise
        except Exception as e:  # h5py reports corrupt bytes as OSError, KeyError, RuntimeError, ...
            raise CalibrationError(f"{session_path}: cannot read the session file ({' '.join(str(e).split())}); "
                                   f"expected an intact HDF5 file (truncated or corrupt?)") from None


def _read_session(s: _Session, cell: CellCfg) -> dict:
    from r2s2r.calibration.belt import MIN_SAMPLES

    for group in SESSION_GROUPS:
        s.group(group)
    squares = s.attr("", "board_squares")
    values = np.asarray(squares).ravel()
    if (np.asarray(squares).shape != (2,) or values.dtype.kind not in "iuf" or not np.isfinite(values).all()
            or not all(float(v).is_integer() and 3 <= v <= 100 for v in values)):
        s.fail("attr 'board_squares'", f"= {squares!r}", "two integers (columns, rows of squares), each 3 to 100")
    board = BoardCfg(tuple(int(n) for n in values), s.number("", "board_square_size", low=1e-4, high=1.0))
    out: dict = {"board": board, "cameras": {}}
    for cam in cell.cameras:
        base = f"cameras/{cam.name}"
        if cam.name not in s.f["cameras"]:
            raise CalibrationError(f"{s.path}: no images of camera {cam.name!r} ({base})")
        views = s.array(f"{base}/views", (None, "S", "S", 3), "uint8", min_rows=1)
        size = views.shape[1]
        if views.shape[2] != size:
            s.fail(f"dataset '{base}/views'", f"has shape {views.shape}", "square images (N, S, S, 3)")
        entry = {"views": views, "seed": s.number(base, "seed", integer=True, low=0, high=2**32 - 1),
                 "flat_field": s.array(f"{base}/flat_field", (size, size, 3), "uint8")}
        if "fixture" in s.f[base]:
            entry["fixture"] = s.array(f"{base}/fixture", (len(BOARD_FIXTURE_POSES), size, size, 3), "uint8")
        out["cameras"][cam.name] = entry
    lamp_camera = s.attr("lamps", "camera")
    if lamp_camera not in out["cameras"]:
        s.fail("attr 'lamps/camera'", f"= {lamp_camera!r}", f"one of the session's cameras ({', '.join(out['cameras'])})")
    size = out["cameras"][lamp_camera]["views"].shape[1]
    out["lamps"] = {"camera": lamp_camera, "images": {
        name: s.array(f"lamps/{name}", (len(BOARD_FIXTURE_POSES), size, size, 3), "uint8")
        for name in ["dark"] + [light.name for light in cell.lights]}}
    out["survey"] = {part: s.array(f"survey/{part}", (None, 3), min_rows=3) for part in SURVEY_PARTS}
    q = s.array("kinematics/q", (None, ARM_DOF), min_rows=5)
    out["kinematics"] = (q, s.array("kinematics/flange", (len(q), 3), min_rows=5))
    targets = s.array("actuators/targets", (None, ARM_DOF), min_rows=2)
    out["actuators"] = (targets, s.array("actuators/log", (len(targets), ARM_DOF), min_rows=2))
    out["belt"] = []
    if not len(s.f["belt"]):
        s.fail("group 'belt'", "holds no runs", "at least one run (belt/run_<k>)")
    for name in s.f["belt"]:
        base = f"belt/{name}"
        times = s.array(f"{base}/times", (None,), min_rows=MIN_SAMPLES)
        positions = s.array(f"{base}/positions", (len(times), 3), min_rows=MIN_SAMPLES)
        out["belt"].append((s.number(base, "commanded_speed", low=1e-6, high=10.0), times, positions))
    out["masses"] = {}
    for name in s.f["masses"]:
        readings = s.array(f"masses/{name}", (None,), min_rows=1)
        if (readings <= 0).any():
            s.fail(f"dataset 'masses/{name}'", f"holds {readings.tolist()!r}", "positive scale readings (kg)")
        out["masses"][name] = readings
    out["appearance"] = {}
    for cam_name in s.f["appearance"]:
        base = f"appearance/{cam_name}"
        images = s.array(f"{base}/images", (None, "H", "W", 3), "uint8")
        raw = s.attr(base, "tracking")
        try:
            tracking = json.loads(raw)
        except (TypeError, ValueError):
            tracking = None
        if not isinstance(tracking, list) or len(tracking) != len(images) or not all(
                isinstance(t, dict) for t in tracking):
            s.fail(f"attr '{base}/tracking'", f"= {str(raw)[:60]!r}",
                   f"a JSON list of {len(images)} objects, one tracker reading per image")
        out["appearance"][cam_name] = list(zip(images, tracking))
    return out


def ground(session_path: Path, start: World, progress: Callable[[str], None] | None = None) -> tuple[CellCfg, dict]:
    """Estimate every calibrated parameter from the session file. Returns the grounded cell and the residuals.

    The session is read and checked whole first (`read_session`); an estimator that fails names the file and the
    part of the session it worked on. Each fit's residual is checked against the floor its instruments' noise
    leaves (`r2s2r.calibration.checks`): one above its bound stops grounding; the residuals and bounds are returned
    under `self_checks`. The geometry and dynamics estimators run first, being quick: a bad recording there stops
    grounding before the cameras' minutes of work. The cell is checked as any world is, where its file is read
    (`r2s2r.cell.world.check_world`): `scripts/calibrate.py` reads `grounded_world_data` back before publishing it."""
    from r2s2r.calibration import actuators, appearance, belt, camera, checks, kinematics, registration
    from r2s2r.calibration.rig import (ENCODER_RESOLUTION, OBJECT_TRACKER_NOISE, SCALE_NOISE, TRACKER_NOISE, SimRig,
                                       corner_noise)
    from r2s2r.render.camera_model import BLUR_REFERENCE_WIDTH

    step = progress or (lambda what: None)
    cell = start.cell
    residuals: dict = {}
    self_checks: dict = {}
    session = read_session(session_path, cell)
    board = session["board"]

    def stage(what: str):
        return _Stage(session_path, what)

    def check(estimator: str, residual: float, floor: float, unit: str) -> None:
        self_checks[estimator] = checks.check_residual(estimator, residual, floor, unit)

    # -- registration ------------------------------------------------------------------------------------------
    step("registration")
    with stage("survey/robot_base"):
        points = session["survey"]["robot_base"]
        base_pos, base_rpy, base_rms = registration.register_base(points)
        check("registration of the robot base", base_rms,
              checks.least_squares_floor(TRACKER_NOISE, len(points), 6, axes=3), "m")
    arm = cell.arm("right")
    cell = _replace_arm(cell, base=dataclasses.replace(arm.base, pos=tuple(map(float, base_pos)),
                                                       rpy=tuple(map(float, base_rpy))))
    with stage("survey/conveyor"):
        points = session["survey"]["conveyor"]
        center, yaw, belt_rms = registration.register_conveyor(points, cell.belt)
        check("registration of the conveyor", belt_rms,
              checks.least_squares_floor(TRACKER_NOISE, len(points), 4, axes=3), "m")
    cell = cell.replace(belt=dataclasses.replace(cell.belt, center=tuple(map(float, center)), yaw=float(yaw)))
    residuals["registration"] = {"robot_base_rms_m": base_rms, "conveyor_rms_m": belt_rms}

    # -- kinematics, then actuators on the registered and kinematically calibrated arm -------------------------
    step("kinematics")
    with stage("kinematics"):
        q, flange = session["kinematics"]
        offsets, kin_rms = kinematics.fit_link_offsets(cell, q, flange)
        # Seven offsets and the three-axis base tilt correction the fit carries.
        check("link-offset fit", kin_rms, checks.least_squares_floor(TRACKER_NOISE, len(q), 10, axes=3), "m")
    cell = _replace_arm(cell, link_length_offsets=tuple(map(float, offsets)))
    residuals["kinematics"] = {"flange_rms_m": kin_rms}
    step("actuators")
    with stage("actuators"):
        est = actuators.identify_actuators(cell, *session["actuators"])
        check("drive fit", est.rms, checks.quantisation_floor(ENCODER_RESOLUTION), "rad")
    cell = _replace_arm(cell, kp=tuple(est.kp), joint_damping=tuple(est.joint_damping),
                        joint_frictionloss=tuple(est.joint_frictionloss), latency_steps=int(est.latency_steps))
    residuals["actuators"] = {"response_rms_rad": est.rms}

    # -- belt and masses ---------------------------------------------------------------------------------------
    step("belt and masses")
    with stage("belt"):
        scale, jitter, tracker_noise = belt.belt_speed_scale(session["belt"])
        # The fit estimates the tracker's noise itself, so its floor is the stated noise.
        check("belt speed fit", tracker_noise, OBJECT_TRACKER_NOISE, "m")
    cell = cell.replace(belt=dataclasses.replace(cell.belt, speed_scale=float(scale), speed_jitter=float(jitter)))
    with stage("masses"):
        readings = session["masses"]
        masses = belt.object_masses(readings)
        deviations = np.concatenate([readings[name] - mass for name, mass in masses.items()])
        if len(deviations) > len(masses):  # one reading per object leaves no residual to judge
            check("mass readings", float(np.sqrt(np.mean(deviations ** 2))),
                  checks.least_squares_floor(SCALE_NOISE, len(deviations), len(masses)), "kg")
    objects, novel = cell.objects, cell.novel_objects
    for name, mass in masses.items():
        objects = _replace_item(objects, name, mass=float(mass))
        novel = _replace_item(novel, name, mass=float(mass))
    cell = cell.replace(objects=objects, novel_objects=novel)
    residuals["belt"] = {"speed_scale": scale, "speed_jitter": jitter, "tracker_noise_m": tracker_noise}

    # -- cameras ---------------------------------------------------------------------------------------------
    reference_rig = SimRig(start.path)
    cameras = []
    for cam in cell.cameras:
        step(f"camera {cam.name}")
        data = session["cameras"][cam.name]
        views = data["views"]
        size = views.shape[1]
        with stage(f"cameras/{cam.name}/views"):
            intr = camera.calibrate_intrinsics(list(views), board, cam.lens.model, camera=cam.name)
            # Same seed as the session: the operator's board poses relative to the camera are alike. The blur comes
            # before the intrinsics' self-check, whose corner noise grows with it.
            reference = reference_rig.board_views(cam.name, min(len(views), 8), size, size, seed=data["seed"])
            blur = camera.estimate_blur(list(views), board, reference, camera=cam.name)
            # Per view: six pose parameters; per camera: fx, fy, cx, cy and, for a fisheye, k1-k3.
            unknowns = 6 * intr.views_used + (7 if cam.lens.model == "fisheye" else 4)
            corners = intr.views_used * len(board.corner_points())
            noise = corner_noise(cam.lens.model, blur * size / BLUR_REFERENCE_WIDTH)
            check(f"camera {cam.name} intrinsics", intr.rms_px,
                  checks.least_squares_floor(noise / np.sqrt(2), corners, unknowns, axes=2), "px")
        with stage(f"cameras/{cam.name}/flat_field"):
            exposure = camera.estimate_exposure(data["flat_field"], reference_rig.flat_field(cam.name, size, size),
                                                camera=cam.name)
        pose = cam.pose
        if "fixture" in data:
            with stage(f"cameras/{cam.name}/fixture"):
                pos, rpy = camera.estimate_extrinsics(data["fixture"], board, intr, BOARD_FIXTURE_POSES,
                                                      camera=cam.name)
            pose = dataclasses.replace(pose, pos=tuple(map(float, pos)), rpy=tuple(map(float, rpy)))
        lens = dataclasses.replace(cam.lens, fx=intr.fx, fy=intr.fy, cx=intr.cx, cy=intr.cy,
                                   distortion=tuple(intr.distortion), blur_sigma=blur, exposure=exposure)
        cameras.append(dataclasses.replace(cam, lens=lens, pose=pose))
        residuals[f"camera.{cam.name}"] = {"reprojection_rms_px": intr.rms_px, "views_used": intr.views_used,
                                           "views_rejected": intr.views_rejected,
                                           "corners_dropped": intr.corners_dropped}
    cell = cell.replace(cameras=tuple(cameras))

    # -- lamps, through a camera whose exposure is now known -----------------------------------------------------
    step("lamps")
    lamp_camera, lamp_images = session["lamps"]["camera"], session["lamps"]["images"]
    size = lamp_images["dark"].shape[1]
    calibrated, reference = (next(c for c in world.cameras if c.name == lamp_camera) for world in (cell, start.cell))
    # The same card points through each world's camera: the session's as just calibrated, the references' as built.
    pixels, reference_pixels = (camera.card_pixels(c.lens, c.pose.pos, c.pose.rpy, BOARD_FIXTURE_POSES, board, size,
                                                   size) for c in (calibrated, reference))
    lights = []
    for light in cell.lights:
        with stage(f"lamps/{light.name}"):
            references = [reference_rig.board_on_fixture(lamp_camera, size, size, {light.name: level}, back=True)
                          for level in (0.0, 0.5, 1.0)]
            gains = camera.estimate_lamp(lamp_images[light.name], lamp_images["dark"], references, pixels,
                                         reference_pixels, calibrated.lens.exposure, camera=lamp_camera)
        # The reference lamp's diffuse colour times the gains; the brightest channel is the intensity (see
        # `r2s2r.cell.spec.LightCfg`).
        diffuse = gains * np.asarray(light.colour) * light.intensity
        intensity = float(diffuse.max())
        lights.append(dataclasses.replace(light, intensity=intensity, colour=tuple(map(float, diffuse / intensity))))
    cell = cell.replace(lights=tuple(lights))

    # -- appearance, last: it renders through the calibrated camera --------------------------------------------
    step("object colours and lighting")
    for cam_name, scenes in session["appearance"].items():
        with stage(f"appearance/{cam_name}"):
            cell = cell.replace(colours=appearance.estimate_colours(scenes, cell, cam_name))
            cell = cell.replace(lighting=appearance.estimate_lighting(scenes, cell, cam_name))
    residuals["self_checks"] = self_checks
    return cell, residuals


class _Stage:
    """Prefixes an estimator's `CalibrationError` with the session file and the part of it the estimator used."""

    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, CalibrationError) and not str(exc).startswith(
                str(self.path)):
            raise CalibrationError(f"{self.path}: {self.what}: {exc}") from None
        return False


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
