"""Running a generation: checks before any work, chunks farmed out to processes or a Ray cluster, the merge.

The dataset is the first `num_trajectories` admitted attempts in attempt order, so it is the same whatever the
number of workers, and chunks are dispatched in order. Shards live in `<output>.shards/` beside the output, with
`run.json` (the run's config); a rerun of the same command skips finished chunks and resumes unfinished ones, and
a run with a different config refuses to mix with them. The merged file is written as `<output>.partial` and
renamed when complete; the shards are removed after that (unless kept).

On a multi-node Ray cluster the output folder must be on storage every node mounts (workers write their shards
there directly).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from tqdm import tqdm

from r2s2r.behavior import make_generator
from r2s2r.data.hdf5 import DatasetError, DemoReader, DemoWriter
from r2s2r.datagen.config import GenerateCfg
from r2s2r.datagen.worker import Attempt, ChunkResult, ChunkSpec, close_workers, run_chunk, shard_result
from r2s2r.files import write_text_atomic


@dataclass
class RunSummary:
    task: str
    generator: str
    output: Path
    trajectories: int = 0  # written to the output
    admitted: int = 0  # admitted in the chunks used (the last chunk may admit more than the output needs)
    attempts: int = 0  # attempted in the chunks used
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def admission_rate(self) -> float:
        return self.admitted / self.attempts if self.attempts else 0.0

    def as_dict(self) -> dict:
        return {"task": self.task, "generator": self.generator, "trajectories": self.trajectories,
                "admitted": self.admitted, "attempts": self.attempts, "admission_rate": round(self.admission_rate, 4),
                "reasons": dict(self.reasons), "seconds": round(self.seconds, 1)}

    def table(self) -> str:
        rows = [f"{self.task}: {self.trajectories} trajectories written; {self.admitted} admitted of {self.attempts} "
                f"attempts ({self.admission_rate:.0%}, generator '{self.generator}') in {self.seconds:.0f} s"]
        for reason, count in sorted(self.reasons.items(), key=lambda kv: -kv[1]):
            rows.append(f"  {reason:<18} {count:>6}  {count / max(self.attempts, 1):6.1%}")
        return "\n".join(rows)


def shard_dir(output: Path) -> Path:
    return output.with_name(output.name + ".shards")


def _config_key(cfg: GenerateCfg) -> dict:
    """The config minus the dataset size (asking for more trajectories continues the same run)."""
    desc = cfg.describe()
    desc["datagen"] = {k: v for k, v in desc["datagen"].items() if k != "num_trajectories"}
    return desc


def preflight(cfg: GenerateCfg, output: Path) -> int | None:
    """Every check that can fail before work starts; returns the demo count if `output` is already complete."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output.parent, prefix=".write-test-"):
            pass
    except OSError as e:
        raise DatasetError(f"{output}: cannot write there ({e.strerror or e})") from None
    key = _config_key(cfg)
    if output.exists():
        with DemoReader(output) as reader:
            if reader.env_name != cfg.task:
                raise DatasetError(f"{output}: already exists and was made by task {reader.env_name!r}, not "
                                   f"{cfg.task!r}; choose another --output or remove it")
            stored = json.loads(reader.data_attrs().get("generation_config", "null") or "null")
            if stored != key:
                raise DatasetError(f"{output}: already exists, made with a different config ({_diff(stored, key)}); "
                                   f"choose another --output or remove it")
            if len(reader) >= cfg.datagen.num_trajectories:
                return len(reader)
    run_file = shard_dir(output) / "run.json"
    if run_file.exists():
        stored = json.loads(run_file.read_text())
        if stored != key:
            raise DatasetError(f"{run_file}: an unfinished run with a different config ({_diff(stored, key)}) "
                               f"left its shards here; rerun it with its settings or remove {run_file.parent}")
    # Builds the generator once here so that its inputs (e.g. source demos) are checked before any work.
    make_generator(cfg.generator_name, cfg.generator)
    return None


def _diff(stored: dict | None, new: dict) -> str:
    if not isinstance(stored, dict):
        return "no config stored"
    changed = []
    for group in sorted(set(stored) | set(new)):
        a, b = stored.get(group), new.get(group)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += [f"{group}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            changed.append(group)
    return "differs in " + ", ".join(changed)


def _init_ray(address: str):
    import ray

    if not ray.is_initialized():
        env_vars = {k: os.environ[k] for k in ("MUJOCO_GL", "R2S2R_CONFIGS") if k in os.environ}
        ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": env_vars})
    return ray


def generate(cfg: GenerateCfg, output: str | os.PathLike, num_workers: int = 1, ray_address: str | None = None,
             progress: bool = True, keep_shards: bool = False) -> RunSummary:
    """Generate `cfg.datagen.num_trajectories` admitted trajectories into `output`; see the module docstring."""
    output = Path(output).absolute()
    started = time.monotonic()
    summary = RunSummary(cfg.task, cfg.generator_name, output)
    have = preflight(cfg, output)
    if have is not None:
        with DemoReader(output) as reader:
            stored = json.loads(reader.data_attrs().get("generation_summary", "{}"))
        summary.trajectories, summary.attempts = have, int(stored.get("attempts", 0))
        summary.admitted = int(stored.get("admitted", 0))
        summary.reasons = Counter(stored.get("reasons", {}))
        return summary
    shards = shard_dir(output)
    shards.mkdir(parents=True, exist_ok=True)
    run_file = shards / "run.json"
    if not run_file.exists():
        write_text_atomic(run_file, json.dumps(_config_key(cfg), indent=1))

    want, size = cfg.datagen.num_trajectories, cfg.datagen.chunk_size
    max_chunks = -(-cfg.datagen.attempt_limit // size)
    results: dict[int, ChunkResult] = {}
    for chunk in range(max_chunks):  # finished shards of an earlier run of this command
        done = shard_result(ChunkSpec(cfg, chunk, str(shards)).path, chunk)
        if done is None:
            break
        results[chunk] = done

    def prefix() -> tuple[int, int, int]:
        """(chunks, admitted, attempts) of the unbroken run of finished chunks from chunk 0."""
        n = admitted = attempts = 0
        while n in results:
            admitted += results[n].admitted
            attempts += results[n].attempts
            n += 1
        return n, admitted, attempts

    bar = tqdm(total=want, unit="traj", desc=f"generating {cfg.task}", dynamic_ncols=True, disable=not progress)
    seen = {"attempts": 0, "admitted": 0}

    def show() -> None:
        done_admitted = sum(r.admitted for r in results.values()) + seen["admitted"]
        done_attempts = sum(r.attempts for r in results.values()) + seen["attempts"]
        bar.n = min(done_admitted, want)
        bar.set_postfix(attempts=done_attempts, admitted=done_admitted,
                        admission=f"{done_admitted / max(done_attempts, 1):.0%}")
        bar.refresh()

    def on_attempt(a: Attempt) -> None:
        seen["attempts"] += 1
        seen["admitted"] += a.admitted
        show()

    def finished() -> bool:
        n, admitted, attempts = prefix()
        return admitted >= want or n >= max_chunks

    show()
    next_chunk = prefix()[0]
    if ray_address is None and num_workers <= 1:
        while not finished():
            while next_chunk in results:
                next_chunk += 1
            results[next_chunk] = run_chunk(ChunkSpec(cfg, next_chunk, str(shards)), on_attempt)
            seen.update(attempts=0, admitted=0)
            show()
        close_workers()
    else:
        _run_parallel(cfg, shards, results, finished, next_chunk, max_chunks, num_workers, ray_address, show)
    bar.close()

    n, admitted, attempts = prefix()
    summary.admitted, summary.attempts = admitted, attempts
    for chunk in range(n):
        summary.reasons.update(results[chunk].reasons)
    _merge(cfg, output, shards, n, summary)
    summary.seconds = time.monotonic() - started
    if not keep_shards and summary.trajectories >= want:
        shutil.rmtree(shards, ignore_errors=True)
    return summary


def _run_parallel(cfg, shards, results, finished, next_chunk, max_chunks, num_workers, ray_address, show) -> None:
    """Keep `num_workers` chunks in flight (in order) until the finished prefix holds enough trajectories."""
    want = cfg.datagen.num_trajectories

    def needed_more(in_flight: int) -> bool:
        # Do not start chunks the expected yield of those running already covers.
        done = list(results.values())
        attempts = sum(r.attempts for r in done)
        rate = sum(r.admitted for r in done) / attempts if attempts else 0.5
        expected = sum(r.admitted for r in done) + rate * in_flight * cfg.datagen.chunk_size
        return expected < want or in_flight == 0

    def dispatch(submit, wait_one, cancel, slots: int) -> None:
        """Keep `slots` chunks in flight, in order; `wait_one` returns finished (handle, result) pairs."""
        nonlocal next_chunk
        running: dict = {}
        try:
            while not finished():
                while len(running) < slots and next_chunk < max_chunks and needed_more(len(running)):
                    if next_chunk not in results:
                        running[submit(ChunkSpec(cfg, next_chunk, str(shards)))] = next_chunk
                    next_chunk += 1
                if not running:
                    break
                for handle, result in wait_one(list(running)):
                    results[running.pop(handle)] = result
                show()
        finally:
            for handle in running:
                cancel(handle)

    if ray_address is not None:
        ray = _init_ray(ray_address)
        remote = ray.remote(num_cpus=1, max_retries=2)(run_chunk)

        def cancel(ref) -> None:
            ray.cancel(ref, force=True)

        def wait_ray(refs: list) -> list:
            ready, _ = ray.wait(refs, num_returns=1)
            return [(ref, ray.get(ref)) for ref in ready]

        slots = num_workers if num_workers > 1 else int(ray.cluster_resources().get("CPU", 1))
        dispatch(remote.remote, wait_ray, cancel, slots)
        return
    with ProcessPoolExecutor(max_workers=num_workers, mp_context=get_context("spawn")) as pool:

        def cancel(future) -> None:
            future.cancel()

        def wait_pool(futures: list) -> list:
            ready, _ = wait(futures, return_when=FIRST_COMPLETED)
            return [(future, future.result()) for future in ready]

        try:
            dispatch(lambda spec: pool.submit(run_chunk, spec), wait_pool, cancel, num_workers)
        finally:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()  # chunks no longer needed: their shards stay resumable


def _merge(cfg: GenerateCfg, output: Path, shards: Path, chunks: int, summary: RunSummary) -> None:
    """The first `num_trajectories` admitted trajectories of chunks 0..chunks-1, in attempt order, into `output`."""
    want = cfg.datagen.num_trajectories
    env_args = {"generation_run": cfg.digest(), "generator": cfg.generator_name, "cameras": list(cfg.env.cameras),
                "image_size": list(cfg.env.image_size), "control_hz": cfg.env.control_hz,
                "action_mode": cfg.env.action_mode, "world": cfg.env.world}
    with DemoWriter(output, cfg.task, env_args, resume=False) as writer:
        for chunk in range(chunks):
            path = ChunkSpec(cfg, chunk, str(shards)).path
            with DemoReader(path) as reader:
                for name in reader.names:
                    if writer.num_demos >= want:
                        break
                    writer.append(reader.load(name), reader.attrs(name))
        summary.trajectories = writer.num_demos
        writer.set_attr("generation_config", json.dumps(_config_key(cfg)))
        writer.set_attr("generation_summary", json.dumps(summary.as_dict()))

