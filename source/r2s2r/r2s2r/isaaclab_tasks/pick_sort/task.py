"""One Isaac Lab environment of the cell behind the interface of `R2S2R-PickSort-v0`, so that the project's behaviour
generators and its datagen worker run on Newton's physics unchanged.

`CellTask` wraps a `PickSortCellEnv` of one environment. Its `reset(seed=, options=)` and `step(action)` return
gymnasium's tuples with `PickSortEnv`'s observation dict (`proprio`, `privileged`, `images`) and info (`success`,
`failure`, `object`, `colour`, `belt_speed`, `condition`, `time`); `state()` is Newton's state in MuJoCo's layout
(qpos | qvel). Actions are `PickSortEnv`'s `ee_pose` actions (grasp-site position, quaternion w,x,y,z, 20 hand
targets), which the environment takes in its own `action_mode="ee_pose"`. What describes the cell (`model`,
`cell`, `index`, `ik`, `bins`, `world`, `max_steps`) and the episode (`obj`, `colour`, `belt_speed`) is the
environment's.

One difference: Isaac Lab resets an environment within the step that ends its episode, so the observation that
step returns is already the next episode's. Callers stop at the end of an episode, as the datagen worker does.
"""

from __future__ import annotations

import numpy as np
import torch

from r2s2r.core import ConfigError
from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PickSortCellEnvCfg


def cell_env_cfg(task: str, cameras: tuple[str, ...] = (), image_size: tuple[int, int] = (128, 128),
                 depth: bool = False, renderer: str = "newton_warp", device: str | None = None,
                 action_mode: str = "ee_pose") -> PickSortCellEnvCfg:
    """The registered config of Isaac Lab task `task` for one environment with these image observations and action
    mode (see `PickSortCellEnvCfg`; "ee_pose", as `CellTask` drives it). `device`: the simulation device; None keeps
    the config's (the CPU)."""
    from isaaclab_tasks.utils.parse_cfg import parse_env_cfg

    cfg = parse_env_cfg(task, device=device, num_envs=1)
    cfg.cameras, cfg.image_size, cfg.depth, cfg.renderer = tuple(cameras), tuple(image_size), depth, renderer
    cfg.action_mode = action_mode
    return cfg


def generation_env_cfg(cfg) -> PickSortCellEnvCfg:
    """The environment config of a generation run on an Isaac Lab task (`r2s2r.datagen.GenerateCfg`): its task, its
    image observations (`env.cameras`, `env.image_size`, `env.depth`) and its device."""
    env = cfg.env
    return cell_env_cfg(cfg.task, env.cameras, env.image_size, env.depth, device=cfg.device)


class CellTask:
    """`PickSortEnv`'s interface on one `PickSortCellEnv` (see the module docstring)."""

    def __init__(self, env: PickSortCellEnv, condition: str = "nominal"):
        if env.num_envs != 1:
            raise ConfigError(f"scene.num_envs = {env.num_envs}: expected 1 (the task interface drives one "
                              "environment)")
        if env.cfg.action_mode != "ee_pose":
            raise ConfigError(f"action_mode = {env.cfg.action_mode!r}: expected 'ee_pose' (the task interface's "
                              "actions)")
        self.env = env
        self.cfg = env.task.replace(cameras=tuple(env.cfg.cameras), image_size=tuple(env.cfg.image_size),
                                    depth=env.cfg.depth, action_mode="ee_pose", condition=condition).validate()
        # The cell's description, as PickSortEnv has it.
        self.world, self.cell, self.model, self.index, self.ik = env.world, env.cell, env.model, env.index, env.ik
        self.all_objects, self.colours, self.bins = env.all_objects, env.colours, env.bins
        self.max_steps = int(round(self.cfg.episode_seconds * self.cfg.control_hz))
        self.steps = 0

    # The episode's draw (environment 0's).
    @property
    def obj(self):
        return self.env.episode_objects[0]

    @property
    def colour(self) -> str:
        return self.env.episode_colours[0]

    @property
    def belt_speed(self) -> float:
        return float(self.env.setpoint[0])

    @property
    def condition_name(self) -> str:
        return self.env.conditions[0]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        # As PickSortEnv: without options, the episode is drawn under the config's condition.
        obs, _ = self.env.reset(seed=seed, options=options or {"condition": self.cfg.condition})
        self.steps = 0
        return self.env.observation_dict(obs, 0), self._info()

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        action = np.asarray(action, dtype=float)
        if action.shape != (27,):
            raise ValueError(f"action has shape {action.shape}: expected (27,) = grasp-site pose (7) + 20 hand targets")
        if not np.isfinite(action).all():
            raise ValueError("action contains NaN or inf")
        info = self._info()  # taken before the step: one that ends the episode starts the next
        obs, _, terminated, truncated, extras = self.env.step(
            torch.tensor(action, dtype=torch.float32, device=self.env.device)[None])
        self.steps += 1
        outcome = extras["outcome"][0]
        success = outcome == "success"
        info.update(success=success, failure=None if success else outcome, time=self.steps / self.cfg.control_hz)
        return self.env.observation_dict(obs, 0), float(success), bool(terminated[0]), bool(truncated[0]), info

    def observe(self) -> dict:
        """The observation of the environment's current state (after `set_state`, what its cameras see there)."""
        return self.env.observation_dict(self.env.observe(), 0)

    def state(self) -> np.ndarray:
        return self.env.mujoco_states()[0]

    def set_state(self, state: np.ndarray) -> None:
        self.env.set_state(state, 0)

    def close(self) -> None:
        self.env.close()

    def _info(self) -> dict:
        return {"success": False, "failure": None, "object": self.obj.name, "colour": self.colour,
                "belt_speed": self.belt_speed, "condition": self.condition_name,
                "time": self.steps / self.cfg.control_hz}


def make_cell_task(cfg: PickSortCellEnvCfg, condition: str = "nominal") -> CellTask:
    """The environment of `cfg` (one, e.g. from `cell_env_cfg`) as a `CellTask` under reset condition `condition`."""
    return CellTask(PickSortCellEnv(cfg), condition)
