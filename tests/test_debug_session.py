"""The debug window's session (`r2s2r.debug_session`), kit-less: a MuJoCo task and an Isaac Lab task of the same
world show the same episode draw for a seed; two seeds look different; a dataset episode replays to its outcome;
bad input is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.core import ConfigError
from r2s2r.debug_session import DebugSession, task_ids

ISAACLAB_TASK = "Isaac-R2S2R-PickSort-Grounded-v0"
MUJOCO_TASK = "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"  # the same world on MuJoCo C
STEPS = 3
VIEW = {"cameras": ("head_left",), "image_size": (48, 64)}  # enough to tell two looks apart


def _run(task: str, seed: int) -> tuple[dict, dict[str, np.ndarray], str]:
    session = DebugSession(task, seed=seed, condition="lighting", **VIEW)
    try:
        for _ in range(STEPS):
            session.step()
        return session.randomization(), session.images(), session.status
    finally:
        session.close()


@pytest.fixture(scope="module")
def isaaclab_runs() -> dict[int, tuple]:
    """The Isaac Lab task (Newton's Warp cameras here) for two seeds, one environment at a time."""
    return {seed: _run(ISAACLAB_TASK, seed) for seed in (0, 1)}


def test_the_session_lists_both_kinds_of_task():
    ids = task_ids()
    assert MUJOCO_TASK in ids and ISAACLAB_TASK in ids and "R2S2R-PickSort-v0" in ids


def test_an_isaaclab_task_shows_the_mujoco_tasks_draw_for_the_same_seed(isaaclab_runs):
    for seed, (draw, images, status) in isaaclab_runs.items():
        reference, _, _ = _run(MUJOCO_TASK, seed)
        assert draw == reference, seed  # object, colour, condition, belt set-point and drive, light gains
        assert status == f"{ISAACLAB_TASK} step {STEPS} seed {seed} lighting: running"
        assert set(images) == {"head_left"} and images["head_left"].shape == (48, 64, 3)
        assert all(im.std() > 5 for im in images.values())  # each camera sees the cell


def test_two_seeds_give_two_looks(isaaclab_runs):
    (draw0, images0, _), (draw1, images1, _) = isaaclab_runs[0], isaaclab_runs[1]
    assert draw0["light gain (r, g, b)"] != draw1["light gain (r, g, b)"]
    assert draw0["belt drive now (m/s)"] != draw1["belt drive now (m/s)"]
    head0, head1 = (im["head_left"].astype(float) for im in (images0, images1))
    assert np.abs(head0 - head1).mean() > 2  # levels of 255: the lighting and the object differ


def test_a_dataset_episode_replays_to_its_outcome(real_demos):
    from r2s2r.data import DemoReader

    with DemoReader(real_demos) as reader:
        recorded = reader.attrs(reader.names[1])
    session = DebugSession("R2S2R-PickSort-Real-v0", source="dataset episode", path=str(real_demos), episode=1,
                           cameras=())  # the replay's outcome needs no images
    try:
        assert session.seed == recorded["seed"] != 0  # the episode's own seed, not the window's
        while not session.done:
            session.step()
        assert session.info["success"] and session.step_index == len(session.actions)
        assert session.status.endswith(": success")
    finally:
        session.close()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"task": "R2S2R-Nope-v0"}, ConfigError, "task = 'R2S2R-Nope-v0': unknown task ID"),
    ({"task": ISAACLAB_TASK, "world": "ungrounded"}, ConfigError, "an Isaac Lab task ID names its world"),
    ({"task": MUJOCO_TASK, "source": "video"}, ConfigError, "source = 'video': expected one of"),
    ({"task": MUJOCO_TASK, "source": "checkpoint"}, ConfigError, "give the checkpoint file's path"),
    ({"task": MUJOCO_TASK, "source": "dataset episode", "path": "missing.hdf5"}, FileNotFoundError,
     "missing.hdf5: no such dataset file"),
])
def test_bad_input_is_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        DebugSession(**kwargs)


def test_an_episode_index_beyond_the_dataset_is_refused(real_demos):
    with pytest.raises(ConfigError, match=r"episode = 99: .* holds episodes 0 to 7"):
        DebugSession("R2S2R-PickSort-Real-v0", source="dataset episode", path=str(real_demos), episode=99)
