"""The USD stage against the compiled MuJoCo model it is built from, before and after physics moves the cell."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest
from conftest import moved_cell
from pxr import Usd, UsdGeom, UsdLux, UsdPhysics, UsdShade

try:
    import r2s2r  # noqa: F401
except ImportError:  # not installed into the venv: import from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "source" / "r2s2r"))

from r2s2r.cell import usd  # noqa: E402
from r2s2r.cell.mjcf import build_model  # noqa: E402
from r2s2r.cell.spec import CameraCfg, CellCfg, LensCfg, Pose  # noqa: E402
from r2s2r.geometry import quat_to_mat  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "export_usd.py"
PYTHON = REPO / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)


@pytest.fixture(scope="module")
def cell() -> CellCfg:
    return CellCfg()


@pytest.fixture(scope="module")
def model(cell) -> mujoco.MjModel:
    return build_model(cell)


@pytest.fixture(scope="module")
def stage(model, cell) -> Usd.Stage:
    return usd.build_stage(model, cell)


@pytest.fixture(scope="module")
def moved(model) -> mujoco.MjData:
    """0.6 s of physics from home: belt running, the cube riding it, every arm and finger joint commanded away."""
    cube = (-0.6, 0.0, 0.08 + 0.025, 1, 0, 0, 0)
    data = moved_cell(model, 0.2, cube, 0.3, 300)
    adr, x0 = model.jnt_qposadr[model.body("obj_cube").jntadr[0]], cube[0]
    # The scenario must actually move what the sync tests rely on.
    assert data.qpos[adr] - x0 > 0.08, "the cube did not ride the belt"
    assert abs(data.joint("belt_slide").qvel[0] - 0.2) < 0.02
    home = model.key("home").qpos[model.joint("right_joint1").qposadr[0]]
    assert abs(data.joint("right_joint1").qpos[0] - home) > 0.1, "the arm did not move"
    return data


def world_pose(prim: Usd.Prim, time=Usd.TimeCode.Default()) -> tuple[np.ndarray, np.ndarray]:
    """World rotation (3x3, without scale) and translation of a prim, from USD's row-vector matrix."""
    m = np.array(UsdGeom.Xformable(prim).ComputeLocalToWorldTransform(time))
    rot = m[:3, :3].T
    return rot / np.linalg.norm(rot, axis=0), m[3, :3]


def name(model, obj, i) -> str:
    return mujoco.mj_id2name(model, obj, i)


# --------------------------------------------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------------------------------------------
def test_every_body_maps_to_exactly_one_prim(model, stage):
    paths = [usd.body_prim_path(model, b) for b in range(1, model.nbody)]
    assert len(set(paths)) == model.nbody - 1
    for b, path in enumerate(paths, start=1):
        prim = stage.GetPrimAtPath(path)
        assert prim.IsValid() and prim.IsA(UsdGeom.Xform), path
        assert prim.GetName() == name(model, mujoco.mjtObj.mjOBJ_BODY, b)
    assets = stage.GetPrimAtPath("/World/Assets").GetChildren()
    children = [p.GetPath().pathString for a in assets for p in a.GetChildren() if p.GetName() != "Joints"]
    assert sorted(children) == sorted(paths)
    # One subtree per child of the world body, named after it.
    roots = {usd.body_prim_path(model, b) for b in range(1, model.nbody) if model.body_parentid[b] == 0}
    assert {f"{a.GetPath()}/{a.GetName()}" for a in assets} == roots
    with pytest.raises(ValueError):
        usd.body_prim_path(model, 0)


def test_joints_have_type_limits_in_degrees_and_drive_gains(model, stage):
    kinds = {int(mujoco.mjtJoint.mjJNT_HINGE): UsdPhysics.RevoluteJoint,
             int(mujoco.mjtJoint.mjJNT_SLIDE): UsdPhysics.PrismaticJoint}
    checked = 0
    for j in range(model.njnt):
        jname = name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
        prim = stage.GetPrimAtPath(usd.joint_prim_path(model, j))
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            assert not prim.IsValid(), jname
            assert stage.GetPrimAtPath(usd.body_prim_path(model, model.jnt_bodyid[j])).HasAPI(UsdPhysics.RigidBodyAPI)
            continue
        kind = kinds[int(model.jnt_type[j])]
        joint = kind(prim)
        assert prim.IsA(kind), jname
        assert joint.GetBody1Rel().GetTargets()[0] == usd.body_prim_path(model, model.jnt_bodyid[j])
        parent = model.body_parentid[model.jnt_bodyid[j]]
        assert joint.GetBody0Rel().GetTargets()[0] == usd.body_prim_path(model, parent)
        actuator = model.actuator("belt_drive" if jname == "belt_slide" else jname)
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE:
            # USD stores limits as float: compare against the float32 rounding of the exact value.
            lo, hi = np.degrees(model.jnt_range[j])
            assert joint.GetLowerLimitAttr().Get() == pytest.approx(float(np.float32(lo)), abs=1e-9)
            assert joint.GetUpperLimitAttr().Get() == pytest.approx(float(np.float32(hi)), abs=1e-9)
            drive = UsdPhysics.DriveAPI(prim, "angular")
            # USD angular drives are per degree: kp N*m/rad is kp * pi / 180 N*m/deg.
            kp, kv = actuator.gainprm[0], -actuator.biasprm[2]
            assert drive.GetStiffnessAttr().Get() == pytest.approx(kp * math.pi / 180, rel=1e-6)
            assert drive.GetDampingAttr().Get() == pytest.approx(kv * math.pi / 180, rel=1e-6, abs=1e-12)
            assert drive.GetMaxForceAttr().Get() == pytest.approx(model.jnt_actfrcrange[j, 1], rel=1e-6)
        else:
            # Unlimited: nothing authored, so the schema's fallback (-inf, inf) holds.
            assert not joint.GetLowerLimitAttr().HasAuthoredValue() and not joint.GetUpperLimitAttr().HasAuthoredValue()
            assert (joint.GetLowerLimitAttr().Get(), joint.GetUpperLimitAttr().Get()) == (-math.inf, math.inf)
            drive = UsdPhysics.DriveAPI(prim, "linear")
            assert drive.GetStiffnessAttr().Get() == 0.0
            assert drive.GetDampingAttr().Get() == pytest.approx(actuator.gainprm[0], rel=1e-6)
        checked += 1
    assert checked == 2 * (7 + 20) + 1


def test_rigid_bodies_statics_and_articulation_roots(model, stage):
    for b in range(1, model.nbody):
        prim = stage.GetPrimAtPath(usd.body_prim_path(model, b))
        # Every link of an articulation is a rigid body (its root fixed to the world); the bins are static.
        moving = model.body_weldid[b] != 0 or usd.articulated(model, model.body_rootid[b])
        assert prim.HasAPI(UsdPhysics.RigidBodyAPI) == moving, prim.GetPath()
        if moving:
            mass = UsdPhysics.MassAPI(prim)
            assert mass.GetMassAttr().Get() == pytest.approx(model.body_mass[b], rel=1e-6)
            assert np.allclose(mass.GetDiagonalInertiaAttr().Get(), model.body_inertia[b], rtol=1e-6)
            assert np.allclose(mass.GetCenterOfMassAttr().Get(), model.body_ipos[b], atol=1e-7)
    for root in ("right_base", "left_base", "conveyor"):
        asset = f"/World/Assets/{root}"
        assert stage.GetPrimAtPath(asset).HasAPI(UsdPhysics.ArticulationRootAPI)
        fixed = UsdPhysics.FixedJoint(stage.GetPrimAtPath(f"{asset}/Joints/{root}_fixed"))
        assert not fixed.GetBody0Rel().GetTargets() and fixed.GetBody1Rel().GetTargets() == [f"{asset}/{root}"]
    for side in ("right", "left"):
        weld = UsdPhysics.FixedJoint(stage.GetPrimAtPath(f"/World/Assets/{side}_base/Joints/{side}_palm_weld"))
        assert weld.GetBody0Rel().GetTargets() == [f"/World/Assets/{side}_base/{side}_link7"]
    roots = [p for p in stage.Traverse() if p.HasAPI(UsdPhysics.ArticulationRootAPI)]
    assert len(roots) == 3


def test_collision_geoms_and_materials(model, stage):
    for gid in range(model.ngeom):
        b = model.geom_bodyid[gid]
        gname = name(model, mujoco.mjtObj.mjOBJ_GEOM, gid) or f"geom_{gid}"
        parent = "/World/Static" if b == 0 else usd.body_prim_path(model, b)
        prim = stage.GetPrimAtPath(f"{parent}/{gname}")
        assert prim.IsValid(), gname
        collides = bool(model.geom_contype[gid] or model.geom_conaffinity[gid])
        assert prim.HasAPI(UsdPhysics.CollisionAPI) == collides, gname
        binding = UsdShade.MaterialBindingAPI(prim)
        assert np.allclose(UsdGeom.Gprim(prim).GetDisplayColorAttr().Get()[0], model.geom_rgba[gid][:3], atol=1e-6)
        render = binding.GetDirectBinding().GetMaterial()
        shader = UsdShade.Shader(stage.GetPrimAtPath(render.GetPath().AppendChild("PreviewSurface")))
        assert np.allclose(shader.GetInput("diffuseColor").Get(), model.geom_rgba[gid][:3], atol=1e-6)
        physics = binding.GetDirectBinding("physics").GetMaterial()
        if collides:
            api = UsdPhysics.MaterialAPI(physics.GetPrim())
            assert api.GetStaticFrictionAttr().Get() == pytest.approx(model.geom_friction[gid][0], rel=1e-6)
            assert api.GetDynamicFrictionAttr().Get() == pytest.approx(model.geom_friction[gid][0], rel=1e-6)
        else:
            assert not physics, gname


def test_geom_shapes_follow_mujoco_sizes(model, stage):
    def geom(gname):
        gid = model.geom(gname).id
        return stage.GetPrimAtPath(f"{usd.body_prim_path(model, model.geom_bodyid[gid])}/{gname}"), model.geom_size[gid]

    prim, size = geom("obj_capsule")
    cap = UsdGeom.Capsule(prim)
    assert cap.GetRadiusAttr().Get() == pytest.approx(size[0])
    assert cap.GetHeightAttr().Get() == pytest.approx(2 * size[1])  # USD's capsule height excludes the caps
    assert cap.GetAxisAttr().Get() == "Z"
    prim, size = geom("obj_cylinder")
    cyl = UsdGeom.Cylinder(prim)
    assert cyl.GetRadiusAttr().Get() == pytest.approx(size[0])
    assert cyl.GetHeightAttr().Get() == pytest.approx(2 * size[1])
    prim, size = geom("obj_ellipsoid")
    # A mesh with every vertex on the ellipsoid, collided as its convex hull, with no scale op.
    points = np.array(UsdGeom.Mesh(prim).GetPointsAttr().Get(), dtype=float)
    assert np.allclose(np.sum((points / size) ** 2, axis=1), 1.0, atol=1e-5)
    assert np.allclose(points.max(axis=0), size, rtol=1e-6) and np.allclose(points.min(axis=0), -size, rtol=1e-6)
    assert UsdPhysics.MeshCollisionAPI(prim).GetApproximationAttr().Get() == UsdPhysics.Tokens.convexHull
    assert len(UsdGeom.Xformable(prim).GetOrderedXformOps()) == 2
    prim, size = geom("obj_cuboid")
    assert UsdGeom.Cube(prim).GetSizeAttr().Get() == 2.0
    assert np.allclose(UsdGeom.Xformable(prim).GetOrderedXformOps()[2].Get(), size)
    floor = UsdGeom.Plane(stage.GetPrimAtPath("/World/Static/floor"))
    assert floor.GetWidthAttr().Get() == pytest.approx(2 * model.geom("floor").size[0])


def test_stage_follows_the_model_not_a_second_description(cell):
    wide = cell.replace(belt=cell.belt.__class__(width=0.4))
    model = build_model(wide)
    stage = usd.build_stage(model, wide)
    ops = UsdGeom.Xformable(stage.GetPrimAtPath("/World/Assets/conveyor/belt/belt_surface")).GetOrderedXformOps()
    assert ops[2].Get()[1] == pytest.approx(0.2)


# --------------------------------------------------------------------------------------------------------------
# Pose sync
# --------------------------------------------------------------------------------------------------------------
def test_sync_matches_mujoco_body_poses(model, stage, moved):
    usd.sync_poses(stage, model, moved)
    for b in range(1, model.nbody):
        prim = stage.GetPrimAtPath(usd.body_prim_path(model, b))
        m = UsdGeom.Xformable(prim).ComputeLocalToWorldTransform(Usd.TimeCode.Default())
        assert np.abs(np.array(m.ExtractTranslation()) - moved.xpos[b]).max() < 1e-6, prim.GetPath()
        q = m.ExtractRotationQuat()
        q = np.array([q.GetReal(), *q.GetImaginary()])
        assert min(np.abs(q - moved.xquat[b]).max(), np.abs(q + moved.xquat[b]).max()) < 1e-6, prim.GetPath()


def test_sync_matches_mujoco_geom_and_camera_poses(model, stage, moved):
    usd.sync_poses(stage, model, moved)
    kinds = set()
    for gid in range(model.ngeom):
        b = model.geom_bodyid[gid]
        gname = name(model, mujoco.mjtObj.mjOBJ_GEOM, gid) or f"geom_{gid}"
        prim = stage.GetPrimAtPath(f"{'/World/Static' if b == 0 else usd.body_prim_path(model, b)}/{gname}")
        rot, pos = world_pose(prim)
        assert np.abs(pos - moved.geom_xpos[gid]).max() < 1e-6, gname
        assert np.abs(rot - moved.geom_xmat[gid].reshape(3, 3)).max() < 1e-6, gname
        kinds.add(prim.GetTypeName())
        if "finger" in name(model, mujoco.mjtObj.mjOBJ_BODY, b):
            kinds.add("finger")
    assert {"Capsule", "Cube", "Sphere", "Cylinder", "Plane", "finger"} <= kinds
    for c in range(model.ncam):
        cname = name(model, mujoco.mjtObj.mjOBJ_CAMERA, c)
        b = model.cam_bodyid[c]
        prim = stage.GetPrimAtPath(f"{'/World/Cameras' if b == 0 else usd.body_prim_path(model, b)}/{cname}")
        assert prim.IsA(UsdGeom.Camera), cname
        rot, pos = world_pose(prim)
        assert np.abs(pos - moved.cam_xpos[c]).max() < 1e-6, cname
        assert np.abs(rot - moved.cam_xmat[c].reshape(3, 3)).max() < 1e-6, cname


def check_joint_frames(model: mujoco.MjModel, stage: Usd.Stage, data: mujoco.MjData) -> int:
    """Both joint frames meet at MuJoCo's anchor, along MuJoCo's axis, and differ by exactly qpos (also for a
    non-zero ref, so USD limits equal jnt_range). Returns the number of joints checked."""

    def frame(joint, side):
        if side == 0:
            rel, pos_attr, rot_attr = joint.GetBody0Rel(), joint.GetLocalPos0Attr(), joint.GetLocalRot0Attr()
        else:
            rel, pos_attr, rot_attr = joint.GetBody1Rel(), joint.GetLocalPos1Attr(), joint.GetLocalRot1Attr()
        targets = rel.GetTargets()
        rot, pos = world_pose(stage.GetPrimAtPath(targets[0])) if targets else (np.eye(3), np.zeros(3))
        q = rot_attr.Get()
        return rot @ quat_to_mat([q.GetReal(), *q.GetImaginary()]), pos + rot @ np.array(pos_attr.Get())

    checked = 0
    for j in range(model.njnt):
        jtype = model.jnt_type[j]
        if jtype == mujoco.mjtJoint.mjJNT_FREE:
            continue
        prim = stage.GetPrimAtPath(usd.joint_prim_path(model, j))
        k = "XYZ".index(prim.GetAttribute("physics:axis").Get())
        (r0, p0), (r1, p1) = frame(UsdPhysics.Joint(prim), 0), frame(UsdPhysics.Joint(prim), 1)
        coord = data.qpos[model.jnt_qposadr[j]]
        where = prim.GetPath()
        # float32 local frames in USD: 1e-6 m / rad is well above their rounding at these lever arms.
        # MuJoCo's anchor is the child's at q = ref (for a slide, ref along the axis from where it is at q = 0).
        ref = model.qpos0[model.jnt_qposadr[j]] if jtype == mujoco.mjtJoint.mjJNT_SLIDE else 0.0
        assert np.abs(p0 - (data.xanchor[j] - ref * data.xaxis[j])).max() < 1e-6, where
        assert np.abs(r1[:, k] - data.xaxis[j]).max() < 1e-6, where
        if jtype == mujoco.mjtJoint.mjJNT_HINGE:
            assert np.abs(r0.T @ r1 - axis_rotation(np.eye(3)[k], coord)).max() < 1e-6, where
            assert np.abs(p1 - p0).max() < 1e-6, where
        else:
            assert np.abs(r0.T @ r1 - np.eye(3)).max() < 1e-6, where
            assert np.abs(p1 - p0 - r0[:, k] * coord).max() < 1e-6, where
        checked += 1
    return checked


def axis_rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    w = np.cos(angle / 2)
    return quat_to_mat([w, *(np.sin(angle / 2) * np.asarray(axis))])


def test_joint_frames_follow_mujoco_joints(model, stage, moved):
    usd.sync_poses(stage, model, moved)
    assert check_joint_frames(model, stage, moved) == 2 * (7 + 20) + 1


OBLIQUE = """
<mujoco>
  <compiler angle="radian"/>
  <worldbody>
    <body name="a" pos="0.1 0.2 0.3" euler="0.3 0.2 0.1">
      <joint name="hinge" type="hinge" axis="0.3 -0.5 0.8" pos="0.01 0.02 0.03" ref="0.4" range="-1 1"/>
      <geom type="box" size="0.1 0.05 0.02"/>
      <body name="b" pos="0.2 0 0.05" euler="0.5 -0.4 1.2">
        <joint name="slide" type="slide" axis="1 1 0.2" pos="0 0.03 0" ref="0.05" range="-0.1 0.2"/>
        <geom type="capsule" size="0.02 0.05"/>
        <body name="c" pos="0 0 0.1">
          <joint name="flip" type="hinge" axis="0 0 -1" range="-2 2"/>
          <geom type="sphere" size="0.02"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><position name="hinge" joint="hinge" kp="10" kv="2"/></actuator>
</mujoco>
"""


def test_oblique_axes_reference_positions_and_a_world_parent(cell):
    """Hinge and slide axes off the principal directions, non-zero refs and a joint on a world child."""
    model = mujoco.MjModel.from_xml_string(OBLIQUE)
    stage = usd.build_stage(model, cell)
    data = mujoco.MjData(model)
    for qpos in ([0.0, 0.0, 0.0], [0.7, -0.08, 1.9], [-0.9, 0.15, -1.3]):
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        usd.sync_poses(stage, model, data)
        assert check_joint_frames(model, stage, data) == 3
    hinge = UsdPhysics.RevoluteJoint(stage.GetPrimAtPath(usd.joint_prim_path(model, model.joint("hinge").id)))
    assert not hinge.GetBody0Rel().GetTargets()  # parent is the world
    assert hinge.GetLowerLimitAttr().Get() == pytest.approx(math.degrees(-1), rel=1e-6)
    assert UsdPhysics.DriveAPI(hinge.GetPrim(), "angular").GetStiffnessAttr().Get() == pytest.approx(10 * math.pi / 180)
    assert UsdPhysics.PrismaticJoint(stage.GetPrimAtPath(usd.joint_prim_path(model, model.joint("slide").id))).GetUpperLimitAttr().Get() \
        == pytest.approx(0.2, rel=1e-6)


def test_sync_writes_to_the_edit_target_layer(model, cell, moved):
    stage = usd.build_stage(model, cell)
    root_before = stage.GetRootLayer().ExportToString()
    stage.SetEditTarget(stage.GetSessionLayer())  # as a GUI session would, leaving the authored stage alone
    usd.PoseSync(stage, model)(moved)
    assert stage.GetRootLayer().ExportToString() == root_before
    b = model.body("obj_cube").id
    _, pos = world_pose(stage.GetPrimAtPath(usd.body_prim_path(model, b)))
    assert np.abs(pos - moved.xpos[b]).max() < 1e-6


def test_time_samples_record_a_rollout(model, cell):
    stage = usd.build_stage(model, cell)
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    data.actuator("belt_drive").ctrl = 0.2
    poses = []
    for frame in range(4):
        for _ in range(10):
            mujoco.mj_step(model, data)
        mujoco.mj_kinematics(model, data)
        usd.sync_poses(stage, model, data, frame)
        poses.append(data.xpos.copy())
    belt = stage.GetPrimAtPath("/World/Assets/conveyor/belt")
    translate = UsdGeom.Xformable(belt).GetOrderedXformOps()[0]
    assert translate.GetAttr().GetTimeSamples() == [0.0, 1.0, 2.0, 3.0]
    for frame, xpos in enumerate(poses):
        _, pos = world_pose(belt, Usd.TimeCode(frame))
        assert np.abs(pos - xpos[model.body("belt").id]).max() < 1e-6
    assert poses[3][model.body("belt").id][0] > poses[0][model.body("belt").id][0]


# --------------------------------------------------------------------------------------------------------------
# Stage metadata, cameras, lights, files
# --------------------------------------------------------------------------------------------------------------
def test_metadata_and_written_file_reopens(model, cell, tmp_path):
    out = tmp_path / "cell.usda"
    stage = usd.build_stage(model, cell, str(out))
    assert sorted(os.listdir(tmp_path)) == ["cell.usda"]  # no temporary file left behind
    for s in (stage, Usd.Stage.Open(str(out))):
        assert UsdGeom.GetStageMetersPerUnit(s) == 1.0
        assert UsdGeom.GetStageUpAxis(s) == UsdGeom.Tokens.z
        assert UsdPhysics.GetStageKilogramsPerUnit(s) == 1.0
        assert s.GetDefaultPrim().GetPath() == "/World"
        assert s.GetRootLayer().customLayerData["r2s2r"]["generator"] == "r2s2r.cell.usd"
    assert len(list(Usd.Stage.Open(str(out)).Traverse())) == len(list(stage.Traverse()))
    scene = UsdPhysics.Scene(stage.GetPrimAtPath("/World/PhysicsScene"))
    assert scene.GetGravityMagnitudeAttr().Get() == pytest.approx(9.81)
    assert tuple(scene.GetGravityDirectionAttr().Get()) == (0, 0, -1)


def test_cameras_carry_the_cell_lenses(model, cell, stage):
    for cam_cfg in cell.cameras:
        lens = cam_cfg.lens
        parent = "/World/Cameras" if cam_cfg.mount == "world" else f"/World/Assets/{cam_cfg.mount.split('_')[0]}_base/{cam_cfg.mount.split('_')[0]}_palm"
        prim = stage.GetPrimAtPath(f"{parent}/{cam_cfg.name}")
        cam = UsdGeom.Camera(prim)
        focal = cam.GetFocalLengthAttr().Get()
        assert focal / cam.GetVerticalApertureAttr().Get() == pytest.approx(lens.fy, rel=1e-6)
        assert focal / cam.GetHorizontalApertureAttr().Get() == pytest.approx(lens.fx, rel=1e-6)
        assert prim.GetAttribute("r2s2r:lens:model").Get() == lens.model
        if lens.model == "fisheye":
            ks = [prim.GetAttribute(f"r2s2r:lens:k{i}").Get() for i in range(1, 5)]
            assert ks == pytest.approx(list(lens.distortion))
            # usd-core does not know Isaac Sim's schema, so read the authored list rather than GetAppliedSchemas.
            assert "OmniLensDistortionOpenCvFisheyeAPI" in prim.GetMetadata("apiSchemas").ApplyOperations([])
            w, _ = prim.GetAttribute("omni:lensdistortion:opencvFisheye:imageSize").Get()
            assert prim.GetAttribute("omni:lensdistortion:opencvFisheye:fx").Get() == pytest.approx(lens.fx * w)
    assert any(c.lens.model == "fisheye" for c in cell.cameras)


def test_camera_projection_matches_the_lens(cell):
    """USD's own frustum puts rays where the LensCfg's pinhole intrinsics (normalised image coords) put them."""
    lens = LensCfg(fx=0.7, fy=0.9, cx=0.4, cy=0.6)
    odd = cell.replace(cameras=(CameraCfg("probe", "world", Pose((0.1, 0.2, 1.0)), lens),))
    stage = usd.build_stage(build_model(odd), odd)
    proj = np.array(UsdGeom.Camera(stage.GetPrimAtPath("/World/Cameras/probe")).GetCamera().frustum
                    .ComputeProjectionMatrix())
    for x, y in ((0.0, 0.0), (0.1, 0.0), (0.0, 0.1), (-0.2, 0.15)):
        clip = np.array([x, y, -1.0, 1.0]) @ proj  # camera looks along -z, +y up; USD matrices act on rows
        u, v = (clip[0] / clip[3] + 1) / 2, (1 - clip[1] / clip[3]) / 2
        assert (u, v) == pytest.approx((lens.cx + lens.fx * x, lens.cy - lens.fy * y), abs=1e-6)


def test_lights_point_along_mujoco_directions(model, cell, stage):
    for i, cfg in enumerate(cell.lights):
        prim = stage.GetPrimAtPath(f"/World/Lights/{cfg.name}")
        assert prim.HasAPI(UsdLux.LightAPI)
        rot, pos = world_pose(prim)
        lid = model.light(cfg.name).id
        assert np.allclose(pos, model.light_pos[lid])
        assert np.allclose(-rot[:, 2], model.light_dir[lid], atol=1e-9)
        assert UsdLux.LightAPI(prim).GetIntensityAttr().Get() == pytest.approx(cfg.intensity * usd.SPHERE_NITS_PER_UNIT)
        assert tuple(UsdLux.LightAPI(prim).GetColorAttr().Get()) == pytest.approx(cfg.colour)


# --------------------------------------------------------------------------------------------------------------
# Script
# --------------------------------------------------------------------------------------------------------------
def test_script_writes_an_animated_stage(tmp_path):
    out = tmp_path / "anim.usda"
    run = subprocess.run([str(PYTHON), str(SCRIPT), "--output", str(out), "--animate", "0.5"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert str(out) in run.stdout
    stage = Usd.Stage.Open(str(out))
    assert stage.GetTimeCodesPerSecond() == 30 and stage.GetEndTimeCode() == 15
    cube = stage.GetPrimAtPath("/World/Assets/obj_cube/obj_cube")
    translate = UsdGeom.Xformable(cube).GetOrderedXformOps()[0].GetAttr()
    assert translate.GetTimeSamples() == [float(f) for f in range(16)]
    start, end = translate.Get(0), translate.Get(15)
    assert start[0] == pytest.approx(-0.6, abs=1e-3)
    assert end[0] - start[0] == pytest.approx(0.2 * 0.5, abs=0.02)  # carried by the belt at 0.2 m/s


def test_script_bad_output_path_exits_2_and_names_it(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    bad = blocker / "cell.usda"
    run = subprocess.run([str(PYTHON), str(SCRIPT), "--output", str(bad)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert str(bad) in run.stderr
    assert "Traceback" not in run.stderr


def test_script_exports_the_stage_of_a_world_file(tmp_path):
    from r2s2r.cell.world import load_world

    out = tmp_path / "grounded.usda"
    run = subprocess.run([str(PYTHON), str(SCRIPT), "--world", "grounded", "--output", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    grounded, ungrounded = load_world("grounded").cell, load_world("ungrounded").cell
    cam = {c.name: c for c in grounded.cameras}["head_left"]
    other = {c.name: c for c in ungrounded.cameras}["head_left"]
    # The calibrated head camera differs between the world files, so the stage tells them apart.
    assert cam.lens.fy != other.lens.fy and tuple(cam.pose.pos) != tuple(other.pose.pos)
    model = build_model(grounded)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)  # the stage holds the reference configuration, qpos0
    stage = Usd.Stage.Open(str(out))
    prim = next(p for p in stage.Traverse() if p.IsA(UsdGeom.Camera) and p.GetName() == "head_left")
    _, pos = world_pose(prim)
    assert np.allclose(pos, data.camera("head_left").xpos, atol=1e-6)
    camera = UsdGeom.Camera(prim)
    assert camera.GetFocalLengthAttr().Get() / camera.GetVerticalApertureAttr().Get() == pytest.approx(cam.lens.fy,
                                                                                                      rel=1e-6)


def test_script_bad_world_file_exits_2_with_the_message(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nkind: grounded\n")
    run = subprocess.run([str(PYTHON), str(SCRIPT), "--world", str(bad), "--output", str(tmp_path / "x.usda")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert str(bad) in run.stderr and "missing field 'cell'" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "x.usda").exists()


# --------------------------------------------------------------------------------------------------------------
# What the Omniverse stack checks: usd-core's validators, the UsdPhysics parser, Newton's importer
# --------------------------------------------------------------------------------------------------------------
WORLDS = sorted(p.stem for p in (REPO / "configs" / "world").glob("*.yaml"))
ARTICULATIONS = {"/World/Assets/right_base": 27, "/World/Assets/left_base": 27, "/World/Assets/conveyor": 1}


@pytest.fixture(scope="module")
def exported(model, cell, tmp_path_factory) -> str:
    return usd.write_stage(usd.build_stage(model, cell), tmp_path_factory.mktemp("usd") / "cell.usda")


@pytest.mark.parametrize("world", WORLDS)
def test_validators_report_nothing_for_every_world(world, tmp_path):
    from pxr import UsdValidation

    from r2s2r.cell.world import load_world

    cell = load_world(world).cell
    path = usd.write_stage(usd.build_stage(build_model(cell), cell), tmp_path / f"{world}.usda")
    registry = UsdValidation.ValidationRegistry()
    validators = registry.GetOrLoadAllValidators()
    assert any(str(v.GetMetadata().name).startswith("usdPhysicsValidators:") for v in validators)
    errors = UsdValidation.ValidationContext(validators).Validate(Usd.Stage.Open(path))
    assert [f"{e.GetName()}: {e.GetMessage()}" for e in errors] == []


def test_physics_parser_finds_the_articulations(model, exported):
    parsed = UsdPhysics.LoadUsdPhysicsFromRange(Usd.Stage.Open(exported), ["/"])
    paths, descs = parsed[UsdPhysics.ObjectType.Articulation]
    found = {str(p): d for p, d in zip(paths, descs)}
    assert sorted(found) == sorted(ARTICULATIONS)
    for path, d in found.items():
        joints = [str(j) for j in d.articulatedJoints]
        moving = [j for j in joints if not j.endswith(("_fixed", "_weld"))]
        assert len(moving) == ARTICULATIONS[path], path
        assert all(j.startswith(f"{path}/Joints/") for j in joints)
        assert [str(r) for r in d.rootPrims] == [f"{path}/Joints/{path.rsplit('/', 1)[1]}_fixed"]
    assert len(parsed[UsdPhysics.ObjectType.MeshShape][0]) == 1  # the ellipsoid


@pytest.fixture(scope="module")
def newton_model(exported):
    newton = pytest.importorskip("newton", reason="newton (scripts/setup.sh installs it) does not import")
    pytest.importorskip("newton_usd_schemas", reason="Newton's USD importer needs newton-usd-schemas")
    import warp as wp

    wp.config.quiet = True
    builder = newton.ModelBuilder()
    newton.solvers.SolverMuJoCo.register_custom_attributes(builder)
    # The schema resolvers Isaac Lab's Newton manager imports with for the MuJoCo Warp solver, in its order.
    usd_schemas = newton.usd
    builder.add_usd(exported, schema_resolvers=[usd_schemas.SchemaResolverNewton(), usd_schemas.SchemaResolverPhysx(),
                                                usd_schemas.SchemaResolverMjc()])
    return newton, builder.finalize(device="cpu")


def _newton_joint_index(nm) -> dict[str, int]:
    """Newton joint index by name: a joint prim's name, or for the free joints Newton adds, its body's name."""
    child = nm.joint_child.numpy()
    return {(label if "/" in label else nm.body_label[child[i]]).rsplit("/", 1)[1]: i
            for i, label in enumerate(nm.joint_label)}


def test_newton_imports_joints_axes_and_limits_as_mujoco(model, newton_model):
    newton, nm = newton_model
    # Each free object is a one-body articulation of its own (Newton gives it a free joint).
    free = sum(model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE for j in range(model.njnt))
    assert nm.articulation_count == len(ARTICULATIONS) + free
    index = _newton_joint_index(nm)
    jtype, axis = nm.joint_type.numpy(), nm.joint_axis.numpy()
    qd_start, lower, upper = nm.joint_qd_start.numpy(), nm.joint_limit_lower.numpy(), nm.joint_limit_upper.numpy()
    kinds = {int(mujoco.mjtJoint.mjJNT_HINGE): newton.JointType.REVOLUTE,
             int(mujoco.mjtJoint.mjJNT_SLIDE): newton.JointType.PRISMATIC,
             int(mujoco.mjtJoint.mjJNT_FREE): newton.JointType.FREE}
    for j in range(model.njnt):
        jname = name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
        # The cell's free joints are named after their bodies.
        i = index[jname]
        assert jtype[i] == kinds[int(model.jnt_type[j])], jname
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            continue
        # Newton's axis is in the joint's child frame; rotated into the child body it is MuJoCo's jnt_axis.
        x, y, z, w = nm.joint_X_c.numpy()[i][3:]
        in_body = quat_to_mat(np.array([w, x, y, z])) @ axis[qd_start[i]]
        assert np.allclose(in_body, model.jnt_axis[j] / np.linalg.norm(model.jnt_axis[j]), atol=1e-6), jname
        if model.jnt_limited[j]:
            assert np.allclose([lower[qd_start[i]], upper[qd_start[i]]], model.jnt_range[j], atol=1e-5), jname
    assert nm.mujoco.gravcomp.numpy()[nm.body_label.index("/World/Assets/right_base/right_link1")] == 1.0


def test_newton_imports_contact_and_limit_parameters_as_mujoco(model, newton_model):
    """Every collision geom's friction (sliding, torsional, rolling), contact dimensionality and detection
    distances, and every limited joint's limit softness reach Newton as MuJoCo C has them, not Newton's defaults
    (condim 3, torsional 0.005, rolling 1e-4, a 1 cm gap, a limit time constant from its own stiffness)."""
    _, nm = newton_model
    shape = {label: i for i, label in enumerate(nm.shape_label)}
    mu, torsional, rolling = (nm.shape_material_mu.numpy(), nm.shape_material_mu_torsional.numpy(),
                              nm.shape_material_mu_rolling.numpy())
    condim, margin, gap = nm.mujoco.condim.numpy(), nm.shape_margin.numpy(), nm.shape_gap.numpy()
    checked = set()
    for gid in range(model.ngeom):
        if not (model.geom_contype[gid] or model.geom_conaffinity[gid]):
            continue
        i = shape[usd.geom_prim_path(model, gid)]
        gname = usd.geom_prim_path(model, gid)
        assert np.allclose([mu[i], torsional[i], rolling[i]], model.geom_friction[gid], rtol=1e-6), gname
        assert (condim[i], margin[i], gap[i]) == (model.geom_condim[gid], model.geom_margin[gid], model.geom_gap[gid]), gname
        checked.add(int(model.geom_condim[gid]))
    assert checked == {3, 4}  # the objects and fingers carry torsional friction, the rest does not
    index, qd_start = _newton_joint_index(nm), nm.joint_qd_start.numpy()
    solreflimit = nm.mujoco.solreflimit.numpy()
    for j in np.flatnonzero(model.jnt_limited):
        jname = name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
        assert np.allclose(solreflimit[qd_start[index[jname]]], model.jnt_solref[j], rtol=1e-6), jname


# Measured over 0.5 s (250 steps of 2 ms) with five arm joints stepped by 0.2 rad: every arm joint of both arms
# stays within 2.2e-6 rad of MuJoCo C. The stage carries the same gains, damping, armature, friction loss,
# gravity compensation and timestep, and Newton hands them to the same MuJoCo C solver; what remains is
# Newton's float32 state, the gains' round trip through per-degree USD units, and the masses and inertias
# re-derived from the stage's float attributes. 1e-4 rad leaves a margin of about 45x.
ROLLOUT_TOL = 1e-4  # rad
ROLLOUT_STEP = {"right_joint1": 0.2, "right_joint2": 0.2, "right_joint4": 0.2, "left_joint2": 0.2, "left_joint6": 0.2}


def test_newton_rollout_tracks_mujoco_under_the_same_targets(model, exported):
    newton = pytest.importorskip("newton", reason="newton (scripts/setup.sh installs it) does not import")
    pytest.importorskip("newton_usd_schemas", reason="Newton's USD importer needs newton-usd-schemas")
    import warp as wp

    wp.config.quiet = True
    builder = newton.ModelBuilder()
    newton.solvers.SolverMuJoCo.register_custom_attributes(builder)
    # The mjc: resolver reads the joints' armature, damping and friction loss. The MuJoCo model keeps arm geoms
    # from touching each other through contype/conaffinity bits (arm geoms 4/3), which the stage does not
    # express, so the articulations are imported without self-collisions.
    builder.add_usd(exported, enable_self_collisions=False,
                    schema_resolvers=[newton.usd.SchemaResolverMjc(), newton.usd.SchemaResolverNewton()])
    nm = builder.finalize(device="cpu")
    try:
        solver = newton.solvers.SolverMuJoCo(nm, use_mujoco_cpu=True)
    except Exception as e:  # pragma: no cover - depends on the installed mujoco / newton pair
        pytest.skip(f"Newton's MuJoCo solver does not run on the CPU here: {e}")
    index, qs = _newton_joint_index(nm), nm.joint_q_start.numpy()

    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    state, nxt, control = nm.state(), nm.state(), nm.control()
    q, target = state.joint_q.numpy(), control.joint_target_q.numpy()
    for j in range(model.njnt):  # the same initial state: MuJoCo's home keyframe
        i, adr = qs[index[name(model, mujoco.mjtObj.mjOBJ_JOINT, j)]], model.jnt_qposadr[j]
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:  # MuJoCo quaternions are wxyz, Newton's xyzw
            p = data.qpos[adr:adr + 7]
            q[i:i + 7] = (*p[:3], *p[4:], p[3])
        else:
            q[i] = data.qpos[adr]
    for a in range(model.nu):  # position actuators only; the belt is a velocity drive and stays at rest
        if model.actuator_biasprm[a][1] != 0:
            jname = name(model, mujoco.mjtObj.mjOBJ_JOINT, model.actuator_trnid[a][0])
            data.ctrl[a] += ROLLOUT_STEP.get(jname, 0.0)
            target[qs[index[jname]]] = data.ctrl[a]
    state.joint_q.assign(q)
    control.joint_target_q.assign(target)
    newton.eval_fk(nm, state.joint_q, state.joint_qd, state)

    arm = [f"{side}_joint{k}" for side in ("right", "left") for k in range(1, 8)]
    cols = [qs[index[j]] for j in arm]
    worst = np.zeros(len(arm))
    dt = float(model.opt.timestep)
    for _ in range(round(0.5 / dt)):
        mujoco.mj_step(model, data)
        solver.step(state, nxt, control, None, dt)
        state, nxt = nxt, state
        mj = np.array([data.joint(j).qpos[0] for j in arm])
        worst = np.maximum(worst, np.abs(state.joint_q.numpy()[cols] - mj))
    for jname, step in ROLLOUT_STEP.items():  # the targets were reached, so the comparison covers real motion
        home = model.key("home").qpos[model.joint(jname).qposadr[0]]
        assert data.joint(jname).qpos[0] - home == pytest.approx(step, abs=0.01), jname
    assert worst.max() < ROLLOUT_TOL, dict(zip(arm, worst))
