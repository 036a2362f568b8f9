#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian machine, idempotently:
# Mesa for offscreen OpenGL (MuJoCo's renderer via EGL, OSMesa as fallback), a virtualenv at .venv with the pinned
# Python packages, and this package in editable mode (the Isaac Lab extension layout under source/r2s2r).
set -euo pipefail
cd "$(dirname "$0")/.."

GL_PACKAGES="libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6 libgles2 libglx-mesa0 libgl1"
# FFmpeg's libraries: torchcodec decodes the LeRobot export's videos with them (Debian 12: FFmpeg 5).
FFMPEG_PACKAGES="libavcodec59 libavformat59 libavutil57 libswscale6 libavdevice59 libavfilter8 libswresample4"
# Chromium: tests/test_viewer.py opens the viser viewer in it, headless, through Playwright (WebGL in SwiftShader).
BROWSER_PACKAGES="chromium"
APT_PACKAGES="$GL_PACKAGES $FFMPEG_PACKAGES $BROWSER_PACKAGES"
missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $APT_PACKAGES 2>/dev/null | awk '$1 != "ii" {print $2}' || true)
if [ -n "$missing" ] || ! dpkg-query -W $APT_PACKAGES >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $APT_PACKAGES >/dev/null
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.requirements.sha
want=$(sha256sum requirements.txt source/r2s2r/pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  .venv/bin/pip install -q --no-deps -e source/r2s2r
  # Isaac Lab 3.0's own dataset reader is the oracle our HDF5 writer is tested against. Its declared dependencies
  # (torch 2.11, CUDA builds, Omniverse clients) are not wanted here, and it declares Python >= 3.12 although the
  # dataset module runs on 3.11: install the package alone, plus the one import it needs (requirements.txt).
  .venv/bin/pip install -q --no-deps --ignore-requires-python isaaclab==3.0.0
  # LeRobot's dataset class (requirements.txt says why these two go without their declared dependencies).
  .venv/bin/pip install -q --no-deps datasets==4.1.1 lerobot-dataset==0.4.4
  # robomimic, the second consumer of our demo files (requirements.txt says why without its dependencies).
  .venv/bin/pip install -q --no-deps robomimic==0.3.0
  # openpi's websocket client, the deployment convention scripts/serve_policy.py speaks (requirements.txt says why
  # without its dependencies).
  .venv/bin/pip install -q --no-deps openpi-client==0.1.2
  echo "$want" > "$stamp"
fi
