"""Physics backends behind one interface: MuJoCo C (CPU, default) and MuJoCo Warp (batched, GPU or Warp CPU)."""

from __future__ import annotations

import mujoco

from r2s2r.core import ConfigError
from r2s2r.cell.mjcf import PeriodicJoint
from r2s2r.physics.base import PhysicsBackend

BACKENDS = ("mujoco", "mujoco_warp")


def make_physics(name: str, model: mujoco.MjModel, nworld: int = 1,
                 periodic: tuple[PeriodicJoint, ...] = (), device: str | None = None) -> PhysicsBackend:
    """Create a physics backend by name; `device` selects the Warp device ("cpu", "cuda:0") for MuJoCo Warp."""
    if name == "mujoco":
        from r2s2r.physics.mujoco_c import MujocoCBackend

        return MujocoCBackend(model, nworld, periodic)
    if name == "mujoco_warp":
        from r2s2r.physics.mujoco_warp import MujocoWarpBackend

        return MujocoWarpBackend(model, nworld, periodic, device=device)
    raise ConfigError(f"physics = {name!r}: expected one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "PeriodicJoint", "PhysicsBackend", "make_physics"]
