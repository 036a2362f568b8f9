"""rsl-rl on the Isaac Lab environment: the agents Isaac Lab's registry gives each task, Isaac Lab's
`RslRlVecEnvWrapper` around the residual task, two PPO iterations of rsl-rl's runner on the CPU, and the residual
task's base (the scripted controller) under zero and non-zero corrections.

The residual environment runs once for the module (`record`, in this process: Isaac Lab runs one simulation at a
time, and no other module's is open while this module's tests run), through the steps of Isaac Lab 3.0's rsl-rl
train command (`isaaclab_rl.entrypoints.backends.train_rsl_rl`) with a tiny rollout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

SEED = 0
ZERO_STEPS = 6  # control steps with a zero correction, compared to the scripted controller's on MuJoCo C
CORRECTION = np.linspace(-2.0, 2.0, 27)  # one step's action; beyond [-1, 1] at both ends, so the clamp shows
PPO_ITERATIONS = 2
PPO_STEPS = 3  # control steps per iteration (num_steps_per_env), one environment


def record(folder: Path) -> tuple[dict[str, np.ndarray], dict]:
    """Build the residual task as Isaac Lab's train command does, play its base with zero corrections and then one
    correction, then train PPO for PPO_ITERATIONS and reload the last checkpoint. Returns the arrays and facts seen;
    rsl-rl's log is under `folder/rsl_rl`."""
    import gymnasium as gym
    import torch
    from isaaclab_rl.rsl_rl import (
        RslRlVecEnvWrapper,
        check_rsl_rl_version,
        create_rsl_rl_runner,
        handle_deprecated_rsl_rl_cfg,
    )
    from isaaclab_tasks.utils.hydra import resolve_task_config
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from r2s2r.isaaclab_tasks import RESIDUAL_TASK

    arrays, facts = {}, {}
    env_cfg, agent_cfg = resolve_task_config(RESIDUAL_TASK, "rsl_rl_cfg_entry_point", overrides=[])
    facts["agent_cfg"] = type(agent_cfg).__name__
    env_cfg.seed = agent_cfg.seed  # as the train command seeds the environment
    env = gym.make(RESIDUAL_TASK, cfg=env_cfg)
    residual = env.unwrapped

    obs, _ = env.reset(seed=SEED)
    facts["policy_obs_dim"] = obs["policy"].shape[-1]
    sent, base, seen = [], [], [obs["policy"][0, 42:].numpy()]
    start = time.perf_counter()
    for _ in range(ZERO_STEPS):
        obs, *_ = env.step(torch.zeros(1, 27))
        sent.append(residual._pending[0].numpy().copy())  # the joint targets PickSortCellEnv received
        base.append(residual.base[0].copy())
        seen.append(obs["policy"][0, 42:].numpy())
    facts["step_s"] = (time.perf_counter() - start) / ZERO_STEPS
    env.step(torch.tensor(CORRECTION, dtype=torch.float32)[None])
    arrays.update(sent=np.array(sent), base=np.array(base), seen=np.array(seen),
                  corrected=residual._pending[0].numpy().astype(float) - residual.base[0],
                  scale=residual.scale.numpy())

    version = check_rsl_rl_version()
    agent_cfg = handle_deprecated_rsl_rl_cfg(agent_cfg, version)
    agent_cfg.num_steps_per_env = PPO_STEPS
    agent_cfg.algorithm.num_mini_batches = 1  # a batch of PPO_STEPS transitions
    vec = RslRlVecEnvWrapper(env, clip_actions=agent_cfg.clip_actions)
    facts["num_actions"] = vec.num_actions
    log_dir = folder / "rsl_rl"
    runner = create_rsl_rl_runner(vec, agent_cfg, log_dir=str(log_dir))
    start = time.perf_counter()
    runner.learn(num_learning_iterations=PPO_ITERATIONS, init_at_random_ep_len=agent_cfg.init_at_random_ep_len)
    facts["learn_s"] = time.perf_counter() - start
    runner.logger.writer.close()  # its SummaryWriter flushes every 10 s: write every event before reading them
    events = EventAccumulator(str(log_dir))
    events.Reload()
    facts["scalars"] = {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
                        if tag.startswith(("Loss/", "Perf/"))}
    facts["checkpoints"] = sorted(p.name for p in log_dir.glob("model_*.pt"))

    obs = vec.get_observations()
    arrays["trained"] = runner.get_inference_policy()(obs).detach().numpy()
    again = create_rsl_rl_runner(vec, agent_cfg, log_dir=None)
    arrays["fresh"] = again.get_inference_policy()(obs).detach().numpy()
    again.load(str(log_dir / f"model_{PPO_ITERATIONS - 1}.pt"))
    arrays["loaded"] = again.get_inference_policy()(obs).detach().numpy()
    facts["loaded_iteration"] = again.current_learning_iteration
    env.close()
    return arrays, facts


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict[str, np.ndarray], dict]:
    start = time.perf_counter()
    arrays, facts = record(tmp_path_factory.mktemp("rsl_rl"))
    print(f"record {time.perf_counter() - start:.0f} s, {facts['step_s']:.2f} s per control step, "
          f"learn() {facts['learn_s']:.1f} s for {PPO_ITERATIONS} iterations of {PPO_STEPS} steps")
    return arrays, facts


def test_import_registers_the_tasks_without_isaaclab():
    code = ("import sys, r2s2r.isaaclab_tasks; "
            "assert not any(m.split('.')[0].startswith(('isaaclab', 'warp', 'newton')) for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_task_has_an_rsl_rl_agent_in_isaaclabs_registry():
    from isaaclab_rl.rsl_rl import RslRlOnPolicyRunnerCfg
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    from r2s2r.isaaclab_tasks import RESIDUAL_TASK, TASKS
    from r2s2r.isaaclab_tasks.pick_sort.agents.rsl_rl_ppo_cfg import PickSortResidualPPORunnerCfg

    for task in (*TASKS, RESIDUAL_TASK):
        agent = load_cfg_from_registry(task, "rsl_rl_cfg_entry_point")
        assert isinstance(agent, RslRlOnPolicyRunnerCfg) and agent.class_name == "OnPolicyRunner", task
        assert agent.device == "cpu" and agent.algorithm.class_name == "PPO", task
    assert isinstance(load_cfg_from_registry(RESIDUAL_TASK, "rsl_rl_cfg_entry_point"), PickSortResidualPPORunnerCfg)


def test_zero_correction_sends_the_scripted_controllers_targets(run):
    from r2s2r.isaaclab_tasks.pick_sort.parity import scripted_joint_actions

    arrays, facts = run
    sent, base = arrays["sent"], arrays["base"]
    assert facts["policy_obs_dim"] == 42 + 27
    assert np.array_equal(sent, base.astype(np.float32))  # nothing added to the base's targets
    assert np.array_equal(arrays["seen"][1:], sent)  # the policy observes the targets just sent
    # The base is the scripted controller through the reference's IK: the same targets as its episode on MuJoCo C,
    # up to the two physics' states it acts from.
    mujoco_c, _ = scripted_joint_actions("grounded", SEED)
    difference = np.abs(base - np.array(mujoco_c[:ZERO_STEPS])).max()
    print(f"base vs MuJoCo C's scripted targets over {ZERO_STEPS} steps: {difference:.1e} rad")
    assert difference < 1e-3
    assert np.abs(np.diff(base[:, :7], axis=0)).max() > 1e-3  # the arm moves, so the comparison means something


def test_a_correction_is_clamped_and_scaled(run):
    arrays, _ = run
    expected = arrays["scale"] * np.clip(CORRECTION, -1.0, 1.0)
    assert np.allclose(arrays["corrected"], expected, atol=1e-6)
    assert np.isclose(arrays["scale"][:7], 0.005).all() and np.isclose(arrays["scale"][7:], 0.02).all()


def test_two_ppo_iterations_on_the_cpu_write_a_checkpoint_that_loads(run):
    arrays, facts = run
    assert facts["agent_cfg"] == "PickSortResidualPPORunnerCfg" and facts["num_actions"] == 27
    losses = {k: v for k, v in facts["scalars"].items() if k.startswith("Loss/")}
    for name in ("Loss/value", "Loss/surrogate", "Loss/entropy"):
        assert len(losses[name]) == PPO_ITERATIONS and np.isfinite(losses[name]).all(), name
    print({k: np.round(v, 4).tolist() for k, v in facts["scalars"].items()})
    assert f"model_{PPO_ITERATIONS - 1}.pt" in facts["checkpoints"]
    assert facts["loaded_iteration"] == PPO_ITERATIONS - 1
    # The checkpoint holds the trained weights and observation normalizer: a fresh runner differs until it loads.
    assert not np.allclose(arrays["fresh"], arrays["trained"])
    assert np.array_equal(arrays["loaded"], arrays["trained"])
