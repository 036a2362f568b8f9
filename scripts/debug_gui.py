"""Open Isaac Sim with the r2s2r debug window (the Kit extension in exts/r2s2r.debug).

Examples:
  isaaclab -p scripts/debug_gui.py
  isaaclab -p scripts/debug_gui.py --task Isaac-R2S2R-PickSort-Grounded-v0 --seed 3 --condition lighting
  isaaclab -p scripts/debug_gui.py --task Isaac-R2S2R-PickSort-Twin-v0 --viz none --steps 20   # headless check

The window chooses a task ID (a MuJoCo task, or one of the cell's Isaac Lab tasks: Newton physics, Isaac RTX
cameras), resets, steps and plays it with the scripted controller, a dataset episode or a policy checkpoint, and
shows its cameras, its episode's randomization (object, colour, belt set-point and drive, lighting) and its
privileged state. An Isaac Lab task's scene is built on Kit's stage, so the viewport shows it as it steps; a MuJoCo
task's cell is opened as a stage of its own and posed from MuJoCo every step.

Kit starts through Isaac Lab's launcher (its options below) with the Kit visualizer, that is, Isaac Sim's GUI,
unless --viz says otherwise. This script's loop services the window: Isaac Lab environments render through Kit's
update, so they are built and stepped here, between updates, never from inside one. With --task the window loads
that task at start; with --steps N it steps it N times, prints the status and the randomization and exits. Needs Isaac
Sim (an RTX GPU); elsewhere it exits with status 2 and says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from r2s2r import cli

EXTENSIONS = Path(__file__).resolve().parents[1] / "exts"
EXTENSION = "r2s2r.debug"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default=None, help="load this task ID at start (scripts/list_tasks.py lists them)")
    p.add_argument("--seed", type=cli.int_in(0), default=0, help="the episode's seed (default: 0)")
    p.add_argument("--condition", default="nominal", help="the reset condition (default: nominal)")
    p.add_argument("--steps", type=cli.int_in(1), default=None,
                   help="step the --task this many times, print its status and randomization, and exit")
    if importlib.util.find_spec("isaaclab") is not None:
        from isaaclab.app import add_launcher_args

        add_launcher_args(p)
    args = p.parse_args(argv)
    if args.steps is not None and args.task is None:
        p.error("--steps: give the --task to step")
    if args.task is not None:
        from r2s2r.debug_session import task_ids
        from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS

        if args.task not in task_ids():
            p.error(f"--task {args.task}: unknown task ID; expected one of {', '.join(task_ids())}")
        if args.condition not in CONDITIONS:
            p.error(f"--condition {args.condition}: expected one of {', '.join(CONDITIONS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if importlib.util.find_spec("isaacsim") is None:
        print("error: the debug window runs inside Isaac Sim (Kit, on an RTX GPU), which does not import here; "
              "install Isaac Lab 3.0 with Isaac Sim (docker/Dockerfile.isaaclab) and run "
              "`isaaclab -p scripts/debug_gui.py`", file=sys.stderr)
        return 2
    from isaaclab.app import launch_simulation

    args.require_kit = True  # the window is a Kit extension, whatever the config needs
    args.visualizer_intent = {"has_kit_visualizer": True}  # Isaac Sim's GUI, unless --viz chose otherwise
    with launch_simulation(None, args):
        import omni.kit.app

        app = omni.kit.app.get_app()
        manager = app.get_extension_manager()
        manager.add_path(str(EXTENSIONS))
        manager.set_extension_enabled_immediate(EXTENSION, True)
        import r2s2r_debug

        window = r2s2r_debug.window()
        window.loop_owner = True
        if args.task is not None:
            window.select(args.task, args.seed, args.condition)
            window.request("load")
            window.service()
            if window.session is None:  # the window's status says why
                print(f"error: {args.task} did not load: {window.status_text}", file=sys.stderr)
                return 2
        while app.is_running():
            if args.steps is not None and (window.session.step_index >= args.steps or window.session.done):
                print(window.session.status)
                for key, value in window.session.randomization().items():
                    print(f"  {key}: {value}")
                return 0
            if args.steps is not None:
                window.request("step")
            window.service()
            app.update()
    return 0


if __name__ == "__main__":
    sys.exit(main())
