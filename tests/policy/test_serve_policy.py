"""The policy server (scripts/serve_policy.py, r2s2r.policy.server) as a cell meets it through openpi-client's own
`WebsocketClientPolicy`: a twin episode played through the server gets the actions the checkpoint gives in-process,
a reset request starts the episode over, observations that do not fit the checkpoint are refused with a message
naming the field while the server keeps serving, and a bad checkpoint stops the script before it listens."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless; must precede the first mujoco import

import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import ROOT, run_script  # noqa: E402
from openpi_client.websocket_client_policy import WebsocketClientPolicy  # noqa: E402

from r2s2r.evaluation.protocol import agent_observation  # noqa: E402
from r2s2r.policy.agent import load_agent  # noqa: E402
from r2s2r.policy.server import PROPRIO_SIZES, TRACKING_SIZES  # noqa: E402
from r2s2r.real.twin import TwinCell  # noqa: E402

CHECKPOINT = ROOT / "assets" / "policies" / "real_only.pt"  # object-centric, head_left at 128 x 128
SEED = 10001
STEPS = 60  # 3 s of the cell at 20 Hz, 15 replans of the 4-action queue; about 5 s here
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The port of scripts/serve_policy.py serving CHECKPOINT in its own process, once it accepts connections."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "serve_policy.py"), "--checkpoint",
                                 str(CHECKPOINT), "--host", HOST, "--port", str(port)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited with status {proc.returncode}:\n{log.read_text()}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not accept connections within 60 s:\n{log.read_text()}")
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def agent():
    return load_agent(CHECKPOINT)


@pytest.fixture(scope="module")
def cell(agent):
    cell = TwinCell(**agent.env_overrides)
    yield cell
    cell.close()


def test_a_client_plays_a_twin_episode_with_the_actions_of_the_checkpoint_in_process(server, agent, cell):
    client = WebsocketClientPolicy(HOST, server)
    meta = client.get_server_metadata()
    assert meta["cameras"] == ["head_left"] and meta["image_size"] == [128, 128]
    assert meta["actions_per_request"] == 1 and meta["action_dim"] == 27
    tracking = getattr(agent, "uses_tracking", False)
    assert bool(meta["tracking"]) == tracking

    obs = cell.reset(seed=SEED)
    # The server's entry sizes are the cell's.
    assert {k: v.shape for k, v in obs["proprio"].items()} == {k: (n,) for k, n in PROPRIO_SIZES.items()}
    assert all(obs["tracking"][k].shape == (n,) for k, n in TRACKING_SIZES.items())
    agent.reset()
    served = []
    for step in range(STEPS):
        sent = agent_observation(obs, tracking)
        reply = client.infer({**sent, "reset": step == 0})
        assert reply["actions"].shape == (1, 27) and reply["actions"].dtype == np.float64
        np.testing.assert_array_equal(reply["actions"][0], agent.act(sent), err_msg=f"step {step}")
        served.append(reply["actions"][0])
        result = cell.act(reply["actions"][0])
        obs = result.obs
        if result.done:
            break
    assert len(served) == STEPS, f"the episode ended after {len(served)} steps ({result.info})"

    # `reset` starts the policy over on the same connection: the same trial gives the same actions again (without
    # it the tracker would carry the last episode's object over).
    obs = cell.reset(seed=SEED)
    for step in range(6):
        reply = client.infer({**agent_observation(obs, tracking), "reset": step == 0})
        np.testing.assert_array_equal(reply["actions"][0], served[step], err_msg=f"step {step} after reset")
        obs = cell.act(reply["actions"][0]).obs


def test_an_observation_that_does_not_fit_is_refused_by_name_and_the_server_keeps_serving(server, agent, cell):
    obs = agent_observation(cell.reset(seed=SEED))
    frame = obs["images"]["head_left"]
    client = WebsocketClientPolicy(HOST, server)
    refused = [
        ({**obs, "images": {"right_wrist": frame}}, r"images: 'head_left' missing \(sent: \['right_wrist'\]\); "
                                                    r"expected \['head_left'\]"),
        ({**obs, "images": {"head_left": frame[::2, ::2]}},
         r"images\['head_left'\] = array of shape \(64, 64, 3\), dtype uint8: expected uint8 of shape \(128, 128, 3\)"),
        ({**obs, "proprio": {k: v for k, v in obs["proprio"].items() if k != "ee_pose"}},
         r"proprio: 'ee_pose' missing .*expected \['arm_q', 'hand_q', 'ee_pose', 'belt_setpoint'\]"),
    ]
    for bad, message in refused:
        with pytest.raises(RuntimeError, match=message) as e:
            client.infer(bad)
        assert "Traceback" not in str(e.value)

    # The same connection still serves, as the checkpoint in-process; so does a new one.
    agent.reset()
    np.testing.assert_array_equal(client.infer({**obs, "reset": True})["actions"][0], agent.act(obs))
    assert WebsocketClientPolicy(HOST, server).infer(obs)["actions"].shape == (1, 27)


@pytest.mark.parametrize("name, content", [("missing.pt", None), ("notes.pt", "not a checkpoint\n")])
def test_a_bad_checkpoint_exits_2_before_the_server_starts(tmp_path, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    result = run_script("serve_policy.py", "--checkpoint", str(path), "--port", str(free_port()), timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: checkpoint {str(path)!r}: "), result.stderr
    assert "serving" not in result.stdout
