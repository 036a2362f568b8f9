"""What the Isaac Sim debug window (`exts/r2s2r.debug`) drives, without Kit: one task instance, the source of its
actions, and what the window shows of it.

A session runs a MuJoCo task ID (`r2s2r.tasks`; `world` may name another world file) or one of the cell's Isaac Lab
task IDs (`r2s2r.isaaclab_tasks`: Newton physics; the ID names its world). An Isaac Lab task runs as one
environment behind the task interface (`CellTask`), its cameras drawn by Isaac RTX inside Kit and by Newton's Warp
ray tracer elsewhere, so everything here runs and is tested kit-less. Actions come from the scripted controller, a
dataset episode (its seed, condition, initial state and actions) or a policy checkpoint.
"""

from __future__ import annotations

import numpy as np

from r2s2r.core import ConfigError

SOURCES = ("scripted", "dataset episode", "checkpoint")
CAMERAS = ("head_left", "right_wrist")  # what an Isaac Lab task shows without a checkpoint: the cell, and the hand
IMAGE_SIZE = (128, 128)


def task_ids() -> list[str]:
    """Every task a session can run: the MuJoCo task IDs, then the cell's Isaac Lab task IDs."""
    import r2s2r.tasks as tasks
    from r2s2r.isaaclab_tasks import TASKS as ISAACLAB

    return sorted(tasks.TASKS) + sorted(ISAACLAB)


def is_isaaclab(task: str) -> bool:
    from r2s2r.isaaclab_tasks import TASKS as ISAACLAB

    return task in ISAACLAB


class DebugSession:
    """One task instance and what drives it. `cameras` and `image_size` are what it shows, unless a checkpoint's
    policy needs its own. `renderer` (Isaac Lab IDs only): None takes Isaac RTX inside Kit and Newton's Warp ray
    tracer elsewhere. Bad input (an unknown task, a world for an Isaac Lab ID, a missing dataset or
    checkpoint) raises `ConfigError`, `DatasetError` or `FileNotFoundError` before anything is stepped."""

    def __init__(self, task: str, world: str = "", condition: str = "nominal", seed: int = 0,
                 source: str = "scripted", path: str = "", episode: int = 0, cameras: tuple[str, ...] = CAMERAS,
                 image_size: tuple[int, int] = IMAGE_SIZE, renderer: str | None = None):
        if source not in SOURCES:
            raise ConfigError(f"source = {source!r}: expected one of {', '.join(SOURCES)}")
        if source != "scripted" and not path:
            raise ConfigError(f"source = {source!r}: give the {source.split()[-1]} file's path")
        self.task, self.seed, self.condition = task, seed, condition
        self.isaaclab = is_isaaclab(task)
        self.actions = self.controller = self.agent = None
        view = {"cameras": tuple(cameras), "image_size": tuple(image_size)}
        if source == "checkpoint":
            from r2s2r.policy.agent import load_agent

            self.agent = load_agent(path, seed=seed)
            view = self.agent.env_overrides  # the cameras and image size the policy was trained on
        if source == "dataset episode":
            from r2s2r.data import DemoReader

            with DemoReader(path, min_demos=1, fields=("initial_state",), attrs=("seed",),
                            purpose="the episode is reset with its seed and restored to its initial state") as r:
                if not 0 <= episode < len(r.names):
                    raise ConfigError(f"episode = {episode}: {path} holds episodes 0 to {len(r.names) - 1}")
                name = r.names[episode]
                attrs, demo = r.attrs(name), r.load(name)
            self.seed, self.condition = int(attrs["seed"]), attrs.get("condition", "nominal")
            # (1, N): one state, with the episode axis
            self.initial_state, self.actions = demo["initial_state"][0], list(np.asarray(demo["actions"]))
        elif source == "scripted":
            from r2s2r.behavior import make_generator

            self.controller = make_generator("scripted")
        self.env = self._make_env(world, view, renderer)
        self.reset()

    def _make_env(self, world: str, view: dict, renderer: str | None):
        task = self.task
        if not self.isaaclab:
            import r2s2r.tasks as tasks

            return tasks.make(task, **view, **({"world": world} if world else {}))
        if world:
            raise ConfigError(f"world = {world!r}: an Isaac Lab task ID names its world ({task}); leave it empty")
        from r2s2r.isaaclab_tasks.pick_sort.task import cell_env_cfg, make_cell_task
        from r2s2r.render.isaac_rtx import kit_running

        renderer = renderer or ("isaac_rtx" if kit_running() else "newton_warp")
        return make_cell_task(cell_env_cfg(task, tuple(view["cameras"]), tuple(view["image_size"]),
                                           renderer=renderer))

    def reset(self) -> None:
        self.obs, self.info = self.env.reset(seed=self.seed, options={"condition": self.condition})
        self.step_index, self.done = 0, False
        if self.actions is not None:
            self.env.set_state(self.initial_state)
            self.obs = self.env.observe()
        elif self.controller is not None:
            self.controller.reset(self.env, self.obs, np.random.default_rng(self.seed))
        else:
            self.agent.reset(self.seed)

    def step(self) -> None:
        """One control step of the source's action; nothing once the episode (or the dataset episode) has ended."""
        if self.done:
            return
        if self.actions is not None:
            if self.step_index >= len(self.actions):
                self.done = True
                return
            action = self.actions[self.step_index]
        elif self.controller is not None:
            action = self.controller(self.obs)
        else:
            action = self.agent.act({"proprio": self.obs["proprio"], "images": self.obs["images"]})
        obs, _, terminated, truncated, self.info = self.env.step(action)
        self.step_index += 1
        self.done = terminated or truncated
        if not self.done:  # an Isaac Lab environment's last observation is already the next episode's
            self.obs = obs

    @property
    def status(self) -> str:
        outcome = "success" if self.info.get("success") else self.info.get("failure") or "running"
        return f"{self.task} step {self.step_index} seed {self.seed} {self.condition}: {outcome}"

    def images(self) -> dict[str, np.ndarray]:
        """Each camera's colour image (H, W, 3) uint8, after the lens."""
        return {k: v for k, v in self.obs["images"].items() if not k.endswith("_depth")}

    def randomization(self) -> dict[str, object]:
        """The episode's draw as the window lists it: object, colour, condition, the belt's set-point and this
        control period's drive speed (scale and jitter applied), and the lighting's gain per colour channel over
        the cell's nominal lights (what the `paint` event shows in an Isaac Lab task)."""
        from r2s2r.tasks.pick_sort import mdp

        if self.isaaclab:
            env, i = self.env.env, self.env.env_id
            drive = float(env.belt_speed[i])
            gains = mdp.light_gains(env.light_diffuse[i:i + 1], env.lights_nominal[1])[0]
        else:
            env = self.env
            drive = float(env.physics.host_data(0).ctrl[env.index.belt_act])
            gains = mdp.light_gains(env.model.light_diffuse[None], env.sim.lights_nominal[1])[0]
        return {"object": self.info["object"], "colour": self.info["colour"], "condition": self.info["condition"],
                "belt set-point (m/s)": round(float(self.info["belt_speed"]), 4),
                "belt drive now (m/s)": round(drive, 4), "light gain (r, g, b)": tuple(np.round(gains, 3))}

    def close(self) -> None:
        self.env.close()
