"""Latent-space analysis: embedding, nearest-neighbour attribution, and scripts/analyze_latent.py end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import ROOT, run_script, run_script_in_process

from r2s2r.core import ConfigError
from r2s2r.policy.checkpoint import build_policy, load_checkpoint
from r2s2r.policy.config import DOMAINS, train_cfg_from_mapping
from r2s2r.policy.latent import attribute, build_pool, embed, embed_dataset, parse_methods, stack_observations
from r2s2r.policy.train import Trainer

CAMERA = "right_wrist"


@pytest.fixture(scope="module")
def trained(policy_datasets, tmp_path_factory) -> dict:
    """The shared real and sim datasets (one camera at 32x32) and a tiny policy trained on them for 20 steps."""
    root = tmp_path_factory.mktemp("latent")
    real, sim = policy_datasets["real"], policy_datasets["sim"]
    cfg = train_cfg_from_mapping({
        "run_dir": str(root / "run"), "steps": 20, "batch_size": 16, "log_every": 10, "checkpoint_every": 20,
        "threads": 1,
        "policy": {"cameras": [CAMERA], "image_size": [32, 32], "dim": 32, "heads": 2, "obs_layers": 1,
                   "action_layers": 1, "chunk": 8, "execute": 4, "flow_steps": 2},
        "data": {"datasets": [{"path": str(real), "weight": 0.5}, {"path": str(sim), "weight": 0.5}]}})
    trainer = Trainer(cfg)
    trainer.run(progress=False)
    checkpoint = root / "run" / "policy.pt"
    real_data, sim_data = trainer.datasets
    assert (real_data.domain, sim_data.domain) == ("real", "sim")  # inferred from the files' task IDs
    return {"root": root, "checkpoint": checkpoint, "policy": build_policy(load_checkpoint(checkpoint)),
            "real": real_data, "sim": sim_data}


def test_embedding_is_deterministic_and_is_the_encoders_latent(trained):
    policy, real = trained["policy"], trained["real"]
    rows = np.arange(0, len(real), 7)
    first = embed_dataset(policy, real, rows, batch_size=16)
    again = embed_dataset(policy, real, rows, batch_size=16)
    assert first.shape == (len(rows), policy.cfg.dim) and first.dtype == np.float32
    np.testing.assert_array_equal(first, again)
    with torch.no_grad():
        direct = policy.latent(policy.encode({CAMERA: torch.from_numpy(real.images[CAMERA][rows])},
                                             torch.from_numpy(real.proprio[rows]),
                                             torch.full((len(rows),), DOMAINS.index("real")))).numpy()
    np.testing.assert_allclose(first, direct, rtol=1e-5, atol=1e-5)
    # Batching changes nothing but rounding.
    np.testing.assert_allclose(embed_dataset(policy, real, rows, batch_size=5), first, rtol=1e-5, atol=1e-5)
    # An environment observation stacked for the encoder embeds like the dataset step it came from.
    names = policy.cfg.proprio
    widths = np.cumsum([0] + [{"arm_q": 7, "arm_dq": 7, "hand_q": 20, "ee_pose": 7}[k] for k in names])
    assert widths[-1] == real.proprio.shape[1]
    observations = [{"images": {CAMERA: real.images[CAMERA][r]},
                     "proprio": {k: real.proprio[r, widths[i]:widths[i + 1]] for i, k in enumerate(names)}}
                    for r in rows[:4]]
    images, proprio = stack_observations(observations, policy.cfg)
    np.testing.assert_allclose(embed(policy, images, proprio, "real"), first[:4], rtol=1e-5, atol=1e-5)


def test_a_data_point_is_attributed_to_its_own_domain(trained):
    policy, real, sim = trained["policy"], trained["real"], trained["sim"]
    pool = build_pool(policy, [real, sim], max_samples=300, seed=1)
    assert len(pool) == 600 and pool.real_share == 0.5
    # Rollout states taken from the data themselves: each one's nearest data latent is itself (or a step with an
    # identical observation: a robot at rest sees the same frame twice), so k = 1 names its own domain.
    for source, domain, expected in ((0, "real", 1.0), (1, "sim", 0.0)):
        picked = np.flatnonzero(pool.source == source)[::10]
        dataset = (real, sim)[source]
        queries = embed_dataset(policy, dataset, pool.rows[picked])
        result = attribute(queries, pool, k=1)
        assert (result.real_fraction == expected).all(), domain
        assert (pool.source[result.neighbours[:, 0]] == source).all()
        assert result.distances.max() < 1e-4
        assert result.mean_real_fraction == expected
    # With every point a neighbour, each state's real fraction is the pool's real share (the chance level).
    everything = attribute(queries, pool, k=len(pool))
    np.testing.assert_allclose(everything.real_fraction, pool.real_share)
    np.testing.assert_allclose(everything.per_dataset.sum(axis=1), 1.0)


def test_bad_arguments_are_refused(trained):
    policy, real = trained["policy"], trained["real"]
    pool = build_pool(policy, [real], max_samples=20)
    with pytest.raises(ConfigError, match="k = 21: the pool holds only 20"):
        attribute(pool.latents[:2], pool, k=21)
    with pytest.raises(ConfigError, match="k = 0: expected an integer >= 1"):
        attribute(pool.latents[:2], pool, k=0)
    with pytest.raises(ConfigError, match=r"--method = 'pca,umap': expected"):
        parse_methods("pca,umap")
    with pytest.raises(ConfigError, match=r"images\['right_wrist'\] has shape \(3, 64, 64, 3\)"):
        embed(policy, {CAMERA: np.zeros((3, 64, 64, 3), np.uint8)}, real.proprio[:3])


def test_script_runs_end_to_end(trained, tmp_path):
    out = tmp_path / "latent"
    result = run_script("analyze_latent.py", "--checkpoint", str(trained["checkpoint"]), "--max-samples", "100",
                        "--method", "pca,tsne", "--max-steps", "12", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["attribution.json", "attribution.md", "latent_pca.png",
                                                      "latent_tsne.png"]  # and no temporary files left
    for name in ("latent_pca.png", "latent_tsne.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "attribution.json").read_text())
    # The default datasets are the checkpoint's own: 100 points of each.
    assert [(d["domain"], d["embedded"]) for d in data["datasets"]] == [("real", 100), ("sim", 100)]
    assert data["pool"] == {"size": 200, "real": 100, "sim": 100, "real_share": 0.5}
    steps = data["per_step"]
    assert len(steps) == data["rollout"]["steps"] == 12
    assert data["rollout"]["cut"] and not data["rollout"]["success"]  # stopped by --max-steps, not by the task
    assert [s["step"] for s in steps] == list(range(12))
    assert [s["new_chunk"] for s in steps] == [t % 4 == 0 for t in range(12)]  # execute = 4
    for s in steps:
        assert 0.0 <= s["real_fraction"] <= 1.0
        assert len(s["neighbours"]) == data["k"] == 10
        assert s["real_fraction"] == pytest.approx(sum(n["domain"] == "real" for n in s["neighbours"]) / 10)
        distances = [n["distance"] for n in s["neighbours"]]
        assert distances == sorted(distances)
        assert sum(s["dataset_fraction"].values()) == pytest.approx(1.0)
    mean = data["rollout"]["mean_real_fraction"]
    assert mean == pytest.approx(np.mean([s["real_fraction"] for s in steps]))
    assert data["rollout"]["above_chance"] == pytest.approx(mean - 0.5)
    text = (out / "attribution.md").read_text()
    assert "## Caveats" in text and "chance level" in text.lower() and f"{100 * mean:.1f}%" in text


# The script's refusals and its run on an object-centric checkpoint in this process: test_script_runs_end_to_end
# runs it as a program.
def test_missing_checkpoint_is_a_clear_error(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "nowhere" / "policy.pt"
    code, err = run_script_in_process("analyze_latent.py", "--checkpoint", str(missing), cwd=tmp_path,
                                      monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    assert f"error: --checkpoint '{missing}': no such file" in err
    assert "Traceback" not in err


def test_dataset_without_the_policys_camera_is_a_clear_error(trained, tmp_path, monkeypatch, capsys):
    copy = tmp_path / "no_camera.hdf5"
    shutil.copy(trained["real"].path, copy)
    with h5py.File(copy, "a") as f:
        for demo in f["data"].values():
            del demo["obs"][CAMERA]
    code, err = run_script_in_process("analyze_latent.py", "--checkpoint", str(trained["checkpoint"]), "--dataset",
                                      f"{copy}:real", "--output", str(tmp_path / "out"), cwd=tmp_path,
                                      monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    assert f"error: {copy}: demo_0: field 'obs/{CAMERA}' is missing" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_outputs_default_to_the_run_folders_name():
    from importlib import util

    spec = util.spec_from_file_location("analyze_latent", ROOT / "scripts" / "analyze_latent.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.default_output(Path("outputs/train/wg_bg/policy.pt")) == Path("outputs/latent/wg_bg")
    assert module.default_output(Path("ckpts/step_5000.pt")) == Path("outputs/latent/step_5000")
    assert module.dataset_labels(["a/x.hdf5", "b/x.hdf5", "c/y.hdf5"], ["real", "sim", "sim"]) == \
        ["a/x.hdf5", "b/x.hdf5", "y.hdf5"]
    assert module.dataset_labels(["a/x.hdf5", "a/x.hdf5"], ["real", "sim"]) == ["a/x.hdf5:real", "a/x.hdf5:sim"]


def test_object_centric_policy_latent_is_its_estimators_keypoint_latent(policy_datasets, tmp_path, monkeypatch,
                                                                         capsys):
    """An object-centric checkpoint: the latent is the estimator's keypoint latent of the policy's camera (each
    keypoint's position and the features under it), and analyze_latent.py runs on it end to end."""
    from r2s2r.policy.agent import load_agent
    from r2s2r.policy.config import compose_train_cfg
    from r2s2r.policy.object_centric import to_unit
    from r2s2r.policy.train_object_centric import ObjectCentricTrainer

    datasets = f"[{{path: {policy_datasets['real']}, weight: 0.5}}, {{path: {policy_datasets['sim']}, weight: 0.5}}]"
    cfg = compose_train_cfg([f"run_dir={tmp_path / 'oc'}", "steps=4", "threads=1", "policy.kind=object_centric",
                             f"policy.cameras=[{CAMERA}]", "policy.image_size=[32,32]", "policy.chunk=8",
                             "policy.execute=4", "object_centric.estimator_steps=4", "object_centric.hidden=32",
                             "object_centric.keypoints=4", f"data.datasets={datasets}"])
    trainer = ObjectCentricTrainer(cfg)
    checkpoint = trainer.run(progress=False).checkpoint
    policy, real = load_agent(checkpoint).policy, trainer.datasets[0]
    rows = np.arange(0, len(real), 7)
    latents = embed_dataset(policy, real, rows, cfg=cfg.policy)
    with torch.no_grad():
        direct = policy.estimator.latent(to_unit(real.images[CAMERA][rows]))[0].numpy()
    assert latents.shape == (len(rows), 4 * (2 + 32))  # 4 keypoints: (x, y) and 32 features each
    np.testing.assert_allclose(latents, direct, rtol=1e-5, atol=1e-6)
    assert np.ptp(latents, axis=0).max() > 0  # the frames differ, and so do their latents

    out = tmp_path / "latent"
    code, err = run_script_in_process("analyze_latent.py", "--checkpoint", str(checkpoint), "--max-samples", "60",
                                      "--method", "pca", "--max-steps", "4", "--output", str(out), cwd=tmp_path,
                                      monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    data = json.loads((out / "attribution.json").read_text())
    assert data["pool"] == {"size": 120, "real": 60, "sim": 60, "real_share": 0.5}
    assert data["rollout"]["steps"] == 4 and len(data["per_step"]) == 4
