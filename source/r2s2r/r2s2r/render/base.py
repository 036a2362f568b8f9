"""The render interface: camera images of every world, after each camera's lens and sensor model.

A backend draws, for each requested camera, the ideal pinhole image its `CameraModel` asks for (centred
principal point, `render_width` x `render_height`, vertical field of view `render_fovy_deg`) in every world, as
RGB plus (unless the renderer was made with `depth=False`) metric depth along the optical axis; this class then
applies the camera models. So the lens lives in
one place and the backends only differ in how they draw.

Conventions shared by all backends (and the camera model):
- images are top row first; rgb is uint8, depth float32 metres along the optical axis;
- depth 0 means "no surface" (a ray that hits nothing, or a pixel outside the lens' field), as real depth
  sensors report invalid returns.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import mujoco
import numpy as np

from r2s2r.cell.spec import CellCfg
from r2s2r.core import ConfigError
from r2s2r.physics.base import PhysicsBackend
from r2s2r.render.camera_model import CameraModel

MAX_RESOLUTION = 2048


def _is_size(n: object) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and 0 < n <= MAX_RESOLUTION


def check_cameras(cameras: Sequence[str] | str, cell: CellCfg, what: str = "cameras") -> tuple[str, ...]:
    """`cameras` as a tuple, if it is a non-empty list of distinct camera names of `cell` (a bare name is one
    camera); else a ConfigError naming `what`. Every renderer checks its cameras here; a tool that renders only
    after other work calls it first."""
    if isinstance(cameras, str):  # a bare name would otherwise be read as a sequence of letters
        cameras = (cameras,)
    cameras = tuple(cameras)
    known = cell.camera_names
    if not cameras or len(set(cameras)) != len(cameras):
        raise ConfigError(f"{what} = {cameras!r}: expected a non-empty list of distinct names from {known}")
    for name in cameras:
        if name not in known:
            raise ConfigError(f"{what} = {name!r}: expected one of {known}")
    return cameras


class RenderBackend(ABC):
    """Renders `cameras` of `cell` at `width` x `height` for all worlds of a physics backend.

    `model` must be the model the physics backend steps (or a copy of it): camera and geom ids are shared. Every
    backend draws the appearance (colours, lights) `model` has when `render` is called, so edits made to it
    between frames, such as a task's per-episode colours, show on all of them.
    `shadows` and `multisample` (anti-aliasing) are off by default because each costs several times the
    render time on a CPU rasteriser. `depth=False` skips reading back and converting the depth buffer, which costs
    about as much as the colour image on the GL path; callers that only look at colour pass it.
    """

    name: str

    def __init__(self, model: mujoco.MjModel, cell: CellCfg, cameras: Sequence[str], width: int, height: int,
                 shadows: bool = False, multisample: bool = False, supersample: int = 1, depth: bool = True):
        cameras = check_cameras(cameras, cell)
        if not (_is_size(width) and _is_size(height)):
            raise ConfigError(f"resolution = {(width, height)!r}: expected (width, height) integers in "
                              f"[1, {MAX_RESOLUTION}]")
        self.model = model
        self.cell = cell
        self.cameras = cameras
        self.width, self.height = int(width), int(height)
        self.shadows = bool(shadows)
        self.multisample = bool(multisample)
        self.depth = bool(depth)
        self.camera_ids: dict[str, int] = {}
        for name in cameras:
            cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
            if cam_id < 0:  # the model was not built from this cell
                raise ConfigError(f"cameras = {name!r}: the model has no such camera; expected a model built "
                                  "from the same CellCfg")
            self.camera_ids[name] = cam_id
        lenses = {c.name: c.lens for c in cell.cameras}
        # `supersample` draws each source image at that multiple of the output size (see CameraModel): what a real
        # sensor integrates over a pixel, at a cost in render time.
        self.camera_models = {name: CameraModel(lenses[name], self.width, self.height, supersample=supersample)
                              for name in cameras}
        self._closed = False

    def render(self, physics: PhysicsBackend,
               rng: np.random.Generator | None = None) -> dict[str, dict[str, np.ndarray]]:
        """Images of every world: {camera: {"rgb": (nworld, H, W, 3) uint8, "depth": (nworld, H, W) float32}}, the
        depth only if the renderer was made with `depth=True`.

        Sensor noise (if the lens has any) is drawn from `rng`, camera by camera in `cameras` order.
        """
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.render called after close()")
        if physics.model.ncam != self.model.ncam or physics.model.ngeom != self.model.ngeom:
            raise ConfigError(f"physics model = {physics.model.ngeom} geoms, {physics.model.ncam} cameras: "
                              f"expected the renderer's model ({self.model.ngeom} geoms, {self.model.ncam} cameras)")
        sources = self._render_sources(physics)
        out = {}
        for name in self.cameras:
            rgb, depth = self.camera_models[name].apply(*sources[name], rng=rng)
            out[name] = {"rgb": rgb, "depth": depth} if self.depth else {"rgb": rgb}
        return out

    @abstractmethod
    def _render_sources(self, physics: PhysicsBackend) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Pinhole renders per camera: rgb (nworld, h, w, 3) uint8 and depth (nworld, h, w) float32 (None if not
        `self.depth`), top row first, at that camera model's render size and field of view; depth 0 where no
        surface was hit."""

    def close(self) -> None:
        """Free the backend's resources; idempotent."""
        self._closed = True

    def __enter__(self) -> RenderBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
