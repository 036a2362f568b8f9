"""What a generation run is: the task's environment, its behaviour generator and the run's own settings.

`GenerateCfg` has three groups that command-line overrides address as `env.<field>`, `generator.<field>` and
`datagen.<field>` (e.g. `env.image_size=[64,64] generator.nn_k=5 datagen.chunk_size=4`).

A task is a MuJoCo task ID that binds a world and a generator (`R2S2R-PickSort-World*-Behavior*-v0`), or an Isaac
Lab task ID of a world (`r2s2r.tasks.ISAACLAB_GENERATION_WORLDS`), which runs on Newton's physics with the generator
named with it. The Isaac Lab environment takes only `env.cameras`, `env.image_size` and `env.depth`; its physics and
rates are its registered config's, and `device` is its simulation device.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from r2s2r.behavior import generator_cfg
from r2s2r.core import ConfigError, apply_overrides, check_number
from r2s2r.isaaclab_tasks import RESIDUAL_TASK
from r2s2r.isaaclab_tasks import TASKS as ISAACLAB_TASKS
from r2s2r.tasks import ISAACLAB_GENERATION_WORLDS as GENERATION_WORLDS
from r2s2r.tasks import TASKS
from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS, PickSortEnvCfg

ALL_CAMERAS = ("head_left", "head_right", "right_wrist", "left_wrist")
# The study's two behaviour sources, which an Isaac Lab task ID (a world only) is paired with: grounded behaviour
# (real demos transformed MimicGen-style) and ungrounded behaviour (grasp generator + planner).
BEHAVIOURS = ("mimic", "planner")
# The env fields the Isaac Lab environment takes (its image observations and their renderer); the rest are its
# registered config's.
ISAACLAB_ENV_FIELDS = ("cameras", "image_size", "depth", "renderer")
# An Isaac Lab task's renderers: `auto` (the default) is Newton's Warp ray tracer, kit-less; Isaac RTX needs Kit.
ISAACLAB_RENDERERS = ("auto", "isaac_rtx")


def _default_conditions() -> dict[str, float]:
    # Every dataset spans the shifted conditions the real demos do not cover; nominal keeps the largest share,
    # as in the real evaluation (24 of 50 trials nominal).
    return {"nominal": 0.4, "lighting": 0.15, "belt_speed": 0.15, "novel_objects": 0.15, "combined": 0.15}


@dataclass(frozen=True)
class DatagenCfg:
    """The run: how many admitted trajectories, from which seed, in which work units, under which conditions."""

    num_trajectories: int = 1500
    seed: int = 0
    # Attempts per work unit. Each unit is written to its own shard file, so a unit is what an interruption can
    # lose and what a worker takes at a time.
    chunk_size: int = 4
    # Sampling weight of each reset condition (normalized; 0 leaves a condition out).
    conditions: dict[str, float] = field(default_factory=_default_conditions)
    # Give up after this many attempts in all (0: 5 x num_trajectories).
    max_attempts: int = 0
    # Corrective data, DART-style (Laskey et al., arXiv 1703.09327): the executed grasp-site position is the
    # generator's command plus a slowly varying offset (an Ornstein-Uhlenbeck process, std per axis x, y, z in m,
    # correlation time `corrective_tau` s), while the recorded action stays the generator's clean command. A policy
    # trained on it sees the hand off the generator's path labelled with the way back, which on-path demos never
    # show. Attempts are admitted on success as ever. All zero: off.
    corrective_noise: tuple[float, float, float] = (0.0, 0.0, 0.0)
    corrective_tau: float = 0.5

    def validate(self) -> DatagenCfg:
        if self.num_trajectories < 1:
            raise ConfigError(f"datagen.num_trajectories = {self.num_trajectories}: expected >= 1")
        if not 1 <= self.chunk_size <= 1000:
            raise ConfigError(f"datagen.chunk_size = {self.chunk_size}: expected 1 to 1000 attempts")
        unknown = set(self.conditions) - set(CONDITIONS)
        if unknown:
            raise ConfigError(f"datagen.conditions: unknown {sorted(unknown)}; expected any of {', '.join(CONDITIONS)}")
        weights = list(self.conditions.values())
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ConfigError(f"datagen.conditions = {self.conditions}: expected weights >= 0, not all 0")
        if self.max_attempts < 0:
            raise ConfigError(f"datagen.max_attempts = {self.max_attempts}: expected >= 0 (0: 5 x num_trajectories)")
        check_number("datagen.corrective_noise", self.corrective_noise, 0, 0.2, unit="m", n=3)
        check_number("datagen.corrective_tau", self.corrective_tau, 0, 60, lo_open=True, unit="s")
        return self

    @property
    def attempt_limit(self) -> int:
        return self.max_attempts or 5 * self.num_trajectories


@dataclass(frozen=True)
class GenerateCfg:
    task: str
    generator_name: str
    env: PickSortEnvCfg
    generator: Any  # the generator's config dataclass
    datagen: DatagenCfg
    device: str | None = None  # an Isaac Lab task's simulation device (None: its config's, the CPU)
    # An Isaac Lab task's environments, each running one attempt at a time. Not part of the description: an
    # attempt is the same whichever environment runs it, so a run resumes under any number.
    num_envs: int = 1

    @property
    def isaaclab(self) -> bool:
        """Whether the task runs in Isaac Lab (Newton physics) rather than on MuJoCo."""
        return self.task in GENERATION_WORLDS

    def describe(self) -> dict:
        """Everything that determines the dataset, as JSON-ready data (stored with it; resumes must match)."""
        desc = {"task": self.task, "generator_name": self.generator_name, "env": _jsonable(self.env),
                "generator": _jsonable(self.generator), "datagen": _jsonable(self.datagen)}
        if self.device is not None:  # only then, so the runs (and shards) of earlier versions still resume
            desc["device"] = self.device
        if not any(self.datagen.corrective_noise):  # likewise: off, a run is described as before the option
            for key in ("corrective_noise", "corrective_tau"):
                desc["datagen"].pop(key)
        return desc

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:16]


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    return obj


def make_generate_cfg(task: str, num_trajectories: int | None = None, seed: int | None = None,
                      overrides: dict | None = None, generator: str | None = None,
                      device: str | None = None, num_envs: int = 1) -> GenerateCfg:
    """The run config for `task`: defaults (four cameras at 128x128), then `overrides` ({env|generator|datagen: ...}).
    `generator`: the behaviour generator, which an Isaac Lab task ID needs (a MuJoCo task ID binds its own);
    `device`: an Isaac Lab task's simulation device (None: its config's); `num_envs`: its environments, attempts
    run side by side."""
    with_generator = [t for t, s in TASKS.items() if s.generator] + list(GENERATION_WORLDS)
    overrides = dict(overrides or {})
    unknown = set(overrides) - {"env", "generator", "datagen"}
    if unknown:
        raise ConfigError(f"override group(s) {sorted(unknown)}: expected env.*, generator.* or datagen.*")
    env_overrides = overrides.get("env", {})
    if task in GENERATION_WORLDS:
        if generator not in BEHAVIOURS:
            raise ConfigError(f"generator = {generator!r}: Isaac Lab task {task!r} names a world only; expected "
                              "'mimic' (grounded behaviour: real demos transformed) or 'planner' (ungrounded "
                              "behaviour: grasp generator + planner)")
        refused = sorted(set(env_overrides) - set(ISAACLAB_ENV_FIELDS))
        if refused:
            taken = ", ".join("env." + f for f in ISAACLAB_ENV_FIELDS)
            raise ConfigError(f"env.{refused[0]}: the Isaac Lab environment takes only {taken}; the rest is its "
                              "registered config's")
        renderer = env_overrides.get("renderer", "auto")
        if renderer not in ISAACLAB_RENDERERS:
            raise ConfigError(f"env.renderer = {renderer!r}: an Isaac Lab task renders with 'auto' (Newton's Warp "
                              "ray tracer, kit-less) or 'isaac_rtx' (Isaac Sim's RTX, inside Kit)")
        name, world = generator, GENERATION_WORLDS[task]
    elif task in TASKS and TASKS[task].generator is not None:
        spec = TASKS[task]
        if generator not in (None, spec.generator):
            raise ConfigError(f"generator = {generator!r}: task {task!r} binds generator {spec.generator!r}; "
                              "choose the task ID of the behaviour you want")
        if device is not None:
            raise ConfigError(f"device = {device!r}: task {task!r} runs on MuJoCo (env.physics); a simulation "
                              "device is for the Isaac Lab task IDs")
        if num_envs != 1:
            raise ConfigError(f"num_envs = {num_envs}: task {task!r} runs on MuJoCo, one environment per worker "
                              "(--num-workers runs several); num_envs is for the Isaac Lab task IDs")
        name, world = spec.generator, spec.kwargs.get("world")
        if "world" in env_overrides and env_overrides["world"] != world:
            raise ConfigError(f"env.world = {env_overrides['world']!r}: the task binds world {world!r}; choose the "
                              "task ID of the world you want")
    elif task in TASKS or task in ISAACLAB_TASKS or task == RESIDUAL_TASK:
        raise ConfigError(f"task = {task!r} has no behaviour generator; data is generated in "
                          f"{', '.join(with_generator)}")
    else:
        raise ConfigError(f"task = {task!r}: unknown task ID; expected one of {', '.join(with_generator)}")
    # The renderer: the faster of GL and the Warp ray tracer on this machine where they draw the same images.
    env = PickSortEnvCfg(cameras=ALL_CAMERAS, image_size=(128, 128), world=world, renderer="auto")
    env = apply_overrides(env, env_overrides, "env")
    generator_config = apply_overrides(generator_cfg(name), overrides.get("generator", {}), "generator")
    datagen = DatagenCfg()
    if num_trajectories is not None:
        datagen = dataclasses.replace(datagen, num_trajectories=num_trajectories)
    if seed is not None:
        datagen = dataclasses.replace(datagen, seed=seed)
    datagen = apply_overrides(datagen, overrides.get("datagen", {}), "datagen").validate()
    if any(datagen.corrective_noise) and env.action_mode != "ee_pose":
        raise ConfigError(f"datagen.corrective_noise = {list(datagen.corrective_noise)}: the offset perturbs the "
                          f"commanded grasp-site position; expected env.action_mode = 'ee_pose', not "
                          f"{env.action_mode!r}")
    if not 1 <= num_envs <= 4096:
        raise ConfigError(f"num_envs = {num_envs}: expected 1 to 4096 environments")
    if hasattr(generator_config, "validate"):
        generator_config.validate()
    env.validate()
    return GenerateCfg(task, name, env, generator_config, datagen, device, num_envs)
