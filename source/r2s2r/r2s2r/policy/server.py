"""A policy checkpoint served to a cell over openpi's websocket protocol, the one `openpi-client` speaks.

A cell's controller connects with `openpi_client.websocket_client_policy.WebsocketClientPolicy(host, port)`:

- On connect the server sends its metadata (a msgpack map, numpy arrays packed as openpi's `msgpack_numpy` packs
  them): the checkpoint, the observation it must be sent (`cameras`, `image_size`, `proprio` and, for an agent that
  reads the cell's tracking, `tracking`: each key with its length), `action_dim` and `actions_per_request`.
- Each message the client sends (`client.infer(obs)`) is one control step's observation, the cell's observation
  dict: `{"proprio": {key: array}, "images": {camera: uint8 (H, W, 3)}}`, plus `"tracking"` for a tracking agent
  (`uses_tracking`). Other keys, cameras and proprio entries are ignored, so a cell may send its full observation.
- The reply is `{"actions": float64 (1, 27), "server_timing": {"infer_ms": ...}}`: an action chunk of one, the
  agent's action for this observation. Not the agent's whole queue: the object-centric agent updates its object
  tracker from every control step's observation, so it has to see each one; a client that executed a queue open-loop
  would act on a tracker that had not seen those steps, and its actions would differ from the agent run in-process.
- Reset: an observation carrying `"reset": True` resets the agent (its action chunks and tracker; an optional
  `"seed"` integer reseeds a sampling policy's noise, else the agent's own seed) before it acts on that observation.
  Send it with each episode's first observation: `WebsocketClientPolicy.reset()` sends nothing (openpi-client 0.1.2),
  so the request rides on the observation. Every connection gets its own copy of the agent, reset, so clients never
  share an episode's state; requests are answered one at a time.
- Errors are text frames, as openpi's server sends them (the client raises `RuntimeError` with the text). An
  observation that does not fit the checkpoint (a missing camera, a wrong image size, a missing or mis-sized proprio
  entry, no tracking group) is answered with one line naming the field, its value and what was expected; the agent
  is left untouched and the connection stays open for a corrected observation. Any other failure is answered as
  openpi answers it: the traceback as text, then the connection closed with code 1011 (internal error). The server
  keeps serving either way.
"""

from __future__ import annotations

import asyncio
import copy
import http
import logging
import time
import traceback
from collections.abc import Callable

import numpy as np
import websockets
from openpi_client import msgpack_numpy
from websockets.asyncio.server import Request, Response, ServerConnection, serve
from websockets.frames import CloseCode

from r2s2r.policy.object_centric import HEAD_PROPRIO, ObjectCentricAgent

log = logging.getLogger(__name__)

ACTION_DIM = 27
# Lengths of the cell's observation entries (its observation space, r2s2r.tasks.pick_sort.env.PickSortEnv): checked
# here so a mis-sized entry is named, instead of silently shifting the agent's concatenated proprio vector.
PROPRIO_SIZES = {"arm_q": 7, "arm_dq": 7, "hand_q": 20, "ee_pose": 7, "belt_setpoint": 1}
# What a tracking agent reads of the `tracking` group (object_centric.tracking_label).
TRACKING_SIZES = {"object_pos": 3, "object_quat": 4, "object_half_extents": 3, "target_bin_pos": 3}


class ObservationError(ValueError):
    """An observation does not fit the served checkpoint; the message names the field, its value and what was
    expected."""


def observation_spec(agent) -> dict:
    """What `agent` must be sent: cameras, image size, proprio entries and tracking entries (empty: none)."""
    # The object-centric head reads its own proprio set, not policy.proprio (which its checkpoint still carries).
    proprio = HEAD_PROPRIO if isinstance(agent, ObjectCentricAgent) else agent.cfg.proprio
    return {"cameras": list(agent.env_overrides["cameras"]), "image_size": list(agent.env_overrides["image_size"]),
            "proprio": {k: PROPRIO_SIZES[k] for k in proprio},
            "tracking": dict(TRACKING_SIZES) if getattr(agent, "uses_tracking", False) else {}}


def _vector(value, field: str, size: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf" or arr.shape != (size,):
        raise ObservationError(f"{field} = {_describe(value)}: expected a numeric array of shape ({size},)")
    return np.array(arr, dtype=np.float64)


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array of shape {tuple(value.shape)}, dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + " ..."


def _entries(obs: dict, name: str, wanted, what: str) -> dict:
    """`obs[name]`, checked to be a map holding every key of `wanted` (nothing wanted: not needed at all)."""
    if not wanted:
        return {}
    group = obs.get(name)
    if not isinstance(group, dict):
        raise ObservationError(f"{name} = {'missing' if group is None else _describe(group)}: expected a map "
                               f"holding {list(wanted)} ({what})")
    for key in wanted:
        if key not in group:
            raise ObservationError(f"{name}: {key!r} missing (sent: {sorted(map(str, group))}); expected "
                                   f"{list(wanted)} ({what})")
    return group


def check_observation(obs, spec: dict) -> dict:
    """The agent's observation from a client's: what `spec` lists, checked, as writable copies.

    Raises:
        ObservationError: for the first field that does not fit `spec`.
    """
    if not isinstance(obs, dict):
        raise ObservationError(f"observation = {_describe(obs)}: expected a map (the cell's observation dict)")
    h, w = spec["image_size"]
    images = _entries(obs, "images", spec["cameras"], "the cameras the policy observes")
    proprio = _entries(obs, "proprio", spec["proprio"], "the proprio the policy reads")
    tracking = _entries(obs, "tracking", spec["tracking"],
                        "the cell's tracking, which this policy reads: object_centric.perception = 'tracking'")
    out = {"images": {}, "proprio": {k: _vector(proprio[k], f"proprio[{k!r}]", n) for k, n in spec["proprio"].items()}}
    for cam in spec["cameras"]:
        frame = np.asarray(images[cam])
        if frame.shape != (h, w, 3) or frame.dtype != np.uint8:
            raise ObservationError(f"images[{cam!r}] = {_describe(images[cam])}: expected uint8 of shape ({h}, {w}, "
                                   f"3), the policy's image_size [{h}, {w}]")
        out["images"][cam] = np.array(frame)
    if spec["tracking"]:
        out["tracking"] = {k: _vector(tracking[k], f"tracking[{k!r}]", n) for k, n in spec["tracking"].items()}
    return out


def _reset_request(obs: dict) -> tuple[bool, int | None]:
    reset, seed = obs.get("reset", False), obs.get("seed")
    if not isinstance(reset, bool | np.bool_):
        raise ObservationError(f"reset = {_describe(reset)}: expected true or false")
    if seed is not None and (not isinstance(seed, int | np.integer) or isinstance(seed, bool) or
                             not 0 <= seed < 2**31):
        raise ObservationError(f"seed = {_describe(seed)}: expected an integer in [0, 2147483647]")
    return bool(reset), None if seed is None else int(seed)


def _health_check(connection: ServerConnection, request: Request) -> Response | None:
    # openpi's server answers plain HTTP GET /healthz, so a deployment's health probe needs no websocket client.
    return connection.respond(http.HTTPStatus.OK, "OK\n") if request.path == "/healthz" else None


class PolicyServer:
    """Serves one policy agent over openpi's websocket protocol (see the module docstring).

    Args:
        agent: An agent of `r2s2r.policy.agent.load_agent`; each connection acts with its own copy.
        name: The checkpoint's name, sent in the metadata.
    """

    def __init__(self, agent, name: str = "policy"):
        self.agent = agent
        self.spec = observation_spec(agent)
        self.metadata = {"checkpoint": name, **self.spec, "action_dim": ACTION_DIM, "actions_per_request": 1}

    def serve_forever(self, host: str, port: int, ready: Callable[[int], None] | None = None) -> None:
        """Listen on host:port until interrupted; `ready(port)` is called once listening (port 0: the one chosen)."""
        asyncio.run(self._run(host, port, ready))

    async def _run(self, host: str, port: int, ready) -> None:
        # As openpi's server: no per-message compression (images do not compress well and it costs latency), and no
        # size limit (a frame of several cameras at full size exceeds websockets' 1 MiB default).
        async with serve(self._handle, host, port, compression=None, max_size=None,
                         process_request=_health_check) as server:
            if ready is not None:
                ready(server.sockets[0].getsockname()[1])
            await server.serve_forever()

    async def _handle(self, ws: ServerConnection) -> None:
        log.info("connection from %s opened", ws.remote_address)
        agent = copy.deepcopy(self.agent)
        agent.reset()
        packer = msgpack_numpy.Packer()
        try:
            await ws.send(packer.pack(self.metadata))
            async for message in ws:
                try:
                    start = time.monotonic()
                    actions = self.infer(agent, message)
                    reply = {"actions": actions, "server_timing": {"infer_ms": (time.monotonic() - start) * 1e3}}
                    await ws.send(packer.pack(reply))
                except ObservationError as e:
                    log.warning("refused an observation from %s: %s", ws.remote_address, e)
                    await ws.send(str(e))
                except websockets.ConnectionClosed:
                    raise
                except Exception:
                    log.exception("inference failed for %s", ws.remote_address)
                    await ws.send(traceback.format_exc())
                    await ws.close(CloseCode.INTERNAL_ERROR, "internal server error; traceback in the previous frame")
                    return
        except websockets.ConnectionClosed:
            pass
        log.info("connection from %s closed", ws.remote_address)

    def infer(self, agent, message) -> np.ndarray:
        """The (1, 27) action chunk `agent` answers a client's message with (msgpack bytes of an observation)."""
        if isinstance(message, str):
            raise ObservationError("message: a text frame; expected a binary frame (an observation packed with "
                                   "openpi_client.msgpack_numpy)")
        try:
            obs = msgpack_numpy.unpackb(message)
        except Exception as e:  # msgpack (and a malformed array in it) raises several types
            why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            raise ObservationError(f"message: cannot be unpacked ({why}); expected an observation packed with "
                                   "openpi_client.msgpack_numpy") from None
        checked = check_observation(obs, self.spec)
        reset, seed = _reset_request(obs)
        if reset:
            agent.reset(seed)
        action = np.asarray(agent.act(checked), dtype=np.float64)
        return action.reshape(1, ACTION_DIM)
