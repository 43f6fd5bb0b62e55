"""Pool capacity over a period, per GRES type, following the layout each node had.

Nodes without a recorded switch follow the schedule together, so their
capacity is added up once per layout, not once per node.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

import numpy as np
import pandas as pd

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.pool.capacity import Offer, node_offers
from slurm_gpupool.reports.layout_history import LayoutHistory, assumed_layout, schedule_segments


def _segments(starts: np.ndarray, names: list[str], lo: float, hi: float) -> list[tuple[float, float, str]]:
    ends = [*list(starts[1:]), hi]
    out = []
    for a, b, n in zip(starts, ends, names):
        a, b = max(a, lo), min(b, hi)
        if b > a:
            out.append((a, b, n))
    return out


def capacity_intervals(
    cfg: PoolConfig | None, history: LayoutHistory, since: datetime, until: datetime
) -> pd.DataFrame:
    """Rows (type, kind, model, start, end, eq, memory_mib, layout): what was offered when,
    and under which layout (the one in force on the nodes offering it)."""
    cols = ["type", "kind", "model", "start", "end", "eq", "memory_mib", "layout"]
    if cfg is None:
        return pd.DataFrame(columns=cols)
    lo, hi = since.timestamp(), until.timestamp()
    sched = schedule_segments(cfg.schedule, since, until)
    sched_due = sched  # the schedule's own, for the journal's nodes before their first change
    assumed = assumed_layout(cfg)
    if assumed is not None:  # no schedule: nodes not in the journal are taken to be in one layout
        sched = (np.array([lo]), [assumed])
    by_layout: dict[str, dict[str, Offer]] = defaultdict(dict)  # nodes on the schedule, summed
    rows: list[tuple] = []
    for node in cfg.all_nodes():
        if node in history.changes:
            starts, names = history.node_segments(node, cfg.schedule, since, until, sched_due)
            for a, b, layout in _segments(starts, names, lo, hi):
                rows.extend(
                    (o.type, o.kind, o.model, a, b, o.eq, o.memory_mib, layout) for o in node_offers(cfg, layout, node)
                )
            continue
        for layout in set(sched[1]):
            for o in node_offers(cfg, layout, node):
                agg = by_layout[layout]
                prev = agg.get(o.type)
                agg[o.type] = o if prev is None else Offer(**{**prev.__dict__, "count": prev.count + o.count})
    for a, b, layout in _segments(sched[0], sched[1], lo, hi):
        rows.extend((o.type, o.kind, o.model, a, b, o.eq, o.memory_mib, layout) for o in by_layout[layout].values())
    return pd.DataFrame(rows, columns=cols)
