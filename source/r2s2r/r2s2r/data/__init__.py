"""Demonstration datasets: the HDF5 layout shared with robomimic and Isaac Lab Mimic, written crash-safely."""

from r2s2r.data.hdf5 import (
    FORMAT_VERSION,
    DatasetError,
    Demo,
    DemoReader,
    DemoWriter,
    read_demos,
    validate_demo,
)

__all__ = [
    "FORMAT_VERSION",
    "DatasetError",
    "Demo",
    "DemoReader",
    "DemoWriter",
    "read_demos",
    "validate_demo",
]
