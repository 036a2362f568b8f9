"""Co-training loop: a weighted mixture of real and simulated datasets, flow matching, EMA, resumable.

Run folder (`TrainCfg.run_dir`):
    config.yaml        the resolved config
    last.pt            the latest checkpoint (every `checkpoint_every` steps and at the end): resume point
    policy.pt          written once training has finished: what play/evaluate load; its presence means "done"
    log.jsonl          one line per `log_every` steps: step, loss terms, lr, samples/s

Rerunning with the same config continues from `last.pt`; a finished run is left as it is. Raising `steps` extends
a finished run. Any other config change is refused (a run folder holds one experiment).

A loss that is not finite (NaN or inf) stops training with a `TrainingError` naming the step and the loss, before
the step updates any weight; no `policy.pt` is written, and `last.pt` keeps the last checkpoint of finite steps.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from tqdm import tqdm

from r2s2r.files import write_text_atomic
from r2s2r.policy.checkpoint import (CheckpointError, cfg_dict, check_observation_set, load_checkpoint,
                                     RUN_LENGTH_FIELDS, load_weights, refuse_other_run,
                                     save_checkpoint)
from r2s2r.policy.config import DOMAINS, TrainCfg
from r2s2r.policy.data import MixtureSampler, check_compatible, load_dataset, mixture_stats
from r2s2r.policy.model import FlowMatchingPolicy, mmd, random_shift, to_tensors


class TrainingError(RuntimeError):
    """Training cannot go on (the loss or the weights became non-finite); the message names the run and the step."""


def check_loss(loss: torch.Tensor, step: int, where: str) -> None:
    """Stop training when `loss` (a scalar) is NaN or infinite; `step` counts from 1, `where` names the run (and
    stage)."""
    if not bool(torch.isfinite(loss.detach())):
        raise TrainingError(f"{where}: the loss is {float(loss.detach())} at step {step}: expected a finite loss; "
                            f"training stopped (lower optim.lr or raise optim.warmup_steps, or check the data)")


@dataclass
class TrainResult:
    checkpoint: Path
    steps: int
    final_loss: float
    samples_per_s: float
    resumed_from: int  # step the run continued from (0: fresh)


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warmup, then cosine decay to 10 % of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


def update_ema(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    with torch.no_grad():
        for e, m in zip(ema.parameters(), model.parameters()):
            e.lerp_(m, 1.0 - decay)
        for e, m in zip(ema.buffers(), model.buffers()):
            e.copy_(m)


class Trainer:
    """Builds the data, model and optimizer for `cfg`, resuming from `cfg.run_dir/last.pt` when it exists."""

    def __init__(self, cfg: TrainCfg):
        self.cfg = cfg.validate()
        self.run_dir = Path(cfg.run_dir)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.datasets = [load_dataset(d, cfg.policy) for d in cfg.data.datasets]
        check_compatible(self.datasets)
        self.sampler = MixtureSampler(self.datasets, cfg.policy.chunk, cfg.batch_size, cfg.seed)
        torch.manual_seed(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.model = FlowMatchingPolicy(cfg.policy, self.datasets[0].proprio.shape[1], mixture_stats(self.datasets))
        self.ema = copy.deepcopy(self.model).eval()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.optim.lr,
                                           weight_decay=cfg.optim.weight_decay)
        self.step = 0
        self.resumed_from = 0
        last = self.run_dir / "last.pt"
        if last.exists():
            self._resume(last)

    def _resume(self, path: Path) -> None:
        payload = load_checkpoint(path)
        check_observation_set(payload, self.cfg.policy, str(path))
        refuse_other_run(path, payload["cfg"], cfg_dict(self.cfg), RUN_LENGTH_FIELDS)
        load_weights(self.model, payload, "model", path)
        load_weights(self.ema, payload, "ema", path)
        try:
            self.optimizer.load_state_dict(payload["optimizer"])
            torch.set_rng_state(payload["rng"]["torch"])
            self.generator.set_state(payload["rng"]["generator"])
            self.sampler.set_state(payload["rng"]["sampler"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint {str(path)!r}: its optimizer or random state cannot be restored "
                                  f"({type(e).__name__}: {e}); expected a last.pt written by this trainer") from None
        self.step = self.resumed_from = int(payload["step"])

    def _payload(self) -> dict:
        return {"cfg": cfg_dict(self.cfg), "proprio_dim": self.datasets[0].proprio.shape[1], "step": self.step,
                "model": self.model.state_dict(), "ema": self.ema.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "generator": self.generator.get_state(),
                        "sampler": self.sampler.state()},
                "datasets": [{"path": d.path, "domain": d.domain, "weight": d.weight, "demos": d.num_demos,
                              "steps": len(d)} for d in self.datasets]}

    def loss(self, batch: dict) -> dict[str, torch.Tensor]:
        images, proprio = to_tensors(batch)
        if self.cfg.data.random_shift:
            images = {c: random_shift(v, self.cfg.data.random_shift, self.generator) for c, v in images.items()}
        domain = torch.from_numpy(batch["domain"])
        tokens = self.model.encode(images, proprio, domain)
        terms = {"flow": self.model.flow_loss(tokens, torch.from_numpy(batch["actions"]), self.generator)}
        weight = self.cfg.cotrain.alignment_weight
        if weight > 0:
            latent = self.model.latent(tokens)
            real, sim = domain == DOMAINS.index("real"), domain == DOMAINS.index("sim")
            # Both domains must be in the batch (two samples each) for a discrepancy to mean anything.
            align = mmd(latent[real], latent[sim]) if real.sum() > 1 and sim.sum() > 1 else latent.sum() * 0.0
            terms["align"] = align
        terms["loss"] = terms["flow"] + weight * terms.get("align", 0.0)
        return terms

    def train_step(self, batch: dict) -> dict[str, float]:
        cfg = self.cfg
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.optim.lr * lr_factor(self.step, cfg.optim.warmup_steps, cfg.steps)
        self.model.train()
        terms = self.loss(batch)
        check_loss(terms["loss"], self.step + 1, str(self.run_dir))
        self.optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.grad_clip)
        self.optimizer.step()
        # EMA warms up (short runs would otherwise keep mostly the random initialisation).
        update_ema(self.ema, self.model, min(cfg.optim.ema_decay, (1 + self.step) / (10 + self.step)))
        self.step += 1
        return {k: float(v.detach()) for k, v in terms.items()}

    def checkpoint(self, name: str) -> Path:
        for what, module in (("model", self.model), ("ema", self.ema)):
            if not all(bool(torch.isfinite(p).all()) for p in module.parameters()):
                raise TrainingError(f"{self.run_dir}: the {what} weights are not finite after step {self.step}; "
                                    f"{name} not written (lower optim.lr or raise optim.warmup_steps)")
        return save_checkpoint(self.run_dir / name, self._payload())

    def run(self, progress: bool = True) -> TrainResult:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.run_dir / "config.yaml", yaml.safe_dump(cfg_dict(cfg), sort_keys=False))
        final = self.run_dir / "policy.pt"
        if self.step >= cfg.steps and final.exists():
            return TrainResult(final, self.step, float("nan"), 0.0, self.resumed_from)
        log = (self.run_dir / "log.jsonl").open("a")
        bar = tqdm(total=cfg.steps, initial=self.step, desc="train", unit="step", disable=not progress)
        window_start, window_samples, last = time.perf_counter(), 0, {}
        speed = 0.0
        try:
            while self.step < cfg.steps:
                last = self.train_step(self.sampler.sample())
                window_samples += cfg.batch_size
                bar.update(1)
                if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                    speed = window_samples / (time.perf_counter() - window_start)
                    bar.set_postfix(loss=f"{last['loss']:.4f}", samples_per_s=f"{speed:.0f}")
                    log.write(json.dumps({"step": self.step, **last, "samples_per_s": speed,
                                          "lr": self.optimizer.param_groups[0]["lr"]}) + "\n")
                    log.flush()
                    window_start, window_samples = time.perf_counter(), 0
                if self.step % cfg.checkpoint_every == 0:
                    self.checkpoint("last.pt")
        finally:
            bar.close()
            log.close()
        self.checkpoint("last.pt")
        self.checkpoint("policy.pt")
        return TrainResult(final, self.step, last.get("loss", float("nan")), speed, self.resumed_from)


def train(cfg: TrainCfg, progress: bool = True) -> TrainResult:
    return Trainer(cfg).run(progress)

