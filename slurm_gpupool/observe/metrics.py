"""``gpupool metrics``: the pool in Prometheus' text exposition format (docs/metrics.md).

Three sources, each optional, so one command serves the controller and the nodes:

* **Slurm** (``sinfo --json``, ``squeue --json``, reservations): per GRES type, MIG
  profile and shard type, in devices and in GPU-equivalents, what the pool's nodes
  offer in their active layout, what jobs hold and what pending jobs ask for; per node
  its active and desired layout and switch state (as ``gpupool status``).
* **The repartitioner's journal** (``paths.controller_dir``): runs, per-node switch
  outcomes, out-of-service seconds and their distribution, from ``journal.log``.
* **The hooks' files** (each node's ``paths.state_dir``, where this host sees it):
  hook failures, health drains, the last health check; and from the run directory the
  usage sampler's latest measures per GPU slice (SM, tensor, DRAM activity, memory).

Pool metrics carry no job or user label: their series stay few (types × layouts); slice
series are one per slice in use (a job label only with ``--per-job``).
Everything is computed per scrape; nothing is kept between scrapes but a parsed
``journal.log`` (re-read when it changes).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_gpupool import __version__
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.errors import GpupoolError
from slurm_gpupool.observe.status import pool_status
from slurm_gpupool.pool.capacity import node_offers, type_table
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.repartition.hold import read_hold
from slurm_gpupool.repartition.journal import Journal
from slurm_gpupool.slurm.cluster import SlurmCluster
from slurm_gpupool.slurm.protocol import Slurm
from slurm_gpupool.slurm.types import requested_gres
from slurm_gpupool.util.atomic import write_text_atomic

SWITCH_STATES = ("done", "scheduled", "held", "draining", "applying", "verifying", "failed", "skipped", "rolled_back")
NODE_OUTCOMES = (jr.DONE, jr.FAILED, jr.SKIPPED, jr.ROLLED_BACK)
DURATION_BUCKETS_S = (30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
# pending jobs that could not start even if the GPUs were free are not demand
NOT_DEMAND = frozenset({"JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied", "BeginTime"})
UNTYPED = "any"  # the type label of a request without a type (--gres=gpu:2, --gres=shard:2)
UNKNOWN_LAYOUT = "unknown"  # a node without (or with several) layout_<name> features


# -- exposition ----------------------------------------------------------------------------------


@dataclass
class Family:
    """One metric family: name, type, help and its samples (summed per label set)."""

    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def add(self, value: float, suffix: str = "", **labels: str) -> None:
        key = (suffix, tuple(labels.items()))
        self.samples[key] = self.samples.get(key, 0.0) + float(value)

    def set(self, value: float, suffix: str = "", **labels: str) -> None:
        self.samples[(suffix, tuple(labels.items()))] = float(value)


class Exposition:
    """Families in order of declaration; ``text()`` is format 0.0.4 (what node_exporter's
    textfile collector and Prometheus read)."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def family(self, name: str, kind: str, help_text: str) -> Family:
        if name not in self.families:
            self.families[name] = Family(name, kind, help_text)
        return self.families[name]

    def histogram(
        self, name: str, help_text: str, values: Iterable[float], buckets: tuple[float, ...], **labels: str
    ) -> None:
        fam = self.family(name, "histogram", help_text)
        seen = sorted(values)
        for le in (*buckets, math.inf):
            fam.set(sum(1 for v in seen if v <= le), "_bucket", **labels, le=_number(le))
        fam.set(sum(seen), "_sum", **labels)
        fam.set(len(seen), "_count", **labels)

    def names(self) -> set[str]:
        return set(self.families)

    def text(self) -> str:
        out: list[str] = []
        for fam in self.families.values():
            out.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
            out.append(f"# TYPE {fam.name} {fam.kind}")
            for (suffix, labels), value in fam.samples.items():
                body = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
                out.append(
                    f"{fam.name}{suffix}{{{body}}} {_number(value)}" if body else f"{fam.name}{suffix} {_number(value)}"
                )
        return "\n".join(out) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    v = round(float(v), 9)  # 7.999999999999999 (8 × 1/7 summed) reads 8
    return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


# -- what the pool offers, holds and is asked for (Slurm) ----------------------------------------


@dataclass(frozen=True)
class TypeMeta:
    kind: str  # mig | whole | shared | unknown
    model: str
    profile: str
    eq_each: float  # GPU-equivalents of one gpu record of this type


class TypeResolver:
    """What a GRES type on a node in a layout is: from the node's planned offers in that
    layout, else the pool's (and catalog's) type table, else unknown (one GPU each)."""

    def __init__(self, cfg: PoolConfig) -> None:
        self.cfg = cfg
        self._table: dict[str, Any] | None = None

    def meta(self, node: str, layout: str | None, typ: str) -> TypeMeta:

        if layout and self.cfg.covers(layout, node):
            for o in node_offers(self.cfg, layout, node):
                if o.type == typ:
                    return TypeMeta(o.kind, o.model, o.profile, o.eq_each)
        if self._table is None:
            self._table = type_table(self.cfg)
        t = self._table.get(typ)
        if t is not None:
            return TypeMeta(t.kind, t.model or "", "", t.fraction)
        return TypeMeta("unknown", "", "", 1.0)


def collect_slurm(cfg: PoolConfig, cluster: Slurm, now: datetime, exp: Exposition) -> None:
    """Pool capacity, allocation and pending demand; per-node layout and switch state."""

    infos = cluster.nodes()
    jobs = cluster.jobs()
    reservations = cluster.reservations()
    pool = set(cfg.all_nodes())
    resolve = TypeResolver(cfg)
    labels_of = ("gres", "type", "kind", "model", "profile", "layout")
    cap_dev = exp.family(
        "gpupool_capacity_devices",
        "gauge",
        "GRES devices the pool's nodes offer (sinfo Gres): gpu records (whole GPUs, MIG instances, "
        "time-shared GPUs) and shards, by type and the layout each node is in",
    )
    alloc_dev = exp.family("gpupool_allocated_devices", "gauge", "GRES devices held by jobs (sinfo GresUsed)")
    cap_eq = exp.family(
        "gpupool_capacity_gpu_equivalents",
        "gauge",
        "GPU-equivalents the pool's nodes offer: a whole or time-shared GPU is 1, a MIG instance its compute "
        "slices over the GPU's (1g of 7 = 1/7)",
    )
    alloc_eq = exp.family(
        "gpupool_allocated_gpu_equivalents",
        "gauge",
        "GPU-equivalents held by jobs; a shard counts its GPU's share (1 of 4 shards = 1/4)",
    )
    unavail_eq = exp.family(
        "gpupool_unavailable_gpu_equivalents",
        "gauge",
        "GPU-equivalents on nodes that cannot start jobs (drained, down or not responding)",
    )
    node_cap = exp.family("gpupool_node_capacity_gpu_equivalents", "gauge", "GPU-equivalents a node offers")
    node_alloc = exp.family("gpupool_node_allocated_gpu_equivalents", "gauge", "GPU-equivalents held on a node")
    for name in sorted(pool & set(infos)):
        info = infos[name]
        layout = info.layout or UNKNOWN_LAYOUT
        total, used = info.gres_total(), info.gres_allocated()
        gpus_of = {t: n for (g, t), n in total.items() if g == "gpu"}
        node_eq = node_used = 0.0
        out_of_service = not info.responding or info.drained
        for (gres, typ), count in sorted(total.items()):
            if gres not in ("gpu", "shard") or count <= 0:
                continue
            m = resolve.meta(name, info.layout, typ)
            labels = dict(zip(labels_of, (gres, typ or UNTYPED, m.kind, m.model, m.profile, layout)))
            held = used.get((gres, typ), 0)
            cap_dev.add(count, **labels)
            alloc_dev.add(held, **labels)
            eq_labels = {k: v for k, v in labels.items() if k != "gres"}
            if gres == "gpu":
                cap, got = count * m.eq_each, held * m.eq_each
                cap_eq.add(cap, **eq_labels)
                unavail_eq.add(cap if out_of_service else 0.0, **eq_labels)
            else:  # shards: their GPU's share; the GPU itself is counted as a gpu record
                cap, shares = 0.0, count / gpus_of[typ] if gpus_of.get(typ) else 0.0
                got = held / shares * m.eq_each if shares else 0.0
            alloc_eq.add(got, **eq_labels)
            node_eq += cap
            node_used += got
        node_cap.set(node_eq, node=name, layout=layout)
        node_alloc.set(min(node_used, node_eq), node=name, layout=layout)
    pend_dev = exp.family(
        "gpupool_pending_devices",
        "gauge",
        "GRES devices pending jobs ask for (per node times nodes), by type ('any': untyped); held jobs "
        "and jobs waiting on a dependency or begin time are not counted",
    )
    pend_jobs = exp.family("gpupool_pending_jobs", "gauge", "Pending jobs asking for this GRES and type")
    for j in jobs:
        if j.state != "PENDING" or j.state_reason in NOT_DEMAND:
            continue
        per_node = requested_gres(j.gres)
        asked = {k: v * max(1, j.node_count) for k, v in per_node.items()} or requested_gres(j.tres_per_job)
        for (gres, typ), count in asked.items():
            pend_dev.add(count, gres=gres, type=typ or UNTYPED)
            pend_jobs.add(1, gres=gres, type=typ or UNTYPED)
    ctl = Path(cfg.paths.controller_dir)
    hold = read_hold(ctl)
    st = pool_status(cfg, infos, Journal(ctl).load().data, reservations, now, hold)
    info_fam = exp.family(
        "gpupool_node_layout_info",
        "gauge",
        "Always 1: a node's active layout (its layout_<name> feature in Slurm) and desired layout "
        "(an unfinished run's target, else the schedule's)",
    )
    state_fam = exp.family(
        "gpupool_node_switch_state", "gauge", "1 for a node's switch state (gpupool status), 0 for the others"
    )
    drained = exp.family("gpupool_node_drained", "gauge", "1 if Slurm has the node drained (any reason)")
    for n in st["nodes"]:
        info_fam.set(1, node=n["node"], active=n["active"] or "", desired=n["desired"] or "")
        now_state = n["state"].replace(" ", "_")
        for s in SWITCH_STATES:
            state_fam.set(1 if s == now_state else 0, node=n["node"], state=s)
        if n["node"] in infos:
            drained.set(1 if infos[n["node"]].drained else 0, node=n["node"])
    due = exp.family("gpupool_schedule_due_info", "gauge", "Always 1: the layout the schedule says is due now")
    if st["due"]:
        due.set(1, layout=st["due"])
    exp.family("gpupool_schedule_held", "gauge", "1 while the schedule is paused or pinned").set(1 if st["hold"] else 0)
    if st["next_switch"]:
        at = datetime.fromisoformat(st["next_switch"]["at"])
        exp.family(
            "gpupool_schedule_next_switch_timestamp_seconds", "gauge", "When the schedule next changes layout"
        ).set(at.timestamp(), layout=st["next_switch"]["layout"])


# -- the repartitioner's journal ------------------------------------------------------------------


@dataclass
class JournalStats:
    runs: dict[str, int] = field(default_factory=dict)  # target → runs started
    run_seconds: list[float] = field(default_factory=list)  # finished runs, start to finish
    outcomes: dict[tuple[str, str], int] = field(default_factory=dict)  # (node, outcome) → count
    out_of_service: list[float] = field(default_factory=list)  # per switched node: apply start → released
    out_of_service_by_node: dict[str, float] = field(default_factory=dict)
    elastic_decisions: int = 0  # elastic steps recorded (``gpupool repartition --elastic``)
    elastic_switches: dict[tuple[str, str], int] = field(default_factory=dict)  # (reason, to) → count
    elastic_last: dict[str, Any] = field(default_factory=dict)  # the last elastic decision
    elastic_last_at: float | None = None


_JOURNAL_CACHE: dict[str, tuple[tuple[int, int], JournalStats]] = {}
_CACHE_LOCK = threading.Lock()


def _when(text: Any) -> float | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def journal_stats(path: Path) -> JournalStats:
    """Every run and node switch in ``journal.log`` (one JSON event per line; a bad line is skipped)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return JournalStats()
    key = (st.st_size, st.st_mtime_ns)
    with _CACHE_LOCK:
        hit = _JOURNAL_CACHE.get(str(path))
        if hit and hit[0] == key:
            return hit[1]
    out = JournalStats()
    applying: dict[str, float] = {}
    started: float | None = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            if isinstance(ev.get("elastic"), dict):  # one elastic decision (repartition/elastic.record)
                out.elastic_decisions += 1
                out.elastic_last = ev["elastic"]
                out.elastic_last_at = _when(ev.get("at"))
                for a in ev["elastic"].get("actions") or ():
                    if isinstance(a, dict):
                        made = (str(a.get("reason")), str(a.get("to")))
                        out.elastic_switches[made] = out.elastic_switches.get(made, 0) + 1
            elif ev.get("run") == "start":
                target = str(ev.get("target"))
                out.runs[target] = out.runs.get(target, 0) + 1
                started = _when(ev.get("at"))
            elif ev.get("cluster") == jr.FINISHED:
                end = _when(ev.get("at"))
                if started is not None and end is not None:
                    out.run_seconds.append(max(0.0, end - started))
                started = None
            elif isinstance(ev.get("node"), str):
                node, step = ev["node"], ev.get("step")
                if step == jr.APPLYING and isinstance(ev.get("applying_at"), int | float):
                    applying[node] = float(ev["applying_at"])
                elif step in NODE_OUTCOMES:
                    out.outcomes[(node, step)] = out.outcomes.get((node, step), 0) + 1
                    t0 = applying.pop(node, None)
                    t1 = ev.get("released_at")
                    if step in (jr.DONE, jr.ROLLED_BACK) and t0 is not None and isinstance(t1, int | float):
                        secs = max(0.0, float(t1) - t0)
                        out.out_of_service.append(secs)
                        out.out_of_service_by_node[node] = out.out_of_service_by_node.get(node, 0.0) + secs
    with _CACHE_LOCK:
        _JOURNAL_CACHE[str(path)] = (key, out)
    return out


def collect_journal(cfg: PoolConfig, exp: Exposition) -> None:
    ctl = Path(cfg.paths.controller_dir)
    stats = journal_stats(ctl / "journal.log")
    runs = exp.family("gpupool_repartition_runs_total", "counter", "Repartition runs started, by target layout")
    for target, n in sorted(stats.runs.items()):
        runs.set(n, target=target)
    exp.histogram(
        "gpupool_repartition_run_duration_seconds",
        "Repartition runs from start to finish (every node switched, skipped or failed)",
        stats.run_seconds,
        DURATION_BUCKETS_S,
    )
    outcomes = exp.family(
        "gpupool_node_switches_total",
        "counter",
        "Node switches by outcome: done, failed (left drained), skipped (busy past the deadline), rolled_back",
    )
    for node in sorted({n for n, _ in stats.outcomes} | set(cfg.all_nodes())):
        for outcome in NODE_OUTCOMES:
            outcomes.set(stats.outcomes.get((node, outcome), 0), node=node, outcome=outcome)
    exp.histogram(
        "gpupool_node_switch_out_of_service_seconds",
        "Per node switch, the seconds no job could run there: its jobs gone (apply start) to released",
        stats.out_of_service,
        DURATION_BUCKETS_S,
    )
    oos = exp.family(
        "gpupool_node_out_of_service_seconds_total",
        "counter",
        "Seconds a node was out of service for switches (apply start to release), summed",
    )
    for node in sorted(set(stats.out_of_service_by_node) | set(cfg.all_nodes())):
        oos.set(stats.out_of_service_by_node.get(node, 0.0), node=node)
    _elastic(stats, exp)
    try:
        journal = jr.Journal(ctl).load()
    except GpupoolError:
        return
    run = journal.run or {}
    exp.family("gpupool_repartition_run_in_progress", "gauge", "1 while a repartition run is unfinished").set(
        1 if journal.unfinished() else 0
    )
    if run.get("started_epoch"):
        exp.family(
            "gpupool_repartition_last_run_start_timestamp_seconds", "gauge", "When the last repartition run started"
        ).set(float(run["started_epoch"]), target=str(run.get("target")))


def _elastic(stats: JournalStats, exp: Exposition) -> None:
    """The elastic policy's decisions (#17): how many, the switches they made by reason and
    target layout, and what the last one saw waiting (per request: bounded, no job labels)."""
    exp.family("gpupool_elastic_decisions_total", "counter", "Elastic decision steps recorded").set(
        stats.elastic_decisions
    )
    switches = exp.family(
        "gpupool_elastic_switches_total",
        "counter",
        "Node switches elastic decisions made, by reason (demand, floor) and target layout",
    )
    for (reason, to), n in sorted(stats.elastic_switches.items()):
        switches.set(n, reason=reason, layout=to)
    last = stats.elastic_last
    if not last:
        return
    when = stats.elastic_last_at
    if when is not None:
        exp.family(
            "gpupool_elastic_last_decision_timestamp_seconds", "gauge", "When the last elastic decision was made"
        ).set(when)
    unmet_jobs = exp.family(
        "gpupool_elastic_unmet_jobs", "gauge", "Jobs waiting that no idle capacity held, at the last decision"
    )
    unmet_eq = exp.family(
        "gpupool_elastic_unmet_gpu_equivalents",
        "gauge",
        "GPU-equivalents those waiting jobs would hold, at the last decision",
    )
    for u in last.get("unmet") or ():
        if isinstance(u, dict) and u.get("request"):
            unmet_jobs.set(float(u.get("jobs") or 0), request=str(u["request"]))
            unmet_eq.set(float(u.get("gpu_eq") or 0), request=str(u["request"]))


# -- the hooks' files on the nodes ----------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def visible_nodes(cfg: PoolConfig, local_node: str | None, where: str = "state_dir") -> list[str]:
    """The pool nodes whose state directory (or ``where``: ``run_dir``) this host has: with
    ``{node}`` in the path (the sandbox, a shared file system) every one that exists; else
    only this host's own, if it is a pool node (a controller's own state directory is no
    node's)."""
    if "{node}" in getattr(cfg.paths, where):
        return [n for n in cfg.all_nodes() if cfg.paths.for_node(where, n).is_dir()]
    return [local_node] if local_node in cfg.all_nodes() and Path(getattr(cfg.paths, where)).is_dir() else []


def collect_nodes(cfg: PoolConfig, exp: Exposition, nodes: Iterable[str]) -> None:
    """Hook failures, health drains and the last health check of ``nodes`` (from their
    state directories' ``hook-stats.json`` and ``health.json``)."""
    failures = exp.family(
        "gpupool_hook_failures_total",
        "counter",
        "Errors a job hook failed open on (the job ran; see syslog gpupool-<hook>)",
    )
    drains = exp.family(
        "gpupool_health_drains_total",
        "counter",
        "GPU health failures that drained the node: Prolog or Epilog exit 1, or gpupool-healthcheck's drain",
    )
    health = exp.family(
        "gpupool_node_health_ok", "gauge", "The node's last GPU health check: 1 passed, 0 failed (health.json)"
    )
    for node in sorted(nodes):
        state_dir = cfg.paths.for_node("state_dir", node)
        stats = _read_json(state_dir / "hook-stats.json")
        got = _counts(stats, "hook_failures")
        for hook in sorted({"prolog", "epilog", "taskprolog", *got}):
            failures.set(_count(got.get(hook)), node=node, hook=hook)
        got = _counts(stats, "health_drains")
        for by in sorted({"prolog", "epilog", "healthcheck", *got}):
            drains.set(_count(got.get(by)), node=node, by=by)
        checked = _read_json(state_dir / "health.json")
        if isinstance(checked, dict) and checked.get("status") in ("ok", "fail"):
            health.set(1 if checked["status"] == "ok" else 0, node=node)


# the sampler's latest activity measures (hooks/sampler.py `<name>_last`, percent) → series
SLICE_ACTIVITY = (
    ("sm_activity", "gpupool_slice_sm_active_ratio", "SM activity", "dcgmi dmon -e 1002; DCGM_FI_PROF_SM_ACTIVE"),
    ("tensor_activity", "gpupool_slice_tensor_active_ratio", "Tensor pipe activity", "dcgmi dmon -e 1004"),
    ("dram_bw", "gpupool_slice_dram_active_ratio", "DRAM bandwidth activity", "dcgmi dmon -e 1005"),
)
SLICE_LABELS = ("node", "gpu", "gi", "kind", "type", "profile")


def collect_slices(cfg: PoolConfig, exp: Exposition, nodes: Iterable[str], per_job: bool = False) -> None:
    """Per GPU slice (a MIG instance, a whole or a time-shared GPU) the latest activity and
    memory the node's usage sampler measured for its running jobs (``<run_dir>/<job>.usage.json``,
    beside the Prolog's ``<job>.devices``): what a slice offers against what its jobs use,
    for right-sizing.  Nothing is asked of the GPUs here (GPM needs two samples over time;
    the sampler takes them, as ``nvidia-smi dmon --gpm-metrics 2,5,10``): a scrape reads a
    few small files.

    Series are per slice with a job on it, so bounded by the node's slices whatever the job
    count (shares of one GPU are summed); ``per_job`` adds a ``job`` label (one series per
    running job and slice: the admin's choice, docs/metrics.md)."""
    labels_of = (*SLICE_LABELS, "job") if per_job else SLICE_LABELS
    act = {
        key: exp.family(name, "gauge", f"{what} of a GPU slice, 0-1, GPM's latest sample for its job ({cmd})")
        for key, name, what, cmd in SLICE_ACTIVITY
    }
    util = exp.family(
        "gpupool_slice_utilization_ratio",
        "gauge",
        "NVML utilization of a whole GPU, 0-1; on a time-shared GPU its jobs' share of it, by their "
        "processes' memory (nvidia-smi --query-gpu=utilization.gpu)",
    )
    used = exp.family(
        "gpupool_slice_memory_used_bytes",
        "gauge",
        "Memory its jobs use on a slice, latest sample; on a time-shared GPU their own processes' "
        "(nvidia-smi --query-compute-apps=used_memory)",
    )
    peak = exp.family(
        "gpupool_slice_memory_peak_bytes",
        "gauge",
        "Peak memory of the slice's running jobs so far (summed over jobs sharing a GPU)",
    )
    total = exp.family("gpupool_slice_memory_total_bytes", "gauge", "Memory the slice offers (nvidia-smi memory.total)")
    jobs = exp.family("gpupool_slice_jobs", "gauge", "Running jobs the usage sampler measures on the slice")
    mib = 1 << 20
    for node in sorted(nodes):
        run_dir = cfg.paths.for_node("run_dir", node)
        try:
            names = sorted(p.name for p in run_dir.iterdir() if p.name.endswith(".devices"))
        except OSError:
            continue
        seen: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
        for name in names:
            job = name.removesuffix(".devices")
            devices, usage = _read_json(run_dir / name), _read_json(run_dir / f"{job}.usage.json")
            if not isinstance(devices, list) or not isinstance(usage, dict):
                continue  # no sample yet, or the job ended meanwhile
            got = usage.get("devices")
            measured: dict[str, Any] = got if isinstance(got, dict) else {}
            for d in devices:
                u = measured.get(str(d.get("index"))) if isinstance(d, dict) else None
                if not isinstance(u, dict):
                    continue
                values: tuple[str, ...] = (node, *(str(d.get(k, "")) for k in ("gpu", "gi", "kind", "type", "profile")))
                key = tuple(zip(labels_of, (*values, job) if per_job else values))
                slot = seen.setdefault(key, {})
                slot["jobs"] = slot.get("jobs", 0.0) + 1
                for field_, how in (("util_last", "sum"), ("memory_mib", "sum"), ("peak_memory_mib", "sum")):
                    _fold(slot, field_, u.get(field_), how)
                _fold(slot, "memory_total_mib", u.get("memory_total_mib"), "max")
                for k, *_ in SLICE_ACTIVITY:
                    _fold(slot, k, u.get(f"{k}_last"), "max")  # one job per MIG slice or whole GPU
        for key, slot in seen.items():
            labels = dict(key)
            jobs.set(slot["jobs"], **labels)
            for k, *_ in SLICE_ACTIVITY:
                if k in slot:
                    act[k].set(slot[k] / 100, **labels)
            if "util_last" in slot:
                util.set(min(1.0, slot["util_last"] / 100), **labels)
            for fam, field_ in ((used, "memory_mib"), (peak, "peak_memory_mib"), (total, "memory_total_mib")):
                if field_ in slot:
                    fam.set(slot[field_] * mib, **labels)


def _fold(slot: dict[str, float], key: str, value: Any, how: str) -> None:
    """Add or keep the larger of one job's measure on a slice; a missing or odd value is skipped."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        return
    slot[key] = slot.get(key, 0.0) + value if how == "sum" else max(slot.get(key, 0.0), float(value))


def _counts(stats: Any, group: str) -> dict[str, Any]:
    got = stats.get(group) if isinstance(stats, dict) else None
    return got if isinstance(got, dict) else {}


def _count(v: Any) -> int:
    return v if isinstance(v, int) and v >= 0 else 0


# -- one scrape ------------------------------------------------------------------------------------

SCOPES = ("all", "pool", "node")


def collect(
    cfg: PoolConfig,
    cluster: Slurm | None = None,
    scope: str = "all",
    now: datetime | None = None,
    local_node: str | None = None,
    per_job: bool = False,
) -> Exposition:
    """Every metric of ``scope``: ``pool`` (Slurm and the journal: the controller),
    ``node`` (the hooks' files of the nodes this host sees, see :func:`visible_nodes`:
    a GPU node's own, and its slices' activity), ``all`` (both).  ``per_job``: slice
    series per running job too (more series: docs/metrics.md)."""

    t0 = time.monotonic()
    exp = Exposition()
    exp.family("gpupool_build_info", "gauge", "Always 1: the slurm_gpupool version").set(1, version=__version__)
    if scope in ("all", "pool"):
        up = exp.family("gpupool_slurm_up", "gauge", "1 if Slurm answered sinfo, squeue and scontrol")
        when = now or (
            datetime.now(cfg.schedule.tz) if cfg.schedule and cfg.schedule.tz else datetime.now().astimezone()
        )
        try:
            collect_slurm(cfg, cluster or SlurmCluster(), when, exp)
            up.set(1)
        except GpupoolError as e:
            up.set(0)
            exp.family("gpupool_slurm_error_info", "gauge", "Always 1: why Slurm could not be read").set(
                1, error=e.message()[:200]
            )
        collect_journal(cfg, exp)
    if scope in ("all", "node"):
        collect_nodes(cfg, exp, visible_nodes(cfg, local_node))
        collect_slices(cfg, exp, visible_nodes(cfg, local_node, "run_dir"), per_job)
    exp.family("gpupool_scrape_duration_seconds", "gauge", "How long gathering these metrics took").set(
        round(time.monotonic() - t0, 4)
    )
    return exp


def write_textfile(path: Path, text: str) -> None:
    """For node_exporter's textfile collector: written atomically (temp, fsync, rename), so
    the collector never reads half a file."""

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, 0o644)


def serve(
    address: tuple[str, int],
    render: Any,
    min_interval_s: float = 5.0,
    ready: Any = None,
) -> None:
    """Serve ``/metrics`` (stdlib ``http.server``), rendering at most every ``min_interval_s``
    (scrapes closer together get the last text: slurmctld is asked at most that often)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    cache: dict[str, Any] = {"at": -math.inf, "text": ""}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def handle(self) -> None:
            """A client that hangs up (a scraper's timeout, a closed browser tab) ends its
            request, quietly: there is no one left to answer (it printed a traceback)."""
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
                self.close_connection = True

        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            if self.path.startswith("/metrics"):
                try:
                    with lock:
                        if time.monotonic() - cache["at"] >= min_interval_s:
                            cache["text"], cache["at"] = render(), time.monotonic()
                        body = cache["text"].encode()
                except GpupoolError as e:  # Slurm unreachable, say: the scraper sees why
                    self.send_error(503, explain=e.message()[:500])
                    return
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            else:
                body = b'<html><body><a href="/metrics">metrics</a></body></html>\n'
                ctype = "text/html"
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            """One line on stderr, not socketserver's traceback (a failed render: the
            client got a 500)."""
            err = sys.exc_info()[1]
            sys.stderr.write(f"gpupool metrics: request from {client_address[0]}: {type(err).__name__}: {err}\n")

    server = Server(address, Handler)
    if ready is not None:
        ready(server.server_address)
    try:
        server.serve_forever()
    finally:
        server.server_close()
