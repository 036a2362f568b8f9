"""The study end to end on the twin: data, policies, real-side evaluation, the 2x2 table.

An experiment is a set of stages, each a run of one of the project's scripts with its own outputs:

    real                 collect_real.py: the real demos (on the twin)
    real10               collect_real.py: the first 10 of them again (only with the 10-real diagnostic)
    sim_<cfg>            generate.py: simulated trajectories of one grounding configuration (wg_bg, wg_bu, wu_bg, wu_bu)
    train_<policy>       train.py: real_only, the four co-trained policies, wg_bg_align (co-training with a domain
                         embedding and an alignment loss), and the diagnostic's real10_only / real10_wg_bg
    eval_<policy>        evaluate.py: the protocol on the real side, then in the grounded and ungrounded sim worlds
    report               the tables (in this process)

A stage whose outputs exist is skipped (every script publishes its output only when complete, and resumes its own
unfinished work), so an interrupted experiment continues where it stopped and a long one can be completed over
several runs. Independent stages run side by side (`jobs`). Each stage's wall time and CPU time (its process and
the processes it waited for: what it costs whatever else shares the machine) go to `stages.json`, its output to
`logs/<stage>.log`.
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

from r2s2r.files import write_text_atomic
from r2s2r.tasks import REAL_TASK

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
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
    align: tuple[str, ...] = ("policy.domain_embedding=true", "cotrain.alignment_weight=0.1")  # the alignment option


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
    "paper": Scale(real_demos=100, sim_trajectories=1500, train_steps=30000, eval_trials=50, sim_eval_trials=50,
                   diagnostic=True),
}


@dataclass
class Stage:
    name: str
    command: list[str]
    done_when: list[Path]  # the stage is complete when all of these exist
    after: list[str] = field(default_factory=list)

    def done(self) -> bool:
        return all(p.exists() for p in self.done_when)


def _script(name: str, *args: object) -> list[str]:
    return [sys.executable, str(SCRIPTS / name), *map(str, args)]


def policies(scale: Scale) -> dict[str, tuple[list[tuple[str, float]], tuple[str, ...]]]:
    """Policy name -> (datasets as (stage, weight), extra train overrides)."""
    out: dict = {"real_only": ([("real", 1.0)], ())}
    for cfg in CONFIGS:
        out[cfg] = ([("real", 0.5), (f"sim_{cfg}", 0.5)], ())
    out["wg_bg_align"] = ([("real", 0.5), ("sim_wg_bg", 0.5)], scale.align)
    if scale.diagnostic:
        out["real10_only"] = ([("real10", 1.0)], ())
        out["real10_wg_bg"] = ([("real10", 0.5), ("sim_wg_bg", 0.5)], ())
    return out


def plan(run_dir: Path, scale: Scale, threads: int = 1) -> list[Stage]:
    """Every stage of the experiment at `scale`, in an order that respects dependencies."""
    data = run_dir / "data"
    size = scale.image_size
    cams = ",".join(scale.cameras)
    paths = {"real": data / "real.hdf5", "real10": data / "real10.hdf5",
             **{f"sim_{c}": data / f"sim_{c}.hdf5" for c in CONFIGS}}
    stages = [Stage("real", _script("collect_real.py", "--num-demos", scale.real_demos, "--output", paths["real"],
                                    "--image-size", size, "--seed", 0, "--cameras", *scale.cameras),
                    [paths["real"]])]
    if scale.diagnostic:
        stages.append(Stage("real10", _script("collect_real.py", "--num-demos", 10, "--output", paths["real10"],
                                              "--image-size", size, "--seed", 0, "--cameras", *scale.cameras),
                            [paths["real10"]]))
    for cfg, (_, behaviour, task) in CONFIGS.items():
        extra = [f"generator.source={paths['real'].absolute()}"] if behaviour == "grounded" else []
        stages.append(Stage(f"sim_{cfg}", _script(
            "generate.py", "--task", task, "--num-trajectories", scale.sim_trajectories, "--output",
            paths[f"sim_{cfg}"], "--seed", 0, "--no-progress", f"env.cameras=[{cams}]", f"env.image_size=[{size},{size}]",
            *extra), [paths[f"sim_{cfg}"]], after=["real"] if behaviour == "grounded" else []))
    for name, (mixture, extra) in policies(scale).items():
        datasets = ", ".join(f"{{path: {paths[s].absolute()}, weight: {w}}}" for s, w in mixture)
        run = run_dir / "train" / name
        stages.append(Stage(f"train_{name}", _script(
            "train.py", f"run_dir={run}", f"steps={scale.train_steps}", f"batch_size={scale.batch_size}",
            f"threads={threads}", f"data.datasets=[{datasets}]", f"policy.cameras=[{cams}]",
            f"policy.image_size=[{size},{size}]", "checkpoint_every=500", *scale.policy, *extra),
            [run / "policy.pt"], after=sorted({s for s, _ in mixture})))
        evaluation = run_dir / "eval" / name
        stages.append(Stage(f"eval_{name}", _script(
            "evaluate.py", "--checkpoint", run / "policy.pt", "--names", name, "--trials", scale.eval_trials,
            "--output", evaluation, "--no-progress",
            *(["--max-steps", scale.max_steps] if scale.max_steps else [])),
            [evaluation / REAL_TASK / "results.json"], after=[f"train_{name}"]))
    # Sim as evaluator last: an experiment stopped part-way has the real-side table first.
    for name in policies(scale):
        run, evaluation = run_dir / "train" / name, run_dir / "eval" / name
        for world, task in SIM_EVAL_TASKS.items():
            stages.append(Stage(f"simeval_{world}_{name}", _script(
                "evaluate.py", "--checkpoint", run / "policy.pt", "--names", name, "--task", task, "--trials",
                scale.sim_eval_trials, "--output", evaluation, "--no-progress",
                *(["--max-steps", scale.max_steps] if scale.max_steps else [])),
                [evaluation / task / "results.json"], after=[f"train_{name}"]))
    return stages


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
                else:
                    failed.add(stage.name)
                    log.record(stage.name, status=f"failed (exit {code})", wall_s=round(seconds, 1), cpu_s=round(cpu, 2))
                    echo(f"[FAILED] {stage.name} (exit {code}); see {run_dir / 'logs' / (stage.name + '.log')}")
            # Stages that depend on a failed one can never run: count them as failed so the loop ends.
            for s in stages:
                if s.name not in failed and any(d in failed for d in s.after):
                    failed.add(s.name)
    return not failed


def _summaries(run_dir: Path, task: str, names: list[str]) -> dict[str, dict]:
    out = {}
    for name in names:
        results = json.loads((run_dir / "eval" / name / task / "results.json").read_text())
        out[name] = results["policies"][name]
    return out


def report(run_dir: Path, scale: Scale, scale_name: str) -> dict:
    """The experiment's tables from its evaluation stages: `report/experiment.{json,md}` and the real side's
    results table and plot (`report/<task>/results.*`)."""
    from r2s2r.evaluation import difference_interval, main_effect
    from r2s2r.evaluation.report import rate_text
    from r2s2r.evaluation.policies import ranking
    from r2s2r.evaluation.report import write_report

    names = list(policies(scale))
    real = _summaries(run_dir, REAL_TASK, names)
    out_dir = run_dir / "report"
    write_report(out_dir / REAL_TASK, real, f"Success on the real side (twin), scale {scale_name}")
    table = {(CONFIGS[c][0], CONFIGS[c][1]): (real[c]["overall"]["successes"], real[c]["overall"]["trials"])
             for c in CONFIGS}
    effects = {axis: main_effect(table, axis) for axis in ("world", "behaviour")}
    base, aligned = real["wg_bg"]["overall"], real["wg_bg_align"]["overall"]
    alignment = difference_interval(aligned["successes"], aligned["trials"], base["successes"], base["trials"])
    sim = {world: ranking(real, _summaries(run_dir, task, names)) for world, task in SIM_EVAL_TASKS.items()}
    stages = json.loads((run_dir / "stages.json").read_text()) if (run_dir / "stages.json").exists() else {}
    result = {"scale": scale_name, "scale_config": {k: getattr(scale, k) for k in scale.__dataclass_fields__},
              "real": real, "table": {f"world_{w}/behaviour_{b}": v for (w, b), v in table.items()},
              "main_effects": effects,
              "alignment_effect": {"diff": alignment[0], "interval": list(alignment[1:])},
              "sim_as_evaluator": sim, "stages": stages}

    lines = [f"# Experiment ({scale_name}) on the twin", "",
             "Success on the real side (the reality twin), k/n (rate [Wilson 95 %]).", "",
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
    lines.append(f"- Alignment option ({' '.join(scale.align)}; wg_bg_align vs wg_bg): "
                 f"{100 * alignment[0]:+.0f} points [{100 * alignment[1]:+.0f}, {100 * alignment[2]:+.0f}]")
    lines += ["", "| policy | overall | nominal | shifted |", "|---|---|---|---|"]
    lines += [f"| {n} | {rate_text(s['overall'])} | {rate_text(s['nominal'])} | {rate_text(s['shifted'])} |"
              for n, s in real.items()]
    lines += ["", "Sim as evaluator (overall success in sim vs on the real side, over the policies above):", "",
              "| sim world | Pearson r | Spearman rho | MMRV |", "|---|---:|---:|---:|"]
    fmt = lambda v: "undefined" if v is None else f"{v:.2f}"  # noqa: E731
    lines += [f"| {w} | {fmt(r['pearson'])} | {fmt(r['spearman'])} | {r['mmrv']:.3f} |" for w, r in sim.items()]
    if stages:
        lines += ["", "| stage | wall time (s) | CPU time (s) |", "|---|---:|---:|"]
        lines += [f"| {n} | {e.get('wall_s', '')} | {e.get('cpu_s', '')} |" for n, e in stages.items()]
    for path, text in ((out_dir / "experiment.json", json.dumps(result, indent=2)),
                       (out_dir / "experiment.md", "\n".join(lines))):
        write_text_atomic(path, text + "\n")
    return result
