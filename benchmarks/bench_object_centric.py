"""Object-centric policy: training throughput of both stages against bare torch loops, and deployed latency.

(a) Estimator stage: `ObjectCentricTrainer.estimator_update(*estimator_batch())` (drawing frames mapped from the
    frame cache, photometric augmentation, label normalization, LR schedule, clipping) against a bare loop on a
    copy of the same network: one pre-built batch reused, forward + loss + backward + AdamW step; and the same
    pipeline with the frames copied into memory, which shows what streaming them from the cache costs.
(b) Head stage: `head_update(*head_batch())` against the same bare loop on the head.
    The loops alternate in short blocks (ABBA) in one run, so other load on the machine falls on all alike.
    Ratio = pipeline / bare; goal >= 0.9.
(c) Deployed latency on one real observation, 1 torch thread: a control step that only looks (estimator +
    tracker) and one that also plans a chunk (plus the head), against the 50 ms budget at 20 Hz.

Usage: python benchmarks/bench_object_centric.py --dataset outputs/experiment/study/data/real.hdf5
           [--rounds 6] [--steps 5] [--calls 50] [--output outputs/bench_object_centric.json] [KEY=VALUE ...]
The dataset needs head_left images at 128x128 (collect_real.py --cameras head_left --image-size 128).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import write_json  # noqa: E402
from bench_train import timings  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="outputs/experiment/study/data/real.hdf5")
    p.add_argument("--rounds", type=int, default=6, help="alternations of pipeline and bare blocks")
    p.add_argument("--steps", type=int, default=5, help="training steps per block")
    p.add_argument("--calls", type=int, default=50, help="timed control steps per latency setting")
    p.add_argument("--output", default="outputs/bench_object_centric.json")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="train config overrides")
    args = p.parse_args(argv)
    for name in ("rounds", "steps", "calls"):
        if getattr(args, name) < 1:
            p.error(f"--{name} = {getattr(args, name)}: expected an integer >= 1")
    if not Path(args.dataset).is_file():
        p.error(f"--dataset = {args.dataset!r}: no such file (record one with collect_real.py --cameras head_left "
                f"--image-size 128)")
    return args


def abba(loops: dict, rounds: int, steps: int, batch: int) -> dict:
    """Samples/s of each loop (name -> step(i); "pipeline" and "bare" among them), run in blocks of `steps` whose
    order reverses every round, and the ratio pipeline / bare."""
    for fn in loops.values():  # warm-up, untimed
        fn(0)
    seconds = dict.fromkeys(loops, 0.0)
    for r in range(rounds):
        for name in list(loops) if r % 2 == 0 else list(loops)[::-1]:
            t0 = time.perf_counter()
            for i in range(steps):
                loops[name](i)
            seconds[name] += time.perf_counter() - t0
    rate = {k: batch * steps * rounds / v for k, v in seconds.items()}
    return {"batch_size": batch, **{f"{k}_samples_per_s": round(v, 1) for k, v in rate.items()},
            "ratio": round(rate["pipeline"] / rate["bare"], 3)}


def bare_loop(module: torch.nn.Module, loss_fn, lr: float):
    module = copy.deepcopy(module).train()
    opt = torch.optim.AdamW(module.parameters(), lr=lr)

    def step(_: int) -> None:
        loss = loss_fn(module)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main(argv=None) -> int:
    args = parse_args(argv)
    from r2s2r.policy.config import compose_train_cfg
    from r2s2r.policy.object_centric import ObjectCentricAgent, estimator_loss, keypoint_loss
    from r2s2r.policy.train_object_centric import ObjectCentricTrainer

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    try:
        cfg = compose_train_cfg(["policy.kind=object_centric", "policy.cameras=[head_left]",
                                 "policy.image_size=[128,128]", "policy.chunk=16", "policy.execute=4", "threads=1",
                                 f"data.datasets=[{{path: {Path(args.dataset).absolute()}, weight: 1.0}}]",
                                 "run_dir=outputs/bench/object_centric", *args.overrides])
        trainer = ObjectCentricTrainer(cfg)
    except (ConfigError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    oc = cfg.object_centric
    images, target, pixels, _ = trainer.estimator_batch()

    def est_loss(module):
        latent, logits = module.latent(images)
        return estimator_loss(*module.outputs(latent), target) + oc.keypoint_weight * keypoint_loss(logits, pixels,
                                                                                                      128, 128)

    streamed = [d.images for d in trainer.datasets]
    in_memory = [{c: np.array(frames) for c, frames in d.images.items()} for d in trainer.datasets]

    def estimator_step(frames):
        def step(i: int) -> None:
            for d, f in zip(trainer.datasets, frames):
                d.images = f
            trainer.estimator_update(*trainer.estimator_batch(), i)
        return step

    estimator = abba({"pipeline": estimator_step(streamed), "in_memory": estimator_step(in_memory),
                      "bare": bare_loop(trainer.model.estimator, est_loss, cfg.optim.lr)},
                     args.rounds, args.steps, oc.estimator_batch)
    for d, f in zip(trainer.datasets, streamed):
        d.images = f
    del in_memory
    trainer.model.estimator.eval()
    t0 = time.perf_counter()
    trainer.prepare_head()
    prepare_s = time.perf_counter() - t0
    x, y = trainer.head_batch()
    head = abba({"pipeline": lambda i: trainer.head_update(*trainer.head_batch(), i),
                 "bare": bare_loop(trainer.model.head, lambda m: m.loss(x, y), cfg.optim.lr)},
                args.rounds, args.steps * 10, oc.head_batch)
    trainer.model.eval()

    d = trainer.datasets[0]
    t = d.demo_start[0] + 60
    proprio = d.proprio[t]
    obs = {"images": {"head_left": d.images["head_left"][t]},
           "proprio": {"arm_q": proprio[:7], "hand_q": proprio[7:27], "ee_pose": proprio[27:34],
                       "belt_setpoint": proprio[34:35]}}
    # Receding horizon, so a step with a chunk in hand only looks and tracks.
    agent = ObjectCentricAgent(trainer.model, dataclasses.replace(cfg.policy, ensemble=None), trainer.locator,
                               oc.control_hz, name="bench")
    agent.reset()

    def look_only():
        agent.chunks.reset()
        agent.chunks.add(np.zeros((cfg.policy.chunk, cfg.policy.action_dim)))
        agent.act(obs)

    def look_and_plan():
        agent.chunks.reset()
        agent.act(obs)

    result = {"load_average_1min_at_start": load, "threads": 1, "dataset": args.dataset,
              "frames": len(d), "estimator_stage": estimator, "head_stage": head,
              "head_preparation_s": round(prepare_s, 1),
              "latency": {"look_only": timings(look_only, args.calls, 5),
                          "look_and_plan": timings(look_and_plan, args.calls, 5),
                          "budget_ms_per_step": 1000 / oc.control_hz}}
    write_json(args.output, result)
    print(f"estimator stage {estimator['pipeline_samples_per_s']} (frames in memory "
          f"{estimator['in_memory_samples_per_s']}) vs bare {estimator['bare_samples_per_s']} "
          f"samples/s (ratio {estimator['ratio']}); head stage ratio {head['ratio']}; per control step "
          f"{result['latency']['look_only']['median_ms']} ms, with planning "
          f"{result['latency']['look_and_plan']['median_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
