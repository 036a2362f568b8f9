import dataclasses

import h5py
import numpy as np
import pytest

from r2s2r.behavior.mimic import MimicCfg, MimicGenerator, cross_section, load_sources
from r2s2r.data import DatasetError, DemoReader
from r2s2r.geometry import quat_to_mat, rpy_to_mat
from r2s2r.real.twin import make_twin_env
from r2s2r.tasks.pick_sort.env import PickSortEnv

EXACT = MimicCfg(action_noise=0.0, tracking_gain=0.0)  # the pure transformation, open loop


@pytest.fixture(scope="module")
def sources(real_demos):
    return load_sources(real_demos)


@pytest.fixture(scope="module")
def seeds(real_demos):
    with DemoReader(real_demos) as reader:
        return {n: reader.attrs(n)["seed"] for n in reader.names}


def rollout(env, gen, seed, condition="nominal", rng_seed=0, steps=None):
    obs, _ = env.reset(seed=seed, options={"condition": condition})
    meta = gen.reset(env, obs, np.random.default_rng(rng_seed))
    actions, objects, info = [], [], {}
    for _ in range(steps or env.max_steps):
        a = gen(obs)
        actions.append(a)
        objects.append(obs["privileged"]["object_pos"].copy())
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    return np.array(actions), np.array(objects), meta, info


def test_the_source_episode_itself_is_reproduced(sources, seeds):
    # Transforming a demo to the very episode it was recorded in (same world, same seed) must give it back.
    env = make_twin_env(cameras=())
    src = sources[0]
    gen = MimicGenerator(EXACT, [src])
    actions, _, meta, _ = rollout(env, gen, seeds[src.name], steps=src.length)
    n = min(len(actions), src.length)
    assert meta["source_demo"] == src.name and abs(meta["yaw_change"]) < 1e-9
    # Up to the belt's speed jitter, which the source's tracked object shows and the new prediction does not.
    error = np.linalg.norm(actions[:n, :3] - src.actions[:n, :3], axis=1)
    assert error.max() < 0.01 and error.mean() < 0.003
    np.testing.assert_allclose(actions[:n, 7:], src.actions[:n, 7:])


def test_a_faster_belt_is_pursued_at_its_speed_with_the_human_offset(sources):
    env = PickSortEnv(cameras=(), world="grounded")
    gen = MimicGenerator(EXACT, sources)
    actions, objects, meta, _ = rollout(env, gen, seed=3, condition="belt_speed")
    src, v = gen.src, gen.v_new
    assert v > 0.2 > src.belt_speed
    start = src.ends[0] + gen.shift  # first step of the grasp subtask
    # During the closure the hand moves along the belt at the new object's speed, not the source's.
    hand_v = (actions[start + 6, 0] - actions[start, 0]) / (6 * gen.dt)
    assert abs(hand_v - v) < 0.1 * v
    # At the grasp the hand sits where the human's hand sat relative to its object, turned with the object and
    # raised or lowered with its size.
    turn = rpy_to_mat((0.0, 0.0, meta["yaw_change"]))
    offset_src = turn @ (src.actions[src.ends[0], :3] - src.object_pos[src.ends[0]])
    offset_new = actions[start, :3] - objects[start]
    offset_src[2] += env.obj.half_extents[2] - src.half_extents[2]
    assert np.linalg.norm(offset_new - offset_src) < 0.012
    # The approach was re-timed to meet the earlier-arriving object.
    assert meta["time_scale"] <= 1.0 and gen.shift < 0


def test_the_grasp_turns_with_the_object_and_closes_harder_on_a_smaller_one(sources):
    env = PickSortEnv(cameras=(), world="grounded")
    gen = MimicGenerator(EXACT, sources)
    for seed in range(40):
        actions, _, meta, _ = rollout(env, gen, seed=seed, steps=1)
        if env.obj.shape == "box" and abs(meta["yaw_change"]) > 0.3:
            break
    else:
        pytest.fail("no box episode with a large yaw change among 40 seeds")
    obs, _ = env.reset(seed=seed)
    gen.reset(env, obs, np.random.default_rng(0))
    grasp = gen.src.ends[0]
    gen.step = grasp + gen.shift
    turned = gen(obs)
    # The palm faces down, so roll-pitch-yaw is degenerate: compare the heading of a horizontal hand axis.
    heading = lambda q: np.arctan2(*quat_to_mat(q)[[1, 0], 1])  # noqa: E731
    yaw_new, yaw_src = heading(turned[3:7]), heading(gen.src.actions[grasp, 3:7])
    assert abs(((yaw_new - yaw_src - meta["yaw_change"]) + np.pi) % (2 * np.pi) - np.pi) < 0.02
    # Closure: flexion scales with the source/new cross-section ratio.
    expected = np.clip(cross_section(gen.src.half_extents) / cross_section(env.obj.half_extents), 0.8, 1.3)
    assert meta["closure_scale"] == pytest.approx(expected)


def test_selection_prefers_the_nearest_demo_and_randomness_follows_the_seed(sources):
    gen = MimicGenerator(dataclasses.replace(EXACT, nn_k=1), sources)
    target = sources[2]
    chosen = gen.select(target.belt_speed, target.object_pos[0, 1], target.half_extents, target.shape,
                        np.random.default_rng(0))
    assert chosen is target
    env = PickSortEnv(cameras=(), world="grounded")
    noisy = MimicGenerator(MimicCfg(action_noise=0.002), sources)
    a1 = rollout(env, noisy, seed=5, rng_seed=7, steps=40)[0]
    a2 = rollout(env, noisy, seed=5, rng_seed=7, steps=40)[0]
    a3 = rollout(env, noisy, seed=5, rng_seed=8, steps=40)[0]
    np.testing.assert_array_equal(a1, a2)
    assert np.abs(a1 - a3).max() > 1e-4


def test_a_pinned_nominal_episode_succeeds_in_the_grounded_world(sources):
    # Pinned: seed 1003 (noise seed 3). The rate over 20 nominal episodes (seeds 1000-1019) with these 8 demos is
    # measured by benchmarks/bench_success.py (14 of 20, docs/benchmarks.md; 16 of 20 with 16 source demos).
    env = PickSortEnv(cameras=(), world="grounded")
    gen = MimicGenerator(MimicCfg(), sources)
    info = rollout(env, gen, seed=1003, rng_seed=3)[3]
    assert info["success"] and info["failure"] is None, info


def test_bad_sources_are_named(tmp_path, real_demos):
    with pytest.raises(FileNotFoundError):
        load_sources(tmp_path / "missing.hdf5")
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(DatasetError, match="not an HDF5 file"):
        load_sources(tmp_path / "junk.hdf5")
    stripped = tmp_path / "stripped.hdf5"
    stripped.write_bytes(real_demos.read_bytes())
    with h5py.File(stripped, "a") as f:
        del f["data/demo_1/obs/datagen_info/object_pose/object"]
    with pytest.raises(DatasetError, match="demo_1: field .obs/datagen_info/object_pose/object. is missing"):
        load_sources(stripped)
