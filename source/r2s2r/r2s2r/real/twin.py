"""The reality twin: the cell with its true parameters, behind the real-cell interface.

The truth is a world file (`configs/world/reality.yaml` by default; `--reality-file` options and the
R2S2R_REALITY_FILE environment variable select another). This module, the mismatch report and tests are the only
readers of that file: the pipeline talks to the twin through `RealCell` and `CalibrationRig` only, exactly as it
would talk to hardware.

Sensors add what real ones add (`r2s2r.calibration.rig`): tracker noise, encoder quantisation, scale noise; cameras
carry the truth's lens, blur, exposure and noise, and the truth's residual gap (shadows, floor texture, clutter).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from r2s2r.calibration.rig import SimRig
from r2s2r.cell.world import load_world
from r2s2r.core import ConfigError, configs_dir
from r2s2r.real.interface import DEFAULT_PROMPT, CalibrationRig, RealCell, StepResult
from r2s2r.tasks import REAL_TASK
from r2s2r.tasks import make as make_task
from r2s2r.tasks.pick_sort.env import PickSortEnv


def reality_file(path: str | os.PathLike | None = None) -> Path:
    """The truth file: `path` if given, else R2S2R_REALITY_FILE, else configs/world/reality.yaml."""
    chosen = path or os.environ.get("R2S2R_REALITY_FILE") or configs_dir() / "world" / "reality.yaml"
    chosen = Path(chosen)
    if not chosen.is_file():
        raise ConfigError(f"reality file = {str(chosen)!r}: no such file (set --reality-file or R2S2R_REALITY_FILE)")
    return chosen


def make_twin_env(reality: str | os.PathLike | None = None, **overrides):
    """The twin as a gymnasium environment (what `R2S2R-PickSort-Real-v0` builds)."""
    world = load_world(reality_file(reality))
    if world.kind != "reality":
        raise ConfigError(f"{world.path}: kind = {world.kind!r}: expected 'reality' for the twin")
    return PickSortEnv(world=str(world.path), **overrides)


class EnvCell(RealCell):
    """`RealCell` over a pick-and-sort environment (any variant: the twin, the design cell, the study's worlds).

    The environment's `privileged` group becomes the cell's `tracking` group, so the same evaluation protocol
    runs unchanged on the twin and, with sim as the evaluator, on the sim variants.

    Args:
        env: The environment; the cell owns it from here on (`close()` closes it).
    """

    def __init__(self, env: PickSortEnv):
        if not isinstance(env, PickSortEnv):
            raise TypeError(f"env = {env!r}: expected a PickSortEnv (r2s2r.tasks.make(...) returns one)")
        self.env = env
        self.control_hz = env.cfg.control_hz
        self._obs: dict | None = None
        self.prompt = DEFAULT_PROMPT
        self.info: dict = {}

    def _split(self, obs: dict) -> dict:
        return {"proprio": obs["proprio"], "images": obs["images"], "tracking": obs["privileged"]}

    def reset(self, prompt: str = DEFAULT_PROMPT, condition: str = "nominal", seed: int | None = None) -> dict:
        self.prompt = prompt
        obs, self.info = self.env.reset(seed=seed, options={"condition": condition})
        self._obs = self._split(obs)
        return self._obs

    def observe(self) -> dict:
        if self._obs is None:
            raise RuntimeError("observe() before reset(): the cell has no trial set up")
        return self._obs

    def act(self, action: np.ndarray) -> StepResult:
        if self._obs is None:
            raise RuntimeError("act() before reset(): the cell has no trial set up")
        obs, _, terminated, truncated, info = self.env.step(action)
        self._obs = self._split(obs)
        return StepResult(self._obs, terminated or truncated, info)

    def stop(self) -> None:
        self._obs = None

    def close(self) -> None:
        self.env.close()


class TwinCell(EnvCell):
    """`RealCell` over the twin environment."""

    def __init__(self, reality: str | os.PathLike | None = None, **env_overrides):
        super().__init__(make_twin_env(reality, **env_overrides))


def make_cell(task_id: str, **env_overrides) -> EnvCell:
    """The cell that runs trials of `task_id`: the twin for the real task, else an `EnvCell` over the sim variant.

    Sim-as-evaluator runs the real-side protocol unchanged in a sim variant. For the twin, `reality=` selects the
    truth file as in `TwinCell`.
    """
    if task_id == REAL_TASK:
        return TwinCell(**env_overrides)
    return EnvCell(make_task(task_id, **env_overrides))


class TwinRig(SimRig, CalibrationRig):
    """`CalibrationRig` over the twin's true model."""

    def __init__(self, reality: str | os.PathLike | None = None):
        super().__init__(reality_file(reality))
