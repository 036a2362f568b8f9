"""What the pipeline may ask of a real cell: a small interface a hardware driver implements.

`RealCell` runs trials (reset with a prompt, observe, act, stop). `CalibrationRig` is what a calibration session
gets from the same cell: camera captures of a chessboard the operator holds, tracker measurements, joint logs,
scale readings. Neither exposes a cell's true parameters: calibration has to infer them from these signals.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

DEFAULT_PROMPT = "Pick the object off the belt and put it in the bin of its colour."


@dataclass
class StepResult:
    obs: dict
    done: bool
    info: dict  # at least: success (bool), failure (str | None)


class RealCell(ABC):
    """One physical cell running pick-and-sort trials.

    Observations have the task's groups: `proprio`, `images`, and `tracking` (the cell's object tracker and belt
    encoder: object pose and velocity, belt speed, target bin) which operators and annotation may use and
    policies must not.
    """

    control_hz: float

    @abstractmethod
    def reset(self, prompt: str = DEFAULT_PROMPT, condition: str = "nominal", seed: int | None = None) -> dict:
        """Set up a trial (an operator places the object and sets the condition) and return the first observation."""

    @abstractmethod
    def observe(self) -> dict: ...

    @abstractmethod
    def act(self, action: np.ndarray) -> StepResult:
        """Send one action (the task's 27-vector) and wait one control period."""

    @abstractmethod
    def stop(self) -> None:
        """Halt the robot and the belt; the cell may be reset again afterwards."""


class CalibrationRig(ABC):
    """The measurements a calibration session records from a real cell."""

    physics_hz: float

    @abstractmethod
    def board_views(self, camera: str, count: int, width: int, height: int, seed: int) -> list[np.ndarray]:
        """Images of the chessboard held at `count` different poses in front of `camera`."""

    @abstractmethod
    def board_on_fixture(self, camera: str, width: int, height: int, lamps: dict[str, float] | None = None,
                         back: bool = False) -> np.ndarray:
        """Images (K, H, W, 3) of the chessboard on each of its K surveyed stands (`cell.fiducials.BOARD_FIXTURE_POSES`,
        in that order; for extrinsics and the lamps). `lamps` (lamp name -> dimmer level, 1 = as installed) lights
        the board with the lamps it names only; None: every lamp on. `back`: the board turned around on its stands,
        the grey card on its back toward the cameras (for measuring light)."""

    @abstractmethod
    def flat_field(self, camera: str, width: int, height: int) -> np.ndarray:
        """An image (H, W, 3) of a flat-field light panel held against the lens with the cell's lamps off: the
        camera's exposure on its own."""

    @abstractmethod
    def survey(self) -> dict[str, np.ndarray]:
        """Tracker measurements (world frame) of the fiducials: {"robot_base": (6, 3), "conveyor": (6, 3)}."""

    @abstractmethod
    def flange_positions(self, joint_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Drive the right arm to each commanded configuration, let it settle, and return (encoder readings
        (N, 7), tracker-measured flange positions (N, 3))."""

    @abstractmethod
    def joint_response(self, targets: np.ndarray) -> np.ndarray:
        """Stream right-arm joint targets at the physics rate ((T, 7)) from rest at targets[0]; encoder log (T, 7)."""

    @abstractmethod
    def track_object(self, commanded_speed: float, seconds: float) -> tuple[np.ndarray, np.ndarray]:
        """Run the belt at a set point with an object on it; the tracker's (times (N,), positions (N, 3))."""

    @abstractmethod
    def weigh(self, object_name: str, readings: int) -> np.ndarray:
        """Scale readings (kg) of one object."""

    @abstractmethod
    def scene_images(self, camera: str, count: int, width: int, height: int, seed: int) -> list[tuple[np.ndarray, dict]]:
        """Images of objects riding the belt, each with the tracker's reading at that instant (object name, colour,
        pose): what appearance estimation uses."""
