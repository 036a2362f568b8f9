"""Generation on several Isaac Lab environments at once (`generate.py --num_envs N`): the datagen worker runs its
attempts side by side, an environment taking the next attempt as soon as its own ends, and every attempt is the one
it would be alone.

Episodes are cut to EPISODE_S so that attempts end (time out) within the suite's budget; what is compared is each
attempt's whole course, the planner's actions step by step, which depend on the episode drawn, the generator's
stream and the physics of the environment that ran it.
"""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.core import ConfigError, parse_dotted
from r2s2r.datagen import make_generate_cfg
from r2s2r.datagen.worker import Worker, _Running, attempt_condition, attempt_seed

TASK = "Isaac-R2S2R-PickSort-Ungrounded-v0"
RUN_SEED = 10
NUM_ENVS = 2
ATTEMPTS = range(0, 3)  # three attempts on two environments: the third waits for the first to end
STEPS = 50  # control periods: the planner holds the arm still for the first ~35, then moves toward the object
EPISODE_S = STEPS / 20.0


@pytest.fixture(scope="module")
def runs():
    """The attempts side by side, then each alone (on environment 0, the other holding still), with every action
    each executed, by attempt."""
    import r2s2r.isaaclab_tasks.pick_sort.task as task_module

    executed: dict[int, list[np.ndarray]] = {}
    spy = _Running.executed

    def recording(self, action):
        out = spy(self, action)
        executed.setdefault(self.index, []).append(out.copy())
        return out

    build = task_module.generation_env_cfg

    def short(cfg):
        env_cfg = build(cfg)
        env_cfg.episode_length_s = EPISODE_S
        return env_cfg

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Running, "executed", recording)
        patch.setattr(task_module, "generation_env_cfg", short)
        cfg = make_generate_cfg(TASK, 1, RUN_SEED, parse_dotted(["env.cameras=[]"]), "planner", num_envs=NUM_ENVS)
        worker = Worker(cfg)
        try:
            together = list(worker.attempts(ATTEMPTS))
            side_by_side, executed = executed, {}
            alone = [worker.attempt(i) for i in ATTEMPTS]
        finally:
            worker.close()
    return together, side_by_side, alone, executed


def test_attempts_come_in_order_with_their_own_seed_and_condition(runs):
    together, _, alone, _ = runs
    cfg = make_generate_cfg(TASK, 1, RUN_SEED, {}, "planner")
    assert [a.index for a in together] == list(ATTEMPTS)
    for a, b in zip(together, alone):
        assert (a.seed, a.condition) == (attempt_seed(RUN_SEED, a.index), attempt_condition(cfg, a.index))
        assert (a.reason, a.steps) == (b.reason, b.steps) == ("timeout", STEPS)


def test_each_attempt_side_by_side_is_the_attempt_alone(runs):
    _, side_by_side, _, alone = runs
    assert sorted(side_by_side) == sorted(alone) == list(ATTEMPTS)
    for index in ATTEMPTS:
        a, b = np.array(side_by_side[index]), np.array(alone[index])
        assert a.shape == b.shape == (STEPS, 27)
        # The same episode, generator stream and physics: the planner's actions agree to float32 round-off.
        assert np.abs(a - b).max() < 1e-5, index
    # ... and the attempts are not all one: the commanded hand moves 0.38 m in two of them by the cut (the third's
    # planner is still waiting for its object), each on its own course.
    courses = [np.array(side_by_side[i])[:, :3] for i in ATTEMPTS]
    assert sum(np.linalg.norm(c[-1] - c[0]) > 0.1 for c in courses) >= 2
    assert all(np.abs(courses[i] - courses[j]).max() > 0.01 for i in ATTEMPTS for j in ATTEMPTS if i < j)


def test_num_envs_is_for_isaaclab_tasks_and_not_part_of_the_run():
    with pytest.raises(ConfigError, match="num_envs = 4: task 'R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0' "
                                          "runs on MuJoCo"):
        make_generate_cfg("R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0", 1, 0, num_envs=4)
    with pytest.raises(ConfigError, match="num_envs = 0: expected 1 to 4096"):
        make_generate_cfg(TASK, 1, 0, {}, "planner", num_envs=0)
    # A run resumes under any number of environments: its description (and so its shards) does not change.
    assert make_generate_cfg(TASK, 1, 0, {}, "planner", num_envs=8).digest() == \
        make_generate_cfg(TASK, 1, 0, {}, "planner").digest()
