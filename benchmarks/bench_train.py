"""Policy training throughput against a bare torch loop, and inference latency per action chunk.

(a) Training samples/s of the real pipeline, `Trainer.train_step(trainer.sampler.sample())` (sampling from the
    datasets, their frames mapped from the frame cache; random-shift augmentation, LR schedule, gradient clipping,
    EMA), against a bare loop on a copy of the same model at the same batch size: one pre-built batch of tensors
    reused every step, forward + flow loss + backward + AdamW step, nothing else. The two alternate in short blocks
    (ABBA order) in the same run so load from other work on the machine falls on both alike. Ratio = pipeline / bare; goal >= 0.9 (the data
    pipeline is not the bottleneck).
(b) Inference latency of `PolicyAgent.predict_chunk` on one real observation (a step of the dataset) on the CPU,
    with 1 torch thread and with torch's default, against the control budget: 1 / control_hz (50 ms at 20 Hz) per
    step, `execute` steps per chunk.
(c) When CUDA is available: the same on the GPU (the policy moved to the device), checked against the CPU chunk.

The policy is the default training config (configs/train/config.yaml with data=real_only: cameras head_left and
right_wrist at 64x64, batch 64); trailing KEY=VALUE arguments override it as scripts/train.py takes them (e.g.
threads=1: on a busy 2-core machine torch's default thread count can make every step many times slower).

Usage: python benchmarks/bench_train.py [--rounds 8] [--steps 4] [--calls 50] [--output outputs/bench_train.json]
           [--dataset outputs/bench/policy_real.hdf5] [KEY=VALUE ...]
If --dataset is missing, 4 real demos are recorded into it first (scripts/collect_real.py --image-size 64).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import write_json  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError, DemoReader  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONTROL_HZ = 20.0  # r2s2r.tasks.pick_sort.env_cfg.PickSortEnvCfg.control_hz, the cell's control rate


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="outputs/bench/policy_real.hdf5", help="real demos with head_left and "
                   "right_wrist images (recorded here first if missing)")
    p.add_argument("--rounds", type=int, default=8, help="alternations of pipeline and bare blocks")
    p.add_argument("--steps", type=int, default=4, help="training steps per block")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps of each loop before measuring")
    p.add_argument("--calls", type=int, default=50, help="timed predict_chunk calls per latency setting")
    p.add_argument("--output", default="outputs/bench_train.json")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="train config overrides (e.g. batch_size=32)")
    args = p.parse_args(argv)
    for name in ("rounds", "steps", "calls"):
        if getattr(args, name) < 1:
            p.error(f"--{name} = {getattr(args, name)}: expected an integer >= 1")
    if args.warmup < 0:
        p.error(f"--warmup = {args.warmup}: expected an integer >= 0")
    return args


def ensure_dataset(path: Path) -> None:
    if path.exists():
        return
    print(f"recording 4 real demos into {path} (missing)", file=sys.stderr)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "collect_real.py"), "--num-demos", "4", "--output",
                    str(path), "--image-size", "64", "--cameras", "head_left", "right_wrist"], check=True, cwd=ROOT)


# -- (a) training throughput ---------------------------------------------------------------------------------------
def training_throughput(trainer, rounds: int, steps: int, warmup: int) -> dict:
    cfg = trainer.cfg
    bare_model = copy.deepcopy(trainer.model).train()
    bare_opt = torch.optim.AdamW(bare_model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    from r2s2r.policy.model import to_tensors

    fixed = trainer.sampler.sample()
    images, proprio = to_tensors(fixed)
    actions = torch.from_numpy(fixed["actions"])
    domain = torch.from_numpy(fixed["domain"])

    def bare_step() -> None:
        loss = bare_model.flow_loss(bare_model.encode(images, proprio, domain), actions)
        bare_opt.zero_grad(set_to_none=True)
        loss.backward()
        bare_opt.step()

    def pipeline_step() -> None:
        trainer.train_step(trainer.sampler.sample())

    loops = {"pipeline": pipeline_step, "bare": bare_step}

    def block(name: str, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            loops[name]()
        return time.perf_counter() - t0

    for name in loops:
        block(name, warmup)
    seconds: dict[str, list[float]] = {name: [] for name in loops}
    for r in range(rounds):
        # ABBA: alternate which loop goes first, so a slow drift in machine load favours neither.
        for name in (("pipeline", "bare") if r % 2 == 0 else ("bare", "pipeline")):
            seconds[name].append(block(name, steps))
    # What the pipeline adds that the bare loop lacks, timed alone: drawing a batch from the datasets.
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.sampler.sample()
    sample_s = (time.perf_counter() - t0) / steps
    samples = cfg.batch_size * steps
    rate = {name: samples * rounds / sum(s) for name, s in seconds.items()}
    per_round = [b / p for p, b in zip(seconds["pipeline"], seconds["bare"])]
    return {"batch_size": cfg.batch_size, "rounds": rounds, "steps_per_block": steps, "warmup_steps": warmup,
            "threads": torch.get_num_threads(),
            "pipeline_samples_per_s": round(rate["pipeline"], 1), "bare_samples_per_s": round(rate["bare"], 1),
            "ratio": round(rate["pipeline"] / rate["bare"], 3),
            "ratio_per_round": {"median": round(statistics.median(per_round), 3),
                                "min": round(min(per_round), 3), "max": round(max(per_round), 3)},
            "pipeline_step_ms": round(1000 * sum(seconds["pipeline"]) / (rounds * steps), 1),
            "bare_step_ms": round(1000 * sum(seconds["bare"]) / (rounds * steps), 1),
            "sample_batch_ms": round(1000 * sample_s, 2)}


# -- (b, c) inference latency --------------------------------------------------------------------------------------
def real_observation(path: Path, cfg) -> dict:
    """One step from the middle of the dataset's first demo, as the agent receives an observation."""
    import cv2

    with DemoReader(path) as reader:
        demo = reader.load(reader.names[0])
    obs = demo["obs"]
    t = len(demo["actions"]) // 2
    h, w = cfg.image_size
    images = {}
    for cam in cfg.cameras:
        if cam not in obs:
            raise DatasetError(f"{path}: field 'obs/{cam}' is missing; the policy observes {list(cfg.cameras)}")
        frame = np.ascontiguousarray(obs[cam][t])
        images[cam] = frame if frame.shape[:2] == (h, w) else cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
    return {"images": images, "proprio": {k: np.asarray(obs[k][t]) for k in cfg.proprio}}


def timings(fn, calls: int, warmup: int) -> dict:
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ms.append(1000 * (time.perf_counter() - t0))
    return {"median_ms": round(float(np.median(ms)), 2), "p90_ms": round(float(np.percentile(ms, 90)), 2),
            "mean_ms": round(float(np.mean(ms)), 2), "calls": calls}


def inference_latency(policy, obs: dict, calls: int, default_threads: int) -> dict:
    """Chunk latency with 1 thread and with `default_threads` (torch's default, read before anything changed it:
    the agent pins one thread unless told otherwise)."""
    from r2s2r.policy.agent import PolicyAgent

    agent = PolicyAgent(copy.deepcopy(policy).cpu().eval(), name="bench", seed=0, threads=None)
    out: dict = {}
    try:
        for threads in sorted({1, default_threads}):
            torch.set_num_threads(threads)
            out[f"cpu_threads_{threads}"] = {"threads": threads, **timings(lambda: agent.predict_chunk(obs), calls, 5)}
    finally:
        torch.set_num_threads(default_threads)
    if torch.cuda.is_available():
        gpu = PolicyAgent(copy.deepcopy(policy).eval(), name="bench-cuda", seed=0, threads=None, device="cuda")
        agent.reset(0)
        expected = agent.predict_chunk(obs)
        gpu.reset(0)
        # cuDNN may run the convolutions in TF32, so agreement is to about 1e-3, not to float32 rounding.
        diff = float(np.abs(gpu.predict_chunk(obs) - expected).max())
        out["cuda"] = {"device": torch.cuda.get_device_name(), **timings(lambda: gpu.predict_chunk(obs), calls, 10),
                       "max_abs_diff_vs_cpu": diff, "matches_cpu": diff < 1e-2}
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    dataset = Path(args.dataset)
    try:
        ensure_dataset(dataset)
    except subprocess.CalledProcessError as e:
        print(f"error: recording the benchmark dataset {str(dataset)!r} failed (exit {e.returncode})",
              file=sys.stderr)
        return 2
    from r2s2r.policy.config import compose_train_cfg
    from r2s2r.policy.train import Trainer

    load = os.getloadavg()[0]
    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            # The run folder is a fresh temporary one, so the trainer never resumes someone's run.
            cfg = compose_train_cfg(["data=real_only", f"data.datasets=[{{path: '{dataset}', weight: 1.0}}]",
                                     f"run_dir={tmp}/run", *args.overrides])
            trainer = Trainer(cfg)
            obs = real_observation(dataset, cfg.policy)
        except (ConfigError, DatasetError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        train = training_throughput(trainer, args.rounds, args.steps, args.warmup)
        latency = inference_latency(trainer.ema, obs, args.calls, default_threads)
    step_ms = 1000.0 / CONTROL_HZ
    budget = {"control_hz": CONTROL_HZ, "step_ms": step_ms, "execute": cfg.policy.execute,
              "chunk_period_ms": step_ms * cfg.policy.execute}
    result = {"dataset": str(dataset), "steps_in_dataset": len(trainer.datasets[0]),
              "policy": {"cameras": list(cfg.policy.cameras), "image_size": list(cfg.policy.image_size),
                         "dim": cfg.policy.dim, "chunk": cfg.policy.chunk, "flow_steps": cfg.policy.flow_steps,
                         "parameters": sum(p.numel() for p in trainer.model.parameters())},
              "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "load_avg_1min_at_start": load,
                          "cuda": torch.cuda.is_available()},
              "overrides": args.overrides, "train": train, "inference": latency, "budget": budget}
    write_json(args.output, result)
    print("| measure | value |")
    print("|---|---|")
    print(f"| training, pipeline (batch {train['batch_size']}, {train['threads']} torch thread(s)) | "
          f"{train['pipeline_samples_per_s']} samples/s "
          f"({train['pipeline_step_ms']} ms/step) |")
    print(f"| training, bare loop | {train['bare_samples_per_s']} samples/s ({train['bare_step_ms']} ms/step) |")
    print(f"| ratio pipeline / bare (goal >= 0.9) | {train['ratio']} (per round: median "
          f"{train['ratio_per_round']['median']}, {train['ratio_per_round']['min']}-{train['ratio_per_round']['max']})"
          f" |")
    print(f"| drawing one batch | {train['sample_batch_ms']} ms |")
    for key, row in latency.items():
        if isinstance(row, dict):
            name = f"{row['threads']} thread(s)" if key.startswith("cpu") else row["device"]
            print(f"| predict_chunk, {name} | median {row['median_ms']} ms, p90 {row['p90_ms']} ms |")
    print(f"| budget at {CONTROL_HZ:g} Hz | {step_ms:g} ms per step, {budget['chunk_period_ms']:g} ms per chunk "
          f"({cfg.policy.execute} steps executed) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
