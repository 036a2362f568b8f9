"""MuJoCo's OpenGL rasteriser (EGL or OSMesa offscreen, or a GPU's GL driver), one world and camera at a time.

MuJoCo picks its GL backend from MUJOCO_GL when it is first imported; headless entry points set it to "egl".

This is what `mujoco.Renderer` does, with its pieces driven directly so that one pass yields both images:
`mujoco.Renderer` needs a second, segmentation-mode render for depth, and one renderer per image size. Here
one GL context serves every source size (each camera draws into its own viewport of one offscreen buffer),
and each camera is drawn once and read back as RGB and depth together.

The model is never modified. Context settings (framebuffer size, multisampling, shadow-map size) come from a
private copy made at construction; the scene is built from the shared model every frame, so visual changes
made to it (colours, sizes, light poses) show, and the lens-dependent field of view and the shadow switch are
then set on the scene's camera and lights, not on the model's `cam_fovy` / `light_castshadow`.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Sequence

import mujoco
import numpy as np

from r2s2r.cell.spec import CellCfg
from r2s2r.core import ConfigError
from r2s2r.physics.base import PhysicsBackend
from r2s2r.render.base import RenderBackend

MULTISAMPLES = 4
SHADOW_MAP_SIZE = 1024
# Near clipping distance (m). The model's (znear * extent, 15 mm in the cell) would clip what a wrist camera sees
# within a centimetre or two (its own hand's fingers as they close), which a ray tracer (and a real camera) shows.
# Reversed-Z float depth keeps sub-millimetre precision over the whole range even with a near plane this close.
NEAR_CLIP = 0.001


class MujocoGLRenderer(RenderBackend):
    name = "mujoco_gl"

    def __init__(self, model: mujoco.MjModel, cell: CellCfg, cameras: Sequence[str], width: int, height: int,
                 shadows: bool = False, multisample: bool = False, supersample: int = 1, depth: bool = True):
        super().__init__(model, cell, cameras, width, height, shadows, multisample, supersample, depth)
        self._gl = None
        self._ctx = None
        sizes = {name: (cm.render_width, cm.render_height) for name, cm in self.camera_models.items()}
        max_w = max(w for w, _ in sizes.values())
        max_h = max(h for _, h in sizes.values())
        # The offscreen buffer must hold the largest source image. The copy is only read when the context is
        # made, so enlarging it there (rather than refusing sizes beyond the cell's 1280 x 960) costs nothing.
        settings = copy.copy(model)
        settings.vis.global_.offwidth = max(settings.vis.global_.offwidth, max_w)
        settings.vis.global_.offheight = max(settings.vis.global_.offheight, max_h)
        settings.vis.quality.offsamples = MULTISAMPLES if self.multisample else 0
        settings.vis.quality.shadowsize = SHADOW_MAP_SIZE if self.shadows else 0
        if mujoco.GLContext is None:
            raise ConfigError(f"renderer = 'mujoco_gl': no OpenGL backend (MUJOCO_GL = "
                              f"{os.environ.get('MUJOCO_GL')!r}); expected 'egl', 'osmesa' or 'glfw'")
        try:
            self._gl = mujoco.GLContext(max_w, max_h)
            self._gl.make_current()
            self._ctx = mujoco.MjrContext(settings, mujoco.mjtFontScale.mjFONTSCALE_100)
        except Exception:
            self.close()
            raise
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._ctx)
        # Reversed depth (1 at the near plane, 0 at the far one) spreads float precision evenly over distance.
        self._ctx.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR
        max_w_ctx, max_h_ctx = self._ctx.offWidth, self._ctx.offHeight
        if max_w > max_w_ctx or max_h > max_h_ctx:  # the GL driver capped the buffer
            self.close()
            raise ConfigError(f"resolution = {(max_w, max_h)!r} (source render): expected at most "
                              f"{(max_w_ctx, max_h_ctx)!r}, the largest offscreen buffer this OpenGL allows")

        self._scene = mujoco.MjvScene(model, maxgeom=10000)
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
        self._option = mujoco.MjvOption()
        self._option.sitegroup[:] = 0  # sites are markers, not surfaces; the ray tracer does not draw them either
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._rects = {name: mujoco.MjrRect(0, 0, w, h) for name, (w, h) in sizes.items()}
        self._tan_half_fovy = {name: math.tan(math.radians(cm.render_fovy_deg) / 2)
                               for name, cm in self.camera_models.items()}

    def _render_sources(self, physics: PhysicsBackend) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        m, scene = self.model, self._scene
        n = physics.nworld
        raw = {name: (np.empty((n, cm.render_height, cm.render_width, 3), np.uint8),
                      np.empty((n, cm.render_height, cm.render_width), np.float32) if self.depth else None)
               for name, cm in self.camera_models.items()}
        self._gl.make_current()  # another context (a second renderer) may be current on this thread
        for w in range(n):
            data = physics.host_data(w)
            for i, name in enumerate(self.cameras):
                self._camera.fixedcamid = self.camera_ids[name]
                if i == 0:  # the geoms are the same for every camera of a world
                    mujoco.mjv_updateScene(m, data, self._option, None, self._camera,
                                           mujoco.mjtCatBit.mjCAT_ALL, scene)
                else:  # only the camera moves, and the headlight that rides on it
                    mujoco.mjv_updateCamera(m, data, self._camera, scene)
                    mujoco.mjv_makeLights(m, data, scene)
                for light in scene.lights[:scene.nlight]:  # the shadows option gates each light's own setting
                    light.castshadow = self.shadows and not light.headlight and bool(m.light_castshadow[light.id])
                # The lens sets the field of view; an empty frustum width takes the viewport's aspect ratio.
                for gl_cam in scene.camera:
                    gl_cam.frustum_near = NEAR_CLIP
                    gl_cam.frustum_top = NEAR_CLIP * self._tan_half_fovy[name]
                    gl_cam.frustum_bottom = -gl_cam.frustum_top
                    gl_cam.frustum_center = 0.0
                    gl_cam.frustum_width = 0.0
                rgb, depth = raw[name]
                mujoco.mjr_render(self._rects[name], scene, self._ctx)
                mujoco.mjr_readPixels(rgb[w], None if depth is None else depth[w], self._rects[name], self._ctx)
        return {name: (np.ascontiguousarray(rgb[:, ::-1]), None if depth is None else self._metric_depth(depth[:, ::-1]))
                for name, (rgb, depth) in raw.items()}

    def _metric_depth(self, z: np.ndarray) -> np.ndarray:
        """Reversed-Z buffer values to metres along the optical axis (the inverse of glFrustum's depth map)."""
        near = np.float32(NEAR_CLIP)
        far = np.float32(self.model.vis.map.zfar * self.model.stat.extent)
        # Same float32 coefficients as glFrustum, mapped to [0, 1] reversed Z; the division needs float64 to
        # keep millimetres at metres' distance.
        c = np.float32(-0.5) * (-(far + near) / (far - near)) - np.float32(0.5)
        d = np.float32(-0.5) * (-(np.float32(2) * far * near) / (far - near))
        z64 = z.astype(np.float64)
        hit = z64 > 0.0  # the buffer is cleared to 0 (the far plane): nothing was drawn there
        return np.where(hit, float(d) / (z64 + float(c)), 0.0).astype(np.float32)

    def close(self) -> None:
        # GL objects belong to the context they were made in: make ours current before deleting them, then
        # release the context itself.
        if self._ctx is not None:
            if self._gl is not None:
                self._gl.make_current()
            self._ctx.free()
            self._ctx = None
        if self._gl is not None:
            self._gl.free()
            self._gl = None
        super().close()

    def __del__(self) -> None:
        # A context left to the interpreter's exit is torn down after EGL itself, which errors; free it here.
        try:
            self.close()
        except Exception:
            pass
