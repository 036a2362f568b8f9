"""One Isaac Lab environment of the cell behind the interface of `R2S2R-PickSort-v0`, so that the project's behaviour
generators run on Newton's physics unchanged.

`CellTask` is environment `env_id` of a `PickSortCellEnv`. On an environment config of one environment its `reset(seed=, options=)` and `step(action)` return
gymnasium's tuples with `PickSortEnv`'s observation dict (`proprio`, `privileged`, `images`) and info (`success`,
`failure`, `object`, `colour`, `belt_speed`, `condition`, `time`); `state()` is Newton's state in MuJoCo's layout
(qpos | qvel). Actions are `PickSortEnv`'s `ee_pose` actions (grasp-site position, quaternion w,x,y,z, 20 hand
targets), which the environment takes in its own `action_mode="ee_pose"`. What describes the cell (`model`,
`cell`, `index`, `ik`, `bins`, `world`, `max_steps`) and the episode (`obj`, `colour`, `belt_speed`) is the
environment's; on a config of several, a `CellTask` per environment is what a behaviour generator reads at its
reset while the environments are stepped together (the datagen worker's side-by-side attempts).

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
    image observations (`env.cameras`, `env.image_size`, `env.depth`) and their renderer (`env.renderer`: `auto`,
    Newton's Warp ray tracer, or `isaac_rtx`), its device and its number of environments."""
    env = cfg.env
    renderer = "isaac_rtx" if env.renderer == "isaac_rtx" else "newton_warp"
    env_cfg = cell_env_cfg(cfg.task, env.cameras, env.image_size, env.depth, renderer=renderer, device=cfg.device)
    env_cfg.scene.num_envs = cfg.num_envs
    return env_cfg


class CellTask:
    """`PickSortEnv`'s interface on one `PickSortCellEnv` (see the module docstring)."""

    def __init__(self, env: PickSortCellEnv, condition: str = "nominal", env_id: int = 0):
        if not 0 <= env_id < env.num_envs:
            raise ConfigError(f"env_id = {env_id}: expected 0 to {env.num_envs - 1}")
        if env.cfg.action_mode != "ee_pose":
            raise ConfigError(f"action_mode = {env.cfg.action_mode!r}: expected 'ee_pose' (the task interface's "
                              "actions)")
        self.env, self.env_id = env, env_id
        self.cfg = env.task.replace(cameras=tuple(env.cfg.cameras), image_size=tuple(env.cfg.image_size),
                                    depth=env.cfg.depth, action_mode="ee_pose", condition=condition).validate()
        # The cell's description, as PickSortEnv has it.
        self.world, self.cell, self.model, self.index, self.ik = env.world, env.cell, env.model, env.index, env.ik
        self.all_objects, self.colours, self.bins = env.all_objects, env.colours, env.bins
        self.max_steps = int(round(self.cfg.episode_seconds * self.cfg.control_hz))
        self.steps = 0

    # The episode's draw (environment env_id's).
    @property
    def obj(self):
        return self.env.episode_objects[self.env_id]

    @property
    def colour(self) -> str:
        return self.env.episode_colours[self.env_id]

    @property
    def belt_speed(self) -> float:
        return float(self.env.setpoint[self.env_id])

    @property
    def condition_name(self) -> str:
        return self.env.conditions[self.env_id]

    def episode_info(self) -> dict:
        """What `PickSortEnv.reset` reports of the episode: its object, colour, belt speed and condition."""
        return {"object": self.obj.name, "colour": self.colour, "belt_speed": self.belt_speed,
                "condition": self.condition_name}

    def _single(self) -> None:
        if self.env.num_envs != 1:
            raise ConfigError(f"scene.num_envs = {self.env.num_envs}: reset and step drive a single environment; "
                              "step several through the environment itself")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        # As PickSortEnv: without options, the episode is drawn under the config's condition.
        self._single()
        obs, _ = self.env.reset(seed=seed, options=options or {"condition": self.cfg.condition})
        self.steps = 0
        return self.env.observation_dict(obs, 0), self._info()

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        self._single()
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
        return self.env.observation_dict(self.env.observe(), self.env_id)

    def state(self) -> np.ndarray:
        return self.env.mujoco_states()[self.env_id]

    def set_state(self, state: np.ndarray) -> None:
        self.env.set_state(state, self.env_id)

    def close(self) -> None:
        self.env.close()

    def _info(self) -> dict:
        return {"success": False, "failure": None, **self.episode_info(), "time": self.steps / self.cfg.control_hz}


def make_cell_task(cfg: PickSortCellEnvCfg, condition: str = "nominal") -> CellTask:
    """The environment of `cfg` (one, e.g. from `cell_env_cfg`) as a `CellTask` under reset condition `condition`."""
    return CellTask(PickSortCellEnv(cfg), condition)
