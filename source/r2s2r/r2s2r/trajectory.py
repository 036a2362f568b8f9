"""Trajectory primitives shared by the controllers, the behaviour generators and the operator model: smooth 0 -> 1
profiles, Hermite segments between joint states, and resampling of a recorded path."""

from __future__ import annotations

import numpy as np


def smoothstep(s: np.ndarray | float) -> np.ndarray | float:
    """Cubic 0 -> 1 profile (clamped outside [0, 1]) with zero velocity at both ends."""
    s = np.clip(s, 0.0, 1.0)
    return s * s * (3 - 2 * s)


def min_jerk(tau: np.ndarray | float) -> np.ndarray | float:
    """Normalised minimum-jerk position profile: 0 at tau <= 0, 1 at tau >= 1, zero velocity and acceleration
    at both ends."""
    tau = np.clip(tau, 0.0, 1.0)
    return tau**3 * (10.0 - 15.0 * tau + 6.0 * tau**2)


def quintic(q0: np.ndarray, q1: np.ndarray, v0: np.ndarray, v1: np.ndarray, duration: float,
            t: np.ndarray) -> np.ndarray:
    """Quintic Hermite path from (q0, v0) to (q1, v1) with zero end accelerations, sampled at times `t` (k,)."""
    s = np.clip(t / duration, 0.0, 1.0)[:, None]
    s3, s4, s5 = s**3, s**4, s**5
    h1 = 10 * s3 - 15 * s4 + 6 * s5
    g0 = s - 6 * s3 + 8 * s4 - 3 * s5
    g1 = -4 * s3 + 7 * s4 - 3 * s5
    return q0 + h1 * (q1 - q0) + duration * (g0 * v0 + g1 * v1)


def interp_rows(array: np.ndarray, tau: float) -> np.ndarray:
    """Linear interpolation of rows at fractional index `tau` (clamped to the array)."""
    tau = float(np.clip(tau, 0.0, len(array) - 1))
    i = min(int(tau), len(array) - 2) if len(array) > 1 else 0
    a = tau - i
    return array[i] if len(array) == 1 else (1 - a) * array[i] + a * array[i + 1]
