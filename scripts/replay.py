"""Replay check: re-execute a dataset's stored actions from its stored initial states and count successes.

Example:
  python scripts/replay.py --dataset outputs/sim/wg_bg.hdf5 --min-rate 0.99

Exits 1 when fewer than --min-rate of the replayed demos succeed again (and lists those that did not).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402
from r2s2r.datagen.replay import replay_dataset  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="HDF5 dataset written by generate.py (or any with states)")
    p.add_argument("--limit", type=cli.positive_int, default=None, help="replay only the first N demos")
    p.add_argument("--min-rate", type=cli.unit_interval, default=0.99, help="fraction of demos that must succeed again")
    args = p.parse_args(argv)
    try:
        report = replay_dataset(args.dataset, args.limit, progress=True)
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, why in report.failures.items():
        print(f"  {name}: {why}")
    print(f"{args.dataset}: {report.succeeded} of {report.replayed} demos succeed again on replay ({report.rate:.1%})")
    return 0 if report.rate >= args.min_rate else 1


if __name__ == "__main__":
    sys.exit(main())
