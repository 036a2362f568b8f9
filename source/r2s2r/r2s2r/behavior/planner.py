"""Grasp generator + motion planner: picks the moving object without any human reference.

At reset the planner takes the best reachable grasp from `grasps.GraspGenerator`, predicts the object's path on
the belt (straight along +x at the belt's speed), picks the earliest meeting time the arm can make within its joint
velocity limits, and plans the whole episode as one time-parameterised joint path:

    approach   joint-space quintic from the current posture to a pre-grasp pose above the predicted object,
               arriving with the belt's velocity;
    descend    straight down onto the grasp while riding along with the belt (dense IK);
    close      the hand synergy closes while the hand keeps riding with the belt;
    lift       up, shedding the belt's velocity;
    carry      joint-space quintic to above the target bin, lower, release (fingers open at a limited rate
               into a spread hand);
    retreat    home, planned only if the episode runs on past the release (it usually ends there, the object at
               rest in its bin).

Joint-space segments are collision-checked against the static scene and the other arm on a scratch `MjData`
(with the held object attached to the hand after the grasp); a colliding segment gets one via point above it.
Each action is the grasp-site pose from forward kinematics of the planned joints, slightly ahead of time to make up
for the joint drives' tracking lag.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import mujoco
import numpy as np
from scipy.interpolate import CubicSpline

from r2s2r.behavior.base import BehaviorGenerator, GenerationError
from r2s2r.behavior.grasps import Grasp, GraspGenerator, GraspGeneratorCfg
from r2s2r.cell import robots
from r2s2r.cell.mjcf import OBJECT, ROBOT, STATIC, object_body_name
from r2s2r.control.grasp import HAND_OPEN, HAND_RELEASE
from r2s2r.control.ik import ArmIK
from r2s2r.core import ConfigError
from r2s2r.geometry import mat_to_quat, quat_to_mat, rpy_to_mat
from r2s2r.trajectory import min_jerk, quintic

# The scratch scene's contact bit for the left arm (the cell's bits are STATIC, OBJECT, ROBOT).
LEFT_ARM = 8


@dataclass(frozen=True)
class PlannerCfg:
    """Timing, geometry and safety margins of the planned pick.

    Attributes:
        velocity_fraction: fraction of each arm joint's velocity limit the free-space segments may use.
        reach_x: (low, high) world x (m) where the arm may meet the object (top-down grasps reach there).
        yaw_center: centre (rad) of the half-turn of hand yaws used; a grasp outside it is turned by pi, which the
            object's half-turn symmetry allows (the wrist reaches yaws in about [-pi/4, 3 pi/4) from home).
        reaction_time: earliest start (s) of the approach after reset.
        meet_step: resolution (s) of the meeting-time search.
        hover_height: height (m) of the pre-grasp pose above the grasp.
        descent_time: duration (s) of the descent onto the grasp, riding with the belt.
        close_time: duration (s) over which the hand synergy closes, riding with the belt.
        hold_time: time (s) the closed hand keeps riding with the belt before lifting (the grip settles).
        lift_height: height (m) of the lift above the grasp.
        lift_time: duration (s) of the lift.
        carry_height: grasp-site height (m, world) above the bin before lowering.
        release_height: grasp-site height (m) above the bin floor where the hand opens.
        release_rate: rad/s limit on opening hand joints (a step open flings the object out of the bin).
        settle_time: time (s) the open hand waits over the bin before retreating.
        lead: time (s) the commanded pose runs ahead of the plan, about the drives' lag (kd / kp of the arm).
        ik_tolerance: largest grasp-site position error (m) of an IK solution.
        max_grasps: best-ranked grasps tried before giving up.
        collision_tolerance: penetration (m) below which a contact does not count as a collision.
        arm_clearance: smallest distance (m) kept between the two arms.
        via_height: how far (m) a via point rises above a colliding segment's higher end.
        correction_limit: largest prediction error (m) corrected when the descent starts; larger is a failure of
            the prediction and left alone.
        sample_dt: time step (s) of the planned path.
        grasp: the grasp generator's settings.
    """

    velocity_fraction: float = 0.6
    reach_x: tuple[float, float] = (0.0, 0.50)
    yaw_center: float = np.pi / 4
    reaction_time: float = 0.1
    meet_step: float = 0.1
    hover_height: float = 0.08
    descent_time: float = 0.5
    close_time: float = 0.3
    hold_time: float = 0.2
    lift_height: float = 0.15
    lift_time: float = 0.6
    carry_height: float = 0.30
    release_height: float = 0.16
    release_rate: float = 4.0
    settle_time: float = 0.3
    lead: float = 0.05
    ik_tolerance: float = 0.003
    max_grasps: int = 8
    collision_tolerance: float = 0.002
    arm_clearance: float = 0.02
    via_height: float = 0.15
    correction_limit: float = 0.03
    sample_dt: float = 0.01
    grasp: GraspGeneratorCfg = field(default_factory=GraspGeneratorCfg)

    def validate(self) -> PlannerCfg:
        self.grasp.validate()  # now, with the run's config, not when a worker builds the grasp generator
        checks = (
            (0 < self.velocity_fraction <= 1, "velocity_fraction", self.velocity_fraction, "a fraction in (0, 1]"),
            (self.reach_x[0] < self.reach_x[1], "reach_x", self.reach_x, "low < high"),
            (self.meet_step > 0, "meet_step", self.meet_step, "> 0"),
            (min(self.descent_time, self.close_time, self.lift_time) > 0, "descent/close/lift_time",
             (self.descent_time, self.close_time, self.lift_time), "durations > 0"),
            (self.release_rate > 0, "release_rate", self.release_rate, "> 0"),
            (self.lead >= 0, "lead", self.lead, ">= 0"),
            (self.max_grasps >= 1, "max_grasps", self.max_grasps, ">= 1"),
            (0 < self.sample_dt <= 0.05, "sample_dt", self.sample_dt, "a step in (0, 0.05] s"),
        )
        for ok, name, value, expected in checks:
            if not ok:
                raise ConfigError(f"generator.{name} = {value!r}: expected {expected}")
        return self


# IK iterations with the pull toward home before a solve from a distant seed converges without it: enough to settle
# the elbow (each iteration moves at most 0.5 rad), far fewer than the pull needs to reach 0.1 mm itself.
POSTURE_ITERATIONS = 20
# A solve stops when its update moves the joints less than this (rad): the pose is out of reach, or as close as the
# solver gets; converging solves reach the 0.1 mm tolerance first.
MIN_STEP = 1e-5
# Samples of the grasp path between IK knots (50 ms at the default sample_dt): its motions take 0.3 s or more, slow
# enough that the joints' cubic interpolation of such knots stays within the solver's 0.1 mm of the path.
KNOT_STRIDE = 5


class PlannerGenerator(BehaviorGenerator):
    """Plans grasp, interception and placement at reset, then replays the plan as `ee_pose` actions.

    Args:
        cfg: planner settings; defaults to `PlannerCfg()`.
    """

    name = "planner"

    def __init__(self, cfg: PlannerCfg | None = None):
        self.cfg = (cfg or PlannerCfg()).validate()
        self._model: mujoco.MjModel | None = None
        self._grasps: dict[tuple, list[Grasp]] = {}
        self.times = np.zeros(0)
        self.q_path = np.zeros((0, 7))
        self.retreat_from: tuple[np.ndarray, np.ndarray] | None = None  # (release, above-bin joints) until planned
        self.hand_path = np.zeros((0, 20))

    # ----------------------------------------------------------------------------------------------------------
    def _bind(self, env) -> None:
        """Scratch copies of the model for IK, collision checks and grasp synthesis (once per model)."""
        if self._model is env.model:
            return
        m = env.model
        self._model = m
        self.scene = copy.deepcopy(m)
        self.data = mujoco.MjData(self.scene)
        self.home = np.array(env.cell.arm("right").home_q)
        self.ik = ArmIK(self.scene, "right", home_q=self.home)
        # From a nearby solution the seed already holds the posture: the home pull would only keep the solver from
        # converging, costing many times the iterations for the same 0.1 mm.
        self.track = ArmIK(self.scene, "right")
        self.vmax = np.array([link.velocity for link in robots.rizon4s().links])
        self.arm_qadr, self.hand_qadr, self.site = env.index.arm_qadr, env.index.hand_qadr, env.index.grasp_site
        right = m.body_rootid[m.geom_bodyid] == m.body("right_base").id
        left = m.body_rootid[m.geom_bodyid] == m.body("left_base").id
        solid = m.geom_contype > 0
        hand_root = m.body("right_palm").id
        finger = np.array([m.body(b).name.startswith("right_finger") for b in range(m.nbody)])[m.geom_bodyid]
        is_object = np.array([m.body(b).name.startswith("obj_") for b in range(m.nbody)])[m.geom_bodyid]
        self.robot_geoms = right & solid  # the whole right arm and hand
        self.arm_geoms = right & solid & ~finger  # links and palm: what may not touch the scene while grasping
        self.static_geoms = ((m.geom_contype & STATIC) > 0) & ~right & ~left & ~is_object
        # The two arms do not collide in the physics (robot geoms ignore each other); in the scratch scene the right
        # arm's outer links and palm meet every solid left-arm geom in contacts that start `arm_clearance` apart
        # (the left geoms' margin), so one collision pass checks the scene and the arms' distance.
        outer = np.isin(m.geom_bodyid, [m.body(f"right_link{i}").id for i in range(3, 8)] + [hand_root])
        self.right_outer = outer & solid
        self.left_geoms = left & solid
        # The scratch scene's collision filter generates only the contacts `collision_at` counts: the right arm and
        # the held object against the static scene (the objects are switched on one at a time, in reset), and the
        # right arm's outer geoms against the left arm.
        scene = self.scene
        scene.geom_contype[:] = np.where(self.static_geoms, STATIC, np.where(self.robot_geoms, ROBOT, 0))
        scene.geom_conaffinity[:] = np.where(self.static_geoms, ROBOT | OBJECT, np.where(self.robot_geoms, STATIC, 0))
        scene.geom_contype[self.left_geoms] = LEFT_ARM
        scene.geom_conaffinity[self.right_outer] |= LEFT_ARM
        scene.geom_margin[self.left_geoms] = self.cfg.arm_clearance
        self.object_geoms = np.flatnonzero(is_object & solid)
        # MuJoCo's broad phase first filters body pairs, by bits and margins compiled from their geoms': recompute
        # them for this filter, with every object as reset may switch it on.
        contype, conaffinity = scene.geom_contype.copy(), scene.geom_conaffinity.copy()
        contype[self.object_geoms], conaffinity[self.object_geoms] = OBJECT, STATIC
        scene.body_contype[:] = scene.body_conaffinity[:] = scene.body_margin[:] = 0
        np.bitwise_or.at(scene.body_contype, scene.geom_bodyid, contype)
        np.bitwise_or.at(scene.body_conaffinity, scene.geom_bodyid, conaffinity)
        np.maximum.at(scene.body_margin, scene.geom_bodyid, scene.geom_margin)
        self.key_qpos = m.key_qpos[0].copy()
        self.grasp_generator = GraspGenerator(m, self.cfg.grasp, cache=True)
        self._grasps.clear()

    def reset(self, env, obs: dict, rng: np.random.Generator) -> dict:
        """Plan the episode. The plan depends only on the observation and the model, so `rng` is not drawn from."""
        start = time.perf_counter()
        self._bind(env)
        cfg = self.cfg
        priv = obs["privileged"]
        self.obj = env.obj
        self.dt = 1.0 / env.cfg.control_hz
        self.k = 0
        self.obj_qadr = self.scene.joint(object_body_name(env.obj)).qposadr[0]
        self.obj_geom = self.scene.geom(object_body_name(env.obj)).id
        self.scene.geom_contype[self.object_geoms] = self.scene.geom_conaffinity[self.object_geoms] = 0
        self.scene.geom_contype[self.obj_geom], self.scene.geom_conaffinity[self.obj_geom] = OBJECT, STATIC
        key = (env.obj.name, env.obj.shape, tuple(env.obj.size))
        if key not in self._grasps:
            self._grasps[key] = self.grasp_generator.generate(env.obj)
        grasps = [g for g in self._grasps[key] if g.n_fingers >= 2][:cfg.max_grasps]
        if not grasps:
            raise GenerationError("no_grasp", f"object {env.obj.name!r}: no candidate grasp touches it with two "
                                              "or more fingers")
        self.p0 = np.array(priv["object_pos"], dtype=float)
        self.v = float(priv["belt_speed"][0])
        r_obj = quat_to_mat(priv["object_quat"])
        self.obj_yaw = float(np.arctan2(r_obj[1, 0], r_obj[0, 0]))  # objects ride upright: their yaw is the pose
        self.bin_pos = np.array(priv["target_bin_pos"], dtype=float)
        q0 = np.array(obs["proprio"]["arm_q"], dtype=float)
        errors = []
        for g in grasps:
            try:
                attrs = self._plan(g, q0)
                break
            except GenerationError as e:
                errors.append(e)
        else:
            reasons = [e.reason for e in errors]
            reason = max(set(reasons), key=reasons.count)
            raise GenerationError(reason, f"no plan for {env.obj.name!r} with any of {len(grasps)} grasps: "
                                          + "; ".join(str(e) for e in errors[:3]))
        attrs["planning_time"] = time.perf_counter() - start
        return attrs

    # ----------------------------------------------------------------------------------------------------------
    def _plan(self, g: Grasp, q0: np.ndarray) -> dict:
        cfg = self.cfg
        yaw = self.obj_yaw
        # The object looks the same after a half turn about z: use the representative the wrist reaches.
        hand_yaw = (yaw + g.yaw - cfg.yaw_center + np.pi / 2) % np.pi + cfg.yaw_center - np.pi / 2
        yaw += hand_yaw - (yaw + g.yaw)
        r_yaw = rpy_to_mat((0.0, 0.0, yaw))
        self.grasp_rot = r_yaw @ g.rot
        self.grasp_offset = r_yaw @ g.pos
        self.grasp = g
        self.r_obj_held = self.grasp_rot @ g.rot.T  # object orientation in the hand, world frame, at the grasp
        self.correction = np.zeros(3)

        t_meet, q_pre, t_approach, cart_t, cart_q = self._meeting(q0)
        ts = np.arange(0.0, self.t_pre, cfg.sample_dt)
        # Approach: hold, then a quintic arriving at the pre-grasp with the descent's starting joint velocity.
        v_pre = (cart_q[1] - cart_q[0]) / cfg.sample_dt
        t_start = self.t_pre - t_approach
        approach = quintic(q0, cart_q[0], np.zeros(7), v_pre, t_approach, ts - t_start)
        approach[ts < t_start] = q0
        self._check_segment(approach, HAND_OPEN, None, "approach")
        hand_cart = self._hand_closing(cart_t)

        # Carry over the bin (the object's centre over the bin's), lower, open, rise and go home.
        q_above, q_release = self._over_bin(cart_q[-1])
        closed = g.hand_q
        segments = [self._route(cart_q[-1], q_above, closed, True), self._route(q_above, q_release, closed, True)]
        open_time = np.max(np.abs(HAND_RELEASE - closed)) / cfg.release_rate
        n_open = int(np.ceil((open_time + cfg.settle_time) / cfg.sample_dt))
        opening = closed + np.clip(np.arange(1, n_open + 1)[:, None] * cfg.sample_dt / max(open_time, 1e-9), 0, 1) \
            * (HAND_RELEASE - closed)
        q_parts = [approach, cart_q] + [s for s in segments] + [np.repeat(q_release[None], n_open, 0)]
        hand_parts = [np.repeat(HAND_OPEN[None], len(ts), 0), hand_cart] \
            + [np.repeat(closed[None], len(s), 0) for s in segments] + [opening]
        self.q_path = np.concatenate(q_parts)
        self.hand_path = np.concatenate(hand_parts)
        self.times = np.arange(len(self.q_path)) * cfg.sample_dt
        self.retreat_from = (q_release, q_above)
        self.cart_start = len(ts)
        self.cart_t = cart_t
        return {"grasp_yaw": float(g.yaw), "grasp_tilt": float(g.tilt), "grasp_palm_gap": float(g.palm_gap),
                "grasp_epsilon": float(g.epsilon), "grasp_fingers": int(g.n_fingers), "meet_time": float(t_meet),
                "meet_x": float(self._object_at(t_meet)[0]), "plan_duration": float(self.times[-1])}

    def _plan_retreat(self) -> None:
        """Append the way home to the plan (up from the release, then home). If it would collide, the open hand
        stays where it released the object."""
        (q_release, q_above), self.retreat_from = self.retreat_from, None
        try:
            retreat = [self._route(q_release, q_above, HAND_RELEASE, False),
                       self._route(q_above, self.home, HAND_RELEASE, False)]
        except GenerationError:
            return
        self.q_path = np.concatenate([self.q_path, *retreat])
        self.hand_path = np.concatenate([self.hand_path, *(np.repeat(HAND_RELEASE[None], len(s), 0) for s in retreat)])
        self.times = np.arange(len(self.q_path)) * self.cfg.sample_dt

    def _over_bin(self, q_lift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Joints above the bin and at the release height, the held object's centre over the bin's.

        The hand may turn about the vertical by a quarter turn either way when its grasp yaw is out of reach there.
        """
        cfg = self.cfg
        error = None
        for turn in (0.0, np.pi / 2, -np.pi / 2):
            r_turn = rpy_to_mat((0.0, 0.0, turn))
            rot, held = r_turn @ self.grasp_rot, (r_turn @ self.grasp_offset)[:2]  # held: site minus object centre
            above = np.array([*(self.bin_pos[:2] + held), cfg.carry_height])
            release = np.array([*(self.bin_pos[:2] + held), self.bin_pos[2] + cfg.release_height])
            for seed in (q_lift, self.home):
                try:
                    q_above = self._solve(above, rot, seed, "carry")
                    return q_above, self._solve(release, rot, q_above, "release", posture=False)
                except GenerationError as e:
                    error = e
        raise error

    def _object_at(self, t: float | np.ndarray) -> np.ndarray:
        """Predicted object centre at time(s) `t` after reset: straight along +x at the belt's speed."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        p = self.p0 + np.outer(t, [self.v, 0.0, 0.0])
        return p[0] if p.shape[0] == 1 else p

    def _meeting(self, q0: np.ndarray) -> tuple[float, np.ndarray, float, np.ndarray, np.ndarray]:
        """Earliest meeting time the arm makes with a collision-free grasp path.

        Returns (meeting time, pre-grasp joints, approach duration, grasp-path times, grasp-path joints).
        """
        cfg = self.cfg
        lo, hi = cfg.reach_x
        v = max(self.v, 1e-6)
        first = max((lo - self.p0[0]) / v, cfg.reaction_time + cfg.descent_time + 0.2)
        # The lift must start before the object would leave the window at the belt's speed.
        last = (hi - self.p0[0]) / v - cfg.close_time - cfg.hold_time
        error = GenerationError("unreachable", f"object at x = {self.p0[0]:.3f} m passes the reach window "
                                               f"{cfg.reach_x} before the arm can meet it")
        full_tries = 2  # whole grasp paths tried (the costly part) before this grasp is given up
        seed = self.home
        for t_meet in np.arange(first, last + 1e-9, cfg.meet_step):
            self.t_pre = t_meet - cfg.descent_time
            self.t_lift = t_meet + cfg.close_time + cfg.hold_time
            pre = self._site_at(self.t_pre) + np.array([0.0, 0.0, cfg.hover_height])
            try:  # cheap checks first: the pre-grasp and the grasp itself
                q_pre = self._solve(pre, self.grasp_rot, seed, "pre-grasp", posture=seed is self.home)
                seed = q_pre
                q_meet = self._solve(self._site_at(t_meet), self.grasp_rot, q_pre, "grasp", posture=False)
                self._check_segment(q_meet[None], HAND_OPEN, None, "grasp", arm_only=True)
                duration = self._min_duration(q0, q_pre, np.zeros(7), self._descent_velocity(q_pre))
                if cfg.reaction_time + duration > self.t_pre:
                    continue
                full_tries -= 1
                cart_t = np.arange(self.t_pre, self.t_lift + cfg.lift_time + 1e-9, cfg.sample_dt)
                cart_q = self._cartesian(cart_t, q_pre)
                self._check_segment(cart_q, HAND_OPEN, None, "grasp", arm_only=True)
            except GenerationError as e:
                error = e
                if full_tries == 0:
                    break
                continue
            peak = np.max(np.abs(np.diff(cart_q, axis=0)) / cfg.sample_dt / self.vmax)
            if peak <= 1.0:
                return t_meet, q_pre, duration, cart_t, cart_q
            error = GenerationError("unreachable", f"riding with the belt needs {peak:.2f} x the joint velocity "
                                                   "limit")
            if full_tries == 0:
                break
        raise error

    def _descent_velocity(self, q_pre: np.ndarray) -> np.ndarray:
        """Joint velocity at the pre-grasp that moves the site along +x at the belt's speed."""
        pos, rot = self.ik.site_pose(q_pre)
        h = self.cfg.sample_dt
        q1 = self._solve(pos + np.array([self.v * h, 0.0, 0.0]), rot, q_pre, "descent", posture=False)
        return (q1 - q_pre) / h

    def _site_at(self, t: float | np.ndarray) -> np.ndarray:
        return self._object_at(t) + self.grasp_offset

    def _grasp_path(self, t: np.ndarray) -> np.ndarray:
        """Grasp-site positions of descent, closure and lift at times `t` (the orientation is `grasp_rot`)."""
        cfg = self.cfg
        pos = self._site_at(t) + self.correction * min_jerk((t - self.t_pre) / cfg.descent_time)[:, None]
        tau = np.clip((t - self.t_pre) / cfg.descent_time, 0.0, 1.0)
        pos[:, 2] += cfg.hover_height * (1.0 - min_jerk(tau))
        lift = t > self.t_lift
        if lift.any():
            s = np.clip((t[lift] - self.t_lift) / cfg.lift_time, 0.0, 1.0)
            base = self._site_at(self.t_lift) + self.correction
            # Shed the belt's velocity smoothly (the x velocity falls from v to 0 over the lift) while rising, and
            # hand any correction back, so the lift ends where the rest of the plan starts.
            pos[lift] = base + np.outer(cfg.lift_time * self.v * (s - s**3 + s**4 / 2), [1.0, 0.0, 0.0]) \
                - np.outer(min_jerk(s), self.correction)
            pos[lift, 2] += cfg.lift_height * min_jerk(s)
        return pos

    def _cartesian(self, t: np.ndarray, q_seed: np.ndarray) -> np.ndarray:
        """Joint path along `_grasp_path` at times `t`, by IK, coarse to fine.

        IK at knots KNOT_STRIDE samples apart (each seeded by the one before); the samples between are the knots'
        cubic interpolation. Where an interval's middle sample misses the path by more than the solver's tolerance
        (its solve from the interpolation moves it), that sample becomes a knot, until no middle misses: interpolation
        errors peak mid-interval (`test_planner.py` checks every sample against the path).
        """
        pos, rot = self._grasp_path(t), self.grasp_rot
        solved = {}
        q = q_seed
        for i in np.unique(np.r_[np.arange(0, len(t), KNOT_STRIDE), len(t) - 1]):
            q = solved[i] = self._solve(pos[i], rot, q, "grasp path", iterations=30, posture=False)
        while True:
            knots = np.array(sorted(solved))
            path = CubicSpline(t[knots], [solved[i] for i in knots], axis=0)(t) if len(knots) > 1 \
                else np.array([solved[0]])
            missed = 0
            for i in (knots[:-1] + knots[1:])[np.diff(knots) > 1] // 2:
                q = self._solve(pos[i], rot, path[i], "grasp path", iterations=30, posture=False)
                if not np.array_equal(q, path[i]):
                    solved[i] = q
                    missed += 1
            if not missed:
                return path

    def _hand_closing(self, t: np.ndarray) -> np.ndarray:
        """Hand targets along the Cartesian segment: open, then the synergy closes over `close_time`."""
        t_meet = self.t_pre + self.cfg.descent_time
        s = min_jerk((t - t_meet) / self.cfg.close_time)[:, None]
        return HAND_OPEN + s * (self.grasp.hand_q - HAND_OPEN)

    def _solve(self, pos: np.ndarray, rot: np.ndarray, seed: np.ndarray, what: str, iterations: int = 200,
               posture: bool = True) -> np.ndarray:
        """IK from `seed`. With `posture` (a seed that is not a nearby solution), the first iterations pull toward
        home, which picks the arm's configuration; the rest converge without the pull."""
        if posture:
            seed, _ = self.ik.solve(seed, pos, rot, iterations=POSTURE_ITERATIONS, tol=1e-4)
        q, err = self.track.solve(seed, pos, rot, iterations=iterations, tol=1e-4, min_step=MIN_STEP)
        if err > self.cfg.ik_tolerance:
            raise GenerationError("unreachable", f"{what} pose {np.round(pos, 3).tolist()} is out of reach "
                                                 f"(IK error {err * 1000:.1f} mm)")
        return q

    def _min_duration(self, q0: np.ndarray, q1: np.ndarray, v0: np.ndarray, v1: np.ndarray) -> float:
        """Shortest quintic duration keeping every joint within velocity_fraction of its limit."""
        limit = self.cfg.velocity_fraction * self.vmax
        # A rest-to-rest quintic peaks at 15/8 of the mean speed.
        duration = max(0.2, float(np.max(1.875 * np.abs(q1 - q0) / limit)))
        s = np.linspace(0.0, 1.0, 101)
        for _ in range(40):
            path = quintic(q0, q1, v0, v1, duration, s * duration)
            speed = np.abs(np.diff(path, axis=0)) / (duration / 100)
            if np.all(speed <= np.maximum(limit, np.abs(v0), np.abs(v1)) * 1.001):
                break
            duration *= 1.1
        return duration

    def _route(self, q0: np.ndarray, q1: np.ndarray, hand: np.ndarray, holding: bool) -> np.ndarray:
        """Rest-to-rest joint path from q0 to q1, with one via point above if the straight segment collides."""
        zero = np.zeros(7)

        def segment(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            duration = self._min_duration(a, b, zero, zero)
            return quintic(a, b, zero, zero, duration, np.arange(1, int(np.ceil(duration / self.cfg.sample_dt)) + 1)
                           * self.cfg.sample_dt)

        path = segment(q0, q1)
        if not self._collides(path, hand, holding):
            return path
        p0, p1 = self.ik.site_pose(q0)[0], self.ik.site_pose(q1)[0]
        via = (p0 + p1) / 2
        via[2] = max(p0[2], p1[2]) + self.cfg.via_height
        q_via = self._solve(via, self.grasp_rot, (q0 + q1) / 2, "via point")
        path = np.concatenate([segment(q0, q_via), segment(q_via, q1)])
        self._check_segment(path, hand, holding, "via route")
        return path

    # ----------------------------------------------------------------------------------------------------------
    def _check_segment(self, path: np.ndarray, hand: np.ndarray, holding: bool | None, what: str,
                       arm_only: bool = False) -> None:
        if self._collides(path, hand, bool(holding), arm_only):
            raise GenerationError("collision", f"the {what} segment collides with the scene")

    def _collides(self, path: np.ndarray, hand: np.ndarray, holding: bool, arm_only: bool = False) -> bool:
        """Whether any configuration of `path` hits the static scene or comes too close to the other arm.

        With `holding`, the object rides in the hand at the grasp and is checked too; with `arm_only`, the fingers
        are left out (they touch the belt on purpose while grasping).
        """
        configs = path[::2]
        # The approach holds still before it moves (about a third of all configurations checked): a configuration
        # equal to the one before it is not checked again.
        if len(configs) > 1:
            configs = configs[np.r_[True, np.any(configs[1:] != configs[:-1], axis=1)]]
        return any(self.collision_at(q, hand, holding, arm_only) for q in configs)

    def collision_at(self, q: np.ndarray, hand: np.ndarray, holding: bool, arm_only: bool = False) -> bool:
        """Whether the right arm at joints `q` (hand at `hand`) hits the static scene or nears the other arm."""
        m, d = self.scene, self.data
        qpos = d.qpos
        qpos[:] = self.key_qpos
        qpos[self.arm_qadr] = q
        qpos[self.hand_qadr] = hand
        mujoco.mj_kinematics(m, d)
        if holding:
            pos = d.site_xpos[self.site]
            rot = d.site_xmat[self.site].reshape(3, 3)
            r_obj = rot @ self.grasp.rot.T
            qpos[self.obj_qadr:self.obj_qadr + 3] = pos - r_obj @ self.grasp.pos
            qpos[self.obj_qadr + 3:self.obj_qadr + 7] = mat_to_quat(r_obj)
            mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        if not d.ncon:
            return False
        contact = d.contact
        g1, g2 = contact.geom1, contact.geom2
        moving = self.arm_geoms if arm_only else self.robot_geoms
        if holding:
            moving = moving.copy()
            moving[self.obj_geom] = True
        deep = contact.dist < -self.cfg.collision_tolerance
        hits = deep & ((moving[g1] & self.static_geoms[g2]) | (moving[g2] & self.static_geoms[g1]))
        arms = (contact.dist < self.cfg.arm_clearance) & (self.left_geoms[g1] | self.left_geoms[g2])
        return bool(np.any(hits | arms))

    # ----------------------------------------------------------------------------------------------------------
    def __call__(self, obs: dict) -> np.ndarray:
        cfg = self.cfg
        t_now = self.k * self.dt
        if t_now < self.t_pre <= t_now + self.dt:
            self._correct(obs, t_now)
        self.k += 1
        if self.retreat_from is not None and self.k * self.dt + cfg.lead > self.times[-1]:
            self._plan_retreat()
        # The target for the end of this control period, run ahead by the drives' lag.
        t = min(self.k * self.dt + cfg.lead, self.times[-1])
        i = min(int(t / cfg.sample_dt), len(self.times) - 2)
        a = (t - self.times[i]) / cfg.sample_dt
        q = (1 - a) * self.q_path[i] + a * self.q_path[i + 1]
        t_hand = min(self.k * self.dt, self.times[-1])
        hand = self.hand_path[min(int(round(t_hand / cfg.sample_dt)), len(self.times) - 1)]
        pos, rot = self.ik.site_pose(q)
        return np.concatenate([pos, mat_to_quat(rot), hand])

    def _correct(self, obs: dict, t_now: float) -> None:
        """Shift the descent onto where the object really is, if the prediction is off by a small amount.

        Runs once as the descent starts (the fingers are still clear of the object): after that the plan follows
        the belt, not the measured object, which moves with the hand once touched.
        """
        error = np.array(obs["privileged"]["object_pos"], dtype=float) - self._object_at(t_now)
        error[2] = 0.0
        if not 0.002 < np.linalg.norm(error) <= self.cfg.correction_limit:
            return
        self.correction = error
        try:
            cart_q = self._cartesian(self.cart_t, self.q_path[self.cart_start])
        except GenerationError:
            self.correction = np.zeros(3)
            return
        self.q_path[self.cart_start:self.cart_start + len(cart_q)] = cart_q
