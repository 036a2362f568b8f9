"""Task registry. Importing this module registers every task ID with gymnasium (lazy entry points)."""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym

from r2s2r.core import ConfigError

from r2s2r.task_ids import DESIGN_TASK, GROUNDING_VARIANTS, ISAACLAB_GENERATION_WORLDS, REAL_TASK

PICK_SORT = "r2s2r.tasks.pick_sort.env:PickSortEnv"


@dataclass(frozen=True)
class TaskSpec:
    description: str  # one line, what scripts/list_tasks.py prints
    entry_point: str = PICK_SORT
    kwargs: dict = field(default_factory=dict)  # passed to the entry point (e.g. the world file it binds)
    generator: str | None = None  # the behaviour generator that collects data in it (r2s2r.behavior)


def _grounding_variant(world: str, generator: str) -> TaskSpec:
    """One cell of the 2x2 grounding study: a world file and a behaviour generator."""
    behaviour = {"mimic": "real demos transformed MimicGen-style", "planner": "grasp generator + interception planner"}
    return TaskSpec(f"Pick-and-sort in the {world} world, data from {behaviour[generator]} "
                    f"(configs/world/{world}.yaml, generator '{generator}').", kwargs={"world": world},
                    generator=generator)


TASKS: dict[str, TaskSpec] = {
    DESIGN_TASK: TaskSpec(
        "Conveyor pick-and-sort on the design (nominal) cell: pick the object off the moving belt, place it in the "
        "bin of its colour."),
    REAL_TASK: TaskSpec(
        "The reality twin: the same task on the cell's true parameters (configs/world/reality.yaml, or "
        "R2S2R_REALITY_FILE / reality=...), with its residual visual gap.",
        entry_point="r2s2r.real.twin:make_twin_env"),
    **{task_id: _grounding_variant(*variant) for task_id, variant in GROUNDING_VARIANTS.items()},
}

for _task_id, _spec in TASKS.items():
    if _task_id not in gym.registry:
        gym.register(id=_task_id, entry_point=_spec.entry_point, kwargs=_spec.kwargs, disable_env_checker=True)


def make(task_id: str, **kwargs) -> gym.Env:
    """`gym.make` with a clear error for unknown IDs; returns the unwrapped environment."""
    if task_id in ISAACLAB_GENERATION_WORLDS:  # e.g. the task of a dataset generated in Isaac Lab
        world = ISAACLAB_GENERATION_WORLDS[task_id]
        same = [t for t, spec in TASKS.items() if spec.kwargs.get("world") == world]
        raise ConfigError(f"task = {task_id!r}: an Isaac Lab task ID (Newton physics); this runs the MuJoCo task IDs, "
                          f"e.g. those of the same world: {', '.join(same)}")
    if task_id not in TASKS:
        raise ConfigError(f"task = {task_id!r}: unknown task ID; expected one of {', '.join(TASKS)}")
    return gym.make(task_id, **kwargs).unwrapped
