"""The published policies (assets/policies/: real-only and fully grounded on the `study1500` scale's data, seed 0,
the estimator reading the object alone): they load safely, fit the size budget, were trained with the recipe
docs/results.md reports, and pick on the twin as `scripts/evaluate.py` runs them (the protocol's first trial, which
both pass there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from r2s2r.evaluation.protocol import agent_observation
from r2s2r.policy.agent import load_agent
from r2s2r.policy.checkpoint import load_checkpoint
from r2s2r.policy.object_centric import ActionHead, ObjectCentricAgent
from r2s2r.real.twin import TwinCell

POLICIES = Path(__file__).resolve().parents[2] / "assets" / "policies"


@pytest.mark.parametrize("name", ["real_only", "wg_bg"])
def test_published_policy_loads_and_lifts_the_object(name):
    path = POLICIES / f"{name}.pt"
    assert path.stat().st_size <= 20 * 2**20
    cfg = load_checkpoint(path)["cfg"]
    assert cfg["policy"]["kind"] == "object_centric"
    assert cfg["object_centric"]["hand_shift_fraction"] > 0  # the recipe docs/results.md reports
    assert len(cfg["data"]["datasets"]) == (1 if name == "real_only" else 2)
    agent = load_agent(path)
    assert isinstance(agent, ObjectCentricAgent)
    # A resting object's height from its fused size, as trained (the `study1500` recipe).
    assert cfg["object_centric"]["height_from_size"] and agent.tracker.belt_top is not None
    assert cfg["policy"]["ensemble"] == 0 and isinstance(agent.policy.head, ActionHead)  # the L1 head, ensembled
    assert agent.policy.estimator.attributes == cfg["object_centric"]["attributes"] == "object"
    # Deployed with covered frames skipped (scripts/evaluate.py --hand-cover): the tracker knows the head camera.
    covering = load_agent(path, execution={"hand_cover": 0.08})
    assert covering.tracker.cfg.cover_radius == 0.08 and agent.tracker.cfg.cover_radius == 0.0
    assert covering.tracker.camera.shape == (3,) and covering.tracker.camera[2] > covering.tracker.belt_top + 0.3
    cell = TwinCell(**agent.env_overrides)
    try:
        obs = cell.reset(condition="nominal", seed=10000)
        agent.reset()

        start = float(obs["tracking"]["object_pos"][2])
        lifted = False
        for _ in range(200):  # 10 s at 20 Hz: approach, grasp and lift on this trial (its full run succeeds)
            action = agent.act(agent_observation(obs))
            assert np.all(np.isfinite(action))
            obs = cell.act(action).obs
            lifted = float(obs["tracking"]["object_pos"][2]) > start + 0.05
            if lifted:
                break
        assert lifted, "the published policy did not lift the object on the protocol's first trial (seed 10000)"
    finally:
        cell.stop()
