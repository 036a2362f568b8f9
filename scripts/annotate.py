"""Inspect and correct the subtask annotation (intercept, grasp, carry, release) of a demo dataset.

Examples:
  python scripts/annotate.py --dataset outputs/real/real.hdf5                       # table of subtask ends
  python scripts/annotate.py --dataset outputs/real/real.hdf5 --plot outputs/annotation   # one PNG per demo
  python scripts/annotate.py --dataset outputs/real/real.hdf5 --set demo_3:grasp=57 --set demo_9:carry=190
  python scripts/annotate.py --dataset imported.hdf5 --write                         # store computed signals

The table shows, per demo, the step at which each subtask ends (stored signals, else computed from the
tracking signals; see r2s2r.data.annotate). The plots show the signals the ends are found from (hand closure,
hand-object distance, object lift, object-bin distance) with the ends marked. --set moves a subtask end by hand;
the correction is kept in the demo attr `subtask_corrections` and the term signals under
obs/datagen_info/subtask_term_signals are rewritten. --write stores the signals for every demo. Changes are made
on a copy that replaces the dataset only when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import h5py
import numpy as np

from r2s2r import cli
from r2s2r.data.annotate import (
    CORRECTIONS_ATTR,
    TERM_SIGNALS,
    AnnotationError,
    annotate,
    demo_annotation,
    signal_traces,
)
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN
from r2s2r.data.hdf5 import DatasetError, DemoReader


def parse_corrections(items: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for item in items:
        demo, colon, rest = item.partition(":")
        name, eq, step = rest.partition("=")
        if not (colon and eq and demo and step.lstrip("-").isdigit()) or name not in TERM_SIGNALS:
            raise AnnotationError(f"--set {item!r}: expected demo_N:<{'|'.join(TERM_SIGNALS)}>=<step>")
        out.setdefault(demo, {})[name] = int(step)
    return out


def plot_demo(path: Path, name: str, info: dict, ends: tuple[int, ...], dt: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = signal_traces(info, name)
    t = np.arange(len(traces["closure"])) * dt
    fig, axes = plt.subplots(4, 1, figsize=(8, 7), sharex=True)
    labels = {"closure": "hand closure", "hand_object_distance": "hand-object (m)", "object_lift": "object lift (m)",
              "object_bin_distance": "object-bin (m)"}
    for ax, (key, label) in zip(axes, labels.items()):
        ax.plot(t, traces[key])
        ax.set_ylabel(label, fontsize=8)
        for end, sub in zip(ends, TERM_SIGNALS):
            ax.axvline(end * dt, color="k", ls="--", lw=0.8)
            if ax is axes[0]:
                ax.text(end * dt, ax.get_ylim()[1], f"{sub} ends ", fontsize=7, va="top", ha="right", rotation=90)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(name)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".partial.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)


# What the term signals come from (obs/datagen_info/<path>).
INFO_PATHS = (f"eef_pose/{EEF}", f"object_pose/{OBJECT}", f"gripper_action/{EEF}", f"object_pose/{TARGET_BIN}")


def _corrections(attrs: dict, where: str) -> dict:
    """A demo's stored corrections (attr `subtask_corrections`, JSON {subtask: step})."""
    raw = attrs.get(CORRECTIONS_ATTR, "{}") or "{}"
    try:
        stored = json.loads(raw)
    except (TypeError, ValueError):
        stored = None
    if not isinstance(stored, dict):
        raise DatasetError(f"{where}: attr {CORRECTIONS_ATTR!r} = {raw!r}: expected a JSON object {{subtask: step}}")
    return stored


def rewrite(dataset: Path, corrections: dict[str, dict[str, int]]) -> None:
    """Store term signals for every demo (applying `corrections`) on a copy, then replace the dataset."""
    fields = tuple(f"obs/datagen_info/{k}" for k in INFO_PATHS)
    signals, stored = {}, {}
    with DemoReader(dataset, min_demos=1, fields=fields, finite=fields,
                    purpose="the subtask term signals are computed from them") as reader:
        for name in corrections:
            if name not in reader.names:
                raise AnnotationError(f"{dataset}: --set names {name!r}, which is not a demo of it")
        for name in reader.names:
            where = f"{dataset}: {name}"
            stored[name] = {**_corrections(reader.attrs(name), where), **corrections.get(name, {})}
            info = reader.load(name)["obs"]["datagen_info"]
            signals[name] = annotate(info, stored[name], where).term_signals()
    tmp = dataset.with_name(dataset.name + ".annotating")
    shutil.copyfile(dataset, tmp)
    try:
        with h5py.File(tmp, "a") as f:
            data = f["data"]
            for name, terms in signals.items():
                group = data[name]
                if "obs/datagen_info/subtask_term_signals" in group:
                    del group["obs/datagen_info/subtask_term_signals"]
                for key, value in terms.items():
                    group.create_dataset(f"obs/datagen_info/subtask_term_signals/{key}", data=value)
                group.attrs[CORRECTIONS_ATTR] = json.dumps(stored[name])
        os.replace(tmp, dataset)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="HDF5 demo dataset")
    p.add_argument("--plot", type=cli.output_dir, default=None, metavar="DIR",
                   help="write one PNG of signals and subtask ends per demo")
    p.add_argument("--set", dest="corrections", action="append", default=[], metavar="DEMO:SUBTASK=STEP",
                   help="move a subtask end by hand (repeatable)")
    p.add_argument("--write", action="store_true", help="store the term signals for every demo")
    args = p.parse_args(argv)
    dataset = Path(args.dataset)
    try:
        corrections = parse_corrections(args.corrections)
        if corrections or args.write:
            rewrite(dataset, corrections)
        with DemoReader(dataset, min_demos=1) as reader:
            dt = 1.0 / float(reader.env_args.get("control_hz", 20.0))
            print(f"{'demo':<10} {'steps':>6} " + " ".join(f"{s + ' ends':>14}" for s in TERM_SIGNALS) + "  source")
            for name in reader.names:
                attrs = reader.attrs(name)
                info = reader.load(name).get("obs", {}).get("datagen_info", {})
                ann = demo_annotation(info, attrs, f"{dataset}: {name}")
                stored = "stored" if "subtask_term_signals" in info else "computed"
                fixed = _corrections(attrs, f"{dataset}: {name}")
                note = f"{stored}, corrected {sorted(fixed)}" if fixed else stored
                print(f"{name:<10} {ann.length:>6} " + " ".join(f"{e:>8} {e * dt:4.1f}s" for e in ann.ends)
                      + f"  {note}")
                if args.plot:
                    Path(args.plot).mkdir(parents=True, exist_ok=True)
                    plot_demo(Path(args.plot) / f"{name}.png", name, info, ann.ends, dt)
    except (AnnotationError, DatasetError, FileNotFoundError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
