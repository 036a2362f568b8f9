"""MuJoCo's OpenGL rasteriser (EGL or OSMesa offscreen, or a GPU's GL driver), one world and camera at a time.

MuJoCo picks its GL backend from MUJOCO_GL when it is first imported; headless entry points set it to "egl".

This is what `mujoco.Renderer` does, with its pieces driven directly so that one pass yields both images:
`mujoco.Renderer` needs a second, segmentation-mode render for depth, and one renderer per image size. Here
one GL context serves every source size (each camera draws into its own viewport of one offscreen buffer),
and each camera is drawn once and read back as RGB and depth together.

Context settings (framebuffer size, multisampling, shadow-map size) come from a private copy of the model made at
construction; the scene is built from the shared model every frame, so visual changes made to it (colours, sizes,
light poses) show, and the lens-dependent field of view and the shadow switch are then set on the scene's camera
and lights, not on the model's `cam_fovy` / `light_castshadow`.

A CPU rasteriser's time goes into the vertices of every geom drawn (MuJoCo tessellates each capsule into about
1,500 triangles and does no culling of its own), so each camera's scene leaves out the geoms whose bounding
sphere lies wholly outside that camera's view: the image is the same (`tests/render/test_backends.py` compares
it pixel for pixel) and a wrist camera draws about half the cell. MuJoCo leaves geoms of alpha 0 out of a scene,
so those geoms' alpha is set to 0 in the shared model while the scene is built and restored right after; nothing
else of the model is written. Culling is off when geoms outside the view can still change the image: with
shadows on (they cast into the view) or a reflective material in the model.
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
        self.culling = not self.shadows and not bool(np.any(model.mat_reflectance > 0))
        G = mujoco.mjtGeom
        self._unbounded = np.isin(model.geom_type, (G.mjGEOM_PLANE, G.mjGEOM_HFIELD))
        self._primitive = [model.geom_type == t for t in (G.mjGEOM_SPHERE, G.mjGEOM_CAPSULE, G.mjGEOM_ELLIPSOID,
                                                          G.mjGEOM_CYLINDER, G.mjGEOM_BOX)]
        # Unit inward normals of each camera's four side planes, in the camera frame (x right, y up, looking
        # along -z), from the source image's field of view and aspect ratio.
        self._side_normals = {}
        for name, (w, h) in sizes.items():
            ty = self._tan_half_fovy[name]
            tx = ty * w / h
            self._side_normals[name] = np.array([[1, 0, -tx], [-1, 0, -tx], [0, 1, -ty], [0, -1, -ty]], float)
            self._side_normals[name] /= np.linalg.norm(self._side_normals[name], axis=1, keepdims=True)

    def _render_sources(self, physics: PhysicsBackend) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        m, scene = self.model, self._scene
        n = physics.nworld
        raw = {name: (np.empty((n, cm.render_height, cm.render_width, 3), np.uint8),
                      np.empty((n, cm.render_height, cm.render_width), np.float32) if self.depth else None)
               for name, cm in self.camera_models.items()}
        self._gl.make_current()  # another context (a second renderer) may be current on this thread
        bounds = self._geom_bounds() if self.culling else None
        for w in range(n):
            data = physics.host_data(w)
            for i, name in enumerate(self.cameras):
                self._camera.fixedcamid = self.camera_ids[name]
                if bounds is None and i > 0:  # nothing culled: the geoms are the first camera's; only the camera
                    mujoco.mjv_updateCamera(m, data, self._camera, scene)  # moves, and the headlight riding on it
                    mujoco.mjv_makeLights(m, data, scene)
                else:
                    self._update_scene(data, name, bounds)
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

    def _update_scene(self, data: mujoco.MjData, name: str, bounds: np.ndarray | None) -> None:
        """Build the scene of camera `name` in `data`, without the geoms it cannot see when `bounds` (the geoms'
        bounding radii, `_geom_bounds`) are given."""
        m = self.model
        hidden = self._outside_view(data, name, bounds) if bounds is not None else None
        if hidden is not None:
            alpha = m.geom_rgba[hidden, 3].copy()
            m.geom_rgba[hidden, 3] = 0.0
        try:
            mujoco.mjv_updateScene(m, data, self._option, None, self._camera, mujoco.mjtCatBit.mjCAT_ALL,
                                   self._scene)
        finally:
            if hidden is not None:
                m.geom_rgba[hidden, 3] = alpha

    def _geom_bounds(self) -> np.ndarray:
        """Each geom's bounding radius about its centre. A primitive's comes from its current size, as the compiler
        computes geom_rbound (which a geom resized since does not update); meshes keep the compiled one."""
        m, size = self.model, self.model.geom_size
        return np.select(self._primitive, [size[:, 0], size[:, 0] + size[:, 1], size.max(axis=1),
                                           np.hypot(size[:, 0], size[:, 1]), np.linalg.norm(size, axis=1)],
                         m.geom_rbound)

    def _outside_view(self, data: mujoco.MjData, name: str, radius: np.ndarray) -> np.ndarray:
        """Geoms whose bounding sphere (radii `radius`) lies wholly behind the camera's near plane or outside one of
        its side planes. Planes and height fields always stay."""
        cam = self.camera_ids[name]
        offset = (data.geom_xpos - data.cam_xpos[cam]) @ data.cam_xmat[cam].reshape(3, 3)  # in the camera frame
        outside = -offset[:, 2] < NEAR_CLIP - radius
        outside |= np.any(offset @ self._side_normals[name].T < -radius[:, None], axis=1)
        return outside & ~self._unbounded

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
