"""Corrective data (datagen.corrective_noise): the executed motion is perturbed, the recorded actions are not."""

import numpy as np
import pytest

from r2s2r.core import ConfigError, parse_dotted
from r2s2r.data import DemoReader
from r2s2r.datagen import generate, make_generate_cfg
from r2s2r.datagen.replay import replay_dataset
from r2s2r.datagen.worker import CorrectiveNoise, Worker

PLANNER = "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0"
NOISE = ["datagen.corrective_noise=[0.02,0.01,0.005]", "datagen.corrective_tau=0.5"]


def planner_cfg(*extra, n=1):
    return make_generate_cfg(PLANNER, n, 3, parse_dotted(["env.cameras=[]", "datagen.chunk_size=1", *extra]))


def test_the_offset_is_an_ornstein_uhlenbeck_process_of_the_asked_std_and_correlation_time():
    std, tau, dt = np.array([0.02, 0.01, 0.005]), 0.5, 0.05
    noise = CorrectiveNoise(tuple(std), tau, dt, np.random.default_rng(0))
    zero = np.zeros(27)
    offsets = np.array([noise(zero)[:3] for _ in range(60_000)])
    assert np.all(np.abs(offsets[0]) < 4 * std * np.sqrt(1 - np.exp(-2 * dt / tau)))  # starts from 0
    settled = offsets[200:]
    np.testing.assert_allclose(settled.std(axis=0), std, rtol=0.08)
    lag = round(tau / dt)  # one correlation time: autocorrelation 1/e
    corr = [np.corrcoef(settled[:-lag, k], settled[lag:, k])[0, 1] for k in range(3)]
    np.testing.assert_allclose(corr, np.exp(-1), atol=0.05)
    # Only the position is perturbed: orientation and hand targets pass through.
    action = np.arange(27, dtype=float)
    executed = noise(action)
    np.testing.assert_array_equal(executed[3:], action[3:])
    assert not np.array_equal(executed[:3], action[:3])


def test_an_attempt_records_the_generators_clean_commands_while_the_hand_runs_off_them():
    clean, noisy = Worker(planner_cfg()), Worker(planner_cfg(*NOISE))
    index = next(i for i in range(6) if clean.attempt(i).admitted)
    a, b = clean.attempt(index), noisy.attempt(index)
    if not b.admitted:
        pytest.skip("this attempt fails under the noise; the comparison needs both admitted")
    actions_a, actions_b = a.demo["actions"], b.demo["actions"]
    ee_a, ee_b = a.demo["obs"]["ee_pose"][:, :3], b.demo["obs"]["ee_pose"][:, :3]
    # Before the descent (the planner's one correction to the measured object) the planner's commands are a
    # function of time alone: the noisy attempt recorded the same commands, while its hand went elsewhere.
    early = 15
    np.testing.assert_allclose(actions_b[:early], actions_a[:early], atol=1e-9)
    assert np.max(np.linalg.norm(ee_b[:early] - ee_a[:early], axis=1)) > 0.003
    # Over the attempt the hand strays from the recorded command further than the clean run's does.
    gap_a = np.linalg.norm(actions_a[:, :3] - ee_a, axis=1)
    gap_b = np.linalg.norm(actions_b[:, :3] - ee_b, axis=1)
    assert np.percentile(gap_b, 90) > np.percentile(gap_a, 90) + 0.005


def test_a_noisy_dataset_replays_with_each_attempts_offset(tmp_path):
    out = tmp_path / "noisy.hdf5"
    generate(planner_cfg(*NOISE, n=2), out, progress=False)
    report = replay_dataset(out)
    assert report.replayed == 2 and report.succeeded == 2, report.failures
    with DemoReader(out) as reader:
        assert '"corrective_noise": [0.02, 0.01, 0.005]' in reader.data_attrs()["generation_config"]


def test_bad_noise_settings_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"datagen.corrective_noise\[0\] = -0.01"):
        planner_cfg("datagen.corrective_noise=[-0.01,0,0]")
    with pytest.raises(ConfigError, match="datagen.corrective_tau = 0"):
        planner_cfg("datagen.corrective_tau=0", "datagen.corrective_noise=[0.01,0,0]")
    with pytest.raises(ConfigError, match="env.action_mode = 'ee_pose'"):
        planner_cfg("env.action_mode=joint", "datagen.corrective_noise=[0.01,0,0]")
    # Off, the run is described as before the option existed (earlier runs' shards still resume).
    assert "corrective_noise" not in planner_cfg().describe()["datagen"]
