"""The wrist camera sees what the hand is about to grasp: on the twin's teleoperated demos, the object is in the right
wrist camera's image, not hidden behind the hand or the arm, in every control step of the last second before the
hand closes on it."""

import mujoco
import numpy as np

from r2s2r.control.grasp import HAND_CLOSED
from r2s2r.data import DemoReader
from r2s2r.render.camera_model import CameraModel
from r2s2r.tasks.pick_sort.env import PickSortEnv

CAMERA = "right_wrist"
SIZE = 128
LAST_SECOND = 20  # control steps at 20 Hz


def closure_step(actions: np.ndarray) -> int:
    """The first step whose hand command is more than half-way from open (all zero) to closed."""
    closing = actions[:, 7:] @ HAND_CLOSED / (HAND_CLOSED @ HAND_CLOSED) > 0.5
    return int(np.argmax(closing))


def seen_points(env: PickSortEnv, lens: CameraModel) -> int:
    """How many of the object's centre and six points halfway to its faces project into the image with nothing
    between them and the lens."""
    m, d = env.model, env.physics.host_data(0)
    cam = m.camera(CAMERA).id
    cam_pos, cam_rot = d.cam_xpos[cam], d.cam_xmat[cam].reshape(3, 3)
    body_pos, body_rot = d.xpos[env.obj_body], d.xmat[env.obj_body].reshape(3, 3)
    half = 0.5 * m.geom_rbound[env.obj_geom] / np.sqrt(3)
    points = [body_pos] + [body_pos + body_rot @ (s * half * axis) for axis in np.eye(3) for s in (-1, 1)]
    seen, geom = 0, np.zeros(1, np.int32)
    for p in points:
        in_cv = (cam_rot.T @ (p - cam_pos)) * np.array([1.0, -1.0, -1.0])
        theta = np.arctan2(np.hypot(in_cv[0], in_cv[1]), in_cv[2])
        u, v = lens.project(in_cv[None])[0]
        if theta > lens.max_ray_angle or not (0 <= u < SIZE and 0 <= v < SIZE):
            continue
        ray = p - cam_pos
        mujoco.mj_ray(m, d, cam_pos, ray / np.linalg.norm(ray), None, 1, -1, geom)
        seen += bool(geom[0] >= 0 and m.geom_bodyid[geom[0]] == env.obj_body)
    return seen


def test_the_object_is_in_the_wrist_view_through_the_last_second_before_closure(real_demos):
    env = PickSortEnv(world="reality", cameras=())
    lens = CameraModel(next(c.lens for c in env.cell.cameras if c.name == CAMERA), SIZE, SIZE)
    with DemoReader(real_demos) as reader:
        assert len(reader.names) >= 4
        for name in reader.names:
            attrs, demo = reader.attrs(name), reader.load(name)
            env.reset(seed=attrs["seed"], options={"condition": attrs["condition"]})
            assert env.obj.name == attrs["object"]
            close = closure_step(demo["actions"])
            assert close >= LAST_SECOND, f"{name}: the hand closes at step {close}"
            seen = []
            for state in demo["states"][close - LAST_SECOND:close]:
                env.set_state(state)
                seen.append(seen_points(env, lens))
            assert min(seen) >= 1, f"{name} ({attrs['object']}): points seen per step {seen}"
