"""Link-length offsets of the right arm from tracker-measured flange positions at many joint configurations.

The model: each joint-origin vector of the Rizon chain (`robots.rizon4s().links[i].origin_xyz`) is lengthened by
`link_length_offsets[i]` along itself (see `r2s2r.cell.mjcf._add_arm`). The flange position is then a smooth
function of the offsets, and `scipy.optimize.least_squares` fits them to the measured positions. Forward
kinematics runs on one compiled model whose `body_pos` is edited in place, so an evaluation costs one
`mj_kinematics` per configuration instead of a model rebuild.

Observability. The flange sits on joint 7's axis (link7 -> flange is a pure offset along link7's z, and joint 7
turns about that z), so q7 does not move the flange point; but the seventh offset still moves the flange along a
direction fixed in link6, which turns with q1..q6, so all seven offsets are observable from positions alone and
are all fitted. What positions cannot separate is the first offset (along the base's z axis) from an error in the
base's height, so the base position is trusted as registered. The base's orientation from the six fiducials on
the base casting is only good to about a milliradian (they span 0.18 m), which would put up to a millimetre of
apparent error at the flange; a small correction of it is fitted alongside as a nuisance parameter and discarded.
"""

from __future__ import annotations

import copy
import functools

import mujoco
import numpy as np
from scipy.optimize import least_squares

from r2s2r.calibration import CalibrationError
from r2s2r.cell import robots
from r2s2r.cell.mjcf import ROBOT, CellIndex, arm_joint_names, build_model
from r2s2r.cell.spec import ARM_DOF, CellCfg
from r2s2r.geometry import quat_to_mat

SIDE = "right"
# Distance kept from each joint limit when sampling configurations (rad).
LIMIT_MARGIN = 0.15
# Random configurations drawn per requested one, among which the most informative are chosen.
POOL_PER_POSE = 30


@functools.cache
def _survey_model() -> mujoco.MjModel:
    """The design cell, with arm-to-arm contacts on, for screening configurations (never modified)."""
    return _copy_with_arm_contacts(build_model(CellCfg()))


def _descendants(model: mujoco.MjModel, root_name: str) -> set[int]:
    """Ids of body `root_name` and every body below it (an arm's links and its hand)."""
    root = model.body(root_name).id
    out = set()
    for b in range(model.nbody):
        a = b
        while a > 0 and a != root:
            a = model.body_parentid[a]
        if a == root:
            out.add(b)
    return out


def _collides(model: mujoco.MjModel, data: mujoco.MjData, arm_bodies: set[int]) -> bool:
    """True when a right-arm geom touches anything outside the right arm (scenery, objects, the other arm)."""
    mujoco.mj_collision(model, data)
    for c in data.contact[: data.ncon]:
        b1, b2 = model.geom_bodyid[c.geom1], model.geom_bodyid[c.geom2]
        if (b1 in arm_bodies) != (b2 in arm_bodies) and c.dist < 0.0:
            return True
    return False


def kinematic_poses(count: int = 40, seed: int = 0) -> np.ndarray:
    """Right-arm configurations for the flange survey, chosen to pin down the link-length offsets.

    A pool of random configurations is drawn uniformly within the model's joint limits (`LIMIT_MARGIN` inside
    them), dropping any in which the arm or hand would touch the floor, conveyor, bins, objects or the left arm at
    its home posture (design layout), so the set can be driven on a real cell. From the pool, `count`
    configurations are picked greedily to minimise the summed variance of the seven fitted offsets (A-optimal
    design, with the base-tilt nuisance included). Random configurations leave the offsets of neighbouring links,
    whose origin vectors are nearly parallel, poorly separated; the chosen set spreads the arm over postures that
    tell them apart.

    How many to ask for: the first two offsets (whose origin vectors are nearly parallel) are the least determined;
    their standard deviation is a multiple of the tracker's 0.3 mm noise per axis and shrinks with the square root
    of `count`.

    Args:
        count: number of configurations (at least 10: the fit has 10 unknowns and wants redundancy).
        seed: seed of the sampler; the same seed gives the same configurations.

    Returns:
        (count, 7) joint positions (rad) of right_joint1..7.
    """
    if count < 10:
        raise CalibrationError(f"count = {count}: expected at least 10 configurations for the offset fit")
    model = _survey_model()
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    arm_bodies = _descendants(model, f"{SIDE}_link1")
    jids = [model.joint(n).id for n in arm_joint_names(SIDE)]
    qadr = np.array([model.jnt_qposadr[j] for j in jids])
    lo = model.jnt_range[jids, 0] + LIMIT_MARGIN
    hi = model.jnt_range[jids, 1] - LIMIT_MARGIN
    rng = np.random.default_rng(seed)
    pool_size = max(POOL_PER_POSE * count, 1000)
    jacobian = _FlangeJacobian(model)
    pool, jacobians = [], []
    for _attempt in range(50 * pool_size):
        if len(pool) == pool_size:
            break
        q = lo + rng.uniform(size=ARM_DOF) * (hi - lo)
        data.qpos[qadr] = q
        mujoco.mj_kinematics(model, data)
        if not _collides(model, data, arm_bodies):
            pool.append(q)
            jacobians.append(jacobian(data))
    if len(pool) < count:
        raise CalibrationError(f"found only {len(pool)} collision-free configurations; expected at least {count}")
    chosen = _a_optimal(np.array(jacobians), count)
    return np.array(pool)[chosen]


class _FlangeJacobian:
    """(3, 10) derivative of the flange position by the seven offsets and a base rotation vector."""

    def __init__(self, model: mujoco.MjModel):
        self.parents = [model.body(f"{SIDE}_base").id] + [model.body(f"{SIDE}_link{i}").id for i in range(1, ARM_DOF)]
        self.units = np.array([link.origin_xyz / np.linalg.norm(link.origin_xyz) for link in robots.rizon4s().links])
        self.site = model.site(f"{SIDE}_flange").id

    def __call__(self, data: mujoco.MjData) -> np.ndarray:
        jac = np.empty((3, ARM_DOF + 3))
        for i, parent in enumerate(self.parents):
            # An offset slides link i's origin along its origin vector, which is fixed in the parent's frame.
            jac[:, i] = data.xmat[parent].reshape(3, 3) @ self.units[i]
        r = data.site_xpos[self.site] - data.xpos[self.parents[0]]
        jac[:, ARM_DOF:] = -np.array([[0.0, -r[2], r[1]], [r[2], 0.0, -r[0]], [-r[1], r[0], 0.0]])
        return jac


def _a_optimal(jacobians: np.ndarray, count: int) -> list[int]:
    """Greedy A-optimal selection: each pick most reduces trace(cov) of the offsets (first 7 parameters)."""
    n_par = jacobians.shape[2]
    # A weak prior keeps the information matrix invertible before 10 parameters' worth of rows are chosen.
    cov = np.eye(n_par) * 1e6
    available = np.ones(len(jacobians), dtype=bool)
    chosen: list[int] = []
    for _ in range(count):
        b = jacobians @ cov  # (pool, 3, n_par)
        s = np.eye(3) + np.einsum("cik,cjk->cij", b, jacobians)
        x = np.linalg.solve(s, b[:, :, :ARM_DOF])
        # Woodbury: adding rows J reduces the covariance by B.T S^-1 B; its trace over the offsets is the gain.
        gain = np.einsum("cij,cij->c", x, b[:, :, :ARM_DOF])
        gain[~available] = -np.inf
        c = int(np.argmax(gain))
        chosen.append(c)
        available[c] = False
        cov = cov - b[c].T @ np.linalg.solve(s[c], b[c])
    return chosen


def _copy_with_arm_contacts(model: mujoco.MjModel) -> mujoco.MjModel:
    """A copy in which the left arm's geoms also collide with robot geoms.

    The cell never collides robot geoms with each other (adjacent links overlap by construction), so without this
    the right arm could pass through the left one unnoticed; `_collides` ignores the left arm's own pairs.
    """
    m = copy.deepcopy(model)
    left = _descendants(m, "left_link1")
    for g in range(m.ngeom):
        if m.geom_bodyid[g] in left:
            m.geom_conaffinity[g] |= ROBOT
    return m


class _ArmFK:
    """Flange positions of the right arm on one compiled model, with offsets and a base tilt set in place."""

    def __init__(self, cell: CellCfg):
        self.model = build_model(cell)
        self.data = mujoco.MjData(self.model)
        mujoco.mj_resetDataKeyframe(self.model, self.data, 0)
        facts = robots.rizon4s()
        self.vectors = np.array([link.origin_xyz for link in facts.links])
        self.lengths = np.linalg.norm(self.vectors, axis=1)
        self.link_ids = [self.model.body(f"{SIDE}_link{i + 1}").id for i in range(ARM_DOF)]
        self.base_id = self.model.body(f"{SIDE}_base").id
        self.base_rot = quat_to_mat(self.model.body_quat[self.base_id])
        self.qadr = CellIndex.of(self.model).arm_qadr
        self.site = self.model.site(f"{SIDE}_flange").id

    def set(self, offsets: np.ndarray, tilt: np.ndarray) -> None:
        m = self.model
        m.body_pos[self.link_ids] = self.vectors * ((self.lengths + offsets) / self.lengths)[:, None]
        # A small rotation (rotation vector, world frame) applied on top of the registered base orientation.
        angle = float(np.linalg.norm(tilt))
        if angle > 0:
            k = tilt / angle
            kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
            r = np.eye(3) + np.sin(angle) * kx + (1 - np.cos(angle)) * kx @ kx
        else:
            r = np.eye(3)
        mujoco.mju_mat2Quat(m.body_quat[self.base_id], (r @ self.base_rot).ravel())

    def flange(self, q: np.ndarray) -> np.ndarray:
        out = np.empty((len(q), 3))
        for i, row in enumerate(q):
            self.data.qpos[self.qadr] = row
            mujoco.mj_kinematics(self.model, self.data)
            out[i] = self.data.site_xpos[self.site]
        return out


def fit_link_offsets(cell: CellCfg, q: np.ndarray, flange: np.ndarray) -> tuple[np.ndarray, float]:
    """Fit the right arm's link-length offsets to measured flange positions.

    Args:
        cell: the cell to fit against, already carrying the registered base pose of the right arm (its own link
            offsets are ignored: the fit starts from zero offsets).
        q: (N, 7) encoder readings at which the flange was measured.
        flange: (N, 3) tracker-measured world positions of the `right_flange` site.

    Returns:
        The offsets (7,) in metres and the RMS residual distance (m) of the fit.

    Raises:
        CalibrationError: mismatched or malformed arrays, or too few configurations for the unknowns.
    """
    q = np.asarray(q, dtype=float)
    flange = np.asarray(flange, dtype=float)
    if q.ndim != 2 or q.shape[1] != ARM_DOF:
        raise CalibrationError(f"q has shape {q.shape}: expected (N, {ARM_DOF}) joint positions")
    if flange.shape != (len(q), 3):
        raise CalibrationError(f"flange has shape {flange.shape}: expected ({len(q)}, 3) to match q")
    if len(q) < 5:
        raise CalibrationError(f"{len(q)} configurations: expected at least 5 for 10 unknowns (3 per position)")
    if not (np.isfinite(q).all() and np.isfinite(flange).all()):
        raise CalibrationError("q or flange contains NaN or infinite values")
    fk = _ArmFK(cell)

    def residual(x: np.ndarray) -> np.ndarray:
        fk.set(x[:ARM_DOF], x[ARM_DOF:])
        return (fk.flange(q) - flange).ravel()

    x0 = np.zeros(ARM_DOF + 3)
    # Offsets are bounded as the cell's validation bounds them; the tilt correction to +-20 mrad.
    bound = np.r_[np.full(ARM_DOF, 0.02), np.full(3, 0.02)]
    sol = least_squares(residual, x0, bounds=(-bound, bound), x_scale=1e-3, xtol=1e-12,
                        ftol=1e-12, gtol=1e-12)
    rms = float(np.sqrt(np.mean(np.sum(sol.fun.reshape(-1, 3) ** 2, axis=1))))
    return sol.x[:ARM_DOF].copy(), rms
