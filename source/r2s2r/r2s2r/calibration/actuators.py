"""Right-arm drive parameters from a recorded joint response: stiffness, joint damping and friction, latency.

The drive model is the cell's: a position actuator per joint (force kp * (target - q) - kd * dq, kd known and
fixed), viscous `joint_damping` and Coulomb `joint_frictionloss` in the joint, and a command latency of a whole
number of physics steps. The recorded log is reproduced by simulating the same excitation on a model of the cell,
and the parameters are those that make the simulated encoder trace match the recorded one.

Speed comes from structure. The excitation moves one joint at a time and returns it home before the next, so
each joint's three parameters are fitted on its own window, simulated from the logged state at the window's start
(only that window's steps, on one model and one `MjData`, with parameters written into the compiled model in
place). The fitting model is the right arm and its hand alone, with contacts disabled: the excitation keeps the
arm clear of everything, and nothing else in the cell acts on it. A second pass refits every joint with its
neighbours at their first-pass values, because a moving joint shakes the others through the inertia coupling.

The latency is chosen by the fit itself, not before it: a drive softer than the nominal one rises later, which a
later latency with the nominal drive imitates (onsets scored with the nominal drive can pick a step too many, and
every parameter fitted after that is wrong). Every candidate latency is screened by
fitting the drive on the opening of each joint's response (its step and hold: the latency, gain, damping and
friction all show there), and the best `REFINED` candidates are fitted in full; the one whose windows the fit
reproduces best wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np
from scipy.optimize import least_squares

from r2s2r.calibration import CalibrationError
from r2s2r.cell.mjcf import arm_joint_names, build_spec
from r2s2r.cell.spec import ARM_DOF, CellCfg
from r2s2r.sim import delayed

SIDE = "right"
MAX_LATENCY = 20  # physics steps; what `ArmCfg.validate` accepts
FIT_PASSES = 2
REFINED = 2  # candidate latencies fitted in full after screening
# Function evaluations per joint when screening a candidate latency: enough for the true latency to rank among the
# best `REFINED`, where the full fits decide; a wrong latency misses by far more than the screen's slack.
SCREEN_NFEV = 4

# Excitation layout, per joint (seconds): step up, ramp down through home, hold, chirp, settle at home.
LEAD_IN = 0.04
STEP_HOLD = 0.15
RAMP = 0.15
LOW_HOLD = 0.10
CHIRP = 0.25
# Each joint settles until the arm and the fingers are at rest again: a window's fit starts from the encoders alone,
# at rest. A joint with little friction keeps moving after a short settle; the next window then starts from motion
# the fit cannot see, and its friction comes out high. This settle leaves even such a joint at rest.
SETTLE = 0.5
FIT_TAIL = 0.15  # of the settle, the part each joint's fit window keeps (the rest is rest: it costs, tells nothing)
CHIRP_HZ = (2.0, 10.0)
# Step amplitude per joint (rad): a third of the joint's peak torque at the datasheet stiffness, so the drive never
# saturates (saturation would hide kp) while friction stays a visible fraction of the torque.
AMPLITUDE = (0.025, 0.025, 0.024, 0.024, 0.039, 0.039, 0.039)


def excitation_targets(home_q: np.ndarray, physics_hz: float) -> np.ndarray:
    """Joint targets that excite each right-arm joint in turn, for streaming at the physics rate.

    After a short hold at `home_q`, each joint in turn steps up by its amplitude, ramps down through home to minus
    the amplitude (a constant velocity, which separates viscous damping from friction), holds, runs a chirp
    sweeping 2-10 Hz around home (stiffness and damping shape its resonance), and settles at home so the next
    joint starts from rest. The whole excitation lasts 8.09 s.

    Args:
        home_q: (7,) the arm's home posture (rad), where the excitation starts and ends.
        physics_hz: the rate the targets will be streamed at.

    Returns:
        (T, 7) joint targets (rad).
    """
    home = np.asarray(home_q, dtype=float)
    if home.shape != (ARM_DOF,):
        raise CalibrationError(f"home_q has shape {home.shape}: expected ({ARM_DOF},)")
    if not physics_hz > 0:
        raise CalibrationError(f"physics_hz = {physics_hz!r}: expected a positive rate")

    def n(seconds: float) -> int:
        return max(1, int(round(seconds * physics_hz)))

    rows = [np.tile(home, (n(LEAD_IN), 1))]
    for j in range(ARM_DOF):
        a = AMPLITUDE[j]
        offset = np.concatenate([
            np.full(n(STEP_HOLD), a),
            np.linspace(a, -a, n(RAMP)),
            np.full(n(LOW_HOLD), -a),
            _chirp(n(CHIRP), physics_hz, 0.5 * a),
            np.zeros(n(SETTLE)),
        ])
        seg = np.tile(home, (len(offset), 1))
        seg[:, j] += offset
        rows.append(seg)
    return np.concatenate(rows)


def _chirp(count: int, physics_hz: float, amplitude: float) -> np.ndarray:
    """A linear sweep CHIRP_HZ[0] -> CHIRP_HZ[1] starting at zero phase."""
    t = np.arange(count) / physics_hz
    f0, f1 = CHIRP_HZ
    duration = count / physics_hz
    phase = 2 * math.pi * (f0 * t + 0.5 * (f1 - f0) / duration * t**2)
    return amplitude * np.sin(phase)


@dataclass(frozen=True)
class ActuatorEstimate:
    """Fitted drive parameters of the right arm (per joint, joint1..7) and the fit's residual.

    Attributes:
        kp: position gains (N*m/rad).
        joint_damping: viscous damping in the joints (N*m*s/rad), on top of the controller's known kd.
        joint_frictionloss: Coulomb friction (N*m).
        latency_steps: command latency in physics steps.
        rms: RMS difference (rad) between the whole recorded log and the log simulated with these values.
    """

    kp: tuple
    joint_damping: tuple
    joint_frictionloss: tuple
    latency_steps: int
    rms: float


class _ArmSim:
    """Simulates right-arm responses on one compiled model of the right arm and hand, with drive parameters set in
    place."""

    def __init__(self, cell: CellCfg):
        # The rest of the cell is left out: with contacts disabled nothing else acts on the arm (no tendon or
        # equality constraint links them), and the other arm and the free objects are four fifths of a step's cost.
        spec = build_spec(cell)
        for body in list(spec.worldbody.bodies):
            if body.name != f"{SIDE}_base":
                spec.delete(body)
        m = spec.compile()
        m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
        self.model = m
        self.data = mujoco.MjData(m)
        names = arm_joint_names(SIDE)
        self.act = np.array([m.actuator(n).id for n in names])
        self.qadr = np.array([m.joint(n).qposadr[0] for n in names])
        self.dof = np.array([m.joint(n).dofadr[0] for n in names])
        self.h = float(m.opt.timestep)

    def set_joint(self, j: int, kp: float, damping: float, friction: float) -> None:
        m = self.model
        a = self.act[j]
        m.actuator_gainprm[a, 0] = kp
        m.actuator_biasprm[a, 1] = -kp
        m.dof_damping[self.dof[j]] = damping
        m.dof_frictionloss[self.dof[j]] = friction

    def run(self, q0: np.ndarray, v0: np.ndarray, ctrl: np.ndarray) -> np.ndarray:
        """Start at arm state (q0, v0) with the hand at rest (as in the cell's home keyframe), apply ctrl rows (n, 7);
        qpos after each step."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[self.qadr] = q0
        d.qvel[self.dof] = v0
        out = np.empty((len(ctrl), ARM_DOF))
        for k, row in enumerate(ctrl):
            d.ctrl[self.act] = row
            mujoco.mj_step(m, d)
            out[k] = d.qpos[self.qadr]
        return out


def _windows(targets: np.ndarray, tail: int) -> list[tuple[int, int]]:
    """Per joint, the span [start, end) from its first move until `tail` steps after its last (or, if sooner, the
    next joint's first move or the end)."""
    moved = np.abs(targets - targets[0]) > 0
    firsts, lasts = [], []
    for j in range(ARM_DOF):
        idx = np.flatnonzero(moved[:, j])
        if len(idx) == 0:
            raise CalibrationError(f"targets never move joint {j + 1}: its drive parameters cannot be identified")
        firsts.append(int(idx[0]))
        lasts.append(int(idx[-1]))
    order = sorted(firsts)
    out = []
    for j in range(ARM_DOF):
        later = [f for f in order if f > firsts[j]]
        out.append((firsts[j], min(later[0] if later else len(targets), lasts[j] + 1 + tail)))
    if min(firsts) < 2:
        raise CalibrationError(f"targets move at step {min(firsts)}: expected the arm held at targets[0] for at least "
                               "2 steps first, so each response starts from a known rest")
    return out


def _start_state(log: np.ndarray, start: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    # The integrator updates q with the new velocity (semi-implicit Euler), so the last two encoder samples give
    # the velocity at the window's start up to the encoder's resolution.
    return log[start - 1], (log[start - 1] - log[start - 2]) / h


@dataclass
class _Drive:
    """Per-joint drive parameters during the fit: gain as a factor of the nominal gain, damping, friction."""

    kp_factor: np.ndarray
    damping: np.ndarray
    friction: np.ndarray


def _fit_drive(sim: _ArmSim, nominal_kp: np.ndarray, ctrl: np.ndarray, log: np.ndarray,
               windows: list[tuple[int, int]], start: _Drive, passes: int, span: int | None = None,
               max_nfev: int = 60) -> tuple[_Drive, float]:
    """Fit every joint's drive on its window (its first `span` steps, or all of it) for the command `ctrl`.

    Returns the fitted drive and the sum of squared window residuals (rad^2) of the last pass.
    """
    drive = _Drive(start.kp_factor.copy(), start.damping.copy(), start.friction.copy())
    for _pass in range(passes):
        squares = 0.0
        for j, (a, b) in enumerate(windows):
            b = b if span is None else min(b, a + span)
            for i in range(ARM_DOF):
                sim.set_joint(i, drive.kp_factor[i] * nominal_kp[i], drive.damping[i], drive.friction[i])
            q0, v0 = _start_state(log, a, sim.h)
            rec = log[a:b, j]

            def residual(x: np.ndarray, j=j, a=a, b=b, q0=q0, v0=v0, rec=rec) -> np.ndarray:
                sim.set_joint(j, x[0] * nominal_kp[j], x[1], x[2])
                return sim.run(q0, v0, ctrl[a:b])[:, j] - rec

            x0 = np.array([drive.kp_factor[j], drive.damping[j], drive.friction[j]])
            sol = least_squares(residual, x0, bounds=([0.2, 0.0, 0.0], [5.0, 50.0, 20.0]), x_scale=[0.05, 0.2, 0.05],
                                diff_step=1e-4, xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=max_nfev)
            drive.kp_factor[j], drive.damping[j], drive.friction[j] = sol.x
            squares += float(sol.fun @ sol.fun)
    return drive, squares


def identify_actuators(cell: CellCfg, targets: np.ndarray, log: np.ndarray) -> ActuatorEstimate:
    """Fit the right arm's drive parameters and latency to a recorded joint response.

    Args:
        cell: the cell to simulate (the ungrounded world with the registered base and fitted link offsets); its
            right arm's kp, joint_damping and joint_frictionloss are the starting guesses, its kd and armature
            are taken as known.
        targets: (T, 7) targets streamed to the arm at the physics rate (as `excitation_targets` makes them).
        log: (T, 7) the encoder log recorded while streaming them.

    Returns:
        The fitted `ActuatorEstimate`.

    Raises:
        CalibrationError: targets and log disagree in length or width, are not (T, 7), contain non-finite values,
            or do not move every joint.
    """
    targets = np.asarray(targets, dtype=float)
    log = np.asarray(log, dtype=float)
    if targets.ndim != 2 or targets.shape[1] != ARM_DOF:
        raise CalibrationError(f"targets have shape {targets.shape}: expected (T, {ARM_DOF})")
    if log.ndim != 2 or log.shape[1] != targets.shape[1]:
        raise CalibrationError(f"log has shape {log.shape}: expected width {ARM_DOF} to match the targets")
    if len(log) != len(targets):
        raise CalibrationError(f"log has {len(log)} samples but targets have {len(targets)}: expected one encoder "
                               "sample per streamed target")
    if not (np.isfinite(targets).all() and np.isfinite(log).all()):
        raise CalibrationError("targets or log contain NaN or infinite values")
    arm = cell.arm(SIDE)
    sim = _ArmSim(cell)
    windows = _windows(targets, int(round(FIT_TAIL / sim.h)))
    nominal_kp = np.array(arm.kp, dtype=float)
    nominal = _Drive(np.ones(ARM_DOF), np.array(arm.joint_damping, dtype=float),
                     np.array(arm.joint_frictionloss, dtype=float))

    # Screen every latency on the responses' openings (each joint's step and its hold).
    span = int(round(STEP_HOLD / sim.h))
    screened = [_fit_drive(sim, nominal_kp, delayed(targets, lat), log, windows, nominal, 1, span, SCREEN_NFEV)
                for lat in range(MAX_LATENCY + 1)]
    best = np.argsort([squares for _drive, squares in screened])[:REFINED]
    full = {int(lat): _fit_drive(sim, nominal_kp, delayed(targets, lat), log, windows, screened[lat][0], 1)
            for lat in best}
    latency = min(full, key=lambda lat: full[lat][1])
    ctrl = delayed(targets, latency)
    drive, _squares = _fit_drive(sim, nominal_kp, ctrl, log, windows, full[latency][0], FIT_PASSES - 1)

    kp = drive.kp_factor * nominal_kp
    for i in range(ARM_DOF):
        sim.set_joint(i, kp[i], drive.damping[i], drive.friction[i])
    simulated = sim.run(targets[0], np.zeros(ARM_DOF), ctrl)
    rms = float(np.sqrt(np.mean((simulated - log) ** 2)))
    return ActuatorEstimate(tuple(float(v) for v in kp), tuple(float(v) for v in drive.damping),
                            tuple(float(v) for v in drive.friction), latency, rms)
