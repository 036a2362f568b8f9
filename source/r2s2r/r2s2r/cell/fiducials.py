"""Surveyed fiducial points of the cell, in the local frames of the parts they are fixed to (design data).

A tracker (laser tracker, or a touch probe on a calibrated arm) measures them in the world frame; rigid alignment
of measured to design points gives the part's pose. Points are spread in three dimensions so the alignment is
well conditioned.
"""

from __future__ import annotations

import numpy as np

from r2s2r.cell.spec import BeltCfg


def robot_base_points() -> np.ndarray:
    """Six points on the arm's base casting (base frame): four around the mounting flange, two up the column."""
    ring = [(0.09 * np.cos(a), 0.09 * np.sin(a), 0.01) for a in np.arange(4) * np.pi / 2 + np.pi / 4]
    return np.array(ring + [(0.07, 0.0, 0.12), (0.0, -0.07, 0.18)])


def conveyor_points(belt: BeltCfg) -> np.ndarray:
    """Six points on the conveyor's rails (frame at the centre of the belt's top surface, x along travel)."""
    hx, hy = belt.length / 2 - 0.05, belt.width / 2 + 0.01
    return np.array([(sx * hx, sy * hy, 0.015) for sx in (-1, 1) for sy in (-1, 1)]
                    + [(0.0, hy, 0.015), (0.0, -hy, -0.05)])


# The stands the chessboard is clamped to for extrinsic calibration, one image per stand: board-centre position and
# roll-pitch-yaw in the world frame, the printed face turned toward the head cameras. Surveyed once when the cell was
# installed. Several stands at different depths and sides: from a single board, a camera's distance along its axis
# trades against its focal error; stands at several depths and sides pin both down. Turned around, the board's grey
# card on them measures the lamps.
BOARD_FIXTURE_POSES = (
    ((0.0, -0.36, 0.45), (0.53, 0.0, 0.0)),
    ((0.0, -0.45, 0.60), (0.70, 0.0, 0.0)),  # further and higher: the board spans more of the image
    ((0.0, -0.20, 0.30), (0.25, 0.0, 0.0)),  # nearer and lower
    ((0.14, -0.36, 0.45), (0.53, 0.0, 0.2)),  # to the side, turned toward the cameras
    # Near the head cameras (0.32 and 0.40 m along their axis), facing them: squares of 25-30 px at 512 px, where a
    # strongly blurred lens still shows the pattern that the four stands above lose to the blur.
    ((0.028, -0.511, 0.751), (0.655, 0.0, -0.144)),
    ((0.134, -0.463, 0.689), (0.719, 0.0, -0.516)),
)
