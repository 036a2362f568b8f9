"""The mismatch report: grounded and ungrounded worlds against the twin's truth.

Examples:
  python scripts/world_report.py                                  # scripted episodes replayed
  python scripts/world_report.py --demos outputs/real.hdf5 --episodes 8 --output-dir outputs/world_report

Prints a table and writes, under --output-dir: report.md, report.json and plots (params.png: error per parameter
axis; replay.png: open-loop end-effector and object divergence over time; example.png: twin vs world renders of the
same states, with an example frame). Action sequences come from recorded real demos (--demos, Isaac Lab Mimic
HDF5) or, without demos, from scripted episodes run on the twin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402
from r2s2r.files import atomic_path, write_text_atomic  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grounded", default="grounded", help="grounded world (name or .yaml path)")
    p.add_argument("--ungrounded", default="ungrounded", help="ungrounded world (name or .yaml path)")
    p.add_argument("--reality-file", default=None, help="the twin's truth (default: R2S2R_REALITY_FILE, else "
                   "configs/world/reality.yaml)")
    p.add_argument("--demos", default=None, help="real demos (HDF5) whose actions are replayed")
    p.add_argument("--episodes", type=cli.positive_int, default=4, help="action sequences to replay")
    p.add_argument("--cameras", default="head_left,right_wrist", help="cameras compared image by image")
    p.add_argument("--image-size", type=cli.image_size, default=128, help="image height and width for the comparison")
    p.add_argument("--image-every", type=cli.positive_int, default=40,
                   help="compare images every this many control steps")
    p.add_argument("--output-dir", type=cli.output_dir, default="outputs/world_report",
                   help="where report files and plots go")
    return p.parse_args(argv)


def action_sequences(args, twin_env) -> list[tuple[int, str, np.ndarray]]:
    """(seed, condition, actions) to replay: from recorded demos, or scripted episodes run on the twin."""
    if args.demos:
        from r2s2r.data.hdf5 import DemoReader

        out = []
        with DemoReader(args.demos, min_demos=1, attrs=("seed",),
                        purpose="--demos: each demo's actions are replayed from its seed") as reader:
            for name in reader.names[:args.episodes]:
                attrs = reader.attrs(name)
                out.append((int(attrs["seed"]), str(attrs.get("condition", "nominal")), reader.load(name)["actions"]))
        return out
    from r2s2r.behavior.scripted import ScriptedPickPlace

    out = []
    for seed in range(args.episodes):
        controller = ScriptedPickPlace(twin_env.cfg.control_hz)
        obs, _ = twin_env.reset(seed=seed)
        actions = []
        while True:
            actions.append(controller(obs))
            obs, _, terminated, truncated, _ = twin_env.step(actions[-1])
            if terminated or truncated:
                break
        out.append((seed, "nominal", np.array(actions)))
    return out


def plot(path: Path, results: dict, units: dict, control_hz: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["parameters"]["ungrounded"])
    ung = np.array([results["parameters"]["ungrounded"][n] for n in names])
    grd = np.array([results["parameters"]["grounded"][n] for n in names])
    fig, ax = plt.subplots(figsize=(9, 5))
    y = np.arange(len(names))
    # Normalised by the ungrounded error so every axis shares one scale: 1 = no better than the tape measure.
    ax.barh(y, np.where(ung > 0, grd / np.maximum(ung, 1e-12), 0.0), color="tab:green", label="grounded")
    ax.axvline(1.0, color="tab:red", lw=1, label="ungrounded (= 1)")
    ax.set_yticks(y, [f"{n} [{units[n]}]" for n in names])
    ax.set_xlabel("error relative to the ungrounded world")
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    fig.tight_layout()
    with atomic_path(path / "params.png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for ax, key, title in zip(axes, ("ee", "object"), ("end effector", "object")):
        for world, colour in (("ungrounded", "tab:red"), ("grounded", "tab:green")):
            curve = np.array(results["replay"][world][key])
            ax.plot(np.arange(len(curve)) / control_hz, 1000 * curve, color=colour, label=world)
        ax.set_title(f"open-loop replay: {title}")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("position error vs twin (mm)")
        ax.legend()
    fig.tight_layout()
    with atomic_path(path / "replay.png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    import imageio.v2 as imageio
    from tqdm import tqdm

    from r2s2r.calibration import report
    from r2s2r.cell.world import load_world
    from r2s2r.real.twin import make_twin_env, reality_file
    from r2s2r.render.base import check_cameras
    from r2s2r.tasks.pick_sort.env import PickSortEnv

    out = Path(args.output_dir)
    try:
        truth = load_world(reality_file(args.reality_file))
        worlds = {"ungrounded": load_world(args.ungrounded), "grounded": load_world(args.grounded)}
        # Checked now, as the renderers would check them only after the first replay.
        for world in (truth, *worlds.values()):
            cameras = check_cameras(args.cameras.split(","), world.cell, "--cameras")
        # Replays run without cameras (rendering every step would dominate); images are compared on sampled states.
        twin = make_twin_env(args.reality_file, cameras=())
        envs = {name: PickSortEnv(world=str(w.path), cameras=()) for name, w in worlds.items()}
        sequences = action_sequences(args, twin)
    except (ConfigError, DatasetError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    results: dict = {"truth": str(truth.path), "worlds": {n: str(w.path) for n, w in worlds.items()},
                     "parameters": {n: report.parameter_errors(w.cell, truth.cell) for n, w in worlds.items()}}
    curves = {n: {"ee": [], "object": []} for n in worlds}
    images = {n: [] for n in worlds}
    examples = {}
    for seed, condition, actions in tqdm(sequences, desc="replaying", unit="sequence"):
        reference = report.replay(twin, seed, condition, actions)
        states = reference["states"][:: args.image_every]
        for name, env in envs.items():
            run = report.replay(env, seed, condition, actions)
            for key, err in report.divergence(run, reference).items():
                curves[name][key].append(err)
            diff, frame = report.image_difference(env, twin, states, cameras, args.image_size)
            images[name].append(diff)
            examples.setdefault(name, frame)
    # One frame for the eye: twin on top, the grounded world's render, then the ungrounded world's.
    example = np.concatenate([examples["grounded"], examples["ungrounded"][args.image_size:]], axis=0)

    def mean_curve(runs: list[np.ndarray]) -> list[float]:
        n = min(len(r) for r in runs)
        return np.mean([r[:n] for r in runs], axis=0).tolist()

    results["replay"] = {n: {k: mean_curve(v) for k, v in c.items()} for n, c in curves.items()}
    results["images"] = {n: {c: float(np.mean([d[c] for d in v])) for c in cameras} for n, v in images.items()}
    summary = dict(results["parameters"]["ungrounded"])
    rows = [(axis, report.axis_units()[axis], results["parameters"]["ungrounded"][axis],
             results["parameters"]["grounded"][axis]) for axis in summary]
    for key, label in (("ee", "replay: end effector"), ("object", "replay: object")):
        rows.append((label, "mm (mean over time)", 1000 * np.mean(results["replay"]["ungrounded"][key]),
                     1000 * np.mean(results["replay"]["grounded"][key])))
    for c in cameras:
        rows.append((f"image: {c}", "mean |RGB diff|", results["images"]["ungrounded"][c],
                     results["images"]["grounded"][c]))
    results["table"] = [{"axis": a, "unit": u, "ungrounded": float(g0), "grounded": float(g1),
                         "grounded_closer": bool(g1 < g0 or g1 == g0 == 0)} for a, u, g0, g1 in rows]

    lines = ["| axis | unit | ungrounded | grounded | grounded closer |", "|---|---|---:|---:|:---:|"]
    lines += [f"| {r['axis']} | {r['unit']} | {r['ungrounded']:.4g} | {r['grounded']:.4g} | "
              f"{'yes' if r['grounded_closer'] else 'NO'} |" for r in results["table"]]
    table = "\n".join(lines)
    print(table)
    out.mkdir(parents=True, exist_ok=True)
    # Plots first, the report files last (each written whole, then renamed): report.md names the others.
    plot(out, results, report.axis_units(), twin.cfg.control_hz)
    with atomic_path(out / "example.png") as tmp:
        imageio.imwrite(tmp, example, format="png")
    write_text_atomic(out / "report.json", json.dumps(results, indent=1))
    write_text_atomic(out / "report.md",
                      f"# World mismatch report\n\nTruth: `{truth.path}`; {len(sequences)} replayed action sequences."
                      f"\n\n{table}\n\n![parameters](params.png)\n\n![replay](replay.png)\n\n"
                      "![twin (top), grounded, ungrounded (bottom)](example.png)\n")
    print(f"wrote {out}/report.md, report.json, params.png, replay.png, example.png")
    for env in (twin, *envs.values()):
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
