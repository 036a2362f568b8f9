"""The palm-down power grasp the Wuji hand was tuned for: hand postures, the grasp orientation and offset, and the
yaw that lays the fingers across an object.

Tuned with the scripted controller (`r2s2r.behavior.scripted`). The planner's grasp synthesis, the MimicGen-style
generator and the operator model grasp the same way, and subtask annotation and the object-centric policy read
grasps through them, so they live below all of those.
"""

from __future__ import annotations

import numpy as np

from r2s2r.geometry import quat_to_mat

# At grasp yaw 0: palm down (volar normal -z), fingers across the belt (+y), thumb upstream (-x).
GRASP_ROT = np.column_stack([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
# Grasp-site offset from the object's centre: straight above it, level with the top of a 4-5 cm object, so the
# curling fingers meet it below its equator and press it up against the palm (chosen by a sweep over the nominal
# objects, for the most seeded nominal episodes that succeed).
GRASP_OFFSET = np.array([0.0, 0.0, 0.024])
HAND_OPEN = np.zeros(20)
HAND_CLOSED = np.array([1.2, 0.6, 0.8, 0.6] + [1.5, 0.0, 1.4, 1.2] * 4)
# Open with the fingers spread (joint2 abducts every finger toward the index side when positive): a round object
# can otherwise stay wedged between two straightened fingers.
HAND_RELEASE = np.array([0.0] * 4 + [0.0, 0.4, 0.0, 0.0] + [0.0, 0.15, 0.0, 0.0] + [0.0, -0.15, 0.0, 0.0]
                        + [0.0, -0.4, 0.0, 0.0])


def grasp_yaw(object_quat: np.ndarray, half_extents: np.ndarray) -> float:
    """Hand yaw (about world z) that lays the fingers across the object's long horizontal axis.

    A power grasp wraps the fingers around the long axis. Of the object's two most horizontal body axes the longer
    one is the long axis; when both are about equal (cube, sphere, upright cylinder) the yaw is only defined
    modulo 90 degrees and the one nearest zero is taken.
    """
    rot, a, b = _level_axes(object_quat)
    long_axis = a if half_extents[a] >= half_extents[b] else b
    theta = float(np.arctan2(rot[1, long_axis], rot[0, long_axis]))
    return wrap_yaw(theta, _period(half_extents, a, b))


def grasp_yaw_period(object_quat: np.ndarray, half_extents: np.ndarray) -> float:
    """The turn (rad) after which `grasp_yaw`'s grasp looks the same again: a quarter turn where the object's two most
    horizontal axes are about equal, half a turn otherwise."""
    _, a, b = _level_axes(object_quat)
    return _period(half_extents, a, b)


def _level_axes(object_quat: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The object's rotation matrix and its two most horizontal body axes."""
    rot = quat_to_mat(object_quat)
    a, b = np.argsort(np.abs(rot[2, :]))[:2]
    return rot, int(a), int(b)


def _period(half_extents: np.ndarray, a: int, b: int) -> float:
    symmetric = abs(half_extents[a] - half_extents[b]) < 0.1 * max(half_extents[a], half_extents[b])
    return np.pi / 2 if symmetric else np.pi


def wrap_yaw(yaw, period: float):
    """Yaw (rad, scalar or array) wrapped into [-period / 2, period / 2)."""
    return (yaw + period / 2) % period - period / 2
