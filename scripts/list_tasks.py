"""List every registered task ID with a one-line description.

Usage: python scripts/list_tasks.py   (or: isaaclab.sh -p scripts/list_tasks.py)
"""

import argparse

import r2s2r.tasks as tasks


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    width = max(len(t) for t in tasks.TASKS)
    for task_id, spec in tasks.TASKS.items():
        print(f"{task_id:<{width}}  {spec.description}")


if __name__ == "__main__":
    main()
