"""The cell's tasks as Isaac Lab environments (Newton physics with the MuJoCo Warp solver, no Kit).

Importing this package registers the gymnasium IDs with string entry points only, so it imports neither Isaac Lab
nor Warp; Isaac Lab's task listing and `parse_env_cfg` reach it through the `isaaclab.tasks` entry point of
`source/r2s2r/pyproject.toml`. `import r2s2r` does not import this package.
Each ID carries an `env_cfg_entry_point` and an rsl-rl agent (`rsl_rl_cfg_entry_point`).
"""

from __future__ import annotations

import gymnasium as gym

ENV_ENTRY_POINT = "r2s2r.isaaclab_tasks.pick_sort.env:PickSortCellEnv"
CFG_MODULE = "r2s2r.isaaclab_tasks.pick_sort.env_cfg"
AGENTS_MODULE = "r2s2r.isaaclab_tasks.pick_sort.agents.rsl_rl_ppo_cfg"
RESIDUAL_MODULE = "r2s2r.isaaclab_tasks.pick_sort.residual"

# One ID per world the cell is built from; the factories build that world's USD stage.
TASKS = {
    "Isaac-R2S2R-PickSort-Grounded-v0": "grounded_cfg",
    "Isaac-R2S2R-PickSort-Ungrounded-v0": "ungrounded_cfg",
    "Isaac-R2S2R-PickSort-Twin-v0": "twin_cfg",
}
# The grounded cell with the scripted controller as a base and the policy's action a bounded correction of its joint
# targets (pick_sort/residual.py).
RESIDUAL_TASK = "Isaac-R2S2R-PickSort-Residual-Grounded-v0"

for _task_id, _factory in TASKS.items():
    if _task_id not in gym.registry:
        gym.register(id=_task_id, entry_point=ENV_ENTRY_POINT, disable_env_checker=True,
                     kwargs={"env_cfg_entry_point": f"{CFG_MODULE}:{_factory}",
                             "rsl_rl_cfg_entry_point": f"{AGENTS_MODULE}:PickSortPPORunnerCfg"})
if RESIDUAL_TASK not in gym.registry:
    gym.register(id=RESIDUAL_TASK, entry_point=f"{RESIDUAL_MODULE}:PickSortResidualEnv", disable_env_checker=True,
                 kwargs={"env_cfg_entry_point": f"{RESIDUAL_MODULE}:residual_grounded_cfg",
                         "rsl_rl_cfg_entry_point": f"{AGENTS_MODULE}:PickSortResidualPPORunnerCfg"})
