"""From predicted action chunks to one action per control step: receding horizon or temporal ensembling.

Receding horizon executes the first `execute` actions of a chunk, then predicts again: between predictions the
policy is blind, and when the hand drifts off the path the demos took, the next correction is up to `execute` steps
away. Temporal ensembling (as in ACT, Zhao et al. 2023, arXiv 2304.13705) predicts a chunk every step and executes,
for each step, the weighted mean of what every chunk still covering it planned for it: every step reacts to the
latest observation, and the overlap averages out a single chunk's jitter.
"""

from __future__ import annotations

import numpy as np

# ee_pose actions (what every policy here is trained on): position, then the orientation as a quaternion (w,x,y,z)
QUAT = slice(3, 7)


class ActionChunks:
    """Holds the chunks predicted so far and yields the action of each step.

    `ensemble` None is receding horizon: a new chunk is wanted once `execute` actions of the last one are spent.
    A number k is temporal ensembling: a chunk is wanted every step, and a chunk predicted `a` steps ago weighs
    exp(-k a) in the mean; k > 0 trusts newer observations more, 0 weighs every chunk alike, k < 0 favours the
    older plans (ACT's own choice, which smooths). Quaternions are averaged with their signs aligned to the newest
    chunk's and renormalized.
    """

    def __init__(self, execute: int, ensemble: float | None = None):
        self.execute = execute
        self.ensemble = ensemble
        self.chunks: list[np.ndarray] = []
        self.ages: list[int] = []  # steps since each chunk was predicted

    def reset(self) -> None:
        self.chunks.clear()
        self.ages.clear()

    @property
    def wants_chunk(self) -> bool:
        """Whether the step about to be taken needs a new chunk (`add` it before `next`)."""
        return self.ensemble is not None or not self.chunks or self.ages[-1] >= self.execute

    def add(self, chunk: np.ndarray) -> None:
        """A chunk (C, A) whose row 0 is the action for the step about to be taken."""
        if self.ensemble is None:
            self.reset()  # receding horizon keeps no older plan
        self.chunks.append(np.asarray(chunk, dtype=float))
        self.ages.append(0)

    def next(self) -> np.ndarray:
        """The action for this step; every held chunk then ages by one step and those that ran out are dropped."""
        if not self.chunks:
            raise RuntimeError("ActionChunks.next: no chunk predicted yet (add one when wants_chunk)")
        if self.ensemble is None:
            action = self.chunks[-1][self.ages[-1]].copy()
        else:
            rows = np.stack([c[a] for c, a in zip(self.chunks, self.ages)])
            weights = np.exp(-self.ensemble * np.asarray(self.ages, dtype=float))
            quats = rows[:, QUAT]
            quats *= np.where(quats @ quats[-1] < 0.0, -1.0, 1.0)[:, None]
            action = weights @ rows / weights.sum()
            action[QUAT] /= np.linalg.norm(action[QUAT])
        self.ages = [a + 1 for a in self.ages]
        keep = [i for i, (c, a) in enumerate(zip(self.chunks, self.ages)) if a < len(c)]
        self.chunks = [self.chunks[i] for i in keep]
        self.ages = [self.ages[i] for i in keep]
        return action
