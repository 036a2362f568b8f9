"""What a behaviour generator is: a closed-loop source of the task's `ee_pose` actions for one episode.

A generator is reset on an episode the environment has just started, may read the environment's description
(model, cell, task config) and the privileged observation group, and then answers each observation with one
27-dim action (grasp-site position, quaternion w,x,y,z, 20 hand-joint targets). It never renders and never
changes the environment's state: collision checks and kinematics run on scratch `MjData` of its own. Whether an
episode it drove is kept is decided by the task (admission), not by the generator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from r2s2r.tasks.pick_sort.env import PickSortEnv


class BehaviorGenerator(ABC):
    """One behaviour source (MimicGen-style transformed human demos, grasp generator + planner, ...)."""

    name: ClassVar[str]  # short identifier stored with every generated trajectory

    @abstractmethod
    def reset(self, env: PickSortEnv, obs: dict, rng: np.random.Generator) -> dict:
        """Plan for the episode `env` has just reset to (`obs` is what reset returned).

        `rng` is the episode's generator stream: everything random the generator does must draw from it, so the
        same seed gives the same trajectory. Returns attrs to store with the trajectory (scalars or strings,
        e.g. which source demo was used); raises `GenerationError` when no plan exists for this episode.
        """

    @abstractmethod
    def __call__(self, obs: dict) -> np.ndarray:
        """The next action (27,) for observation `obs`."""


class GenerationError(RuntimeError):
    """A generator cannot produce a trajectory for this episode (e.g. no reachable grasp); `reason` names why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
