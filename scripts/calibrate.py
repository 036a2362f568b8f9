"""Ground the world: run every calibration on one recorded session and write the grounded world file.

Examples:
  python scripts/record_calibration.py --output outputs/calibration/session.h5
  python scripts/calibrate.py --session outputs/calibration/session.h5   # writes outputs/calibration/grounded.yaml
  cp outputs/calibration/grounded.yaml configs/world/grounded.yaml       # adopt it: a separate, deliberate step

The tracked world (configs/world/grounded.yaml, which the grounded tasks load) changes only when you copy a result
over it or name it with --output; by default the result goes under outputs/, so a trial run replaces nothing.

The estimators start from the hand-written ungrounded world (`--start`) and read only the session: chessboard
images, tracker measurements, joint logs, scale readings. The world file is checked by the world loader before it
replaces any existing file (written under a temporary name, then renamed); its `provenance` section records the
session's SHA-256 and the residuals printed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.calibration import CalibrationError  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--session", default="outputs/calibration/session.h5", help="recorded calibration session")
    p.add_argument("--start", default="ungrounded", help="world the estimates replace (name or .yaml path)")
    p.add_argument("--output", type=cli.output_file, default="outputs/calibration/grounded.yaml",
                   help="grounded world file to write (configs/world/grounded.yaml to replace the tracked world)")
    return p.parse_args(argv)


def format_residuals(residuals: dict) -> str:
    lines = [f"{'stage':<22} {'residual':<26} value", "-" * 60]
    for stage, values in residuals.items():
        for key, value in values.items():
            if isinstance(value, dict):  # a self-check
                value = f"{value['residual']:.3g} {value['unit']} (bound {value['bound']:.3g})"
            lines.append(f"{stage:<22} {key:<26} {value:.4g}" if isinstance(value, float)
                         else f"{stage:<22} {key:<26} {value}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tqdm import tqdm

    from r2s2r.calibration.pipeline import ground, grounded_world_data
    from r2s2r.cell.world import load_world, world_to_yaml

    session, output = Path(args.session), Path(args.output)
    if not session.is_file():
        print(f"error: session = {str(session)!r}: no such file; record one with scripts/record_calibration.py",
              file=sys.stderr)
        return 2
    try:
        start = load_world(args.start)
        with tqdm(total=len(start.cell.cameras) + 6, desc="calibrating", unit="stage") as bar:
            def progress(what: str) -> None:  # called as each stage starts
                if bar.postfix:
                    bar.update(1)
                bar.set_postfix_str(what)

            cell, residuals = ground(session, start, progress)
            bar.update(1)
        data = grounded_world_data(cell, start, session, residuals)
        output.parent.mkdir(parents=True, exist_ok=True)
        partial = output.with_name(output.stem + ".partial.yaml")
        try:
            partial.write_text(world_to_yaml(data))
            load_world(partial)  # the file must load exactly as every consumer will load it
            partial.replace(output)
        finally:
            partial.unlink(missing_ok=True)  # published whole or not at all
    except (CalibrationError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_residuals(residuals))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
