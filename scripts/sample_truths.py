"""Write sampled truth files: plausible reality worlds drawn around the ungrounded world, one per seed.

Examples:
  python scripts/sample_truths.py --count 20 --seed 0 --out-dir outputs/truths
  python scripts/record_calibration.py --reality-file outputs/truths/truth_000003.yaml --output s3.h5

File k is `sample_truth(seed + k)` (r2s2r/real/truths.py) written to <out-dir>/truth_<seed + k>.yaml, with a header
naming its seed; the same seed always gives the same file. Each is checked as the world loader checks a file and
written under a temporary name, then renamed. Like configs/world/reality*.yaml, only the twin (--reality-file),
the mismatch report and tests read them.

Every calibrated parameter and the residual gap (lens noise, object friction, clutter) is perturbed by m
drawn from its range (about twice the largest deviation of today's truths, both signs unless the nominal sits at
a bound; "gap" marks the residual gap):
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2s2r import cli
from r2s2r.core import ConfigError

MAX_COUNT = 10_000


def parse_args(argv=None) -> argparse.Namespace:
    from r2s2r.real.truths import describe_ranges

    p = argparse.ArgumentParser(description=__doc__ + describe_ranges(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=cli.int_in(1, MAX_COUNT), default=10, help="how many truth files to write")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the first file; file k uses seed + k")
    p.add_argument("--out-dir", type=cli.output_dir, default="outputs/truths", help="folder the files go to")
    args = p.parse_args(argv)
    if args.seed + args.count - 1 > cli.MAX_SEED:
        p.error(f"--seed {args.seed} with --count {args.count}: the last seed would pass {cli.MAX_SEED}; expected "
                f"seed + count - 1 <= {cli.MAX_SEED}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from r2s2r.cell.world import load_world
    from r2s2r.files import write_text_atomic
    from r2s2r.real.truths import sample_truth, truth_text

    out = Path(args.out_dir)
    try:
        base = load_world("ungrounded").data  # the ranges are deviations from this world
        out.mkdir(parents=True, exist_ok=True)
        for seed in range(args.seed, args.seed + args.count):
            path = out / f"truth_{seed:06d}.yaml"
            write_text_atomic(path, truth_text(sample_truth(seed, base)))
            print(f"wrote {path}")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
