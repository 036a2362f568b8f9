"""Trajectory generation: admitted (successful under contact physics) trajectories, in parallel, resumable."""

from r2s2r.datagen.config import DatagenCfg, GenerateCfg, make_generate_cfg
from r2s2r.datagen.runner import RunSummary, generate

__all__ = ["DatagenCfg", "GenerateCfg", "RunSummary", "generate", "make_generate_cfg"]
