"""Export an HDF5 demo dataset (real demos from collect_real.py or generated ones from generate.py) as a LeRobot v3
dataset: parquet frames, one MP4 video per camera, and meta/ (info, tasks, episodes, stats)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from r2s2r.core import ConfigError
from r2s2r.data.hdf5 import DatasetError
from r2s2r.data.lerobot import EPISODE_ATTRS, VIDEO_CODECS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Each demo becomes an episode: observation.state (the demo's proprio arrays, float32, named per column "
        "in meta/info.json), action (27), observation.images.<camera> for every camera, and the task string (the "
        "demo's prompt attr, else the task ID); fps is the dataset's control rate. Per-episode attrs "
        f"({', '.join(EPISODE_ATTRS)}, the source group, real/sim and the source file) are columns r2s2r/<attr> "
        "of meta/episodes/. Load it with LeRobotDataset(repo_id, root=OUTPUT). The dataset is written to a "
        "temporary folder beside OUTPUT and renamed when complete. Exit status 2: missing or malformed dataset, or "
        "an output path that cannot be written.")
    parser.add_argument("--dataset", required=True, help="HDF5 demo dataset to export")
    parser.add_argument("--output", "-o", required=True, help="folder to create for the LeRobot dataset")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists (once the new "
                        "dataset is complete)")
    parser.add_argument("--vcodec", choices=VIDEO_CODECS, default="libsvtav1",
                        help="video codec of the MP4 streams (default: %(default)s, LeRobot's AV1 default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Quiet the libraries under LeRobot's writer: the AV1 encoder prints its configuration for every video and
    # `datasets` a progress bar for every episode, which would bury the one bar over episodes.
    os.environ.setdefault("SVT_LOG", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    try:
        from tqdm import tqdm

        from r2s2r.data.lerobot import export_lerobot, lerobot_dataset_class
        lerobot_dataset_class()  # LeRobot imported before the clock starts, so the rate is the export's own
        start = time.perf_counter()
        done = export_lerobot(args.dataset, args.output, overwrite=args.overwrite, vcodec=args.vcodec,
                              progress=None if args.no_progress else lambda names: tqdm(names, unit="episode"))
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    print(f"wrote {args.output}: {done['episodes']} episodes, {done['frames']} frames at {done['fps']} fps, cameras "
          f"{', '.join(done['cameras']) or 'none'} ({done['frames'] / seconds:.0f} frames/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
