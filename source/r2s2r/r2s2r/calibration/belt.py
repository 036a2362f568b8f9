"""Belt speed and object masses from tracker and scale readings.

Speed. A tracked object riding the belt moves at the belt's surface speed, so the slope of its position over time,
divided by the set point, is the drive's speed scale; several set points are combined by least squares through
the origin (true speed = scale x set point).

Jitter. The drive's speed is redrawn every control period, so the object's position is a random walk around the
constant-speed line, seen through tracker noise. Per-sample displacements are then the mean step plus white
jitter steps of variance (v dt jitter)^2 plus differenced tracker noise of covariance r * tridiag(-1, 2, -1). The
sine transform (DST-I) diagonalises that tridiagonal matrix, so the displacements' exact Gaussian likelihood is a
sum over independent coefficients, maximised over the jitter and r for all runs at once. The jitter is mostly seen
at low frequencies, where tracker noise is weak: a millimetre-noise tracker over a few seconds pins it down only to
tens of percent, so treat it as an order of magnitude. sqrt(r), the tracker noise along the travel that the fit
needs to explain the displacements, is the fit's residual: well above the tracker's stated noise, the runs are not
an object riding a belt (it slipped, the tracker lost it).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.fft import dst
from scipy.optimize import minimize

from r2s2r.calibration import CalibrationError

MIN_SAMPLES = 10


def _check_run(k: int, run: tuple[float, np.ndarray, np.ndarray]) -> tuple[float, np.ndarray, np.ndarray]:
    try:
        commanded, times, positions = run
    except (TypeError, ValueError):
        raise CalibrationError(f"runs[{k}]: expected a (commanded speed, times, positions) triple") from None
    commanded = float(commanded)
    times = np.asarray(times, dtype=float)
    positions = np.asarray(positions, dtype=float)
    if not commanded > 0:
        raise CalibrationError(f"runs[{k}]: commanded speed = {commanded!r}: expected > 0 m/s")
    if times.ndim != 1 or len(times) < MIN_SAMPLES:
        raise CalibrationError(f"runs[{k}]: times have shape {times.shape}: expected (N,) with N >= {MIN_SAMPLES}")
    if positions.shape != (len(times), 3):
        raise CalibrationError(f"runs[{k}]: positions have shape {positions.shape}: expected ({len(times)}, 3)")
    if not (np.isfinite(times).all() and np.isfinite(positions).all()):
        raise CalibrationError(f"runs[{k}]: times or positions contain NaN or infinite values")
    if np.any(np.diff(times) <= 0):
        raise CalibrationError(f"runs[{k}]: times are not strictly increasing")
    return commanded, times, positions


def belt_speed_scale(runs: list[tuple[float, np.ndarray, np.ndarray]]) -> tuple[float, float, float]:
    """The belt's true-to-commanded speed ratio, its relative speed jitter and the tracker noise the fit leaves.

    Args:
        runs: per belt run, (commanded speed (m/s), times (N,) in s, tracked object positions (N, 3) in m).

    Returns:
        (speed_scale, jitter, tracker_noise): the ratio of surface speed to set point, the standard deviation of
        the relative speed fluctuation per tracker sample period (the cell redraws it every 20 ms control period,
        which is also the tracker's period), and the standard deviation (m) of the position noise along the
        travel that the fit attributes to the tracker.

    Raises:
        CalibrationError: no runs, or a run with a non-positive set point, too few samples, mismatched shapes,
            non-finite values or non-increasing times.
    """
    if len(runs) == 0:
        raise CalibrationError("no belt runs: expected at least one (commanded speed, times, positions) run")
    checked = [_check_run(k, run) for k, run in enumerate(runs)]
    commanded = np.array([c for c, _, _ in checked])
    speeds, steps = [], []
    for _c, times, positions in checked:
        # Straight-line fit per axis: the velocity vector, whose direction is the belt's travel direction.
        t = times - times.mean()
        velocity = (t @ (positions - positions.mean(0))) / (t @ t)
        speed = float(np.linalg.norm(velocity))
        speeds.append(speed)
        along = positions @ (velocity / speed) if speed > 0 else positions[:, 0]
        steps.append((np.diff(along), float(np.median(np.diff(times)))))
    speeds = np.array(speeds)
    scale = float(speeds @ commanded / (commanded @ commanded))
    return scale, *_jitter(steps, speeds)


def _jitter(steps: list[tuple[np.ndarray, float]], speeds: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood relative jitter and tracker noise (m) from per-run displacement series (random walk plus
    tracker noise)."""
    coeffs, shapes, mean_steps = [], [], []
    for d, dt in steps:
        n = len(d)
        z = dst(d - d.mean(), type=1, norm="ortho")
        k = np.arange(1, n + 1)
        coeffs.append(z**2)
        shapes.append(2.0 - 2.0 * np.cos(np.pi * k / (n + 1)))  # eigenvalues of tridiag(-1, 2, -1)
        mean_steps.append(dt)
    step_len = np.array(mean_steps) * speeds

    def nll(x: np.ndarray) -> float:
        jitter2, r = math.exp(x[0]), math.exp(x[1])
        total = 0.0
        for z2, shape, s in zip(coeffs, shapes, step_len):
            lam = s * s * jitter2 + r * shape
            total += float(np.sum(np.log(lam) + z2 / lam))
        return total

    # Start from a 1 % jitter and a noise level read off the highest-frequency coefficients (noise dominated).
    r0 = max(float(np.mean(np.concatenate([z2[-len(z2) // 4:] / sh[-len(sh) // 4:]
                                           for z2, sh in zip(coeffs, shapes)]))), 1e-18)
    sol = minimize(nll, np.array([math.log(1e-4), math.log(r0)]), method="Nelder-Mead",
                   options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 2000})
    # The likelihood flattens as the jitter goes to zero; below 1e-4 it is indistinguishable from none.
    jitter = math.sqrt(math.exp(sol.x[0]))
    return (jitter if jitter > 1e-4 else 0.0), math.sqrt(math.exp(sol.x[1]))


def object_masses(readings: dict[str, np.ndarray]) -> dict[str, float]:
    """Each object's mass (kg): the mean of its scale readings (the scale's noise is zero-mean).

    Args:
        readings: object name -> repeated scale readings (kg).

    Returns:
        object name -> estimated mass (kg).

    Raises:
        CalibrationError: an object without readings, or with non-finite or non-positive readings.
    """
    out = {}
    for name, values in readings.items():
        v = np.asarray(values, dtype=float).ravel()
        if len(v) == 0:
            raise CalibrationError(f"masses[{name!r}]: no scale readings")
        if not np.isfinite(v).all():
            raise CalibrationError(f"masses[{name!r}]: readings contain NaN or infinite values")
        mass = float(v.mean())
        if mass <= 0:
            raise CalibrationError(f"masses[{name!r}]: mean reading {mass!r} kg: expected a positive mass")
        out[name] = mass
    return out
