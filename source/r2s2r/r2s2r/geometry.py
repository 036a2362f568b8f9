"""Rotations in the conventions used throughout: quaternions (w, x, y, z) as MuJoCo and USD store them,
roll-pitch-yaw as URDF (R = Rz(yaw) @ Ry(pitch) @ Rx(roll))."""

from __future__ import annotations

import math

import numpy as np


def rpy_to_mat(rpy) -> np.ndarray:
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    return rz @ ry @ rx


def mat_to_rpy(m: np.ndarray) -> np.ndarray:
    """Roll-pitch-yaw of a rotation matrix (the inverse of `rpy_to_mat`)."""
    pitch = np.arcsin(np.clip(-m[2, 0], -1.0, 1.0))
    return np.array([np.arctan2(m[2, 1], m[2, 2]), pitch, np.arctan2(m[1, 0], m[0, 0])])


def mat_to_quat(m: np.ndarray) -> np.ndarray:
    """Rotation matrix to a unit quaternion with w >= 0."""
    # Python floats (the same IEEE arithmetic as NumPy's scalars, without their per-call cost): this runs for every
    # observation and every planned action.
    m = np.asarray(m, dtype=float).tolist()
    t = m[0][0] + m[1][1] + m[2][2]
    if t > 0:
        s = 2.0 * math.sqrt(t + 1.0)
        q = [0.25 * s, (m[2][1] - m[1][2]) / s, (m[0][2] - m[2][0]) / s, (m[1][0] - m[0][1]) / s]
    else:
        i = max(range(3), key=lambda a: m[a][a])  # the first of equal largest, as np.argmax
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + m[i][i] - m[j][j] - m[k][k])
        q = [0.0] * 4
        q[0] = (m[k][j] - m[j][k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (m[j][i] + m[i][j]) / s
        q[1 + k] = (m[k][i] + m[i][k]) / s
    q = np.array(q)
    q /= math.sqrt(q.dot(q))  # np.linalg.norm of a vector, without its call cost
    return q if q[0] >= 0 else -q


def quat_to_mat(q) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of quaternions w, x, y, z (..., 4), normalized here."""
    q = np.asarray(q, dtype=float)
    one = q.shape == (4,)
    if one:  # every ee_pose action: Python floats (the same arithmetic, without NumPy's per-call cost on scalars)
        w, x, y, z = q.tolist()
        n = math.sqrt(w * w + x * x + y * y + z * z)
        w, x, y, z = w / n, x / n, y / n, z / n
    else:
        w, x, y, z = np.moveaxis(q / np.linalg.norm(q, axis=-1, keepdims=True), -1, 0)
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return np.array(rows) if one else np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)


def rpy_to_quat(rpy) -> np.ndarray:
    return mat_to_quat(rpy_to_mat(rpy))


def rotation_error(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Axis-angle vector (world frame) rotating `current` onto `target` (both 3x3)."""
    r = target @ current.T
    # Scalars through `math` and Python floats (the same IEEE operations, in the same order, as the array
    # expressions they replace): the IK calls this every iteration, and NumPy's per-call cost on 3-vectors is most of it.
    (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = r.tolist()
    angle = math.acos(min(max((r00 + r11 + r22 - 1.0) / 2.0, -1.0), 1.0))
    axis = (r21 - r12, r02 - r20, r10 - r01)
    s = math.sin(angle)
    if s < 1e-6:
        if angle < 1e-6:
            return np.array([0.5 * a for a in axis])
        # 180 degrees: axis from the symmetric part.
        w, v = np.linalg.eigh(r)
        return angle * v[:, np.argmax(w)]
    return np.array([angle * a / (2.0 * s) for a in axis])
