"""Replays behind ``report advice``: the current policy and each candidate, with their
uncertainty (pure; #16).

* **Scenarios**: the window's jobs and ``resamples`` bootstraps of them by day (seeded;
  a day is drawn from the days of the same kind, weekday or weekend, so the schedule
  meets the week it knows), each at every shard slowdown of the range (default 1 and 2:
  a time-shared job runs that many times longer).  The **point estimate** is the
  window's own jobs at the middle of the slowdown range.  A policy without time-shared
  GPUs runs once per job set: the slowdown cannot change it.
* **Screening**: every candidate is replayed at the point; the ones that beat the current
  policy there (most promising first, at most ``confirm``) are replayed in every scenario,
  as is the current policy.
* **A gain** in one scenario, paired with the current policy's replay of the same jobs
  and slowdown: no more jobs left unstarted, the mean wait not longer by more than the
  larger of ``mean_margin`` of it and ``wait_margin_s``, and either the p90 wait lower by at
  least the larger of ``wait_margin`` of it and ``wait_margin_s``, with utilisation not lower by more than
  ``util_margin``, or utilisation higher by ``util_margin`` with the p90 wait not higher
  by the wait margin.  A candidate is recommended only with a gain in every scenario.
  The mean guards the p90: on a busy week the waits rise to a day near the 90th
  percentile, so a small change of who is served first can lower the p90 while the mean
  wait grows (docs/elastic.md).
* **Utilisation at equal capacity**: GPU-equivalents asked for by running jobs (a shard
  job's slowdown not counted as work) over the pool's GPUs, while jobs arrive: a layout
  that strands slices, or is out of service while it switches, is charged for it, and a
  whole GPU held by a tenth-of-a-GPU job counts a tenth.  What jobs held (rounding up
  included) is reported beside it (``held``).
* **Switches** as the repartitioner makes them (``policies``): out of service per node by
  its timing model, ``lead_time: auto`` from the partition's MaxTime, which accounting
  shows as the longest time limit (a job without ``--time`` gets it), unless given.
* Candidates the config already runs, or that another candidate already is (every node
  offering the same GRES at the same times over a week), are not replayed again.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.simulate import policies as pol
from slurm_gpupool.simulate.candidates import WEEKEND, Candidate, candidates
from slurm_gpupool.simulate.engine import Engine, Params, Result
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.metrics import summarise
from slurm_gpupool.simulate.pool import PoolSpec, Shape
from slurm_gpupool.simulate.willrun import release_params

DAY_S = 86400.0
SOURCE = "report advice"


@dataclass(frozen=True)
class Settings:
    slowdowns: tuple[float, ...] = (1.0, 2.0)  # the shard slowdown range
    resamples: int = 3  # bootstraps of the jobs by day
    seed: int = 0
    confirm: int = 2  # candidates replayed in every scenario
    candidates: int = 8
    min_jobs: int = 50  # fewer finished GPU jobs: no simulation
    wait_margin: float = 0.10
    mean_margin: float = 0.10
    wait_margin_s: float = 60.0
    util_margin: float = 0.02
    bf_interval_s: float = 30.0
    slurm_release: str = "22.05"  # whose backfill the replays follow (``willrun.release_params``)
    max_time_s: float | None = None  # the partition's MaxTime (lead time); None: the jobs' longest limit
    workers: int = 1  # processes the caller may fork for replays (``parallel``); not used here
    # the site's priority setup (``site_priority.SitePriority``, from ``--slurm-config``): its
    # PriorityWeightQOS as the queue feels it (0 under priority/basic), and the factors it weighs
    # that the replays leave out; None: multifactor with only the QOS factor, as validated
    priority_weight_qos: int = 10000
    # PriorityWeightAge as the queue feels it, PriorityMaxAge and PriorityCalcPeriod (``aging``)
    priority_weight_age: int = 0
    priority_max_age_s: float = 7 * 86400.0
    priority_calc_period_s: float = 300.0
    # the partitions' (name, PriorityJobFactor, PriorityTier) and PriorityWeightPartition (``priority``)
    partition_priority: tuple[tuple[str, int, int], ...] = ()
    priority_weight_partition: int = 0
    # PriorityWeightFairshare as the queue feels it (0 unless the shares were given), the
    # decay's half-life, and the associations (accounts, users, usage: ``fairshare.read_sshare``)
    priority_weight_fairshare: int = 0
    priority_decay_half_life_s: float = 7 * 86400.0
    fairshare: tuple[tuple, tuple, tuple] = ((), (), ())
    priority_notes: tuple[str, ...] = ()  # what the report says about that (site_priority.notes)


@dataclass(frozen=True)
class Scenario:
    label: str
    jobs: int  # 0: the window's jobs; k: the k-th resample
    slowdown: float


@dataclass
class Policy:
    """One policy to replay: a config (with the candidate's layouts and schedule) and how."""

    name: str
    cfg: PoolConfig
    spec: pol.PolicySpec
    candidate: Candidate | None = None
    pool: PoolSpec | None = None
    runs: dict[tuple[int, float], dict[str, float]] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Offers time-shared GPUs (the slowdown matters)."""
        assert self.pool is not None
        return any(s.shared for (lay, _), s in self.pool.shapes.items() if lay in self.pool_layouts)

    @property
    def pool_layouts(self) -> set[str]:
        assert self.pool is not None
        return {*self.spec.layouts, self.pool.fallback}


def current_policy(cfg: PoolConfig) -> Policy:
    """The config's schedule (elastic in its elastic mode), or (without one) its first layout
    by name all the time, as the reports take it."""
    if cfg.elastic is not None:
        return Policy("current: the config's elastic schedule", cfg, pol.policies(cfg, [pol.ELASTIC], "")[0])
    if cfg.schedule is not None:
        return Policy("current: the config's schedule", cfg, pol.policies(cfg, [pol.SCHEDULE], "")[0])
    first = cfg.layout_names()[0]
    return Policy(f"current: {first} all the time", cfg, pol.PolicySpec(pol.STATIC + first, (first,)))


def candidate_policy(cfg: PoolConfig, cand: Candidate) -> Policy:
    """The config with the candidate's layouts (checked and planned by the config parser:
    an infeasible one is refused there) and its schedule."""
    with_new = pol.with_layouts(cfg, cand.layouts, f"{SOURCE}: {cand.name}") if cand.layouts else cfg
    raw = copy.deepcopy(with_new.raw)
    raw["schedule"] = copy.deepcopy(cand.schedule)
    c = parse_config(raw, with_new.source, Path(cfg.source).parent)
    return Policy(cand.name, c, pol.policies(c, [pol.SCHEDULE], "")[0], cand)


# -- job sets ----------------------------------------------------------------------------


def resample_by_day(jobs: Sequence[SimJob], epoch: datetime, seed: int) -> list[SimJob]:
    """A bootstrap of the jobs by day: each day of the span takes the jobs of a day drawn
    (with replacement) from the days of its kind (weekday, weekend), at their times of day.
    Under three days: a bootstrap of single jobs at their own times."""
    rnd = random.Random(seed)
    if not jobs:
        return []
    days = int(max(j.submit_s for j in jobs) // DAY_S) + 1
    if days < 3:
        drawn = [jobs[rnd.randrange(len(jobs))] for _ in jobs]
        return _renumber(sorted(drawn, key=lambda j: (j.submit_s, j.job_id)))
    by_day: dict[int, list[SimJob]] = {}
    for j in jobs:
        by_day.setdefault(int(j.submit_s // DAY_S), []).append(j)

    def weekend(d: int) -> bool:
        return (epoch + timedelta(days=d, hours=12)).weekday() >= WEEKEND

    out: list[SimJob] = []
    for slot in range(days):
        same = [d for d in range(days) if weekend(d) == weekend(slot)] or list(range(days))
        d = same[rnd.randrange(len(same))]
        out += [dataclasses.replace(j, submit_s=j.submit_s + (slot - d) * DAY_S) for j in by_day.get(d, [])]
    out.sort(key=lambda j: (j.submit_s, j.job_id))
    return _renumber(out)


def _renumber(jobs: list[SimJob]) -> list[SimJob]:
    return [dataclasses.replace(j, job_id=i + 1) for i, j in enumerate(jobs)]


# -- replays -----------------------------------------------------------------------------


@dataclass
class _Run:
    epoch: datetime
    job_sets: list[list[SimJob]]
    nodes: list[str]
    gpus: int
    span_s: float
    settings: Settings
    max_time_s: float | None = None
    replays: int = 0
    progress: Callable[[str], None] | None = None

    def pool(self, p: Policy) -> PoolSpec:
        if p.pool is None:
            cfg = p.cfg
            fallback = cfg.schedule.default if cfg.schedule is not None else p.spec.layouts[0]
            p.pool = pol.pool_for(cfg, p.spec, self.nodes, fallback)
        return p.pool

    def signature(self, p: Policy) -> tuple[Any, ...]:
        """What every node offers, and from when, over a week and a day: two policies with
        the same signature are the same replay (an elastic one is like no other)."""
        pool = self.pool(p)
        if p.spec.name == pol.ELASTIC:
            return (pol.ELASTIC, id(p))
        sw = pol.switcher(p.cfg, p.spec, self.epoch, 8 * DAY_S)
        out: list[tuple[float, tuple[Shape, ...]]] = []
        for t, lay in zip(sw.times, sw.layouts):
            shapes = tuple(pool.shape(lay, n) for n in self.nodes)
            if not out or out[-1][1] != shapes:
                out.append((t, shapes))
        return tuple(out)

    def key(self, p: Policy, k: int, slowdown: float) -> tuple[int, float]:
        self.pool(p)
        return (k, slowdown if p.shared else 0.0)  # without shards every slowdown gives the same replay

    def metrics(self, p: Policy, k: int, slowdown: float) -> dict[str, float]:
        """The policy's figures on job set ``k`` at ``slowdown`` (replayed once)."""
        key = self.key(p, k, slowdown)
        if key not in p.runs:
            self._say(p, k, slowdown)
            p.runs[key] = self._replay(p, self.job_sets[k], slowdown)
            self.replays += 1
        return p.runs[key]

    def prefetch(self, wanted: Sequence[tuple[Policy, int, float]], parallel: Parallel | None) -> None:
        """Replay what ``wanted`` needs and is not known yet, through ``parallel`` when given
        (a map over worker processes forked from this one: they find the replays' inputs in
        ``_STATE``)."""
        global _STATE
        todo: dict[tuple[int, int, float], tuple[Policy, int, float]] = {}
        policies = list({id(p): p for p, _, _ in wanted}.values())
        for p, k, sd in wanted:
            key = self.key(p, k, sd)
            if key not in p.runs:
                todo.setdefault((policies.index(p), *key), (p, k, sd))
        if parallel is None or len(todo) < 2:
            for p, k, sd in todo.values():
                self.metrics(p, k, sd)
            return
        _STATE = (self, policies)
        try:
            items = [(i, k, sd) for (i, _, _), (_, k, sd) in todo.items()]
            for (p, k, sd), out in zip(todo.values(), parallel(_task, items)):
                self._say(p, k, sd)
                p.runs[self.key(p, k, sd)] = out
                self.replays += 1
        finally:
            _STATE = None

    def _say(self, p: Policy, k: int, slowdown: float) -> None:
        if self.progress is not None:
            self.progress(f"{p.name} ({'jobs' if k == 0 else f'resample {k}'}, slowdown {slowdown:g})")

    def _replay(self, p: Policy, jobs: list[SimJob], slowdown: float) -> dict[str, float]:
        cfg = p.cfg
        assert p.pool is not None
        sw = pol.switcher(cfg, p.spec, self.epoch, self.span_s)
        bounds = list(zip(sw.times, sw.layouts))
        clock = p.spec.name in (pol.SCHEDULE, pol.ELASTIC)  # elastic: the clock's switches outside its periods
        lead = pol.lead_time_s(cfg, bounds, self.max_time_s) if clock else 0.0
        r = cfg.repartition
        params = Params(
            **release_params(self.settings.slurm_release),
            bf_interval_s=self.settings.bf_interval_s,
            switch_s=pol.elastic_switch_s(cfg, p.spec, pol.switch_seconds(cfg, len(self.nodes)), True),
            lead_time_s=lead,
            deadline_s=r.deadline_s,
            requeue=r.requeue,
            grace_s=r.checkpoint_grace_s,
            shard_slowdown=slowdown,
            # as `gpupool simulate` replays: the tiers' QOS order the queue, the clock is the trace's
            qos_priority=tuple(pol.tier_priorities(cfg).items()),
            priority_weight_qos=self.settings.priority_weight_qos,
            priority_weight_age=self.settings.priority_weight_age,
            priority_max_age_s=self.settings.priority_max_age_s,
            priority_calc_period_s=self.settings.priority_calc_period_s,
            partition_priority=self.settings.partition_priority,
            priority_weight_partition=self.settings.priority_weight_partition,
            priority_weight_fairshare=self.settings.priority_weight_fairshare,
            priority_decay_half_life_s=self.settings.priority_decay_half_life_s,
            fairshare_accounts=self.settings.fairshare[0],
            fairshare_users=self.settings.fairshare[1],
            fairshare_usage=self.settings.fairshare[2],
            clock_origin_s=self.epoch.timestamp(),
        )
        res = Engine(p.pool, sw, params).run(jobs)
        return figures(res, self.gpus, slowdown)


Parallel = Callable[
    [Callable[[tuple[int, int, float]], dict[str, float]], list[tuple[int, int, float]]], Iterable[dict[str, float]]
]
_STATE: tuple[_Run, list[Policy]] | None = None  # a parallel map's workers read their inputs here


def _task(item: tuple[int, int, float]) -> dict[str, float]:
    """One replay in a worker: (policy index, job set, slowdown) -> its figures."""
    assert _STATE is not None, "the parallel map must fork its workers after _STATE is set"
    run, policies = _STATE
    p = policies[item[0]]
    run.pool(p)
    return run._replay(p, run.job_sets[item[1]], item[2])


def figures(res: Result, gpus: int, slowdown: float) -> dict[str, float]:
    """What advice compares, from one replay (see the module's docstring)."""
    s = summarise(res)
    window, since = res.window_s, res.window_from_s
    cap = gpus * (window - since)
    served = 0.0
    for j in res.jobs:
        if j.start_s < 0 or j.start_s >= window:
            continue
        end = j.end_s if j.end_s >= 0 else res.horizon_s
        held = max(0.0, min(end, window) - max(j.start_s, since))
        served += j.requested_eq * held / (slowdown if j.kind == "shard" else 1.0)
    return {
        "p50_wait_s": s["wait_s"]["p50"],
        "p90_wait_s": s["wait_s"]["p90"],
        "mean_wait_s": s["wait_s"]["mean"],
        "utilisation": served / cap if cap > 0 else math.nan,
        "held": s["allocated_eq_h"] * 3600 / cap if cap > 0 else math.nan,
        "not_started": float(s["never_started"] + s["rejected"]),
        "switches": float(s["switches"]),
    }


METRICS = ("p50_wait_s", "p90_wait_s", "mean_wait_s", "utilisation", "held", "not_started", "switches")


def gain(c: dict[str, float], cur: dict[str, float], s: Settings) -> str | None:
    """``wait`` or ``utilisation`` when ``c`` beats ``cur`` in one scenario, else None."""
    return None if mean_longer(c, cur, s) else _p90_or_util_gain(c, cur, s)


def mean_longer(c: dict[str, float], cur: dict[str, float], s: Settings) -> bool:
    """``c``'s mean wait is longer than ``cur``'s by more than the larger of ``mean_margin``
    of it and ``wait_margin_s``: no gain then, whatever the p90 (the module's docstring)."""
    mean, base = c["mean_wait_s"], cur["mean_wait_s"]
    return mean == mean and base == base and mean > base + max(s.wait_margin_s, s.mean_margin * base)


def _p90_or_util_gain(c: dict[str, float], cur: dict[str, float], s: Settings) -> str | None:
    if not c["not_started"] <= cur["not_started"]:
        return None
    p90, base = c["p90_wait_s"], cur["p90_wait_s"]
    if p90 != p90 or base != base:
        return None
    margin = max(s.wait_margin_s, s.wait_margin * base)
    util_better = c["utilisation"] >= cur["utilisation"] + s.util_margin
    util_kept = c["utilisation"] >= cur["utilisation"] - s.util_margin
    if p90 <= base - margin and util_kept:
        return "wait"
    if util_better and p90 <= base + margin:
        return "utilisation"
    return None


def _range(runs: Sequence[dict[str, float]]) -> dict[str, list[float]]:
    out = {}
    for m in METRICS:
        vals = [r[m] for r in runs if r[m] == r[m]]
        out[m] = [min(vals), max(vals)] if vals else [math.nan, math.nan]
    return out


def scenarios(settings: Settings) -> tuple[Scenario, list[Scenario]]:
    """The point estimate, and every scenario of the range."""
    lo, hi = min(settings.slowdowns), max(settings.slowdowns)
    point = Scenario(f"the window's jobs, slowdown {(lo + hi) / 2:g}", 0, (lo + hi) / 2)
    grid = [
        Scenario(f"{'the window' + chr(39) + 's jobs' if k == 0 else f'resample {k}'}, slowdown {sd:g}", k, sd)
        for k in range(settings.resamples + 1)
        for sd in sorted(set(settings.slowdowns))
    ]
    return point, grid


def advise(
    cfg: PoolConfig,
    epoch: datetime,
    jobs: Sequence[SimJob],
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
    parallel: Parallel | None = None,
) -> dict[str, Any]:
    """Replay the current policy and the candidates; what to recommend (JSON-ready).
    ``parallel``: a map running replays in worker processes forked after it is called
    (``reports.advice.process_map``); None: one after the other here."""
    s = settings or Settings()
    cands, _ = candidates(cfg, jobs, epoch, s.candidates)
    current = current_policy(cfg)
    nodes = [n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine is not None]
    gpus = sum(len(m.gpus) for n in nodes if (m := cfg.nodeset_of(n).machine) is not None)
    job_sets = [list(jobs)] + [resample_by_day(jobs, epoch, s.seed + k) for k in range(1, s.resamples + 1)]
    span = max(max(j.submit_s for j in js) + max(j.limit_s for j in js) for js in job_sets if js) + DAY_S
    # MaxTime bounds the lead time of a switch; accounting shows it as the longest time limit
    # (a job without --time gets it)
    max_time = s.max_time_s if s.max_time_s is not None else max(j.limit_s for j in jobs)
    run = _Run(epoch, job_sets, nodes, gpus, span, s, max_time, progress=progress)
    seen = {run.signature(current)}
    policies = []
    for c in cands:  # those the config already runs, or another candidate, are left out
        p = candidate_policy(cfg, c)
        sig = run.signature(p)
        if sig not in seen:
            seen.add(sig)
            policies.append(p)
    point, grid = scenarios(s)

    run.prefetch([(p, 0, point.slowdown) for p in [current, *policies]], parallel)
    cur_point = run.metrics(current, 0, point.slowdown)
    at_point = [run.metrics(p, 0, point.slowdown) for p in policies]

    def rank(i: int) -> tuple[bool, float, float]:
        m = at_point[i]
        return (m["not_started"] > cur_point["not_started"], m["p90_wait_s"], -m["utilisation"])

    order = sorted(range(len(policies)), key=rank)
    promising = [i for i in order if gain(at_point[i], cur_point, s)][: s.confirm]
    confirmed: dict[int, dict[str, Any]] = {}
    recommended = None
    cur_runs: list[dict[str, float]] = []
    for i in promising:  # the most promising first, until one beats the current policy everywhere
        if recommended is not None:
            break
        run.prefetch([(p, sc.jobs, sc.slowdown) for p in (current, policies[i]) for sc in grid], parallel)
        cur_runs = [run.metrics(current, sc.jobs, sc.slowdown) for sc in grid]
        runs = [run.metrics(policies[i], sc.jobs, sc.slowdown) for sc in grid]
        gains = [gain(r, c, s) for r, c in zip(runs, cur_runs)]
        everywhere = all(gains) and gain(at_point[i], cur_point, s) is not None
        confirmed[i] = {"range": _range([*runs, at_point[i]]), "everywhere": everywhere, "gains": gains}
        if everywhere and recommended is None:
            recommended = i
    rows = []
    for i in order:
        p = policies[i]
        assert p.candidate is not None
        conf = confirmed.get(i)
        g = gain(at_point[i], cur_point, s)
        rows.append(
            {
                "name": p.name,
                "why": p.candidate.why,
                "layouts": p.candidate.layouts,
                "schedule": p.candidate.schedule,
                "point": at_point[i],
                "range": conf["range"] if conf else None,
                "gain_at_point": g,
                "beats_current_everywhere": conf["everywhere"] if conf else None,
                "verdict": verdict(at_point[i], cur_point, s, conf),
            }
        )
    rec = None
    if recommended is not None:
        p = policies[recommended]
        rec = {
            "name": p.name,
            "point": at_point[recommended],
            "range": confirmed[recommended]["range"],
            "current_point": cur_point,
            "current_range": _range([*cur_runs, cur_point]),
            "layouts": p.candidate.layouts if p.candidate else {},
            "schedule": p.candidate.schedule if p.candidate else {},
        }
    return {
        "jobs": len(jobs),
        "gpus": gpus,
        "point": point.label,
        "scenarios": [sc.label for sc in grid],
        "slowdowns": sorted(set(s.slowdowns)),
        "resamples": s.resamples,
        "seed": s.seed,
        "replays": run.replays,
        "max_time_s": max_time,
        "switch_s": pol.switch_seconds(cfg, len(nodes)),
        "current": {
            "name": current.name,
            "point": cur_point,
            "range": _range([*cur_runs, cur_point]) if cur_runs else None,
        },
        "candidates": rows,
        "recommendation": rec,
    }


def verdict(c: dict[str, float], cur: dict[str, float], s: Settings, conf: dict[str, Any] | None) -> str:
    """A candidate's line in the table, from its replay at the point estimate (``c``) and
    the confirmation over the range (``conf``; None: not replayed there).  A gain the mean
    wait took back is said so: its p90 or utilisation alone would read as one."""
    g = _p90_or_util_gain(c, cur, s)  # ``gain``'s two tests, each made once
    if g is None:
        return "no gain at the point estimate"
    if mean_longer(c, cur, s):
        return f"no {g} gain at the point estimate: its mean wait is longer"
    if conf is None:
        return f"{g} gain at the point estimate; not replayed over the range (others first)"
    if conf["everywhere"]:
        return f"{g} gain in every scenario"
    lost = sum(1 for x in conf["gains"] if not x)
    return f"{g} gain at the point estimate, none in {lost} of {len(conf['gains'])} scenarios"
