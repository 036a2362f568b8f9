"""Self-checks: each estimator's residual against the floor that the instruments' stated noise puts under it.

A fit that explains its recording no better than several times the noise the instruments add has not found the
parameters (a wrong latency candidate, a fiducial measured off its mark, a tracker that lost the object), and a
world grounded on it would be wrong without a word. Grounding therefore stops at such a fit, naming the estimator,
its residual and the bound.

Floors. A least-squares fit of p parameters to n measurements with independent noise of standard deviation s
leaves an expected mean squared residual of s^2 (n - p) / n per measurement; the RMS distance of 3-D points is
sqrt(3) times the per-axis figure. The noise figures are the instruments' (r2s2r.calibration.rig).

Bound = SAFETY x floor. Noise alone rarely reaches it: the smallest sample, a rigid fit of six points (12 degrees
of freedom), exceeds 1.8x its floor with probability 1e-4. The failures it must catch leave residuals well above it:
a latency one step off misplaces every onset of the actuator fit, and a fiducial surveyed millimetres off its mark
is several times the tracker's noise.
"""

from __future__ import annotations

import math

from r2s2r.calibration import CalibrationError

SAFETY = 3.0


def least_squares_floor(noise: float, measurements: int, parameters: int, axes: int = 1) -> float:
    """Expected RMS residual (per measurement of `axes` coordinates, as a distance) of a least-squares fit of
    `parameters` unknowns to `measurements` such measurements, each coordinate with noise std `noise`."""
    n = measurements * axes
    if n <= parameters:
        raise CalibrationError(f"{measurements} measurements of {axes} coordinates for {parameters} parameters: "
                               "expected more coordinates than parameters")
    return noise * math.sqrt(axes * (n - parameters) / n)


def quantisation_floor(resolution: float) -> float:
    """RMS error of readings rounded to `resolution` (uniform over one step)."""
    return resolution / math.sqrt(12.0)


def check_residual(estimator: str, residual: float, floor: float, unit: str) -> dict:
    """The record of one self-check, {residual, bound, unit}; `CalibrationError` if the residual is above the bound
    (or not a number)."""
    bound = SAFETY * floor
    if not residual <= bound:
        raise CalibrationError(f"{estimator}: residual {residual:.3g} {unit} is above its bound {bound:.3g} {unit} "
                               f"({SAFETY:g} x the {floor:.3g} {unit} that sensor noise leaves): the fit does not "
                               "explain the recording")
    return {"residual": float(residual), "bound": float(bound), "unit": unit}
