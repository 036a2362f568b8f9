"""Upgrade a demo dataset written by an older r2s2r (format_version 0 or 1: flat datagen_info poses) to the current
layout (format_version 2), the one Isaac Lab Mimic loads as source demos and robomimic trains on.

Examples:
  python scripts/convert_dataset.py outputs/real.hdf5                       # in place
  python scripts/convert_dataset.py outputs/real.hdf5 --output outputs/real_v2.hdf5
"""

from __future__ import annotations

import argparse
import sys

from r2s2r import cli
from r2s2r.data.hdf5 import FORMAT_VERSION, DatasetError, upgrade_dataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Every demo is read and checked (r2s2r.data.hdf5.DemoReader), converted (datagen_info poses to "
        "(T, 4, 4) matrices per end-effector and object, initial_state to (1, N), env settings under "
        "env_args['env_kwargs']) and written with next_obs, rewards, dones and the train/valid masks. The new file "
        "is written to OUTPUT.partial and renamed to OUTPUT only when complete, so a failed or interrupted run "
        "leaves the source as it was (and no OUTPUT.partial); rerun it. A file already at the current version is "
        "left alone when converted in place. Exit status 2: missing or malformed dataset, or an OUTPUT that cannot "
        "be written (refused before any work).")
    parser.add_argument("dataset", help="HDF5 demo dataset to upgrade")
    parser.add_argument("--output", "-o", type=cli.output_file, default=None, help="where to write the upgraded "
                        "file (default: replace DATASET once the new file is complete)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output = args.output or args.dataset
    try:
        count = upgrade_dataset(args.dataset, output)
    except (DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if count == 0:
        print(f"{args.dataset} is already at format_version {FORMAT_VERSION}; nothing to do")
    else:
        print(f"wrote {output}: {count} demos at format_version {FORMAT_VERSION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
