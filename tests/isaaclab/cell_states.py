"""States of the cell, made on MuJoCo C, that the Isaac Lab tests put their environments in (imported by the test
files beside it, also when test_pick_sort_multi_env.py runs as its own child process)."""

from __future__ import annotations

import numpy as np

from r2s2r.tasks.pick_sort.env import PickSortEnv

SETTLE = 4  # control periods for an object dropped into a bin to come to rest (MuJoCo C)


def settled_in_bin(seed: int, own: bool, world: str = "ungrounded") -> tuple[np.ndarray, np.ndarray]:
    """(state, holding joint action) of `world`'s episode `seed` with its object at rest in its own bin or in
    another: dropped there and left to settle on MuJoCo C."""
    ref = PickSortEnv(world=world, cameras=(), action_mode="joint")
    ref.reset(seed=seed)
    proprio = ref.observe()["proprio"]
    hold = np.concatenate([proprio["arm_q"], proprio["hand_q"]])
    colour = ref.colour if own else next(c for c in ref.bins if c != ref.colour)
    m, state = ref.model, ref.state()
    adr = m.jnt_qposadr[m.body_jntadr[ref.obj_body]]
    state[adr:adr + 7] = [*np.add(ref.bins[colour].center, [0.0, 0.0, ref.obj.half_height + 0.01]), 1, 0, 0, 0]
    state[m.nq:] = 0.0
    ref.set_state(state)
    for _ in range(SETTLE):
        ref.step(hold)
    return ref.state(), hold
