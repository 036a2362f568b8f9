"""Render a dataset's camera views again from its stored states (after a camera is remounted, added or resized).

Examples:
  python scripts/render_states.py --dataset outputs/real/real.hdf5 --cameras head_left right_wrist \\
      --output outputs/real/real_wrist.hdf5
  python scripts/render_states.py --dataset outputs/sim/wg_bg.hdf5 --cameras right_wrist --image-size 64 \\
      --output outputs/sim/wg_bg_wrist64.hdf5

Every demo's task (its `env_args` task ID: a simulated variant, or the reality twin with the truth file it was
recorded on) is reset with the demo's seed and condition, so lighting and colours are the episode's own; each
stored state is restored and the cameras observe it, lens model and sensor noise included. The views of the
listed cameras replace or join the recorded ones; actions, states, proprioception and datagen_info are copied
unchanged. Only for datasets whose every step stores its state (`generate.py` and `collect_real.py` write them):
a hardware cell's images cannot be rendered again.

The output appears only when complete; an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402


def main(argv=None) -> int:
    from r2s2r.datagen.config import ALL_CAMERAS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="HDF5 dataset with per-step states")
    p.add_argument("--output", type=cli.output_file, required=True,
                   help="the new dataset (must differ from --dataset)")
    p.add_argument("--cameras", nargs="+", required=True, choices=ALL_CAMERAS, help="cameras to render")
    p.add_argument("--image-size", type=cli.int_in(8, 1024), default=None,
                   help="square image size in pixels (default: the dataset's own)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if Path(args.output).resolve() == Path(args.dataset).resolve():
        p.error(f"--output {args.output}: expected a file other than --dataset (the source is read while writing)")

    from r2s2r.data.hdf5 import DemoReader
    from r2s2r.datagen.replay import render_dataset

    size = (args.image_size, args.image_size) if args.image_size else None
    try:
        done = render_dataset(args.dataset, args.output, tuple(args.cameras), size, progress=not args.no_progress)
        with DemoReader(args.output) as reader:
            print(f"wrote {args.output}: {len(reader)} demos ({done} rendered now) with {args.cameras}")
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: rerun the same command to resume ({args.output}.partial)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
