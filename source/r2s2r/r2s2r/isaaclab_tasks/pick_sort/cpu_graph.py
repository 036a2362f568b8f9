"""Isaac Lab's MuJoCo Warp physics manager with graph replay on Warp's CPU device.

Isaac Lab captures a physics step into a Warp graph only on CUDA devices. Warp records and replays graphs on its
CPU device as well, and there most of a step's cost is Python launching MuJoCo Warp's kernels one by one (about
150 launches per solver step for this cell). Replaying the recorded step removes that cost, with observations
bit-identical to eager stepping (docs/isaaclab.md).

Selected through the solver config's `class_type`, Isaac Lab's own extension point for manager subclasses (Isaac
Lab picks its Newton asset classes by the manager's name, hence the `Newton` prefix). The
graph is kept where Isaac Lab keeps its CUDA graph (`NewtonManager._graph`), so every invalidation Isaac Lab makes
(reset, model rebuild, close) also drops it, and the next step records it again. On a CUDA device nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable

import warp as wp
from isaaclab_newton.physics.mjwarp_manager import NewtonMJWarpManager
from isaaclab_newton.physics.newton_manager import NewtonManager


class NewtonCpuGraphMJWarpManager(NewtonMJWarpManager):
    """`NewtonMJWarpManager` that replays its physics step as a Warp graph on the CPU."""

    @classmethod
    def _simulate_full(cls) -> None:
        cls._replayed(super()._simulate_full)

    @classmethod
    def _simulate_physics_only(cls) -> None:
        cls._replayed(super()._simulate_physics_only)

    @classmethod
    def _replayed(cls, simulate: Callable[[], None]) -> None:
        device = wp.get_device()
        if device.is_cuda:  # Isaac Lab's own CUDA graph path (or eager, as configured)
            simulate()
        elif NewtonManager._graph is None:
            simulate()  # this step runs eagerly, so buffers allocated on first use exist before the recording
            with wp.ScopedCapture(device=device) as capture:
                simulate()  # on the CPU a capture records the launches without running them
            NewtonManager._graph = capture.graph
        else:
            wp.capture_launch(NewtonManager._graph)
