"""Which layout each node had when: the repartition journal, else the schedule.

``journal.log`` (``paths.controller_dir``) has a line per step: a run's start
names its target and every node's previous layout, and a node's ``done`` step
is the moment Slurm offered the new GRES (``rolled_back`` returns it to the
previous one).  Before a node's first recorded switch, or with no journal at
all, the schedule's due layout stands in.  Lookups are vectorized
(``searchsorted``), so a million jobs cost milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.policy.schedule import Schedule
from slurm_gpupool.errors import DataError

ALL = "all"  # the period label when there is no schedule


def schedule_segments(schedule: Schedule | None, since: datetime, until: datetime) -> tuple[np.ndarray, list[str]]:
    """Start times (epoch s, ascending, first <= since) and the layout due from each."""
    if schedule is None:
        return np.array([since.timestamp()]), [ALL]
    starts, names = [since.timestamp()], [schedule.due(since)]
    t = since
    while True:
        nxt = schedule.next_change(t)
        if nxt is None or nxt[0] >= until:
            break
        t, layout = nxt
        starts.append(t.timestamp())
        names.append(layout)
    return np.array(starts, dtype=float), names


def epoch_s(t: pd.Series) -> np.ndarray:
    """Timestamps → epoch seconds (float), whatever their resolution (ns from sacct, µs
    from ``to_datetime(unit="s")``); NaT → NaN."""
    ns = t.astype("datetime64[ns, UTC]")
    return np.where(ns.isna(), np.nan, ns.astype("int64").to_numpy() / 1e9)


def lookup(starts: np.ndarray, names: list[str], at: np.ndarray) -> np.ndarray:
    """The name in force at each time in ``at`` (epoch s); before the first start: the first."""
    idx = np.searchsorted(starts, at, side="right") - 1
    return np.asarray(names, dtype=object)[np.clip(idx, 0, len(names) - 1)]


@dataclass
class LayoutHistory:
    """Per node: (epoch s, layout) changes from the journal, ascending."""

    changes: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    source: str = "schedule"

    def node_segments(
        self,
        node: str,
        schedule: Schedule | None,
        since: datetime,
        until: datetime,
        sched: tuple[np.ndarray, list[str]] | None = None,
    ):
        """(starts, names) for one node: journal changes on top of the schedule before them
        (``sched``: the schedule's segments, when the caller has them for many nodes)."""
        starts, names = sched if sched is not None else schedule_segments(schedule, since, until)
        ch = self.changes.get(node)
        if not ch:
            return starts, names
        first = ch[0][0]
        keep = starts < first
        s2 = list(starts[keep]) + [t for t, _ in ch]
        n2 = [n for n, k in zip(names, keep) if k] + [name for _, name in ch]
        return np.array(s2, dtype=float), n2


def _epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()


def read_journal_log(path: Path) -> LayoutHistory:
    """Layout changes per node from ``journal.log`` (missing file: empty history)."""
    hist = LayoutHistory()
    try:
        text = path.read_bytes().decode("utf-8", "replace")  # a damaged line is skipped, as any not JSON
    except FileNotFoundError:
        return hist
    except OSError as e:  # a directory, unreadable: the user's --journal, said so (not exit 70)
        raise DataError(str(path), f"cannot read the repartitioner's journal log: {e.strerror or e}") from None
    target: str | None = None
    previous: dict[str, str | None] = {}
    for line in text.splitlines():
        try:
            ev = json.loads(line)
            at = _epoch(ev["at"])
        except (ValueError, KeyError, TypeError):
            continue
        if ev.get("run") == "start":
            target, previous = ev.get("target"), ev.get("previous") or {}
            for node, layout in previous.items():
                if layout and node not in hist.changes:
                    hist.changes[node] = [(at, layout)]  # what it had when the journal first saw it
        elif ev.get("run") == "resume":
            target = ev.get("target")
        elif "node" in ev and target is not None:
            step = ev.get("step")
            if step == "done":
                hist.changes.setdefault(ev["node"], []).append((at, target))
            elif step == "rolled_back" and previous.get(ev["node"]):
                hist.changes.setdefault(ev["node"], []).append((at, str(previous[ev["node"]])))
    for ch in hist.changes.values():
        ch.sort()
    if hist.changes:
        hist.source = f"journal {path}"
    return hist


def to_utc(t: datetime) -> datetime:
    return t.astimezone(UTC) if t.tzinfo else t.astimezone().astimezone(UTC)


def assumed_layout(cfg: PoolConfig | None) -> str | None:
    """With no schedule, the layout a node without journal entries is taken to be in."""
    if cfg is None or cfg.schedule is not None or not cfg.layouts:
        return None
    return cfg.layout_names()[0]


def pool_segments(
    history: LayoutHistory,
    schedule: Schedule | None,
    since: datetime,
    until: datetime,
    nodes: Iterable[str] = (),
    assumed: str | None = None,
) -> tuple[np.ndarray, list[str]]:
    """(starts, names): the layout most of the pool's nodes were in, from each start on
    (the journal's nodes by their own changes, the others by the schedule or ``assumed``;
    a tie goes to the first name).  What a job without a node (pending) and a chart's
    time bin are labelled with: the layout in force, not the one the schedule said was due."""
    sched = schedule_segments(schedule, since, until)
    sched_starts, sched_names = sched
    if schedule is None:
        sched_starts, sched_names = np.array([since.timestamp()]), [assumed or ALL]
    pool = set(nodes) | set(history.changes)
    if not history.changes:
        return sched_starts, sched_names
    per_node = [history.node_segments(n, schedule, since, until, sched) for n in history.changes]
    others = len(pool - set(history.changes))  # on the schedule together
    cuts = np.unique(np.concatenate([sched_starts, *(st for st, _ in per_node)]))
    # every node's layout at every cut at once (a year of switches on a hundred nodes is
    # 10^7 lookups: vectorized per node, counted per layout)
    labels = sorted({str(x) for x in sched_names} | {str(x) for _, nm in per_node for x in nm})
    code = {label: i for i, label in enumerate(labels)}

    def codes(starts: np.ndarray, names: list[str]) -> np.ndarray:
        idx = np.searchsorted(starts, cuts, side="right") - 1
        return np.array([code[str(x)] for x in names], dtype=np.int64)[np.clip(idx, 0, len(names) - 1)]

    counts = np.zeros((len(labels), len(cuts)), dtype=np.int64)
    columns = np.arange(len(cuts))
    for st, nm in per_node:
        counts[codes(st, nm), columns] += 1  # one layout per node and cut: no index repeats
    counts[codes(sched_starts, sched_names), columns] += others
    names = [labels[i] for i in counts.argmax(axis=0)]  # a tie: the first name
    keep = [0] + [i for i in range(1, len(names)) if names[i] != names[i - 1]]
    return cuts[keep], [names[i] for i in keep]


def layouts_at(
    history: LayoutHistory,
    schedule: Schedule | None,
    nodes: pd.Series,
    at: pd.Series,
    since: datetime,
    until: datetime,
    assumed: str | None = None,
    pool: Iterable[str] | None = None,
) -> np.ndarray:
    """The layout each row's node had at each row's time (object array; None if unknown).
    ``pool``: the config's nodes; a row whose node is none of them (a pending job's "None
    assigned") gets the layout most of the pool was in then (:func:`pool_segments`)."""
    t = epoch_s(at)
    out = np.empty(len(t), dtype=object)
    sched_starts, sched_names = schedule_segments(schedule, since, until)
    out[:] = lookup(sched_starts, sched_names, t) if schedule is not None else assumed
    node_arr = nodes.astype(str).to_numpy()
    if pool is not None and history.changes:
        known = set(pool) | set(history.changes)
        elsewhere = ~np.isin(node_arr, list(known))
        if elsewhere.any():
            starts, names = pool_segments(history, schedule, since, until, known, assumed)
            out[elsewhere] = lookup(starts, names, t[elsewhere])
    for node in history.changes:
        mask = node_arr == node
        if mask.any():
            starts, names = history.node_segments(node, schedule, since, until, (sched_starts, sched_names))
            out[mask] = lookup(starts, names, t[mask])
    return out
