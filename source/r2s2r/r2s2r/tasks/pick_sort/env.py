"""Conveyor pick-and-sort as a gymnasium environment.

One object per episode rides the belt toward the right arm; the arm must pick it up and place it in the bin of
its colour. Actions are absolute targets at `control_hz`: the right hand's grasp-site pose (position + quaternion
w,x,y,z) plus 20 hand-joint targets, converted to arm joint targets by differential IK (`action_mode="ee_pose"`),
or 7 arm + 20 hand joint targets (`action_mode="joint"`). The left arm holds its home posture.

Observations: `proprio` (what the robot measures, and the conveyor's speed set-point), `images` (rendered cameras after the lens model), and
`privileged` (simulator truth for generators and evaluation; never for policies).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from r2s2r.cell.spec import ObjectCfg
from r2s2r.cell.world import load_world
from r2s2r.control.ik import ArmIK
from r2s2r.core import ConfigError
from r2s2r.geometry import mat_to_quat
from r2s2r.sim import CellSim
from r2s2r.tasks.pick_sort import mdp
from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS, PickSortEnvCfg
from r2s2r.tasks.pick_sort.mdp import OUTCOMES, SUCCESS
from r2s2r.tasks.pick_sort.renderer_choice import resolve_renderer


class PickSortEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, cfg: PickSortEnvCfg | None = None, **overrides):
        cfg = (cfg or PickSortEnvCfg()).replace(**overrides) if overrides else (cfg or PickSortEnvCfg())
        cfg, _ = resolve_renderer(cfg)  # renderer="auto": this machine's choice
        if cfg.world is not None:
            self.world = load_world(cfg.world, base=cfg.cell)
            cfg = cfg.replace(cell=self.world.cell)
        else:
            self.world = None
        self.cfg = cfg.validate()
        cell = cfg.cell
        self.cell = cell
        self.condition_name = cfg.condition
        self.condition = CONDITIONS[cfg.condition]
        self.sim = CellSim(cell, cfg.physics)
        m = self.model = self.sim.model
        self.physics = self.sim.physics
        self.index = self.sim.index
        self.renderer = None
        if cfg.cameras:
            h, w = cfg.image_size
            self.renderer = self.sim.renderer(cfg.renderer, cfg.cameras, w, h, depth=cfg.depth)
        self.substeps = round(1.0 / (cfg.control_hz * cell.physics.timestep))
        self.max_steps = int(round(cfg.episode_seconds * cfg.control_hz))

        if self.sim.latency >= self.substeps:
            raise ConfigError(f"arms.right.latency_steps = {self.sim.latency}: expected fewer than the "
                              f"{self.substeps} physics steps of one control period")
        self.ik = ArmIK(m, "right", home_q=np.array(cell.arm("right").home_q))
        self.objects: tuple[ObjectCfg, ...] = cell.novel_objects if self.condition.novel_objects else cell.objects
        self.all_objects = cell.objects + cell.novel_objects
        self.colours = sorted(cell.colours)
        self.bins = {b.colour: b for b in cell.bins}

        self.action_space = gym.spaces.Box(-np.inf, np.inf, shape=(27,), dtype=np.float64)
        images = {}
        h, w = cfg.image_size
        for cam in cfg.cameras:
            images[cam] = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
            if cfg.depth:
                images[f"{cam}_depth"] = gym.spaces.Box(0, np.inf, (h, w), np.float32)
        box = lambda n: gym.spaces.Box(-np.inf, np.inf, (n,), np.float64)  # noqa: E731
        self.observation_space = gym.spaces.Dict(
            {
                "proprio": gym.spaces.Dict({"arm_q": box(7), "arm_dq": box(7), "hand_q": box(20), "ee_pose": box(7),
                                            "belt_setpoint": box(1)}),
                "images": gym.spaces.Dict(images),
                "privileged": gym.spaces.Dict(
                    {"object_pos": box(3), "object_quat": box(4), "object_vel": box(6), "belt_speed": box(1),
                     "object_half_extents": box(3), "target_bin_pos": box(3), "colour_id": box(1),
                     "object_id": box(1)}
                ),
            }
        )
        self._rng = self.belt_rng = np.random.default_rng()
        self._judge = mdp.Judge(cell)

    # ----------------------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        m, cfg = self.model, self.cfg
        condition = (options or {}).get("condition", cfg.condition)
        episode = mdp.sample_episodes(cfg, [seed], [condition], self.sim.lights_nominal)
        self._rng, self.belt_rng = episode.rngs[0], episode.belt_rngs[0]
        self.condition_name = condition
        self.condition = CONDITIONS[condition]
        self.objects = self.cell.novel_objects if self.condition.novel_objects else self.cell.objects
        self.belt_speed = float(episode.belt_setpoint[0])
        self.obj, self.colour = episode.objects[0], episode.colour[0]
        self._episode = torch.tensor([episode.object_index[0], episode.colour_index[0]])
        self.sim.set_light_state(episode.light_pos[0], episode.light_diffuse[0])

        self.obj_body, self.obj_geom, self.obj_qadr, self.obj_dadr = self.sim.object_address(self.obj)
        self.sim.paint_objects(self.obj, self.cell.colours[self.colour])
        qpos, qvel, ctrl = (x[0] for x in mdp.initial_states(m, self.index, episode))
        self.physics.reset(qpos, qvel, ctrl)
        self._ctrl = ctrl
        self.steps = 0
        self.lifted = torch.zeros(1, dtype=torch.bool)
        obs = self.observe()
        return obs, self._info(None)

    def state(self) -> np.ndarray:
        """The simulator state (qpos | qvel) that, with the reset seed, determines the rest of the episode."""
        d = self.physics.host_data(0)
        return np.concatenate([d.qpos, d.qvel])

    def set_state(self, state: np.ndarray) -> None:
        """Restore a state from `state()` (e.g. a dataset's `initial_state`) in the episode reset() set up."""
        state = np.asarray(state, dtype=float)
        nq, nv = self.model.nq, self.model.nv
        if state.shape != (nq + nv,):
            raise ValueError(f"state has shape {state.shape}: expected ({nq + nv},) = qpos ({nq}) | qvel ({nv})")
        self.physics.reset(state[:nq], state[nq:], self._ctrl)

    # ----------------------------------------------------------------------------------------------------------
    def arm_targets(self, ee_pose: np.ndarray, seed: np.ndarray) -> np.ndarray:
        """The arm joint targets of an `ee_pose` action's grasp-site pose (position, quaternion w,x,y,z): the IK
        from `seed` (the targets the drives hold), as a control step of `action_mode="ee_pose"` solves it."""
        return mdp.ee_pose_targets(self.ik, ee_pose[None], seed[None], self.cfg.ik_iterations)[0]

    def step(self, action):
        action = np.asarray(action, dtype=float)
        if action.shape != (27,):
            raise ValueError(f"action has shape {action.shape}: expected (27,) = 7 arm values + 20 hand targets")
        if not np.isfinite(action).all():
            raise ValueError("action contains NaN or inf")
        if self.cfg.action_mode == "ee_pose":
            q_arm = self.arm_targets(action[:7], self._ctrl[self.index.arm_act])
        else:
            q_arm = action[:7]
        self._ctrl[self.index.belt_act] = mdp.drive_speeds(self.cell.belt, [self.belt_speed], [self.belt_rng])[0]
        self.sim.control_period(self._ctrl, q_arm, action[7:], self.substeps)
        self.steps += 1
        failure, success = self.evaluate()
        obs = self.observe()
        terminated = success or failure is not None
        truncated = False
        if not terminated and self.steps >= self.max_steps:
            failure, truncated = "timeout", True
        return obs, float(success), terminated, truncated, self._info(failure, success)

    def evaluate(self) -> tuple[str | None, bool]:
        """(failure name or None, success) from the object's current state by the task's rules (`mdp.Judge`).
        Updates whether the object has been lifted, so call it once per control period (step does)."""
        d = self.physics.host_data(0)
        code, self.lifted = self._judge.outcome(
            torch.from_numpy(d.xpos[self.obj_body])[None], torch.from_numpy(d.qvel[self.obj_dadr:self.obj_dadr + 3])[None],
            self._episode[:1], self._episode[1:], self.lifted, torch.tensor([self._touching_robot(d)]),
            torch.from_numpy(self.physics.unstable()))
        code = int(code[0])
        return (None if code in (mdp.RUNNING, SUCCESS) else OUTCOMES[code]), code == SUCCESS

    def _touching_robot(self, d) -> bool:
        g1, g2 = d.contact.geom1[:d.ncon], d.contact.geom2[:d.ncon]
        b1, b2 = self.model.geom_bodyid[g1], self.model.geom_bodyid[g2]
        obj = self.obj_body
        robot = self.index.robot_bodies  # an object touching the right arm or hand is held or being grasped
        return bool(np.any((b1 == obj) & robot[b2]) or np.any((b2 == obj) & robot[b1]))

    # ----------------------------------------------------------------------------------------------------------
    def observe(self) -> dict:
        """The observation of the current physics state (what reset and step return; after `set_state`, what the
        cameras would have seen there)."""
        d = self.physics.host_data(0)
        ix = self.index
        ee_rot = d.site_xmat[ix.grasp_site].reshape(3, 3)
        proprio = {
            "arm_q": d.qpos[ix.arm_qadr].copy(),
            "arm_dq": d.qvel[ix.arm_dadr].copy(),
            "hand_q": d.qpos[ix.hand_qadr].copy(),
            "ee_pose": np.concatenate([d.site_xpos[ix.grasp_site], mat_to_quat(ee_rot)]),
            # The conveyor's commanded speed (m/s): what the cell's controller knows without any sensor. The belt's
            # true speed (scale, jitter) is the tracker's business and stays privileged.
            "belt_setpoint": np.array([self.belt_speed]),
        }
        images = {}
        if self.renderer is not None:
            frames = self.renderer.render(self.physics, rng=self._rng)
            for cam, out in frames.items():
                images[cam] = out["rgb"][0]
                if self.cfg.depth:
                    images[f"{cam}_depth"] = out["depth"][0]
        b = self.bins[self.colour]
        privileged = {
            "object_pos": d.xpos[self.obj_body].copy(),
            "object_quat": d.xquat[self.obj_body].copy(),
            "object_vel": d.qvel[self.obj_dadr:self.obj_dadr + 6].copy(),  # linear (world), angular (body)
            "belt_speed": np.array([d.qvel[ix.belt_dof]]),
            "object_half_extents": np.array(self.obj.half_extents),
            "target_bin_pos": np.array(b.center, dtype=float),
            "colour_id": np.array([float(self.colours.index(self.colour))]),
            "object_id": np.array([float(self.all_objects.index(self.obj))]),
        }
        return {"proprio": proprio, "images": images, "privileged": privileged}

    def _info(self, failure: str | None, success: bool = False) -> dict:
        return {
            "success": success,
            "failure": failure,
            "object": self.obj.name,
            "colour": self.colour,
            "belt_speed": self.belt_speed,
            "condition": self.condition_name,
            "time": self.steps / self.cfg.control_hz,
        }

    def render(self):
        if self.renderer is None:
            return None
        frames = self.renderer.render(self.physics)
        return np.concatenate([out["rgb"][0] for out in frames.values()], axis=1)

    def close(self):
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None
