"""Parity of the Isaac Lab environment with `R2S2R-PickSort-v0`: one scripted episode's joint actions played in both.

The actions are recorded on MuJoCo C: the scripted controller in `action_mode="ee_pose"`, stored as the joint
targets its IK commanded plus the hand targets. They are then played in `R2S2R-PickSort-v0` (`action_mode="joint"`)
and in the Isaac Lab environment from the same seeded reset. Each control step compares the grasp site (forward
kinematics of each state, since MuJoCo C's `ee_pose` after a step lags the state by one physics step), the object's
position and the right arm and hand joints. Success agreement plays the scripted episodes of consecutive seeds at
once, one Isaac Lab environment per seed, and compares how each ended; with `--closed-loop` each side runs the
scripted controller on its own observations instead (the way a behaviour generator meets either physics). The numbers in docs/isaaclab.md come from

    python -m r2s2r.isaaclab_tasks.pick_sort.parity --world ungrounded --seed 1
    python -m r2s2r.isaaclab_tasks.pick_sort.parity --world grounded --seed 0 --episodes 20
    python -m r2s2r.isaaclab_tasks.pick_sort.parity --world grounded --seed 0 --episodes 20 --closed-loop

(or `isaaclab -p -m ...`); Isaac Lab's launcher options apply (`add_launcher_args`; it starts no Kit for this task).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from r2s2r.behavior.scripted import ScriptedPickPlace
from r2s2r.tasks.pick_sort.env import PickSortEnv

MEASURES = ("ee", "object", "arm", "hand")  # m, m, rad, rad


def scripted_joint_actions(world: str, seed: int) -> tuple[list[np.ndarray], str | None]:
    """The scripted episode's actions as joint targets, and how it ended on MuJoCo C."""
    env = PickSortEnv(world=world, cameras=(), action_mode="ee_pose")
    controller = ScriptedPickPlace(env.cfg.control_hz)
    obs, _ = env.reset(seed=seed)
    controller.reset(env)
    actions, info = [], {}
    for _ in range(env.max_steps):
        action = controller(obs)
        obs, _, terminated, truncated, info = env.step(action)
        actions.append(np.concatenate([env.physics.host_data(0).ctrl[env.index.arm_act], action[7:]]))
        if terminated or truncated:
            break
    return actions, "success" if info.get("success") else info.get("failure")


def replay(env, world: str, seed: int, actions: list[np.ndarray]) -> dict:
    """Play `actions` in `R2S2R-PickSort-v0` and in the Isaac Lab environment `env` (one environment, built for
    `world`); per-step differences under MEASURES, and each side's (step, outcome) or None if it did not end."""
    ref = PickSortEnv(world=world, cameras=(), action_mode="joint")
    ref.reset(seed=seed)
    env.reset(seed=seed)
    arm_ids, hand_ids = env._action_ids[:7], env._action_ids[7:]
    diffs = {k: [] for k in MEASURES}
    ends = {"mujoco_c": None, "isaaclab": None}
    for t, action in enumerate(actions):
        _, _, terminated, truncated, info = ref.step(action)
        if terminated or truncated:
            ends["mujoco_c"] = (t, "success" if info["success"] else info["failure"])
        _, _, terminated, truncated, extras = env.step(torch.tensor(action, dtype=torch.float32)[None])
        if terminated[0] or truncated[0]:
            ends["isaaclab"] = (t, extras["outcome"][0])
            break  # the environment has reset: its state is the next episode's
        state = ref.state()
        q = env.right.data.joint_pos.torch[0].double().numpy()
        diffs["ee"].append(np.linalg.norm(env.get_robot_eef_pose("right")[0, :3, 3].double().numpy()
                                          - ref.ik.site_pose(state[ref.index.arm_qadr])[0]))
        diffs["object"].append(np.linalg.norm(env.get_object_poses()["object"][0, :3, 3].double().numpy()
                                              - state[ref.obj_qadr:ref.obj_qadr + 3]))
        diffs["arm"].append(np.abs(q[arm_ids] - state[ref.index.arm_qadr]).max())
        diffs["hand"].append(np.abs(q[hand_ids] - state[ref.index.hand_qadr]).max())
        if ends["mujoco_c"] is not None:
            break
    return {"diffs": {k: np.array(v) for k, v in diffs.items()}, **ends}


def _first_ends(env, obs: dict, act, steps: int) -> list[tuple[int, str] | None]:
    """Step `env` from observation groups `obs` with the actions `act(t, obs)` (num_envs, 27) for up to `steps`
    control steps: each environment's first end, (step, outcome), or None if it did not end."""
    ends: list[tuple[int, str] | None] = [None] * env.num_envs
    for t in range(steps):
        obs, _, terminated, truncated, extras = env.step(torch.tensor(act(t, obs), dtype=torch.float32))
        for i in np.flatnonzero((terminated | truncated).numpy()):
            if ends[i] is None:  # the environment has reset since: later ends are another episode's
                ends[i] = (t, extras["outcome"][i])
        if all(end is not None for end in ends):
            break
    return ends


def _rows(first_seed: int, reference: list[tuple[list[np.ndarray], str | None]],
          ends: list[tuple[int, str] | None]) -> list[dict]:
    """Per seed: MuJoCo C's (last step, outcome), Isaac Lab's first end, and whether the outcomes agree."""
    return [{"seed": first_seed + i, "mujoco_c": (len(actions) - 1, outcome), "isaaclab": end,
             "agree": end is not None and end[1] == outcome}
            for i, ((actions, outcome), end) in enumerate(zip(reference, ends))]


def success_agreement(env, world: str, first_seed: int, hold_steps: int = 20) -> list[dict]:
    """The scripted episodes of seeds first_seed, first_seed + 1, ... (one per environment of `env`, built for
    `world`) played in both physics. After its recorded actions an environment holds the last one for up to
    `hold_steps` more steps (a drop into the bin may settle a little later). Per seed: each side's (step, outcome),
    Isaac Lab's None if it did not end."""
    episodes = [scripted_joint_actions(world, first_seed + i) for i in range(env.num_envs)]
    obs, _ = env.reset(seed=first_seed)  # environment i plays the reference's reset(seed=first_seed + i)
    replay = lambda t, _: np.stack([actions[min(t, len(actions) - 1)] for actions, _ in episodes])  # noqa: E731
    steps = max(len(actions) for actions, _ in episodes) + hold_steps
    return _rows(first_seed, episodes, _first_ends(env, obs, replay, steps))


def closed_loop_agreement(env, world: str, first_seed: int) -> list[dict]:
    """The scripted controller in closed loop on both physics, seeds first_seed, first_seed + 1, ... (one per
    environment of `env`, built for `world` in `action_mode="ee_pose"`): each side's controller reads its own
    simulator's observations, as a behaviour generator does. Per seed: each side's (step, outcome), Isaac Lab's None
    if it did not end within the episode."""
    reference = [scripted_joint_actions(world, first_seed + i) for i in range(env.num_envs)]
    controllers = [ScriptedPickPlace(env.task.control_hz) for _ in range(env.num_envs)]
    obs, _ = env.reset(seed=first_seed)
    control = lambda _, obs: np.stack([c(env.observation_dict(obs, i)) for i, c in enumerate(controllers)])  # noqa: E731
    return _rows(first_seed, reference, _first_ends(env, obs, control, int(env.max_episode_length)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", choices=("grounded", "ungrounded"), default="ungrounded")
    parser.add_argument("--seed", type=int, default=1, help="the episode's seed (with --episodes, the first seed)")
    parser.add_argument("--episodes", type=int, default=1,
                        help="with more than 1: success agreement over that many consecutive seeds, played at once")
    parser.add_argument("--closed-loop", action="store_true",
                        help="with --episodes: each side runs the scripted controller on its own observations, "
                             "instead of Isaac Lab replaying the joint actions recorded on MuJoCo C")
    from isaaclab.app import add_launcher_args

    add_launcher_args(parser)
    args = parser.parse_args()
    if args.episodes < 1:
        parser.error(f"--episodes = {args.episodes}: expected at least 1")
    from r2s2r.isaaclab_tasks.launcher import launch, launcher_device
    from r2s2r.isaaclab_tasks.pick_sort.env import PickSortCellEnv
    from r2s2r.isaaclab_tasks.pick_sort.task import cell_env_cfg

    cfg = cell_env_cfg(f"Isaac-R2S2R-PickSort-{args.world.capitalize()}-v0", device=launcher_device(args),
                       action_mode="ee_pose" if args.closed_loop else "joint")
    cfg.scene.num_envs = args.episodes
    with launch(cfg, args):
        env = PickSortCellEnv(cfg)
        try:
            if args.episodes > 1:
                agreement = closed_loop_agreement if args.closed_loop else success_agreement
                rows = agreement(env, args.world, args.seed)
                print(json.dumps({"world": args.world, "closed_loop": args.closed_loop, "agree": sum(r["agree"] for r in rows),
                                  "episodes": len(rows), "rows": rows}, indent=1))
                return
            actions, _ = scripted_joint_actions(args.world, args.seed)
            result = replay(env, args.world, args.seed, actions)
        finally:
            env.close()
    summary = {k: {"max": float(v.max()), "mean": float(v.mean())} for k, v in result["diffs"].items()}
    print(json.dumps({"world": args.world, "seed": args.seed, "steps": len(actions), "differences": summary,
                      "mujoco_c": result["mujoco_c"], "isaaclab": result["isaaclab"]}, indent=1))


if __name__ == "__main__":
    main()
