"""docs/tutorial.md, run as written at a tiny size.

The test reads the tutorial's ```bash blocks and runs them in order in one bash process, from the repository root,
with the sizes of its first block replaced by tiny ones and every output sent to a temporary folder, so the page
and the test cannot drift apart. Then it checks what each step wrote: the demo file read back by the project's
reader, the datasets' counts and world hashes, the run folders, the evaluation's trials and summaries, the
reports, the pictures.

A block preceded by a `<!-- test_tutorial: KIND ... -->` comment is treated as KIND says:
- `skip`: not run (the set-up: the suite runs inside the environment it makes);
- `stand-in`: the calibration session and fit (about a minute even for a small session; recorded and fitted end to
  end by tests/calibration/test_grounding_pipeline.py). Its commands' arguments are parsed by the scripts' own
  parsers, and the tracked `configs/world/grounded.yaml`, which calibrate.py wrote, stands in for its output;
- `dry-run`: the smoke experiment, run with `--dry-run` (it lists its stages). Its stages and report are covered by
  tests/test_experiment.py, and each stage's script runs for real in the other blocks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, script_module

pytestmark = pytest.mark.slow

TUTORIAL = ROOT / "docs" / "tutorial.md"
REAL_TASK = "R2S2R-PickSort-Real-v0"
# The tutorial's sizes and the test's. Each must be set exactly once in the tutorial.
TINY = {"DEMOS": "1", "TRAJ": "2", "STEPS": "4", "TRIALS": "2", "EPISODES": "1", "WORKERS": "1",
        "VIEW_SIZE": "24", "VIEW_STEP": "2"}
MARKER = re.compile(r"<!-- test_tutorial: (\w[\w-]*)")
BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)


def tutorial_blocks() -> list[tuple[str | None, str]]:
    """Every ```bash block of the tutorial with the kind its marker gives (None: run as written)."""
    text = TUTORIAL.read_text()
    blocks = []
    for match in BLOCK.finditer(text):
        before = text[:match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.match(before)
        blocks.append((marker.group(1) if marker else None, match.group(1)))
    return blocks


def set_sizes(code: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        code, n = re.subn(rf"^{name}=\S+", f"{name}={value}", code, flags=re.M)
        assert n <= 1, f"{name} is set {n} times in the tutorial"
    return code


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """The tutorial's blocks run at the tiny sizes: (output folder, picture folder, stand-in calls, stdout)."""
    tmp = tmp_path_factory.mktemp("tutorial")
    out, img, calls = tmp / "out", tmp / "img", tmp / "calls.txt"
    blocks = tutorial_blocks()
    kinds = [kind for kind, _ in blocks if kind]
    assert kinds == ["skip", "stand-in", "dry-run"], kinds  # a new exception to "run as written" is deliberate
    script = ["set -euo pipefail",
              # stands in for a python invocation: its arguments, one line per call, quoted for the shell
              f'record_call() {{ printf "%q " "$@" >> {shlex.quote(str(calls))}; echo >> {shlex.quote(str(calls))}; }}']
    seen = set()
    for kind, code in blocks:
        code = set_sizes(code, TINY)
        seen |= {name for name in TINY if re.search(rf"^{name}=", code, re.M)}
        code = re.sub(r"^OUT=\S+", f"OUT={shlex.quote(str(out))}", code, flags=re.M)
        code = re.sub(r"^IMG_DIR=\S+", f"IMG_DIR={shlex.quote(str(img))}", code, flags=re.M)
        if kind == "skip":
            continue
        if kind == "stand-in":
            code = code.replace(".venv/bin/python scripts/", "record_call ")
            code += "\nmkdir -p $OUT/calibration && cp configs/world/grounded.yaml $OUT/calibration/grounded.yaml\n"
        if kind == "dry-run":
            assert "--scale smoke" in code
            code = code.replace("--scale smoke", "--scale smoke --dry-run")
        script.append(code.replace(".venv/bin/python", shlex.quote(sys.executable)))
    assert seen == set(TINY), f"sizes the tutorial no longer sets: {set(TINY) - seen}"
    assert not re.search(r"outputs/|docs/img", "\n".join(script)), "a block writes outside $OUT and $IMG_DIR"
    env = {k: v for k, v in os.environ.items() if k not in ("R2S2R_CONFIGS", "R2S2R_REALITY_FILE")}
    env["MUJOCO_GL"] = "egl"
    start = time.monotonic()
    result = subprocess.run(["bash", "-c", "\n".join(script)], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    print(f"tutorial blocks: {time.monotonic() - start:.1f} s")
    return out, img, calls, result.stdout


def test_the_shipped_and_the_calibrated_world_are_reported_closer_than_the_ungrounded_one(tutorial):
    out, _, _, stdout = tutorial
    for folder, grounded in (("world_report_shipped", ROOT / "configs/world/grounded.yaml"),
                             ("world_report", out / "calibration/grounded.yaml")):
        report = json.loads((out / folder / "report.json").read_text())
        assert Path(report["worlds"]["grounded"]).resolve() == grounded.resolve()
        rows = {row["axis"]: row for row in report["table"]}
        assert len(rows) == 27 and {"focal length", "belt speed", "replay: object", "image: head_left"} <= set(rows)
        parameters = [row for axis, row in rows.items() if not axis.startswith(("replay", "image"))]
        assert all(row["grounded_closer"] for row in parameters), [r for r in parameters if not r["grounded_closer"]]
        assert "| focal length |" in (out / folder / "report.md").read_text()
    assert "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0" in stdout  # list_tasks.py


def test_the_calibration_commands_are_accepted_by_their_scripts(tutorial):
    out, _, calls, _ = tutorial
    lines = [shlex.split(line) for line in calls.read_text().splitlines()]
    assert [line[0] for line in lines] == ["record_calibration.py", "calibrate.py"]
    recorded = script_module("record_calibration.py").parse_args(lines[0][1:])
    fitted = script_module("calibrate.py").parse_args(lines[1][1:])
    assert Path(recorded.output) == Path(fitted.session) == out / "calibration/session.h5"
    assert Path(fitted.output) == out / "calibration/grounded.yaml"  # what the adoption block copies


def test_the_real_demos_read_back_with_their_annotation(tutorial):
    from r2s2r.data import DemoReader

    out, _, _, stdout = tutorial
    with DemoReader(out / "real/real.hdf5") as reader:
        assert len(reader) == int(TINY["DEMOS"]) and reader.env_name == REAL_TASK
        demo = reader.load(reader.names[0])
        attrs = reader.attrs(reader.names[0])
    assert attrs["success"] and attrs["condition"] == "nominal"
    assert demo["actions"].shape[1] == 27 and len(demo["states"]) == len(demo["actions"])
    assert not any(k in demo["obs"] for k in ("head_left", "right_wrist"))  # --cameras with no names: no images
    assert re.search(r"^demo_0\s+\d+\s+\d+", stdout, re.M)  # annotate.py's table


def test_each_simulated_dataset_holds_its_configuration_in_its_world(tutorial):
    import hashlib

    from r2s2r.data import DemoReader

    out, _, _, _ = tutorial
    worlds = {"wg_bu": (out / "configs/world/grounded.yaml", "WorldGrounded"),
              "wu_bu": (ROOT / "configs/world/ungrounded.yaml", "WorldUngrounded")}
    for name, (world, task) in worlds.items():
        sha = hashlib.sha256(world.read_bytes()).hexdigest()
        with DemoReader(out / f"sim/{name}.hdf5") as reader:
            assert len(reader) == int(TINY["TRAJ"])
            for demo in reader.names:
                attrs = reader.attrs(demo)
                assert attrs["task"] == f"R2S2R-PickSort-{task}-BehaviorUngrounded-v0"
                assert attrs["success"] and attrs["generator"] == "planner" and attrs["world_sha256"] == sha
                assert reader.load(demo)["actions"].shape[1] == 27
    # the calibrated world (here the stand-in) is the one the grounded tasks loaded
    assert (out / "configs/world/grounded.yaml").read_bytes() == (out / "calibration/grounded.yaml").read_bytes()


def test_each_policy_is_trained_on_its_mixture(tutorial):
    import yaml

    out, _, _, _ = tutorial
    for name, datasets in (("real_only", ["real/real.hdf5"]), ("wg_bu", ["real/real.hdf5", "sim/wg_bu.hdf5"]),
                           ("wu_bu", ["real/real.hdf5", "sim/wu_bu.hdf5"])):
        run = out / "train" / name
        assert (run / "policy.pt").stat().st_size > 0
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["steps"] == int(TINY["STEPS"]) and cfg["policy"]["kind"] == "object_centric"
        assert cfg["object_centric"]["perception"] == "tracking" and cfg["policy"]["cameras"] == []
        assert [Path(d["path"]) for d in cfg["data"]["datasets"]] == [out / d for d in datasets]


def test_the_evaluation_has_every_trial_of_every_policy_and_its_interval(tutorial):
    from r2s2r.evaluation.stats import difference_interval, wilson_interval

    out, _, _, stdout = tutorial
    trials = int(TINY["TRIALS"])
    folder = out / "eval" / REAL_TASK
    results = json.loads((folder / "results.json").read_text())["policies"]
    assert list(results) == ["real_only", "wg_bu", "wu_bu"]
    for name, summary in results.items():
        rows = [json.loads(line) for line in (folder / name / "trials.jsonl").read_text().splitlines()]
        assert [r["seed"] for r in rows] == [10000 + i for i in range(trials)]
        overall = summary["overall"]
        assert overall["trials"] == trials and overall["successes"] == sum(r["success"] for r in rows)
        assert overall["interval"] == pytest.approx(list(wilson_interval(overall["successes"], trials)))
        assert f"{name}: {overall['successes']}/{trials} (" in stdout
    table = (folder / "results.md").read_text()
    assert all(re.search(rf"^\| {name} \| {results[name]['overall']['successes']}/{trials} ", table, re.M)
               for name in results)
    assert (folder / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    base = results["real_only"]["overall"]
    for name in ("wg_bu", "wu_bu"):  # the difference compare.py prints
        o = results[name]["overall"]
        d, low, high = difference_interval(o["successes"], trials, base["successes"], trials)
        versus = re.escape(f"| {100 * d:+.0f} [{100 * low:+.0f}, {100 * high:+.0f}] |")
        assert re.search(rf"^\| {name} \| [^|]+ {versus}", stdout, re.M), stdout


def test_the_smoke_experiment_command_lists_its_stages(tutorial):
    from r2s2r.experiment import SCALES, plan

    out, _, _, stdout = tutorial
    for stage in plan(out / "smoke", SCALES["smoke"]):
        assert stage.name in stdout
    assert not (out / "smoke" / "report").exists()


def test_the_pictures_show_four_camera_views_and_the_readme_figures(tutorial):
    import imageio.v2 as imageio

    _, img, _, _ = tutorial
    views = imageio.imread(img / "cell_views.png")[..., :3].astype(float)
    assert views.shape[:2] == (290, 1040)
    for quarter in np.array_split(views[40:], 4, axis=1):  # each camera's panel (below the titles) has an image
        assert quarter.std() > 10
    assert imageio.imread(img / "results.png").shape[:2] == (528, 825)  # 7.5 x 4.8 in at 110 dpi
    # every figure the plot shows is one README.md or docs/results.md reports
    block = next(code for _, code in tutorial_blocks() if "results.png" in code)
    figures = re.findall(r'\("[^"]+", (\d+), (\d+)\)', block)
    published = (ROOT / "README.md").read_text() + (ROOT / "docs/results.md").read_text()
    assert figures
    for k, n in figures:
        assert f"{k}/{n}" in published, f"{k}/{n}"
