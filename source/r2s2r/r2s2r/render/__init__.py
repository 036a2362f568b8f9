"""Camera images of the cell: a lens model applied to pinhole renders from MuJoCo's GL rasteriser or MuJoCo
Warp's batch ray tracer, or (inside a running Isaac Sim) RTX. Backends are imported on demand, so neither OpenGL,
Warp nor Kit is needed to import this."""

from __future__ import annotations

from collections.abc import Sequence

import mujoco

from r2s2r.cell.spec import CellCfg
from r2s2r.core import ConfigError
from r2s2r.render.base import RenderBackend

RENDERERS = ("mujoco_gl", "mujoco_warp")
ISAAC_RTX = "isaac_rtx"  # not in RENDERERS: it needs a running Isaac Sim (RTX GPU), which plain Python runs lack


def make_renderer(name: str, model: mujoco.MjModel, cell: CellCfg, cameras: Sequence[str], width: int, height: int,
                  **kw: object) -> RenderBackend:
    """Create a render backend by name; `kw` are the backend's options (shadows, multisample, supersample, and for
    MuJoCo Warp `device`; for Isaac RTX `device` and `rt_subframes`)."""
    if name == "mujoco_gl":
        from r2s2r.render.mujoco_gl import MujocoGLRenderer

        return MujocoGLRenderer(model, cell, cameras, width, height, **kw)
    if name == "mujoco_warp":
        from r2s2r.render.mujoco_warp import MujocoWarpRenderer

        return MujocoWarpRenderer(model, cell, cameras, width, height, **kw)
    if name == ISAAC_RTX:
        from r2s2r.render.isaac_rtx import IsaacRtxRenderer, kit_running

        if not kit_running():
            raise ConfigError(f"renderer = {name!r} needs a running Isaac Sim (an RTX GPU; run the script with "
                              "`isaaclab -p` or start isaacsim.SimulationApp first); here use one of "
                              f"{', '.join(RENDERERS)}")
        return IsaacRtxRenderer(model, cell, cameras, width, height, **kw)
    raise ConfigError(f"renderer = {name!r}: expected one of {', '.join(RENDERERS)} (or {ISAAC_RTX} in Isaac Sim)")


__all__ = ["ISAAC_RTX", "RENDERERS", "RenderBackend", "make_renderer"]
