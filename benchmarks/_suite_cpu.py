"""A pytest plugin for bench_suite.py: each test's CPU seconds (its process and the processes it waited for, set-up
and teardown of the fixtures it opened included) and wall seconds, one JSON line per test appended to the file
named by R2S2R_SUITE_CPU_LOG. Loaded with `-p _suite_cpu` (benchmarks/ on PYTHONPATH); pytest-xdist hands it to
every worker."""

from __future__ import annotations

import json
import os
import resource
import time

import pytest


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    line = {"test": item.nodeid, "cpu_s": round(_cpu_seconds() - cpu, 2), "wall_s": round(time.monotonic() - wall, 2),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(os.environ["R2S2R_SUITE_CPU_LOG"], "a") as log:
        log.write(json.dumps(line) + "\n")
