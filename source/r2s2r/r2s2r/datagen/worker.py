"""One worker's share of a generation run: attempts executed under contact physics, admitted ones recorded.

An attempt is fully determined by the run seed and its index: the episode seed, its condition and the generator's
random stream all derive from (seed, index). It runs on a camera-less environment, which records every step's
observation, action and simulator state but renders nothing; only if the object ends in its assigned bin are the
camera views rendered, from the recorded states, on the recording environment (reset with the same seed, so
lighting, colours and sensor noise are the episode's). Physics runs once per attempt and images are made only for
admitted ones. The views are of each stored state (positions integrated by the step), where an image rendered inside
the step would show the pose one physics substep earlier (MuJoCo's kinematics lag its integration by a substep, 2 ms
at the default timestep; tests/datagen/test_generate.py compares the two renderings). An Isaac Lab task
(`GenerateCfg.isaaclab`) renders its cameras during the attempt and records them as they come, on its Isaac Lab
environments: `GenerateCfg.num_envs` attempts side by side, each environment taking the next attempt as soon as its
own ends, each attempt the same as it would be alone.

Work comes in chunks of consecutive attempts, each written to its own shard with `DemoWriter` (crash-safe and
resumable at attempt granularity); a finished shard is published under its final name and never redone. A process
on the driver's machine writes its shard straight into the run's shard folder (`run_chunk`); a task on a Ray
cluster writes it into a scratch folder on its own node and returns the finished shard's bytes
(`run_chunk_detached`), so that the nodes need not share a file system with the driver.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.behavior import GenerationError, make_generator
from r2s2r.data.annotate import AnnotationError
from r2s2r.data.episode import EpisodeRecorder
from r2s2r.data.hdf5 import DemoReader, DemoWriter
from r2s2r.datagen.config import GenerateCfg
from r2s2r.tasks.pick_sort.env import PickSortEnv

SHARD_DONE = "shard_done"


def attempt_seed(run_seed: int, index: int) -> int:
    """The episode seed of attempt `index` (independent streams per attempt, whatever the worker)."""
    return int(np.random.SeedSequence([run_seed, index]).generate_state(1)[0])


def attempt_condition(cfg: GenerateCfg, index: int) -> str:
    names = sorted(cfg.datagen.conditions)
    weights = np.array([cfg.datagen.conditions[n] for n in names], dtype=float)
    rng = np.random.default_rng([cfg.datagen.seed, index, 1])
    return names[rng.choice(len(names), p=weights / weights.sum())]


class CorrectiveNoise:
    """The offset `DatagenCfg.corrective_noise` adds to the executed grasp-site position: an Ornstein-Uhlenbeck
    process from 0 at the episode's start, std `std` (m, per axis), correlation time `tau` (s), stepped once per
    control period `dt`."""

    def __init__(self, std: tuple[float, float, float], tau: float, dt: float, rng: np.random.Generator):
        self.decay = float(np.exp(-dt / tau))
        self.scale = np.asarray(std, dtype=float) * np.sqrt(1.0 - self.decay**2)
        self.offset = np.zeros(3)
        self.rng = rng

    def __call__(self, action: np.ndarray) -> np.ndarray:
        """The action to execute: `action` (an ee_pose action, position first) with the offset added."""
        self.offset = self.decay * self.offset + self.scale * self.rng.standard_normal(3)
        executed = action.copy()
        executed[:3] += self.offset
        return executed


def attempt_noise(std, tau: float, run_seed: int, index: int, control_hz: float) -> CorrectiveNoise | None:
    """The corrective offset of attempt `index` of a run (None when `std` is all zero): its own random stream, so
    the replay check re-executes exactly what the attempt executed."""
    if not any(std):
        return None
    return CorrectiveNoise(tuple(std), tau, 1.0 / control_hz, np.random.default_rng([run_seed, index, 3]))


@dataclass
class Attempt:
    index: int
    seed: int
    condition: str
    admitted: bool
    reason: str  # "admitted" or why not (a task failure name, a generator's reason, "annotation")
    demo: dict | None = None
    attrs: dict | None = None
    steps: int = 0  # control steps the attempt's physics ran
    plan_s: float = 0.0  # seconds in the behaviour generator (its reset, i.e. planning, and its per-step actions)
    physics_s: float = 0.0  # seconds in the physics of its control periods (0 on Isaac Lab, which does not time it)


@dataclass
class _Running:
    """An attempt in progress on one of an Isaac Lab task's environments."""

    index: int
    seed: int
    condition: str
    generator: Any
    episode: dict  # its object, colour and belt speed, taken at its start (the environment resets at its end)
    plan_attrs: dict = field(default_factory=dict)
    noise: CorrectiveNoise | None = None
    recorder: EpisodeRecorder = field(default_factory=EpisodeRecorder)
    plan_s: float = 0.0

    def timed(self, call: Callable, *args):
        """Call the generator, its time added to the attempt's planning time."""
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.plan_s += time.perf_counter() - started

    def executed(self, action: np.ndarray) -> np.ndarray:
        """The action the physics executes: the generator's, with the corrective offset if the run adds one."""
        return action if self.noise is None else self.noise(action)

    def result(self, worker: Worker, outcome: str) -> Attempt:
        """How the attempt ended: `outcome` is "success" or the failure's name."""
        if outcome != "success":
            return Attempt(self.index, self.seed, self.condition, False, outcome, steps=len(self.recorder),
                           plan_s=self.plan_s)
        attempt = worker._admitted(self.index, self.seed, self.condition, self.recorder, self.episode,
                                   self.plan_attrs)
        return dataclasses.replace(attempt, plan_s=self.plan_s)


class Worker:
    """Holds one process's environments and generator (built once, reused for every attempt). `generator`: one
    built elsewhere from `cfg.generator` (e.g. by the driver, which has the generator's input files), else built
    here."""

    def __init__(self, cfg: GenerateCfg, generator: Any = None):
        self.cfg = cfg
        if cfg.isaaclab:
            # Isaac Lab holds one simulation per process, so the attempts and their recording share its
            # environments (with the cameras on), `cfg.num_envs` attempts side by side.
            from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
            from r2s2r.isaaclab_tasks.pick_sort.task import generation_env_cfg

            self.physics_env = self.record_env = PickSortCellEnv(generation_env_cfg(cfg))
            self._sim = None  # Isaac Lab steps its own physics, untimed here
        else:
            self.physics_env = PickSortEnv(cfg.env.replace(cameras=()))
            self.record_env = PickSortEnv(cfg.env) if cfg.env.cameras else self.physics_env
            self._sim = self.physics_env.sim
        self.generator = generator if generator is not None else make_generator(cfg.generator_name, cfg.generator)
        world = self.physics_env.world
        self.world_attrs = {"world_file": world.path.name if world else "",
                            "world_sha256": world.sha256 if world else ""}

    def close(self) -> None:
        self.physics_env.close()
        if self.record_env is not self.physics_env:
            self.record_env.close()

    def attempt(self, index: int) -> Attempt:
        """Attempt `index` alone."""
        return next(self.attempts(range(index, index + 1)))

    def attempts(self, indices: range) -> Iterator[Attempt]:
        """The attempts `indices`, in their order: one after another on MuJoCo, side by side on an Isaac Lab task's
        environments."""
        if self.cfg.isaaclab:
            yield from self._side_by_side(indices)
            return
        for index in indices:
            physics_before = self._sim.physics_s
            result = self._attempt(index)
            yield dataclasses.replace(result, physics_s=self._sim.physics_s - physics_before)

    def _begin(self, index: int, seed: int, condition: str, generator: Any, env, obs: dict,
               episode: dict) -> _Running | Attempt:
        """Attempt `index` after its reset on `env` (observation `obs`; `episode`: the reset's info): the generator
        reset on it, or the attempt rejected if the generator finds no way."""
        cfg = self.cfg
        run = _Running(index, seed, condition, generator, episode)
        try:
            run.plan_attrs = run.timed(generator.reset, env, obs, np.random.default_rng([cfg.datagen.seed, index, 2]))
        except GenerationError as e:
            return Attempt(index, seed, condition, False, e.reason, plan_s=run.plan_s)
        run.noise = attempt_noise(cfg.datagen.corrective_noise, cfg.datagen.corrective_tau, cfg.datagen.seed, index,
                                  cfg.env.control_hz)
        return run

    def _attempt(self, index: int) -> Attempt:
        """Attempt `index` on the MuJoCo environment."""
        seed, condition = attempt_seed(self.cfg.datagen.seed, index), attempt_condition(self.cfg, index)
        env = self.physics_env
        obs, info = env.reset(seed=seed, options={"condition": condition})
        run = self._begin(index, seed, condition, self.generator, env, obs, info)
        if isinstance(run, Attempt):
            return run
        while True:
            action = np.asarray(run.timed(run.generator, obs), dtype=float)
            run.recorder.record(obs["proprio"], obs["privileged"], obs["images"], action, env.state())
            obs, _, terminated, truncated, info = env.step(run.executed(action))
            if terminated or truncated:
                break
        if info["success"] and self.record_env is not self.physics_env:
            self._render(run.recorder, seed, condition)
        return run.result(self, "success" if info["success"] else info["failure"] or "failed")

    def _admitted(self, index: int, seed: int, condition: str, recorder: EpisodeRecorder, episode: dict,
                  plan_attrs: dict) -> Attempt:
        """A successful attempt as its demo and attributes (`episode`: its object, colour and belt speed), or
        rejected if its subtasks cannot be annotated."""
        try:
            demo = recorder.demo(f"attempt seed {seed}")
        except AnnotationError:
            return Attempt(index, seed, condition, False, "annotation", steps=len(recorder))
        attrs = {"seed": seed, "success": True, "attempt": index, "task": self.cfg.task,
                 "generator": self.cfg.generator_name, "condition": condition, "object": episode["object"],
                 "colour": episode["colour"], "belt_speed": float(episode["belt_speed"]), "source_demo": "",
                 **self.world_attrs, **plan_attrs}
        return Attempt(index, seed, condition, True, "admitted", demo, attrs, len(recorder))

    def _side_by_side(self, indices: range) -> Iterator[Attempt]:
        """Attempts `indices` on the Isaac Lab environments, one per environment at a time: an environment whose
        attempt ends takes the next index at once. Each attempt is what it would be alone (its seed, condition,
        generator stream and corrective noise derive from its index); they are yielded in index order."""
        import torch

        from r2s2r.isaaclab_tasks.pick_sort.task import CellTask

        cfg, env = self.cfg, self.physics_env
        views = [CellTask(env, env_id=i) for i in range(env.num_envs)]
        # The generators keep per-attempt state, so each environment has its own.
        generators = [self.generator] + [copy.deepcopy(self.generator) for _ in range(env.num_envs - 1)]
        running: dict[int, _Running] = {}  # environment -> its attempt
        waiting = iter(indices)
        finished: dict[int, Attempt] = {}
        order = list(indices)
        obs = None
        while order:
            idle = [i for i in range(env.num_envs) if i not in running]
            starts = [(i, index) for i, index in zip(idle, waiting)]
            if starts:
                seeds = [attempt_seed(cfg.datagen.seed, index) for _, index in starts]
                conditions = [attempt_condition(cfg, index) for _, index in starts]
                obs = env.start_episodes([i for i, _ in starts], seeds, conditions)
                for (i, index), seed, condition in zip(starts, seeds, conditions):
                    run = self._begin(index, seed, condition, generators[i], views[i], env.observation_dict(obs, i),
                                      views[i].episode_info())
                    if isinstance(run, Attempt):
                        finished[index] = run
                    else:
                        running[i] = run
            if running:
                states = env.mujoco_states()
                actions = env.hold_actions(obs)  # environments without an attempt hold still
                for i, run in running.items():
                    mine = env.observation_dict(obs, i)
                    action = np.asarray(run.timed(run.generator, mine), dtype=float)
                    run.recorder.record(mine["proprio"], mine["privileged"], mine["images"], action, states[i])
                    actions[i] = run.executed(action)
                obs, _, terminated, truncated, extras = env.step(torch.tensor(actions, dtype=torch.float32,
                                                                              device=env.device))
                for i in np.flatnonzero((terminated | truncated).cpu().numpy()):
                    run = running.pop(int(i), None)
                    if run is not None:
                        finished[run.index] = run.result(self, extras["outcome"][i] or "failed")
            while order and order[0] in finished:
                yield finished.pop(order.pop(0))

    def _render(self, recorder: EpisodeRecorder, seed: int, condition: str) -> None:
        """The camera views of every recorded step, rendered from its stored state. The reset renders the first
        and sets the episode's lighting, colours and sensor-noise stream; the later views draw their noise in step
        order, as they would have during the attempt."""
        env = self.record_env
        obs, _ = env.reset(seed=seed, options={"condition": condition})
        recorder.set_images(0, obs["images"])
        for k in range(1, len(recorder)):
            env.set_state(recorder.state(k))
            recorder.set_images(k, env.observe()["images"])


@dataclass(frozen=True)
class ChunkSpec:
    cfg: GenerateCfg
    chunk: int
    shard_dir: str

    @property
    def attempts(self) -> range:
        size = self.cfg.datagen.chunk_size
        return range(self.chunk * size, (self.chunk + 1) * size)

    @property
    def path(self) -> Path:
        return Path(self.shard_dir) / f"chunk_{self.chunk:06d}.hdf5"


@dataclass(frozen=True)
class ChunkResult:
    chunk: int
    attempts: int
    admitted: int
    reasons: dict[str, int]
    seconds: float = 0.0  # spent on the chunk by the process that finished it (0: finished by an earlier run)
    worker: str = ""  # "host:pid" of that process ("": an earlier run's shard, reused)
    node: str = ""  # the Ray node it ran on ("" outside Ray)
    steps: int = 0  # control steps of every attempt's physics (0 in shards written before it was recorded)
    admitted_steps: int = 0  # control steps of the admitted attempts: the frames whose views were rendered
    plan_s: float = 0.0  # seconds in the behaviour generator over every attempt (0 in shards from before)
    physics_s: float = 0.0  # seconds in every attempt's physics (0 in shards from before)


def shard_result(path: Path, chunk: int) -> ChunkResult | None:
    """The result of a finished shard, or None if it is not finished."""
    if not path.exists():
        return None
    with DemoReader(path) as reader:
        data = reader.data_attrs()
        if not data.get(SHARD_DONE, False):
            return None
        reasons = json.loads(data["shard_reasons"])
        return ChunkResult(chunk, int(data["shard_attempts"]), len(reader), reasons,
                           steps=int(data.get("shard_steps", 0)), plan_s=float(data.get("shard_plan_s", 0.0)),
                           physics_s=float(data.get("shard_physics_s", 0.0)), admitted_steps=reader.total)


_WORKERS: dict[str, Worker] = {}  # per process: a worker per run config, so environments are built once


def close_workers() -> None:
    """Release this process's environments (their renderers hold GL contexts)."""
    for worker in _WORKERS.values():
        worker.close()
    _WORKERS.clear()


def run_chunk(spec: ChunkSpec, on_attempt: Callable[[Attempt], None] | None = None,
              generator: Any = None) -> ChunkResult:
    """Execute one chunk's attempts into its shard (resuming a shard an interruption left unfinished).
    `generator`: the run's behaviour generator, built elsewhere (see `Worker`)."""
    done = shard_result(spec.path, spec.chunk)
    if done is not None:
        return done
    started = time.monotonic()
    key = spec.cfg.digest()
    if key not in _WORKERS:
        close_workers()
        _WORKERS[key] = Worker(spec.cfg, generator)
    worker = _WORKERS[key]
    os.makedirs(spec.shard_dir, exist_ok=True)
    with DemoWriter(spec.path, spec.cfg.task, {"run": key, "chunk": spec.chunk}) as writer:
        reasons = Counter(json.loads(writer.get_attr("shard_reasons", "{}")))
        steps = int(writer.get_attr("shard_steps", 0))
        plan_s = float(writer.get_attr("shard_plan_s", 0.0))
        physics_s = float(writer.get_attr("shard_physics_s", 0.0))
        start = int(writer.get_attr("shard_next", spec.attempts.start))
        for result in worker.attempts(range(start, spec.attempts.stop)):
            index = result.index
            if result.admitted:
                writer.append(result.demo, result.attrs)
            reasons[result.reason] += 1
            steps += result.steps
            plan_s += result.plan_s
            physics_s += result.physics_s
            writer.set_attr("shard_reasons", json.dumps(dict(reasons)))
            writer.set_attr("shard_steps", steps)
            writer.set_attr("shard_plan_s", plan_s)
            writer.set_attr("shard_physics_s", physics_s)
            writer.set_attr("shard_next", index + 1)
            if on_attempt is not None:
                on_attempt(result)
        writer.set_attr("shard_attempts", len(spec.attempts))
        writer.set_attr(SHARD_DONE, True)
        admitted, admitted_steps = writer.num_demos, writer.total
    return ChunkResult(spec.chunk, len(spec.attempts), admitted, dict(reasons), time.monotonic() - started,
                       f"{socket.gethostname()}:{os.getpid()}", steps=steps, plan_s=plan_s, physics_s=physics_s,
                       admitted_steps=admitted_steps)


def single_thread_rasteriser() -> None:
    """Have Mesa's software rasteriser (llvmpipe) draw in the calling thread of this process, unless LP_NUM_THREADS is
    set already. A generation worker is one core's work; llvmpipe's default, a thread per core in every process,
    hands each frame between threads and workers, which costs more than it gains when every core already runs a
    worker. Mesa reads it when the process makes its first GL context: call this before that."""
    os.environ.setdefault("LP_NUM_THREADS", "0")


def scratch_dir() -> Path:
    """This node's folder for shards in the making: $R2S2R_SCRATCH, else the system's temporary folder."""
    return Path(os.environ.get("R2S2R_SCRATCH") or tempfile.gettempdir()) / "r2s2r-chunks"


def run_scratch(run: str) -> Path:
    """This node's scratch folder of run `run` (see `run_chunk_detached`)."""
    return scratch_dir() / hashlib.sha256(run.encode()).hexdigest()[:16]


def remove_run_scratch(run: str) -> None:
    """Remove this node's scratch folder of run `run`, with the shards in the making of chunks cancelled there."""
    shutil.rmtree(run_scratch(run), ignore_errors=True)


def run_chunk_detached(cfg: GenerateCfg, chunk: int, run: str, generator: Any = None) -> tuple[ChunkResult, bytes]:
    """Execute one chunk into this node's scratch folder and return its result and the finished shard's bytes.

    `run` names the run (the driver's output and config); a retry of the chunk on the same node resumes the
    shard a failure left there. The shard is removed once read: the caller owns the bytes. `generator`: the
    run's behaviour generator as the driver built it, so that its input files (e.g. source demos) need not be
    on this node.
    """
    single_thread_rasteriser()
    folder = run_scratch(run)
    spec = ChunkSpec(cfg, chunk, str(folder))
    result = run_chunk(spec, generator=generator)
    data = spec.path.read_bytes()
    spec.path.unlink()
    try:
        folder.rmdir()
    except OSError:
        pass  # other chunks of the run are in the making here
    return dataclasses.replace(result, worker=result.worker or f"{socket.gethostname()}:{os.getpid()}"), data
