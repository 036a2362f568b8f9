"""Where do real and simulated observations land in a trained policy's latent space, and which does a rollout
resemble?

Examples:
  python scripts/analyze_latent.py --checkpoint outputs/train/wg_bg/policy.pt
  python scripts/analyze_latent.py --checkpoint outputs/train/wg_bg/policy.pt --dataset outputs/real/real.hdf5 \
      --dataset outputs/sim/wg_bg.hdf5:sim --method pca --k 20 --condition lighting

The policy's encoder (EMA weights) embeds every observation as one vector (the mean of its observation tokens).
Embedded: up to --max-samples steps of each dataset (drawn with --sample-seed; default datasets: those the
checkpoint was trained on, as recorded in it), and every observation the policy acted on during one episode of
--task (the twin by default) with --seed and --condition. A dataset is PATH or PATH:real / PATH:sim (without a
suffix the domain comes from the file's task ID).

Outputs (in --output, default outputs/latent/<checkpoint name>/, where the name of policy.pt / last.pt is the
run folder's):
  latent_pca.png, latent_tsne.png   the data points coloured per dataset (circles real, triangles sim) and the
                                    rollout's path through the projection (--method picks which)
  attribution.json                  per rollout step: its k nearest data latents (--k, Euclidean in latent
                                    space) and the fraction that are real; the rollout's mean real fraction and
                                    the pool's real share (the chance level)
  attribution.md                    the same in words, with the caveats of reading it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from r2s2r import cli  # noqa: E402
from r2s2r.core import ConfigError  # noqa: E402
from r2s2r.data.hdf5 import DatasetError  # noqa: E402
from r2s2r.files import atomic_path, check_output_dir, write_text_atomic  # noqa: E402

TWIN = "R2S2R-PickSort-Real-v0"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="trained policy (policy.pt of a run folder)")
    p.add_argument("--dataset", action="append", default=None, metavar="PATH[:DOMAIN]",
                   help="dataset to embed (repeat for several); default: the checkpoint's training datasets")
    p.add_argument("--max-samples", type=cli.positive_int, default=2000, help="steps embedded per dataset (subsampled)")
    p.add_argument("--sample-seed", type=cli.seed, default=0, help="seed of the subsampling")
    p.add_argument("--method", default="pca,tsne", help="projections, comma-separated: pca, tsne")
    p.add_argument("--task", default=TWIN, help="task ID of the rollout (default: the reality twin)")
    p.add_argument("--seed", type=cli.seed, default=0, help="episode seed of the rollout (and the policy's noise)")
    p.add_argument("--condition", default="nominal", help="reset condition: nominal, lighting, belt_speed, "
                   "novel_objects, combined")
    p.add_argument("--max-steps", type=cli.positive_int, default=None, help="cut the rollout after this many steps")
    p.add_argument("--k", type=cli.positive_int, default=10, help="nearest data latents per rollout state")
    p.add_argument("--data-domain", default="own", choices=["own", "real"],
                   help="domain label the encoder is told for data points: each dataset's own (as in training) "
                   "or real (as the deployed agent tells it); matters only with policy.domain_embedding")
    p.add_argument("--batch-size", type=cli.int_in(1, 65536), default=256, help="observations per encoder pass")
    p.add_argument("--output", type=cli.output_dir, default=None,
                   help="output folder (default outputs/latent/<checkpoint name>/)")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    # Checked before the (slow) embedding rather than when the rollout's environment is made.
    from r2s2r.tasks import TASKS
    from r2s2r.tasks.pick_sort.env_cfg import CONDITIONS

    if args.task not in TASKS:
        raise ConfigError(f"--task = {args.task!r}: unknown task ID; expected one of {', '.join(TASKS)}")
    if args.condition not in CONDITIONS:
        raise ConfigError(f"--condition = {args.condition!r}: expected one of {', '.join(CONDITIONS)}")


def default_output(checkpoint: Path) -> Path:
    # Every run folder names its checkpoint policy.pt (or last.pt): the folder tells runs apart, not the stem.
    name = checkpoint.parent.name if checkpoint.stem in ("policy", "last") and checkpoint.parent.name \
        else checkpoint.stem
    return Path("outputs/latent") / name


def parse_dataset(text: str):
    from r2s2r.policy.config import DOMAINS, DatasetCfg

    path, _, suffix = text.rpartition(":")
    if path and suffix in DOMAINS:
        return DatasetCfg(path=path, domain=suffix)
    return DatasetCfg(path=text)


def rollout(agent, args: argparse.Namespace) -> tuple[list[dict], list[bool], dict, bool]:
    """One episode of the policy; returns the observations it acted on, whether each started a new chunk, the
    final info, and whether the episode ended (rather than being cut by --max-steps)."""
    import r2s2r.tasks as tasks
    from tqdm import tqdm

    env = tasks.make(args.task, condition=args.condition, **agent.env_overrides)
    try:
        obs, info = env.reset(seed=args.seed)
        agent.reset(args.seed)
        limit = env.max_steps if args.max_steps is None else min(args.max_steps, env.max_steps)
        seen, planned, ended = [], [], False
        for _ in tqdm(range(limit), desc=f"rollout {args.task}", unit="step"):
            # Only what the agent sees (no privileged state); copied since the env may reuse its buffers.
            view = {"proprio": {k: np.array(v) for k, v in obs["proprio"].items()},
                    "images": {c: np.array(v) for c, v in obs["images"].items()}}
            planned.append(agent.chunks.wants_chunk)
            action = agent.act(view)
            seen.append(view)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                ended = True
                break
    finally:
        env.close()
    return seen, planned, info, ended


def dataset_labels(paths: list[str], domains: list[str]) -> list[str]:
    """Distinct dataset labels for legends and the report: the file name, made longer only where names collide
    (the full path, then the domain, then the position)."""
    labels = [Path(p).name for p in paths]
    for widen in (lambda i: paths[i], lambda i: f"{paths[i]}:{domains[i]}", lambda i: f"{paths[i]}:{domains[i]}#{i}"):
        labels = [widen(i) if labels.count(label) > 1 else label for i, label in enumerate(labels)]
    return labels


def plot(projection, pool, labels: list[str], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 7), dpi=120)
    colours = plt.get_cmap("tab10")
    for i, (label, domain) in enumerate(zip(labels, pool.dataset_domains)):
        mask = pool.source == i
        ax.scatter(*projection.pool[mask].T, s=6, alpha=0.45, color=colours(i % 10),
                   marker="o" if domain == "real" else "^", label=f"{label} ({domain}, n={int(mask.sum())})",
                   linewidths=0)
    path_xy = projection.extra
    if len(path_xy):
        ax.plot(*path_xy.T, color="black", linewidth=0.7, alpha=0.7, label=f"rollout ({len(path_xy)} steps)")
        ax.scatter(*path_xy[0], color="black", marker="*", s=160, zorder=5, label="rollout start")
        ax.scatter(*path_xy[-1], color="black", marker="X", s=90, zorder=5, label="rollout end")
    detail = projection.info.get("explained_variance_ratio")
    if detail:
        ax.set_xlabel(f"PC1 ({detail[0]:.0%} of variance)")
        ax.set_ylabel(f"PC2 ({detail[1]:.0%} of variance)")
    else:
        ax.set_xlabel("t-SNE 1")
        ax.set_ylabel("t-SNE 2")
    ax.set_title(title, fontsize=10)
    legend = ax.legend(fontsize=7, loc="best")
    for handle in legend.legend_handles[: len(labels)]:
        handle.set_sizes([25])  # the data points' legend markers, readable next to their tiny plot markers
        handle.set_alpha(1.0)
    fig.tight_layout()
    # Written under a temporary name and renamed: the final name never holds a half-written image.
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)


def report(args, pool, labels, attribution, planned, info, ended, steps, projections) -> dict:
    from r2s2r.policy.latent import domain_separation

    per_step = []
    for t in range(steps):
        per_step.append({
            "step": t,
            "new_chunk": bool(planned[t]),
            "real_fraction": float(attribution.real_fraction[t]),
            "dataset_fraction": {labels[i]: float(f) for i, f in enumerate(attribution.per_dataset[t])},
            "neighbours": [{"dataset": labels[pool.source[j]], "row": int(pool.rows[j]), "domain": str(pool.domain[j]),
                            "distance": float(d)} for j, d in zip(attribution.neighbours[t], attribution.distances[t])],
        })
    mean = attribution.mean_real_fraction
    return {
        "checkpoint": str(args.checkpoint),
        "task": args.task, "seed": args.seed, "condition": args.condition, "max_steps": args.max_steps,
        "k": attribution.k, "max_samples": args.max_samples, "sample_seed": args.sample_seed,
        "data_domain": args.data_domain,
        "datasets": [{"label": labels[i], "path": pool.names[i], "domain": pool.dataset_domains[i],
                      "embedded": int((pool.source == i).sum())} for i in range(len(pool.names))],
        "pool": {"size": len(pool), "real": int((pool.domain == "real").sum()),
                 "sim": int((pool.domain == "sim").sum()), "real_share": pool.real_share},
        "rollout": {"steps": steps, "success": bool(info.get("success", False)), "failure": info.get("failure"),
                    "cut": not ended,
                    "mean_real_fraction": mean, "chance_real_fraction": pool.real_share,
                    "above_chance": mean - pool.real_share,
                    "steps_majority_real": int((attribution.real_fraction > 0.5).sum()),
                    "mean_dataset_fraction": {labels[i]: float(attribution.per_dataset[:, i].mean())
                                              for i in range(len(labels))}},
        "domain_separation": domain_separation(pool),
        "projections": {p.method: p.info for p in projections},
        "per_step": per_step,
    }


def _separation_lines(sep: dict) -> list[str]:
    if sep["mmd"] is None:
        return [f"Not measured: the pool needs both domains ({sep['real']} real, {sep['sim']} sim points)."]
    return [f"- Squared MMD between real and simulated latents: {sep['mmd']:.4f} (what the alignment loss pulls down)",
            f"- Linear probe telling real from simulated latents, balanced accuracy (5-fold): "
            f"{sep['probe_balanced_accuracy']:.1%} (50 % = indistinguishable)"]


def markdown(result: dict) -> str:
    r, pool = result["rollout"], result["pool"]
    outcome = "success" if r["success"] else (f"cut at {r['steps']} steps" if r["cut"] else f"failure ({r['failure']})")
    lines = [
        "# Latent-space attribution",
        "",
        f"Checkpoint `{result['checkpoint']}`; rollout on `{result['task']}` (condition {result['condition']}, "
        f"seed {result['seed']}): {r['steps']} steps, {outcome}.",
        "",
        "## Embedded data",
        "",
        "| dataset | domain | points |",
        "|---|---|---|",
        *[f"| {d['label']} | {d['domain']} | {d['embedded']} |" for d in result["datasets"]],
        f"| **pool** | real share {pool['real_share']:.1%} | {pool['size']} |",
        "",
        "## Nearest-neighbour attribution",
        "",
        f"For each of the rollout's {r['steps']} states, its k = {result['k']} nearest data points in the policy's "
        f"latent space (Euclidean).",
        "",
        f"- Mean real fraction over the rollout: **{r['mean_real_fraction']:.1%}**",
        f"- Chance level (the pool's real share): {pool['real_share']:.1%}",
        f"- Difference: {100 * r['above_chance']:+.1f} percentage points",
        f"- States whose neighbours are mostly real: {r['steps_majority_real']} of {r['steps']}",
        "",
        "Mean share of neighbours per dataset: " + ", ".join(f"{k} {v:.1%}" for k, v in
                                                             r["mean_dataset_fraction"].items()) + ".",
        "",
        "## Domain separation",
        "",
        *_separation_lines(result["domain_separation"]),
        "",
        "## Caveats",
        "",
        "- Nearest neighbours in a learned latent space measure similarity as this policy's encoder sees it. They "
        "do not say which data caused the policy's behaviour (that would take retraining without the data, or "
        "influence functions); a state may resemble real data and still act on what it learned from simulation.",
        "- The numbers depend on the subsampling (at most "
        f"{result['max_samples']} points per dataset, seed {result['sample_seed']}) and on k: rerun with another "
        "--sample-seed or --k to see how much they move. Consecutive rollout states are strongly correlated, so "
        "the steps are not independent samples.",
        "- The baseline is the pool's real share: a mean real fraction near it means the rollout states are no "
        "closer to real than to simulated data; a dataset with more points gets more neighbours by sheer number.",
    ]
    if result["data_domain"] == "own":
        lines.append("- Data points were embedded with their own domain label and the rollout as real (as "
                     "deployed); a policy with a domain embedding therefore places real data nearer the rollout by "
                     "construction (rerun with --data-domain real to compare like with like).")
    lines.append("- Euclidean distance treats every latent dimension alike; the 2-D plots are only a view "
                 "(t-SNE distorts distances, and there the rollout was embedded together with the data).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        check_args(args)
        from r2s2r.policy.latent import parse_methods

        methods = parse_methods(args.method)
        args.checkpoint = Path(args.checkpoint)
        if not args.checkpoint.is_file():
            raise ConfigError(f"--checkpoint {str(args.checkpoint)!r}: no such file; expected a trained policy "
                              f"(policy.pt from scripts/train.py)")
        out = check_output_dir(args.output or default_output(args.checkpoint), "--output")
        from r2s2r.policy.agent import load_agent
        from r2s2r.policy.checkpoint import load_checkpoint, train_cfg_of
        from r2s2r.policy.data import load_dataset
        from r2s2r.policy.latent import attribute, build_pool, embed, project, stack_observations

        payload = load_checkpoint(args.checkpoint)
        # The deployed agent (a flow transformer's EMA weights, or the object-centric policy); its policy's encoder
        # embeds the data, and the agent acts in the rollout.
        agent = load_agent(args.checkpoint, seed=args.seed)
        policy, cfg = agent.policy, train_cfg_of(payload).policy
        if args.dataset:
            entries = [parse_dataset(d) for d in args.dataset]
        else:
            from r2s2r.policy.config import DatasetCfg

            entries = [DatasetCfg(path=d["path"], domain=d["domain"]) for d in payload.get("datasets", [])]
            if not entries:
                raise ConfigError(f"{args.checkpoint}: records no datasets; expected --dataset PATH[:DOMAIN]")
        datasets = []
        for entry in entries:
            d = load_dataset(entry, cfg)
            # The flow transformer's encoder reads the proprio; the object-centric latent is the image's alone.
            if payload.get("kind") != "object_centric" and d.proprio.shape[1] != payload["proprio_dim"]:
                raise DatasetError(f"{d.path}: proprio observations have width {d.proprio.shape[1]}; the policy "
                                   f"was trained on width {payload['proprio_dim']} ({list(cfg.proprio)})")
            datasets.append(d)
        size = sum(min(len(d), args.max_samples) for d in datasets)
        if args.k > size:
            raise ConfigError(f"--k = {args.k}: the datasets give only {size} data points; expected k <= {size}")
        pool = build_pool(policy, datasets, args.max_samples, args.sample_seed,
                          "own" if args.data_domain == "own" else "real", args.batch_size, progress=True, cfg=cfg)
        seen, planned, info, ended = rollout(agent, args)
        images, proprio = stack_observations(seen, cfg)
        # The rollout is embedded as the deployed agent sees itself: on the real side.
        queries = embed(policy, images, proprio, None, args.batch_size, progress=True, desc="embed rollout",
                        cfg=cfg)
        attribution = attribute(queries, pool, args.k)
        projections = [project(m, pool.latents, queries, seed=args.sample_seed) for m in methods]
    except (ConfigError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    labels = dataset_labels(pool.names, pool.dataset_domains)
    result = report(args, pool, labels, attribution, planned, info, ended, len(seen), projections)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for p in projections:
            title = (f"{args.checkpoint} — {p.method.upper()} of encoder latents\nrollout: {args.task} "
                     f"({args.condition}, seed {args.seed}); mean real fraction of {args.k}-NN "
                     f"{attribution.mean_real_fraction:.0%} vs chance {pool.real_share:.0%}")
            plot(p, pool, labels, title, out / f"latent_{p.method}.png")
        write_text_atomic(out / "attribution.json", json.dumps(result, indent=1))
        write_text_atomic(out / "attribution.md", markdown(result))
    except OSError as e:
        print(f"error: cannot write to {str(out)!r}: {e}", file=sys.stderr)
        return 2
    print(f"rollout: {len(seen)} steps; mean real fraction of {args.k} nearest data latents "
          f"{attribution.mean_real_fraction:.1%} (chance: the pool's real share {pool.real_share:.1%})")
    print(f"wrote {out}/ ({', '.join(f'latent_{m}.png' for m in methods)}, attribution.json, attribution.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
