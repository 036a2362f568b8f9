"""experiment.py --scale smoke: the study's pipeline end to end on the twin, and resuming it."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from r2s2r.experiment import CONFIGS, SCALES, SIM_EVAL_TASKS, evaluations, flow_name, plan, policies, runs
from r2s2r.tasks import REAL_TASK


# A stand-in for the stage scripts (collect_real.py, generate.py, train.py, evaluate.py, perception_report.py), run by
# the experiment as it runs them: it fails unless every file the stage reads exists (so stages run after what they
# read) and writes the stage's outputs; a training also writes a frame cache file for each dataset it reads, and fails
# if its run was trained before (a stage run twice); an evaluation's trials are the rows the test prepared for that
# run, task and block (and their summary), refused unless the stage asks for as many trials; a perception report is
# the one the test prepared for that run. The real scripts run the smoke scale end to end in
# benchmarks/bench_experiment.py (stage times in docs/benchmarks.md); each is tested end to end on its own.
STUB = """
import json, os, re, sys, time
from pathlib import Path

time.sleep(0.1)  # stages.json keeps wall times to 0.1 s: every stage's is then above 0
script, args = Path(sys.argv[0]).name, sys.argv[1:]
def value(option, default=None):
    return args[args.index(option) + 1] if option in args else default
if os.environ.get("STUB_FAIL") and str(value("--output", "")).endswith(os.environ["STUB_FAIL"]):
    sys.exit(f"{script}: failing as asked")
datasets = [m for a in args if a.startswith("data.datasets=") for m in re.findall(r"path: ([^,}]+)", a)]
inputs = [a.split("=", 1)[1] for a in args if a.startswith(("generator.source=", "object_centric.estimator_from="))]
inputs += datasets
if script in ("evaluate.py", "perception_report.py"):
    inputs.append(value("--checkpoint"))
if script == "perception_report.py":
    inputs.append(value("--dataset"))
missing = [i for i in inputs if not Path(i).exists()]
if missing:
    sys.exit(f"{script}: missing inputs {missing}")
if script in ("collect_real.py", "generate.py"):
    Path(value("--output")).parent.mkdir(parents=True, exist_ok=True)
    Path(value("--output")).write_text("stub dataset")
elif script == "perception_report.py":
    report = json.loads(Path(os.environ["STUB_PERCEPTION"]).read_text())[Path(value("--checkpoint")).parent.name]
    Path(value("--output")).parent.mkdir(parents=True, exist_ok=True)
    Path(value("--output")).write_text(json.dumps(report))
elif script == "train.py":
    run = Path(next(a.split("=", 1)[1] for a in args if a.startswith("run_dir=")))
    if run.exists():
        sys.exit(f"{run} trained twice")
    run.mkdir(parents=True)
    (run / "policy.pt").write_text("stub checkpoint")
    (run / "estimator.pt").write_text("stub estimator")
    from r2s2r.policy.data import frame_cache_file

    for path in datasets:
        cache = frame_cache_file(Path(path), ["demo_0"], "head_left", (8, 8))
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(b"frames")
else:
    name, task = value("--names"), value("--task", os.environ["STUB_REAL_TASK"])
    run = Path(value("--checkpoint")).parent.name
    rows, summary = json.loads(Path(os.environ["STUB_RESULTS"]).read_text())[run][task][value("--base-seed", "sim")]
    if len(rows) != int(value("--trials")):
        sys.exit(f"--trials {value('--trials')}: the prepared results have {len(rows)}")
    out = Path(value("--output")) / task
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "trials.jsonl").write_text("".join(json.dumps(row) + "\\n" for row in rows))
    (out / "results.json").write_text(json.dumps({"policies": {name: summary}}))
"""


def test_smoke_stages_are_accepted_by_their_scripts_and_read_what_earlier_stages_write(tmp_path):
    """Every stage's command line as its script parses it, and every file a stage reads is written by a stage it
    waits for."""
    import importlib.util

    from conftest import ROOT
    from r2s2r.core import parse_dotted
    from r2s2r.datagen import make_generate_cfg
    from r2s2r.policy.config import compose_train_cfg

    def load(script):
        spec = importlib.util.spec_from_file_location(f"_stage_{script}", ROOT / "scripts" / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    parsers = {name: load(name).parse_args for name in ("collect_real", "generate", "evaluate")}
    stages = plan(tmp_path, SCALES["smoke"])
    outputs = {s.name: set(map(str, s.done_when)) for s in stages}
    for stage in stages:
        script, args = stage.command[1].rsplit("/", 1)[-1], stage.command[2:]
        if script == "train.py":
            cfg = compose_train_cfg(args)
            reads, writes = [d.path for d in cfg.data.datasets], [f"{cfg.run_dir}/policy.pt"]
        else:
            parsed = parsers[script[:-3]](args)
            if script == "generate.py":
                cfg = make_generate_cfg(parsed.task, parsed.num_trajectories, parsed.seed,
                                        parse_dotted(parsed.overrides))
                reads = [cfg.generator.source] if hasattr(cfg.generator, "source") else []
            else:
                reads = parsed.checkpoint if script == "evaluate.py" else []
            task = getattr(parsed, "task", None) if script == "evaluate.py" else None
            writes = [f"{parsed.output}/{task}/results.json"] if task else [str(parsed.output)]
        assert set(map(str, writes)) == outputs[stage.name], stage.name
        for path in reads:
            assert any(str(path) in outputs[dep] for dep in stage.after), (stage.name, path)


# The smoke scale, and a scale like it with two training seeds per policy, two evaluation blocks, no alignment policy,
# another mixture weight, held-out demos and flow heads beside two policies: every policy's real-side trials are then
# pooled over four evaluations, each policy's perception is reported, and each flow head is set beside its L1 head.
POOLED = dataclasses.replace(SCALES["smoke"], seeds=(0, 3), blocks=(10000, 20000), align=(), sim_weight=0.75,
                             heldout_demos=2, flow_heads=("real_only", "wg_bg"))


@pytest.fixture
def stub_experiment(tmp_path, monkeypatch):
    """scripts/experiment.py loaded as a module, its stages run by the stand-in above."""
    import importlib.util

    import r2s2r.experiment
    from conftest import ROOT

    stubs = tmp_path / "scripts"
    stubs.mkdir()
    for script in ("collect_real.py", "generate.py", "train.py", "evaluate.py", "perception_report.py"):
        (stubs / script).write_text(STUB)
    monkeypatch.setenv("R2S2R_FRAME_CACHE", str(tmp_path / "frames"))
    monkeypatch.setattr(r2s2r.experiment, "SCRIPTS", stubs)
    spec = importlib.util.spec_from_file_location("_experiment_script", ROOT / "scripts" / "experiment.py")
    experiment = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experiment)
    return experiment


@pytest.mark.parametrize("scale_name", ["smoke", "pooled"])
def test_experiment_produces_the_full_table_drops_unread_frames_and_resumes(tmp_path, monkeypatch, capsys,
                                                                            scale_name, stub_experiment):
    """experiment.py's own run: stages side by side in dependency order, stages.json, the report (each policy's
    trials pooled over its runs and blocks, as an independent pooling of the prepared rows gives it), each dataset's
    frame cache deleted once its last training is over, and a rerun that skips every stage and makes the same
    report; the stage scripts are the stand-in above."""
    from r2s2r.evaluation import difference_interval
    from r2s2r.evaluation.protocol import make_protocol, summarize

    monkeypatch.setitem(SCALES, "pooled", POOLED)
    scale = SCALES[scale_name]
    names = list(policies(scale))
    flows = [flow_name(n) for n in scale.flow_heads]
    assert ("wg_bg_align" in names) == (scale_name == "smoke")
    prepared, pooled = {}, {}  # run -> task -> block -> rows; policy -> its real-side rows over runs and blocks
    k = 0
    for name in names + flows:
        pooled[name] = []
        for run in runs(scale, name):
            prepared[run] = {}
            tasks = [(REAL_TASK, scale.eval_trials, b) for b in scale.blocks]
            if name in names:  # sim as evaluator ranks the policies, not their flow heads
                tasks += [(t, scale.sim_eval_trials, "sim") for t in SIM_EVAL_TASKS.values()]
            for task, n, block in tasks:  # a different success pattern per run, task and block
                k += 1
                rows = [{"index": t.index, "seed": t.seed, "condition": t.condition, "success": (t.index * k) % 5 < 2,
                         "object": ("cube", "capsule", "sphere")[(t.index + k) % 3]}
                        for t in make_protocol(n, base_seed=10000 if block == "sim" else block)]
                prepared[run].setdefault(task, {})[str(block)] = (rows, summarize(rows))
                if task == REAL_TASK:
                    pooled[name] += [{key: v for key, v in row.items() if key != "index"} for row in rows]
    (tmp_path / "results.json").write_text(json.dumps(prepared))
    monkeypatch.setenv("STUB_RESULTS", str(tmp_path / "results.json"))
    perception = {name: {"by_object": {obj: {"demos": 1, "grasp_window": {
        "tracker": {"x": 0.0, "y": 0.0, "z": 0.01 * (k + j)}, "tracker_across_belt": {"median_cm": 0.1 * (k + 2 * j)}}}
        for j, obj in enumerate(("cube", "sphere"))}} for k, name in enumerate(names)}
    (tmp_path / "perception.json").write_text(json.dumps(perception))
    monkeypatch.setenv("STUB_PERCEPTION", str(tmp_path / "perception.json"))
    monkeypatch.setenv("STUB_REAL_TASK", REAL_TASK)
    experiment = stub_experiment

    run_dir = tmp_path / scale_name
    code = experiment.main(["--scale", scale_name, "--run-dir", str(run_dir)])
    out = capsys.readouterr()
    assert code == 0, out.out[-3000:] + out.err[-3000:]
    report = json.loads((run_dir / "report" / "experiment.json").read_text())
    assert set(report["real"]) == set(names) and set(report["flow_heads"]) == set(flows)
    per_policy = len(scale.seeds) * len(scale.blocks) * scale.eval_trials
    for name, summary in {**report["real"], **report["flow_heads"]}.items():
        assert summary == summarize(pooled[name])
        assert summary["overall"]["trials"] == per_policy
        assert summary["nominal"]["trials"] + summary["shifted"]["trials"] == per_policy
    assert len(report["table"]) == len(CONFIGS) == 4
    for axis in ("world", "behaviour"):
        effect = report["main_effects"][axis]
        lo, hi = effect["interval"]
        assert -1 <= lo <= effect["effect"] <= hi <= 1
    base = report["real"]["real_only"]["overall"]
    for c in CONFIGS:
        cell = report["real"][c]["overall"]
        diff, lo, hi = difference_interval(cell["successes"], cell["trials"], base["successes"], base["trials"])
        assert report["cotraining_effects"][c] == {"diff": diff, "interval": [lo, hi]}
    assert (report["alignment_effect"] is None) == (scale_name == "pooled")
    markdown = (run_dir / "report" / "experiment.md").read_text()
    # Each flow head against its L1 head, and co-training with flow heads, from the pooled rows.
    summaries = {**report["real"], **report["flow_heads"]}
    pairs = {f"{flow_name(n)} vs {n}": (flow_name(n), n) for n in scale.flow_heads}
    if flows:
        pairs["wg_bg_flow vs real_only_flow"] = ("wg_bg_flow", "real_only_flow")
    assert set(report["head_effects"]) == set(pairs)
    for pair, (a, b) in pairs.items():
        diff, lo, hi = difference_interval(summaries[a]["overall"]["successes"], per_policy,
                                           summaries[b]["overall"]["successes"], per_policy)
        assert report["head_effects"][pair] == {"diff": diff, "interval": [lo, hi]}
        assert f"- Flow-matching head: {pair}: {100 * diff:+.0f} points" in markdown
    # Success per object, each policy's pooled rows counted here.
    assert "| Policy | capsule | cube | sphere |" in markdown
    for name, rows in pooled.items():
        counts = [f"{sum(r['success'] for r in rows if r['object'] == o)}/{sum(r['object'] == o for r in rows)}"
                  for o in ("capsule", "cube", "sphere")]
        assert f"| {name} | {' | '.join(counts)} |" in markdown, name
    if scale.heldout_demos:  # each policy's first run's report on the held-out demos, a row per policy
        assert report["perception"] == {name: perception[name]["by_object"] for name in names}
        for k, name in enumerate(names):
            assert f"| {name} | {0.01 * k:+.2f} / {0.1 * k:.2f} | {0.01 * (k + 1):+.2f} / {0.1 * (k + 2):.2f} |" \
                in markdown, name
    else:
        assert report["perception"] is None and "held-out" not in markdown
    assert set(report["sim_as_evaluator"]) == set(SIM_EVAL_TASKS)
    for world, task in SIM_EVAL_TASKS.items():
        sim = json.loads((run_dir / "eval" / names[0] / task / "results.json").read_text())
        assert sim["policies"][names[0]] == summarize(prepared[names[0]][task]["sim"][0])
    stages = json.loads((run_dir / "stages.json").read_text())
    planned = plan(run_dir, scale)
    assert {s.name for s in planned} == set(stages)
    assert {s.name for s in planned if s.name.startswith("eval_")} == {
        f"eval_{folder}" for n in names + flows for run in runs(scale, n) for folder in evaluations(scale, run)}
    assert all(e["status"] == "complete" and e["wall_s"] > 0 and e["cpu_s"] > 0 for e in stages.values())
    assert out.out.count("[start]") == len(stages) and "[skip]" not in out.out
    assert "Main effect of world grounding" in markdown and "real_only" in markdown
    assert "Co-training with wg_bg vs real-only" in markdown
    assert (run_dir / "report" / REAL_TASK / "results.png").stat().st_size > 0
    # Every dataset's frames were deleted, each after the last training that reads it had finished.
    assert not list((tmp_path / "frames").iterdir())
    lines = out.out.splitlines()
    for stage in planned:
        if stage.frames_of:
            done = next(i for i, line in enumerate(lines) if line.startswith(f"[done] {stage.name} in"))
            for path in stage.frames_of:
                assert done < next(i for i, line in enumerate(lines)
                                   if line.startswith("[frames]") and f" reads {path.name} " in line), (stage.name, path)

    # Rerun: every stage is found complete and skipped; the report is made again from the same results.
    start = time.time()
    assert experiment.main(["--scale", scale_name, "--run-dir", str(run_dir)]) == 0
    again = capsys.readouterr().out
    assert again.count("[skip]") == len(stages) and "[start]" not in again
    assert json.loads((run_dir / "report" / "experiment.json").read_text())["real"] == report["real"]
    assert time.time() - start < 60


def test_a_failed_stage_stops_its_dependents_and_names_its_log(tmp_path, monkeypatch, capsys, stub_experiment):
    """A stage that fails (here the grounded-behaviour generation) is named with its log; what depends on it does
    not start, everything else runs, and the run exits 1."""
    monkeypatch.setenv("STUB_FAIL", "sim_wg_bg.hdf5")
    assert stub_experiment.main(["--scale", "smoke", "--run-dir", str(tmp_path / "broken"), "--jobs", "1"]) == 1
    out = capsys.readouterr()
    assert "[FAILED] sim_wg_bg" in out.out and "logs/sim_wg_bg.log" in out.out
    assert "failing as asked" in (tmp_path / "broken" / "logs" / "sim_wg_bg.log").read_text()
    assert "[start] train_wg_bg" not in out.out and "[start] train_wg_bg_align" not in out.out  # they read it
    assert "[done] train_wg_bu" in out.out  # independent of it
    assert "some stages failed" in out.err


@pytest.mark.parametrize("scale_name", sorted(SCALES))
def test_every_scales_training_stages_compose_a_valid_config(tmp_path, scale_name):
    """A scale's train.py overrides (policy kind, sizes, the alignment option) are checked without running it."""
    from r2s2r.policy.config import compose_train_cfg

    scale = SCALES[scale_name]
    stages = [s for s in plan(tmp_path, scale) if s.name.startswith("train_")]
    trained = [*policies(scale), *map(flow_name, scale.flow_heads)]
    assert {s.name for s in stages} == {f"train_{r}" for n in trained for r in runs(scale, n)}
    for stage in stages:
        cfg = compose_train_cfg(stage.command[2:])
        assert list(cfg.policy.cameras) == list(scale.cameras)
        assert cfg.seed in scale.seeds
        if len(cfg.data.datasets) == 2:
            assert [d.weight for d in cfg.data.datasets] == [1 - scale.sim_weight, scale.sim_weight]
        if stage.name == "train_wg_bg_align":
            assert cfg.cotrain.alignment_weight > 0
        # A flow head trains on the estimator of the L1 run of its policy and seed, after that run.
        flow = next((n for n in scale.flow_heads if stage.name.startswith(f"train_{flow_name(n)}")), None)
        assert cfg.object_centric.head == ("flow" if flow else "l1")
        if flow:
            sibling = next(r for r, seed in runs(scale, flow).items() if seed == cfg.seed)
            assert cfg.object_centric.estimator_from == str(tmp_path / "train" / sibling / "estimator.pt")
            assert f"train_{sibling}" in stage.after


@pytest.mark.parametrize("scale_name", sorted(SCALES))
def test_each_policys_evaluations_are_planned_before_the_next_policys_training(tmp_path, scale_name):
    """The scheduler starts ready stages in plan order: a run stopped part-way then holds whole rows of the table,
    the real-only row first, instead of every training and no evaluation."""
    scale = SCALES[scale_name]
    order = [s.name for s in plan(tmp_path, scale)]
    names = [*policies(scale), *map(flow_name, scale.flow_heads)]
    assert names[0] == "real_only"
    for earlier, later in zip(names, names[1:]):
        last_eval = max(order.index(f"eval_{f}") for r in runs(scale, earlier) for f in evaluations(scale, r))
        first_train = min(order.index(f"train_{r}") for r in runs(scale, later))
        assert last_eval < first_train, (earlier, later)
