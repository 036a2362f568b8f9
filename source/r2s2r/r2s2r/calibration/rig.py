"""A simulated calibration rig: the cell of a world file, with what real instruments add (tracker noise, encoder
quantisation, scale noise, sensor noise in the images).

The twin's rig (`r2s2r.real.twin.TwinRig`) is one over the truth; the grounding pipeline renders its reference views
with one over the world it starts from. The world file is always given: this module resolves no truth file, so
calibration never reads the truth through it.
"""

from __future__ import annotations

import os
import zlib

import mujoco
import numpy as np

from r2s2r.cell.fiducials import BOARD_FIXTURE_POSES, conveyor_points, robot_base_points
from r2s2r.cell.mjcf import FLAT_FIELD_PANEL, arm_joint_names
from r2s2r.cell.spec import BoardCfg, CellCfg
from r2s2r.cell.world import load_world
from r2s2r.core import ConfigError
from r2s2r.geometry import mat_to_quat, rpy_to_mat
from r2s2r.sim import CellSim, belt_drive_speed, delayed, lighting_gain

TRACKER_NOISE = 0.0003  # m, per axis (laser tracker)
OBJECT_TRACKER_NOISE = 0.0005  # m, per axis (camera-based object tracker)
ENCODER_RESOLUTION = 2 * np.pi / 2**20  # rad (20-bit absolute encoders)
SCALE_NOISE = 0.0005  # kg
CALIBRATION_BOARD = BoardCfg()
# The lenses the cell's cameras are bought with; the operator frames the board by these (SimRig.board_poses).
_DATASHEET_LENSES = {c.name: c.lens for c in CellCfg().cameras}
# Calibration images are drawn at a multiple of their size and resampled through the lens: a real sensor integrates
# light over each pixel, while a single-sample render magnified by a fisheye's centre shows staircase edges that
# bias corner positions, and through them the focal length. A fisheye magnifies its centre most, so it is drawn at
# the higher factor.
CALIBRATION_SUPERSAMPLE = {"pinhole": 2, "fisheye": 4}
# What corner detection then achieves (RMS 2-D error against the true projection, px at 512 px, at the factors above):
# the noise a camera's reprojection residual is compared with.
CORNER_NOISE_PX = {"pinhole": 0.05, "fisheye": 0.2}
# Blur spreads each edge over more pixels and the corners scatter with it: corner noise grows by about this much per
# pixel of blur sigma at the calibration resolution.
CORNER_NOISE_PER_BLUR_PX = 0.01
# How far from the lens the operator holds the board (m). Near enough for the head cameras' squares to span 25-45 px
# at 512 px, so the pattern survives the blurriest lens of the sampled truths' range; further away, blur merges the
# squares' edges and the detector loses most views.
HEAD_BOARD_DISTANCE = (0.25, 0.45)
WRIST_BOARD_DISTANCE = (0.12, 0.22)
# Where the crew parks each arm (joint angles, rad) for its wrist camera's board views. At home the hand's shadow
# falls on every board held near the wrist camera; here most boards held 0.14-0.3 m away are whole in view, lit by
# the key lamp (face within 66 deg of it) and free of shadow, on either arm. Found by a random search over postures
# near home, scored by the fraction of such boards (reality.yaml, no contact with the cell).
WRIST_CALIBRATION_POSTURE = {"right": (-0.808, -1.243, 2.076, 0.433, 1.463, 2.985, -0.893),
                             "left": (1.584, 0.892, -1.179, 0.781, 2.779, 3.711, -1.615)}
# The board's face is turned toward each shadow-casting lamp by at least this cosine: a face lit at grazing
# incidence shows the pattern at a fraction of its contrast.
BOARD_LIGHT_COSINE = 0.4
# Largest tilt (rad, about each in-plane axis) of the calibration board away from facing the camera.
BOARD_TILT = 0.45
# The geom groups MuJoCo's renderer draws (markers in the other groups neither hide the board nor shade it).
_RENDERED_GROUPS = mujoco.MjvOption().geomgroup.astype(np.uint8)
TURNED = np.diag([1.0, -1.0, -1.0])  # the board turned around on its stand: half a turn about its x axis
# The flat-field panel's distance from the lens (m): against it, yet beyond the renderer's near plane (1.5 cm).
FLAT_FIELD_DISTANCE = 0.03


def corner_noise(model: str, blur_px: float) -> float:
    """RMS 2-D corner error (px) of a `model` lens whose blur sigma is `blur_px` at the calibration resolution."""
    return float(np.hypot(CORNER_NOISE_PX[model], CORNER_NOISE_PER_BLUR_PX * blur_px))


class SimRig:
    """What a calibration session asks of a cell (`r2s2r.real.interface.CalibrationRig`), answered by the simulated
    cell of the world file at `path` with the chessboard (parked under the floor when unused)."""

    def __init__(self, path: str | os.PathLike):
        self.cell = load_world(path).cell.replace(calibration_board=CALIBRATION_BOARD)
        self.sim = CellSim(self.cell)
        self.model, self.physics, self.index = self.sim.model, self.sim.physics, self.sim.index
        self.physics_hz = 1.0 / self.model.opt.timestep
        self.board_mocap = self.model.body("calibration_board").mocapid[0]
        self.panel_mocap = self.model.body(FLAT_FIELD_PANEL).mocapid[0]
        self.sim.home()

    def _renderer(self, camera: str, width: int, height: int):
        return self.sim.renderer("mujoco_gl", [camera], width, height, depth=False,
                                 supersample=CALIBRATION_SUPERSAMPLE[self._lens(camera).model])

    def _lens(self, camera: str):
        return next(c.lens for c in self.cell.cameras if c.name == camera)

    # -- cameras ---------------------------------------------------------------------------------------------
    def board_poses(self, camera: str, count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Where the operator holds the board for `count` views: (position, rotation) in the camera's frame.

        Poses are drawn from `seed` and kept when the operator, watching the live image, sees the whole pattern
        (every outer corner inside the image of the camera's datasheet lens and not hidden by anything) evenly lit
        (`_board_evenly_lit`); a wrist camera's arm is in its calibration posture. The lens
        is the datasheet's, not this world's, so every world (the recorded cell and the reference renders alike)
        keeps the same poses for a seed, whatever its focal lengths; the 10 % margin the test leaves at the image
        border holds the pattern in view through a real lens a few per cent off the datasheet."""
        rng = np.random.default_rng(seed)
        d, cam_pos, cam_rot = self._camera_posed(camera)
        near = camera.endswith("_wrist")
        lens = _DATASHEET_LENSES.get(camera, self._lens(camera))
        poses = []
        for _attempt in range(200 * count):
            if len(poses) == count:
                break
            dist = rng.uniform(*(WRIST_BOARD_DISTANCE if near else HEAD_BOARD_DISTANCE))
            # Where the operator aims the board centre, as a viewing angle from the optical axis.
            max_angle = 0.9 if lens.model == "fisheye" else 0.35
            angle, azimuth = rng.uniform(0, max_angle), rng.uniform(-np.pi, np.pi)
            ray = np.array([np.sin(angle) * np.cos(azimuth), np.sin(angle) * np.sin(azimuth), -np.cos(angle)])
            tilt = rng.uniform(-BOARD_TILT, BOARD_TILT, 2)
            # Board face toward the camera (board z = camera +z), then tilted and turned by the operator.
            pose = (ray * dist, rpy_to_mat((tilt[0], tilt[1], rng.uniform(-0.3, 0.3))))
            self._place_board(d, cam_pos, cam_rot, pose)
            if self._board_fully_visible(d, camera, lens) and self._board_evenly_lit(d):
                poses.append(pose)
        self.sim.home()
        if len(poses) < count:
            raise RuntimeError(f"{camera}: found only {len(poses)} of {count} board poses with the whole board in view")
        return poses

    def board_views(self, camera: str, count: int, width: int, height: int, seed: int) -> list[np.ndarray]:
        # Board poses and sensor noise draw from separate streams, so the same seed gives the same poses in any
        # world with or without noise (a reference render then shows the board where the session saw it).
        poses = self.board_poses(camera, count, seed)
        noise_rng = np.random.default_rng((seed, 1))
        d, cam_pos, cam_rot = self._camera_posed(camera)
        images = []
        with self._renderer(camera, width, height) as renderer:
            for pose in poses:
                self._place_board(d, cam_pos, cam_rot, pose)
                images.append(renderer.render(self.physics, rng=noise_rng)[camera]["rgb"][0])
        self.sim.home()
        return images

    def _camera_posed(self, camera: str) -> tuple[mujoco.MjData, np.ndarray, np.ndarray]:
        """The cell at home with the arm that carries `camera` (if any) in its calibration posture, and `camera`'s
        position and orientation there (copies)."""
        d = self.sim.home()
        mount = next(c.mount for c in self.cell.cameras if c.name == camera)
        if mount != "world":
            side = mount.removesuffix("_wrist")
            for name, q in zip(arm_joint_names(side), WRIST_CALIBRATION_POSTURE[side]):
                d.qpos[self.model.joint(name).qposadr[0]] = q
            mujoco.mj_forward(self.model, d)
        cam = self.model.camera(camera).id
        return d, d.cam_xpos[cam].copy(), d.cam_xmat[cam].reshape(3, 3).copy()

    def _place_board(self, d: mujoco.MjData, cam_pos: np.ndarray, cam_rot: np.ndarray, pose) -> None:
        offset, rot = pose
        d.mocap_pos[self.board_mocap] = cam_pos + cam_rot @ offset
        d.mocap_quat[self.board_mocap] = mat_to_quat(cam_rot @ rot)
        mujoco.mj_forward(self.model, d)

    def _board_fully_visible(self, d: mujoco.MjData, camera: str, lens) -> bool:
        """Every outer corner of the board's pattern is inside the image and not hidden behind anything."""
        m = self.model
        cam = m.camera(camera).id
        cam_pos, cam_rot = d.cam_xpos[cam], d.cam_xmat[cam].reshape(3, 3)
        board_body = m.body("calibration_board").id
        body_pos, body_rot = d.xpos[board_body], d.xmat[board_body].reshape(3, 3)
        hx, hy = (np.array(CALIBRATION_BOARD.squares) / 2) * CALIBRATION_BOARD.square_size
        for sx, sy in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
            point = body_pos + body_rot @ np.array([sx * hx, sy * hy, 0.0005])
            local = cam_rot.T @ (point - cam_pos)
            if local[2] >= 0:
                return False
            theta = np.arccos(np.clip(-local[2] / np.linalg.norm(local), -1, 1))
            u, v = local[0] / -local[2], local[1] / -local[2]
            if lens.model == "fisheye":
                inside = theta * max(lens.fx, lens.fy) < 0.45 and theta < 1.4
            else:
                inside = abs(u) * lens.fx < 0.45 and abs(v) * lens.fy < 0.45
            if not inside:
                return False
            # Cast from the board toward the lens: anything hit before it hides the corner.
            if self._blocked(d, point, cam_pos, board_body):
                return False
        return True

    def _board_evenly_lit(self, d: mujoco.MjData) -> bool:
        """The board's face is turned toward the lamps and no shadow edge crosses it: the operator moves it out of
        the shadow of the hand or the arm.

        A shadow's edge across the squares is an edge the chessboard does not have; where it runs along a grid
        line it pulls the line with it (wrist views with the hand's shadow on the board had corners off by up to
        4 px). Only the shadow-casting lamps count, and their placement is the cell's design, the same in every
        world, so the poses kept for a seed stay the same whatever the lamps' calibrated brightness."""
        body = self.model.body("calibration_board").id
        pos, rot = d.xpos[body], d.xmat[body].reshape(3, 3)
        # Points every half square over the pattern and one square of margin around it.
        half = (np.array(CALIBRATION_BOARD.squares) / 2 + 1) * CALIBRATION_BOARD.square_size
        step = CALIBRATION_BOARD.square_size / 2
        points = [pos + rot @ np.array([x, y, 0.0005]) for x in np.arange(-half[0], half[0] + step / 2, step)
                  for y in np.arange(-half[1], half[1] + step / 2, step)]
        for light in (light for light in self.cell.lights if light.casts_shadow):
            toward = -np.asarray(light.direction) if light.directional else np.asarray(light.pos) - pos
            if rot[:, 2] @ toward < BOARD_LIGHT_COSINE * np.linalg.norm(toward):
                return False
            shaded = set()
            for point in points:
                source = point - 10.0 * np.asarray(light.direction) if light.directional else np.asarray(light.pos)
                shaded.add(self._blocked(d, point, source, body))
                if len(shaded) == 2:  # some points lit and some not
                    return False
        return True

    def _blocked(self, d: mujoco.MjData, start: np.ndarray, end: np.ndarray, exclude_body: int) -> bool:
        """Whether a rendered geom (other than `exclude_body`'s) lies on the segment from `start` to `end`."""
        ray = end - start
        length = float(np.linalg.norm(ray))
        geomid = np.zeros(1, dtype=np.int32)
        dist = mujoco.mj_ray(self.model, d, start, ray / length, _RENDERED_GROUPS, 1, exclude_body, geomid)
        return bool(geomid[0] >= 0 and dist < length - 0.001)

    def board_on_fixture(self, camera: str, width: int, height: int, lamps: dict[str, float] | None = None,
                         back: bool = False) -> np.ndarray:
        names = [light.name for light in self.cell.lights]
        unknown = sorted(set(lamps or ()) - set(names))
        if unknown:
            raise ConfigError(f"lamps = {unknown!r}: expected names of the cell's lamps ({', '.join(names)})")
        # Each lighting has its own sensor noise (a lamp-alone and a dark image do not share it); the same call
        # always draws the same.
        noise = zlib.crc32(repr((back, sorted(lamps.items()) if lamps is not None else None)).encode())
        images = []
        self.sim.set_lights(levels=lamps)
        with self._renderer(camera, width, height) as renderer:
            for pos, rpy in BOARD_FIXTURE_POSES:
                d = self.sim.home()
                d.mocap_pos[self.board_mocap] = pos
                d.mocap_quat[self.board_mocap] = mat_to_quat(rpy_to_mat(rpy) @ (TURNED if back else np.eye(3)))
                mujoco.mj_forward(self.model, d)
                rng = np.random.default_rng((noise, len(images)))
                images.append(renderer.render(self.physics, rng=rng)[camera]["rgb"][0])
        self.sim.set_lights()
        self.sim.home()
        return np.stack(images)

    def flat_field(self, camera: str, width: int, height: int) -> np.ndarray:
        d, cam_pos, cam_rot = self._camera_posed(camera)
        # Square to the optical axis (the camera looks along its -z), just beyond the renderer's near plane.
        d.mocap_pos[self.panel_mocap] = cam_pos - cam_rot[:, 2] * FLAT_FIELD_DISTANCE
        d.mocap_quat[self.panel_mocap] = mat_to_quat(cam_rot)
        mujoco.mj_forward(self.model, d)
        self.sim.set_lights(0.0)
        with self._renderer(camera, width, height) as renderer:
            rng = np.random.default_rng(zlib.crc32(camera.encode()))
            image = renderer.render(self.physics, rng=rng)[camera]["rgb"][0]
        self.sim.set_lights()
        self.sim.home()
        return image

    def scene_images(self, camera: str, count: int, width: int, height: int,
                     seed: int) -> list[tuple[np.ndarray, dict]]:
        # Scenes are taken on different occasions: the lighting varies between them as it does between trials
        # (drawn from its own stream, so the scenes' poses are the same whatever the lighting).
        rng, light_rng = np.random.default_rng(seed), np.random.default_rng((seed, 2))
        m, cell, belt = self.model, self.cell, self.cell.belt
        colours = sorted(cell.colours)
        out = []
        with self._renderer(camera, width, height) as renderer:
            for i in range(count):
                d = self.sim.home()
                self.sim.vary_lights(light_rng, gain=lighting_gain(cell.lighting, light_rng))
                obj = cell.objects[i % len(cell.objects)]
                colour = colours[i % len(colours)]
                self.sim.paint_objects(obj, cell.colours[colour])
                _, _, adr, _ = self.sim.object_address(obj)
                pos = np.array(belt.center) + rpy_to_mat((0, 0, belt.yaw)) @ np.array(
                    [rng.uniform(0.0, 0.3), rng.uniform(-0.05, 0.05), obj.half_height + 0.001])
                d.qpos[adr:adr + 3] = pos
                mujoco.mj_forward(m, d)
                image = renderer.render(self.physics, rng=rng)[camera]["rgb"][0]
                tracked = pos + rng.normal(0, OBJECT_TRACKER_NOISE, 3)
                out.append((image, {"object": obj.name, "colour": colour, "object_pos": tracked,
                                    "object_quat": d.qpos[adr + 3:adr + 7].copy()}))
        self.sim.paint_objects()
        self.sim.set_lights()
        self.sim.home()
        return out

    # -- geometry --------------------------------------------------------------------------------------------
    def survey(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(11)
        arm = self.cell.arm("right")
        belt = self.cell.belt
        base = np.asarray(arm.base.pos) + robot_base_points() @ rpy_to_mat(arm.base.rpy).T
        conveyor = np.asarray(belt.center) + conveyor_points(belt) @ rpy_to_mat((0, 0, belt.yaw)).T
        return {name: pts + rng.normal(0, TRACKER_NOISE, pts.shape)
                for name, pts in (("robot_base", base), ("conveyor", conveyor))}

    def flange_positions(self, joint_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = np.atleast_2d(np.asarray(joint_positions, dtype=float))
        if q.shape[1] != 7:
            raise ConfigError(f"joint_positions has shape {q.shape}: expected (N, 7)")
        rng = np.random.default_rng(12)
        d = self.sim.home()
        site = self.model.site("right_flange").id
        readings, positions = [], []
        for row in q:
            d.qpos[self.index.arm_qadr] = row
            mujoco.mj_kinematics(self.model, d)
            readings.append(np.round(row / ENCODER_RESOLUTION) * ENCODER_RESOLUTION)
            positions.append(d.site_xpos[site] + rng.normal(0, TRACKER_NOISE, 3))
        self.sim.home()
        return np.array(readings), np.array(positions)

    # -- dynamics --------------------------------------------------------------------------------------------
    def joint_response(self, targets: np.ndarray) -> np.ndarray:
        targets = np.asarray(targets, dtype=float)
        if targets.ndim != 2 or targets.shape[1] != 7:
            raise ConfigError(f"targets has shape {targets.shape}: expected (T, 7) joint targets")
        m = self.model
        ix = self.index
        qpos, ctrl = m.key_qpos[0].copy(), m.key_ctrl[0].copy()
        qpos[ix.arm_qadr] = targets[0]
        ctrl[ix.arm_act] = targets[0]
        self.physics.reset(qpos, np.zeros(m.nv), ctrl)
        d = self.physics.host_data(0)
        log = np.empty_like(targets)
        for k, row in enumerate(delayed(targets, self.sim.latency)):
            d.ctrl[ix.arm_act] = row
            mujoco.mj_step(m, d)
            log[k] = d.qpos[ix.arm_qadr]
        self.sim.home()
        return np.round(log / ENCODER_RESOLUTION) * ENCODER_RESOLUTION

    def track_object(self, commanded_speed: float, seconds: float) -> tuple[np.ndarray, np.ndarray]:
        if commanded_speed < 0:
            raise ConfigError(f"commanded_speed = {commanded_speed!r}: expected >= 0 m/s")
        m, belt = self.model, self.cell.belt
        rng = np.random.default_rng(13)
        obj = self.cell.objects[0]
        qpos, qvel, ctrl = m.key_qpos[0].copy(), np.zeros(m.nv), m.key_ctrl[0].copy()
        body, _, adr, dadr = self.sim.object_address(obj)
        start = np.array(belt.center) + rpy_to_mat((0, 0, belt.yaw)) @ np.array([-0.7, 0.0, obj.half_height + 0.001])
        qpos[adr:adr + 3] = start
        speed = belt_drive_speed(belt, commanded_speed, None)
        belt_act = self.index.belt_act
        qvel[self.index.belt_dof] = qvel[dadr] = speed
        ctrl[belt_act] = speed
        self.physics.reset(qpos, qvel, ctrl)
        d = self.physics.host_data(0)
        period = int(round(0.02 * self.physics_hz))  # tracker at 50 Hz; the belt's jitter redrawn as in the task
        times, positions = [], []
        for k in range(int(seconds * self.physics_hz / period)):
            d.ctrl[belt_act] = belt_drive_speed(belt, commanded_speed, rng)
            self.physics.step(period)
            times.append(d.time)
            positions.append(d.xpos[body] + rng.normal(0, OBJECT_TRACKER_NOISE, 3))
        self.sim.home()
        return np.array(times), np.array(positions)

    def weigh(self, object_name: str, readings: int) -> np.ndarray:
        objects = {o.name: o for o in self.cell.objects + self.cell.novel_objects}
        if object_name not in objects:
            raise ConfigError(f"object = {object_name!r}: expected one of {', '.join(objects)}")
        rng = np.random.default_rng(zlib.crc32(object_name.encode()))
        return objects[object_name].mass + rng.normal(0, SCALE_NOISE, readings)
