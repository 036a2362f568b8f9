"""Collect teleoperated demonstrations on the real cell (here: the reality twin) into an HDF5 demo dataset.

Examples:
  python scripts/collect_real.py --num-demos 100 --output outputs/real.hdf5
  python scripts/collect_real.py --num-demos 4 --output /tmp/real.hdf5 --cameras right_wrist --image-size 32
  python scripts/collect_real.py --output outputs/real.hdf5 --import lab_a.hdf5 lab_b.hdf5

Each attempt resets the cell under the nominal condition with the next seed (--seed, --seed + 1, ...) and lets the
human-teleoperator model (r2s2r.real.teleop.HumanTeleop, with a style drawn from the same seed) perform the
trial. Only successful trials are kept; failed ones are discarded, as an operator's botched takes are.

What each kept demo holds (layout of r2s2r.data.hdf5, format_version 2: what Isaac Lab Mimic loads as source
demos and robomimic trains on):
  actions (T, 27); obs/<camera> uint8 (T, S, S, 3) and obs/{arm_q, arm_dq, hand_q, ee_pose}; states (T, nq+nv) and
  initial_state (1, nq+nv): the twin's simulator state (a hardware cell has none); obs/datagen_info in Isaac Lab
  Mimic's layout (r2s2r.data.datagen_info): (T, 4, 4) poses eef_pose/right, target_eef_pose/right,
  object_pose/{object, target_bin}, gripper_action/right, the rest of the tracking, and
  subtask_term_signals/{intercept, grasp, carry} (automatic subtask annotation, r2s2r.data.annotate; inspect or
  correct it with scripts/annotate.py); next_obs, rewards, dones; the file's mask/{train, valid}.
  Attrs: seed, success, condition, object, colour, belt_speed, source, prompt, teleop_style (JSON).

Resuming: the dataset is written to OUTPUT.partial (flushed after each demo) and renamed to OUTPUT when the run
ends. After an interruption (Ctrl-C, a kill, a crash), rerun the same command: the demos already written are
kept and collection continues with the seeds after the last one attempted. A finished OUTPUT with enough demos
is left as it is; asking for more demos extends it. A run that ends with fewer demos than asked (--max-attempts
reached) publishes nothing: its demos stay in OUTPUT.partial, and a rerun with a larger --max-attempts goes on.

--import copies demos recorded elsewhere in the same layout into OUTPUT (after checking every one of them: actions
(T, 27) and finite, every array one row per action, the same fields and shapes as OUTPUT's demos) instead of
collecting. Demos already imported from the same file are not imported twice.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data import DatasetError, DemoReader, DemoWriter  # noqa: E402
from r2s2r.data.annotate import AnnotationError  # noqa: E402
from r2s2r.data.episode import EpisodeRecorder  # noqa: E402

ENV_NAME = "R2S2R-PickSort-Real-v0"
CONDITION = "nominal"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-demos", type=cli.int_in(1, 1_000_000), default=100,
                   help="successful demos to end up with in OUTPUT")
    p.add_argument("--output", type=cli.output_file, default="outputs/real.hdf5",
                   help="dataset path (written as OUTPUT.partial first)")
    p.add_argument("--reality-file", default=None,
                   help="the twin's world file (default: R2S2R_REALITY_FILE, else configs/world/reality.yaml)")
    p.add_argument("--cameras", nargs="*", default=["head_left", "right_wrist"],
                   help="cameras to record (give the option with no names to record no images)")
    p.add_argument("--image-size", type=cli.image_size, default=84, help="image height and width in pixels")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the first attempt (then +1 per attempt)")
    p.add_argument("--max-attempts", type=cli.int_in(1, 10_000_000), default=None,
                   help="stop after this many attempts in all (resumed runs included); default 3 x --num-demos")
    p.add_argument("--import", dest="imports", nargs="+", metavar="PATH", default=None,
                   help="import the demos of these dataset files into OUTPUT instead of collecting")
    args = p.parse_args(argv)
    if args.max_attempts is None:
        args.max_attempts = max(3 * args.num_demos, 10)
    return args


# -- recording ---------------------------------------------------------------------------------------------------
def record_trial(cell, teleop, seed: int, condition: str = CONDITION, max_steps: int | None = None):
    """Run one teleoperated trial on `cell` and return (trial outcome, demo dict, demo attrs)."""
    # The twin exposes its simulator; a hardware cell does not, and its demos then carry no states.
    physics = getattr(getattr(cell, "env", None), "physics", None)
    recorder = EpisodeRecorder()

    def on_step(obs: dict, action: np.ndarray) -> None:
        state = None
        if physics is not None:
            d = physics.host_data(0)
            state = np.concatenate([d.qpos, d.qvel])
        recorder.record(obs["proprio"], obs["tracking"], obs["images"], action, state)

    trial = teleop.drive(cell, seed, condition=condition, on_step=on_step, max_steps=max_steps)
    demo = None
    if trial.success:
        try:
            demo = recorder.demo(f"seed {seed}")
        except AnnotationError as e:  # a success whose subtasks cannot be found is of no use to the generator
            print(f"note: seed {seed} discarded: {e}", file=sys.stderr)
    info = trial.info
    attrs = {"seed": int(seed), "success": bool(trial.success), "condition": condition,
             "object": str(info.get("object", "")), "colour": str(info.get("colour", "")),
             "belt_speed": float(info.get("belt_speed", np.nan)), "source": "twin",
             "prompt": getattr(cell, "prompt", ""), "teleop_style": json.dumps(trial.style.as_dict())}
    return trial, demo, attrs


# -- collecting --------------------------------------------------------------------------------------------------
def _env_args(args: argparse.Namespace, reality: Path) -> dict:
    return {"condition": CONDITION, "cameras": list(args.cameras), "image_size": [args.image_size] * 2,
            "control_hz": 20.0, "reality_file": reality.name, "action_mode": "ee_pose",
            "collector": "scripts/collect_real.py (HumanTeleop)"}


def collect(args: argparse.Namespace) -> int:
    from r2s2r.real.teleop import HumanTeleop
    from r2s2r.real.twin import TwinCell

    output = Path(args.output)
    partial = output.with_name(output.name + ".partial")
    if output.exists() and not partial.exists():
        with DemoReader(output, tasks=(ENV_NAME,)) as reader:
            if len(reader) >= args.num_demos:
                print(f"{output} already holds {len(reader)} demos (asked for {args.num_demos}); nothing to do")
                return 0
    cell = TwinCell(args.reality_file, cameras=tuple(args.cameras), image_size=(args.image_size, args.image_size))
    reality = cell.env.world.path  # which twin recorded the demos (its file name goes into env_args)
    teleop = HumanTeleop(control_hz=cell.control_hz)
    env_args = _env_args(args, reality)
    env_args["control_hz"] = float(cell.control_hz)
    writer = DemoWriter(output, ENV_NAME, env_args)
    try:
        kept = writer.num_demos
        seed0 = writer.get_attr("collect_seed0")
        if seed0 is None:
            seed0 = args.seed
            writer.set_attr("collect_seed0", seed0)
        elif seed0 != args.seed:
            print(f"note: resuming a run that started at seed {seed0}; --seed {args.seed} is ignored",
                  file=sys.stderr)
        done = [int(a["seed"]) for a in writer.demo_attrs() if a.get("source") == "twin" and "seed" in a]
        next_seed = max(int(writer.get_attr("collect_next_seed", seed0)), max(done, default=seed0 - 1) + 1)
        attempts = next_seed - seed0
        if kept:
            print(f"resuming {partial}: {kept} demos kept, {attempts} attempts so far", file=sys.stderr)
        bar = tqdm(total=args.num_demos, initial=min(kept, args.num_demos), unit="demo", desc="demos kept",
                   dynamic_ncols=True)
        started, new_attempts = time.monotonic(), 0
        while writer.num_demos < args.num_demos and attempts < args.max_attempts:
            trial, demo, attrs = record_trial(cell, teleop, next_seed)
            attempts += 1
            new_attempts += 1
            next_seed += 1
            if trial.success and demo is not None:
                writer.append(demo, attrs)
                bar.update(1)
            writer.set_attr("collect_next_seed", next_seed)
            rate = (writer.num_demos - kept) / new_attempts
            bar.set_postfix(attempts=attempts, success=f"{rate:.0%}", last=f"seed {next_seed - 1} "
                            f"{'kept' if trial.success else trial.failure or 'given up'}")
        bar.close()
        elapsed = time.monotonic() - started
        total = writer.num_demos
    except BaseException:
        writer.close(publish=False)  # what was written stays in OUTPUT.partial for a rerun to resume
        raise
    # Published only when complete: a short run leaves its demos in OUTPUT.partial, where a rerun continues.
    writer.close(publish=total >= args.num_demos)
    cell.close()
    new = total - kept
    per_demo = f", {elapsed / new:.1f} s per kept demo" if new else ""
    if total < args.num_demos:
        print(f"error: only {total} of {args.num_demos} demos after {attempts} attempts (--max-attempts "
              f"{args.max_attempts}, {new} new from {new_attempts} attempts in {elapsed:.0f} s); {output} was not "
              f"written. The demos so far are kept in {partial}: rerun with a larger --max-attempts to go on",
              file=sys.stderr)
        return 1
    print(f"wrote {output}: {total} demos ({new} new from {new_attempts} attempts in {elapsed:.0f} s{per_demo})")
    return 0


# -- importing ---------------------------------------------------------------------------------------------------
def import_demos(sources: list[str | os.PathLike], output: str | os.PathLike) -> int:
    """Validate the demos of each source file and append them to `output`; returns how many were added.

    A source whose demos fail validation adds none of them (every demo is checked before any is copied).
    Each imported demo gets attrs `imported_from` ("<file name>:<group>") and, if it had none, `source`; demos
    whose `imported_from` is already in `output` are skipped, so an interrupted import can simply be rerun.
    """
    output = Path(output)
    partial = output.with_name(output.name + ".partial")
    existing = partial if partial.exists() else output if output.exists() else None
    added = 0
    for source in sources:
        source = Path(source)
        with DemoReader(source, min_demos=1, purpose="--import copies demos") as reader:
            if existing is not None:
                with DemoReader(existing) as out:
                    env_args = out.env_args
            else:
                env_args = reader.env_args
            if reader.env_name != env_args.get("env_name"):
                raise DatasetError(f"{source}: recorded on task {reader.env_name!r}, but {output} holds "
                                   f"{env_args.get('env_name')!r} demos")
            for name in reader.names:  # every demo read and checked first, before any output file is touched
                reader.load(name)
            extra = {k: v for k, v in env_args.items() if k not in ("env_name", "type")}
            with DemoWriter(output, env_args["env_name"], extra) as writer:
                have = {a.get("imported_from") for a in writer.demo_attrs()}
                todo = [n for n in reader.names if f"{source.name}:{n}" not in have]
                for name in todo:  # against the output's demos too, all before copying any
                    writer.check(reader.load(name), f"{source}: {name}")
                for name in tqdm(todo, desc=f"importing {source.name}", unit="demo"):
                    attrs = reader.attrs(name)
                    attrs.setdefault("source", f"import:{source.name}")
                    attrs["imported_from"] = f"{source.name}:{name}"
                    writer.append(reader.load(name), attrs)
                    added += 1
        existing = output
    return added


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.imports:
            added = import_demos(args.imports, args.output)
            with DemoReader(args.output) as reader:
                print(f"wrote {args.output}: {len(reader)} demos ({added} imported)")
            return 0
        return collect(args)
    except (ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: the demos written so far are in {args.output}.partial; rerun the same command to "
              f"resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
