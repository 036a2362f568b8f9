"""ActionChunks: receding horizon and temporal ensembling against a direct computation of what each step executes."""

import numpy as np
import pytest

from r2s2r.core import ConfigError
from r2s2r.policy.agent import with_execution
from r2s2r.policy.chunks import QUAT, ActionChunks
from r2s2r.policy.config import PolicyCfg


def random_chunk(rng: np.random.Generator, length: int = 6) -> np.ndarray:
    chunk = rng.normal(size=(length, 27))
    chunk[:, QUAT] /= np.linalg.norm(chunk[:, QUAT], axis=1, keepdims=True)
    return chunk


def run(chunks: ActionChunks, planned: list[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
    """Play len(planned) steps: the i-th plan is handed over whenever a chunk is wanted. Returns the actions and the
    steps at which a chunk was taken."""
    actions, taken, plans = [], [], iter(planned)
    for step in range(len(planned)):
        if chunks.wants_chunk:
            chunks.add(next(plans))
            taken.append(step)
        actions.append(chunks.next())
    return actions, taken


def test_receding_horizon_executes_the_first_actions_of_each_chunk():
    rng = np.random.default_rng(0)
    planned = [random_chunk(rng) for _ in range(12)]
    actions, taken = run(ActionChunks(execute=4), planned)
    assert taken == [0, 4, 8]
    for step, action in enumerate(actions):
        np.testing.assert_array_equal(action, planned[step // 4][step % 4])


@pytest.mark.parametrize("decay", [0.0, 0.5, -0.3])
@pytest.mark.parametrize("seed", range(3))
def test_ensembling_executes_the_weighted_mean_of_every_plan_for_the_step(decay, seed):
    rng = np.random.default_rng(seed)
    length = int(rng.integers(3, 8))
    planned = [random_chunk(rng, length) for _ in range(15)]
    actions, taken = run(ActionChunks(execute=1, ensemble=decay), planned)
    assert taken == list(range(15))  # a chunk every step
    for step, action in enumerate(actions):
        ages = np.arange(min(step, length - 1), -1, -1)  # oldest plan still covering the step first
        rows = np.stack([planned[step - a][a] for a in ages])
        signs = np.where(rows[:, QUAT] @ rows[-1, QUAT] < 0, -1.0, 1.0)
        rows[:, QUAT] *= signs[:, None]
        weights = np.exp(-decay * ages)
        expected = weights @ rows / weights.sum()
        expected[QUAT] /= np.linalg.norm(expected[QUAT])
        np.testing.assert_allclose(action, expected, atol=1e-12)
        assert np.isclose(np.linalg.norm(action[QUAT]), 1.0)


def test_a_quaternion_and_its_negative_average_to_the_same_orientation():
    chunk = np.zeros((4, 27))
    chunk[:, 3] = 1.0  # identity, w first
    flipped = -chunk
    chunks = ActionChunks(execute=1, ensemble=0.0)
    chunks.add(chunk)
    chunks.next()
    chunks.add(flipped)
    action = chunks.next()
    np.testing.assert_allclose(np.abs(action[QUAT]), [1.0, 0.0, 0.0, 0.0])


def test_a_strong_decay_follows_the_newest_plan_and_reset_forgets_every_plan():
    rng = np.random.default_rng(4)
    planned = [random_chunk(rng) for _ in range(5)]
    actions, _ = run(ActionChunks(execute=1, ensemble=5.0), planned)
    np.testing.assert_allclose(actions[-1][:3], planned[-1][0][:3], atol=0.05)
    chunks = ActionChunks(execute=1, ensemble=0.0)
    chunks.add(planned[0])
    chunks.reset()
    with pytest.raises(RuntimeError, match="no chunk"):
        chunks.next()


def test_execution_settings_are_validated_and_only_they_can_be_overridden():
    cfg = PolicyCfg()
    assert with_execution(cfg, {"ensemble": 0.2}).ensemble == 0.2
    assert with_execution(cfg, {"execute": 2}).execute == 2
    with pytest.raises(ConfigError, match="policy.ensemble"):
        with_execution(cfg, {"ensemble": float("nan")})
    with pytest.raises(ConfigError, match="policy.execute"):
        with_execution(cfg, {"execute": cfg.chunk + 1})
    with pytest.raises(ConfigError, match=r"\['chunk'\]: unknown"):
        with_execution(cfg, {"chunk": 4})


def test_the_command_line_sets_or_turns_off_ensembling_and_refuses_bad_values(capsys):
    import argparse

    from r2s2r import cli

    parser = argparse.ArgumentParser()
    cli.add_execution_args(parser)
    assert cli.execution_of(parser.parse_args([])) == {}
    assert cli.execution_of(parser.parse_args(["--ensemble", "0.3", "--execute", "2"])) == \
        {"execute": 2, "ensemble": 0.3}
    assert cli.execution_of(parser.parse_args(["--hand-cover", "0.08"])) == {"hand_cover": 0.08}
    off = cli.execution_of(parser.parse_args(["--ensemble", "off"]))
    assert off == {"ensemble": None}
    assert with_execution(PolicyCfg(ensemble=0.0), off).ensemble is None  # back to receding horizon
    for bad in ("nan", "9", "fast"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--ensemble", bad])
        assert f"invalid value '{bad}'" in capsys.readouterr().err
