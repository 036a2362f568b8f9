"""Invariants over every registered task ID."""

import dataclasses

import numpy as np
import pytest

import r2s2r.tasks as tasks
from r2s2r.behavior import GenerationError, generator_cfg, make_generator
from r2s2r.cell.world import load_world

IDS = list(tasks.TASKS)
GROUNDING = [t for t in IDS if tasks.TASKS[t].generator]


def test_the_four_grounding_variants_are_registered():
    combos = {(tasks.TASKS[t].kwargs["world"], tasks.TASKS[t].generator) for t in GROUNDING}
    assert combos == {(w, g) for w in ("grounded", "ungrounded") for g in ("mimic", "planner")}
    for t in GROUNDING:
        world = "Grounded" if tasks.TASKS[t].kwargs["world"] == "grounded" else "Ungrounded"
        behaviour = "Grounded" if tasks.TASKS[t].generator == "mimic" else "Ungrounded"
        assert t == f"R2S2R-PickSort-World{world}-Behavior{behaviour}-v0"


def test_the_task_names_datasets_may_carry_are_the_registered_ones():
    """The data layer checks a file's task against `r2s2r.task_ids` without importing the registry."""
    from r2s2r.isaaclab_tasks import TASKS as ISAACLAB_TASKS
    from r2s2r.task_ids import DATASET_TASKS

    assert sorted(DATASET_TASKS) == sorted([*IDS, *tasks.ISAACLAB_GENERATION_WORLDS])
    assert set(tasks.ISAACLAB_GENERATION_WORLDS) <= set(ISAACLAB_TASKS)


@pytest.mark.parametrize("task_id", IDS)
def test_every_task_has_the_same_spaces_and_its_world_loads(task_id):
    reference = tasks.make("R2S2R-PickSort-v0", cameras=("head_left",), image_size=(8, 8))
    env = tasks.make(task_id, cameras=("head_left",), image_size=(8, 8))
    try:
        assert env.action_space == reference.action_space
        assert env.observation_space == reference.observation_space
        if "world" in tasks.TASKS[task_id].kwargs:
            world = load_world(tasks.TASKS[task_id].kwargs["world"])
            assert env.world.sha256 == world.sha256 and env.cell == world.cell
        obs, _ = env.reset(seed=0)
        for group, space in env.observation_space.spaces.items():
            assert set(obs[group]) == set(space.spaces)
            for key, box in space.spaces.items():
                assert obs[group][key].shape == box.shape
    finally:
        env.close()
        reference.close()


@pytest.mark.parametrize("task_id", GROUNDING)
def test_every_generator_runs_in_its_task(task_id, real_demos):
    spec = tasks.TASKS[task_id]
    cfg = generator_cfg(spec.generator)
    if hasattr(cfg, "source"):
        cfg = dataclasses.replace(cfg, source=str(real_demos))
    gen = make_generator(spec.generator, cfg)
    env = tasks.make(task_id, cameras=())
    for seed in range(10):  # a generator may find no plan for one episode (GenerationError), not for all
        obs, _ = env.reset(seed=seed)
        try:
            attrs = gen.reset(env, obs, np.random.default_rng(seed))
            break
        except GenerationError:
            continue
    else:
        pytest.fail(f"{spec.generator} found no plan in 10 episodes of {task_id}")
    assert isinstance(attrs, dict)
    for _ in range(20):
        action = gen(obs)
        assert action.shape == (27,) and np.isfinite(action).all()
        obs, *_ = env.step(action)
    env.close()
