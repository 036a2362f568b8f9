"""Shared by the benchmark scripts (run as `python benchmarks/<name>.py`, so this folder is on sys.path)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def write_json(path: str | Path, result: dict) -> None:
    """Write `result` to `path` through a temporary name, so readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, path)
    print(f"wrote {path}", file=sys.stderr)
