"""Pose of a rigid part from tracker measurements of fiducials whose design coordinates are known.

`rigid_align` is the least-squares rotation and translation (no scale: a surveyed part does not shrink) that maps
design points onto measured ones. The robot base gets a full 6-DoF pose; the conveyor, which the cell describes
by a top-surface centre and a yaw only, gets the 4-DoF pose (translation and rotation about z) that fits best.
"""

from __future__ import annotations

import math

import numpy as np

from r2s2r.calibration import CalibrationError
from r2s2r.cell.fiducials import conveyor_points, robot_base_points
from r2s2r.cell.spec import BeltCfg
from r2s2r.geometry import mat_to_rpy

# Points closer than this (m, RMS distance from their best-fit line) cannot fix a rotation about that line.
_MIN_SPREAD = 1e-3


def _check_points(local: np.ndarray, measured: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    local = np.asarray(local, dtype=float)
    measured = np.asarray(measured, dtype=float)
    if local.ndim != 2 or local.shape[1] != 3:
        raise CalibrationError(f"local points have shape {local.shape}: expected (N, 3)")
    if measured.shape != local.shape:
        raise CalibrationError(f"measured points have shape {measured.shape}: expected {local.shape} to match "
                               "the local (design) points one to one")
    if len(local) < 3:
        raise CalibrationError(f"{len(local)} point pair(s): a rigid pose needs at least 3 non-collinear points")
    if not (np.isfinite(local).all() and np.isfinite(measured).all()):
        raise CalibrationError("points contain NaN or infinite coordinates")
    return local, measured


def _off_line_spread(points: np.ndarray) -> float:
    """RMS distance of the points from their best-fit line (the second singular value of the centred set)."""
    s = np.linalg.svd(points - points.mean(0), compute_uv=False)
    return float(s[1] / math.sqrt(len(points)))


def rigid_align(local: np.ndarray, measured: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Least-squares rigid transform with ``measured ~= local @ R.T + t`` (Kabsch, without scale).

    Args:
        local: (N, 3) design coordinates of the points in the part's frame.
        measured: (N, 3) the same points as measured in the world frame.

    Returns:
        R (3, 3) rotation, t (3,) translation and the RMS residual distance (m).

    Raises:
        CalibrationError: fewer than 3 points, mismatched shapes, non-finite values, or (near-)collinear points
            (in either set), which leave the rotation about their line undetermined.
    """
    local, measured = _check_points(local, measured)
    for name, pts in (("local", local), ("measured", measured)):
        spread = _off_line_spread(pts)
        if spread < _MIN_SPREAD:
            raise CalibrationError(f"{name} points are collinear (RMS {spread * 1000:.3g} mm off their common line): "
                                   "the rotation about that line is undetermined")
    cl, cm = local.mean(0), measured.mean(0)
    h = (local - cl).T @ (measured - cm)
    u, _, vt = np.linalg.svd(h)
    # The sign correction keeps R a proper rotation when the best orthogonal fit would be a reflection.
    d = np.sign(np.linalg.det(vt.T @ u.T)) or 1.0
    r = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    t = cm - r @ cl
    rms = float(np.sqrt(np.mean(np.sum((local @ r.T + t - measured) ** 2, axis=1))))
    return r, t, rms


def register_base(measured: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The right arm's base pose from the tracker's measurements of the base fiducials.

    Args:
        measured: (6, 3) world positions of `robot_base_points()`, in the same order.

    Returns:
        Base position (3,), roll-pitch-yaw (3,) and the RMS fit residual (m).
    """
    r, t, rms = rigid_align(robot_base_points(), measured)
    return t, mat_to_rpy(r), rms


def register_conveyor(measured: np.ndarray, belt: BeltCfg) -> tuple[np.ndarray, float, float]:
    """The belt's top-surface centre and yaw from the tracker's measurements of the conveyor fiducials.

    The cell places the conveyor by centre and yaw only, so the fit is restricted to those four degrees of
    freedom: a free 6-DoF fit would spend the measurements on roll and pitch the model cannot represent.

    Args:
        measured: (6, 3) world positions of `conveyor_points(belt)`, in the same order.
        belt: the belt whose design dimensions (length, width) place the fiducials.

    Returns:
        belt centre (3,), yaw (rad) and the RMS fit residual (m).
    """
    local = conveyor_points(belt)
    local, measured = _check_points(local, measured)
    spread = _off_line_spread(measured[:, :2])
    if spread < _MIN_SPREAD:
        raise CalibrationError(f"measured conveyor points are collinear in plan view (RMS {spread * 1000:.3g} mm off "
                               "their common line): the yaw is undetermined")
    cl, cm = local.mean(0), measured.mean(0)
    a, b = local[:, :2] - cl[:2], measured[:, :2] - cm[:2]
    # Planar Procrustes: the yaw maximising sum(b . Rz(yaw) a) in closed form.
    yaw = math.atan2(float(np.sum(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0])), float(np.sum(a * b)))
    c, s = math.cos(yaw), math.sin(yaw)
    r = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    centre = cm - r @ cl
    rms = float(np.sqrt(np.mean(np.sum((local @ r.T + centre - measured) ** 2, axis=1))))
    return centre, yaw, rms
