"""Generation on a two-node Ray cluster started on this machine, with the output folder out of the nodes' reach.

Each node has its own temporary folder (its scratch folder is in it) and runs in its own mount namespace where
the output folder is an empty read-only file system (where `unshare -m` is allowed; elsewhere the nodes could
see it, and only the rest is checked). Only the driver, `scripts/generate.py`, sees the output folder. The cluster
runs mimic generation from recorded demos (the source file, given by an absolute path, is read on the nodes), and
must make the same dataset as one process.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, assert_same_demos, dataset_contents

from r2s2r.core import parse_dotted
from r2s2r.datagen import generate, make_generate_cfg

pytestmark = pytest.mark.slow

TASK = "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0"  # the planner: no source demos needed
CLUSTER_TASK = "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"  # mimic, from the session's recorded demos
SMALL = ["env.cameras=[right_wrist]", "env.image_size=[16,16]", "datagen.chunk_size=1"]
N, SEED = 2, 5
RAY = Path(sys.executable).with_name("ray")
ENV = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mount_namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def log_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Cluster:
    """A head and a second node on this machine, each with its own temporary folder; every process it starts
    carries a marker in its environment, by which `stop` finds them all (workers and agents included)."""

    def __init__(self, hidden: Path):
        self.hidden = hidden  # the folder the nodes must not see
        self.isolated = mount_namespaces()
        self.marker = f"R2S2R_TEST_RAY_CLUSTER={uuid.uuid4().hex}"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temps: list[Path] = []
        self.head = self.second = None  # the nodes' temporary folders

    def start_node(self, head: bool) -> Path:
        temp = Path(tempfile.mkdtemp(prefix="r2r-ray-", dir="/tmp"))  # short: Ray's socket paths live in it
        self.temps.append(temp)
        key, value = self.marker.split("=")
        env = {**ENV, "R2S2R_SCRATCH": str(temp / "scratch"), key: value}
        cmd = [str(RAY), "start", "--num-cpus", "1", "--temp-dir", str(temp), "--disable-usage-stats"]
        cmd += ["--head", "--port", str(self.port), "--include-dashboard", "false"] if head else \
            ["--address", self.address]
        if self.isolated:
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs -o ro,size=1m none "$0" && exec "$@"', str(self.hidden), *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=temp, timeout=180)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return temp

    def pids(self) -> list[int]:
        """This cluster's processes: those with its marker in their environment, a temporary folder of its nodes
        in their command line or as their working folder (Ray's agents and workers rename themselves, which can
        overwrite what /proc shows of their environment), and their descendants."""
        temps = [str(t).encode() for t in self.temps]
        found, parents = set(), {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            pid = int(proc.name)
            try:
                state, parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
                if state == "Z":
                    continue  # exited already
                parents[pid] = int(parent)
                if (self.marker.encode() in (proc / "environ").read_bytes().split(b"\0")
                        or any(t in (proc / "cmdline").read_bytes() for t in temps)
                        or any(os.readlink(proc / "cwd").encode().startswith(t) for t in temps)):
                    found.add(pid)
            except OSError:
                pass
        while True:
            more = {pid for pid, parent in parents.items() if parent in found} - found
            if not more:
                return sorted(found)
            found |= more

    def raylet(self, temp: Path) -> int:
        for pid in self.pids():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if args[0].endswith(b"/raylet") and any(str(temp).encode() in a for a in args):
                return pid
        raise AssertionError(f"no raylet of the node in {temp}")

    def stop(self) -> None:
        for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        for temp in self.temps:
            subprocess.run(["rm", "-rf", str(temp)], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, real_demos):
    """The dataset one process makes with the same config and seed."""
    out = tmp_path_factory.mktemp("one_process") / "sim.hdf5"
    started = time.monotonic()
    generate(make_generate_cfg(CLUSTER_TASK, N, SEED, parse_dotted([*SMALL, f"generator.source={real_demos}"])), out,
             progress=False)
    return out, time.monotonic() - started


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the module (a node takes seconds to start): the lost-node test, which kills the second node,
    comes last. Each test writes under its own folder of the hidden one."""
    hidden = tmp_path_factory.mktemp("out")
    c = Cluster(hidden)
    try:
        c.head = c.start_node(head=True)
        c.second = c.start_node(head=False)
        yield c
    finally:
        c.stop()


def generate_args(c: Cluster, out: Path, source: Path) -> list[str]:
    """generate.py on the cluster, writing the dataset and its chunk log into `out` (a folder the nodes cannot see)."""
    out.mkdir()
    return [sys.executable, str(ROOT / "scripts" / "generate.py"), "--task", CLUSTER_TASK, "--num-trajectories",
            str(N), "--seed", str(SEED), "--output", str(out / "sim.hdf5"), "--log-json", str(out / "chunks.jsonl"),
            "--no-progress", "--ray-address", c.address, *SMALL, f"generator.source={source}"]


@pytest.mark.ray
def test_two_nodes_without_the_output_folder_make_the_one_process_dataset(reference, cluster, real_demos):
    out = cluster.hidden / "two_nodes"
    started = time.monotonic()
    r = subprocess.run(generate_args(cluster, out, real_demos), capture_output=True, text=True, env=ENV, cwd=ROOT,
                       timeout=600)
    wall = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same_demos(dataset_contents(reference[0]), dataset_contents(out / "sim.hdf5"))
    lines = log_lines(out / "chunks.jsonl")
    assert len({line["node"] for line in lines}) == 2  # both nodes finished chunks
    chunks = [line["chunk"] for line in lines]
    assert len(chunks) == len(set(chunks)) and lines[-1]["total"]["admitted"] == N
    for line in lines:
        assert line["attempted"] == 1 and line["seconds"] > 0 and line["worker"] and not line["reused"]
    assert not (out / "sim.hdf5.shards").exists()
    if cluster.isolated:  # the output folder as the nodes see it: empty
        for temp in (cluster.head, cluster.second):
            seen = Path(f"/proc/{cluster.raylet(temp)}/root") / cluster.hidden.relative_to("/")
            assert seen.is_dir() and not list(seen.iterdir())
    for temp in (cluster.head, cluster.second):  # each node worked in its own scratch folder and left it empty
        scratch = temp / "scratch" / "r2s2r-chunks"
        assert scratch.is_dir() and not list(scratch.rglob("*.hdf5*"))
    print(f"\ntwo nodes: {wall:.1f} s (driver start and Ray connection included); one process: {reference[1]:.1f} s")


@pytest.mark.ray
def test_a_lost_node_loses_no_trajectory(reference, cluster, real_demos):
    out = cluster.hidden / "lost_node"
    proc = subprocess.Popen(generate_args(cluster, out, real_demos), env=ENV, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        scratch = cluster.second / "scratch" / "r2s2r-chunks"
        deadline = time.monotonic() + 300
        while not list(scratch.glob("*/chunk_*.hdf5.partial")) and proc.poll() is None:
            assert time.monotonic() < deadline, "the second node started no chunk"
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the second node started a chunk"
        os.kill(cluster.raylet(cluster.second), signal.SIGKILL)  # the node is lost mid-chunk
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # (The lost node's worker may still finish its chunk locally after the raylet dies; nothing of it arrives.)
    assert proc.returncode == 0, stderr[-3000:]
    # Every requested trajectory, each once, the same as one process makes them.
    assert_same_demos(dataset_contents(reference[0]), dataset_contents(out / "sim.hdf5"))
    lines = log_lines(out / "chunks.jsonl")
    chunks = [line["chunk"] for line in lines]
    assert len(chunks) == len(set(chunks))  # each chunk's shard written once
    assert len({line["node"] for line in lines}) == 1  # the lost node's chunk was redone on the head


@pytest.mark.parametrize("there", ["nothing", "a silent listener"])
def test_an_unreachable_ray_address_fails_within_seconds(tmp_path, there):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        if there == "a silent listener":
            listener.listen(8)  # connections are accepted (by the kernel) and never answered
        else:
            listener.close()
        out = tmp_path / "sim.hdf5"
        started = time.monotonic()
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate.py"), "--task", TASK,
                            "--num-trajectories", "1", "--output", str(out), "--no-progress", "--ray-address", address,
                            *SMALL], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
        seconds = time.monotonic() - started
    # Seconds, not the minutes of a hang: the script's start (its imports) plus the 5 s probe, which a loaded
    # machine stretches to about 17 s.
    assert r.returncode == 2 and seconds < 30, (seconds, r.stderr[-2000:])
    assert f"Ray cluster at {address}" in r.stderr.splitlines()[-1]
    assert not out.exists() and not Path(str(out) + ".shards").exists()
