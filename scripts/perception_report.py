"""How well an object-centric policy perceives the object, on demos it did not train on.

Example:
  python scripts/collect_real.py --num-demos 12 --output outputs/heldout.hdf5 --image-size 128 \\
      --cameras head_left --seed 3000
  python scripts/perception_report.py --checkpoint outputs/train/wg_bg/policy.pt --dataset outputs/heldout.hdf5

Runs the policy's perception exactly as deployed (estimator, keypoint locator, belt tracker) over every frame of
the dataset and compares it with the object poses the demos store (obs/datagen_info): position errors in the belt
plane (cm, median and 90th percentile) of the per-frame measurement where the keypoint measured and how often it
did, of the estimator's regressed position, and of the tracker, over the approach (every frame before the lift)
and the grasp window (the last second before it); their signed medians per axis (`bias`: along the belt, across
it, and the regressed height, whose error the head camera's oblique view turns into one across the belt); and the
grasp window per object (`by_object`), where an object the estimator misjudges shows. Prints the report and
writes it as JSON with --output.

With --closed-loop N it also plays the episodes of the first N demos on the twin (from each demo's seed and
condition), once with the demo's recorded actions and once with the policy's own, its perception running on every
frame of both, and reports per object the tracked size's, position's and grasp yaw's errors against the twin's
truth until the object is lifted (`closed_loop`), and each sharp frame's own yaw reading before the tracker, over
all frames and over those with the hand at least 30 cm from the camera's line of sight to the object: the recorded
frames show the teleoperator's arm, and an estimator that reads the arm as a cue to the object gets them right and
may not get its own episodes right (about 20 s per demo here).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

os.environ.setdefault("MUJOCO_GL", "egl")

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="policy.pt of an object-centric policy (policy.kind)")
    p.add_argument("--dataset", required=True, help="HDF5 demos with the policy's camera and obs/datagen_info")
    p.add_argument("--closed-loop", type=cli.int_in(0, 100_000), default=0, metavar="N",
                   help="also play the first N demos' episodes on the twin with the demo's and the policy's actions "
                        "(0: not)")
    cli.add_execution_args(p)  # how the policy plays its closed-loop episodes and which frames it tracks
    p.add_argument("--no-progress", action="store_true", help="no progress bar for --closed-loop")
    p.add_argument("--output", type=cli.output_file, default=None,
                   help="write the report here as JSON (written whole, then renamed)")
    args = p.parse_args(argv)

    from r2s2r.files import write_text_atomic
    from r2s2r.policy.agent import load_agent
    from r2s2r.policy.checkpoint import CheckpointError
    from r2s2r.policy.config import DatasetCfg
    from r2s2r.policy.data import load_dataset
    from r2s2r.policy.object_centric import HEAD_PROPRIO, ObjectCentricAgent
    from r2s2r.policy.train_object_centric import perception_report

    try:
        agent = load_agent(args.checkpoint, execution=cli.execution_of(args))
        if not isinstance(agent, ObjectCentricAgent):
            raise CheckpointError(f"--checkpoint {args.checkpoint}: a flow-transformer policy; expected an "
                                  "object-centric one (policy.kind=object_centric), which estimates the object")
        if agent.uses_tracking:
            raise CheckpointError(f"--checkpoint {args.checkpoint}: its head reads the cell's tracking "
                                  "(object_centric.perception=tracking); it has no perception to report")
        policy_cfg = dataclasses.replace(agent.cfg, proprio=HEAD_PROPRIO)
        data = load_dataset(DatasetCfg(path=args.dataset), policy_cfg)
        report = perception_report(agent.policy, agent.locator, policy_cfg.cameras[0], data,
                                   1.0 / agent.tracker.dt, agent.tracker.belt_top, agent.tracker.cfg.cover_radius)
        if args.closed_loop:
            from r2s2r.evaluation.perception import closed_loop_perception

            report["closed_loop"] = closed_loop_perception(agent, args.dataset, args.closed_loop,
                                                           progress=not args.no_progress)
    except (CheckpointError, ConfigError, DatasetError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        write_text_atomic(args.output, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
