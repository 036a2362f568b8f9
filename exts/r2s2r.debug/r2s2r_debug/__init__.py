"""Kit extension `r2s2r.debug` (see config/extension.toml)."""

from .extension import DebugExtension, window

__all__ = ["DebugExtension", "window"]
