"""The package installs into Isaac Lab's Python without replacing what Isaac Lab or Kit ships: its unconditional
requirements name no torch and no USD distribution, and every one that Isaac Lab, Newton or MuJoCo Warp also
requires admits the version they pin. Checked against the requirements of the installed distributions themselves
(their metadata), not a copy of them."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution, requires

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SHIPPED = {"torch", "usd-core", "usd-exchange"}  # Isaac Lab's own torch and USD (Kit's `pxr` under Isaac Sim)
PLATFORM = ("isaaclab", "newton", "mujoco-warp")  # whose requirements this package must fit within


def _unconditional(dist: str) -> list[Requirement]:
    """`dist`'s requirements that apply without extras."""
    out = []
    for text in requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def _platform_pins() -> dict[str, list[tuple[str, Requirement]]]:
    """Each distribution the platform requires, with who requires it and how."""
    pins: dict[str, list[tuple[str, Requirement]]] = {}
    for dist in PLATFORM:
        try:
            distribution(dist)
        except PackageNotFoundError:
            pytest.skip(f"{dist} is not installed (scripts/setup.sh installs it)")
        for req in _unconditional(dist):
            pins.setdefault(canonicalize_name(req.name), []).append((dist, req))
    return pins


def test_no_torch_or_usd_among_the_unconditional_requirements():
    names = {canonicalize_name(r.name) for r in _unconditional("r2s2r")}
    assert names, "r2s2r's metadata lists no requirements: is it installed (scripts/setup.sh)?"
    assert not names & SHIPPED
    # USD is an extra, for a Python without one.
    standalone = [Requirement(t) for t in requires("r2s2r") if "standalone" in t]
    assert [canonicalize_name(r.name) for r in standalone] == ["usd-core"]


def test_every_shared_requirement_admits_the_platforms_pinned_version():
    pins = _platform_pins()
    shared = 0
    for ours in _unconditional("r2s2r"):
        for owner, theirs in pins.get(canonicalize_name(ours.name), []):
            shared += 1
            exact = [s.version for s in theirs.specifier if s.operator == "=="]
            for version in exact:  # a pin: our range must hold it
                assert version in ours.specifier, f"{ours} excludes {owner}'s {theirs}"
            # and the version installed beside the platform satisfies both
            installed = distribution(ours.name).version
            assert installed in ours.specifier and installed in theirs.specifier, (ours, owner, theirs, installed)
    assert shared >= 4  # mujoco, warp-lang, numpy, gymnasium and tqdm are shared with Isaac Lab or MuJoCo Warp
