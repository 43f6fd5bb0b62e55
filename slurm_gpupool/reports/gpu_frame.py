"""Jobs → what GPU each held, in Slurm's count and in GPU-equivalents.

Each job's ``AllocTRES`` (``ReqTRES`` for jobs that never started) becomes one
*grant* per GRES type: a ``1g.5gb`` of an A100 is 1 GPU to Slurm and 1/7 of a
GPU-equivalent here; two shards of a GPU time-sliced into four are 0 GPUs to
Slurm and 0.5 here.  Distinct TRES strings are few even in a year of history,
so each (TRES, node, layout) is resolved once and mapped onto the jobs.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.gres.tres import GpuTres, TresError, gpu_tres
from slurm_gpupool.pool.capacity import TypeInfo, node_offers, node_shares, type_table
from slurm_gpupool.reports.layout_history import (
    LayoutHistory,
    assumed_layout,
    epoch_s,
    layouts_at,
    lookup,
    schedule_segments,
)

_PROFILE = re.compile(r"(?:^|_)(\d)g\.\d+gb")
# states whose missing End means "still going" (any other state without an End is bad data)
RUNNING_STATES = ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT")
UNTYPED = "gpu"


@dataclass(frozen=True)
class Grant:
    gres: str  # label: gpu:<type>, shard:<type>, or gpu (type unknown)
    type: str  # the capacity type: the gpu GRES Type the grant uses up
    kind: str  # mig | whole | shared | shard | untyped | unknown
    model: str | None
    gpus: int  # Slurm's count (a MIG slice is 1, a shard 0)
    eq: float  # GPU-equivalents
    memory_mib: float | None  # memory of one device; of a shard grant, its share of the GPU's (None: unknown)
    count: int  # the TRES count a GrpTRES limit counts: devices (gres/gpu:<type>), or shards (gres/shard)


_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_FIRST_RANGE = re.compile(r"\s*(\d+)")


def first_node(nodelist: str) -> str:
    """``a100n[1-2],v100n1`` → ``a100n1``: the first name of a Slurm hostlist, read from its
    text without expanding it (``gpu[1-99999999]`` in an accounting file would otherwise be
    a hundred million names, gigabytes).  Each bracket gives its first number with its zero
    padding, as Slurm lists ranges in order; text that is no hostlist is its first item."""
    if "[" not in nodelist and "," not in nodelist:
        return nodelist
    depth, first = 0, nodelist
    for i, c in enumerate(nodelist):  # the first element: up to a comma outside brackets
        depth += {"[": 1, "]": -1}.get(c, 0)
        if c == "," and depth == 0:
            first = nodelist[:i]
            break

    def start(m: re.Match[str]) -> str:
        n = _FIRST_RANGE.match(m.group(1))
        return n.group(1) if n else m.group(0)

    return _BRACKET.sub(start, first)


class Resolver:
    """TRES → grants, with the pool's type names and share counts."""

    def __init__(self, cfg: PoolConfig | None) -> None:
        self.cfg = cfg
        self.types = type_table(cfg)
        self.unknown: dict[str, str] = {}  # GPU type not in the catalog → how it was counted
        self._parsed: dict[str, GpuTres | None] = {}  # a TRES string recurs on many nodes

    def info(self, typ: str) -> TypeInfo:
        if typ in self.types:
            return self.types[typ]
        m = _PROFILE.search(typ)
        if m:  # a profile-like name we do not know: its compute slices over seven
            self.unknown[typ] = f"counted as {m.group(1)}/7 GPU"
            return TypeInfo("mig", None, int(m.group(1)) / 7, None)
        self.unknown[typ] = "counted as a whole GPU"
        return TypeInfo("unknown", None, 1.0, None)

    def grants(self, tres: str, node: str, layout: str | None) -> tuple[Grant, ...] | None:
        """The job's grants (None: the TRES string does not parse)."""
        if tres not in self._parsed:
            try:
                self._parsed[tres] = gpu_tres(tres)
            except TresError:
                self._parsed[tres] = None
        g = self._parsed[tres]
        if g is None:
            return None
        out = []
        for typ, n in g.typed:
            i = self.info(typ)
            kind = i.kind
            out.append(Grant(f"gpu:{typ}", typ, kind, i.model, n, n * i.fraction, i.memory_mib, n))
        if g.untyped_rest:
            n = g.untyped_rest
            out.append(Grant(UNTYPED, UNTYPED, "untyped", None, n, float(n), None, n))
        if g.shards:
            stype = g.shard_types[0][0] if len(g.shard_types) == 1 else self._shared_type(node, layout)
            shares, each = self._shares(node, layout, stype)
            model = self.types[stype].model if stype in self.types else None
            mem = self.types[stype].memory_mib if stype in self.types else None
            eq = g.shards * each / shares if shares else float("nan")
            mem_held = mem * g.shards / shares if mem and shares else None  # its share of the GPU's memory
            out.append(Grant(f"shard:{stype}", stype, "shard", model, 0, eq, mem_held, g.shards))
        return tuple(out)

    def _shares(self, node: str, layout: str | None, stype: str) -> tuple[int | None, float]:
        """(shards per device, GPU-equivalents of one device) of a shard type on ``node``: a
        time-sliced MIG device's shards share its compute slices, not a whole GPU."""
        if self.cfg is not None and layout is not None and node in self.cfg.all_nodes():
            for o in node_offers(self.cfg, layout, node):
                if o.type == stype and o.shares:
                    return o.shares, o.eq_each
        return node_shares(self.cfg, layout, node), 1.0

    def _shared_type(self, node: str, layout: str | None) -> str:
        if self.cfg is None or layout is None or node not in self.cfg.all_nodes():
            return "shared"

        shared = [o.type for o in node_offers(self.cfg, layout, node) if o.shares]
        return shared[0] if shared else "shared"


def enrich(
    jobs: pd.DataFrame,
    cfg: PoolConfig | None,
    history: LayoutHistory,
    since: datetime,
    until: datetime,
    now: datetime,
) -> tuple[pd.DataFrame, pd.DataFrame, Counter[str]]:
    """(jobs with timing and layout columns, grants, notes).

    Job columns added: ``node`` (first node), ``layout`` (the node's at start, or
    at submit if it never started), ``period`` (the schedule's due layout then),
    ``wait_s``, ``run_start``/``run_end`` (clipped to [since, until); the end of
    a running job is ``now``) and ``hours`` inside the window.
    """
    notes: Counter[str] = Counter()
    schedule = cfg.schedule if cfg is not None else None
    df = jobs.copy()
    node_cat = df["nodes"].astype("category")
    firsts = {n: first_node(str(n)) for n in node_cat.cat.categories}
    df["node"] = node_cat.map(firsts).astype("category") if len(firsts) else node_cat
    started = df["start"].notna()
    at = df["start"].where(started, df["submit"])
    pool = cfg.all_nodes() if cfg is not None else ()
    layouts = layouts_at(history, schedule, df["node"], at, since, until, assumed_layout(cfg), pool)
    df["layout"] = pd.Categorical(layouts)
    starts, names = schedule_segments(schedule, since, until)
    df["period"] = pd.Categorical(lookup(starts, names, epoch_s(at)))
    qos = df["qos"].astype(str) if "qos" in df.columns else pd.Series("", index=df.index)
    df["tier"] = pd.Categorical(qos.where(qos.str.startswith("gpupool_"), "-").str.removeprefix("gpupool_"))
    df["wait_s"] = (df["start"] - df["submit"]).dt.total_seconds()
    no_end = started & df["end"].isna()
    running = no_end & df["state"].astype(str).isin(RUNNING_STATES)
    notes["running jobs (counted up to now)"] += int(running.sum())
    notes["finished jobs without an end time (not counted)"] += int((no_end & ~running).sum())
    notes["jobs that never started"] += int((~started).sum())
    lo, hi, now_ts = pd.Timestamp(since), pd.Timestamp(until), pd.Timestamp(now)
    end = df["end"].where(~running, min(now_ts, hi))
    df["run_start"] = df["start"].clip(lower=lo)
    df["run_end"] = end.clip(upper=hi)
    hours = (df["run_end"] - df["run_start"]).dt.total_seconds() / 3600
    df["hours"] = hours.where(started & (hours > 0) & ~(no_end & ~running), 0.0)
    # ran in the window: held its GPUs there, however briefly (sacct's times are whole
    # seconds: a job under a second has 0 hours, and is still a job that ran)
    inside = (hours > 0) | ((df["start"] >= lo) & (df["start"] < hi) & (hours == 0))
    df["ran"] = started & ~(no_end & ~running) & inside

    # -- grants: resolve each distinct (TRES, node, layout) once ---------------------
    tres = (
        df["alloc_tres"].astype(str).where(started & (df["alloc_tres"].astype(str) != ""), df["req_tres"].astype(str))
    )
    key = pd.DataFrame({"tres": tres, "node": df["node"].astype(str), "layout": df["layout"].astype(object)})
    combos = key.drop_duplicates()
    res = Resolver(cfg)
    rows: list[tuple[int, Any]] = []
    for ci, (t, node, layout) in enumerate(combos.itertuples(index=False)):
        gs = res.grants(t, node, layout)
        if gs is None:
            rows.append((ci, None))
            continue
        rows.extend((ci, g) for g in gs)
    combo_id = pd.Series(np.arange(len(combos)), index=pd.MultiIndex.from_frame(combos))
    df["combo"] = combo_id.reindex(pd.MultiIndex.from_frame(key)).to_numpy()
    bad_combos = {ci for ci, g in rows if g is None}
    if bad_combos:
        bad = df["combo"].isin(bad_combos)
        notes["unreadable TRES (job ignored)"] += int(bad.sum())
    table = pd.DataFrame(
        [(ci, g.gres, g.type, g.kind, g.model, g.gpus, g.eq, g.memory_mib, g.count) for ci, g in rows if g is not None],
        columns=["combo", "gres", "type", "kind", "model", "gpus", "eq", "memory_mib", "count"],
    )
    grants = df[["combo"]].reset_index(names="job").merge(table, on="combo", how="inner")
    for col in ("gres", "type", "kind", "model"):
        grants[col] = grants[col].astype("category")
    nan_eq = grants["eq"].isna() & started.to_numpy()[grants["job"].to_numpy()]
    if nan_eq.any():  # (a pending shard job holds nothing yet, so it is not one of these)
        notes["shard jobs on nodes whose share count is unknown (no GPU-equivalents)"] += int(
            grants.loc[nan_eq, "job"].nunique()
        )
    for typ, how in res.unknown.items():
        notes[f"GPU type {typ} not in the catalog: {how}"] += int(grants.loc[grants["type"] == typ, "job"].nunique())
    untyped = grants["kind"] == "untyped"
    if untyped.any():
        notes["jobs whose GPU type sacct does not record (counted as whole GPUs)"] += int(
            grants.loc[untyped, "job"].nunique()
        )
    unknown = [t for t in df["alloc_tres"].cat.categories if "gres/" in t] if hasattr(df["alloc_tres"], "cat") else []
    for t in unknown:
        try:
            extra = gpu_tres(t).unknown
        except TresError:
            continue
        for name in extra:
            notes[f"unknown TRES {name} (ignored)"] += int((df["alloc_tres"] == t).sum())
    per_combo = table.groupby("combo").agg(gpus=("gpus", "sum"), eq=("eq", "sum"))
    labels: dict[int, set[str]] = {}  # a combo's GRES labels (a Python loop: a groupby lambda is slower)
    for ci, g in rows:
        if g is not None:
            labels.setdefault(ci, set()).add(g.gres)
    per_combo["gres"] = pd.Series({ci: "+".join(sorted(s)) for ci, s in labels.items()}, dtype=object)
    per_combo = per_combo.reindex(range(len(combos)))
    idx = df["combo"].to_numpy()
    df["gpus"] = per_combo["gpus"].fillna(0).astype("int32").to_numpy()[idx]
    df["gpu_eq"] = per_combo["eq"].fillna(0.0).to_numpy()[idx]
    df["gres"] = pd.Categorical(per_combo["gres"].fillna("").to_numpy()[idx])
    df = df.drop(columns=["combo"])
    grants = grants.drop(columns=["combo"])
    return df, grants, notes
