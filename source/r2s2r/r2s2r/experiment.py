"""The study end to end on the twin: data, policies, real-side evaluation, the 2x2 table.

An experiment is a set of stages, each a run of one of the project's scripts with its own outputs:

    real                 collect_real.py: the real demos (on the twin)
    real10               collect_real.py: the first 10 of them again (only with the 10-real diagnostic)
    sim_<cfg>            generate.py: simulated trajectories of one grounding configuration (wg_bg, wg_bu, wu_bg, wu_bu)
    train_<run>          train.py: real_only, the four co-trained policies, wg_bg_align (co-training with a domain
                         embedding and an alignment loss, where the scale has it), and the diagnostic's real10_only /
                         real10_wg_bg; one run per training seed (<policy>, then <policy>_s<seed>); where the scale
                         has flow heads, <policy>_flow runs on the estimators of <policy>'s runs
    eval_<run>[_b<seed>] evaluate.py: the protocol on the real side, one stage per block of trial seeds
    simeval_<world>_<policy>  evaluate.py: the first seed's run in the grounded and ungrounded sim worlds
    report               the tables (in this process), each policy's real-side trials pooled over its runs and blocks

A stage whose outputs exist is skipped (every script publishes its output only when complete, and resumes its own
unfinished work), so an interrupted experiment continues where it stopped and a long one can be completed over
several runs. Independent stages run side by side (`jobs`). Each stage's wall time and CPU time (its process and
the processes it waited for: what it costs whatever else shares the machine) go to `stages.json`, its output to
`logs/<stage>.log`, and a generation's progress (a line per finished chunk: admitted so far, the run's ETA) to
`logs/<stage>.chunks.jsonl`. Once every training that reads a dataset is over, its frame cache is deleted
(`policy.data.drop_frame_caches`: at the study's scale a simulated dataset's frames take ~14 GB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from r2s2r.evaluation.protocol import BASE_SEED
from r2s2r.files import write_text_atomic
from r2s2r.tasks import REAL_TASK

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
HELDOUT_SEED = 3000  # the held-out real demos' first seed, far from the training demos' (0 onwards)
CONFIGS = {  # the study's 2x2: (world, behaviour) grounding -> the task ID its data comes from
    "wg_bg": ("grounded", "grounded", "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"),
    "wg_bu": ("grounded", "ungrounded", "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0"),
    "wu_bg": ("ungrounded", "grounded", "R2S2R-PickSort-WorldUngrounded-BehaviorGrounded-v0"),
    "wu_bu": ("ungrounded", "ungrounded", "R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0"),
}
# Sim as evaluator: one sim task per world (the behaviour part of a task ID only matters for data generation).
SIM_EVAL_TASKS = {"grounded": CONFIGS["wg_bg"][2], "ungrounded": CONFIGS["wu_bg"][2]}


@dataclass(frozen=True)
class Scale:
    """How big each stage is."""

    real_demos: int
    sim_trajectories: int
    train_steps: int
    eval_trials: int
    sim_eval_trials: int
    cameras: tuple[str, ...] = ("head_left", "right_wrist")
    image_size: int = 64
    batch_size: int = 64
    max_steps: int | None = None  # cap on control steps per evaluation trial (None: the task's episode length)
    policy: tuple[str, ...] = ()  # extra train.py overrides (e.g. a smaller model)
    diagnostic: bool = False  # the 10-real diagnostic
    # The alignment option's train.py overrides (the wg_bg_align policy); () leaves that policy out.
    align: tuple[str, ...] = ("policy.domain_embedding=true", "cotrain.alignment_weight=0.1")
    sim_overrides: tuple[str, ...] = ()  # extra generate.py overrides for every configuration
    sim_weight: float = 0.5  # a co-trained mixture's sampling weight of the simulated dataset (the real one's: 1 - it)
    seeds: tuple[int, ...] = (0,)  # training seeds: one whole training (estimator and head) per policy and seed
    blocks: tuple[int, ...] = (BASE_SEED,)  # real-side evaluation blocks (evaluate.py --base-seed), pooled
    # Held-out real demos (seeds from HELDOUT_SEED) on which each object-centric policy's perception is reported per
    # object (perception_report.py); 0: none.
    heldout_demos: int = 0
    # Object-centric policies also trained with the flow-matching action head (object_centric.head=flow) on each of
    # their runs' estimators, so both heads share perception, data and trials (`<policy>_flow`); the report sets
    # each beside its L1 head.
    flow_heads: tuple[str, ...] = ()


SCALES = {
    # Asserts only that the pipeline produces the full table: a few demos, a tiny model, short trials.
    "smoke": Scale(real_demos=2, sim_trajectories=2, train_steps=10, eval_trials=5, sim_eval_trials=5,
                   cameras=("right_wrist",), image_size=32, batch_size=8, max_steps=30,
                   policy=("policy.dim=32", "policy.heads=2", "policy.obs_layers=1", "policy.action_layers=1")),
    # Sized for a 2-core CPU machine (stage times in docs/results.md): rendering the twin's residual gap (shadows,
    # clutter) dominates there, so one camera.
    "medium": Scale(real_demos=100, sim_trajectories=100, train_steps=2000, eval_trials=50, sim_eval_trials=10,
                    cameras=("head_left",)),
    # The study at a scale where policies pick (docs/results.md): the object-centric policy on a 128^2 head view,
    # 100 real demos, 200 simulated trajectories per configuration.
    "study": Scale(real_demos=100, sim_trajectories=200, train_steps=3000, eval_trials=50, sim_eval_trials=20,
                   cameras=("head_left",), image_size=128,
                   policy=("policy.kind=object_centric", "policy.chunk=16", "policy.execute=4",
                           "object_centric.estimator_steps=4500"),
                   align=("cotrain.alignment_weight=0.1",)),
    # The study's table at the study's scale with the recipe that measured a co-training gain through the camera
    # (docs/results.md, "Plan for the study's table at the study's scale"): 1,500 simulated trajectories per
    # configuration with corrective noise, real 0.25 / simulated 0.75, heads deployed with temporal ensembling,
    # two training seeds per policy, each evaluated on the protocol's two blocks (100 trials per run).
    "study1500": Scale(real_demos=100, sim_trajectories=1500, train_steps=3000, eval_trials=50, sim_eval_trials=50,
                       cameras=("head_left",), image_size=128,
                       policy=("policy.kind=object_centric", "policy.chunk=16", "policy.execute=4",
                               "policy.ensemble=0", "object_centric.estimator_steps=4500"),
                       align=("cotrain.alignment_weight=0.1",),
                       sim_overrides=("datagen.corrective_noise=[0.02,0.01,0.005]", "datagen.corrective_tau=0.5"),
                       sim_weight=0.75, seeds=(0, 1), blocks=(BASE_SEED, 2 * BASE_SEED), heldout_demos=24,
                       flow_heads=("real_only", "wg_bg")),
    "paper": Scale(real_demos=100, sim_trajectories=1500, train_steps=30000, eval_trials=50, sim_eval_trials=50,
                   diagnostic=True),
}


@dataclass
class Stage:
    name: str
    command: list[str]
    done_when: list[Path]  # the stage is complete when all of these exist
    after: list[str] = field(default_factory=list)
    frames_of: list[Path] = field(default_factory=list)  # datasets whose frames it reads through the frame cache

    def done(self) -> bool:
        return all(p.exists() for p in self.done_when)


def _script(name: str, *args: object) -> list[str]:
    return [sys.executable, str(SCRIPTS / name), *map(str, args)]


def policies(scale: Scale) -> dict[str, tuple[list[tuple[str, float]], tuple[str, ...]]]:
    """Policy name -> (datasets as (stage, weight), extra train overrides)."""
    real_w, sim_w = 1.0 - scale.sim_weight, scale.sim_weight
    out: dict = {"real_only": ([("real", 1.0)], ())}
    for cfg in CONFIGS:
        out[cfg] = ([("real", real_w), (f"sim_{cfg}", sim_w)], ())
    if scale.align:
        out["wg_bg_align"] = ([("real", real_w), ("sim_wg_bg", sim_w)], scale.align)
    if scale.diagnostic:
        out["real10_only"] = ([("real10", 1.0)], ())
        out["real10_wg_bg"] = ([("real10", real_w), ("sim_wg_bg", sim_w)], ())
    return out


def flow_name(name: str) -> str:
    """The flow-head counterpart of policy `name` (Scale.flow_heads)."""
    return f"{name}_flow"


def runs(scale: Scale, name: str) -> dict[str, int]:
    """A policy's training runs: run name -> seed (the first seed's run carries the policy's name)."""
    return {name if seed == scale.seeds[0] else f"{name}_s{seed}": seed for seed in scale.seeds}


def evaluations(scale: Scale, run: str) -> dict[str, int]:
    """A run's real-side evaluations: folder name under eval/ -> base seed (the first block's carries the run's
    name, and holds the sim-as-evaluator results too)."""
    return {run if block == scale.blocks[0] else f"{run}_b{block}": block for block in scale.blocks}


def plan(run_dir: Path, scale: Scale, threads: int = 1) -> list[Stage]:
    """Every stage of the experiment at `scale`, in an order that respects dependencies."""
    data = run_dir / "data"
    size = scale.image_size
    cams = ",".join(scale.cameras)
    paths = {"real": data / "real.hdf5", "real10": data / "real10.hdf5", "heldout": data / "heldout.hdf5",
             **{f"sim_{c}": data / f"sim_{c}.hdf5" for c in CONFIGS}}
    stages = [Stage("real", _script("collect_real.py", "--num-demos", scale.real_demos, "--output", paths["real"],
                                    "--image-size", size, "--seed", 0, "--cameras", *scale.cameras),
                    [paths["real"]])]
    if scale.diagnostic:
        stages.append(Stage("real10", _script("collect_real.py", "--num-demos", 10, "--output", paths["real10"],
                                              "--image-size", size, "--seed", 0, "--cameras", *scale.cameras),
                            [paths["real10"]]))
    if scale.heldout_demos:
        stages.append(Stage("heldout", _script("collect_real.py", "--num-demos", scale.heldout_demos, "--output",
                                               paths["heldout"], "--image-size", size, "--seed", HELDOUT_SEED,
                                               "--cameras", *scale.cameras), [paths["heldout"]]))
    for cfg, (_, behaviour, task) in CONFIGS.items():
        extra = [f"generator.source={paths['real'].absolute()}"] if behaviour == "grounded" else []
        stages.append(Stage(f"sim_{cfg}", _script(
            "generate.py", "--task", task, "--num-trajectories", scale.sim_trajectories, "--output",
            paths[f"sim_{cfg}"], "--seed", 0, "--no-progress", "--log-json", run_dir / "logs" / f"sim_{cfg}.chunks.jsonl",
            f"env.cameras=[{cams}]", f"env.image_size=[{size},{size}]", *extra, *scale.sim_overrides),
            [paths[f"sim_{cfg}"]], after=["real"] if behaviour == "grounded" else []))

    def train(run_name: str, seed: int, mixture: list[tuple[str, float]], extra: tuple[str, ...],
              after: tuple[str, ...] = ()) -> Stage:
        run = run_dir / "train" / run_name
        datasets = ", ".join(f"{{path: {paths[s].absolute()}, weight: {w}}}" for s, w in mixture)
        return Stage(f"train_{run_name}", _script(
            "train.py", f"run_dir={run}", f"seed={seed}", f"steps={scale.train_steps}",
            f"batch_size={scale.batch_size}", f"threads={threads}", f"data.datasets=[{datasets}]",
            f"policy.cameras=[{cams}]", f"policy.image_size=[{size},{size}]", "checkpoint_every=500",
            *scale.policy, *extra),
            [run / "policy.pt"], after=sorted({s for s, _ in mixture} | set(after)),
            frames_of=[paths[s] for s, _ in mixture])

    def evaluate(name: str, run_name: str) -> list[Stage]:
        out = []
        for folder, block in evaluations(scale, run_name).items():
            evaluation = run_dir / "eval" / folder
            out.append(Stage(f"eval_{folder}", _script(
                "evaluate.py", "--checkpoint", run_dir / "train" / run_name / "policy.pt", "--names", name,
                "--trials", scale.eval_trials, "--base-seed", block, "--output", evaluation, "--no-progress",
                *(["--max-steps", scale.max_steps] if scale.max_steps else [])),
                [evaluation / REAL_TASK / "results.json"], after=[f"train_{run_name}"]))
        return out

    # Per policy its runs, then their evaluations: the scheduler starts the first ready stage in this order, so
    # a run stopped part-way has whole rows of the real-side table (real-only first), not every training and no
    # evaluation. The seeds of a policy one after the other: two runs side by side share one frame cache.
    for name, (mixture, extra) in policies(scale).items():
        stages += [train(run_name, seed, mixture, extra) for run_name, seed in runs(scale, name).items()]
        for run_name in runs(scale, name):
            stages += evaluate(name, run_name)
    if scale.heldout_demos:  # each policy's first run
        for name in policies(scale):
            report = perception_path(run_dir, name)
            stages.append(Stage(f"perception_{name}", _script(
                "perception_report.py", "--checkpoint", run_dir / "train" / name / "policy.pt", "--dataset",
                paths["heldout"], "--output", report), [report], after=[f"train_{name}", "heldout"]))
    # Sim as evaluator last: an experiment stopped part-way has the real-side table first.
    for name in policies(scale):
        run, evaluation = run_dir / "train" / name, run_dir / "eval" / name
        for world, task in SIM_EVAL_TASKS.items():
            stages.append(Stage(f"simeval_{world}_{name}", _script(
                "evaluate.py", "--checkpoint", run / "policy.pt", "--names", name, "--task", task, "--trials",
                scale.sim_eval_trials, "--output", evaluation, "--no-progress",
                *(["--max-steps", scale.max_steps] if scale.max_steps else [])),
                [evaluation / task / "results.json"], after=[f"train_{name}"]))
    # The flow heads after everything else, on the estimators of the runs they sit beside.
    for name in scale.flow_heads:
        mixture, extra = policies(scale)[name]
        for (run_name, seed), flow_run in zip(runs(scale, name).items(), runs(scale, flow_name(name))):
            estimator = run_dir / "train" / run_name / "estimator.pt"
            stages.append(train(flow_run, seed, mixture, (*extra, "object_centric.head=flow",
                                                          f"object_centric.estimator_from={estimator}"),
                                after=(f"train_{run_name}",)))
        for flow_run in runs(scale, flow_name(name)):
            stages += evaluate(flow_name(name), flow_run)
    return stages


def perception_path(run_dir: Path, name: str) -> Path:
    return run_dir / "perception" / f"{name}.json"


class StageLog:
    """`stages.json`: per stage, its status, wall and CPU time (kept across runs, rewritten atomically)."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict = json.loads(path.read_text()) if path.exists() else {}

    def record(self, name: str, **values) -> None:
        self.entries[name] = {**self.entries.get(name, {}), **values}
        write_text_atomic(self.path, json.dumps(self.entries, indent=2))


def run_stages(stages: list[Stage], run_dir: Path, jobs: int = 2, echo=print) -> bool:
    """Run every stage not yet done, up to `jobs` at a time, dependencies first. False if any stage failed."""
    log = StageLog(run_dir / "stages.json")
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    finished = {s.name for s in stages if s.done()}
    for name in finished:
        echo(f"[skip] {name}: already complete")
    failed: set[str] = set()
    running: dict[Future, Stage] = {}
    dropped: set[Path] = set()

    def drop_unread_frames() -> None:
        from r2s2r.policy.data import drop_frame_caches

        unread = {p for s in stages for p in s.frames_of} - dropped
        unread -= {p for s in stages if s.name not in finished for p in s.frames_of}
        for path in sorted(unread):
            dropped.add(path)
            if freed := drop_frame_caches(path):
                echo(f"[frames] every training that reads {path.name} is over: {freed / 1e9:.1f} GB of cached "
                     f"frames deleted")

    drop_unread_frames()

    def launch(stage: Stage) -> tuple[int, float, float]:
        start = time.time()
        with open(run_dir / "logs" / f"{stage.name}.log", "a") as out:
            out.write(f"$ {' '.join(stage.command)}\n")
            out.flush()
            proc = subprocess.Popen(stage.command, stdout=out, stderr=subprocess.STDOUT, cwd=SCRIPTS.parent,
                                    env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
            # wait4 gives this child's own resource usage (with its waited-for children), not the whole pool's.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        return proc.returncode, time.time() - start, usage.ru_utime + usage.ru_stime

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while True:
            active = finished | failed | {r.name for r in running.values()}
            ready = [s for s in stages if s.name not in active and all(d in finished for d in s.after)]
            for stage in ready[: jobs - len(running)]:
                echo(f"[start] {stage.name}")
                running[pool.submit(launch, stage)] = stage
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                stage = running.pop(future)
                code, seconds, cpu = future.result()
                if code == 0 and stage.done():
                    finished.add(stage.name)
                    log.record(stage.name, status="complete", wall_s=round(seconds, 1), cpu_s=round(cpu, 2),
                               finished=time.strftime("%Y-%m-%d %H:%M:%S"))
                    echo(f"[done] {stage.name} in {seconds:.0f} s")
                    drop_unread_frames()
                else:
                    failed.add(stage.name)
                    log.record(stage.name, status=f"failed (exit {code})", wall_s=round(seconds, 1), cpu_s=round(cpu, 2))
                    echo(f"[FAILED] {stage.name} (exit {code}); see {run_dir / 'logs' / (stage.name + '.log')}")
            # Stages that depend on a failed one can never run: count them as failed so the loop ends.
            for s in stages:
                if s.name not in failed and any(d in failed for d in s.after):
                    failed.add(s.name)
    return not failed


def _real_summaries(run_dir: Path, scale: Scale, names: list[str]) -> dict[str, dict]:
    """Each policy's real-side summary, its trials pooled over its training seeds' runs and the blocks."""
    from r2s2r.evaluation.protocol import pooled_rows, summarize

    return {name: summarize(pooled_rows(run_dir / "eval" / folder / REAL_TASK / name / "trials.jsonl"
                                        for run in runs(scale, name) for folder in evaluations(scale, run)))
            for name in names}


def _sim_summaries(run_dir: Path, task: str, names: list[str]) -> dict[str, dict]:
    """Each policy's summary in sim `task` (its first seed's run)."""
    return {name: json.loads((run_dir / "eval" / name / task / "results.json").read_text())["policies"][name]
            for name in names}


def report(run_dir: Path, scale: Scale, scale_name: str) -> dict:
    """The experiment's tables from its evaluation stages: `report/experiment.{json,md}` and the real side's
    results table and plot (`report/<task>/results.*`)."""
    from r2s2r.evaluation import difference_interval, main_effect
    from r2s2r.evaluation.policies import ranking
    from r2s2r.evaluation.report import object_table, rate_text, write_report

    names = list(policies(scale))
    real = _real_summaries(run_dir, scale, names)
    flows = _real_summaries(run_dir, scale, [flow_name(n) for n in scale.flow_heads])
    out_dir = run_dir / "report"
    write_report(out_dir / REAL_TASK, {**real, **flows}, f"Success on the real side (twin), scale {scale_name}")
    table = {(CONFIGS[c][0], CONFIGS[c][1]): (real[c]["overall"]["successes"], real[c]["overall"]["trials"])
             for c in CONFIGS}
    effects = {axis: main_effect(table, axis) for axis in ("world", "behaviour")}

    def versus(name: str, baseline: str) -> dict:
        a, b = ({**real, **flows}[n]["overall"] for n in (name, baseline))
        diff, low, high = difference_interval(a["successes"], a["trials"], b["successes"], b["trials"])
        return {"diff": diff, "interval": [low, high]}

    cotraining = {c: versus(c, "real_only") for c in CONFIGS}
    alignment = versus("wg_bg_align", "wg_bg") if "wg_bg_align" in real else None
    # Each flow head against the L1 head it shares perception with, and co-training's effect with flow heads.
    heads = {f"{flow_name(n)} vs {n}": versus(flow_name(n), n) for n in scale.flow_heads}
    heads.update({f"{flow_name(c)} vs {flow_name('real_only')}": versus(flow_name(c), flow_name("real_only"))
                  for c in CONFIGS if {c, "real_only"} <= set(scale.flow_heads)})
    sim = {world: ranking(real, _sim_summaries(run_dir, task, names)) for world, task in SIM_EVAL_TASKS.items()}
    perception = ({n: json.loads(perception_path(run_dir, n).read_text())["by_object"] for n in names}
                  if scale.heldout_demos else None)
    stages = json.loads((run_dir / "stages.json").read_text()) if (run_dir / "stages.json").exists() else {}
    result = {"scale": scale_name, "scale_config": {k: getattr(scale, k) for k in scale.__dataclass_fields__},
              "real": real, "table": {f"world_{w}/behaviour_{b}": v for (w, b), v in table.items()},
              "main_effects": effects, "cotraining_effects": cotraining, "alignment_effect": alignment,
              "flow_heads": flows, "head_effects": heads,
              "sim_as_evaluator": sim, "perception": perception, "stages": stages}

    pooled = (f" Each policy's trials pooled over {len(scale.seeds)} training seeds x {len(scale.blocks)} blocks "
              f"of {scale.eval_trials}." if len(scale.seeds) * len(scale.blocks) > 1 else "")
    lines = [f"# Experiment ({scale_name}) on the twin", "",
             f"Success on the real side (the reality twin), k/n (rate [Wilson 95 %]).{pooled}", "",
             "| world \\ behaviour | grounded | ungrounded |", "|---|---|---|"]
    for w in ("grounded", "ungrounded"):
        cells = [rate_text(real[next(c for c, v in CONFIGS.items() if v[:2] == (w, b))]["overall"])
                 for b in ("grounded", "ungrounded")]
        lines.append(f"| {w} | {cells[0]} | {cells[1]} |")
    lines += ["", f"Real-only baseline: {rate_text(real['real_only']['overall'])}.", ""]
    for axis, e in effects.items():
        lo, hi = e["interval"]
        lines.append(f"- Main effect of {axis} grounding (averaged over the other axis): {100 * e['effect']:+.0f} "
                     f"points [{100 * lo:+.0f}, {100 * hi:+.0f}] (Newcombe 95 %)")
    points = lambda e: f"{100 * e['diff']:+.0f} points [{100 * e['interval'][0]:+.0f}, {100 * e['interval'][1]:+.0f}]"  # noqa: E731
    lines += [f"- Co-training with {c} vs real-only: {points(e)}" for c, e in cotraining.items()]
    if alignment:
        lines.append(f"- Alignment option ({' '.join(scale.align)}; wg_bg_align vs wg_bg): {points(alignment)}")
    lines += [f"- Flow-matching head: {pair}: {points(e)}" for pair, e in heads.items()]
    lines += ["", "| policy | overall | nominal | shifted |", "|---|---|---|---|"]
    lines += [f"| {n} | {rate_text(s['overall'])} | {rate_text(s['nominal'])} | {rate_text(s['shifted'])} |"
              for n, s in {**real, **flows}.items()]
    # Per object: where a policy's gain or loss sits is often one object (a grasp the demos cannot teach).
    by_object = object_table({**real, **flows})
    if by_object:
        lines += ["", "Success per object, k/n:", "", *by_object]
    lines += ["", "Sim as evaluator (overall success in sim vs on the real side, over the policies above):", "",
              "| sim world | Pearson r | Spearman rho | MMRV |", "|---|---:|---:|---:|"]
    fmt = lambda v: "undefined" if v is None else f"{v:.2f}"  # noqa: E731
    lines += [f"| {w} | {fmt(r['pearson'])} | {fmt(r['spearman'])} | {r['mmrv']:.3f} |" for w, r in sim.items()]
    if perception:
        objects = sorted({o for by_object in perception.values() for o in by_object})
        lines += ["", f"Perception on {scale.heldout_demos} held-out real demos (seeds from {HELDOUT_SEED}), the "
                  "last second before the object leaves the belt: the tracker's median height error and its median "
                  "error across the belt (cm), per object:", "",
                  "| policy | " + " | ".join(objects) + " |", "|---|" + "---:|" * len(objects)]

        def cell(window: dict | None) -> str:
            if not window or "tracker" not in window:
                return "–"
            return f"{window['tracker']['z']:+.2f} / {window['tracker_across_belt']['median_cm']:.2f}"

        lines += [f"| {n} | " + " | ".join(cell(by_object.get(o, {}).get("grasp_window")) for o in objects) + " |"
                  for n, by_object in perception.items()]
    if stages:
        lines += ["", "| stage | wall time (s) | CPU time (s) |", "|---|---:|---:|"]
        lines += [f"| {n} | {e.get('wall_s', '')} | {e.get('cpu_s', '')} |" for n, e in stages.items()]
    for path, text in ((out_dir / "experiment.json", json.dumps(result, indent=2)),
                       (out_dir / "experiment.md", "\n".join(lines))):
        write_text_atomic(path, text + "\n")
    return result
