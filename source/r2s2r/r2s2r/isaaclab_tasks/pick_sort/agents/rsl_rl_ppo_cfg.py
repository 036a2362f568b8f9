"""rsl-rl PPO agents of the pick-and-sort tasks: each task ID's `rsl_rl_cfg_entry_point`.

Written in Isaac Lab 3.0's form for rsl-rl 5: actor and critic as `RslRlMLPModelCfg`, the actor's Gaussian as its
`distribution_cfg` (3.0 still converts the older `policy = RslRlPpoActorCriticCfg(...)` into these, with a
deprecation warning). The agent runs on the CPU, where the environment's physics runs (Warp's CPU device).

None of these has been trained to a measured effect; the hyperparameters are common PPO values, not tuned here.
"""

from __future__ import annotations

from isaaclab.utils import configclass
from isaaclab_rl.rsl_rl import RslRlMLPModelCfg, RslRlOnPolicyRunnerCfg, RslRlPpoAlgorithmCfg


def _mlp(init_std: float | None = None) -> RslRlMLPModelCfg:
    """The actor (with a Gaussian of `init_std`) or the critic (without)."""
    dist = None if init_std is None else RslRlMLPModelCfg.GaussianDistributionCfg(init_std=init_std)
    # Normalized observations: joint angles (rad), velocities, positions (m) and the belt speed differ in scale.
    return RslRlMLPModelCfg(hidden_dims=[256, 128, 64], activation="elu", obs_normalization=True,
                            distribution_cfg=dist)


@configclass
class PickSortPPORunnerCfg(RslRlOnPolicyRunnerCfg):
    """PPO on `Isaac-R2S2R-PickSort-{Grounded,Ungrounded,Twin}-v0`, whose actions are the 27 absolute joint targets.
    What Isaac Lab's train command needs to run these tasks; with the sparse success reward and no base motion, a
    policy learning the task from scratch is not expected (the residual task is the intended use)."""

    device = "cpu"
    num_steps_per_env = 32
    max_iterations = 1000
    save_interval = 50
    experiment_name = "r2s2r_pick_sort"
    obs_groups = {"actor": ["policy"], "critic": ["policy"]}
    actor = _mlp(init_std=1.0)
    critic = _mlp()
    algorithm = RslRlPpoAlgorithmCfg(
        value_loss_coef=1.0,
        use_clipped_value_loss=True,
        clip_param=0.2,
        entropy_coef=0.005,
        num_learning_epochs=5,
        num_mini_batches=4,
        learning_rate=3.0e-4,
        schedule="adaptive",
        # The reward comes once, at success, 150-500 control steps into an episode: a long horizon.
        gamma=0.995,
        lam=0.95,
        desired_kl=0.01,
        max_grad_norm=1.0,
    )


@configclass
class PickSortResidualPPORunnerCfg(PickSortPPORunnerCfg):
    """PPO on `Isaac-R2S2R-PickSort-Residual-Grounded-v0`: bounded corrections (in [-1, 1]) of the scripted
    controller's joint targets."""

    experiment_name = "r2s2r_pick_sort_residual"
    # Exploration within about a third of the correction's range, so early episodes stay close to the scripted
    # controller's.
    actor = _mlp(init_std=0.3)
