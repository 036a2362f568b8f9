"""Under Isaac Sim (Kit, an RTX GPU): the debug window (exts/r2s2r.debug) opened by scripts/debug_gui.py, loading
and stepping a task from the script's loop. Skipped where Isaac Sim does not import; the session it drives is tested
without Kit in tests/test_debug_session.py, the script's refusals in test_scripts.py."""

from __future__ import annotations

import importlib.util

import pytest
from test_scripts import isaaclab_p

from r2s2r.debug_session import DebugSession

pytestmark = [pytest.mark.isaacsim,
              pytest.mark.skipif(importlib.util.find_spec("isaacsim") is None,
                                 reason="needs Isaac Sim (RTX GPU); isaacsim does not import here")]

STEPS = 4


def _reference(task: str, seed: int) -> list[str]:
    """The status and randomization lines debug_gui.py prints, from a kit-less session of `task` (a MuJoCo task)."""
    session = DebugSession(task, seed=seed, condition="lighting")
    try:
        for _ in range(STEPS):
            session.step()
        return [session.status] + [f"  {k}: {v}" for k, v in session.randomization().items()]
    finally:
        session.close()


@pytest.mark.parametrize("task, reference_task", [
    # Kit starts, the extension loads, and the window builds and steps the Isaac Lab environment (RTX cameras): the
    # episode it shows is the one the MuJoCo task of the same world draws for the seed.
    ("Isaac-R2S2R-PickSort-Grounded-v0", "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"),
    # A MuJoCo task in the window: its cell opened as a stage of its own and posed from MuJoCo every step.
    ("R2S2R-PickSort-v0", "R2S2R-PickSort-v0"),
])
def test_the_window_loads_and_steps_a_task(task, reference_task):
    result = isaaclab_p("scripts/debug_gui.py", "--task", task, "--seed", "2", "--condition", "lighting",
                        "--steps", str(STEPS), "--viz", "none", timeout=900)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()  # Kit logs to stdout as well
    start = max(i for i, line in enumerate(out) if line.startswith(f"{task} step "))
    expected = _reference(reference_task, 2)
    lines = out[start:start + len(expected)]
    assert lines[0] == expected[0].replace(reference_task, task)
    assert lines[1:] == expected[1:]
