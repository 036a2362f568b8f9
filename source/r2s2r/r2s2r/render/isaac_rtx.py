"""Isaac Sim RTX rendering of our physics: the cell's USD stage (`r2s2r.cell.usd.build_stage`) posed from MuJoCo
(C or Warp) through Fabric, cameras as one tiled render product with RGB and depth annotators, and the appearance
(object colours, lights) written with Replicator's functional API.

Pure parts (run and tested anywhere; numpy, Warp, usd-core):
- `body_matrices`: body poses -> the 4x4 world matrices Fabric stores, by the Warp kernel `_pose_matrices` that
  also writes Fabric under Kit. Conventions as Isaac Lab 3.0's scene-data conversion
  (`isaaclab.scene_data.scene_data_provider.ConversionKernels`): a Warp transform (quaternion x, y, z, w) turned
  into its column-vector matrix and transposed, giving USD's row-vector layout (`Gf.Matrix4d`: rotation rows are
  the body axes, translation in the last row), in double precision.
- `appearance_values`: light and object-colour state (the MjModel arrays an episode's reset drew)
  -> the stage attributes that show it; `bind_object_materials` gives each object a material of its own to colour.
- `untile`: a tiled render product's buffer -> one image per camera, in Isaac Lab's tile order.

Kit parts (import omni/usdrt/isaacsim only inside functions, so `import r2s2r` never loads Kit): the
`IsaacRtxRenderer` backend and `apply_appearance_with_replicator`. They need a running Isaac Sim (RTX GPU).

The backend keeps the renderer contract of `r2s2r.render.base`: its render products are pinhole "source" cameras
at each `CameraModel`'s render size and field of view, and the lens model is applied afterwards in image space, as
for every other backend. The cell's own camera prims carry the lens as OmniLensDistortion attributes at the render
size (`r2s2r.cell.usd.author_lens_distortion`), which is what the Isaac Sim viewport and Isaac Lab's camera sensors
read.
"""

from __future__ import annotations

import math
from typing import Any

import mujoco
import numpy as np
import warp as wp
from pxr import Gf, Sdf, Tf, Usd, UsdGeom, UsdShade

from r2s2r.cell import usd
from r2s2r.cell.mjcf import object_body_name
from r2s2r.cell.spec import CellCfg
from r2s2r.core import ConfigError
from r2s2r.physics.base import PhysicsBackend
from r2s2r.render.base import RenderBackend

# Our own index attribute (not Isaac Lab's `isaaclab:transformIndex`), so an Isaac Lab scene in the same Kit process
# keeps its bindings: the body id of each body prim in Fabric.
TRANSFORM_INDEX = "r2s2r:transformIndex"
SOURCE_CAMERA_SUFFIX = "_rtx_source"
OBJECT_LOOKS = "/World/Looks/objects"

# --------------------------------------------------------------------------------------------------------------
# Poses
# --------------------------------------------------------------------------------------------------------------
@wp.kernel(enable_backward=False)
def _pose_matrices(xpos: wp.array(dtype=wp.vec3d), xquat: wp.array(dtype=wp.vec4d), body: Any, out: Any):
    """out[i] = row-vector world matrix of body `body[i]`. `body` and `out` are Warp arrays, or Fabric arrays of a
    prim selection (the body index attribute and `omni:fabric:localMatrix`)."""
    i = wp.tid()
    b = body[i]
    q = xquat[b]  # MuJoCo: w, x, y, z; Warp: x, y, z, w
    pose = wp.transformd(xpos[b], wp.quatd(q[1], q[2], q[3], q[0]))
    out[i] = wp.transpose(wp.transform_to_matrix(pose))


def _pose_inputs(data: mujoco.MjData, device: str) -> tuple[wp.array, wp.array]:
    return (wp.array(data.xpos, dtype=wp.vec3d, device=device),
            wp.array(data.xquat, dtype=wp.vec4d, device=device))


def body_matrices(data: mujoco.MjData, device: str = "cpu") -> np.ndarray:
    """(nbody - 1, 4, 4) world matrices of bodies 1.. (the world body has no prim), in USD's row-vector layout: the
    value Fabric holds for each body prim of the cell's stage."""
    n = data.xpos.shape[0] - 1
    xpos, xquat = _pose_inputs(data, device)
    bodies = wp.array(np.arange(1, n + 1, dtype=np.int32), dtype=wp.int32, device=device)
    out = wp.empty(n, dtype=wp.mat44d, device=device)
    wp.launch(_pose_matrices, dim=n, inputs=[xpos, xquat, bodies], outputs=[out], device=device)
    return out.numpy()


# --------------------------------------------------------------------------------------------------------------
# Appearance
# --------------------------------------------------------------------------------------------------------------
def under(root: str, path: str) -> str:
    """A prim path of the cell's stage (under /World) where the cell's stage sits at `root` (an Isaac Lab
    environment's `<env>/Cell`)."""
    return f"{root}{path.removeprefix('/World')}"


def object_material_path(body: str, root: str = "/World") -> str:
    return under(root, f"{OBJECT_LOOKS}/{Tf.MakeValidIdentifier(body)}")


def bind_object_materials(stage: Usd.Stage, model: mujoco.MjModel, cell: CellCfg, root: str = "/World") -> None:
    """Give every object geom of the cell at `root` a material of its own: the stage shares one material per
    distinct colour, and an episode recolours one object only."""
    for obj in cell.objects + cell.novel_objects:
        body = object_body_name(obj)
        gid = model.geom(body).id
        path = object_material_path(body, root)
        mat = UsdShade.Material.Define(stage, path)
        shader = UsdShade.Shader.Define(stage, f"{path}/PreviewSurface")
        shader.CreateIdAttr("UsdPreviewSurface")
        rgba = model.geom_rgba[gid]
        shader.CreateInput("diffuseColor", Sdf.ValueTypeNames.Color3f).Set(Gf.Vec3f(*map(float, rgba[:3])))
        shader.CreateInput("opacity", Sdf.ValueTypeNames.Float).Set(float(rgba[3]))
        shader.CreateInput("roughness", Sdf.ValueTypeNames.Float).Set(0.6)
        mat.CreateSurfaceOutput().ConnectToSource(shader.ConnectableAPI(), "surface")
        geom = stage.GetPrimAtPath(under(root, f"{usd.body_prim_path(model, model.body(body).id)}/"
                                               f"{Tf.MakeValidIdentifier(body)}"))
        UsdShade.MaterialBindingAPI.Apply(geom).Bind(mat)


def appearance_values(model: mujoco.MjModel, light_pos: np.ndarray, light_diffuse: np.ndarray,
                      object_rgba: dict[str, np.ndarray], root: str = "/World") -> dict[str, dict[str, Any]]:
    """{prim path: {attribute: value}} showing a light and colour state on the cell at `root` (after
    `bind_object_materials`).

    MuJoCo keeps a light's colour times intensity as its diffuse; USD keeps them apart. The brightest channel
    becomes the intensity (in the stage's units per unit of our intensity, `r2s2r.cell.usd`) and the colour is
    normalised by it, so colour * intensity is the diffuse as MuJoCo renders it. Lights sit under <root>/Lights, and
    their positions are in the cell's frame.
    """
    out: dict[str, dict[str, Any]] = {}
    for i in range(model.nlight):
        if model.light_bodyid[i] != 0:
            raise ConfigError(f"light {i}: expected lights fixed to the world (the cell's lights are)")
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_LIGHT, i) or f"light_{i}"
        d = np.asarray(light_diffuse[i], dtype=float)
        peak = float(d.max())
        per_unit = (usd.DISTANT_PER_UNIT if model.light_type[i] == mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
                    else usd.SPHERE_NITS_PER_UNIT)
        colour = d / peak if peak > 0 else np.ones(3)
        out[under(root, f"/World/Lights/{Tf.MakeValidIdentifier(name)}")] = {
            "inputs:color": Gf.Vec3f(*map(float, colour)),
            "inputs:intensity": peak * per_unit,
            "xformOp:translate": Gf.Vec3d(*map(float, light_pos[i])),
        }
    for body, rgba in object_rgba.items():
        out[f"{object_material_path(body, root)}/PreviewSurface"] = {
            "inputs:diffuseColor": Gf.Vec3f(*map(float, rgba[:3])),
            "inputs:opacity": float(rgba[3]),
        }
    return out


def object_rgba(model: mujoco.MjModel, cell: CellCfg, geom_rgba: np.ndarray) -> dict[str, np.ndarray]:
    """{object body: its colour} in a paint of the model's geoms (ngeom, 4): `appearance_values`' `object_rgba`."""
    return {object_body_name(o): geom_rgba[model.geom(object_body_name(o)).id].copy()
            for o in cell.objects + cell.novel_objects}


def model_appearance(model: mujoco.MjModel, cell: CellCfg) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(light_pos, light_diffuse, object_rgba) as `model` holds them now: `appearance_values`' arguments."""
    return model.light_pos.copy(), model.light_diffuse.copy(), object_rgba(model, cell, model.geom_rgba)


# --------------------------------------------------------------------------------------------------------------
# Tiles
# --------------------------------------------------------------------------------------------------------------
def tile_grid(count: int) -> tuple[int, int]:
    """(columns, rows) of a tiled render product of `count` cameras: Replicator's near-square layout."""
    cols = math.ceil(math.sqrt(count))
    return cols, math.ceil(count / cols)


def untile(tiled: np.ndarray, count: int, height: int, width: int) -> np.ndarray:
    """(count, height, width, ...) images from a tiled buffer (rows * height, cols * width, ...); camera i is in
    tile row i // cols, column i % cols."""
    cols, rows = tile_grid(count)
    if tiled.shape[:2] != (rows * height, cols * width):
        raise ValueError(f"tiled buffer {tiled.shape[:2]}: expected {(rows * height, cols * width)} for {count} "
                         f"tiles of {(height, width)}")
    grid = tiled.reshape(rows, height, cols, width, *tiled.shape[2:])
    return np.swapaxes(grid, 1, 2).reshape(rows * cols, height, width, *tiled.shape[2:])[:count]


# --------------------------------------------------------------------------------------------------------------
# Kit (Isaac Sim) parts
# --------------------------------------------------------------------------------------------------------------
def kit_running() -> bool:
    """Whether this process runs inside Isaac Sim's Kit (started by `isaacsim.SimulationApp` or `isaaclab -p`): its
    `omni.*` modules import only there."""
    try:
        import omni.kit.app
    except ImportError:
        return False
    return omni.kit.app.get_app() is not None


def apply_appearance_with_replicator(values: dict[str, dict[str, Any]]) -> None:
    """Write `appearance_values` to the open Kit stage with Replicator's functional API (immediate writes, no
    graph), so an episode's reset (which draws into the MuJoCo model) shows as the MuJoCo renderers show it.
    The next `rep.orchestrator.step` renders it."""
    import omni.replicator.core as rep
    import omni.usd

    stage = omni.usd.get_context().get_stage()
    for path, attrs in values.items():
        prim = stage.GetPrimAtPath(path)
        for name, value in attrs.items():
            rep.functional.modify.attribute(prim, name, value)


class IsaacRtxRenderer(RenderBackend):
    """RTX renders of the cell in a running Isaac Sim (started by `isaacsim.SimulationApp` or `isaaclab -p`).

    Construction opens the cell's stage in Kit's USD context, binds every body prim in Fabric, adds a pinhole
    source camera per requested camera and one tiled render product over them with `rgb` and
    `distance_to_image_plane` annotators. Each frame writes the body poses and the model's appearance, steps
    Replicator once (`rt_subframes` path-traced subframes) and reads the tiles back. Worlds are drawn one after the
    other on the one stage.
    """

    name = "isaac_rtx"

    def __init__(self, model: mujoco.MjModel, cell: CellCfg, cameras, width: int, height: int,
                 shadows: bool = False, multisample: bool = False, supersample: int = 1, device: str = "cuda:0",
                 rt_subframes: int = 1, depth: bool = True):
        super().__init__(model, cell, cameras, width, height, shadows, multisample, supersample, depth)
        import omni.replicator.core as rep
        import omni.usd
        import usdrt
        import usdrt.hierarchy

        self.device, self.rt_subframes = device, int(rt_subframes)
        context = omni.usd.get_context()
        context.new_stage()
        stage = context.get_stage()
        stage.GetRootLayer().TransferContent(usd.build_stage(model, cell).GetRootLayer())
        bind_object_materials(stage, model, cell)
        paths = [self._source_camera(stage, name) for name in self.cameras]

        rt = usdrt.Usd.Stage.Attach(context.get_stage_id())
        self._hierarchy = usdrt.hierarchy.IFabricHierarchy().get_fabric_hierarchy(rt.GetFabricId(),
                                                                                   rt.GetStageIdAsStageId())
        rt.SynchronizeToFabric()
        for b in range(1, model.nbody):
            prim = rt.GetPrimAtPath(usd.body_prim_path(model, b))
            usdrt.Rt.Xformable(prim).SetWorldXformFromUsd()
            prim.CreateAttribute(TRANSFORM_INDEX, usdrt.Sdf.ValueTypeNames.Int, True).Set(b)
            # The local matrix written below is the body's world pose: its parents' transforms must not apply.
            self._hierarchy.set_reset_xform_stack(prim.GetPath().fabricPath, True)
        self._hierarchy.update_world_xforms()
        self._selection = rt.SelectPrims(
            require_attrs=[(usdrt.Sdf.ValueTypeNames.Int, TRANSFORM_INDEX, usdrt.Usd.Access.Read),
                           (usdrt.Sdf.ValueTypeNames.Matrix4d, "omni:fabric:localMatrix", usdrt.Usd.Access.ReadWrite)],
            device=device)
        self._first_write = True

        size = self.camera_models[self.cameras[0]]
        self._tile = (size.render_height, size.render_width)
        self._product = rep.create.render_product_tiled(cameras=paths, tile_resolution=self._tile[::-1],
                                                        name="r2s2r_cameras")
        self._annotators = {kind: rep.AnnotatorRegistry.get_annotator(kind, device="cpu")
                            for kind in ("rgb", "distance_to_image_plane")}
        for annotator in self._annotators.values():
            annotator.attach([self._product.path])

    def _source_camera(self, stage: Usd.Stage, name: str) -> str:
        """A centred pinhole camera beside the cell's camera (same mount and pose) at the camera model's field of
        view; the cell's camera itself gets the lens as OmniLensDistortion attributes for the viewport."""
        cm = self.camera_models[name]
        cam = stage.GetPrimAtPath(self._camera_path(name))
        usd.author_lens_distortion(cam, cm.lens, self.width, self.height)
        path = f"{cam.GetPath()}{SOURCE_CAMERA_SUFFIX}"
        source = UsdGeom.Camera.Define(stage, path)
        cid = self.camera_ids[name]
        xf = UsdGeom.Xformable(source)
        xf.AddTranslateOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Vec3d(*map(float, self.model.cam_pos[cid])))
        xf.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Quatd(*map(float, self.model.cam_quat[cid])))
        f_src = cm.source_intrinsic_matrix()[0, 0]  # the source render's focal length, in its square pixels
        usd.set_pinhole(source, f_src / cm.render_width, f_src / cm.render_height, 0.5, 0.5)
        source.CreateClippingRangeAttr(UsdGeom.Camera(cam).GetClippingRangeAttr().Get())
        return path

    def _camera_path(self, name: str) -> str:
        b = int(self.model.cam_bodyid[self.camera_ids[name]])
        parent = "/World/Cameras" if b == 0 else usd.body_prim_path(self.model, b)
        return f"{parent}/{Tf.MakeValidIdentifier(name)}"

    def _write_poses(self, data: mujoco.MjData) -> None:
        self._selection.PrepareForReuse()
        bodies = wp.fabricarray(self._selection, TRANSFORM_INDEX)
        matrices = wp.fabricarray(self._selection, "omni:fabric:localMatrix")
        xpos, xquat = _pose_inputs(data, self.device)
        wp.launch(_pose_matrices, dim=len(bodies), inputs=[xpos, xquat, bodies], outputs=[matrices],
                  device=self.device)
        wp.synchronize_device(self.device)
        # Propagate to the geoms and cameras below each body (incrementally after the first frame).
        if not self._hierarchy.update_world_xforms_gpu(not self._first_write):
            raise RuntimeError("Fabric transform hierarchy update failed")
        self._first_write = False

    def _render_sources(self, physics: PhysicsBackend) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        import omni.replicator.core as rep

        apply_appearance_with_replicator(appearance_values(self.model, *model_appearance(self.model, self.cell)))
        n, (h, w) = physics.nworld, self._tile
        rgb = np.empty((len(self.cameras), n, h, w, 3), np.uint8)
        depth = np.empty((len(self.cameras), n, h, w), np.float32)
        for world in range(n):
            self._write_poses(physics.host_data(world))
            rep.orchestrator.step(rt_subframes=self.rt_subframes, delta_time=0.0, pause_timeline=False)
            rgb[:, world] = untile(np.asarray(self._annotators["rgb"].get_data()), len(self.cameras), h, w)[..., :3]
            d = untile(np.asarray(self._annotators["distance_to_image_plane"].get_data()), len(self.cameras), h, w)
            depth[:, world] = np.where(np.isfinite(d), d, 0.0)  # no hit reads inf in RTX, 0 in our convention
        return {name: (rgb[i], depth[i] if self.depth else None) for i, name in enumerate(self.cameras)}

    def close(self) -> None:
        if not self._closed:
            for annotator in self._annotators.values():
                annotator.detach()
            self._product.destroy()
        super().close()
