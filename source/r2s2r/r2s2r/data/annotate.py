"""Automatic subtask annotation of pick-and-sort demonstrations, from signals a real cell records.

A demo is cut into four subtasks, each ending where a signal switches on:

==========  =========================================================================================
intercept   from the start until the hand begins its final closure over the object (approach, pursuit of the
            moving object, descent)
grasp       closure until the object is lifted off the belt near the hand
carry       lift and carry until the object is above its bin
release     lowering, opening the hand, retreat: the rest of the demo
==========  =========================================================================================

The signals come from `obs/datagen_info` only (tracked object pose, measured hand pose, hand-joint targets, the
target bin; the layout of `r2s2r.data.datagen_info`), so hardware demos are annotated the same way as the twin's.
Hand-object *contact* is not recorded by a real cell; "closing near the object" (hand targets past
`closing_fraction` of the power grasp, palm within `near_distance` of the object) stands in for it. Stored the
Isaac Lab Mimic way: one boolean per non-final subtask under `obs/datagen_info/subtask_term_signals/<name>`, False
before the subtask ends and True from then on.
Corrections (a boundary moved by hand, see `scripts/annotate.py`) are kept in the demo attr `subtask_corrections`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from r2s2r.cell.spec import CellCfg
from r2s2r.control.grasp import HAND_CLOSED
from r2s2r.data.datagen_info import EEF, OBJECT, TARGET_BIN, nested_get, positions

SUBTASKS = ("intercept", "grasp", "carry", "release")
TERM_SIGNALS = SUBTASKS[:-1]  # the last subtask ends with the demo
CORRECTIONS_ATTR = "subtask_corrections"
LIFT_HEIGHT = 0.03  # m above where the object rode the belt: lifted
NEAR_DISTANCE = 0.07  # m, palm (grasp site) to object centre, horizontally
CLOSING_FRACTION = 0.25  # of the power grasp's flexion: the hand is closing
FLEXORS = HAND_CLOSED > 0.3  # the joints a power grasp flexes (the closure measure averages over them)
BIN_HALF_SIZE = min(CellCfg().bins[0].inner_size) / 2


class AnnotationError(ValueError):
    """A demo lacks the signals annotation needs, or a correction is inconsistent; the message names the demo."""


@dataclass(frozen=True)
class Annotation:
    """Subtask boundaries of one demo: `ends[k]` is the first step of subtask k + 1 (so 0 < e0 < e1 < e2 < T)."""

    ends: tuple[int, int, int]
    length: int

    def segments(self) -> list[tuple[str, int, int]]:
        """(name, first step, end step exclusive) of each subtask."""
        bounds = (0, *self.ends, self.length)
        return [(name, bounds[k], bounds[k + 1]) for k, name in enumerate(SUBTASKS)]

    def term_signals(self) -> dict[str, np.ndarray]:
        steps = np.arange(self.length)
        return {name: steps >= end for name, end in zip(TERM_SIGNALS, self.ends)}


def signal_traces(datagen_info: Mapping, where: str = "demo") -> dict[str, np.ndarray]:
    """The per-step quantities annotation thresholds (also what `scripts/annotate.py` plots), from a demo's
    datagen_info (`r2s2r.data.datagen_info`'s layout)."""
    paths = (f"eef_pose/{EEF}", f"object_pose/{OBJECT}", f"gripper_action/{EEF}", f"object_pose/{TARGET_BIN}")
    values = [nested_get(datagen_info, path) for path in paths]
    for path, value in zip(paths, values):
        if value is None:
            raise AnnotationError(f"{where}: obs/datagen_info/{path} is missing; annotation needs the tracked object "
                                  f"pose, the hand pose, the hand-joint targets and the target bin")
    eef, obj, hand, bin_pose = values
    hand = np.asarray(hand)
    if hand.ndim != 2 or hand.shape[1] != len(HAND_CLOSED):
        raise AnnotationError(f"{where}: obs/datagen_info/gripper_action/{EEF} has shape {hand.shape}: expected "
                              f"(T, {len(HAND_CLOSED)}) hand-joint targets")
    return traces(positions(eef), positions(obj), hand, positions(bin_pose))


def traces(eef_pos: np.ndarray, object_pos: np.ndarray, hand: np.ndarray, bin_pos: np.ndarray) -> dict[str, np.ndarray]:
    """The signal traces from per-step hand, object and bin positions (T, 3) and hand-joint targets (T, 20)."""
    return {
        "closure": np.mean(hand[:, FLEXORS] / HAND_CLOSED[FLEXORS], axis=1),
        "hand_object_distance": np.linalg.norm(object_pos[:, :2] - eef_pos[:, :2], axis=1),
        "object_lift": object_pos[:, 2] - object_pos[0, 2],
        "object_bin_distance": np.max(np.abs(object_pos[:, :2] - bin_pos[:, :2]), axis=1),
    }


def annotate(datagen_info: Mapping, corrections: Mapping[str, int] | None = None, where: str = "demo",
             bin_half_size: float = BIN_HALF_SIZE) -> Annotation:
    """Find the subtask boundaries of one demo from its signals, then apply `corrections` (name -> end step)."""
    return annotate_traces(signal_traces(datagen_info, where), corrections, where, bin_half_size)


def annotate_traces(tr: Mapping[str, np.ndarray], corrections: Mapping[str, int] | None = None, where: str = "demo",
                    bin_half_size: float = BIN_HALF_SIZE) -> Annotation:
    """`annotate` from the signal traces (`traces`) of an episode that is not stored as a demo."""
    length = len(tr["closure"])
    lifted = (tr["object_lift"] > LIFT_HEIGHT) & (tr["hand_object_distance"] < NEAR_DISTANCE)
    if not lifted.any():
        raise AnnotationError(f"{where}: the object is never lifted near the hand (highest {tr['object_lift'].max():.3f}"
                              f" m above its start, {LIFT_HEIGHT} m needed): not a successful pick")
    lift = int(np.argmax(lifted))
    # The final closure starts after the last step before the lift at which the hand was open (earlier closures
    # belong to failed tries and stay in the intercept subtask).
    open_before = np.flatnonzero(tr["closure"][:lift] <= CLOSING_FRACTION)
    if open_before.size == 0:
        raise AnnotationError(f"{where}: the hand is never open before the lift (closure > {CLOSING_FRACTION} from "
                              f"the start): cannot find where the grasp begins")
    close = int(open_before[-1]) + 1
    above = np.flatnonzero(tr["object_bin_distance"][lift:] < bin_half_size)
    if above.size == 0:
        raise AnnotationError(f"{where}: the object never comes above its bin after the lift (closest "
                              f"{tr['object_bin_distance'][lift:].min():.3f} m, within {bin_half_size} m needed)")
    ends = {"intercept": close, "grasp": lift, "carry": lift + int(above[0])}
    for name, step in (corrections or {}).items():
        if name not in TERM_SIGNALS:
            raise AnnotationError(f"{where}: correction {name!r}: expected one of {', '.join(TERM_SIGNALS)}")
        ends[name] = int(step)
    bounds = [ends[n] for n in TERM_SIGNALS]
    if not 0 < bounds[0] < bounds[1] < bounds[2] < length:
        raise AnnotationError(f"{where}: subtask ends {dict(zip(TERM_SIGNALS, bounds))} are not increasing inside "
                              f"(0, {length})")
    return Annotation(tuple(bounds), length)


def ends_so_far(tr: Mapping[str, np.ndarray]) -> list[int]:
    """The subtask ends an episode has reached so far (its signal traces, `traces`, up to now), by `annotate_traces`'
    rules applied to what has happened: the grasp starts after the last open hand (before the lift, or now), the
    carry at the lift of the object near the hand, the release once it is above its bin. A closure that opens again
    before the lift (a failed try) ends the intercept and then takes that end back, where annotate, seeing the whole
    demo, leaves it inside intercept."""
    n = len(tr["closure"])
    lifted = np.flatnonzero((tr["object_lift"] > LIFT_HEIGHT) & (tr["hand_object_distance"] < NEAR_DISTANCE))
    lift = int(lifted[0]) if lifted.size else n
    open_hand = np.flatnonzero(tr["closure"][:lift] <= CLOSING_FRACTION)
    close = int(open_hand[-1]) + 1 if open_hand.size else 0
    if close >= n:
        return []
    if lift >= n:
        return [close]
    above = np.flatnonzero(tr["object_bin_distance"][lift:] < BIN_HALF_SIZE)
    return [close, lift] + ([lift + int(above[0])] if above.size else [])


def stored_annotation(datagen_info: Mapping, where: str = "demo") -> Annotation | None:
    """The annotation stored in a demo's term signals, or None if it has none (or only some of them)."""
    signals = datagen_info.get("subtask_term_signals", {})
    if not all(name in signals for name in TERM_SIGNALS):
        return None
    ends = []
    for name in TERM_SIGNALS:
        on = np.asarray(signals[name], dtype=bool)
        if not on.any() or on[0] or not on[np.argmax(on):].all():
            raise AnnotationError(f"{where}: obs/datagen_info/subtask_term_signals/{name} must switch from False to "
                                  f"True once, inside the demo")
        ends.append(int(np.argmax(on)))
    if not ends[0] < ends[1] < ends[2]:
        raise AnnotationError(f"{where}: stored subtask ends {dict(zip(TERM_SIGNALS, ends))} are not increasing")
    return Annotation(tuple(ends), len(on))


def demo_annotation(datagen_info: Mapping, attrs: Mapping, where: str = "demo") -> Annotation:
    """A demo's annotation: the stored one if present, else computed (with the demo's stored corrections)."""
    stored = stored_annotation(datagen_info, where)
    if stored is not None:
        return stored
    corrections = json.loads(attrs.get(CORRECTIONS_ATTR, "{}") or "{}")
    return annotate(datagen_info, corrections, where)
