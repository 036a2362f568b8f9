"""Policy checkpoints: one file holding everything needed to resume training or to deploy.

A checkpoint stores the train config, the policy's weights and EMA weights (normalization statistics included, as
buffers), the optimizer and schedule, the step, and every random stream (torch and the data sampler), so resuming
continues the run exactly. It is written to a temporary name and renamed, so a crash never leaves a half-written
checkpoint under the real name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch

from r2s2r.cell.spec import ConfigError
from r2s2r.files import atomic_path
from r2s2r.policy.config import PolicyCfg, TrainCfg, train_cfg_from_mapping
from r2s2r.policy.model import FlowMatchingPolicy

FORMAT = "r2s2r.policy/1"


class CheckpointError(ConfigError):
    """A checkpoint cannot be used as asked; the message names the file and the field."""


def cfg_dict(cfg: TrainCfg) -> dict:
    """The config as plain JSON/YAML data (lists, not tuples)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, **payload}, tmp)
    return path


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r}: no such file")
    try:
        # weights_only: a checkpoint is data; unpickling arbitrary objects would run whatever code a file carries.
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for a file that is not a checkpoint
        raise CheckpointError(f"checkpoint {str(path)!r}: cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r}: not a policy checkpoint of this package (format "
                              f"{payload.get('format') if isinstance(payload, dict) else None!r}, expected {FORMAT!r})")
    return payload


def train_cfg_of(payload: dict) -> TrainCfg:
    return train_cfg_from_mapping(payload["cfg"])


def build_policy(payload: dict, ema: bool = True) -> FlowMatchingPolicy:
    """The policy a checkpoint holds (its EMA weights by default), in eval mode."""
    cfg = train_cfg_of(payload)
    policy = FlowMatchingPolicy(cfg.policy, payload["proprio_dim"])
    policy.load_state_dict(payload["ema" if ema else "model"])
    return policy.eval()


def check_observation_set(payload: dict, policy: PolicyCfg, where: str) -> None:
    """Refuse to resume or deploy a checkpoint trained on another observation set than `policy`'s."""
    stored = train_cfg_of(payload).policy.observation_set()
    wanted = policy.observation_set()
    if stored != wanted:
        diff = {k: (stored[k], wanted[k]) for k in stored if stored[k] != wanted[k]}
        raise CheckpointError(f"{where}: the checkpoint was trained on another observation set: "
                              + "; ".join(f"policy.{k} = {a} in the checkpoint, {b} here" for k, (a, b) in diff.items()))
