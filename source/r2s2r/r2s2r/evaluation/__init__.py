"""Policy evaluation: the trial protocol run on a cell (real or sim), its statistics and its reports.

`stats` (intervals, effects, ranking agreement) is imported here; `protocol` and `report` are imported where used
(they pull in the task and plotting).
"""

from r2s2r.evaluation.stats import (
    correlation_undefined,
    difference_interval,
    main_effect,
    mmrv,
    pearson,
    spearman,
    wilson_interval,
)

__all__ = ["correlation_undefined", "difference_interval", "main_effect", "mmrv", "pearson", "spearman",
           "wilson_interval"]
