"""Kit extension `r2s2r.debug` (see config/extension.toml)."""

from .extension import DebugExtension

__all__ = ["DebugExtension"]
