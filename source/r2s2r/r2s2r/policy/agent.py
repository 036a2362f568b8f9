"""A trained policy deployed on a cell: observations in, one 27-vector action per control step out.

The agent predicts action chunks and turns them into one action per step (`r2s2r.policy.chunks.ActionChunks`:
receding horizon over `policy.execute` actions, or temporal ensembling with `policy.ensemble`). It sees only
`proprio` and `images`, never tracker data, and tells a domain-aware policy that it is on the real side. Sampling
noise comes from a generator seeded at `reset`, so a trial is reproducible.

Inference runs on one torch thread by default: a model this size needs no more, while torch's default (all cores)
spins against the renderer and physics running beside it, which slows every chunk down on a busy machine.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch

from r2s2r.core import ConfigError
from r2s2r.policy.checkpoint import CheckpointError, build_policy, load_checkpoint, load_weights, train_cfg_of
from r2s2r.policy.chunks import ActionChunks
from r2s2r.policy.config import PolicyCfg
from r2s2r.policy.model import FlowMatchingPolicy


class PolicyAgent:
    """Wraps a `FlowMatchingPolicy` for closed-loop control."""

    def __init__(self, policy: FlowMatchingPolicy, name: str = "policy", seed: int = 0, threads: int | None = 1,
                 device: str = "cpu", cfg: PolicyCfg | None = None):
        if threads:
            torch.set_num_threads(threads)
        self.device = torch.device(device)
        self.policy = policy.to(self.device).eval()
        self.cfg: PolicyCfg = cfg or policy.cfg  # the policy's own, or with deploy-time execution settings
        self.name = name
        self.seed = seed
        self.chunks = ActionChunks(self.cfg.execute, self.cfg.ensemble)
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def env_overrides(self) -> dict:
        """What a task environment must render for this policy (`tasks.make(task, **agent.env_overrides)`)."""
        return {"cameras": tuple(self.cfg.cameras), "image_size": tuple(self.cfg.image_size)}

    def reset(self, seed: int | None = None) -> None:
        self.chunks.reset()
        self.generator.manual_seed(self.seed if seed is None else seed)

    def _inputs(self, obs: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        images = {}
        for cam in self.cfg.cameras:
            frame = obs.get("images", {}).get(cam)
            if frame is None:
                raise CheckpointError(f"{self.name}: the policy observes camera {cam!r} (policy.cameras = "
                                      f"{list(self.cfg.cameras)}) but the observation has "
                                      f"{sorted(obs.get('images', {}))}")
            if frame.shape[:2] != tuple(self.cfg.image_size):
                raise CheckpointError(f"{self.name}: camera {cam!r} renders {list(frame.shape[:2])} pixels; the "
                                      f"policy was trained on {list(self.cfg.image_size)} (policy.image_size)")
            images[cam] = torch.from_numpy(np.require(frame, requirements="CW"))[None]  # copied if read-only or strided
        proprio = np.concatenate([np.asarray(obs["proprio"][k], dtype=np.float32).ravel() for k in self.cfg.proprio]) \
            if self.cfg.proprio else np.zeros(0, np.float32)
        return images, torch.from_numpy(proprio)[None]

    @torch.no_grad()
    def predict_chunk(self, obs: dict) -> np.ndarray:
        """One action chunk (chunk, 27) for `obs`."""
        images, proprio = self._inputs(obs)
        tokens = self.policy.encode({c: v.to(self.device) for c, v in images.items()}, proprio.to(self.device))
        # Noise is drawn on the CPU, so a seed gives the same trial on any device.
        noise = torch.randn((1, self.cfg.chunk, self.cfg.action_dim), generator=self.generator)
        return self.policy.sample(tokens, noise.to(self.device))[0].cpu().double().numpy()

    def act(self, obs: dict) -> np.ndarray:
        if self.chunks.wants_chunk:
            self.chunks.add(self.predict_chunk(obs))
        return self.chunks.next()

    def __call__(self, obs: dict) -> np.ndarray:
        return self.act(obs)


class PolicyController:
    """An agent (`load_agent`) behind the behaviour-generator interface (`reset(env, obs, rng)`, `__call__(obs)`),
    so a script plays it where it would play a generator; it is handed only proprio and images."""

    def __init__(self, agent):
        self.agent = agent

    def reset(self, env, obs: dict, rng: np.random.Generator) -> None:
        self.agent.reset(int(rng.integers(2**31)))

    def __call__(self, obs: dict) -> np.ndarray:
        return self.agent.act({"proprio": obs["proprio"], "images": obs["images"]})


EXECUTION_FIELDS = ("execute", "ensemble")  # PolicyCfg fields that only say how chunks are executed


def with_execution(cfg: PolicyCfg, execution: dict | None) -> PolicyCfg:
    """`cfg` with deploy-time execution settings (any of EXECUTION_FIELDS) replaced and validated: how a trained
    policy's chunks are executed is a choice at deployment, not part of what it learned."""
    if not execution:
        return cfg
    unknown = sorted(set(execution) - set(EXECUTION_FIELDS))
    if unknown:
        raise ConfigError(f"execution settings {unknown}: unknown; expected any of {list(EXECUTION_FIELDS)}")
    return dataclasses.replace(cfg, **execution).validate()


def load_agent(path: str | os.PathLike, seed: int = 0, device: str = "cpu", execution: dict | None = None):
    """The agent for any policy checkpoint: a `PolicyAgent` (flow transformer) or an `ObjectCentricAgent`;
    `execution` overrides the checkpoint's `policy.execute` / `policy.ensemble` (`with_execution`) and, for an
    object-centric policy, `object_centric.hand_cover` (key "hand_cover"): which frames its tracker reads is a choice
    at deployment too.

    A checkpoint that is not one (missing keys, a config that does not validate, weights that do not fit the config
    or are not finite) is a `CheckpointError` naming the file and what is wrong."""
    payload = load_checkpoint(path)
    execution = dict(execution or {})
    hand_cover = execution.pop("hand_cover", None)
    if payload.get("kind") != "object_centric":
        if hand_cover is not None:
            raise ConfigError(f"hand_cover = {hand_cover}: only object-centric policies track the object; {path} is "
                              "a flow-transformer policy")
        policy = build_policy(payload, path=path)
        return PolicyAgent(policy, name=str(path), seed=seed, device=device,
                           cfg=with_execution(policy.cfg, execution))
    from r2s2r.policy.object_centric import (ObjectCentricAgent, ObjectCentricPolicy, object_locator, phased_belt_top,
                                             resting_belt_top)

    cfg = train_cfg_of(payload)
    oc = cfg.object_centric
    if hand_cover is not None:
        oc = dataclasses.replace(oc, hand_cover=hand_cover).validate()
    policy = ObjectCentricPolicy.from_cfg(cfg, payload["proprio_dim"])
    load_weights(policy, payload, "model", path)
    return ObjectCentricAgent(policy, with_execution(cfg.policy, execution), object_locator(cfg), oc.control_hz,
                              name=str(path), action_frame=oc.action_frame, perception=oc.perception,
                              belt_top=phased_belt_top(oc), resting_belt_top=resting_belt_top(oc),
                              hand_cover=oc.hand_cover)
