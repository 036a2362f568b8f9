"""The flow-matching transformer policy.

Observation tokens: each camera image goes through one convolutional encoder shared by all cameras (trained from
scratch) and becomes a grid of tokens tagged with a learned camera embedding; the normalized proprioception
becomes one token. A transformer encoder mixes them. An action-chunk decoder takes the noisy chunk (one token per
step) with the flow time, self-attends across the chunk and cross-attends to the observation tokens, and predicts
the velocity of the straight path from noise to the normalized actions (conditional flow matching with the linear
interpolant: x_t = (1 - t) x_0 + t x_1, target x_1 - x_0). Sampling integrates that velocity from Gaussian noise
with a few Euler steps.

Normalization statistics live in the module as buffers, so a checkpoint carries them and EMA copies them.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from r2s2r.policy.config import DOMAINS, PolicyCfg
from r2s2r.policy.data import Stats


class ImageEncoder(nn.Module):
    """uint8 images (B, H, W, 3) -> tokens (B, H/16 * W/16, dim): four stride-2 convolutions."""

    def __init__(self, dim: int):
        super().__init__()
        channels = (3, 32, 64, 128, dim)
        layers: list[nn.Module] = []
        for i in range(4):
            kernel = 5 if i == 0 else 3
            layers += [nn.Conv2d(channels[i], channels[i + 1], kernel, stride=2, padding=kernel // 2),
                       nn.GroupNorm(8, channels[i + 1]), nn.GELU()]
        self.net = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.net(x).flatten(2).transpose(1, 2)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features of the flow time t in [0, 1]."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = 1000.0 * t[:, None].float() * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Augmentation: pad by replicating the border, then crop back to size at a random offset per image."""
    b, h, w, _ = images.shape
    x = F.pad(images.permute(0, 3, 1, 2).float(), (pad, pad, pad, pad), mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None])[:, :, None].expand(b, h, w)
    cols = (dx[:, None] + torch.arange(w)[None])[:, None, :].expand(b, h, w)
    batch = torch.arange(b)[:, None, None].expand(b, h, w)
    return x.permute(0, 2, 3, 1)[batch, rows, cols].to(images.dtype)


class ActionFlow(nn.Module):
    """The action-chunk decoder of conditional flow matching, on normalized chunks (B, chunk, A): one token per
    step of the noisy chunk, tagged with the flow time, self-attends across the chunk and cross-attends to the
    conditioning tokens (`memory`, (B, M, dim)); it predicts the velocity of the straight path from noise to the
    chunk. Sampling integrates that velocity with `flow_steps` Euler steps. The flow transformer conditions it on
    its observation tokens, the object-centric policy's flow head on its tracked state."""

    def __init__(self, dim: int, heads: int, chunk: int, action_dim: int, layers: int, dropout: float,
                 flow_steps: int):
        super().__init__()
        self.dim, self.flow_steps = dim, flow_steps
        self.action_in = nn.Linear(action_dim, dim)
        self.action_pos = nn.Parameter(torch.randn(1, chunk, dim) * 0.02)
        self.time_mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(dim, heads, 4 * dim, dropout, "gelu", batch_first=True, norm_first=True),
            layers)
        self.action_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, action_dim))

    def velocity(self, x_t: torch.Tensor, t: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        h = self.action_in(x_t) + self.action_pos + self.time_mlp(time_embedding(t, self.dim))[:, None]
        return self.action_out(self.decoder(h, memory))

    def loss(self, memory: torch.Tensor, x1: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The flow-matching loss for normalized chunks x1 (B, chunk, A): x_t = (1 - t) x0 + t x1 from Gaussian
        noise x0 at a uniform time t, target velocity x1 - x0."""
        x0 = torch.randn(x1.shape, generator=generator)
        t = torch.rand(x1.shape[0], generator=generator)
        x_t = (1 - t[:, None, None]) * x0 + t[:, None, None] * x1
        return F.mse_loss(self.velocity(x_t, t, memory), x1 - x0)

    @torch.no_grad()
    def sample(self, memory: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Normalized chunks (B, chunk, A) integrated from `noise` (B, chunk, A)."""
        x = noise
        for k in range(self.flow_steps):
            t = torch.full((x.shape[0],), k / self.flow_steps, device=x.device)
            x = x + self.velocity(x, t, memory) / self.flow_steps
        return x


class FlowMatchingPolicy(nn.Module):
    """See the module docstring. `proprio_dim` is the width of the concatenated proprio keys."""

    def __init__(self, cfg: PolicyCfg, proprio_dim: int, stats: Stats | None = None):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.image_encoder = ImageEncoder(d)
        tokens_per_image = (cfg.image_size[0] // 16) * (cfg.image_size[1] // 16)
        self.image_pos = nn.Parameter(torch.randn(1, tokens_per_image, d) * 0.02)
        self.camera_embed = nn.Parameter(torch.randn(len(cfg.cameras), 1, d) * 0.02)
        self.proprio_encoder = nn.Sequential(nn.Linear(proprio_dim, d), nn.GELU(), nn.Linear(d, d)) \
            if proprio_dim else None
        self.domain_embed = nn.Embedding(len(DOMAINS), d) if cfg.domain_embedding else None
        layer = lambda: nn.TransformerEncoderLayer(d, cfg.heads, 4 * d, cfg.dropout, "gelu", batch_first=True,  # noqa: E731
                                                   norm_first=True)
        self.obs_transformer = nn.TransformerEncoder(layer(), cfg.obs_layers, enable_nested_tensor=False)
        self.obs_norm = nn.LayerNorm(d)
        self.flow = ActionFlow(d, cfg.heads, cfg.chunk, cfg.action_dim, cfg.action_layers, cfg.dropout,
                               cfg.flow_steps)
        for name, width in (("proprio", proprio_dim), ("action", cfg.action_dim)):
            mean = torch.zeros(width) if stats is None else torch.as_tensor(getattr(stats, f"{name}_mean"))
            std = torch.ones(width) if stats is None else torch.as_tensor(getattr(stats, f"{name}_std"))
            self.register_buffer(f"{name}_mean", mean.float())
            self.register_buffer(f"{name}_std", std.float())

    # Checkpoints written before the action decoder became its own module (`ActionFlow`) name its weights without
    # the `flow.` prefix; loading renames them, so those checkpoints still deploy and resume.
    _DECODER_KEYS = ("action_in.", "action_pos", "time_mlp.", "decoder.", "action_out.")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for key in [k for k in state_dict if k.startswith(prefix) and k[len(prefix):].startswith(self._DECODER_KEYS)]:
            state_dict[prefix + "flow." + key[len(prefix):]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- observation -------------------------------------------------------------------------------------------
    def encode(self, images: dict[str, torch.Tensor], proprio: torch.Tensor,
               domain: torch.Tensor | None = None) -> torch.Tensor:
        """Observation tokens (B, T, dim) from uint8 images {camera: (B, H, W, 3)}, raw proprio (B, P) and domain
        indices (B,) (DOMAINS; None: real, the deployment side)."""
        tokens = []
        if self.cfg.cameras:
            stacked = torch.cat([images[c] for c in self.cfg.cameras])  # one encoder pass for every camera
            feats = self.image_encoder(stacked) + self.image_pos
            b = proprio.shape[0]
            for i, f in enumerate(feats.split(b)):
                tokens.append(f + self.camera_embed[i])
        if self.proprio_encoder is not None:
            tokens.append(self.proprio_encoder((proprio - self.proprio_mean) / self.proprio_std)[:, None])
        x = torch.cat(tokens, dim=1)
        if self.domain_embed is not None:
            if domain is None:
                domain = torch.full((x.shape[0],), DOMAINS.index("real"), dtype=torch.long, device=x.device)
            x = x + self.domain_embed(domain)[:, None]
        return self.obs_norm(self.obs_transformer(x))

    @staticmethod
    def latent(tokens: torch.Tensor) -> torch.Tensor:
        """One vector per observation (mean over its tokens): what latent analysis and alignment compare."""
        return tokens.mean(dim=1)

    # -- actions -----------------------------------------------------------------------------------------------
    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions - self.action_mean) / self.action_std

    def denormalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions * self.action_std + self.action_mean

    def flow_loss(self, obs_tokens: torch.Tensor, actions: torch.Tensor,
                  generator: torch.Generator | None = None) -> torch.Tensor:
        """Conditional flow-matching loss for raw action chunks (B, chunk, A)."""
        return self.flow.loss(obs_tokens, self.normalize_actions(actions), generator)

    @torch.no_grad()
    def sample(self, obs_tokens: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Raw action chunks (B, chunk, A) integrated from `noise` (B, chunk, A)."""
        return self.denormalize_actions(self.flow.sample(obs_tokens, noise))

def to_tensors(batch: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """numpy observations {images: {camera: uint8}, proprio: float} -> torch tensors (no copy for images)."""
    images = {c: torch.from_numpy(np.ascontiguousarray(v)) for c, v in batch["images"].items()}
    return images, torch.from_numpy(np.asarray(batch["proprio"], dtype=np.float32))


def mmd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared maximum mean discrepancy between samples x (n, d) and y (m, d), RBF kernels at several widths
    around the median pairwise distance (so the loss does not depend on the latents' scale)."""
    z = torch.cat([x, y])
    dist = torch.cdist(z, z).pow(2)
    scale = dist.detach().median().clamp_min(1e-6)
    k = sum(torch.exp(-dist / (scale * w)) for w in (0.25, 1.0, 4.0))
    n = len(x)
    return k[:n, :n].mean() + k[n:, n:].mean() - 2 * k[:n, n:].mean()
