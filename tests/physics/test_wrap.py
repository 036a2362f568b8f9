"""The belt's periodic joint on MuJoCo C wraps by the rule the device kernel also follows, to the bit."""

from __future__ import annotations

import numpy as np

from r2s2r.cell.mjcf import belt_periodic, build_model
from r2s2r.cell.spec import CellCfg
from r2s2r.physics.mujoco_c import MujocoCBackend


def test_belt_wrap_is_the_array_rule_to_the_bit():
    cell = CellCfg()
    model = build_model(cell)
    periodic = belt_periodic(model, cell)
    backend = MujocoCBackend(model, 1, (periodic,))
    p, adr = periodic.period, periodic.qpos_adr
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.uniform(-2 * p, 2 * p, 5000), [-p / 2, p / 2, 0.0, p, -p, 1e-300]])
    qpos = np.zeros(model.nq)
    for v in values:
        qpos[adr] = v
        backend._wrap(qpos)
        expected = (np.float64(v) + p / 2) % p - p / 2
        assert qpos[adr].tobytes() == expected.tobytes(), v
        assert -p / 2 <= qpos[adr] < p / 2
