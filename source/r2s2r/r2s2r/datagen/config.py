"""What a generation run is: the task's environment, its behaviour generator and the run's own settings.

`GenerateCfg` has three groups that command-line overrides address as `env.<field>`, `generator.<field>` and
`datagen.<field>` (e.g. `env.image_size=[64,64] generator.nn_k=5 datagen.chunk_size=4`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from r2s2r.behavior import generator_cfg
from r2s2r.core import ConfigError, apply_overrides
from r2s2r.tasks import TASKS
from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS, PickSortEnvCfg

ALL_CAMERAS = ("head_left", "head_right", "right_wrist", "left_wrist")


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

    def describe(self) -> dict:
        """Everything that determines the dataset, as JSON-ready data (stored with it; resumes must match)."""
        return {"task": self.task, "generator_name": self.generator_name, "env": _jsonable(self.env),
                "generator": _jsonable(self.generator), "datagen": _jsonable(self.datagen)}

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
                      overrides: dict | None = None) -> GenerateCfg:
    """The run config for `task`: defaults (four cameras at 128x128), then `overrides` ({env|generator|datagen: ...})."""
    if task not in TASKS:
        raise ConfigError(f"task = {task!r}: unknown task ID; expected one of {', '.join(TASKS)}")
    spec = TASKS[task]
    if spec.generator is None:
        with_generator = [t for t, s in TASKS.items() if s.generator]
        raise ConfigError(f"task = {task!r} has no behaviour generator; data is generated in {', '.join(with_generator)}")
    overrides = dict(overrides or {})
    unknown = set(overrides) - {"env", "generator", "datagen"}
    if unknown:
        raise ConfigError(f"override group(s) {sorted(unknown)}: expected env.*, generator.* or datagen.*")
    env = PickSortEnvCfg(cameras=ALL_CAMERAS, image_size=(128, 128), **spec.kwargs)
    env = apply_overrides(env, overrides.get("env", {}), "env")
    if "world" in overrides.get("env", {}) and overrides["env"]["world"] != spec.kwargs.get("world"):
        raise ConfigError(f"env.world = {overrides['env']['world']!r}: the task binds world "
                          f"{spec.kwargs.get('world')!r}; choose the task ID of the world you want")
    generator = apply_overrides(generator_cfg(spec.generator), overrides.get("generator", {}), "generator")
    datagen = DatagenCfg()
    if num_trajectories is not None:
        datagen = dataclasses.replace(datagen, num_trajectories=num_trajectories)
    if seed is not None:
        datagen = dataclasses.replace(datagen, seed=seed)
    datagen = apply_overrides(datagen, overrides.get("datagen", {}), "datagen").validate()
    if hasattr(generator, "validate"):
        generator.validate()
    env.validate()
    return GenerateCfg(task, spec.generator, env, generator, datagen)
