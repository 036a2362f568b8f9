"""Isaac Lab 3.0's launcher for the scripts that run the cell's Isaac Lab tasks (scripts/generate.py, play.py and
the parity measurement). Importing this module imports nothing of Isaac Lab: a script that runs a MuJoCo task never
does.

`add_launcher_options` gives a script's parser the launcher's options (`isaaclab.app.add_launcher_args`: --device,
--viz, --verbose, --kit_args, ...) where its command line names an Isaac Lab task; `launch` runs the task under
`isaaclab.app.launch_simulation`, which starts Kit only where the config needs it. The launcher also reads a
`physics` key from the parsed options and would put a default physics config of that backend in place of every one
in the task's config (for `newton_mjwarp`, a bare `NewtonCfg()`, losing the cell's solver options and contact
buffers), so no script of the cell has an option of that name.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from r2s2r.isaaclab_tasks import TASKS

if TYPE_CHECKING:
    from r2s2r.isaaclab_tasks.pick_sort.env_cfg import PickSortCellEnvCfg


def add_launcher_options(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> bool:
    """Add the launcher's options to `parser` when the command line `argv` (default: sys.argv[1:]) names one of the
    cell's Isaac Lab task IDs with --task, or asks for help. Returns whether it names one."""
    argv = sys.argv[1:] if argv is None else list(argv)
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--task")
    isaaclab = peek.parse_known_args(argv)[0].task in TASKS
    if isaaclab or "-h" in argv or "--help" in argv:
        from isaaclab.app import add_launcher_args

        add_launcher_args(parser)
    return isaaclab


def launcher_device(args: argparse.Namespace) -> str | None:
    """The simulation device the launcher's --device names, or None where it was not given: its default, cuda:0, is
    meant for Isaac Lab's own tasks, and the cell's keep their config's device (the CPU) unless asked."""
    return args.device if getattr(args, "device_explicit", False) else None


def launch(cfg: PickSortCellEnvCfg, args: argparse.Namespace):
    """`launch_simulation(cfg, args)` for an environment of `cfg`. The launcher scans the config for what needs Kit;
    this config's camera sensors join the scene only when the environment is built, after that scan, so cameras drawn
    by Isaac RTX are passed on as the launcher's `require_kit`."""
    from isaaclab.app import launch_simulation

    args.require_kit = bool(cfg.cameras) and cfg.renderer == "isaac_rtx"
    return launch_simulation(cfg, args)
