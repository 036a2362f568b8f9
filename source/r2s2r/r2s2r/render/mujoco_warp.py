"""MuJoCo Warp's batch ray tracer: every camera of every world in one kernel launch.

Runs on the Warp device of the physics backend when that is MuJoCo Warp (its device model and data are used
as they are, so nothing crosses to the host but the images), otherwise on `device` (default: the first CUDA
GPU, else Warp's CPU device) with each world's poses uploaded from `physics.host_data` every frame.

Either way the device model is a copy taken once, while tasks set object colours and lights per episode in the
host model, which the GL renderer reads every frame. So every frame first copies the appearance (`APPEARANCE`)
of the model this renderer was given into the device model it draws with.

Primary rays are computed once, when the render context is made, from the model's camera field of view, so
the context is built from a private copy of the model whose cameras carry their lens' `render_fovy_deg`; the
model and the physics' device model keep MuJoCo's placeholder. The context is made on the first `render`
(it needs the number of worlds) and remade if the world count or device changes.

Differences from the GL rasteriser (see `mujoco_gl`): one ray per pixel centre, so no anti-aliasing
(`multisample` has no effect); Warp's own Phong-style lighting rather than OpenGL's fixed pipeline, so
shading differs by a few percent; ray-traced hard shadows instead of a shadow map.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import mujoco
import mujoco_warp as mjw
import numpy as np
import warp as wp

from r2s2r.cell.spec import CellCfg
from r2s2r.physics.base import PhysicsBackend
from r2s2r.render.base import RenderBackend

BACKGROUND = (0.0, 0.0, 0.0, 1.0)  # what the GL renderer clears to when the model has no skybox
# Model fields that only change how the scene looks, and that the ray tracer reads from the device model (or, for
# lights, that the device light poses are computed from).
APPEARANCE = ("geom_rgba", "mat_rgba", "light_active", "light_pos", "light_dir", "light_ambient", "light_diffuse",
              "light_specular")


def push_appearance(model: mujoco.MjModel, wmodel: mjw.Model) -> None:
    """Copy `model`'s `APPEARANCE` into `wmodel`, a device model made from the same cell, in place (a physics
    backend's captured step graph holds its arrays). Device model arrays carry a leading world axis (length 1, or
    nworld where randomised per world); the host value goes to every row."""
    for name in APPEARANCE:
        dst, src = getattr(wmodel, name), getattr(model, name)
        dst.assign(np.broadcast_to(src, (dst.shape[0], *src.shape)))


def default_device() -> str:
    return "cuda:0" if wp.get_cuda_device_count() > 0 else "cpu"


class MujocoWarpRenderer(RenderBackend):
    name = "mujoco_warp"

    def __init__(self, model: mujoco.MjModel, cell: CellCfg, cameras: Sequence[str], width: int, height: int,
                 shadows: bool = False, multisample: bool = False, device: str | None = None,
                 supersample: int = 1, depth: bool = True):
        super().__init__(model, cell, cameras, width, height, shadows, multisample, supersample, depth)
        self._device_name = device
        self._render_model = copy.copy(model)  # see the module docstring: fovy (and shadows) live on this copy
        for name, cm in self.camera_models.items():
            self._render_model.cam_fovy[self.camera_ids[name]] = cm.render_fovy_deg
        self._render_model.light_castshadow[:] = self.shadows & model.light_castshadow.astype(bool)
        # The context addresses the active cameras in model order; keep each one's slice of the output rows.
        self._order = sorted(self.cameras, key=self.camera_ids.__getitem__)
        self._slices = {}
        offset = 0
        for name in self._order:
            cm = self.camera_models[name]
            self._slices[name] = (offset, cm.render_height, cm.render_width)
            offset += cm.render_width * cm.render_height
        self._rc = None
        self._rc_key = None
        self._upload = None  # (device Model, device Data) for physics backends that live on the host
        self._castshadow = None

    # ------------------------------------------------------------------------------------------------------------
    def _device_for(self, physics: PhysicsBackend) -> wp.Device:
        if hasattr(physics, "wdata"):
            return wp.get_device(getattr(physics, "device", None) or physics.wdata.qpos.device)
        return wp.get_device(self._device_name or default_device())

    def _context(self, nworld: int, device: wp.Device):
        key = (nworld, str(device))
        if self._rc_key != key:
            active = [False] * self.model.ncam
            for cam_id in self.camera_ids.values():
                active[cam_id] = True
            with wp.ScopedDevice(device):
                self._rc = mjw.create_render_context(
                    self._render_model, nworld=nworld,
                    cam_res=[(self.camera_models[n].render_width, self.camera_models[n].render_height)
                             for n in self._order],
                    render_rgb=True, render_depth=self.depth, render_seg=False, cam_active=active,
                    use_shadows=self.shadows, background_color=BACKGROUND,
                )
                self._castshadow = wp.array(self._render_model.light_castshadow[None].astype(bool), dtype=bool)
            self._rc_key = key
            self._upload = None
        return self._rc

    def _device_state(self, physics: PhysicsBackend):
        """The device model and data to render, with this frame's poses in the data."""
        if hasattr(physics, "wdata"):
            m, d = physics.device_state()
            push_appearance(self.model, m)  # before camlight, which places the lights from light_pos / light_dir
            # After a step the device poses are those the step started from (a step computes kinematics
            # before integrating). Recompute them from the current state, as `host_data` does for the GL
            # renderer; these are derived quantities the next step overwrites, so the dynamics are unchanged.
            mjw.kinematics(m, d)
            mjw.camlight(m, d)
            if self.shadows:
                # The shadow switch is a render setting: a shallow copy of the physics model carries it, sharing
                # every other (possibly per-world randomised) array.
                m = copy.copy(m)
                m.light_castshadow = self._castshadow
            return m, d
        if self._upload is None:
            with warnings.catch_warnings():
                # put_model warns about collision settings; this device model is only rendered, never stepped.
                warnings.filterwarnings("ignore", message="MULTICCD", category=UserWarning)
                self._upload = (mjw.put_model(self._render_model), mjw.make_data(self.model, nworld=physics.nworld))
        m, d = self._upload
        push_appearance(self.model, m)  # fovy and shadows are not appearance fields: the copy's own stay
        # Only the poses the ray tracer reads (and the BVH refit) are uploaded: geoms, cameras and lights.
        datas = [physics.host_data(w) for w in range(physics.nworld)]
        n = len(datas)
        d.geom_xpos.assign(np.stack([x.geom_xpos for x in datas]).astype(np.float32))
        d.geom_xmat.assign(np.stack([x.geom_xmat for x in datas]).reshape(n, -1, 3, 3).astype(np.float32))
        d.cam_xpos.assign(np.stack([x.cam_xpos for x in datas]).astype(np.float32))
        d.cam_xmat.assign(np.stack([x.cam_xmat for x in datas]).reshape(n, -1, 3, 3).astype(np.float32))
        if self.model.nlight:
            d.light_xpos.assign(np.stack([x.light_xpos for x in datas]).astype(np.float32))
            d.light_xdir.assign(np.stack([x.light_xdir for x in datas]).astype(np.float32))
        return m, d

    def _render_sources(self, physics: PhysicsBackend) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        device = self._device_for(physics)
        rc = self._context(physics.nworld, device)
        with wp.ScopedDevice(device):
            m, d = self._device_state(physics)
            mjw.refit_bvh(m, d, rc)  # the scene BVH was built for the poses at context creation
            mjw.render(m, d, rc)
            packed = rc.rgb_data.numpy()
            depth = rc.depth_data.numpy() if self.depth else None
        n = physics.nworld
        # Pixels are packed 0xAARRGGBB; read as little-endian bytes that is B, G, R, A.
        channels = packed.view(np.uint8).reshape(n, -1, 4)
        out = {}
        for name, (offset, h, w) in self._slices.items():
            rgb = np.ascontiguousarray(channels[:, offset:offset + h * w, 2::-1]).reshape(n, h, w, 3)
            out[name] = (rgb, None if depth is None else depth[:, offset:offset + h * w].reshape(n, h, w))
        return out

    def close(self) -> None:
        self._rc = None
        self._rc_key = None
        self._upload = None
        super().close()
