"""Fixtures shared across test folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `scripts/<name>` as a user would, from the repository root."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture(scope="session")
def real_demos(tmp_path_factory) -> Path:
    """Eight teleoperated demos recorded on the reality twin (no images), as collect_real.py writes them."""
    out = tmp_path_factory.mktemp("real") / "real.hdf5"
    result = run_script("collect_real.py", "--num-demos", "8", "--output", str(out), "--cameras", "--seed", "0")
    assert result.returncode == 0, result.stderr
    return out
