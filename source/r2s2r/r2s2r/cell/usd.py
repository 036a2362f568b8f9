"""USD stage of the cell, built from the compiled `MjModel` so the stage and the physics cannot drift apart.

Geometry, masses, joints, drives, camera mounts and light poses are read from the model; only what the model
does not hold comes from the `CellCfg` (camera lenses, light colour and intensity). MuJoCo computes the physics;
the stage is what an Isaac Sim renderer or GUI shows, and `sync_poses` writes MuJoCo's body poses into it each
frame (or as time samples, to record a rollout for playback).

Units: metres, kilograms, seconds, Z up (stage metadata says so as well).

Prim layout (stable paths; MuJoCo names pass through `Tf.MakeValidIdentifier`):

    /World                            Xform, the default prim; its groups below are Scopes (no transform)
    /World/PhysicsScene               UsdPhysics.Scene, gravity from model.opt.gravity
    /World/Static/<geom>              geoms of the world body (the floor)
    /World/Assets/<root>              one Xform (identity transform) per child of the world body and its subtree:
                                      an arm, the conveyor, a bin, an object; Isaac Lab can clone each per env
    /World/Assets/<root>/<body>       one Xform per body of that tree. FLAT, not nested: its ops
                                      (xformOp:translate double3, xformOp:orient quatd) hold the body's WORLD
                                      pose, so syncing a body is two writes and needs no parent transform
    /World/Assets/<root>/<body>/<geom>    geoms (unnamed ones as geom_<id>), local pose from geom_pos/geom_quat
    /World/Assets/<root>/<body>/<camera>  cameras mounted on a body, local pose from cam_pos/cam_quat
    /World/Assets/<root>/Joints/<joint>   RevoluteJoint (hinge) or PrismaticJoint (slide); free joints have none
    /World/Assets/<root>/Joints/<root>_fixed  FixedJoint of an articulation's root link to the world
    /World/Assets/<root>/Joints/<body>_weld   FixedJoint of a jointless body welded to its parent (the palms)
    /World/Cameras/<camera>           cameras fixed to the world
    /World/Lights/<light>             SphereLight (MuJoCo spot light) or DistantLight (directional); a light
                                      mounted on a body sits under its body prim instead, like cameras
    /World/Looks/color_<rrggbbaa>     UsdPreviewSurface material per distinct geom colour
    /World/Looks/friction_<s>_<t>_<r> physics material per distinct friction (sliding, torsional, rolling)

Physics schemas: an asset with hinge or slide joints (each arm, the conveyor with its prismatic belt) is an
articulation: ArticulationRootAPI on its /World/Assets/<root> prim, RigidBodyAPI and MassAPI on every link, the
root link fixed to the world. Free bodies (the objects) are rigid bodies; the bins are static colliders. An
ellipsoid is a triangle mesh with its vertices on the surface, collided as its convex hull (USD has no ellipsoid
and refuses a non-uniformly scaled sphere collider). MuJoCo-only parameters are `mjc:` attributes, as Newton's
importer reads them: mjc:option:timestep on the scene, mjc:gravcomp on bodies, mjc:armature, mjc:damping and
mjc:frictionloss on joints, mjc:solreflimit on limited joints, mjc:condim, mjc:margin and
mjc:gap on collision geoms, mjc:torsionalfriction and mjc:rollingfriction on physics materials.
Geoms with a non-zero contype or conaffinity get CollisionAPI and a friction material bound for purpose
"physics". Joint limits and angular drive gains follow USD's degree convention: a MuJoCo stiffness kp
(N*m/rad) is written as kp * pi / 180 (N*m/deg), damping likewise. Robot links with gravity compensation get
PhysX's `physxRigidBody:disableGravity`, which is what MuJoCo's gravcomp = 1 does.

Cameras (`set_pinhole`): the vertical aperture is fixed at VERTICAL_APERTURE_MM and focalLength = fy *
verticalAperture, since the lens' fy is normalised by image height; horizontalAperture = focalLength / fx, so the
aperture aspect is fy / fx, the image aspect at which the lens has square pixels (1:1 for fx == fy). The principal
point becomes aperture offsets of (0.5 - cx) and (cy - 0.5) apertures (image v grows down, film y up), ignoring the
half-pixel difference between OpenCV's pixel-centre convention and USD's continuous film. UsdGeom.Camera has no
fisheye model, so a fisheye lens is written twice: as our attributes `r2s2r:lens:{model,fx,fy,cx,cy,k1..k4}`
(normalised, exactly the LensCfg; every camera gets model and fx..cy) and as Isaac Sim's
`OmniLensDistortionOpenCvFisheyeAPI` (`author_lens_distortion`, `omni:lensdistortion:opencvFisheye:*`, OpenCV's
fisheye model, i.e. the same equidistant Kannala-Brandt polynomial, intrinsics in pixels at a nominal image
FISHEYE_IMAGE_WIDTH wide with square pixels; Isaac rescales them to the render resolution). The schema is not known
to usd-core, so it is written as an applied-schema name plus attributes; the names follow Isaac Sim 5's camera API.

Lights: our intensity in [0, 3] is scaled to SPHERE_NITS_PER_UNIT nits on a sphere light of radius
SPHERE_LIGHT_RADIUS (1.0 gives about 470 lux on axis at 2 m, an office-like level) or DISTANT_PER_UNIT for a
distant light (3.0 gives Kit's default distant light of 3000). MuJoCo's spot cutoff becomes the shaping cone.
"""

from __future__ import annotations

import math
import os
import uuid

import mujoco
import numpy as np
from pxr import Gf, Sdf, Tf, Usd, UsdGeom, UsdLux, UsdPhysics, UsdShade, Vt

from r2s2r.cell.spec import DISTORTION_NAMES, CellCfg, LensCfg, focal_from_fov, intrinsics_in_pixels
from r2s2r.geometry import mat_to_quat, quat_to_mat

GENERATOR = "r2s2r.cell.usd"
VERTICAL_APERTURE_MM = 20.955
FISHEYE_IMAGE_WIDTH = 512
SPHERE_LIGHT_RADIUS = 0.1
SPHERE_NITS_PER_UNIT = 6.0e4
DISTANT_PER_UNIT = 1.0e3
INFINITE_PLANE_HALF_SIZE = 50.0  # MuJoCo plane size 0 means infinite; USD needs a finite extent

_G = mujoco.mjtGeom
_J = mujoco.mjtJoint


def asset_prim_path(model: mujoco.MjModel, body_id: int) -> str:
    """The asset subtree holding a body: one per child of the world body (a robot, the conveyor, a bin, an object)."""
    if not 0 < body_id < model.nbody:
        raise ValueError(f"body_id = {body_id!r}: expected a body in [1, {model.nbody - 1}] (the world has no prim)")
    root = int(model.body_rootid[body_id])
    return f"/World/Assets/{_ident(model, mujoco.mjtObj.mjOBJ_BODY, root, 'body')}"


def body_prim_path(model: mujoco.MjModel, body_id: int) -> str:
    return f"{asset_prim_path(model, body_id)}/{_ident(model, mujoco.mjtObj.mjOBJ_BODY, body_id, 'body')}"


def geom_prim_path(model: mujoco.MjModel, geom_id: int) -> str:
    b = int(model.geom_bodyid[geom_id])
    parent = "/World/Static" if b == 0 else body_prim_path(model, b)
    return f"{parent}/{_ident(model, mujoco.mjtObj.mjOBJ_GEOM, geom_id, 'geom')}"


def joint_prim_path(model: mujoco.MjModel, joint_id: int) -> str:
    """A hinge or slide joint's prim, in the Joints scope of its body's asset (free joints have none)."""
    if not 0 <= joint_id < model.njnt:
        raise ValueError(f"joint_id = {joint_id!r}: expected a joint in [0, {model.njnt - 1}]")
    body = int(model.jnt_bodyid[joint_id])
    return f"{asset_prim_path(model, body)}/Joints/{_ident(model, mujoco.mjtObj.mjOBJ_JOINT, joint_id, 'joint')}"


def articulated(model: mujoco.MjModel, root: int) -> bool:
    """Whether the tree under a child of the world is an articulation: it has hinge or slide joints (the arms, the
    conveyor); the rest are static (bins) or free rigid bodies (objects)."""
    return any(int(model.jnt_type[j]) in (_J.mjJNT_HINGE, _J.mjJNT_SLIDE)
               and model.body_rootid[model.jnt_bodyid[j]] == root for j in range(model.njnt))


def _ident(model: mujoco.MjModel, obj: mujoco.mjtObj, i: int, kind: str) -> str:
    return Tf.MakeValidIdentifier(mujoco.mj_id2name(model, obj, i) or f"{kind}_{i}")


def _vec3d(v) -> Gf.Vec3d:
    return Gf.Vec3d(float(v[0]), float(v[1]), float(v[2]))


def _quatd(q) -> Gf.Quatd:
    return Gf.Quatd(float(q[0]), float(q[1]), float(q[2]), float(q[3]))


def _quatf(q) -> Gf.Quatf:
    return Gf.Quatf(float(q[0]), float(q[1]), float(q[2]), float(q[3]))


def _set_local_pose(prim: Usd.Prim, pos, quat, scale=None) -> None:
    xf = UsdGeom.Xformable(prim)
    xf.AddTranslateOp(UsdGeom.XformOp.PrecisionDouble).Set(_vec3d(pos))
    xf.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(_quatd(quat))
    if scale is not None:
        xf.AddScaleOp(UsdGeom.XformOp.PrecisionDouble).Set(_vec3d(scale))


def _rodrigues(axis: np.ndarray, angle: float) -> np.ndarray:
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def _rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotation taking direction a onto direction b."""
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    v = np.cross(a, b)
    s, c = float(np.linalg.norm(v)), float(a @ b)
    if s > 1e-12:
        return _rodrigues(v / s, math.atan2(s, c))
    if c > 0:
        return np.eye(3)
    perp = np.cross(a, np.eye(3)[int(np.argmin(np.abs(a)))])  # antiparallel: half-turn about any normal
    return _rodrigues(perp / np.linalg.norm(perp), math.pi)


# --------------------------------------------------------------------------------------------------------------
# Stage
# --------------------------------------------------------------------------------------------------------------
def build_stage(model: mujoco.MjModel, cell: CellCfg, path: str | None = None) -> Usd.Stage:
    """The cell's stage, in memory; with `path`, also written there atomically (see `write_stage`).

    Bodies start at the model's reference configuration (qpos0); `sync_poses` moves them.
    """
    stage = Usd.Stage.CreateInMemory()
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdPhysics.SetStageKilogramsPerUnit(stage, 1.0)
    layer = stage.GetRootLayer()
    layer.documentation = (f"r2s2r conveyor cell, generated by {GENERATOR} from the compiled MjModel. "
                           "Units: metres, kilograms, seconds; Z up.")
    layer.customLayerData = {"r2s2r": {"generator": GENERATOR, "units": "metres, kilograms, seconds", "upAxis": "Z"}}
    world = UsdGeom.Xform.Define(stage, "/World")
    stage.SetDefaultPrim(world.GetPrim())
    for group in ("Static", "Assets", "Cameras", "Lights", "Looks"):
        UsdGeom.Scope.Define(stage, f"/World/{group}")

    scene = UsdPhysics.Scene.Define(stage, "/World/PhysicsScene")
    g = np.asarray(model.opt.gravity, dtype=float)
    gn = float(np.linalg.norm(g))
    scene.CreateGravityDirectionAttr(Gf.Vec3f(*(g / gn if gn > 0 else (0.0, 0.0, -1.0))))
    scene.CreateGravityMagnitudeAttr(gn)
    _mjc(scene.GetPrim(), "option:timestep", Sdf.ValueTypeNames.Float, float(model.opt.timestep))

    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    for root in sorted({int(r) for r in model.body_rootid[1:]}):
        # Identity transform, so the body prims beneath keep world poses.
        UsdGeom.Xform.Define(stage, asset_prim_path(model, root))
        if articulated(model, root):
            UsdGeom.Scope.Define(stage, f"{asset_prim_path(model, root)}/Joints")
            root_prim = stage.GetPrimAtPath(asset_prim_path(model, root))
            UsdPhysics.ArticulationRootAPI.Apply(root_prim)
            # MuJoCo keeps an arm's own geoms apart by contype/conaffinity, which UsdPhysics does not express;
            # without this Newton collides neighbouring links and the hand with the arm (a wrist joint then jams).
            root_prim.CreateAttribute("newton:selfCollisionEnabled", Sdf.ValueTypeNames.Bool).Set(False)
    for b in range(1, model.nbody):
        prim = UsdGeom.Xform.Define(stage, body_prim_path(model, b)).GetPrim()
        _set_local_pose(prim, data.xpos[b], data.xquat[b])

    looks = _Looks(stage)
    for gid in range(model.ngeom):
        _add_geom(stage, model, gid, looks)
    _add_body_physics(stage, model)
    _add_joints(stage, model)
    _add_cameras(stage, model, cell)
    _add_lights(stage, model, cell)
    if path is not None:
        write_stage(stage, path)
    return stage


def write_stage(stage: Usd.Stage, path: str | os.PathLike) -> str:
    """Export the stage's root layer to `path` atomically (temporary file in the same folder, then rename).

    Raises OSError naming `path` when it cannot be written. Returns the absolute path.
    """
    path = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(path)
    ext = os.path.splitext(name)[1]
    if ext not in (".usd", ".usda", ".usdc"):
        raise ValueError(f"path = {path!r}: expected a .usd, .usda or .usdc file")
    if not os.path.isdir(folder):
        raise OSError(f"cannot write USD stage to {path}: folder {folder} does not exist or is not a folder")
    # Same folder, so os.replace is an atomic rename; the extension tells USD which format to write.
    tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:12]}.tmp{ext}")
    try:
        if not stage.GetRootLayer().Export(tmp):
            raise OSError("export failed")
        os.replace(tmp, path)
    except (OSError, Tf.ErrorException) as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        # USD's errors carry a C++ source location on every line; the last line's message is the cause.
        reason = str(e).strip().splitlines()[-1].split(" : ", 1)[-1].strip(" '") if str(e).strip() else repr(e)
        raise OSError(f"cannot write USD stage to {path}: {reason}") from e
    return path


# --------------------------------------------------------------------------------------------------------------
# Geoms and materials
# --------------------------------------------------------------------------------------------------------------
class _Looks:
    """Materials under /World/Looks, one per distinct colour and per distinct collision friction."""

    def __init__(self, stage: Usd.Stage):
        self.stage = stage
        self._render: dict[str, UsdShade.Material] = {}
        self._physics: dict[tuple[float, float, float], UsdShade.Material] = {}

    def render(self, rgba: np.ndarray) -> UsdShade.Material:
        key = "".join(f"{round(float(np.clip(c, 0, 1)) * 255):02x}" for c in rgba)
        if key not in self._render:
            mat = UsdShade.Material.Define(self.stage, f"/World/Looks/color_{key}")
            shader = UsdShade.Shader.Define(self.stage, f"/World/Looks/color_{key}/PreviewSurface")
            shader.CreateIdAttr("UsdPreviewSurface")
            shader.CreateInput("diffuseColor", Sdf.ValueTypeNames.Color3f).Set(Gf.Vec3f(*map(float, rgba[:3])))
            shader.CreateInput("opacity", Sdf.ValueTypeNames.Float).Set(float(rgba[3]))
            shader.CreateInput("roughness", Sdf.ValueTypeNames.Float).Set(0.6)
            mat.CreateSurfaceOutput().ConnectToSource(shader.ConnectableAPI(), "surface")
            self._render[key] = mat
        return self._render[key]

    def physics(self, friction: np.ndarray) -> UsdShade.Material:
        """The material of MuJoCo friction (sliding, torsional, rolling): USD's friction is the sliding one, the
        other two are `mjc:` attributes (a grasp's grip against twisting is the torsional one)."""
        key = tuple(round(float(f), 6) for f in friction)
        if key not in self._physics:
            name = Tf.MakeValidIdentifier("friction_" + "_".join(f"{f:g}".replace(".", "p") for f in key))
            mat = UsdShade.Material.Define(self.stage, f"/World/Looks/{name}")
            api = UsdPhysics.MaterialAPI.Apply(mat.GetPrim())
            api.CreateStaticFrictionAttr(key[0])
            api.CreateDynamicFrictionAttr(key[0])
            api.CreateRestitutionAttr(0.0)
            _mjc(mat.GetPrim(), "torsionalfriction", Sdf.ValueTypeNames.Float, key[1])
            _mjc(mat.GetPrim(), "rollingfriction", Sdf.ValueTypeNames.Float, key[2])
            self._physics[key] = mat
        return self._physics[key]


def _add_geom(stage: Usd.Stage, model: mujoco.MjModel, gid: int, looks: _Looks) -> None:
    path = geom_prim_path(model, gid)
    gtype, size, scale = int(model.geom_type[gid]), model.geom_size[gid], None
    if gtype == _G.mjGEOM_BOX:
        gprim = UsdGeom.Cube.Define(stage, path)
        gprim.CreateSizeAttr(2.0)
        scale = size
    elif gtype == _G.mjGEOM_SPHERE:
        gprim = UsdGeom.Sphere.Define(stage, path)
        gprim.CreateRadiusAttr(float(size[0]))
    elif gtype == _G.mjGEOM_ELLIPSOID:
        # No USD or PhysX ellipsoid, and a scaled sphere collider is refused (ColliderNonUniformScale): a mesh
        # with its vertices on the ellipsoid, collided as its convex hull.
        points, faces = ellipsoid_mesh(size)
        gprim = UsdGeom.Mesh.Define(stage, path)
        gprim.CreatePointsAttr(Vt.Vec3fArray.FromNumpy(points.astype(np.float32)))
        gprim.CreateFaceVertexCountsAttr(Vt.IntArray([3] * len(faces)))
        gprim.CreateFaceVertexIndicesAttr(Vt.IntArray.FromNumpy(faces.ravel().astype(np.int32)))
        gprim.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
    elif gtype in (_G.mjGEOM_CYLINDER, _G.mjGEOM_CAPSULE):
        gprim = (UsdGeom.Cylinder if gtype == _G.mjGEOM_CYLINDER else UsdGeom.Capsule).Define(stage, path)
        gprim.CreateRadiusAttr(float(size[0]))
        gprim.CreateHeightAttr(2.0 * float(size[1]))  # a capsule's height excludes its caps, as in USD
        gprim.CreateAxisAttr(UsdGeom.Tokens.z)
    elif gtype == _G.mjGEOM_PLANE:
        gprim = UsdGeom.Plane.Define(stage, path)
        gprim.CreateWidthAttr(2.0 * float(size[0] or INFINITE_PLANE_HALF_SIZE))
        gprim.CreateLengthAttr(2.0 * float(size[1] or INFINITE_PLANE_HALF_SIZE))
        gprim.CreateAxisAttr(UsdGeom.Tokens.z)
    elif gtype == _G.mjGEOM_MESH:
        # Compiled mesh vertices are already in the geom frame.
        m = int(model.geom_dataid[gid])
        verts = model.mesh_vert[model.mesh_vertadr[m]:model.mesh_vertadr[m] + model.mesh_vertnum[m]]
        faces = model.mesh_face[model.mesh_faceadr[m]:model.mesh_faceadr[m] + model.mesh_facenum[m]]
        gprim = UsdGeom.Mesh.Define(stage, path)
        gprim.CreatePointsAttr(Vt.Vec3fArray.FromNumpy(np.ascontiguousarray(verts, dtype=np.float32)))
        gprim.CreateFaceVertexCountsAttr(Vt.IntArray([3] * len(faces)))
        gprim.CreateFaceVertexIndicesAttr(Vt.IntArray.FromNumpy(np.ascontiguousarray(faces.ravel(), dtype=np.int32)))
    else:
        raise NotImplementedError(f"geom {path}: MuJoCo geom type {_G(gtype).name} has no USD counterpart here")
    gprim.CreateExtentAttr(UsdGeom.Boundable.ComputeExtentFromPlugins(gprim, Usd.TimeCode.Default()))
    prim = gprim.GetPrim()
    _set_local_pose(prim, model.geom_pos[gid], model.geom_quat[gid], scale)

    matid = int(model.geom_matid[gid])
    rgba = model.mat_rgba[matid] if matid >= 0 else model.geom_rgba[gid]
    gprim.CreateDisplayColorAttr(Vt.Vec3fArray([Gf.Vec3f(*map(float, rgba[:3]))]))
    gprim.CreateDisplayOpacityAttr(Vt.FloatArray([float(rgba[3])]))
    binding = UsdShade.MaterialBindingAPI.Apply(prim)
    binding.Bind(looks.render(rgba))
    if model.geom_contype[gid] or model.geom_conaffinity[gid]:
        UsdPhysics.CollisionAPI.Apply(prim)
        if gtype in (_G.mjGEOM_MESH, _G.mjGEOM_ELLIPSOID):
            UsdPhysics.MeshCollisionAPI.Apply(prim).CreateApproximationAttr(UsdPhysics.Tokens.convexHull)
        binding.Bind(looks.physics(model.geom_friction[gid]), UsdShade.Tokens.weakerThanDescendants, "physics")
        # The contact's dimensionality (4: torsional friction too) and detection distances; Newton's own defaults
        # differ (condim 3, a 1 cm gap).
        _mjc(prim, "condim", Sdf.ValueTypeNames.Int, int(model.geom_condim[gid]))
        _mjc(prim, "margin", Sdf.ValueTypeNames.Float, float(model.geom_margin[gid]))
        _mjc(prim, "gap", Sdf.ValueTypeNames.Float, float(model.geom_gap[gid]))


ELLIPSOID_SEGMENTS = (32, 16)  # longitude, latitude: the hull's largest gap to the true surface is ~0.5% of a radius


def ellipsoid_mesh(size, segments: tuple[int, int] = ELLIPSOID_SEGMENTS) -> tuple[np.ndarray, np.ndarray]:
    """A closed triangle mesh with every vertex on the ellipsoid of semi-axes `size` (x, y, z), outward faces."""
    n_lon, n_lat = segments
    lat = np.linspace(0.0, math.pi, n_lat + 1)[1:-1]
    lon = np.linspace(0.0, 2.0 * math.pi, n_lon, endpoint=False)
    ring = np.stack([np.outer(np.sin(lat), np.cos(lon)), np.outer(np.sin(lat), np.sin(lon)),
                     np.outer(np.cos(lat), np.ones_like(lon))], axis=-1).reshape(-1, 3)
    points = np.vstack([[0.0, 0.0, 1.0], ring, [0.0, 0.0, -1.0]]) * np.asarray(size, dtype=float)
    bottom = len(points) - 1
    faces = []
    for i in range(n_lon):
        k = (i + 1) % n_lon
        faces.append((0, 1 + i, 1 + k))
        for r in range(n_lat - 2):
            a, b = 1 + r * n_lon + i, 1 + r * n_lon + k
            c, d = a + n_lon, b + n_lon
            faces += [(a, c, d), (a, d, b)]
        last = 1 + (n_lat - 2) * n_lon
        faces.append((bottom, last + k, last + i))
    return points, np.asarray(faces, dtype=np.int64)


def _mjc(prim: Usd.Prim, name: str, type_name: Sdf.ValueTypeName, value) -> None:
    """A MuJoCo-only parameter as the `mjc:` attribute Newton's USD importer reads."""
    prim.CreateAttribute(f"mjc:{name}", type_name, custom=True).Set(value)


# --------------------------------------------------------------------------------------------------------------
# Bodies and joints
# --------------------------------------------------------------------------------------------------------------
def _add_body_physics(stage: Usd.Stage, model: mujoco.MjModel) -> None:
    for b in range(1, model.nbody):
        root = int(model.body_rootid[b])
        if model.body_weldid[b] == 0 and not articulated(model, root):
            continue  # welded to the world outside any articulation (the bins): a static collider
        prim = stage.GetPrimAtPath(body_prim_path(model, b))
        UsdPhysics.RigidBodyAPI.Apply(prim)
        mass = UsdPhysics.MassAPI.Apply(prim)
        mass.CreateMassAttr(float(model.body_mass[b]))
        mass.CreateCenterOfMassAttr(Gf.Vec3f(*map(float, model.body_ipos[b])))
        mass.CreateDiagonalInertiaAttr(Gf.Vec3f(*map(float, model.body_inertia[b])))
        mass.CreatePrincipalAxesAttr(_quatf(model.body_iquat[b]))
        if model.body_gravcomp[b] > 0:
            prim.AddAppliedSchema("PhysxRigidBodyAPI")
            prim.CreateAttribute("physxRigidBody:disableGravity", Sdf.ValueTypeNames.Bool, custom=False).Set(True)
            _mjc(prim, "gravcomp", Sdf.ValueTypeNames.Float, float(model.body_gravcomp[b]))
        parent = int(model.body_parentid[b])
        joints = f"{asset_prim_path(model, b)}/Joints"
        if b == root and model.body_weldid[b] == 0:
            # The articulation's root link, fixed to the world: a fixed-base articulation.
            fixed = UsdPhysics.FixedJoint.Define(stage, f"{joints}/{prim.GetName()}_fixed")
            fixed.CreateBody1Rel().SetTargets([prim.GetPath()])
            fixed.CreateLocalPos0Attr(Gf.Vec3f(*map(float, model.body_pos[b])))
            fixed.CreateLocalRot0Attr(_quatf(model.body_quat[b]))
            fixed.CreateLocalPos1Attr(Gf.Vec3f(0.0))
            fixed.CreateLocalRot1Attr(Gf.Quatf(1.0))
        elif model.body_jntnum[b] == 0 and parent != 0:
            weld = UsdPhysics.FixedJoint.Define(stage, f"{joints}/{prim.GetName()}_weld")
            weld.CreateBody0Rel().SetTargets([body_prim_path(model, parent)])
            weld.CreateBody1Rel().SetTargets([prim.GetPath()])
            weld.CreateLocalPos0Attr(Gf.Vec3f(*map(float, model.body_pos[b])))
            weld.CreateLocalRot0Attr(_quatf(model.body_quat[b]))
            weld.CreateLocalPos1Attr(Gf.Vec3f(0.0))
            weld.CreateLocalRot1Attr(Gf.Quatf(1.0))


def _add_joints(stage: Usd.Stage, model: mujoco.MjModel) -> None:
    actuator_of = {int(model.actuator_trnid[a, 0]): a for a in range(model.nu)
                   if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT}
    for j in range(model.njnt):
        jtype = int(model.jnt_type[j])
        if jtype == _J.mjJNT_FREE:
            continue  # a free body is just a rigid body
        child = int(model.jnt_bodyid[j])
        if jtype not in (_J.mjJNT_HINGE, _J.mjJNT_SLIDE) or model.body_jntnum[child] > 1:
            raise NotImplementedError(f"joint {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j)}: only "
                                      "single hinge or slide joints (and free joints) per body map to USD joints")
        parent = int(model.body_parentid[child])
        path = joint_prim_path(model, j)
        axis = np.asarray(model.jnt_axis[j], dtype=float)
        anchor = np.asarray(model.jnt_pos[j], dtype=float)
        ref = float(model.qpos0[model.jnt_qposadr[j]])
        # The joint frame's USD axis is the principal axis nearest MuJoCo's, rotated onto it exactly.
        k = int(np.argmax(np.abs(axis)))
        frame = _rotation_between(np.eye(3)[k], axis)
        body_rot = quat_to_mat(model.body_quat[child])
        # MuJoCo's body pose holds at q = ref; the parent-side frame is placed where the child's is at q = 0, so
        # the USD joint coordinate (zero where the frames coincide) equals qpos and limits are jnt_range as is.
        if jtype == _J.mjJNT_HINGE:
            joint = UsdPhysics.RevoluteJoint.Define(stage, path)
            rot0 = body_rot @ _rodrigues(axis / np.linalg.norm(axis), -ref) @ frame
            pos0 = model.body_pos[child] + body_rot @ anchor
        else:
            joint = UsdPhysics.PrismaticJoint.Define(stage, path)
            rot0 = body_rot @ frame
            pos0 = model.body_pos[child] + body_rot @ (anchor - ref * axis)
        if parent != 0:
            joint.CreateBody0Rel().SetTargets([body_prim_path(model, parent)])
        joint.CreateBody1Rel().SetTargets([body_prim_path(model, child)])
        joint.CreateLocalPos0Attr(Gf.Vec3f(*map(float, pos0)))
        joint.CreateLocalRot0Attr(_quatf(mat_to_quat(rot0)))
        joint.CreateLocalPos1Attr(Gf.Vec3f(*map(float, anchor)))
        joint.CreateLocalRot1Attr(_quatf(mat_to_quat(frame)))
        joint.CreateAxisAttr("XYZ"[k])
        angular = jtype == _J.mjJNT_HINGE
        unit = 180.0 / math.pi if angular else 1.0
        dof = int(model.jnt_dofadr[j])
        _mjc(joint.GetPrim(), "armature", Sdf.ValueTypeNames.Float, float(model.dof_armature[dof]))
        _mjc(joint.GetPrim(), "damping", Sdf.ValueTypeNames.Float, float(model.dof_damping[dof]))
        _mjc(joint.GetPrim(), "frictionloss", Sdf.ValueTypeNames.Float, float(model.dof_frictionloss[dof]))
        if model.jnt_limited[j]:
            lo, hi = model.jnt_range[j] * unit
            joint.CreateLowerLimitAttr(float(lo))
            joint.CreateUpperLimitAttr(float(hi))
            # The limit's constraint softness as MuJoCo has it; without it Newton derives one from its limit
            # stiffness (e.g. a 1.5 ms time constant on the fingers instead of MuJoCo's 20 ms).
            _mjc(joint.GetPrim(), "solreflimit", Sdf.ValueTypeNames.Float2, Gf.Vec2f(*map(float, model.jnt_solref[j])))
        a = actuator_of.get(j)
        if a is not None:
            drive = UsdPhysics.DriveAPI.Apply(joint.GetPrim(), "angular" if angular else "linear")
            # Position actuators have bias (0, -kp, -kv), velocity actuators (0, 0, -kv); gear is 1 in the cell.
            drive.CreateTypeAttr("force")
            drive.CreateStiffnessAttr(float(-model.actuator_biasprm[a, 1]) / unit)
            drive.CreateDampingAttr(float(-model.actuator_biasprm[a, 2]) / unit)
            if model.jnt_actfrclimited[j]:
                drive.CreateMaxForceAttr(float(model.jnt_actfrcrange[j, 1]))
            elif model.actuator_forcelimited[a]:
                drive.CreateMaxForceAttr(float(model.actuator_forcerange[a, 1]))


# --------------------------------------------------------------------------------------------------------------
# Cameras and lights
# --------------------------------------------------------------------------------------------------------------
def _add_cameras(stage: Usd.Stage, model: mujoco.MjModel, cell: CellCfg) -> None:
    lenses = {c.name: c.lens for c in cell.cameras}
    near, far = model.vis.map.znear * model.stat.extent, model.vis.map.zfar * model.stat.extent
    for c in range(model.ncam):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, c) or f"camera_{c}"
        b = int(model.cam_bodyid[c])
        parent = "/World/Cameras" if b == 0 else body_prim_path(model, b)
        cam = UsdGeom.Camera.Define(stage, f"{parent}/{Tf.MakeValidIdentifier(name)}")
        # MuJoCo and USD cameras both look along -z with +y up: the pose carries over unchanged.
        _set_local_pose(cam.GetPrim(), model.cam_pos[c], model.cam_quat[c])
        lens = lenses.get(name)
        if lens is None:  # a camera the cell does not describe: a centred pinhole with the model's fovy
            f = focal_from_fov(float(model.cam_fovy[c]))
            lens = LensCfg(fx=f, fy=f)
        cam.CreateProjectionAttr(UsdGeom.Tokens.perspective)
        set_pinhole(cam, lens.fx, lens.fy, lens.cx, lens.cy)
        cam.CreateClippingRangeAttr(Gf.Vec2f(float(near), float(far)))
        _add_lens_attributes(cam.GetPrim(), lens)


def set_pinhole(camera: UsdGeom.Camera, fx: float, fy: float, cx: float, cy: float) -> None:
    """Author a pinhole's intrinsics, normalised as in `LensCfg`, as the camera's focal length, apertures and
    aperture offsets (see "Cameras" in the module docstring)."""
    focal = fy * VERTICAL_APERTURE_MM
    horizontal = focal / fx
    camera.CreateFocalLengthAttr(focal)
    camera.CreateVerticalApertureAttr(VERTICAL_APERTURE_MM)
    camera.CreateHorizontalApertureAttr(horizontal)
    # Image u grows right and v grows down; the film's offsets move the window right and up.
    camera.CreateHorizontalApertureOffsetAttr((0.5 - cx) * horizontal)
    camera.CreateVerticalApertureOffsetAttr((cy - 0.5) * VERTICAL_APERTURE_MM)


def _add_lens_attributes(prim: Usd.Prim, lens: LensCfg) -> None:
    prim.CreateAttribute("r2s2r:lens:model", Sdf.ValueTypeNames.Token, custom=True).Set(lens.model)
    for key in ("fx", "fy", "cx", "cy"):
        prim.CreateAttribute(f"r2s2r:lens:{key}", Sdf.ValueTypeNames.Double, custom=True).Set(getattr(lens, key))
    if lens.model != "fisheye":
        return
    for name, k in zip(DISTORTION_NAMES, lens.distortion):
        prim.CreateAttribute(f"r2s2r:lens:{name}", Sdf.ValueTypeNames.Double, custom=True).Set(float(k))
    # A nominal image with square pixels fixes the schema's pixel scale.
    author_lens_distortion(prim, lens, FISHEYE_IMAGE_WIDTH, max(1, round(FISHEYE_IMAGE_WIDTH * lens.fx / lens.fy)))


# Isaac Sim's OmniLensDistortion schemas of OpenCV's lens models: model token, applied API schema, coefficient names.
# A fisheye's coefficients are `LensCfg.distortion`; a pinhole lens has none, so the pinhole model's stay 0.
LENS_DISTORTION_SCHEMAS = {
    "pinhole": ("opencvPinhole", "OmniLensDistortionOpenCvPinholeAPI",
                ("k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2", "s1", "s2", "s3", "s4")),
    "fisheye": ("opencvFisheye", "OmniLensDistortionOpenCvFisheyeAPI", DISTORTION_NAMES),
}


def author_lens_distortion(prim: Usd.Prim, lens: LensCfg, width: int, height: int) -> None:
    """Author a lens on a camera prim as Isaac Sim's OpenCV lens-distortion schema, as Isaac Lab's
    `_author_opencv_distortion` authors it: intrinsics in pixels at `width` x `height` (RTX rescales them to the
    render product). A fisheye is the OpenCV fisheye (equidistant Kannala-Brandt) model; a pinhole lens the OpenCV
    pinhole model with zero distortion, which is how the RTX camera gets a principal-point offset (Omniverse ignores
    aperture offsets). Works with usd-core: applying a schema only edits metadata."""
    model, schema, coeffs = LENS_DISTORTION_SCHEMAS[lens.model]
    prefix = f"omni:lensdistortion:{model}"
    fx, fy, cx, cy = intrinsics_in_pixels(lens.fx, lens.fy, lens.cx, lens.cy, width, height)
    values = {"fx": fx, "fy": fy, "cx": cx, "cy": cy,
              **dict.fromkeys(coeffs, 0.0), **dict(zip(coeffs, lens.distortion if lens.model == "fisheye" else ()))}
    prim.AddAppliedSchema(schema)
    attrs = {"omni:lensdistortion:model": (Sdf.ValueTypeNames.Token, model),
             f"{prefix}:imageSize": (Sdf.ValueTypeNames.Int2, Gf.Vec2i(int(width), int(height))),
             **{f"{prefix}:{name}": (Sdf.ValueTypeNames.Float, float(v)) for name, v in values.items()}}
    for name, (type_name, value) in attrs.items():
        (prim.GetAttribute(name) or prim.CreateAttribute(name, type_name)).Set(value)


def _add_lights(stage: Usd.Stage, model: mujoco.MjModel, cell: CellCfg) -> None:
    cfgs = {li.name: li for li in cell.lights}
    for i in range(model.nlight):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_LIGHT, i) or f"light_{i}"
        cfg = cfgs.get(name)
        # MuJoCo stores colour * intensity as diffuse; the cell keeps them apart.
        colour, intensity = (cfg.colour, cfg.intensity) if cfg else (tuple(model.light_diffuse[i]), 1.0)
        b = int(model.light_bodyid[i])
        path = f"{'/World/Lights' if b == 0 else body_prim_path(model, b)}/{Tf.MakeValidIdentifier(name)}"
        if model.light_type[i] == mujoco.mjtLightType.mjLIGHT_DIRECTIONAL:
            light = UsdLux.DistantLight.Define(stage, path)
            light.CreateIntensityAttr(intensity * DISTANT_PER_UNIT)
        else:
            light = UsdLux.SphereLight.Define(stage, path)
            light.CreateRadiusAttr(SPHERE_LIGHT_RADIUS)
            light.CreateIntensityAttr(intensity * SPHERE_NITS_PER_UNIT)
            if model.light_type[i] == mujoco.mjtLightType.mjLIGHT_SPOT:
                UsdLux.ShapingAPI.Apply(light.GetPrim()).CreateShapingConeAngleAttr(float(model.light_cutoff[i]))
        light.CreateColorAttr(Gf.Vec3f(*map(float, colour)))
        # USD lights shine along their -z; MuJoCo's light pose is in its body's frame, as is the prim's.
        rot = _rotation_between(np.array([0.0, 0.0, -1.0]), np.asarray(model.light_dir[i], dtype=float))
        _set_local_pose(light.GetPrim(), model.light_pos[i], mat_to_quat(rot))


# --------------------------------------------------------------------------------------------------------------
# Pose sync
# --------------------------------------------------------------------------------------------------------------
class PoseSync:
    """Writes MuJoCo body world poses into a stage built by `build_stage`, with attribute handles cached.

    Construct once per (stage, model); call with an `MjData` each rendered frame. Writes go to the layer of the
    stage's edit target at construction, as default values or, with `time_code`, as time samples (to record a
    rollout). The layer's attribute specs are written directly in one change block: about twice as fast as
    `UsdAttribute.Set` and a single change notification per frame.
    """

    def __init__(self, stage: Usd.Stage, model: mujoco.MjModel):
        self.stage, self.model = stage, model
        self.layer = stage.GetEditTarget().GetLayer()
        self._specs: list[tuple[Sdf.AttributeSpec, Sdf.AttributeSpec]] = []
        for b in range(1, model.nbody):
            path = body_prim_path(model, b)
            prim = stage.GetPrimAtPath(path)
            ops = UsdGeom.Xformable(prim).GetOrderedXformOps() if prim else []
            kinds = [(op.GetOpType(), op.GetPrecision()) for op in ops]
            if kinds != [(UsdGeom.XformOp.TypeTranslate, UsdGeom.XformOp.PrecisionDouble),
                         (UsdGeom.XformOp.TypeOrient, UsdGeom.XformOp.PrecisionDouble)]:
                raise ValueError(f"stage prim {path}: expected a body Xform with double translate and orient ops "
                                 "(was the stage built from this model by build_stage?)")
            specs = []
            for op in ops:
                if self.layer.GetAttributeAtPath(op.GetAttr().GetPath()) is None:
                    op.GetAttr().Set(op.GetAttr().Get())  # an opinion in the edit target gives us a spec to write
                specs.append(self.layer.GetAttributeAtPath(op.GetAttr().GetPath()))
            self._specs.append((specs[0], specs[1]))

    def __call__(self, data: mujoco.MjData, time_code: float | Usd.TimeCode | None = None) -> None:
        if isinstance(time_code, Usd.TimeCode):
            time_code = None if time_code.IsDefault() else time_code.GetValue()
        pos, quat = data.xpos[1:].tolist(), data.xquat[1:].tolist()
        with Sdf.ChangeBlock():
            if time_code is None:
                for (translate, orient), p, q in zip(self._specs, pos, quat):
                    translate.default = Gf.Vec3d(*p)
                    orient.default = Gf.Quatd(*q)
            else:
                t, layer = float(time_code), self.layer
                for (translate, orient), p, q in zip(self._specs, pos, quat):
                    layer.SetTimeSample(translate.path, t, Gf.Vec3d(*p))
                    layer.SetTimeSample(orient.path, t, Gf.Quatd(*q))


_SYNC_CACHE: list[PoseSync] = []
_SYNC_CACHE_SIZE = 4


def sync_poses(stage: Usd.Stage, model: mujoco.MjModel, data: mujoco.MjData,
               time_code: float | Usd.TimeCode | None = None) -> None:
    """Write every body's world pose (data.xpos, data.xquat) into its prim; see `PoseSync`.

    The handles for the last few (stage, model) pairs are cached here, which keeps those stages alive.
    """
    for sync in _SYNC_CACHE:
        if sync.stage == stage and sync.model is model:
            break
    else:
        sync = PoseSync(stage, model)
        _SYNC_CACHE.insert(0, sync)
        del _SYNC_CACHE[_SYNC_CACHE_SIZE:]
    sync(data, time_code)
