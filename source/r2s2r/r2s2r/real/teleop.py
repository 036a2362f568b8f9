"""A model of a human teleoperator driving a real cell through the task's 27-dim action interface.

The operator watches the cell's tracking signals (object pose and velocity, belt speed, target bin) and the
robot's measured hand pose, perceives them late, and moves a leader device whose pose the cell follows. The model
reproduces what distinguishes human demonstrations from the scripted controller:

* a perception/reaction delay: every decision is taken on observations that old, extrapolated along the belt
  (people anticipate a predictably moving object), and nothing moves before the first perception arrives;
* movements made of minimum-jerk submovements (bell-shaped speed profiles) whose duration grows with distance
  (Fitts' law), superimposed when a new one starts before the previous ends (Flash & Henis, 1991);
* intermittent corrective submovements whenever the hand is heading off target, no more often than a
  refractory period allows;
* smooth pursuit of the belt: a velocity-matching ramp, then corrections relative to the moving object;
* physiological tremor (8-12 Hz, about a millimetre);
* a grasp style and timing drawn per demonstration from a seeded generator: grasp yaw and height offsets,
  closure speed, hover height, descent duration, hold times, release height and opening rate.

The grasp geometry (palm-down power grasp across the object's long axis, grasp point above its centre, closed
and spread-open hand postures) comes from the scripted controller, which was tuned on this hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from r2s2r.behavior.scripted import ScriptedCfg
from r2s2r.control.grasp import GRASP_OFFSET, GRASP_ROT, HAND_CLOSED, HAND_OPEN, HAND_RELEASE, grasp_yaw
from r2s2r.geometry import mat_to_quat, quat_to_mat, rotation_error, rpy_to_mat
from r2s2r.real.interface import DEFAULT_PROMPT, RealCell, StepResult
from r2s2r.trajectory import min_jerk


def _axis_angle_to_mat(v: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.eye(3)
    k = v / angle
    kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + np.sin(angle) * kx + (1.0 - np.cos(angle)) * kx @ kx


@dataclass(frozen=True)
class TeleopCfg:
    """Ranges from which each demonstration's operator style is drawn (uniformly), and fixed operator traits.

    Ranges are (low, high) tuples; a demonstration uses one value from each for its whole length.
    """

    # Perception-to-action delay (s): what the operator acts on is this old. 150-300 ms is the usual simple
    # visual reaction time.
    reaction_time: tuple[float, float] = (0.15, 0.30)
    # Submovement duration = intercept + slope * distance (Fitts-like), scaled per demo by `pace`.
    movement_intercept: float = 0.30  # s
    movement_slope: float = 1.8  # s/m
    loaded_slope: float = 2.6  # s/m while carrying the object
    pace: tuple[float, float] = (0.85, 1.2)  # > 1: a slower, more deliberate operator
    # A new submovement is started when the planned end point misses the goal by more than this (m) ...
    correction_threshold: float = 0.006
    # ... but not sooner than this after the previous one started (s): the psychological refractory period.
    refractory: tuple[float, float] = (0.12, 0.22)
    # Tremor: frequency (Hz) and per-axis amplitude (m) of the leader device's oscillation. The frequency is
    # capped below the command stream's Nyquist limit (0.45 x control rate), since the cell only sees samples.
    tremor_hz: tuple[float, float] = (8.0, 12.0)
    tremor_amplitude: tuple[float, float] = (0.0006, 0.0013)
    # Grasp style.
    yaw_jitter: float = 0.10  # rad: the grasp yaw misses the object's long axis by up to this
    height_jitter: float = 0.004  # m: the grasp point sits up to this much above or below the scripted one
    closure_time: tuple[float, float] = (0.02, 0.10)  # s to close the fingers (min-jerk in joint space)
    hover_height: tuple[float, float] = (0.09, 0.13)  # m above the grasp point while waiting for the object
    descent_time: tuple[float, float] = (0.7, 1.0)  # s for the final vertical approach
    hold_time: tuple[float, float] = (0.35, 0.55)  # s the hand keeps following the belt after closing
    velocity_match_time: tuple[float, float] = (0.35, 0.55)  # s to ramp up to the belt's speed
    lead: tuple[float, float] = (0.12, 0.18)  # s of belt travel added to compensate the robot's lag (learnt)
    release_height: tuple[float, float] = (0.15, 0.18)  # m of grasp site above the bin floor when opening
    opening_rate: tuple[float, float] = (3.0, 5.0)  # rad/s of finger opening at release
    release_dwell: tuple[float, float] = (0.6, 0.9)  # s the hand stays over the bin after opening starts
    # Fixed traits (m and s): where the arm meets objects, carry height, and the slip test after the lift.
    pick_x_min: float = ScriptedCfg.pick_x_min
    pick_x_max: float = 0.6  # downstream of this the operator lets the object go
    patience: float = 15.0  # s: an object not yet picked by then is given up on
    carry_height: float = ScriptedCfg.carry_height
    align_tolerance: float = 0.02  # m between hand and grasp point (horizontal) before descending
    yaw_tolerance: float = 0.05  # rad
    max_yaw: float = 2.0  # rad either way from the home orientation: beyond it the wrist runs out of range
    # Visuomotor adaptation: the leader held still this long (s) before the seen hand counts as settled, and the
    # fraction of the seen offset taken into the learnt one per observation.
    adapt_settle_time: float = 0.4
    adapt_gain: float = 0.3
    adapt_limit: float = 0.01  # m per horizontal axis
    # Regrasps after a lift that left the object behind; then the operator gives up and the trial is stopped.
    max_regrasps: int = 1


@dataclass(frozen=True)
class TeleopStyle:
    """The values one demonstration was performed with (drawn from `TeleopCfg`)."""

    reaction_time: float
    pace: float
    refractory: float
    tremor_hz: float
    tremor_amplitude: tuple[float, float, float]
    tremor_phase: tuple[float, float, float]
    yaw_offset: float
    height_offset: float
    closure_time: float
    hover_height: float
    descent_time: float
    hold_time: float
    velocity_match_time: float
    lead: float
    release_height: float
    opening_rate: float
    release_dwell: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Submovement:
    start: float
    duration: float
    displacement: np.ndarray

    def at(self, t: float) -> np.ndarray:
        return self.displacement * min_jerk((t - self.start) / self.duration)


@dataclass
class _Channel:
    """One controlled quantity (position vector or yaw) as a base value plus superimposed submovements."""

    base: np.ndarray
    active: list[_Submovement] = field(default_factory=list)

    def value(self, t: float) -> np.ndarray:
        return self.base + sum((s.at(t) for s in self.active), np.zeros_like(self.base))

    def end_value(self) -> np.ndarray:
        return self.base + sum((s.displacement for s in self.active), np.zeros_like(self.base))

    def busy_until(self) -> float:
        return max((s.start + s.duration for s in self.active), default=-np.inf)

    def retire(self, t: float) -> None:
        """Fold finished submovements into the base (keeps the list short; the value is unchanged)."""
        done = [s for s in self.active if t >= s.start + s.duration]
        for s in done:
            self.base = self.base + s.displacement
        self.active = [s for s in self.active if t < s.start + s.duration]


@dataclass
class TeleopTrial:
    """What `HumanTeleop.drive` returns: the outcome and the step count of one trial."""

    seed: int
    success: bool
    failure: str | None
    steps: int
    info: dict
    style: TeleopStyle


class HumanTeleop:
    """A human operator model producing the cell's 27-dim actions (grasp-site xyz, quaternion w,x,y,z, 20 hand
    joint targets) from the `proprio` and `tracking` observation groups.

    Call `reset(seed)` before each trial (it draws the operator's style for that trial), then call the object
    with each observation; or let `drive(cell, seed)` run a whole trial. After a trial, `trace` holds the
    tremor-free commanded position, the tremor and the phase of every step, and `submovements` every
    submovement started, as (start time, duration, displacement).
    """

    def __init__(self, cfg: TeleopCfg | None = None, control_hz: float = 20.0):
        self.cfg = cfg or TeleopCfg()
        self.dt = 1.0 / control_hz
        self.control_hz = control_hz
        self.reset(0)

    # -- setup -------------------------------------------------------------------------------------------------
    def sample_style(self, rng: np.random.Generator) -> TeleopStyle:
        """Draw one demonstration's style from the configured ranges."""
        c = self.cfg
        u = lambda r: float(rng.uniform(*r))  # noqa: E731
        return TeleopStyle(
            reaction_time=u(c.reaction_time),
            pace=u(c.pace),
            refractory=u(c.refractory),
            tremor_hz=min(u(c.tremor_hz), 0.45 * self.control_hz),
            tremor_amplitude=tuple(float(a) for a in rng.uniform(*c.tremor_amplitude, 3)),
            tremor_phase=tuple(float(p) for p in rng.uniform(0.0, 2 * np.pi, 3)),
            yaw_offset=float(rng.uniform(-c.yaw_jitter, c.yaw_jitter)),
            height_offset=float(rng.uniform(-c.height_jitter, c.height_jitter)),
            closure_time=u(c.closure_time),
            hover_height=u(c.hover_height),
            descent_time=u(c.descent_time),
            hold_time=u(c.hold_time),
            velocity_match_time=u(c.velocity_match_time),
            lead=u(c.lead),
            release_height=u(c.release_height),
            opening_rate=u(c.opening_rate),
            release_dwell=u(c.release_dwell),
        )

    def reset(self, seed: int | None = None, style: TeleopStyle | None = None) -> TeleopStyle:
        """Start a new trial with a style drawn from `seed` (or the given `style`); returns the style."""
        # Its own stream, so the operator's style does not correlate with the cell's random draws for the seed.
        self.rng = np.random.default_rng(None if seed is None else (seed, 0x7E1E0))
        self.style = style or self.sample_style(self.rng)
        self.delay_steps = max(int(round(self.style.reaction_time / self.dt)), 1)
        self.t = 0.0
        self.history: list[dict] = []
        self.phase = "wait"
        self.phase_start = 0.0
        self.pos: _Channel | None = None
        self.yaw: _Channel | None = None
        self.drift_pos = np.zeros(3)
        # Velocity-matching ramp: velocity goes from v_from to v_to over [v_start, v_start + v_duration].
        self.v_from = self.v_to = np.zeros(3)
        self.v_start, self.v_duration = 0.0, 1.0
        self.next_decision = 0.0
        self.hand = HAND_OPEN.copy()
        self.hand_from, self.hand_goal, self.hand_start, self.hand_time = HAND_OPEN.copy(), HAND_OPEN.copy(), 0.0, 1.0
        self.hand_rate: float | None = None
        self.initial_rot: np.ndarray | None = None
        self.home: np.ndarray | None = None
        self.meet: np.ndarray | None = None
        self.first_move: float | None = None
        self.regrasps = 0
        # Offset between the leader device and the robot's hand at rest, learnt by watching the hand: the
        # operator aims the leader off the goal by it (visuomotor adaptation to the robot's tracking error).
        self.bias = np.zeros(3)
        self.trace: list[dict] = []
        self.submovements: list[tuple[float, float, np.ndarray]] = []
        return self.style

    @property
    def gave_up(self) -> bool:
        """True once the operator has abandoned the trial (the object was lost more often than they retry)."""
        return self.phase == "gave_up"

    # -- kinematic primitives ---------------------------------------------------------------------------------
    def _duration(self, distance: float) -> float:
        c = self.cfg
        # People move a held object more slowly than an empty hand.
        slope = c.loaded_slope if self.phase in ("lift", "carry", "lower") else c.movement_slope
        return self.style.pace * (c.movement_intercept + slope * distance)

    def _velocity(self, t: float) -> np.ndarray:
        return self.v_from + (self.v_to - self.v_from) * min_jerk((t - self.v_start) / self.v_duration)

    def _match_velocity(self, v: np.ndarray, duration: float) -> None:
        self.v_from = self._velocity(self.t)
        self.v_to = np.asarray(v, dtype=float)
        self.v_start, self.v_duration = self.t, duration

    def _command_pos(self, t: float) -> np.ndarray:
        return self.pos.value(t) + self.drift_pos

    def _planned_end(self, horizon: float) -> np.ndarray:
        """Where the command will be `horizon` seconds from now if no new submovement starts."""
        # The ramp's velocity integrated numerically: a handful of samples is plenty for a min-jerk ramp.
        ts = self.t + np.linspace(0.0, horizon, 9)
        vs = np.array([self._velocity(t) for t in ts])
        drift = np.trapezoid(vs, ts, axis=0) if horizon > 0 else np.zeros(3)
        return self.pos.end_value() + self.drift_pos + drift

    def _submove(self, displacement: np.ndarray, duration: float) -> None:
        self.pos.active.append(_Submovement(self.t, duration, displacement.copy()))
        self.submovements.append((self.t, duration, displacement.copy()))
        if self.first_move is None:
            self.first_move = self.t

    def _correct(self, goal_at: Callable[[float], np.ndarray]) -> None:
        """Start a corrective submovement if the plan misses where the goal will be when it would end.

        `goal_at(dt)` is where the robot's hand should be `dt` seconds from now.
        """
        if self.t < self.next_decision:
            return
        # The leader is aimed off the goal by the learnt leader-to-hand offset.
        error = goal_at(0.0) + self.bias - self._planned_end(0.0)
        duration = self._duration(float(np.linalg.norm(error)))
        error = goal_at(duration) + self.bias - self._planned_end(duration)
        if np.linalg.norm(error) > self.cfg.correction_threshold:
            self._submove(error, self._duration(float(np.linalg.norm(error))))
            self.next_decision = self.t + self.style.refractory

    def _turn_to(self, yaw: float) -> None:
        """Plan the hand's yaw toward `yaw` (one smooth rotation, re-aimed when the goal moves)."""
        miss = yaw - float(self.yaw.end_value()[0])
        if abs(miss) > 0.5 * self.cfg.yaw_tolerance and self.t >= self.yaw.busy_until() - 0.2:
            self.yaw.active.append(_Submovement(self.t, self.style.pace * (0.35 + 0.45 * abs(miss)), np.array([miss])))

    def _close_hand(self, goal: np.ndarray, duration: float) -> None:
        self.hand_from, self.hand_goal, self.hand_start, self.hand_time = self.hand.copy(), goal, self.t, duration
        self.hand_rate = None

    def _open_hand(self, goal: np.ndarray, rate: float) -> None:
        self.hand_goal, self.hand_rate = goal, rate

    def _go(self, phase: str) -> None:
        self.phase, self.phase_start = phase, self.t
        self.next_decision = self.t  # a new intention is acted on at once

    # -- perception ---------------------------------------------------------------------------------------------
    def _perceive(self) -> dict | None:
        """The observation the operator has taken in: `delay_steps` old, or None before the first one."""
        if len(self.history) <= self.delay_steps:
            return None
        return self.history[-1 - self.delay_steps]

    # -- policy -------------------------------------------------------------------------------------------------
    def __call__(self, obs: dict) -> np.ndarray:
        """The action for this control period, given the cell's current observation.

        `obs` has the real cell's groups `proprio` and `tracking`; the task's `privileged` group is accepted in
        place of `tracking`, so the model also drives the simulated task directly.
        """
        proprio = obs["proprio"]
        tracking = obs["tracking"] if "tracking" in obs else obs["privileged"]
        snapshot = {"ee": np.array(proprio["ee_pose"], dtype=float),
                    **{k: np.array(v, dtype=float) for k, v in tracking.items()}}
        self.history.append(snapshot)
        del self.history[:-(self.delay_steps + 2)]
        if self.pos is None:  # the leader device starts where the robot's hand is
            ee = snapshot["ee"]
            self.home = ee[:3].copy()
            self.pos = _Channel(ee[:3].copy())
            self.yaw = _Channel(np.zeros(1))
            self.initial_rot = quat_to_mat(ee[3:7])
        seen = self._perceive()
        if seen is not None:
            self._adapt(seen)
            self._decide(seen)
        # Advance the kinematics by one period.
        pos = self._command_pos(self.t)
        tremor = self._tremor(self.t)
        self.trace.append({"t": self.t, "command": pos.copy(), "tremor": tremor, "phase": self.phase})
        action = np.concatenate([pos + tremor, mat_to_quat(self._rotation(self.t)), self._hand_target()])
        self.t += self.dt
        self.drift_pos = self.drift_pos + 0.5 * (self._velocity(self.t - self.dt) + self._velocity(self.t)) * self.dt
        self.pos.retire(self.t)
        self.yaw.retire(self.t)
        return action

    def _adapt(self, seen: dict) -> None:
        """Update the leader-to-hand offset from a hand seen at rest under a leader held still."""
        settle = int(round(self.cfg.adapt_settle_time / self.dt))
        # The seen hand answers the commands sent before the seen observation; all of them must be the same.
        end = len(self.trace) - self.delay_steps
        if end - settle < 0:
            return
        commands = np.array([self.trace[i]["command"] for i in range(end - settle, end)])
        if np.ptp(commands, axis=0).max() > 0.002:
            return
        offset = commands[-1] - seen["ee"][:3]
        # Horizontal only, and bounded: an arm that does not answer a larger offset is at a limit, and pushing
        # the leader further would only twist the hand.
        bias = self.bias + self.cfg.adapt_gain * (offset - self.bias)
        limit = self.cfg.adapt_limit
        self.bias = np.array([np.clip(bias[0], -limit, limit), np.clip(bias[1], -limit, limit), 0.0])

    def _tremor(self, t: float) -> np.ndarray:
        s = self.style
        if self.first_move is None:  # a hand resting on the idle leader device does not shake it
            return np.zeros(3)
        onset = min((t - self.first_move) / 0.3, 1.0)
        return onset * np.array(s.tremor_amplitude) * np.sin(2 * np.pi * s.tremor_hz * t + np.array(s.tremor_phase))

    def _rotation(self, t: float) -> np.ndarray:
        yaw = float(self.yaw.value(t)[0])
        target = rpy_to_mat((0.0, 0.0, yaw)) @ GRASP_ROT
        # The hand starts in whatever orientation the robot holds and blends into the grasp orientation along
        # the first yaw movement, so it does not jump at the first command.
        blend = 1.0 - (min_jerk((t - self.first_move) / 0.6) if self.first_move is not None else 0.0)
        if blend <= 0.0:
            return target
        return _axis_angle_to_mat(blend * rotation_error(GRASP_ROT, self.initial_rot)) @ target

    def _hand_target(self) -> np.ndarray:
        if self.hand_rate is None:  # closing: a smooth squeeze over the style's closure time
            a = min_jerk((self.t - self.hand_start) / self.hand_time)
            self.hand = self.hand_from + (self.hand_goal - self.hand_from) * a
        else:  # opening: gradual, or the object is flung out of the bin
            step = self.hand_rate * self.dt
            self.hand = self.hand + np.clip(self.hand_goal - self.hand, -step, step)
        return self.hand.copy()

    def _nearest_yaw(self, yaw: float) -> float:
        """The equivalent grasp yaw (a power grasp is the same turned by half a turn) nearest the hand's."""
        current = float(self.yaw.end_value()[0])
        candidates = [yaw + k * np.pi for k in (-1, 0, 1) if abs(yaw + k * np.pi) <= self.cfg.max_yaw]
        return min(candidates, key=lambda y: abs(y - current)) if candidates else yaw

    def _grasp_point(self, seen: dict, ahead: float) -> np.ndarray:
        """Predicted grasp point `ahead` seconds after the perceived instant, for the held yaw."""
        s = self.style
        v = float(seen["belt_speed"][0])
        yaw_rot = rpy_to_mat((0.0, 0.0, float(self.yaw.end_value()[0])))
        offset = GRASP_OFFSET + np.array([0.0, 0.0, s.height_offset])
        return seen["object_pos"] + np.array([v * ahead, 0.0, 0.0]) + yaw_rot @ offset

    def _decide(self, seen: dict) -> None:
        c, s = self.cfg, self.style
        v_belt = np.array([float(seen["belt_speed"][0]), 0.0, 0.0])
        # What the operator sees is `reaction_time` old; they extrapolate the belt's motion to now, plus the
        # lead that they learnt compensates the robot's lag.
        latency = self.delay_steps * self.dt
        ee = seen["ee"][:3]
        elapsed = self.t - self.phase_start

        if self.phase == "wait":
            self._go("reach")
        if self.phase == "reach" and (seen["object_pos"][0] > c.pick_x_max or self.t > c.patience):
            self._go("gave_up")  # the object has ridden past where the arm can meet it, or time has run out
        if self.phase == "reach":
            goal_yaw = self._nearest_yaw(grasp_yaw(seen["object_quat"], seen["object_half_extents"])) + s.yaw_offset
            self._turn_to(goal_yaw)
            grasp_now = self._grasp_point(seen, latency + s.lead)
            hover = np.array([0.0, 0.0, s.hover_height])
            tracking = np.linalg.norm(self.v_to) > 0.0
            # The hand waits where the arm meets objects; it starts matching the belt's speed when the object is
            # half a ramp's travel upstream, so that the two line up when the ramp ends.
            if not tracking and grasp_now[0] + 0.5 * v_belt[0] * s.velocity_match_time >= c.pick_x_min:
                self._match_velocity(v_belt, s.velocity_match_time)
                tracking = True
            if tracking:
                self._correct(lambda dt: grasp_now + hover + v_belt * dt)
            else:
                wait_at = np.array([c.pick_x_min, grasp_now[1], grasp_now[2]]) + hover
                self._correct(lambda dt: wait_at)
            # Seen hand and seen object are equally old, so their offset is current.
            seen_grasp = self._grasp_point(seen, s.lead)
            # Roughly over the object and turned is enough: waiting for every small correction to settle lets
            # the object ride out of comfortable reach.
            aligned = (tracking and self.t >= self.v_start + self.v_duration
                       and np.linalg.norm(ee[:2] - seen_grasp[:2]) < c.align_tolerance
                       and abs(float(self.yaw.value(self.t)[0]) - goal_yaw) < c.yaw_tolerance)
            if aligned:
                # Latch the meeting point on the belt's prediction: once the fingers touch the object, its
                # measured position moves with the hand and chasing it would drag both off the belt.
                self.meet = grasp_now.copy()
                self._go("descend")
                self._submove(self.meet + self.bias - self._planned_end(0.0), s.descent_time)
        elif self.phase in ("descend", "close"):
            self.meet = self.meet + v_belt * self.dt
            if self.phase == "descend" and elapsed >= s.descent_time:
                self._go("close")
                self._close_hand(HAND_CLOSED, s.closure_time)
            elif self.phase == "close" and elapsed >= s.closure_time + s.hold_time:
                self._go("lift")
                self._match_velocity(np.zeros(3), 0.3)
                up = np.array([0.0, 0.0, c.carry_height - self._planned_end(0.0)[2]])
                self._submove(up, self._duration(float(np.linalg.norm(up))))
        elif self.phase == "lift":
            if ee[2] > c.carry_height - 0.03 or elapsed > 1.5:
                left_behind = seen["object_pos"][2] < ee[2] - 0.08
                if left_behind and self.regrasps >= c.max_regrasps:
                    self._go("gave_up")
                elif left_behind:  # another try, as an operator would
                    self.regrasps += 1
                    self._open_hand(HAND_OPEN, s.opening_rate)
                    self._go("reach")
                else:
                    self._go("carry")
        elif self.phase in ("carry", "lower"):
            # Bring the held object, wherever it sits in the hand, over the bin's centre.
            bin_pos = seen["target_bin_pos"]
            held = seen["object_pos"][:2] - ee[:2]
            height = c.carry_height if self.phase == "carry" else bin_pos[2] + s.release_height
            goal = np.array([*(bin_pos[:2] - held), height])
            self._correct(lambda dt: goal)
            if np.linalg.norm(ee - goal) < 0.02 or elapsed > 3.5:
                if self.phase == "carry":
                    self._go("lower")
                else:
                    self._go("release")
                    self._open_hand(HAND_RELEASE, s.opening_rate)
        elif self.phase == "release":
            if elapsed >= s.release_dwell:
                self._go("retreat")
                end = self._planned_end(0.0)
                up = np.array([end[0], end[1], c.carry_height]) - end
                self._submove(up, self._duration(float(np.linalg.norm(up))))
        elif self.phase == "retreat":
            if self.t >= self.pos.busy_until():
                self._correct(lambda dt: self.home)

    # -- a whole trial ------------------------------------------------------------------------------------------
    def drive(self, cell: RealCell, seed: int, condition: str = "nominal", prompt: str = DEFAULT_PROMPT,
              on_step: Callable[[dict, np.ndarray], None] | None = None, max_steps: int | None = None) -> TeleopTrial:
        """Run one trial on `cell`: reset it with `seed`, act until it ends (or `max_steps`), then stop it.

        `on_step(obs, action)` is called before each action is sent, with the observation it was chosen from.
        """
        obs = cell.reset(prompt=prompt, condition=condition, seed=seed)
        style = self.reset(seed)
        result = StepResult(obs, False, {"success": False, "failure": None})
        steps = 0
        try:
            while not result.done and not self.gave_up and (max_steps is None or steps < max_steps):
                action = self(obs)
                if on_step is not None:
                    on_step(obs, action)
                result = cell.act(action)
                obs = result.obs
                steps += 1
        finally:
            cell.stop()
        info = dict(result.info)
        return TeleopTrial(seed, bool(info.get("success", False)), info.get("failure"), steps, info, style)
