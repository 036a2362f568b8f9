"""Real2sim calibration (world grounding): estimators that read only what a real cell provides.

Each module turns one kind of recorded signal into parameters of a world file; `scripts/calibrate.py` runs them
all on a recorded session and writes the grounded world.
"""


class CalibrationError(ValueError):
    """The recorded data cannot support an estimate (too few views, target not found, degenerate points...)."""
