"""The flow-matching policy: data mixtures, training, checkpoints, resuming, deployment, bad input."""

from __future__ import annotations

import json
import re

import h5py
import numpy as np
import pytest
import torch
from conftest import run_script, run_script_in_process, tiny_train_overrides

from r2s2r.core import ConfigError
from r2s2r.data import DatasetError, DemoReader, DemoWriter
from r2s2r.evaluation.policies import evaluate_checkpoint, training_trials
from r2s2r.evaluation.protocol import condition_counts
from r2s2r.policy.agent import PolicyAgent, load_agent
from r2s2r.policy.checkpoint import CheckpointError
from r2s2r.policy.config import DatasetCfg, compose_train_cfg
from r2s2r.policy.data import MixtureSampler, load_dataset
from r2s2r.policy.train import Trainer
from r2s2r.real.twin import TwinCell


def cfg_for(tmp_path, policy_datasets, steps=6, extra=(), weights=(0.5, 0.5)):
    datasets = [(policy_datasets["real"], weights[0]), (policy_datasets["sim"], weights[1])]
    return compose_train_cfg(tiny_train_overrides(tmp_path / "run", datasets, steps) + list(extra))


def observation(dataset, t: int) -> dict:
    """Step t of a loaded dataset as the task's observation dict."""
    widths = {"arm_q": 7, "arm_dq": 7, "hand_q": 20, "ee_pose": 7}
    proprio, start = {}, 0
    for key, width in widths.items():
        proprio[key] = dataset.proprio[t, start:start + width].astype(float)
        start += width
    return {"proprio": proprio, "images": {c: v[t] for c, v in dataset.images.items()}}


def test_mixture_samples_by_weight_keeps_domains_and_pads_chunks(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets, weights=(0.25, 0.75))
    datasets = [load_dataset(d, cfg.policy) for d in cfg.data.datasets]
    assert [d.domain for d in datasets] == ["real", "sim"]  # from the files' task IDs
    sampler = MixtureSampler(datasets, chunk=8, batch_size=500, seed=0)
    batches = [sampler.sample() for _ in range(8)]
    domains = np.concatenate([b["domain"] for b in batches])
    assert abs(domains.mean() - 0.75) < 0.03  # sim (label 1) drawn at its weight, not its size
    # Every sample's proprio row comes from the dataset its domain label names.
    for b in batches[:2]:
        for proprio, domain in zip(b["proprio"], b["domain"]):
            rows = datasets[domain].proprio
            assert np.any(np.all(rows == proprio, axis=1))
    # Each sample's chunk is the actions from its step on, the demo's last action repeated past its end.
    real = datasets[0]
    batch = MixtureSampler([real], chunk=8, batch_size=1000, seed=1).sample()
    padded = 0
    for proprio, chunk in zip(batch["proprio"], batch["actions"]):
        # Steps where the robot rests share a proprio row: the chunk must be that of one of them.
        candidates = np.flatnonzero(np.all(real.proprio == proprio, axis=1))
        steps = [np.minimum(t + np.arange(8), real.demo_end[t]) for t in candidates]
        match = [s for s in steps if np.array_equal(chunk, real.actions[s])]
        assert match, "a sampled chunk is not the actions that follow its step"
        padded += int(match[0][-1] - match[0][0] < 7)
    assert padded > 0


def test_images_are_resized_to_the_policys_size(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets, extra=["policy.image_size=[16,16]"])
    data = load_dataset(cfg.data.datasets[0], cfg.policy)
    assert data.images["right_wrist"].shape[1:] == (16, 16, 3)
    with DemoReader(policy_datasets["real"]) as reader:
        full = reader.load(reader.names[0])["obs"]["right_wrist"][0].astype(float)
    # Area resizing: each output pixel is the mean of a 2x2 block of the source.
    block = full.reshape(16, 2, 16, 2, 3).mean(axis=(1, 3))
    assert np.abs(data.images["right_wrist"][0] - block).max() <= 1.0


def test_a_dataset_entry_can_take_the_first_demos_of_its_file(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets)
    whole = load_dataset(cfg.data.datasets[0], cfg.policy)
    first = load_dataset(DatasetCfg(path=str(policy_datasets["real"]), demos=1), cfg.policy)
    assert (first.num_demos, whole.num_demos > 1) == (1, True)
    rows = int(first.demo_end[-1]) + 1  # the first demo's steps, in order, and nothing after them
    assert len(first) == rows < len(whole)
    np.testing.assert_array_equal(first.actions, whole.actions[:rows])
    with pytest.raises(DatasetError, match=rf"demos = 99 .*holds only {whole.num_demos} demos"):
        load_dataset(DatasetCfg(path=str(policy_datasets["real"]), demos=99), cfg.policy)
    with pytest.raises(ConfigError, match=r"data.datasets\[0\].demos"):
        cfg_for(tmp_path, policy_datasets,
                extra=[f"data.datasets=[{{path: {policy_datasets['real']}, weight: 1.0, demos: -1}}]"])


def test_a_dataset_entry_can_take_the_demos_of_some_conditions(tmp_path, policy_datasets):
    """`conditions` keeps the demos recorded under the named reset conditions, in file order; a condition the file
    does not hold, or one the task does not know, is refused naming the file and what it holds."""
    import shutil

    import h5py

    cfg = cfg_for(tmp_path, policy_datasets)
    path = tmp_path / "mixed.hdf5"
    shutil.copy(policy_datasets["real"], path)
    with h5py.File(path, "r+") as f:
        names = sorted(f["data"])
        f["data"][names[0]].attrs["condition"] = "belt_speed"  # demo 0 as if recorded on the fast belt
    whole = load_dataset(DatasetCfg(path=str(path)), cfg.policy)
    fast = load_dataset(DatasetCfg(path=str(path), conditions=("belt_speed", "combined")), cfg.policy)
    nominal = load_dataset(DatasetCfg(path=str(path), conditions=("nominal",)), cfg.policy)
    first = int(whole.demo_end[0]) + 1
    assert (fast.num_demos, nominal.num_demos, whole.num_demos) == (1, whole.num_demos - 1, whole.num_demos)
    np.testing.assert_array_equal(fast.actions, whole.actions[:first])
    np.testing.assert_array_equal(nominal.actions, whole.actions[first:])
    with pytest.raises(DatasetError, match=r"conditions = \['lighting'\] .*mixed.hdf5.*no demo was recorded with "
                                           r"them; the file's conditions are \['belt_speed', 'nominal'\]"):
        load_dataset(DatasetCfg(path=str(path), conditions=("lighting",)), cfg.policy)
    with pytest.raises(ConfigError, match=r"data.datasets\[0\].conditions = \['fast'\] .*'fast' is not a reset "
                                          r"condition; expected any of nominal, lighting"):
        cfg_for(tmp_path, policy_datasets,
                extra=[f"data.datasets=[{{path: {path}, weight: 1.0, conditions: [fast]}}]"])
    composed = cfg_for(tmp_path, policy_datasets,
                       extra=[f"data.datasets=[{{path: {path}, weight: 1.0, conditions: [belt_speed]}}]"])
    assert tuple(composed.data.datasets[0].conditions) == ("belt_speed",)


def test_a_dataset_entry_can_take_the_demos_of_some_objects(tmp_path, policy_datasets):
    """`objects` keeps the demos of the named objects, in file order, and combines with `conditions`; an object the
    file does not hold is refused naming the file and the objects it holds, and a name that is not a string by the
    config's own checks."""
    import shutil

    import h5py

    cfg = cfg_for(tmp_path, policy_datasets)
    path = tmp_path / "objects.hdf5"
    shutil.copy(policy_datasets["real"], path)
    with h5py.File(path, "r+") as f:
        names = sorted(f["data"])
        recorded = [str(f["data"][n].attrs["object"]) for n in names]
        f["data"][names[0]].attrs["object"] = "capsule"  # demo 0 as if it carried the capsule
        f["data"][names[0]].attrs["condition"] = "belt_speed"
    recorded[0] = "capsule"
    whole = load_dataset(DatasetCfg(path=str(path)), cfg.policy)
    capsule = load_dataset(DatasetCfg(path=str(path), objects=("capsule",)), cfg.policy)
    first = int(whole.demo_end[0]) + 1
    assert capsule.num_demos == recorded.count("capsule") and capsule.demo_objects[0] == "capsule"
    np.testing.assert_array_equal(capsule.actions[:first], whole.actions[:first])
    both = load_dataset(DatasetCfg(path=str(path), objects=("capsule",), conditions=("belt_speed",)), cfg.policy)
    assert both.num_demos == 1
    with pytest.raises(DatasetError, match=r"objects = \['flat_box'\] .*objects.hdf5.*no demo was recorded with "
                                           rf"them; the file's objects are {re.escape(str(sorted(set(recorded))))}"):
        load_dataset(DatasetCfg(path=str(path), objects=("flat_box",)), cfg.policy)
    with pytest.raises(DatasetError, match=r"demos = 5 .*only 1 demos with conditions \['belt_speed'\] and objects"):
        load_dataset(DatasetCfg(path=str(path), objects=("capsule",), conditions=("belt_speed",), demos=5), cfg.policy)
    with pytest.raises(ConfigError, match=r"data.datasets\[0\].objects\[0\] = 3: expected a string"):
        cfg_for(tmp_path, policy_datasets, extra=[f"data.datasets=[{{path: {path}, weight: 1.0, objects: [3]}}]"])
    composed = cfg_for(tmp_path, policy_datasets,
                       extra=[f"data.datasets=[{{path: {path}, weight: 1.0, objects: [capsule, flat_box]}}]"])
    assert tuple(composed.data.datasets[0].objects) == ("capsule", "flat_box")


def test_the_twin_shows_a_deployed_policy_what_it_was_trained_on(tmp_path, policy_datasets):
    """Reset at a recorded demo's seed, the twin's first observation is the demo's first training sample, image and
    proprio alike: what the policy trains on and what it sees when played agree (camera, size, keys, order)."""
    cfg = cfg_for(tmp_path, policy_datasets)
    data = load_dataset(cfg.data.datasets[0], cfg.policy)
    with DemoReader(policy_datasets["real"]) as reader:
        attrs = reader.attrs(reader.names[0])
    cell = TwinCell(cameras=tuple(cfg.policy.cameras), image_size=tuple(cfg.policy.image_size))
    try:
        live = cell.reset(condition=attrs["condition"], seed=attrs["seed"])
    finally:
        cell.close()
    trained = observation(data, 0)
    for cam in cfg.policy.cameras:
        np.testing.assert_array_equal(live["images"][cam], trained["images"][cam], err_msg=cam)
    for key in cfg.policy.proprio:
        np.testing.assert_allclose(np.ravel(live["proprio"][key]), trained["proprio"][key], rtol=0, atol=1e-6,
                                   err_msg=key)


def test_checkpoint_loads_back_to_identical_actions(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets)
    trainer = Trainer(cfg)
    result = trainer.run(progress=False)
    data = trainer.datasets[0]
    obs = observation(data, 5)
    a, b = load_agent(result.checkpoint, seed=3), load_agent(result.checkpoint, seed=3)
    chunk = a.predict_chunk(obs)
    np.testing.assert_array_equal(chunk, b.predict_chunk(obs))
    assert chunk.shape == (8, 27)
    # The deployed weights are the trainer's EMA weights: the same noise gives the same chunk.
    in_memory = PolicyAgent(trainer.ema, seed=3)
    np.testing.assert_array_equal(chunk, in_memory.predict_chunk(obs))
    # Receding horizon: one prediction serves `execute` steps.
    a.reset(0)
    first = [a.act(obs) for _ in range(4)]
    assert a.chunks.wants_chunk and len({x.tobytes() for x in first}) == 4


def test_a_checkpoint_naming_the_decoder_without_its_module_deploys_the_same(tmp_path, policy_datasets):
    """Checkpoints written before the action decoder was its own module (`ActionFlow`) name its weights without
    the `flow.` prefix; loaded, they give the same chunks as the weights under their current names."""
    trainer = Trainer(cfg_for(tmp_path, policy_datasets))
    result = trainer.run(progress=False)
    payload = torch.load(result.checkpoint, weights_only=True)
    older = {**payload, "ema": {k.removeprefix("flow."): v for k, v in payload["ema"].items()}}
    assert "decoder.layers.0.linear1.weight" in older["ema"]
    torch.save(older, tmp_path / "older.pt")
    obs = observation(trainer.datasets[0], 5)
    np.testing.assert_array_equal(load_agent(tmp_path / "older.pt", seed=3).predict_chunk(obs),
                                  load_agent(result.checkpoint, seed=3).predict_chunk(obs))


def test_resumed_training_matches_an_uninterrupted_run(tmp_path, policy_datasets):
    straight = cfg_for(tmp_path / "a", policy_datasets, steps=6)
    Trainer(straight).run(progress=False)
    interrupted = cfg_for(tmp_path / "b", policy_datasets, steps=3)
    Trainer(interrupted).run(progress=False)
    resumed = Trainer(cfg_for(tmp_path / "b", policy_datasets, steps=6))
    assert resumed.step == 3 and resumed.resumed_from == 3
    resumed.run(progress=False)
    a = torch.load(tmp_path / "a" / "run" / "policy.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "run" / "policy.pt", weights_only=False)
    for key in ("model", "ema"):
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), f"{key}.{name} differs after resuming"
    log = [json.loads(line) for line in (tmp_path / "b" / "run" / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [2, 3, 4, 6]
    # Another config in the same folder is refused, naming the field; the run's length may change.
    with pytest.raises(CheckpointError, match=r"differs in optim\.lr\)"):
        Trainer(cfg_for(tmp_path / "b", policy_datasets, steps=8, extra=["optim.lr=0.001"]))


def test_flow_matching_fits_a_demo(tmp_path, policy_datasets):
    """Trained on one dataset long enough, the sampled chunk follows the demo's actions far closer than chance."""
    # One checkpoint, at the end (every 3 steps, as tiny_train_overrides has it, would write 83).
    cfg = compose_train_cfg(tiny_train_overrides(tmp_path / "run", [(policy_datasets["real"], 1.0)], steps=250) + [
        "data.random_shift=0", "optim.lr=2e-3", "optim.ema_decay=0.9", "batch_size=16", "checkpoint_every=250"])
    trainer = Trainer(cfg)
    first = trainer.train_step(trainer.sampler.sample())["flow"]
    trainer.run(progress=False)
    data = trainer.datasets[0]
    agent = PolicyAgent(trainer.ema, seed=0)
    errors, chance = [], []
    rng = np.random.default_rng(0)
    for t in rng.integers(0, len(data) - 8, 10):
        t = min(int(t), int(data.demo_end[t]) - 8)
        chunk = agent.predict_chunk(observation(data, t))
        scale = data.actions.std(axis=0) + 1e-2
        errors.append(np.abs((chunk - data.actions[t:t + 8]) / scale).mean())
        other = data.actions[rng.integers(0, len(data), 8)]
        chance.append(np.abs((other - data.actions[t:t + 8]) / scale).mean())
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert np.mean([e["flow"] for e in log[-10:]]) < 0.5 * first
    assert np.mean(errors) < 0.5 * np.mean(chance)


def test_alignment_option_adds_a_loss_only_across_domains(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets, extra=["policy.domain_embedding=true", "cotrain.alignment_weight=0.5"])
    trainer = Trainer(cfg)
    terms = trainer.train_step(trainer.sampler.sample())
    assert terms["align"] > 0 and terms["loss"] == pytest.approx(terms["flow"] + 0.5 * terms["align"], rel=1e-5)
    plain = Trainer(cfg_for(tmp_path / "plain", policy_datasets))
    assert "align" not in plain.train_step(plain.sampler.sample())


# -- bad input ---------------------------------------------------------------------------------------------------
def _write_raw(path, actions, camera=True):
    """A minimal robomimic-layout file written with h5py directly (our writer refuses such demos)."""
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "R2S2R-PickSort-v0", "type": 2})
        demo = data.create_group("demo_0")
        demo.create_dataset("actions", data=actions)
        t = len(actions)
        if camera:
            demo.create_dataset("obs/right_wrist", data=np.zeros((t, 32, 32, 3), np.uint8))
        for key, width in (("arm_q", 7), ("arm_dq", 7), ("hand_q", 20), ("ee_pose", 7)):
            demo.create_dataset(f"obs/{key}", data=np.zeros((t, width)))


def test_bad_datasets_are_refused_naming_the_file_and_field(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets)
    policy = cfg.policy
    wrong_size = tmp_path / "wrong_size.hdf5"
    _write_raw(wrong_size, np.zeros((5, 26)))
    with pytest.raises(DatasetError, match=r"wrong_size.hdf5: demo_0: field 'actions' has shape \(5, 26\)"):
        load_dataset(DatasetCfg(str(wrong_size)), policy)
    nan = tmp_path / "nan.hdf5"
    actions = np.zeros((5, 27))
    actions[3, 4] = np.nan
    _write_raw(nan, actions)
    with pytest.raises(DatasetError, match=r"nan.hdf5: demo_0: field 'actions' is not finite .*step 3, column 4"):
        load_dataset(DatasetCfg(str(nan)), policy)
    no_camera = tmp_path / "no_camera.hdf5"
    _write_raw(no_camera, np.zeros((5, 27)), camera=False)
    with pytest.raises(DatasetError, match=r"no_camera.hdf5: demo_0: field 'obs/right_wrist' is missing"):
        load_dataset(DatasetCfg(str(no_camera)), policy)
    empty = tmp_path / "empty.hdf5"
    DemoWriter(empty, "R2S2R-PickSort-v0").close()
    with pytest.raises(DatasetError, match=r"empty.hdf5: the dataset holds no demos"):
        load_dataset(DatasetCfg(str(empty)), policy)
    with pytest.raises(DatasetError, match=r"missing.hdf5: no such dataset file"):
        load_dataset(DatasetCfg(str(tmp_path / "missing.hdf5")), policy)
    other_cameras = cfg_for(tmp_path, policy_datasets, extra=["policy.cameras=[head_left]"]).policy
    with pytest.raises(DatasetError, match=r"field 'obs/head_left' is missing; the policy observes cameras"):
        load_dataset(cfg.data.datasets[0], other_cameras)


def test_bad_config_is_refused_naming_the_field(tmp_path, policy_datasets):
    with pytest.raises(ConfigError, match=r"data.datasets\[1\].weight = 1.5 .*expected a mixture ratio in \[0, 1\]"):
        cfg_for(tmp_path, policy_datasets, weights=(0.5, 1.5))
    with pytest.raises(ConfigError, match=r"data.datasets\[0\].weight = -0.1"):
        cfg_for(tmp_path, policy_datasets, weights=(-0.1, 0.5))
    with pytest.raises(ConfigError, match=r"policy.image_size = \[30, 30\]: expected multiples of 16"):
        cfg_for(tmp_path, policy_datasets, extra=["policy.image_size=[30,30]"])
    with pytest.raises(ConfigError, match=r"config.policy.dimm: unknown field"):
        cfg_for(tmp_path, policy_datasets, extra=["+policy.dimm=3"])


def test_a_checkpoint_from_another_observation_set_is_refused(tmp_path, policy_datasets):
    cfg = cfg_for(tmp_path, policy_datasets, steps=3)
    checkpoint = Trainer(cfg).run(progress=False).checkpoint
    other = cfg_for(tmp_path, policy_datasets, steps=6, extra=["policy.image_size=[16,16]"])
    with pytest.raises(CheckpointError, match=r"another observation set: policy.image_size = \[32, 32\] in the "
                                              r"checkpoint, \[16, 16\] here"):
        Trainer(other)
    agent = load_agent(checkpoint)
    data = load_dataset(cfg.data.datasets[0], cfg.policy)
    obs = observation(data, 0)
    obs["images"] = {"right_wrist": np.zeros((64, 64, 3), np.uint8)}
    with pytest.raises(CheckpointError, match=r"camera 'right_wrist' renders \[64, 64\] pixels; the policy was "
                                              r"trained on \[32, 32\]"):
        agent.act(obs)
    obs["images"] = {"head_left": np.zeros((32, 32, 3), np.uint8)}
    with pytest.raises(CheckpointError, match=r"observes camera 'right_wrist'"):
        agent.act(obs)


# -- scripts -----------------------------------------------------------------------------------------------------
def test_train_play_and_evaluate_scripts(tmp_path, policy_datasets, monkeypatch, capsys):
    datasets = [(policy_datasets["real"], 0.5), (policy_datasets["sim"], 0.5)]
    result = run_script("train.py", *tiny_train_overrides(tmp_path / "a", datasets, steps=4))
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and (tmp_path / "a" / "policy.pt").exists()
    # A second policy for the ranking, trained in this process (train.py's own run is the one above).
    Trainer(compose_train_cfg(tiny_train_overrides(tmp_path / "b", datasets, steps=4) + ["seed=1"])).run(progress=False)
    assert (tmp_path / "b" / "policy.pt").exists()

    video = tmp_path / "play.mp4"
    result = run_script("play.py", "--task", "R2S2R-PickSort-Real-v0", "--checkpoint", str(tmp_path / "a" / "policy.pt"),
                        "--video", str(video), "--size", "64", "--max-steps", "6", "--episodes", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": max_steps after 0.3 s") == 2, result.stdout  # both episodes cut at 6 steps
    import imageio.v3 as iio
    frames = iio.imread(video)
    assert frames.shape == (12, 64, 64, 3)  # 6 frames per episode, one camera enlarged 2x

    out = tmp_path / "eval"
    result = run_script("evaluate.py", "--checkpoint", str(tmp_path / "a" / "policy.pt"), str(tmp_path / "b" / "policy.pt"),
                        "--trials", "5", "--max-steps", "2", "--output", str(out), "--no-progress",
                        "--sim-tasks", "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0")
    assert result.returncode == 0, result.stderr
    results = json.loads((out / "R2S2R-PickSort-Real-v0" / "results.json").read_text())
    assert set(results["policies"]) == {"a", "b"}
    nominal = condition_counts(5)["nominal"]
    assert all(p["overall"]["trials"] == 5 and p["nominal"]["trials"] == nominal for p in results["policies"].values())
    for task in ("R2S2R-PickSort-Real-v0", "R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"):
        assert json.loads((out / task / "a" / "renderer.json").read_text())["renderer"] in ("mujoco_gl", "mujoco_warp")
    ranking = json.loads((out / "ranking.json").read_text())
    assert {"pearson", "spearman", "mmrv"} <= set(ranking["R2S2R-PickSort-WorldGrounded-BehaviorGrounded-v0"])
    code, err = run_script_in_process("evaluate.py", "--checkpoint", str(tmp_path / "missing.pt"), "--output", str(out),
                                      cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "missing.pt': no such file" in err
    # Another block of the protocol: the same conditions in the same order, trial i at seed base + i. (In this
    # process: evaluate.py's own run is the one above.)
    code, err = run_script_in_process("evaluate.py", "--checkpoint", str(tmp_path / "a" / "policy.pt"), "--trials", "5",
                                      "--max-steps", "2", "--base-seed", "20000", "--output", str(tmp_path / "b2"),
                                      "--no-progress", cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    block = [json.loads(line) for line in (tmp_path / "b2" / "R2S2R-PickSort-Real-v0" / "a" / "trials.jsonl").open()]
    first = [json.loads(line) for line in (out / "R2S2R-PickSort-Real-v0" / "a" / "trials.jsonl").open()]
    assert [r["seed"] for r in block] == list(range(20000, 20005))
    assert [r["condition"] for r in block] == [r["condition"] for r in first]
    code, err = run_script_in_process("evaluate.py", "--checkpoint", "a.pt", "--base-seed", "1", "--seeds-from",
                                      "d.hdf5", cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "--base-seed and --seeds-from: give one" in err

    # On its own training episodes: nominal trials at the seeds the real demos were recorded with.
    with DemoReader(policy_datasets["real"]) as reader:
        seeds = [reader.attrs(n)["seed"] for n in reader.names]
    own = training_trials(policy_datasets["real"], 2)
    assert [(t.condition, t.seed) for t in own] == [("nominal", s) for s in seeds[:2]]
    rows = evaluate_checkpoint(tmp_path / "a" / "policy.pt", "R2S2R-PickSort-Real-v0", 2, tmp_path / "own.jsonl",
                               max_steps=2, progress=False, trials=own)
    assert [r["seed"] for r in rows] == seeds[:2]
    with pytest.raises(DatasetError, match=r"demo demo_0: seed = \d+, condition = '\w+': expected an integer seed "
                                           r"of a nominal episode"):
        training_trials(policy_datasets["sim"], 1)
    with pytest.raises(DatasetError, match=r"holds 2 demos; expected at least 3"):
        training_trials(policy_datasets["real"], 3)
