"""The task IDs, as names only: what a dataset file may name as its task (`r2s2r.data` checks it) without the data
layer importing the task registry. `r2s2r.tasks` registers exactly these (a test checks the two agree)."""

REAL_TASK = "R2S2R-PickSort-Real-v0"  # the reality twin: the real side, whose datasets count as real data
DESIGN_TASK = "R2S2R-PickSort-v0"
# The 2x2 grounding study: task ID -> (world file, behaviour generator).
GROUNDING_VARIANTS = {
    "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0": ("grounded", "mimic"),
    "R2S2R-PickSort-WorldGrounded-BehaviorUngrounded-v0": ("grounded", "planner"),
    "R2S2R-PickSort-WorldUngrounded-BehaviorGrounded-v0": ("ungrounded", "mimic"),
    "R2S2R-PickSort-WorldUngrounded-BehaviorUngrounded-v0": ("ungrounded", "planner"),
}
# The cell's Isaac Lab task IDs that data is generated in (scripts/generate.py --generator mimic|planner), by world;
# `r2s2r.isaaclab_tasks` registers them for Isaac Lab. The twin's Isaac Lab task is the real side, so, like
# REAL_TASK's MuJoCo one, no data is generated in it.
ISAACLAB_GENERATION_WORLDS = {
    "Isaac-R2S2R-PickSort-Grounded-v0": "grounded",
    "Isaac-R2S2R-PickSort-Ungrounded-v0": "ungrounded",
}
DATASET_TASKS = (DESIGN_TASK, REAL_TASK, *GROUNDING_VARIANTS, *ISAACLAB_GENERATION_WORLDS)
