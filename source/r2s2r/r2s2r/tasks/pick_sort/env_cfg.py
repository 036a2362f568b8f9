"""Configuration of the conveyor pick-and-sort task: the cell, the backends, and the reset conditions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from r2s2r.cell.spec import CellCfg
from r2s2r.core import ConfigError
from r2s2r.render import ISAAC_RTX, RENDERERS


@dataclass(frozen=True)
class ConditionCfg:
    """What reset() samples under one named condition.

    `belt_speed` is a (low, high) range in m/s; `novel_objects` draws from the cell's novel set instead of the
    nominal one; `light_scale` multiplies light intensities (uniform in the range) and `light_jitter` moves lights
    by up to that many metres per axis, tinting colours by up to `light_tint`.
    """

    belt_speed: tuple[float, float] | None = None  # None: the cell's nominal belt.speed_range
    novel_objects: bool = False
    light_scale: tuple[float, float] = (1.0, 1.0)
    light_jitter: float = 0.0
    light_tint: float = 0.0


SHIFTED_SPEED = (0.20, 0.35)
LIGHTING = dict(light_scale=(0.35, 1.8), light_jitter=0.6, light_tint=0.25)

CONDITIONS: dict[str, ConditionCfg] = {
    "nominal": ConditionCfg(),
    "lighting": ConditionCfg(**LIGHTING),
    "belt_speed": ConditionCfg(belt_speed=SHIFTED_SPEED),
    "novel_objects": ConditionCfg(novel_objects=True),
    "combined": ConditionCfg(belt_speed=SHIFTED_SPEED, novel_objects=True, **LIGHTING),
}


@dataclass(frozen=True)
class PickSortEnvCfg:
    """The task. `cameras` are the image observations; empty means no rendering at all (fastest)."""

    cell: CellCfg = field(default_factory=CellCfg)
    # A world file (registered name or path) whose parameters replace the cell's; None keeps `cell` as is.
    world: str | None = None
    condition: str = "nominal"
    physics: str = "mujoco"
    renderer: str = "mujoco_gl"
    cameras: tuple[str, ...] = ("head_left", "right_wrist")
    image_size: tuple[int, int] = (128, 128)  # (height, width)
    depth: bool = False
    control_hz: float = 20.0
    episode_seconds: float = 25.0
    action_mode: Literal["ee_pose", "joint"] = "ee_pose"
    # Spawn: the object enters this far upstream of the arm, after a random delay (seconds) of belt travel.
    spawn_x: float = -0.45
    spawn_delay: tuple[float, float] = (0.0, 1.5)
    lateral_range: tuple[float, float] = (-0.05, 0.05)
    ik_iterations: int = 15

    def validate(self) -> PickSortEnvCfg:
        """Check the task's own fields, and `cell` where it is the task's input: with `world` set, the task runs the
        cell that file describes, which `load_world` checks as the environment reads it."""
        if self.world is None:
            self.cell.validate()
        if self.condition not in CONDITIONS:
            raise ConfigError(f"condition = {self.condition!r}: expected one of {', '.join(CONDITIONS)}")
        renderers = (*RENDERERS, "auto", ISAAC_RTX)
        if self.renderer not in renderers:
            raise ConfigError(f"renderer = {self.renderer!r}: expected one of {', '.join(renderers)} (auto: the "
                              f"faster of {' and '.join(RENDERERS)} here, where they draw the same images; "
                              f"{ISAAC_RTX} only in Isaac Sim)")
        for cam in self.cameras:
            if cam not in self.cell.camera_names:
                raise ConfigError(f"cameras: {cam!r} is not a camera of the cell; expected any of "
                                  f"{', '.join(self.cell.camera_names)}")
        h, w = self.image_size
        if not (0 < h <= 2048 and 0 < w <= 2048):
            raise ConfigError(f"image_size = {self.image_size!r}: expected (height, width) each in [1, 2048]")
        if self.action_mode not in ("ee_pose", "joint"):
            raise ConfigError(f"action_mode = {self.action_mode!r}: expected 'ee_pose' or 'joint'")
        if not 5.0 <= self.control_hz <= 100.0:
            raise ConfigError(f"control_hz = {self.control_hz!r}: expected a rate in [5, 100] Hz")
        steps = 1.0 / (self.control_hz * self.cell.physics.timestep)
        if abs(steps - round(steps)) > 1e-6:
            raise ConfigError(f"control_hz = {self.control_hz!r}: expected a rate whose period is a whole number "
                              f"of {self.cell.physics.timestep} s physics steps")
        if self.episode_seconds <= 0:
            raise ConfigError(f"episode_seconds = {self.episode_seconds!r}: expected > 0")
        return self

    def replace(self, **changes: object) -> PickSortEnvCfg:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
