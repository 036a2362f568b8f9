"""Running a generation: checks before any work, chunks farmed out to processes or a Ray cluster, the merge.

The dataset is the first `num_trajectories` admitted attempts in attempt order, so it is the same whatever the
number of workers, and chunks are dispatched in order. Shards live in `<output>.shards/` beside the output, with
`run.json` (the run's config); a rerun of the same command skips finished chunks and resumes unfinished ones, and
a run with a different config refuses to mix with them. The merged file is written as `<output>.partial` and
renamed when complete; the shards are removed after that (unless kept). A run that admits fewer than asked within
its attempt limit publishes no output: its shards stay, and a rerun with a larger `datagen.max_attempts` resumes
from them.

Worker processes on this machine write their shards into `<output>.shards/` themselves. On a Ray cluster the nodes
need not share a file system with this process: the behaviour generator is built here (where its inputs, e.g. the
source demos, are) and shipped with the tasks; a task writes its chunk into a scratch folder on its own node
(`$R2S2R_SCRATCH` there, else the node's temporary folder), returns the finished shard's bytes through Ray's object
store, and this process writes the shard under its final name (temporary name, checked, flushed, renamed), so
resume and merge are the same as for local processes. A task whose node is lost is run again by Ray
(`max_retries`), from the start of its chunk, on another node; a chunk's shard is written once, by this process, so
no admitted trajectory is lost or counted twice. An unreachable `ray_address` is reported within seconds (before
Ray is started the address must accept a TCP connection and answer it as a gRPC server does, and Ray's own attempts
to join are cut to GCS_WAIT_S seconds; left to itself Ray retries for minutes, or hangs on a silent port).

Progress (a tqdm bar, and with `log_json` one JSON line per finished chunk) reports admitted / attempted, the
admission rate, rejections by reason and an ETA from this run's admission speed so far. A run in one process
updates it after every attempt; worker processes and Ray tasks report when a chunk is finished.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import sys
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
from r2s2r.datagen.worker import (
    Attempt,
    ChunkResult,
    ChunkSpec,
    close_workers,
    run_chunk,
    run_chunk_detached,
    remove_run_scratch,
    scratch_dir,
    shard_result,
    single_thread_rasteriser,
)
from r2s2r.files import atomic_path, write_text_atomic

CONNECT_TIMEOUT_S = 5.0  # for the reachability check of a Ray cluster's address
GCS_WAIT_S = 6  # attempts (about 1 s each) to reach the Ray head's GCS at an address that accepts connections
CLEANUP_WAIT_S = 10.0  # for cancelled chunks to stop, and then for the nodes to remove their scratch folders


class ClusterError(ConnectionError):
    """The Ray cluster cannot be reached or joined."""


@dataclass
class RunSummary:
    task: str
    generator: str
    output: Path
    trajectories: int = 0  # written to the output
    admitted: int = 0  # admitted in the chunks used (the last chunk may admit more than the output needs)
    attempts: int = 0  # attempted in the chunks used
    steps: int = 0  # control steps of every attempt's physics in the chunks used
    admitted_steps: int = 0  # control steps of their admitted attempts, written or not: the frames rendered
    plan_s: float = 0.0  # seconds in the behaviour generator over those attempts (planning and per-step actions)
    physics_s: float = 0.0  # seconds in those attempts' physics (their control periods' mj_step)
    renderer_choice: dict | None = None  # how env.renderer="auto" was decided (renderer_choice.RendererChoice)
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def admission_rate(self) -> float:
        return self.admitted / self.attempts if self.attempts else 0.0

    def as_dict(self) -> dict:
        return {"task": self.task, "generator": self.generator, "trajectories": self.trajectories,
                "admitted": self.admitted, "attempts": self.attempts, "admission_rate": round(self.admission_rate, 4),
                "reasons": dict(self.reasons), "seconds": round(self.seconds, 1),
                "renderer_choice": self.renderer_choice}

    def table(self) -> str:
        rows = [f"{self.task}: {self.trajectories} trajectories written; {self.admitted} admitted of {self.attempts} "
                f"attempts ({self.admission_rate:.0%}, generator '{self.generator}') in {self.seconds:.0f} s"]
        for reason, count in sorted(self.reasons.items(), key=lambda kv: -kv[1]):
            rows.append(f"  {reason:<18} {count:>6}  {count / max(self.attempts, 1):6.1%}")
        return "\n".join(rows)


def shard_dir(output: Path) -> Path:
    return output.with_name(output.name + ".shards")


def _config_key(cfg: GenerateCfg) -> dict:
    """The config minus the dataset size and the attempt limit (asking for more trajectories, or allowing more
    attempts, continues the same run: neither changes what any chunk holds)."""
    desc = cfg.describe()
    desc["datagen"] = {k: v for k, v in desc["datagen"].items() if k not in ("num_trajectories", "max_attempts")}
    return desc


def _resolve_renderer(cfg: GenerateCfg, output: Path) -> tuple[GenerateCfg, dict | None]:
    """`env.renderer="auto"` made concrete: the renderer a run already under way (its shards or output) chose, so
    that it resumes with the same images on any machine, else the one this machine renders fastest with the same
    images (`r2s2r.tasks.pick_sort.renderer_choice`). Returns the config and the choice's measurement."""
    from r2s2r.tasks.pick_sort.renderer_choice import AUTO, CANDIDATES, resolve_renderer

    if cfg.env.renderer != AUTO or cfg.isaaclab:
        return cfg, None
    stored = None
    run_file = shard_dir(output) / "run.json"
    try:
        if run_file.exists():
            stored = json.loads(run_file.read_text())
        elif output.exists():
            with DemoReader(output) as reader:
                stored = json.loads(reader.data_attrs().get("generation_config", "null") or "null")
    except (OSError, ValueError, DatasetError):
        stored = None  # preflight reports what is wrong with them
    renderer = stored.get("env", {}).get("renderer") if isinstance(stored, dict) else None
    if renderer in CANDIDATES:
        return dataclasses.replace(cfg, env=cfg.env.replace(renderer=renderer)), {"renderer": renderer,
                                                                                  "reason": "the run's own"}
    env, choice = resolve_renderer(cfg.env)
    return dataclasses.replace(cfg, env=env), choice.as_dict() if choice else None


def preflight(cfg: GenerateCfg, output: Path, ray_address: str | None = None) -> int | None:
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
    if ray_address is not None:
        check_reachable(ray_address)
    # Builds the generator once here so that its inputs (e.g. source demos) are checked before any work.
    make_generator(cfg.generator_name, cfg.generator)
    return None


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise `ClusterError` unless a Ray address (HOST:PORT or ray://HOST:PORT; 'auto' and 'local' are left to
    Ray) accepts a TCP connection and answers it as a gRPC server does (an HTTP/2 SETTINGS frame), each within
    `timeout` s. Ray itself keeps retrying an unreachable head for minutes, or hangs on a port that is open but
    silent."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"Ray address {address!r}: expected HOST:PORT (e.g. 10.0.0.5:6379), ray://HOST:PORT or "
                           f"'auto'")
    hint = f"check the address and that the head node runs there (ray start --head --port {port})"
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as e:
        why = f"no answer within {timeout:.0f} s" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ClusterError(f"cannot reach the Ray cluster at {address} ({why}); {hint} and its port is "
                           f"open") from None
    head = b""
    with conn:
        try:
            conn.settimeout(timeout)
            conn.sendall(_H2_PREFACE)
            while len(head) < 9:
                more = conn.recv(9 - len(head))
                if not more:
                    break
                head += more
        except OSError:
            pass
    if len(head) < 9 or head[3] != 4:  # a frame header: length (3 bytes), type (4: SETTINGS), flags, stream
        raise ClusterError(f"the Ray cluster at {address}: something accepts connections there but does not "
                           f"answer as a Ray head (gRPC) within {timeout:.0f} s; {hint}")


# An HTTP/2 client's connection preface and an empty SETTINGS frame; a gRPC server answers with its SETTINGS.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


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
        # Something answers at the address (checked in preflight); if it is not a Ray head, give up after
        # GCS_WAIT_S attempts of ~1 s instead of Ray's 20 (unless the variable is set already).
        wait_var = "RAY_gcs_server_port_wait_time_s"
        shorten = address != "local" and wait_var not in os.environ
        if shorten:
            os.environ[wait_var] = str(GCS_WAIT_S)
        try:
            ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": env_vars})
        except ConnectionError as e:
            raise ClusterError(f"cannot join the Ray cluster at {address}: {e}") from None
        finally:
            if shorten:
                os.environ.pop(wait_var, None)
    return ray


def _chunk_on_node(cfg: GenerateCfg, chunk: int, run: str, generator) -> tuple[ChunkResult, bytes]:
    """A Ray task: one chunk in the node's scratch folder; returns its result and shard bytes."""
    import ray

    result, data = run_chunk_detached(cfg, chunk, run, generator)
    return dataclasses.replace(result, node=ray.get_runtime_context().get_node_id()), data


def _remove_scratch(ray, run: str, cancelled: list) -> None:
    """After a finished run: remove its scratch folder on every live node. Chunks still running when the output had
    enough were cancelled, and a cancelled task leaves its shard in the making behind (a retry of a failed one
    would resume it); they are waited for first, so that none writes after its folder is gone. Best effort: the
    dataset is complete, and a node that does not answer (e.g. lost, and not yet known to be) keeps its folder."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if cancelled:
        ray.wait(cancelled, num_returns=len(cancelled), timeout=CLEANUP_WAIT_S)
    remove = ray.remote(num_cpus=0, max_retries=0)(remove_run_scratch)
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    refs = [remove.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(run)
            for node in nodes]
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=CLEANUP_WAIT_S)
    if len(done) < len(refs):
        print(f"generate: {len(refs) - len(done)} of {len(nodes)} nodes did not clear their scratch folder of this run "
              f"({scratch_dir().name}/) within {CLEANUP_WAIT_S:.0f} s", file=sys.stderr)


def _store_shard(path: Path, data: bytes, result: ChunkResult) -> None:
    """Write a shard a node returned under its final name: to a temporary name, checked and flushed, then renamed."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        stored = shard_result(tmp, result.chunk)
        if stored is None or (stored.attempts, stored.admitted) != (result.attempts, result.admitted):
            raise DatasetError(f"{path}: the shard returned for chunk {result.chunk} is not the finished shard of "
                               f"its result ({result.admitted} admitted of {result.attempts})")


class ChunkLog:
    """Appends one JSON line per finished chunk to a file. Each line goes out in one write() and is flushed to
    disk before the next, so a crash cannot leave a half line in front of later ones."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise DatasetError(f"{self.path}: cannot write the chunk log there ({e.strerror or e})") from None
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            self._write(b"\n")  # a line an earlier crash cut short stays a line of its own

    def write(self, record: dict) -> None:
        self._write((json.dumps(record) + "\n").encode())

    def _write(self, data: bytes) -> None:
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Progress:
    """What the bar and the chunk log report: admitted / attempted, admission rate, rejections by reason, ETA."""

    def __init__(self, cfg: GenerateCfg, results: dict[int, ChunkResult], enabled: bool, log: ChunkLog | None):
        self.task, self.want, self.results, self.log = cfg.task, cfg.datagen.num_trajectories, results, log
        self.live: Counter = Counter()  # reasons of the attempts of a chunk running in this process
        self.started = time.monotonic()
        self.initial = min(self.totals()[0], self.want)  # admitted before this run (an earlier run's shards)
        self.bar = tqdm(total=self.want, initial=self.initial, unit="traj", desc=f"generating {cfg.task}",
                        dynamic_ncols=True, disable=not enabled,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} admitted{postfix}")
        self.show()

    def totals(self) -> tuple[int, int, Counter]:
        """(admitted, attempted, rejections by reason) over the finished chunks and the running one."""
        reasons = Counter(self.live)
        for result in self.results.values():
            reasons.update(result.reasons)
        attempted = sum(reasons.values())
        admitted = reasons.pop("admitted", 0)
        return admitted, attempted, reasons

    def eta(self, admitted: int) -> float | None:
        """Seconds until `want` at this run's admission speed so far (None before its first admission)."""
        admitted = min(admitted, self.want)
        if admitted >= self.want:
            return 0.0
        gained, elapsed = admitted - self.initial, time.monotonic() - self.started
        return (self.want - admitted) * elapsed / gained if gained > 0 else None

    def status(self) -> str:
        admitted, attempted, rejected = self.totals()
        eta = self.eta(admitted)
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])))
        return (f"of {attempted} attempted, {admitted / max(attempted, 1):.0%} admission; rejected: "
                f"{reasons or 'none'}; ETA {'?' if eta is None else tqdm.format_interval(eta)}")

    def show(self) -> None:
        self.bar.n = min(self.totals()[0], self.want)
        self.bar.set_postfix_str(self.status(), refresh=True)

    def attempt(self, a: Attempt) -> None:
        self.live[a.reason] += 1
        self.show()

    def chunk(self, result: ChunkResult) -> None:
        """A chunk finished (its result is in `results`)."""
        self.live.clear()
        self.show()
        if self.log is None:
            return
        admitted, attempted, rejected = self.totals()
        eta = self.eta(admitted)
        self.log.write({
            "time": round(time.time(), 3), "task": self.task, "chunk": result.chunk, "admitted": result.admitted,
            "attempted": result.attempts,
            "rejected": {r: n for r, n in sorted(result.reasons.items()) if r != "admitted"},
            "seconds": round(result.seconds, 2), "worker": result.worker, "node": result.node,
            "reused": not result.worker, "elapsed": round(time.monotonic() - self.started, 2),
            "total": {"admitted": admitted, "attempted": attempted, "wanted": self.want,
                      "admission_rate": round(admitted / max(attempted, 1), 4),
                      "rejected": dict(sorted(rejected.items())), "eta_s": None if eta is None else round(eta, 1)}})

    def close(self) -> None:
        self.bar.close()
        if self.log is not None:
            self.log.close()


def generate(cfg: GenerateCfg, output: str | os.PathLike, num_workers: int = 1, ray_address: str | None = None,
             progress: bool = True, keep_shards: bool = False, log_json: str | os.PathLike | None = None) -> RunSummary:
    """Generate `cfg.datagen.num_trajectories` admitted trajectories into `output`; see the module docstring.
    `log_json`: a file to append one JSON line per finished chunk to."""
    output = Path(output).absolute()
    started = time.monotonic()
    # Before this process draws anything (the renderer choice may): the in-process worker of a 1-worker run and the
    # spawned workers, which inherit the environment, rasterise in their own thread. Ray tasks set it themselves.
    single_thread_rasteriser()
    cfg, choice = _resolve_renderer(cfg, output)
    summary = RunSummary(cfg.task, cfg.generator_name, output, renderer_choice=choice)
    have = preflight(cfg, output, ray_address)
    if have is not None:
        with DemoReader(output) as reader:
            stored = json.loads(reader.data_attrs().get("generation_summary", "{}"))
        summary.trajectories, summary.attempts = have, int(stored.get("attempts", 0))
        summary.admitted = int(stored.get("admitted", 0))
        summary.reasons = Counter(stored.get("reasons", {}))
        return summary
    if ray_address is not None:
        _init_ray(ray_address)  # joined before anything is written, so that a failure to join leaves nothing
    log = ChunkLog(log_json) if log_json is not None else None
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
        if done is not None:
            results[chunk] = done

    def prefix() -> tuple[int, int, int]:
        """(chunks, admitted, attempts) of the unbroken run of finished chunks from chunk 0."""
        n = admitted = attempts = 0
        while n in results:
            admitted += results[n].admitted
            attempts += results[n].attempts
            n += 1
        return n, admitted, attempts

    def finished() -> bool:
        n, admitted, attempts = prefix()
        return admitted >= want or n >= max_chunks

    tracker = Progress(cfg, results, progress, log)
    try:
        next_chunk = prefix()[0]
        if ray_address is None and num_workers <= 1:
            while not finished():
                while next_chunk in results:
                    next_chunk += 1
                results[next_chunk] = run_chunk(ChunkSpec(cfg, next_chunk, str(shards)), tracker.attempt)
                tracker.chunk(results[next_chunk])
            close_workers()
        else:
            _run_parallel(cfg, shards, results, finished, next_chunk, max_chunks, num_workers, ray_address,
                          tracker.chunk)
    finally:
        tracker.close()

    n, admitted, attempts = prefix()
    summary.admitted, summary.attempts = admitted, attempts
    for chunk in range(n):
        summary.reasons.update(results[chunk].reasons)
        summary.steps += results[chunk].steps
        summary.admitted_steps += results[chunk].admitted_steps
        summary.plan_s += results[chunk].plan_s
        summary.physics_s += results[chunk].physics_s
    _merge(cfg, output, shards, n, summary)
    summary.seconds = time.monotonic() - started
    if not keep_shards and summary.trajectories >= want:
        shutil.rmtree(shards, ignore_errors=True)
    return summary


def _run_parallel(cfg, shards, results, finished, next_chunk, max_chunks, num_workers, ray_address,
                  on_chunk) -> None:
    """Keep `num_workers` chunks in flight (in order) until the finished prefix holds enough trajectories."""
    want = cfg.datagen.num_trajectories

    def needed_more(in_flight: int) -> bool:
        # Do not start chunks the expected yield of those running already covers.
        done = list(results.values())
        attempts = sum(r.attempts for r in done)
        rate = sum(r.admitted for r in done) / attempts if attempts else 0.5
        expected = sum(r.admitted for r in done) + rate * in_flight * cfg.datagen.chunk_size
        return expected < want or in_flight == 0

    def dispatch(submit, wait_any, collect, cancel, slots: int) -> None:
        """Keep `slots` chunks in flight, in order. `submit(chunk)` returns a handle, `wait_any(handles)` those
        finished, `collect(handle, chunk)` the chunk's result once its shard is in `shards`."""
        nonlocal next_chunk
        running: dict = {}
        try:
            while not finished():
                while len(running) < slots and next_chunk < max_chunks and needed_more(len(running)):
                    if next_chunk not in results:
                        running[submit(next_chunk)] = next_chunk
                    next_chunk += 1
                if not running:
                    break
                for handle in wait_any(list(running)):
                    chunk = running.pop(handle)
                    results[chunk] = collect(handle, chunk)
                    on_chunk(results[chunk])
        finally:
            for handle in running:
                cancel(handle)

    if ray_address is not None:
        ray = _init_ray(ray_address)
        # Ray runs a task again (from the start of its chunk) when its worker or node is lost.
        remote = ray.remote(num_cpus=1, max_retries=3)(_chunk_on_node)
        cfg_ref = ray.put(cfg)
        # Built here, where its inputs (e.g. the source demos) are, and shipped: the nodes need not have them.
        generator_ref = ray.put(make_generator(cfg.generator_name, cfg.generator))
        run = f"{shards}:{cfg.digest()}"  # names this run's scratch folder on each node

        def submit_ray(chunk: int):
            return remote.remote(cfg_ref, chunk, run, generator_ref)

        def wait_ray(refs: list) -> list:
            return ray.wait(refs, num_returns=1)[0]

        def collect_ray(ref, chunk: int) -> ChunkResult:
            result, data = ray.get(ref)
            _store_shard(ChunkSpec(cfg, chunk, str(shards)).path, data, result)
            return result

        cancelled = []

        def cancel_ray(ref) -> None:
            ray.cancel(ref, force=True)
            cancelled.append(ref)

        slots = num_workers if num_workers > 1 else int(ray.cluster_resources().get("CPU", 1))
        dispatch(submit_ray, wait_ray, collect_ray, cancel_ray, slots)
        _remove_scratch(ray, run, cancelled)
        return
    with ProcessPoolExecutor(max_workers=num_workers, mp_context=get_context("spawn")) as pool:

        def submit_pool(chunk: int):
            return pool.submit(run_chunk, ChunkSpec(cfg, chunk, str(shards)))

        def wait_pool(futures: list) -> list:
            return list(wait(futures, return_when=FIRST_COMPLETED)[0])

        def collect_pool(future, chunk: int) -> ChunkResult:
            return future.result()

        def cancel_pool(future) -> None:
            future.cancel()

        try:
            dispatch(submit_pool, wait_pool, collect_pool, cancel_pool, num_workers)
        finally:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()  # chunks no longer needed: their shards stay resumable


def _merge(cfg: GenerateCfg, output: Path, shards: Path, chunks: int, summary: RunSummary) -> None:
    """The first `num_trajectories` admitted trajectories of chunks 0..chunks-1, in attempt order, into `output`."""
    want = cfg.datagen.num_trajectories
    env_args = {"generation_run": cfg.digest(), "generator": cfg.generator_name, "cameras": list(cfg.env.cameras),
                "image_size": list(cfg.env.image_size), "control_hz": cfg.env.control_hz,
                "action_mode": cfg.env.action_mode, "world": cfg.env.world, "renderer": cfg.env.renderer}
    writer = DemoWriter(output, cfg.task, env_args, resume=False)
    try:
        for chunk in range(chunks):
            path = ChunkSpec(cfg, chunk, str(shards)).path
            with DemoReader(path) as reader:
                for name in reader.names:
                    if writer.num_demos >= want:
                        break
                    writer.append_from(reader, name)
        summary.trajectories = writer.num_demos
        writer.set_attr("generation_config", json.dumps(_config_key(cfg)))
        writer.set_attr("generation_summary", json.dumps(summary.as_dict()))
    except BaseException:
        writer.close(publish=False)
        writer.partial.unlink(missing_ok=True)  # the shards hold the work; a merge is redone from them
        raise
    if summary.trajectories < want:  # too few: nothing is published, the shards stay for a rerun
        writer.close(publish=False)
        writer.partial.unlink(missing_ok=True)
    else:
        writer.close()

