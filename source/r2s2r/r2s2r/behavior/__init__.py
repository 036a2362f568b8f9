"""Behaviour generators: where simulated trajectories' motion comes from.

* `mimic` (grounded behaviour): real demos transformed to new episodes, `r2s2r.behavior.mimic`;
* `planner` (ungrounded behaviour): grasp generator + interception planner, `r2s2r.behavior.planner`;
* `scripted`: the privileged scripted controller, `r2s2r.behavior.scripted`.

All implement `r2s2r.behavior.base.BehaviorGenerator` and take their config as `cfg`. Modules load lazily: a
generator's dependencies are only imported when it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2s2r.behavior.base import BehaviorGenerator, GenerationError
from r2s2r.core import ConfigError

# name -> (config class, generator class), as "module:attribute"
GENERATORS: dict[str, tuple[str, str]] = {
    "mimic": ("r2s2r.behavior.mimic:MimicCfg", "r2s2r.behavior.mimic:MimicGenerator"),
    "planner": ("r2s2r.behavior.planner:PlannerCfg", "r2s2r.behavior.planner:PlannerGenerator"),
    "scripted": ("r2s2r.behavior.scripted:ScriptedCfg", "r2s2r.behavior.scripted:ScriptedPickPlace"),
}


def _load(entry: str) -> Any:
    module, attr = entry.split(":")
    return getattr(importlib.import_module(module), attr)


def _entry(name: str) -> tuple[str, str]:
    if name not in GENERATORS:
        raise ConfigError(f"generator = {name!r}: expected one of {', '.join(GENERATORS)}")
    return GENERATORS[name]


def generator_cfg(name: str) -> Any:
    """The default config of generator `name` (a frozen dataclass, overridable field by field)."""
    return _load(_entry(name)[0])()


def make_generator(name: str, cfg: Any = None) -> BehaviorGenerator:
    """Generator `name` built with `cfg` (its default config when None)."""
    return _load(_entry(name)[1])(cfg=cfg)


__all__ = ["GENERATORS", "BehaviorGenerator", "GenerationError", "generator_cfg", "make_generator"]
