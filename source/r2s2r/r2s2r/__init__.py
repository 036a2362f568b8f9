"""r2s2r: real2sim2real co-training for the bimanual conveyor cell."""

__version__ = "0.1.0"
