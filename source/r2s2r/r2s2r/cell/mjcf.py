"""Builds the MuJoCo model of the cell from a `CellCfg` with `mujoco.MjSpec`.

Names are stable and documented in the README (the USD stage and the task use them):
`{side}_link{1..7}`, `{side}_palm`, `{side}_finger{f}_link{k}` bodies; joints and their position actuators
`{side}_joint{i}`, `{side}_finger{f}_joint{k}`; sites `{side}_flange`, `{side}_grasp`; `belt` (joint
`belt_slide`, actuator `belt_drive`); objects `obj_{name}` (free joint `obj_{name}`); static bins `bin_{colour}`.

Collision groups: static scenery collides with objects and robots; objects collide with everything; robot
geoms do not collide with each other (adjacent links overlap by construction, as in the vendors' models).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from r2s2r.cell import robots
from r2s2r.cell.spec import BOARD_CARD_DEPTH, ArmCfg, BinCfg, BoardCfg, CellCfg, ObjectCfg
from r2s2r.geometry import mat_to_quat, rpy_to_mat, rpy_to_quat

STATIC, OBJECT, ROBOT = 1, 2, 4
SIDES = ("right", "left")
FINGERS = 5
# Object parking spots are behind the robot, out of every camera's view, so unused objects rest there.
PARKING_Y = -1.4


def arm_joint_names(side: str) -> list[str]:
    return [f"{side}_joint{i}" for i in range(1, 8)]


def hand_joint_names(side: str) -> list[str]:
    return [f"{side}_finger{f}_joint{k}" for f in range(1, FINGERS + 1) for k in range(1, 5)]


def object_body_name(obj: ObjectCfg) -> str:
    return f"obj_{obj.name}"


def parking_pos(index: int, obj: ObjectCfg) -> np.ndarray:
    return np.array([-0.9 + 0.15 * index, PARKING_Y, obj.half_height + 0.001])


# Palm-frame reflection that turns the right hand into the left one.
_MIRROR = np.diag([1.0, -1.0, 1.0])


def _mirror_link(xyz: np.ndarray, rot: np.ndarray, axis: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # A reflection S maps a rotation R to S R S and an axis a to -S a (axes are pseudovectors), so joint angles
    # keep their meaning: positive is still flexion on the mirrored hand.
    return _MIRROR @ xyz, _MIRROR @ rot @ _MIRROR, -(_MIRROR @ axis)


def _mirror_inertial(inertial: robots.Inertial) -> robots.Inertial:
    return robots.Inertial(inertial.mass, _MIRROR @ inertial.com, _MIRROR @ inertial.inertia @ _MIRROR)


def _set_inertial(body, inertial: robots.Inertial) -> None:
    body.mass = inertial.mass
    body.ipos = inertial.com
    i = inertial.inertia
    body.fullinertia = [i[0, 0], i[1, 1], i[2, 2], i[0, 1], i[0, 2], i[1, 2]]
    body.explicitinertial = True


def _robot_geom(body, **kw):
    return body.add_geom(contype=ROBOT, conaffinity=STATIC | OBJECT, group=1, **kw)


def _capsule(body, a: np.ndarray, b: np.ndarray, radius: float, rgba) -> None:
    if np.linalg.norm(b - a) < 1e-6:
        _robot_geom(body, type=mujoco.mjtGeom.mjGEOM_SPHERE, pos=a, size=[radius, 0, 0], rgba=rgba)
    else:
        _robot_geom(body, type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=np.r_[a, b], size=[radius, 0, 0], rgba=rgba)


ARM_RGBA = (0.88, 0.88, 0.9, 1.0)
RING_RGBA = (0.35, 0.37, 0.4, 1.0)
HAND_RGBA = (0.2, 0.2, 0.22, 1.0)


def _add_arm(spec: mujoco.MjSpec, cell: CellCfg, cfg: ArmCfg):
    facts = robots.rizon4s()
    side = cfg.name
    base = spec.worldbody.add_body(name=f"{side}_base", pos=cfg.base.pos, quat=rpy_to_quat(cfg.base.rpy))
    _set_inertial(base, facts.base)
    base.add_geom(type=mujoco.mjtGeom.mjGEOM_CYLINDER, pos=[0, 0, facts.base_height / 2],
                  size=[facts.radii[0], facts.base_height / 2, 0], rgba=ARM_RGBA, contype=0, conaffinity=0, group=1)
    parent = base
    for i, link in enumerate(facts.links):
        xyz = link.origin_xyz
        n = np.linalg.norm(xyz)
        xyz = xyz * (n + cfg.link_length_offsets[i]) / n  # calibrated link-length offsets
        body = parent.add_body(name=f"{side}_link{i + 1}", pos=xyz, quat=rpy_to_quat(link.origin_rpy), gravcomp=1.0)
        _set_inertial(body, link.inertial)
        name = f"{side}_joint{i + 1}"
        body.add_joint(name=name, type=mujoco.mjtJoint.mjJNT_HINGE, axis=link.axis, range=[link.lower, link.upper],
                       damping=cfg.joint_damping[i], frictionloss=cfg.joint_frictionloss[i], armature=cfg.armature,
                       actfrcrange=[-link.effort, link.effort], actfrclimited=mujoco.mjtLimited.mjLIMITED_TRUE)
        act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=cfg.kp[i], kv=cfg.kd[i])
        act.ctrlrange = [link.lower, link.upper]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        # Collision capsule from this joint to the next joint origin (or the flange on link7).
        nxt = facts.links[i + 1].origin_xyz if i + 1 < len(facts.links) else facts.flange_xyz
        radius = facts.radii[i + 1]
        _capsule(body, np.zeros(3), nxt, radius, ARM_RGBA)
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_CYLINDER, size=[radius * 1.01, 0.004, 0], rgba=RING_RGBA,
                      contype=0, conaffinity=0, group=2)
        parent = body
    flange_rot = rpy_to_mat(facts.flange_rpy)
    parent.add_site(name=f"{side}_flange", pos=facts.flange_xyz, quat=mat_to_quat(flange_rot), size=[0.01, 0, 0])
    mount_rot = flange_rot @ rpy_to_mat(cfg.hand_mount.rpy)
    mount_pos = facts.flange_xyz + flange_rot @ np.asarray(cfg.hand_mount.pos)
    palm = parent.add_body(name=f"{side}_palm", pos=mount_pos, quat=mat_to_quat(mount_rot), gravcomp=1.0)
    _add_hand(spec, cell, palm, side)
    return palm


# Grasp frame on the palm: in front of the volar face, level with the proximal phalanges, where a power grasp
# closes. The action's end-effector pose is this site's pose.
GRASP_SITE_POS = np.array([0.045, 0.0, 0.085])


def _add_hand(spec: mujoco.MjSpec, cell: CellCfg, palm, side: str) -> None:
    facts = robots.wuji_right()
    mirror = side == "left"
    palm_inertial = _mirror_inertial(facts.palm) if mirror else facts.palm
    _set_inertial(palm, palm_inertial)
    centre = _MIRROR @ facts.palm_box_center if mirror else facts.palm_box_center
    _robot_geom(palm, type=mujoco.mjtGeom.mjGEOM_BOX, pos=centre, size=facts.palm_box_half, rgba=HAND_RGBA,
                friction=[cell.hand.friction, 0.02, 0.001])
    palm.add_site(name=f"{side}_grasp", pos=_MIRROR @ GRASP_SITE_POS if mirror else GRASP_SITE_POS,
                  size=[0.008, 0, 0], rgba=(1, 0.6, 0, 0.5), group=4)
    hand = cell.hand
    for f, finger in enumerate(facts.fingers, start=1):
        parent = palm
        for k, link in enumerate(finger.links, start=1):
            rot = rpy_to_mat(link.origin_rpy)
            xyz, axis, inertial = link.origin_xyz, link.axis, link.inertial
            if mirror:
                xyz, rot, axis = _mirror_link(xyz, rot, axis)
                inertial = _mirror_inertial(inertial)
            body = parent.add_body(name=f"{side}_finger{f}_link{k}", pos=xyz, quat=mat_to_quat(rot), gravcomp=1.0)
            _set_inertial(body, inertial)
            name = f"{side}_finger{f}_joint{k}"
            body.add_joint(name=name, type=mujoco.mjtJoint.mjJNT_HINGE, axis=axis, range=[link.lower, link.upper],
                           damping=hand.joint_damping[k - 1], armature=hand.armature[k - 1],
                           actfrcrange=[-link.effort, link.effort], actfrclimited=mujoco.mjtLimited.mjLIMITED_TRUE)
            act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.set_to_position(kp=hand.kp[k - 1], kv=hand.kd[k - 1])
            act.ctrlrange = [link.lower, link.upper]
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            # Capsule to the next joint origin; link4 extends to 5 mm short of the tip frame (the pad's centre).
            if k < 4:
                nxt = finger.links[k].origin_xyz
            else:
                nxt = finger.tip_xyz - np.array([0.0, 0.0, 0.005])
            if mirror:
                nxt = _MIRROR @ nxt
            radius = facts.thumb_base_radius if (f == 1 and k == 1) else facts.finger_radius
            if not (f > 1 and k == 1):  # the 4.6 mm MCP yoke of fingers 2-5 gets no collision geom
                g_rgba = (0.25, 0.25, 0.28, 1.0) if k < 4 else (0.45, 0.3, 0.25, 1.0)
                _capsule(body, np.zeros(3), nxt, radius, g_rgba)
                body.geoms[-1].friction = [hand.friction, 0.02, 0.001]
                body.geoms[-1].condim = 4
            parent = body


def _add_belt(spec: mujoco.MjSpec, cell: CellCfg) -> None:
    belt = cell.belt
    cz = belt.center[2] - belt.thickness / 2
    quat = rpy_to_quat((0, 0, belt.yaw))
    # Static frame: side rails and legs. Purely visual apart from the rails, which keep objects from sliding sideways.
    frame = spec.worldbody.add_body(name="conveyor", pos=[belt.center[0], belt.center[1], cz], quat=quat)
    rail_h = 0.02
    for s in (-1, 1):
        frame.add_geom(name=f"conveyor_rail_{'left' if s > 0 else 'right'}", type=mujoco.mjtGeom.mjGEOM_BOX,
                       pos=[0, s * (belt.width / 2 + 0.01), belt.thickness / 2 + rail_h / 2 - 0.005],
                       size=[belt.length / 2, 0.01, rail_h / 2 + belt.thickness / 2], rgba=(0.3, 0.32, 0.35, 1),
                       contype=STATIC, conaffinity=OBJECT | ROBOT)
        for e in (-1, 1):
            frame.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, pos=[e * (belt.length / 2 - 0.05), s * belt.width / 2,
                           -cz / 2], size=[0.02, 0.02, cz / 2], rgba=(0.3, 0.32, 0.35, 1), contype=0, conaffinity=0)
    body = frame.add_body(name="belt")
    body.add_joint(name="belt_slide", type=mujoco.mjtJoint.mjJNT_SLIDE, axis=[1, 0, 0])
    body.mass = belt.mass
    body.explicitinertial = True
    body.fullinertia = [belt.mass * 0.01, belt.mass * 0.1, belt.mass * 0.1, 0, 0, 0]
    body.add_geom(name="belt_surface", type=mujoco.mjtGeom.mjGEOM_BOX, size=[belt.length / 2, belt.width / 2,
                  belt.thickness / 2], rgba=(0.13, 0.13, 0.14, 1), friction=[belt.friction, 0.005, 0.0001],
                  contype=STATIC, conaffinity=OBJECT | ROBOT)
    n = int(belt.length / belt.slat_pitch)
    for i in range(n):  # visible slat seams, so the belt's motion shows in the images
        x = -belt.length / 2 + (i + 0.5) * belt.slat_pitch
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, pos=[x, 0, belt.thickness / 2 + 0.0003],
                      size=[0.003, belt.width / 2, 0.0003], rgba=(0.3, 0.3, 0.32, 1), contype=0, conaffinity=0,
                      group=2)
    act = spec.add_actuator(name="belt_drive", target="belt_slide", trntype=mujoco.mjtTrn.mjTRN_JOINT)
    act.set_to_velocity(kv=belt.speed_gain)
    act.ctrlrange = [-1.0, 1.0]
    act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE


def _add_bin(spec: mujoco.MjSpec, cell: CellCfg, b: BinCfg) -> None:
    rgba = cell.colours[b.colour]
    body = spec.worldbody.add_body(name=f"bin_{b.colour}", pos=b.center)
    hx, hy = b.inner_size[0] / 2, b.inner_size[1] / 2
    t, h = b.wall_thickness, b.wall_height
    kw = dict(type=mujoco.mjtGeom.mjGEOM_BOX, rgba=rgba, contype=STATIC, conaffinity=OBJECT | ROBOT)
    body.add_geom(name=f"bin_{b.colour}_floor", pos=[0, 0, -t / 2], size=[hx + t, hy + t, t / 2], **kw)
    for s in (-1, 1):
        body.add_geom(pos=[s * (hx + t / 2), 0, h / 2], size=[t / 2, hy + t, h / 2], **kw)
        body.add_geom(pos=[0, s * (hy + t / 2), h / 2], size=[hx, t / 2, h / 2], **kw)


def _add_object(spec: mujoco.MjSpec, index: int, obj: ObjectCfg) -> None:
    body = spec.worldbody.add_body(name=object_body_name(obj), pos=parking_pos(index, obj))
    body.add_freejoint(name=object_body_name(obj))
    gtype = {
        "box": mujoco.mjtGeom.mjGEOM_BOX,
        "sphere": mujoco.mjtGeom.mjGEOM_SPHERE,
        "cylinder": mujoco.mjtGeom.mjGEOM_CYLINDER,
        "capsule": mujoco.mjtGeom.mjGEOM_CAPSULE,
        "ellipsoid": mujoco.mjtGeom.mjGEOM_ELLIPSOID,
    }[obj.shape]
    # Capsules lie on their side (axis along y) so they ride the belt without rolling along it.
    quat = rpy_to_quat((math.pi / 2, 0, 0)) if obj.shape == "capsule" else np.array([1.0, 0, 0, 0])
    body.add_geom(name=object_body_name(obj), type=gtype, size=obj.size, quat=quat, mass=obj.mass,
                  friction=[obj.friction, 0.01, 0.001], condim=4, rgba=(0.8, 0.8, 0.8, 1),
                  contype=OBJECT, conaffinity=STATIC | OBJECT | ROBOT)


def _add_camera(spec: mujoco.MjSpec, cam, palms: dict) -> None:
    parent = spec.worldbody if cam.mount == "world" else palms[cam.mount.removesuffix("_wrist")]
    # fovy is a placeholder: each render backend sets it from the lens model (see render.camera_model).
    parent.add_camera(name=cam.name, pos=cam.pose.pos, quat=rpy_to_quat(cam.pose.rpy), fovy=90.0)


def build_spec(cell: CellCfg) -> mujoco.MjSpec:
    """The cell as an `MjSpec`. `cell` is one `CellCfg.validate` accepted where it was read (a world file, a task
    configuration); nothing here checks it again."""
    spec = mujoco.MjSpec()
    spec.modelname = "r2s2r_conveyor_cell"
    p = cell.physics
    spec.option.timestep = p.timestep
    spec.option.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{p.integrator.upper()}")
    spec.option.cone = getattr(mujoco.mjtCone, f"mjCONE_{p.cone.upper()}")
    spec.option.impratio = p.impratio
    spec.option.iterations = p.iterations
    spec.option.ls_iterations = p.ls_iterations
    spec.compiler.autolimits = True
    spec.compiler.degree = False
    spec.visual.global_.offwidth = 1280
    spec.visual.global_.offheight = 960
    spec.visual.quality.shadowsize = 1024 if cell.shadows else 0
    spec.visual.headlight.ambient = [0.25, 0.25, 0.25]
    spec.visual.headlight.diffuse = [0.2, 0.2, 0.2]
    spec.visual.headlight.specular = [0.0, 0.0, 0.0]
    spec.stat.center = [0.2, -0.2, 0.3]
    spec.stat.extent = 1.5

    floor = spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.05],
                                    rgba=cell.floor_rgba, contype=STATIC, conaffinity=OBJECT | ROBOT)
    if cell.floor_texture:
        spec.add_texture(name="floor_tiles", type=mujoco.mjtTexture.mjTEXTURE_2D,
                         builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, rgb1=[0.62, 0.6, 0.56], rgb2=[0.5, 0.49, 0.46],
                         width=256, height=256, mark=mujoco.mjtMark.mjMARK_EDGE, markrgb=[0.4, 0.4, 0.38])
        spec.add_material(name="floor_tiles", textures=["", "floor_tiles"], texrepeat=[6, 6], texuniform=True)
        floor.material = "floor_tiles"
        floor.rgba = [1, 1, 1, 1]
    _add_clutter(spec, cell.clutter)
    if cell.calibration_board is not None:
        _add_board(spec, cell.calibration_board)
    for light in cell.lights:
        spec.worldbody.add_light(name=light.name, pos=light.pos, dir=light.direction,
                                 diffuse=[c * light.intensity for c in light.colour], specular=[0.1, 0.1, 0.1],
                                 castshadow=light.casts_shadow,
                                 type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL if light.directional
                                 else mujoco.mjtLightType.mjLIGHT_SPOT, cutoff=70.0)
    palms = {arm.name: _add_arm(spec, cell, arm) for arm in cell.arms}
    _add_belt(spec, cell)
    for b in cell.bins:
        _add_bin(spec, cell, b)
    for i, obj in enumerate(cell.objects + cell.novel_objects):
        _add_object(spec, i, obj)
    for cam in cell.cameras:
        _add_camera(spec, cam, palms)
    return spec


def _add_clutter(spec: mujoco.MjSpec, count: int) -> None:
    # Boxes of assorted sizes and colours on the floor around the cell, outside the workspace (visual only): the
    # backgrounds of real cells are never empty. A fixed seed keeps a world file's clutter the same every build.
    rng = np.random.default_rng(7)
    for k in range(count):
        angle = rng.uniform(-0.3 * math.pi, 1.3 * math.pi)  # anywhere but behind the robot
        radius = rng.uniform(1.0, 1.6)
        size = rng.uniform(0.05, 0.2, 3)
        rgba = [*rng.uniform(0.1, 0.9, 3), 1.0]
        spec.worldbody.add_geom(name=f"clutter_{k}", type=mujoco.mjtGeom.mjGEOM_BOX, size=size, rgba=rgba,
                                pos=[radius * math.cos(angle), radius * math.sin(angle), size[2]],
                                euler=[0, 0, rng.uniform(0, math.pi)], contype=0, conaffinity=0)


FLAT_FIELD_PANEL = "flat_field_panel"


def _add_board(spec: mujoco.MjSpec, board: BoardCfg) -> None:
    # Black squares as thin boxes on a white plate with a one-square margin: exact geometry, no texture sampling.
    cols, rows = board.squares
    s = board.square_size
    body = spec.worldbody.add_body(name="calibration_board", mocap=True, pos=[0, 0, -1])
    body.add_geom(name="calibration_board_plate", type=mujoco.mjtGeom.mjGEOM_BOX, rgba=[0.95, 0.95, 0.95, 1],
                  size=[(cols + 2) * s / 2, (rows + 2) * s / 2, 0.002], pos=[0, 0, -0.002], contype=0, conaffinity=0)
    # Its back carries a plain grey card (light measurements; mid-grey stays below the sensor's ceiling).
    body.add_geom(name="calibration_board_card", type=mujoco.mjtGeom.mjGEOM_BOX, rgba=[0.45, 0.45, 0.45, 1],
                  size=[(cols + 2) * s / 2, (rows + 2) * s / 2, 1e-4], pos=[0, 0, 1e-4 - BOARD_CARD_DEPTH], contype=0,
                  conaffinity=0)
    for c in range(cols):
        for r in range(rows):
            if (c + r) % 2 == 0:
                body.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, rgba=[0.02, 0.02, 0.02, 1], size=[s / 2, s / 2, 1e-4],
                              pos=[(c - (cols - 1) / 2) * s, (r - (rows - 1) / 2) * s, 1e-4], contype=0,
                              conaffinity=0)
    # A flat-field light panel, held against a lens with the cell's lamps off to measure the camera's exposure on
    # its own (a board under the lamps measures exposure times lamp intensity). Self-luminous: its image depends
    # on the lens, not on the lamps.
    spec.add_material(name=FLAT_FIELD_PANEL, rgba=[0.5, 0.5, 0.5, 1], emission=0.6, specular=0.0)
    panel = spec.worldbody.add_body(name=FLAT_FIELD_PANEL, mocap=True, pos=[0, 0, -1.5])
    panel.add_geom(type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.3, 0.3, 0.001], material=FLAT_FIELD_PANEL, contype=0,
                   conaffinity=0)


def build_model(cell: CellCfg) -> mujoco.MjModel:
    """Compile the cell. Home postures are stored as keyframe `home` with belt and objects at rest."""
    spec = build_spec(cell)
    model = spec.compile()
    data = mujoco.MjData(model)
    for arm in cell.arms:
        for name, q in zip(arm_joint_names(arm.name), arm.home_q):
            data.joint(name).qpos = q
            data.actuator(name).ctrl = q
    key = spec.add_key(name="home", qpos=data.qpos.copy(), ctrl=data.ctrl.copy())
    del key
    return spec.compile()


@dataclass(frozen=True)
class PeriodicJoint:
    """A slide joint whose position the physics wraps into [-period/2, period/2) after every step (the belt)."""

    qpos_adr: int
    period: float


def belt_periodic(model: mujoco.MjModel, cell: CellCfg) -> PeriodicJoint:
    """The belt's slide joint wraps by one slat pitch, so it runs forever and its seams look continuous."""
    return PeriodicJoint(int(model.joint("belt_slide").qposadr[0]), cell.belt.slat_pitch)


@dataclass(frozen=True)
class CellIndex:
    """Where the right arm, hand, belt and grasp site live in a cell's compiled model (indices into its arrays)."""

    arm_act: np.ndarray  # (7,) actuator ids
    hand_act: np.ndarray  # (20,)
    arm_qadr: np.ndarray  # (7,) qpos addresses
    hand_qadr: np.ndarray  # (20,)
    arm_dadr: np.ndarray  # (7,) dof addresses
    hand_dadr: np.ndarray  # (20,)
    belt_act: int
    belt_dof: int
    grasp_site: int
    robot_bodies: np.ndarray  # (nbody,) bool: the right arm's subtree (arm and hand)

    @classmethod
    def of(cls, model: mujoco.MjModel) -> CellIndex:
        arm, hand = arm_joint_names("right"), hand_joint_names("right")
        ids = lambda names, f: np.array([f(n) for n in names])  # noqa: E731
        return cls(
            arm_act=ids(arm, lambda n: model.actuator(n).id), hand_act=ids(hand, lambda n: model.actuator(n).id),
            arm_qadr=ids(arm, lambda n: model.joint(n).qposadr[0]),
            hand_qadr=ids(hand, lambda n: model.joint(n).qposadr[0]),
            arm_dadr=ids(arm, lambda n: model.joint(n).dofadr[0]),
            hand_dadr=ids(hand, lambda n: model.joint(n).dofadr[0]),
            belt_act=model.actuator("belt_drive").id, belt_dof=int(model.joint("belt_slide").dofadr[0]),
            grasp_site=model.site("right_grasp").id,
            robot_bodies=model.body_rootid == model.body("right_base").id)
