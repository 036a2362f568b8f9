"""List every registered task ID with a one-line description: the MuJoCo tasks, then the cell's Isaac Lab tasks.

Usage: python scripts/list_tasks.py   (or: isaaclab -p scripts/list_tasks.py, isaaclab.sh -p scripts/list_tasks.py)
"""

import argparse

import r2s2r.isaaclab_tasks as isaaclab_tasks
import r2s2r.tasks as tasks


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    rows = {task_id: spec.description for task_id, spec in tasks.TASKS.items()}
    for task_id, factory in isaaclab_tasks.TASKS.items():
        world = factory.removesuffix("_cfg")
        use = ("generate.py / play.py with --generator mimic|planner" if task_id in tasks.ISAACLAB_GENERATION_WORLDS
               else "the real side: play.py, no data generation")
        rows[task_id] = f"The cell in Isaac Lab (Newton, MuJoCo Warp solver), {world} world ({use})."
    rows[isaaclab_tasks.RESIDUAL_TASK] = ("Isaac Lab, grounded world: an rsl-rl policy's bounded corrections of the "
                                          "scripted controller's joint targets (isaaclab train --rl_library rsl_rl).")
    width = max(map(len, rows))
    for task_id, description in rows.items():
        print(f"{task_id:<{width}}  {description}")


if __name__ == "__main__":
    main()
