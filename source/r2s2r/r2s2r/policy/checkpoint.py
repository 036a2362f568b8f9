"""Policy checkpoints: one file holding everything needed to resume training or to deploy.

A checkpoint stores the train config, the policy's weights and EMA weights (normalization statistics included, as
buffers), the optimizer and schedule, the step, and every random stream (torch and the data sampler), so resuming
continues the run exactly. It is written to a temporary name and renamed, so a crash never leaves a half-written
checkpoint under the real name.

Reading one (`load_checkpoint`, which every tool goes through) checks it whole before anything uses it: the format
marker, every key the trainers write with its type, a config that validates as a `TrainCfg`, and finite weights.
Weights that do not fit the config are refused when they are loaded into the model (`load_weights`). Each problem
is a `CheckpointError` naming the file and what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
from pathlib import Path
from typing import Any

import torch

from r2s2r.core import ConfigError
from r2s2r.files import atomic_path
from r2s2r.policy.config import DOMAINS, PolicyCfg, TrainCfg, train_cfg_from_mapping
from r2s2r.policy.model import FlowMatchingPolicy

FORMAT = "r2s2r.policy/1"
# What each trainer writes (r2s2r.policy.train, r2s2r.policy.train_object_centric), and the type of each entry.
_STATE = "a mapping of parameter names to tensors"
_DATASETS = "a list of {path, domain, weight, demos, steps}"
KEYS = {
    "flow_transformer": {"cfg": "a mapping (the train config)", "proprio_dim": "an integer >= 0",
                         "step": "an integer >= 0", "model": _STATE, "ema": _STATE,
                         "optimizer": "a mapping (the optimizer state)",
                         "rng": "a mapping with 'torch', 'generator' and 'sampler'", "datasets": _DATASETS},
    "object_centric": {"cfg": "a mapping (the train config)", "kind": "'object_centric'",
                       "stage": "'estimator' or 'policy'", "proprio_dim": "an integer >= 0", "step": "an integer >= 0",
                       "model": _STATE, "datasets": _DATASETS},
}


class CheckpointError(ConfigError):
    """A checkpoint cannot be used as asked; the message names the file and the field."""


def cfg_dict(cfg: TrainCfg) -> dict:
    """The config as plain JSON/YAML data (lists, not tuples)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


# Fields a run may change and still continue: its length (which may be extended) and how it is logged.
RUN_LENGTH_FIELDS = ("steps", "log_every", "checkpoint_every", "threads")


def config_differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields where two config mappings differ (a field missing on one side differs)."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += config_differences(x, y, f"{prefix}{k}.")
        elif x != y:
            out.append(f"{prefix}{k}")
    return out


def refuse_other_run(path: str | os.PathLike, stored: dict, current: dict, ignore: tuple[str, ...] = ()) -> None:
    """A CheckpointError if the run at `path` was trained with a config (`stored`) that differs from `current` in
    any field but those named in `ignore` (dotted names)."""
    diff = [k for k in config_differences(stored, current) if k not in ignore]
    if diff:
        raise CheckpointError(f"{path}: the run folder holds a run with another config (differs in "
                              f"{', '.join(diff)}); use another run_dir or the same config")


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
        detail = " ".join(str(e).split())
        detail = detail if len(detail) <= 240 else detail[:240] + " ..."
        raise CheckpointError(f"checkpoint {str(path)!r}: cannot be read ({type(e).__name__}: {detail}); expected a "
                              f"policy checkpoint (policy.pt or last.pt of scripts/train.py)") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r}: not a policy checkpoint of this package (format "
                              f"{payload.get('format') if isinstance(payload, dict) else None!r}, expected {FORMAT!r})")
    validate_checkpoint(payload, path)
    return payload


def _is_state(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _is_count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def validate_checkpoint(payload: dict, path: str | os.PathLike) -> None:
    """Refuse a checkpoint payload that lacks a key its trainer writes, holds a value of the wrong type, a config that
    does not validate, or weights that are not finite; the `CheckpointError` names the file and the key."""
    where = f"checkpoint {str(path)!r}"
    kind = payload.get("kind")
    if kind is None:  # the flow transformer's checkpoints carry no kind; the config says which it was meant to be
        stored = payload.get("cfg")
        policy = stored.get("policy") if isinstance(stored, dict) else None
        kind = "object_centric" if isinstance(policy, dict) and policy.get("kind") == "object_centric" \
            else "flow_transformer"
    if kind not in KEYS:
        raise CheckpointError(f"{where}: kind = {kind!r}: expected 'object_centric' (or no kind: a flow transformer)")
    keys = KEYS[kind]
    missing = [k for k in keys if k not in payload]
    if missing:
        raise CheckpointError(f"{where}: missing {', '.join(repr(k) for k in missing)}; expected a checkpoint of "
                              f"policy.kind {kind} with {', '.join(keys)}")
    checks = {"proprio_dim": _is_count, "step": _is_count, "model": _is_state, "ema": _is_state,
              "optimizer": lambda v: isinstance(v, dict),
              "datasets": lambda v: isinstance(v, list) and all(
                  isinstance(d, dict) and isinstance(d.get("path"), str) and d.get("domain") in DOMAINS
                  for d in v),
              "cfg": lambda v: isinstance(v, dict), "kind": lambda v: v == "object_centric",
              "stage": lambda v: v in ("estimator", "policy"),
              "rng": lambda v: isinstance(v, dict) and {"torch", "generator", "sampler"} <= set(v)}
    for key in keys:
        if not checks[key](payload[key]):
            shown = type(payload[key]).__name__ if key in ("model", "ema", "optimizer", "rng") else repr(payload[key])
            raise CheckpointError(f"{where}: {key} = {shown[:200]}: expected {keys[key]}")
    try:
        cfg = train_cfg_from_mapping(payload["cfg"])
    except ConfigError as e:
        raise CheckpointError(f"{where}: its config does not validate: {e}") from None
    if (cfg.policy.kind == "object_centric") != (kind == "object_centric"):
        raise CheckpointError(f"{where}: policy.kind = {cfg.policy.kind!r} in its config, but it holds a {kind} "
                              f"policy")
    for key in ("model", "ema"):
        for name, tensor in payload.get(key, {}).items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise CheckpointError(f"{where}: {key}.{name} is not finite (NaN or inf); expected finite weights "
                                      f"(a run that diverged)")


def load_weights(module: torch.nn.Module, payload: dict, key: str, path: str | os.PathLike | None) -> None:
    """`module.load_state_dict(payload[key])`, a mismatch (missing, unexpected or differently shaped weights) being
    a `CheckpointError` naming the file."""
    try:
        module.load_state_dict(payload[key])
    except (KeyError, RuntimeError, TypeError) as e:
        detail = " ".join(str(e).split())
        raise CheckpointError(f"checkpoint {str(path)!r}: its {key} weights do not fit its config "
                              f"({detail[:600]})") from None


def train_cfg_of(payload: dict) -> TrainCfg:
    """The training config a checkpoint stores. An object-centric checkpoint written before
    `object_centric.height_from_size` existed was trained and is deployed on the regressed height (the option's
    default is now on), so its config says so."""
    cfg = payload["cfg"]
    oc = cfg.get("object_centric") if isinstance(cfg, dict) else None
    if payload.get("kind") == "object_centric" and isinstance(oc, dict) and "height_from_size" not in oc:
        cfg = {**cfg, "object_centric": {**oc, "height_from_size": False}}
    return train_cfg_from_mapping(cfg)


def build_policy(payload: dict, ema: bool = True, path: str | os.PathLike | None = None) -> FlowMatchingPolicy:
    """The policy a checkpoint holds (its EMA weights by default), in eval mode; `path` names the file in errors."""
    cfg = train_cfg_of(payload)
    if payload.get("kind") == "object_centric":
        raise CheckpointError(f"checkpoint {str(path)!r}: an object-centric policy; expected a flow-transformer one "
                              f"(policy.kind=flow_transformer)")
    policy = FlowMatchingPolicy(cfg.policy, payload["proprio_dim"])
    load_weights(policy, payload, "ema" if ema else "model", path)
    return policy.eval()


def check_observation_set(payload: dict, policy: PolicyCfg, where: str) -> None:
    """Refuse to resume or deploy a checkpoint trained on another observation set than `policy`'s."""
    stored = train_cfg_of(payload).policy.observation_set()
    wanted = policy.observation_set()
    if stored != wanted:
        diff = {k: (stored[k], wanted[k]) for k in stored if stored[k] != wanted[k]}
        raise CheckpointError(f"{where}: the checkpoint was trained on another observation set: "
                              + "; ".join(f"policy.{k} = {a} in the checkpoint, {b} here" for k, (a, b) in diff.items()))
