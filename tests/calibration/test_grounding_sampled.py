"""The grounding benchmark's two-truth version, as CI runs it: whole calibration sessions recorded on the twins of
sampled truths 0 and 1 (their lenses blurred up to 1.9 px, frictions, gains, lamps and geometry all off the
ungrounded world's), grounded by calibrate.py, and every calibrated parameter held to the study's tolerance
(`benchmarks/bench_grounding.py --sampled 2 --seed 0 --check`; the twelve-truth run is in docs/world_grounding.md)."""

import pytest
from grounding_runs import bench_grounding, grounded_truth

pytestmark = pytest.mark.slow


def test_two_sampled_truths_ground_within_every_tolerance(tmp_path_factory):
    runs = [grounded_truth(tmp_path_factory, seed) for seed in (1, 0)]  # truth 0 is the pipeline tests' too
    assert [run.stopped for run in runs] == [None, None]
    missed = {(run.truth.path.stem, name, item): error
              for run in runs for name, (_, bound, _) in bench_grounding.PARAMETERS.items()
              for item, error in run.errors[name].items() if not bench_grounding.passes(error, bound)}
    assert not missed, missed
