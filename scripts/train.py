"""Co-train a policy (Hydra app; configs/train/config.yaml): the flow-matching transformer, or the object-centric
policy with `policy.kind=object_centric`.

Examples:
  python scripts/train.py data=real_only run_dir=outputs/train/real_only
  python scripts/train.py run_dir=outputs/train/wg_bg steps=5000
  isaaclab.sh -p scripts/train.py data=real_only run_dir=outputs/train/real_only
  python scripts/train.py --help     (every field, the data presets and more examples)

Resuming: rerun the same command; training continues from run_dir/last.pt. A finished run (run_dir/policy.pt) is
left as it is unless `steps` is raised.

Exit status: 0 trained (or already finished); 2 a config, dataset, checkpoint or output path refused (before any
training; the message names the field or file, the value and what was expected); 1 training stopped because the
loss became non-finite (no policy.pt is written; last.pt, if any, holds the last checkpoint of finite steps).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from r2s2r.core import ConfigError, configs_dir
from r2s2r.data.hdf5 import DatasetError


@hydra.main(config_path=str(configs_dir() / "train"), config_name="config", version_base="1.3")
def main(composed: DictConfig) -> None:
    from r2s2r.files import check_output_dir
    from r2s2r.policy.config import train_cfg_from_mapping
    from r2s2r.policy.train import TrainingError, train
    from r2s2r.policy.train_object_centric import ObjectCentricTrainer

    try:
        try:
            values = OmegaConf.to_container(composed, resolve=True)
        except OmegaConfBaseException as e:
            raise ConfigError(f"train config: {e}") from None
        cfg = train_cfg_from_mapping(values)
        check_output_dir(cfg.run_dir, "run_dir")
        result = ObjectCentricTrainer(cfg).run() if cfg.policy.kind == "object_centric" else train(cfg)
    except (ConfigError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    how = f"resumed at step {result.resumed_from}" if result.resumed_from else "from scratch"
    print(f"wrote {result.checkpoint} ({result.steps} steps, {how}; final loss {result.final_loss:.4f}, "
          f"{result.samples_per_s:.0f} samples/s)")


def check_command_line(arguments: list[str]) -> None:
    """Exit 2 with an `error:` line for an override or config file the composition refuses, before Hydra composes
    the same config (Hydra reports such errors with exit status 1, some as a traceback, some without naming the
    override). Hydra's own options (--help, --cfg, -m, ...) are left to it."""
    from r2s2r.policy.config import compose_train_cfg

    if any(arg.startswith("-") for arg in arguments):
        return
    try:
        compose_train_cfg(arguments)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    check_command_line(sys.argv[1:])
    main()
