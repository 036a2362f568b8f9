"""Task registry. Importing this module registers every task ID with gymnasium (lazy entry points)."""

from __future__ import annotations

import gymnasium as gym

from r2s2r.cell.spec import ConfigError

# Task ID -> one-line description (what scripts/list_tasks.py prints).
TASKS: dict[str, str] = {
    "R2S2R-PickSort-v0": "Conveyor pick-and-sort on the nominal cell: pick the object off the moving belt, "
    "place it in the bin of its colour.",
}

for _task_id in TASKS:
    if _task_id not in gym.registry:
        gym.register(id=_task_id, entry_point="r2s2r.tasks.pick_sort.env:PickSortEnv", disable_env_checker=True)


def make(task_id: str, **kwargs) -> gym.Env:
    """`gym.make` with a clear error for unknown IDs; returns the unwrapped environment."""
    if task_id not in TASKS:
        raise ConfigError(f"task = {task_id!r}: unknown task ID; expected one of {', '.join(TASKS)}")
    return gym.make(task_id, **kwargs).unwrapped
