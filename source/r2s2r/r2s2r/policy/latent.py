"""Latent-space analysis of a trained policy: where real and simulated observations land in its encoder's space.

The encoder's latent of an observation is, for the flow transformer, `policy.latent(policy.encode(...))` (mean over
the observation tokens); for the object-centric policy, its estimator's keypoint latent of the camera image (each
keypoint's image position and the features under it, `ObjectEstimator.latent`): the perception that real and
simulated images share, before the object state it regresses.
Observations from datasets are embedded in batches into a pool; a rollout's observations are embedded the same
way. The pool is projected to 2-D (PCA, t-SNE) for plots, and each rollout state is attributed to the data by its
k nearest pool latents (Euclidean): the fraction of those that are real. The pool's real share is the chance level
the rollout's mean real fraction is compared with.

Used by scripts/analyze_latent.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from r2s2r.core import ConfigError
from r2s2r.policy.config import DOMAINS, PolicyCfg
from r2s2r.policy.data import LoadedDataset
from r2s2r.policy.model import FlowMatchingPolicy
from r2s2r.policy.object_centric import ObjectCentricPolicy, to_unit

METHODS = ("pca", "tsne")
Policy = FlowMatchingPolicy | ObjectCentricPolicy


@torch.no_grad()
def embed(policy: Policy, images: Mapping[str, np.ndarray], proprio: np.ndarray, domain: str | None = None,
          batch_size: int = 256, progress: bool = False, desc: str = "embed", cfg: PolicyCfg | None = None
          ) -> np.ndarray:
    """Latents (N, D) float32 of N observations: uint8 images {camera: (N, H, W, 3)} and proprio (N, P).

    `domain` is the label the encoder is told ("real", "sim"; None: real, as the deployed agent does); it only
    matters for a policy with a domain embedding. `cfg`: the policy's observation config (cameras, image size);
    the flow transformer carries its own, the object-centric policy's comes from its checkpoint.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size = {batch_size}: expected >= 1")
    if domain is not None and domain not in DOMAINS:
        raise ConfigError(f"domain = {domain!r}: expected one of {DOMAINS} or None")
    cfg = cfg or policy.cfg
    n = len(proprio)
    for cam in cfg.cameras:
        if cam not in images:
            raise ConfigError(f"images: camera {cam!r} is missing; the policy observes {list(cfg.cameras)} "
                              f"(policy.cameras), given {sorted(images)}")
        frames = images[cam]
        if frames.shape != (n, *cfg.image_size, 3) or frames.dtype != np.uint8:
            raise ConfigError(f"images[{cam!r}] has shape {frames.shape} ({frames.dtype}): expected "
                              f"({n}, {cfg.image_size[0]}, {cfg.image_size[1]}, 3) uint8, the policy's image size")
    policy.eval()
    device = next(policy.parameters()).device
    object_centric = isinstance(policy, ObjectCentricPolicy)
    out = np.empty((n, policy.estimator.mlp[0].in_features if object_centric else cfg.dim), dtype=np.float32)
    for start in tqdm(range(0, n, batch_size), desc=desc, unit="batch", disable=not progress):
        stop = min(n, start + batch_size)
        batch_images = {c: torch.from_numpy(np.require(images[c][start:stop], requirements="CW")).to(device)
                        for c in cfg.cameras}
        if object_centric:  # the estimator looks through cameras[0], as the deployed agent does
            latent = policy.estimator.latent(to_unit(batch_images[cfg.cameras[0]]))[0]
        else:
            batch_proprio = torch.from_numpy(np.asarray(proprio[start:stop], dtype=np.float32)).to(device)
            labels = None if domain is None else torch.full((stop - start,), DOMAINS.index(domain),
                                                            dtype=torch.long, device=device)
            latent = policy.latent(policy.encode(batch_images, batch_proprio, labels))
        out[start:stop] = latent.float().cpu().numpy()
    return out


def subsample(n: int, max_samples: int | None, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices: all `n` rows, or `max_samples` of them drawn without replacement."""
    if max_samples is not None and max_samples < 1:
        raise ConfigError(f"max_samples = {max_samples}: expected >= 1 (or None for every row)")
    if max_samples is None or max_samples >= n:
        return np.arange(n)
    return np.sort(rng.choice(n, size=max_samples, replace=False))


def embed_dataset(policy: Policy, dataset: LoadedDataset, rows: np.ndarray | None = None,
                  domain: str | None = "own", batch_size: int = 256, progress: bool = False,
                  cfg: PolicyCfg | None = None) -> np.ndarray:
    """Latents of `dataset`'s steps `rows` (default all). `domain="own"` tells the encoder the dataset's domain, as
    in training; None or a domain name overrides it. `cfg` as for `embed`."""
    rows = np.arange(len(dataset)) if rows is None else np.asarray(rows)
    label = dataset.domain if domain == "own" else domain
    return embed(policy, {c: v[rows] for c, v in dataset.images.items()}, dataset.proprio[rows], label,
                 batch_size, progress, desc=f"embed {dataset.path}", cfg=cfg)


@dataclass
class LatentPool:
    """Embedded data points: one row per sampled step, with the dataset and domain it came from.

    Attributes:
        latents: (N, dim) float32 encoder latents.
        source: (N,) index into `names` of the dataset each point came from.
        domain: (N,) "real" or "sim", the point's dataset's domain.
        rows: (N,) the point's step index within its dataset.
        names: one label per dataset (its path).
        dataset_domains: the domain of each dataset, in the order of `names`.
    """

    latents: np.ndarray
    source: np.ndarray
    domain: np.ndarray
    rows: np.ndarray
    names: list[str] = field(default_factory=list)
    dataset_domains: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.latents)

    @property
    def real_share(self) -> float:
        """Share of real points in the pool: the chance level of a nearest-neighbour real fraction."""
        return float(np.mean(self.domain == "real")) if len(self) else float("nan")


def build_pool(policy: Policy, datasets: Sequence[LoadedDataset], max_samples: int | None,
               seed: int = 0, domain: str | None = "own", batch_size: int = 256,
               progress: bool = False, cfg: PolicyCfg | None = None) -> LatentPool:
    """Embed up to `max_samples` steps of each dataset (drawn with `seed`, independently per dataset); `cfg` as
    for `embed`."""
    if not datasets:
        raise ConfigError("datasets: empty; expected at least one dataset to embed")
    latents, source, domains, rows = [], [], [], []
    for i, d in enumerate(datasets):
        # Each dataset's draw has its own stream, so adding a dataset does not change the others' samples.
        picked = subsample(len(d), max_samples, np.random.default_rng([seed, i]))
        latents.append(embed_dataset(policy, d, picked, domain, batch_size, progress, cfg))
        source.append(np.full(len(picked), i))
        domains.append(np.full(len(picked), d.domain))
        rows.append(picked)
    return LatentPool(np.concatenate(latents), np.concatenate(source), np.concatenate(domains),
                      np.concatenate(rows), [d.path for d in datasets], [d.domain for d in datasets])


def stack_observations(observations: Iterable[Mapping], cfg: PolicyCfg) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Environment observations ({"proprio": {key: array}, "images": {camera: uint8}}) as the arrays `embed`
    takes, proprio keys concatenated in the policy's order (as the agent and the datasets do)."""
    images: dict[str, list[np.ndarray]] = {c: [] for c in cfg.cameras}
    proprio: list[np.ndarray] = []
    for t, obs in enumerate(observations):
        for cam in cfg.cameras:
            frame = obs.get("images", {}).get(cam)
            if frame is None:
                raise ConfigError(f"observation {t}: camera {cam!r} is missing; the policy observes "
                                  f"{list(cfg.cameras)}, the observation has {sorted(obs.get('images', {}))}")
            images[cam].append(np.asarray(frame))
        missing = [k for k in cfg.proprio if k not in obs.get("proprio", {})]
        if missing:
            raise ConfigError(f"observation {t}: proprio {missing} missing; the policy observes {list(cfg.proprio)}")
        parts = [np.asarray(obs["proprio"][k], dtype=np.float32).ravel() for k in cfg.proprio]
        proprio.append(np.concatenate(parts) if parts else np.zeros(0, np.float32))
    if not proprio:
        raise ConfigError("observations: empty; expected at least one observation")
    return {c: np.stack(v) for c, v in images.items()}, np.stack(proprio)


# -- projection ----------------------------------------------------------------------------------------------------
@dataclass
class Projection:
    """2-D coordinates of the pool and of the extra points (a rollout) for one method.

    Attributes:
        method: "pca" or "tsne".
        pool: (N, 2) coordinates of the pool's points.
        extra: (M, 2) coordinates of the extra points.
        info: method details (PCA's explained variance ratios; t-SNE's perplexity).
    """

    method: str
    pool: np.ndarray
    extra: np.ndarray
    info: dict = field(default_factory=dict)


def project(method: str, pool: np.ndarray, extra: np.ndarray | None = None, seed: int = 0) -> Projection:
    """Project pool latents (N, d) and extra latents (M, d) to 2-D with `method` ("pca" or "tsne")."""
    extra = np.zeros((0, pool.shape[1]), pool.dtype) if extra is None else extra
    if method == "pca":
        from sklearn.decomposition import PCA

        if len(pool) < 2:
            raise ConfigError(f"pca: {len(pool)} data point(s): expected at least 2")
        # Fitted on the data alone, so the axes describe the data; the rollout is placed into them.
        pca = PCA(n_components=2, random_state=seed).fit(pool)
        return Projection("pca", pca.transform(pool), pca.transform(extra) if len(extra) else np.zeros((0, 2)),
                          {"explained_variance_ratio": [float(v) for v in pca.explained_variance_ratio_]})
    if method == "tsne":
        from sklearn.manifold import TSNE

        points = np.concatenate([pool, extra])
        if len(points) < 4:
            raise ConfigError(f"tsne: {len(points)} point(s): expected at least 4")
        # t-SNE has no transform for new points: the rollout states are embedded together with the data points,
        # so they also take part in shaping the map (slightly, being few next to the pool).
        perplexity = float(min(30.0, (len(points) - 1) / 3))
        xy = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(points)
        return Projection("tsne", xy[: len(pool)], xy[len(pool):], {"perplexity": perplexity,
                                                                   "joint_with_rollout": True})
    raise ConfigError(f"method = {method!r}: expected one of {', '.join(METHODS)}")


def parse_methods(text: str) -> list[str]:
    """'pca,tsne' -> ['pca', 'tsne'], checked."""
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ConfigError(f"--method = {text!r}: expected a comma-separated list of {', '.join(METHODS)}")
    return list(dict.fromkeys(methods))


# -- attribution ---------------------------------------------------------------------------------------------------
@dataclass
class Attribution:
    """Nearest-neighbour attribution of query latents to a pool.

    Attributes:
        k: neighbours per query.
        neighbours: (M, k) pool indices, nearest first.
        distances: (M, k) Euclidean distances in latent space.
        real_fraction: (M,) share of each query's k neighbours that are real.
        per_dataset: (M, D) share of each query's k neighbours from each of the pool's datasets.
        chance: the pool's real share, the baseline `real_fraction` is compared with.
    """

    k: int
    neighbours: np.ndarray
    distances: np.ndarray
    real_fraction: np.ndarray
    per_dataset: np.ndarray
    chance: float

    @property
    def mean_real_fraction(self) -> float:
        return float(self.real_fraction.mean()) if len(self.real_fraction) else float("nan")


def attribute(queries: np.ndarray, pool: LatentPool, k: int = 10) -> Attribution:
    """For each query latent, its `k` nearest pool latents (Euclidean) and the fraction of them that are real."""
    from sklearn.neighbors import NearestNeighbors

    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ConfigError(f"k = {k!r}: expected an integer >= 1")
    if k > len(pool):
        raise ConfigError(f"k = {k}: the pool holds only {len(pool)} data points; expected k <= {len(pool)}")
    queries = np.asarray(queries, dtype=np.float32).reshape(-1, pool.latents.shape[1])
    if len(queries):
        # Exact search (brute force): the pool is a few thousand points, and ties are broken the same every time.
        nn = NearestNeighbors(n_neighbors=k, algorithm="brute", metric="euclidean").fit(pool.latents)
        distances, neighbours = nn.kneighbors(queries)
    else:
        distances, neighbours = np.zeros((0, k)), np.zeros((0, k), dtype=int)
    real = (pool.domain == "real")[neighbours]
    per_dataset = np.stack([(pool.source[neighbours] == i).mean(axis=1) for i in range(len(pool.names))], axis=1) \
        if len(queries) else np.zeros((0, len(pool.names)))
    return Attribution(k, neighbours, distances, real.mean(axis=1) if len(queries) else np.zeros(0),
                       per_dataset, pool.real_share)


def domain_separation(pool: LatentPool, max_per_domain: int = 1000, seed: int = 0) -> dict:
    """How far apart the real and the simulated latents are: the squared MMD between them (the quantity the
    co-training alignment loss pulls down) and the balanced accuracy of a linear probe telling them apart
    (5-fold cross-validated; 0.5 is indistinguishable). None for both when the pool lacks either domain."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from r2s2r.policy.model import mmd

    real, sim = np.flatnonzero(pool.domain == "real"), np.flatnonzero(pool.domain == "sim")
    if min(len(real), len(sim)) < 5:
        return {"mmd": None, "probe_balanced_accuracy": None, "real": len(real), "sim": len(sim)}
    rng = np.random.default_rng(seed)
    real = rng.permutation(real)[:max_per_domain]
    sim = rng.permutation(sim)[:max_per_domain]
    x = pool.latents[np.concatenate([real, sim])]
    y = np.r_[np.zeros(len(real)), np.ones(len(sim))]
    with torch.no_grad():
        distance = float(mmd(torch.from_numpy(x[: len(real)]), torch.from_numpy(x[len(real):])))
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    accuracy = cross_val_score(probe, x, y, cv=5, scoring="balanced_accuracy")
    return {"mmd": distance, "probe_balanced_accuracy": float(accuracy.mean()), "real": len(real), "sim": len(sim)}
