"""Argument types shared by the command-line tools: numbers in a range and writable output paths.

Each is an argparse `type`, so a bad value is refused by argparse itself before any work starts: exit status 2 and
`error: argument --fps: invalid value '0': expected an integer >= 1`. Non-finite numbers fail every range (all
bounds are finite), and string defaults go through the same check as given values.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from r2s2r.files import OutputError, check_output_dir, check_output_file

MAX_SEED = 2**31 - 1


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An integer in [lo, hi] (hi None: no upper bound)."""
    expected = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected {expected}") from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected {expected}")
        return value

    parse.__name__ = f"int_in_{lo}_{hi}"
    return parse


def float_in(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False,
             unit: str = "") -> Callable[[str], float]:
    """A finite number between lo and hi (inclusive unless the end is open)."""
    interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    expected = f"a finite number in {interval}" + (f" {unit}" if unit else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected {expected}") from None
        ok = math.isfinite(value) and (lo < value if lo_open else lo <= value) and \
            (value < hi if hi_open else value <= hi)
        if not ok:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected {expected}")
        return value

    parse.__name__ = f"float_in_{lo:g}_{hi:g}"
    return parse


positive_int = int_in(1)
non_negative_int = int_in(0)
seed = int_in(0, MAX_SEED)
unit_interval = float_in(0.0, 1.0)
image_size = int_in(1, 2048)  # a camera image's height and width, as the task environments accept them


def _checked_path(check, doc: str):
    """An argparse type that runs `check` (files.check_output_file or check_output_dir) on the path."""
    def parse(text: str) -> str:
        try:
            check(text, "path")
        except OutputError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("path = ")) from None
        return text

    parse.__doc__ = doc
    return parse


output_file = _checked_path(check_output_file, "A file path that can be written (not a folder; its folder exists or "
                                               "can be made).")
output_dir = _checked_path(check_output_dir, "A folder path that exists and is writable, or can be made.")


def ensemble_decay(text: str) -> float | str:
    """--ensemble's value: a decay in [-5, 5], or "off" (receding horizon, whatever the checkpoint says)."""
    return "off" if text == "off" else float_in(-5.0, 5.0)(text)


def add_execution_args(parser: argparse.ArgumentParser) -> None:
    """--execute, --ensemble and --hand-cover: how a deployed policy executes its action chunks and which frames its
    tracker reads, instead of the checkpoint's `policy.execute`, `policy.ensemble` and `object_centric.hand_cover`
    (`execution_of` turns them into `load_agent`'s `execution`)."""
    parser.add_argument("--execute", type=positive_int, default=None,
                        help="receding horizon: execute this many actions of each chunk, then predict again "
                             "(default: the checkpoint's policy.execute)")
    parser.add_argument("--ensemble", type=ensemble_decay, default=None, metavar="DECAY",
                        help="temporal ensembling: predict a chunk every step and execute the mean of every chunk's "
                             "action for that step, a chunk predicted a steps ago weighted exp(-DECAY a); 'off' for "
                             "receding horizon (default: the checkpoint's policy.ensemble)")
    parser.add_argument("--hand-cover", type=float_in(0.0, 1.0), default=None, metavar="METRES",
                        help="object-centric policies: frames where the hand comes this close to the head camera's "
                             "line of sight to the tracked object add nothing to its yaw, size and bin; 0 fuses every "
                             "frame (default: the checkpoint's object_centric.hand_cover)")


def execution_of(args: argparse.Namespace) -> dict:
    """The execution settings given on the command line (`add_execution_args`), for `load_agent`."""
    given = {} if args.execute is None else {"execute": args.execute}
    if args.ensemble is not None:
        given["ensemble"] = None if args.ensemble == "off" else args.ensemble
    if args.hand_cover is not None:
        given["hand_cover"] = args.hand_cover
    return given
