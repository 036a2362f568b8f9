"""Grasp synthesis for the 20-DoF Wuji hand from an object's primitive geometry.

Candidates are power grasps from above: the grasp site (see `cell.mjcf.GRASP_SITE_POS`) is placed on the object's
vertical axis, the palm facing down, at a few yaws and tilts and at a few palm heights above the object's top. Each
candidate is refined kinematically on a scratch copy of the cell's model: the object is put where the candidate
says relative to the real hand, and every finger closes along one synergy (HAND_OPEN -> HAND_CLOSED) until it
touches the object or would reach below the surface the object stands on. The closed hand is scored by its contacts
and by the Ferrari-Canny epsilon metric (Ferrari & Canny, "Planning optimal grasps", ICRA 1992): the radius of the
largest ball about the origin inside the convex hull of the contact wrenches, with each friction cone linearised
by a few edges (Miller & Allen, GraspIt!, 2004, do the same).

All poses are in the object's body frame, which stands upright on the belt (z up).

Synthesis is slow next to an episode's planning, and every worker process of a generation run would pay it again
for every object: with `cache=True`, finished candidate lists are kept on disk (`files.cache_dir()/grasps`), keyed by
the model's geometry, the object, the settings, this module's source and the MuJoCo version, so the same grasps are
read back, bit for bit, by every later process.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
from scipy.spatial import ConvexHull, QhullError

from r2s2r.cell.mjcf import FINGERS, CellIndex, object_body_name
from r2s2r.cell.spec import ObjectCfg
from r2s2r.control.grasp import GRASP_ROT, HAND_CLOSED, HAND_OPEN
from r2s2r.core import ConfigError
from r2s2r.files import atomic_path, cache_dir
from r2s2r.geometry import rpy_to_mat

SHAPES = ("box", "sphere", "cylinder", "capsule", "ellipsoid")
# Shapes whose upright pose looks the same at every yaw: one yaw sample covers them.
YAW_SYMMETRIC = ("sphere", "cylinder")


@dataclass(frozen=True)
class GraspGeneratorCfg:
    """How many candidates to try and how to judge them.

    Attributes:
        yaw_samples: palm yaws tried over [0, pi) about the object's z axis (every shape here is symmetric under a
            half turn about z, so [0, pi) covers all yaws); axially symmetric shapes get one.
        tilts: palm tilts (rad) about the thumb axis, away from straight down; 0 is top-down.
        palm_gaps: heights (m) of the palm's face above the point where it would touch the object.
        synergy_step: increment of the closing synergy (0 = open, 1 = closed) between contact checks.
        squeeze: synergy added past first contact in the hand target, so the position-controlled fingers press.
        contact_distance: a finger link this close (m) to the object touches it.
        support_clearance: how far (m) a finger may reach below the object's base before the belt stops it.
        friction: Coulomb friction coefficient of the contacts in the wrench metric.
        cone_edges: edges of each linearised friction cone.
        finger_weight: score added per finger in contact, on top of epsilon (breaks ties among epsilon-0 grasps
            and prefers wrapping grasps).
        span_weight: score for wrapping the fingers across a box's narrowest horizontal span, scaled by
            narrowest / this span: the curling fingers hold a short span from both sides, while on a long one
            their tips only catch its end edges (a cuboid held along its length slips out on the belt). Round
            shapes get no such term: a capsule held along its length stays in the hand.
    """

    yaw_samples: int = 4
    tilts: tuple[float, ...] = (0.0, -0.25)
    palm_gaps: tuple[float, ...] = (0.0, 0.01, 0.02, 0.03)
    synergy_step: float = 0.04
    squeeze: float = 0.3
    contact_distance: float = 0.002
    support_clearance: float = 0.004
    friction: float = 0.8
    cone_edges: int = 8
    finger_weight: float = 0.02
    span_weight: float = 0.3

    def validate(self) -> GraspGeneratorCfg:
        checks = (
            (self.yaw_samples >= 1, "yaw_samples", self.yaw_samples, ">= 1"),
            (len(self.tilts) >= 1 and all(abs(t) < 1.2 for t in self.tilts), "tilts", self.tilts,
             "at least one tilt, each within +-1.2 rad"),
            (len(self.palm_gaps) >= 1 and all(0 <= g <= 0.1 for g in self.palm_gaps), "palm_gaps", self.palm_gaps,
             "at least one gap, each in [0, 0.1] m"),
            (0 < self.synergy_step <= 0.5, "synergy_step", self.synergy_step, "a step in (0, 0.5]"),
            (0 <= self.squeeze <= 1, "squeeze", self.squeeze, "a value in [0, 1]"),
            (0 < self.contact_distance <= 0.02, "contact_distance", self.contact_distance, "a distance in (0, 0.02] m"),
            (0 < self.friction <= 3, "friction", self.friction, "a coefficient in (0, 3]"),
            (self.cone_edges >= 3, "cone_edges", self.cone_edges, ">= 3"),
        )
        for ok, name, value, expected in checks:
            if not ok:
                raise ConfigError(f"generator.grasp.{name} = {value!r}: expected {expected}")
        return self


@dataclass(frozen=True)
class Grasp:
    """One refined grasp, in the object's body frame.

    Attributes:
        pos: grasp-site position (3,) in the object frame.
        rot: grasp-site orientation (3, 3) in the object frame.
        hand_q: hand joint targets (20,) for the closed hand (contact configuration plus squeeze).
        yaw: palm yaw about the object's z axis (rad); the fingers point along yaw + pi/2.
        tilt: palm tilt about the thumb axis (rad).
        palm_gap: palm height above its touching height (m).
        n_contacts: hand links (palm included) touching the object when closed.
        n_fingers: fingers (thumb included) touching the object when closed.
        epsilon: Ferrari-Canny epsilon of the contact wrenches (0 without force closure).
        score: ranking value, higher is better.
    """

    pos: np.ndarray
    rot: np.ndarray
    hand_q: np.ndarray
    yaw: float
    tilt: float
    palm_gap: float
    n_contacts: int
    n_fingers: int
    epsilon: float
    score: float


def epsilon_metric(points: np.ndarray, normals: np.ndarray, center: np.ndarray, friction: float,
                   cone_edges: int, length: float) -> float:
    """Ferrari-Canny epsilon of point contacts with friction.

    Args:
        points: (n, 3) contact points.
        normals: (n, 3) unit normals along which the hand pushes on the object.
        center: (3,) the point torques are taken about (the object's centre).
        friction: Coulomb coefficient of every contact.
        cone_edges: edges of each linearised friction cone.
        length: characteristic length (m) dividing torques, so forces and torques weigh alike.

    Returns:
        Distance from the origin to the nearest facet of the hull of the unit contact wrenches, 0 when the origin
        is not strictly inside (no force closure, or too few contacts to span the 6-D wrench space).
    """
    points, normals = np.asarray(points, float), np.asarray(normals, float)
    n = normals / np.linalg.norm(normals, axis=1, keepdims=True)
    helper = np.where(np.abs(n[:, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])
    t1 = np.cross(n, helper)
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    t2 = np.cross(n, t1)
    a = 2 * np.pi * np.arange(cone_edges) / cone_edges
    f = n[:, None] + friction * (np.cos(a)[None, :, None] * t1[:, None] + np.sin(a)[None, :, None] * t2[:, None])
    f /= np.linalg.norm(f, axis=2, keepdims=True)
    torque = np.cross(np.broadcast_to((points - center)[:, None], f.shape), f) / length
    wrenches = np.concatenate([f, torque], axis=2).reshape(-1, 6)
    if len(wrenches) < 7:
        return 0.0
    try:
        hull = ConvexHull(wrenches)
    except QhullError:  # the wrenches span fewer than 6 dimensions: the origin cannot be strictly inside
        return 0.0
    # Facet equations are n.x + b <= 0 inside, with unit n: the origin's distance to a facet is -b.
    return max(0.0, float(np.min(-hull.equations[:, -1])))


class GraspGenerator:
    """Proposes, refines and ranks power grasps for the right hand on a scratch copy of `model`.

    Args:
        model: the cell's compiled model (not modified: the generator works on its own copy).
        cfg: sampling and scoring parameters.
    """

    def __init__(self, model: mujoco.MjModel, cfg: GraspGeneratorCfg | None = None, cache: bool = False):
        self.cfg = (cfg or GraspGeneratorCfg()).validate()
        # A copy whose hand geoms report contacts out to `contact_distance`: touching is decided by distance.
        self.model = copy.deepcopy(model)
        m = self.model
        self.data = mujoco.MjData(m)
        self.data.qpos[:] = m.key_qpos[0]
        hand_root = m.body("right_palm").id
        in_hand = np.array([self._descends(b, hand_root) for b in range(m.nbody)])
        self.hand_geom = in_hand[m.geom_bodyid] & (m.geom_contype > 0)
        m.geom_margin[self.hand_geom] = self.cfg.contact_distance
        # Only hand-object pairs matter here; switching every other geom off keeps the collision pass short.
        objects = np.array([m.body(b).name.startswith("obj_") for b in range(m.nbody)])[m.geom_bodyid]
        m.geom_contype[~(self.hand_geom | objects)] = 0
        m.geom_conaffinity[~(self.hand_geom | objects)] = 0
        # Finger index (0 = thumb) of every hand geom; -1 for the palm.
        self.geom_finger = np.full(m.ngeom, -1)
        for f in range(FINGERS):
            for k in range(1, 5):
                self.geom_finger[m.geom_bodyid == m.body(f"right_finger{f + 1}_link{k}").id] = f
        # Finger geoms as capsules (a sphere is a capsule of zero half-length; its size[1] is unused, so zero it).
        self.capsules = np.flatnonzero(self.hand_geom & (self.geom_finger >= 0))
        spheres = self.capsules[m.geom_type[self.capsules] == mujoco.mjtGeom.mjGEOM_SPHERE]
        m.geom_size[spheres, 1] = 0.0
        self.palm_geom = int(np.flatnonzero(self.hand_geom & (m.geom_bodyid == hand_root))[0])
        index = CellIndex.of(m)
        self.hand_qadr, self.site = index.hand_qadr, index.grasp_site
        mujoco.mj_kinematics(m, self.data)
        self.site_pos = self.data.site_xpos[self.site].copy()
        self.site_rot = self.data.site_xmat[self.site].reshape(3, 3).copy()
        # The disk cache's key for this model: the geometry grasps depend on (not colours or lights), the settings,
        # this module's source and MuJoCo's version. None: no disk cache.
        self.cache_key = None
        if cache:
            key = hashlib.sha256(repr((self.cfg, mujoco.__version__, _SOURCE_DIGEST)).encode())
            for array in (m.geom_type, m.geom_size, m.geom_pos, m.geom_quat, m.geom_bodyid, m.geom_friction,
                          m.geom_margin, m.geom_contype, m.geom_conaffinity, m.body_pos, m.body_quat, m.body_parentid,
                          m.jnt_type, m.jnt_axis, m.jnt_pos, m.jnt_range, m.site_pos, m.site_quat, m.key_qpos):
                key.update(np.ascontiguousarray(array).tobytes())
            self.cache_key = key.hexdigest()  # a string, so a generator holding this one can be copied

    def _descends(self, body: int, root: int) -> bool:
        while body != 0:
            if body == root:
                return True
            body = self.model.body_parentid[body]
        return False

    # ----------------------------------------------------------------------------------------------------------
    def generate(self, obj: ObjectCfg) -> list[Grasp]:
        """All refined candidates for `obj`, best first (from the disk cache where it holds them)."""
        if obj.shape not in SHAPES:
            raise ValueError(f"object.shape = {obj.shape!r}: expected one of {', '.join(SHAPES)}")
        if self.cache_key is None:
            return self._synthesize(obj)
        what = hashlib.sha256((self.cache_key + repr(obj)).encode()).hexdigest()
        path = cache_dir() / "grasps" / f"{what[:24]}.npz"
        cached = _read_grasps(path)
        if cached is None:
            cached = self._synthesize(obj)
            _write_grasps(path, cached)
        return cached

    def _synthesize(self, obj: ObjectCfg) -> list[Grasp]:
        m = self.model
        geom = m.geom(object_body_name(obj)).id
        qadr = m.joint(object_body_name(obj)).qposadr[0]
        n_yaw = 1 if obj.shape in YAW_SYMMETRIC else self.cfg.yaw_samples
        yaws = np.arange(n_yaw) * np.pi / n_yaw
        # The fingers point along yaw + pi/2 (site z is +y at yaw 0) and wrap the object's span in that direction.
        spans = np.array([_span(obj, y + np.pi / 2) for y in yaws])
        span_weight = self.cfg.span_weight if obj.shape == "box" else 0.0
        grasps = []
        for yaw, span in zip(yaws, spans):
            for tilt in self.cfg.tilts:
                rot = rpy_to_mat((0.0, 0.0, yaw)) @ rpy_to_mat((tilt, 0.0, 0.0)) @ GRASP_ROT
                touch = self._touching_depth(obj, geom, qadr, rot)
                for gap in self.cfg.palm_gaps:
                    g = self._close(obj, geom, qadr, rot, touch + gap, float(yaw), float(tilt), gap)
                    grasps.append(dataclasses.replace(g, score=g.score + span_weight * spans.min() / span))
        return sorted(grasps, key=lambda g: -g.score)

    def _place(self, qadr: int, rot: np.ndarray, depth: float) -> np.ndarray:
        """Put the object so the grasp site sits `depth` back along the approach axis from the object's centre.

        The approach axis is the palm normal (site x). Returns the site position in the object frame.
        """
        pos = -depth * rot[:, 0]
        r_obj = self.site_rot @ rot.T  # object orientation in the world given the site's
        self.data.qpos[qadr:qadr + 3] = self.site_pos - r_obj @ pos
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, r_obj.flatten())
        self.data.qpos[qadr + 3:qadr + 7] = quat
        return pos

    def _touching_depth(self, obj: ObjectCfg, geom: int, qadr: int, rot: np.ndarray) -> float:
        """Depth at which the open palm's face touches the object, moving along the approach axis."""
        self.data.qpos[self.hand_qadr] = HAND_OPEN
        depth = 0.2
        fromto = np.zeros(6)
        for _ in range(3):  # the distance is along the surface normal, not the approach axis: a few passes agree
            self._place(qadr, rot, depth)
            mujoco.mj_kinematics(self.model, self.data)
            dist = mujoco.mj_geomDistance(self.model, self.data, self.palm_geom, geom, 0.5, fromto)
            depth -= dist
        return depth

    def _close(self, obj: ObjectCfg, geom: int, qadr: int, rot: np.ndarray, depth: float, yaw: float, tilt: float,
               gap: float) -> Grasp:
        """Close every finger along the synergy until it touches the object or the support, then score."""
        m, d, cfg = self.model, self.data, self.cfg
        pos = self._place(qadr, rot, depth)
        r_obj = d.qpos[qadr + 3:qadr + 7]
        support_normal = np.zeros(9)
        mujoco.mju_quat2Mat(support_normal, r_obj)
        up = support_normal.reshape(3, 3)[:, 2]  # the object's z axis: the support surface's normal
        base = d.qpos[qadr:qadr + 3] - up * obj.half_height
        s = np.zeros(FINGERS)
        active = np.ones(FINGERS, bool)
        steps = int(np.ceil(1.0 / cfg.synergy_step))
        for i in range(1, steps + 1):
            trial = np.where(active, min(1.0, i * cfg.synergy_step), s)
            d.qpos[self.hand_qadr] = _synergy(trial)
            mujoco.mj_kinematics(m, d)
            mujoco.mj_collision(m, d)
            touching = self._fingers_touching(geom)
            below = self._lowest(base, up) < -cfg.support_clearance
            # A finger that would dip into the belt stays where it was; one that touches the object stops there.
            s = np.where(active & ~below, trial, s)
            active &= ~(touching | below)
            if not active.any():
                break
        d.qpos[self.hand_qadr] = _synergy(s)
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        points, normals, links, fingers = self._contacts(geom)
        center = d.xpos[m.geom_bodyid[geom]]
        eps = epsilon_metric(points, normals, center, cfg.friction, cfg.cone_edges, max(obj.half_extents)) \
            if len(points) else 0.0
        n_fingers = len(fingers)
        return Grasp(pos=pos, rot=rot, hand_q=_synergy(np.minimum(1.0, s + cfg.squeeze)), yaw=yaw, tilt=tilt,
                     palm_gap=gap, n_contacts=len(links), n_fingers=n_fingers, epsilon=eps,
                     score=eps + cfg.finger_weight * n_fingers)

    def _fingers_touching(self, geom: int) -> np.ndarray:
        c = self.data.contact
        g1, g2 = c.geom1[:self.data.ncon], c.geom2[:self.data.ncon]
        other = np.concatenate([g2[g1 == geom], g1[g2 == geom]])
        fingers = self.geom_finger[other[self.hand_geom[other]]]
        touching = np.zeros(FINGERS, bool)
        touching[fingers[fingers >= 0]] = True
        return touching

    def _lowest(self, base: np.ndarray, up: np.ndarray) -> np.ndarray:
        """Per finger, the height of its lowest surface point above the object's base plane."""
        m, d = self.model, self.data
        g = self.capsules
        axis = d.geom_xmat[g].reshape(-1, 3, 3)[:, :, 2]
        ends = d.geom_xpos[g][:, None] + m.geom_size[g, 1][:, None, None] * np.array([-1.0, 1.0])[None, :, None] \
            * axis[:, None]
        heights = ((ends - base) @ up).min(axis=1) - m.geom_size[g, 0]
        lowest = np.full(FINGERS, np.inf)
        np.minimum.at(lowest, self.geom_finger[g], heights)
        return lowest

    def _contacts(self, geom: int) -> tuple[np.ndarray, np.ndarray, set, set]:
        """Contact points, inward normals (hand onto object), touching hand geoms and fingers (-1 = palm)."""
        points, normals, links, fingers = [], [], set(), set()
        for c in self.data.contact[:self.data.ncon]:
            if c.geom2 == geom and self.hand_geom[c.geom1]:
                hand, normal = c.geom1, c.frame[:3]  # the normal points from geom1 to geom2
            elif c.geom1 == geom and self.hand_geom[c.geom2]:
                hand, normal = c.geom2, -c.frame[:3]
            else:
                continue
            points.append(c.pos.copy())
            normals.append(np.array(normal))
            links.add(int(hand))
            if self.geom_finger[hand] >= 0:
                fingers.add(int(self.geom_finger[hand]))
        return np.array(points).reshape(-1, 3), np.array(normals).reshape(-1, 3), links, fingers


_SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()  # a change of method voids the cache
_FIELDS = [f.name for f in dataclasses.fields(Grasp)]


def _read_grasps(path: Path) -> list[Grasp] | None:
    """The grasps cached at `path`, or None where there are none or the file is unreadable (it is then rebuilt)."""
    try:
        with np.load(path) as f:
            columns = {name: f[name] for name in _FIELDS}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return [Grasp(**{name: columns[name][i] if columns[name].ndim > 1 else columns[name][i].item()
                     for name in _FIELDS}) for i in range(len(columns["score"]))]


def _write_grasps(path: Path, grasps: list[Grasp]) -> None:
    """Cache `grasps` at `path`; a cache that cannot be written only costs the next process the synthesis."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **{name: np.array([getattr(g, name) for g in grasps]) for name in _FIELDS})
    except OSError:
        pass


def _span(obj: ObjectCfg, direction: float) -> float:
    """Half the object's horizontal extent along the world-frame `direction` (rad) in its body frame."""
    u = np.array([np.cos(direction), np.sin(direction)])
    hx, hy = obj.half_extents[:2]
    if obj.shape == "box":
        return float(abs(u[0]) * hx + abs(u[1]) * hy)
    return float(np.hypot(u[0] * hx, u[1] * hy))  # round cross-sections: the ellipse through the half extents


def _synergy(s: np.ndarray) -> np.ndarray:
    """Hand joints for per-finger synergy values `s` (5,): 0 open, 1 closed, joints move together along a finger."""
    return HAND_OPEN + np.repeat(s, 4) * (HAND_CLOSED - HAND_OPEN)
