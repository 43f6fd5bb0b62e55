"""Alternative layouts and schedules for ``report advice`` to replay (pure; #16).

From a site's demand (the requests of its accounting jobs: fractions of a GPU with their
memory, whole-GPU counts, and the hours of the day they run in) a few candidates, each a
set of layouts in the config's own YAML shape plus a schedule, so they go through the
config parser (``policies.with_layouts``) like any layout an admin writes:

* **MIG mixes** that follow the demand's fraction distribution.  A fractional request
  needs the smallest profile of the model covering its compute share and its memory (as
  the replay maps it, ``mapping``); the mix is the planner's maximal valid combination
  (``planner.maximal_layouts``) whose compute slices per profile are closest to those
  needs: walking the profiles from the largest down, a shortfall of large slices counts
  twice a surplus (a large slice can hold a small job, a small one never a large job).
  Every mix is feasible by construction, and is checked again when the config parser
  takes the layouts.
* **GPU splits**: on each node, the share of its GPUs cut into the mix follows the
  fractional requests' share of the GPU-equivalents running (at MIG rounding) in the
  hours the layout is for; the other GPUs stay whole.  Variants: every GPU cut, one GPU
  more, the second-best mix, and time-sliced GPUs (``{shared: N}``, N from the median
  fraction; the only fractional form on a model without MIG).
* **Schedules**: the split as the day layout in the config's own day window, and in a
  window fitted to the hours when fractional requests run more than their average share
  of the load (the night: the schedule's default, else every GPU whole); the split all
  the time (a schedule without rules); every GPU whole all the time.

Load by hour of day is offered load: each job counted from its submission for its run
time, in the schedule's time zone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from functools import cache
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.mig.catalog import GpuModel, get_model
from slurm_gpupool.core.mig.planner import default_profiles, maximal_layouts
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest

HOURS = 24
ALL_HOURS = tuple(range(HOURS))
_EPS = 1e-9
ADVISED = "advised"  # the name of a candidate's new layout (another if the config has it)
MAX_CANDIDATES = 8
MIN_WINDOW_H, MAX_WINDOW_H = 4, 20
FLAT = 0.10  # fractional share of the load varies less than this over the day: no fitted window
WEEKEND = 5  # weekday() of Saturday
ALL_CUT = 0.4  # a model whose load is this much fractional also gets an every-GPU-cut candidate


@dataclass(frozen=True)
class Candidate:
    """Layouts to add to the config (YAML shape) and the schedule to run them with
    (YAML shape; no rules: its default all the time)."""

    name: str  # unique, short: "day split 08:00-20:00 mon-fri"
    why: str  # how it was derived, for the report
    layouts: dict[str, Any]
    schedule: dict[str, Any]

    @property
    def static(self) -> bool:
        return not self.schedule.get("rules")


@dataclass(frozen=True)
class Window:
    start_h: int
    end_h: int  # exclusive; may be <= start_h (wraps past midnight); 24 = midnight
    days: str  # schedule syntax: mon-fri, daily

    @property
    def hours(self) -> tuple[int, ...]:
        n = (self.end_h - self.start_h) % HOURS or HOURS
        return tuple((self.start_h + i) % HOURS for i in range(n))

    @property
    def text(self) -> str:
        return f"{self.start_h:02d}:00-{self.end_h:02d}:00 {self.days}"

    def rule(self, layout: str) -> dict[str, str]:
        return {"layout": layout, "days": self.days, "start": f"{self.start_h:02d}:00", "end": f"{self.end_h:02d}:00"}


@dataclass
class Demand:
    """The jobs' requests and their offered load by hour of the day."""

    requests: list[TraceRequest]
    durations: list[float]
    hour_s: list[list[float]]  # per job: seconds of its run time in each hour of the day (over all days)
    span_days: float
    weekend_share: float = 0.0  # of the load offered on Saturdays and Sundays

    def fractional(self, i: int) -> bool:
        r = self.requests[i]
        return r.gpus == 1 and r.milli < 1000 and r.model is None

    def hourly(self, held: Any) -> tuple[list[float], list[float]]:
        """GPU-eq seconds offered in each hour of the day: fractional requests at
        ``held(request)``, whole ones at their GPUs."""
        small, whole = [0.0] * HOURS, [0.0] * HOURS
        cache: dict[TraceRequest, float] = {}
        for i, r in enumerate(self.requests):
            frac = self.fractional(i)
            if frac:
                eq = cache.get(r)
                if eq is None:
                    eq = cache[r] = held(r)
                frac = eq < 1  # nothing smaller than a GPU holds it: whole demand
            else:
                eq = r.gpu_eq
            row, dst = self.hour_s[i], small if frac else whole
            for h in ALL_HOURS:
                dst[h] += eq * row[h]
        return small, whole

    def load(self, hours: Sequence[int], held: Any) -> tuple[float, float]:
        """GPU-eq seconds (fractional at ``held(request)``, whole) offered in ``hours``."""
        small, whole = self.hourly(held)
        return sum(small[h] for h in hours), sum(whole[h] for h in hours)


def demand(jobs: Sequence[SimJob], epoch: datetime, tz: tzinfo | None) -> Demand:
    """Each job's offered load by hour of the day in ``tz`` (None: this machine's zone)."""
    reqs, durs, hours = [], [], []
    weekend = total = 0.0
    for j in jobs:
        t = epoch + timedelta(seconds=j.submit_s)
        local = t.astimezone(tz) if tz is not None else t.astimezone()
        start = local.hour * 3600 + local.minute * 60 + local.second
        reqs.append(j.request)
        durs.append(j.duration_s)
        hours.append(_hour_profile(start, j.duration_s))
        total += j.duration_s * j.request.gpu_eq
        if local.weekday() >= WEEKEND:
            weekend += j.duration_s * j.request.gpu_eq
    span = (max((j.submit_s for j in jobs), default=0.0) + 1) / 86400
    return Demand(reqs, durs, hours, span, weekend / total if total else 0.0)


def _hour_profile(start_s: float, duration_s: float) -> list[float]:
    """Seconds of [start, start + duration) (start: seconds of the day) in each hour of the day."""
    full, rest = divmod(duration_s, 86400.0)
    out = [full * 3600.0] * HOURS
    t, end = start_s, start_s + rest
    while t < end - _EPS:
        h = int(t // 3600)
        step = min(end, (h + 1) * 3600.0) - t
        out[h % HOURS] += step
        t += step
    return out


# -- MIG rounding and mixes ------------------------------------------------------------


@cache
def _profiles(model_key: str) -> tuple[tuple[str, float, int, int], ...]:
    """(profile, compute share, MiB, compute slices) of the model's classic profiles, smallest first."""
    model = get_model(model_key)
    assert model.mig is not None
    out = []
    for name in default_profiles(model):
        p = model.profile(name)
        out.append((name, p.compute_slices / model.mig.compute_slices, p.memory_mib, p.compute_slices))
    return tuple(sorted(out, key=lambda x: (x[1], x[2], x[0])))


def profile_for(model: GpuModel, req: TraceRequest) -> str | None:
    """The smallest profile covering the request's compute share and memory (as the replay
    maps it), or None: it needs the whole GPU's compute (the full-size profile, as good as
    a whole GPU, is not a slice)."""
    want = req.milli / 1000
    for name, share, mib, _ in _profiles(model.key):
        if share + _EPS >= want and mib >= req.memory_mib:
            return name if share < 1 - _EPS else None
    return None


def shards_for(req: TraceRequest, shares: int) -> float:
    """The GPU share ``shares``-way time slicing gives the request (whole shards)."""
    return math.ceil(req.milli * shares / 1000 - _EPS) / shares


def held_share(model: GpuModel, req: TraceRequest, shares: int = 0) -> float:
    """GPU-equivalents a fractional request holds on this model: its MIG profile's share,
    else (no MIG, or ``shares``) its shards' share; 1.0 when nothing smaller holds it."""
    if shares or model.mig is None:
        n = shares or 4
        return shards_for(req, n) if req.memory_mib <= model.memory_mib else 1.0
    name = profile_for(model, req)
    return next(s for p, s, _, _ in _profiles(model.key) if p == name) if name else 1.0


@cache
def maximal_mixes(model_key: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    """The planner's maximal valid combinations of the classic profiles, as counts."""
    model = get_model(model_key)
    seen: list[tuple[tuple[str, int], ...]] = []
    full = {p for p, share, _, _ in _profiles(model_key) if share >= 1 - _EPS}
    for lay in maximal_layouts(model, default_profiles(model)):
        counts = tuple(sorted(Counter(i.profile for i in lay).items()))
        if counts not in seen and not full & {p for p, _ in counts}:
            seen.append(counts)
    return tuple(seen)


def mix_distance(model: GpuModel, need: dict[str, float], mix: dict[str, int]) -> float:
    """How far the mix's compute slices per profile are from the need's (both as shares),
    walking from the largest profile down: a shortfall counts twice a surplus."""
    profs = _profiles(model.key)
    total_need = sum(need.values()) or 1.0
    total_mix = sum(mix.get(p, 0) * c for p, _, _, c in profs) or 1.0
    dist = cum_need = cum_mix = 0.0
    for p, _, _, c in reversed(profs):
        cum_need += need.get(p, 0.0) / total_need
        cum_mix += mix.get(p, 0) * c / total_mix
        dist += 2 * max(0.0, cum_need - cum_mix) + max(0.0, cum_mix - cum_need)
    return dist


def best_mixes(model: GpuModel, need: dict[str, float], n: int = 2) -> list[dict[str, int]]:
    """The ``n`` maximal combinations closest to ``need`` (compute slices per profile);
    ties: more compute slices used, then more instances."""
    profs = {p: c for p, _, _, c in _profiles(model.key)}
    scored = []
    for counts in maximal_mixes(model.key):
        mix = dict(counts)
        used = sum(profs[p] * k for p, k in mix.items())
        scored.append((round(mix_distance(model, need, mix), 9), -used, -sum(mix.values()), sorted(mix.items()), mix))
    scored.sort(key=lambda s: s[:4])
    return [s[4] for s in scored[:n]]


def profile_need(model: GpuModel, d: Demand, hours: Sequence[int]) -> dict[str, float]:
    """Compute-slice seconds each profile is needed for, by the fractional requests in ``hours``."""
    slices = {p: c for p, _, _, c in _profiles(model.key)}
    need: dict[str, float] = {}
    for i, r in enumerate(d.requests):
        if not d.fractional(i):
            continue
        s = sum(d.hour_s[i][h] for h in hours)
        name = profile_for(model, r) if s else None
        if name is not None:
            need[name] = need.get(name, 0.0) + slices[name] * s
    return need


# -- windows ----------------------------------------------------------------------------


def fitted_window(d: Demand, model: GpuModel | None, days: str) -> Window | None:
    """The hours when fractional requests take more than their average share of the load
    (held at ``model``'s rounding): the contiguous window (wrapping midnight) with the
    largest excess, 4 to 20 hours; None when the share is flat over the day."""
    held = (lambda r: held_share(model, r)) if model is not None else (lambda r: r.milli / 1000)
    small_h, whole_h = d.hourly(held)
    share = [s / (s + w) if s + w else math.nan for s, w in zip(small_h, whole_h)]
    known = [s for s in share if s == s]
    if not known or max(known) - min(known) < FLAT:
        return None
    mean = sum(small_h) / (sum(small_h) + sum(whole_h))
    excess = [(s - mean) if s == s else 0.0 for s in share]
    best: tuple[float, int, int] | None = None
    for start in ALL_HOURS:
        for n in range(MIN_WINDOW_H, MAX_WINDOW_H + 1):
            total = sum(excess[(start + i) % HOURS] for i in range(n))
            key = (round(total, 9), -n, -start)
            if best is None or key > (best[0], -best[2], -best[1]):
                best = (round(total, 9), start, n)
    assert best is not None
    if best[0] <= 0:
        return None
    _, start, n = best
    return Window(start, (start + n) % HOURS or HOURS, days)


def config_window(cfg: PoolConfig) -> tuple[Window, str] | None:
    """The config's day window (its first rule for a layout other than the default, on
    whole hours) and that layout, or None."""
    raw = (cfg.raw or {}).get("schedule") or {}
    for r in raw.get("rules") or []:
        if r.get("layout") == raw.get("default"):
            continue
        try:
            sh, sm = (int(x) for x in str(r["start"]).split(":"))
            eh, em = (int(x) for x in str(r["end"]).split(":"))
        except (KeyError, ValueError):
            continue
        if sm or em:
            continue
        return Window(sh, eh, str(r.get("days", "daily"))), str(r["layout"])
    return None


# -- layouts ----------------------------------------------------------------------------


def selector(indices: Sequence[int], count: int) -> str:
    """``all`` for every GPU of the node, else ranges (``0-3``, ``0,2,4-5``)."""
    idx = sorted(indices)
    if len(idx) == count and idx == list(range(count)):
        return "all"
    parts, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        parts.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class Split:
    """How a candidate cuts each model's GPUs: ``fraction`` of them (rounded, at least one
    when there is fractional demand) into ``form``; ``extra`` GPUs more per node."""

    form: str  # mig | shared
    rank: int = 0  # which mix: 0 the closest, 1 the next
    all_gpus: bool = False
    extra: int = 0


@dataclass
class _Models:
    """Per model: its share of fractional load, its mixes and its shard count."""

    fraction: dict[str, float]
    mixes: dict[str, list[dict[str, int]]]
    shares: int


def _models(cfg: PoolConfig, d: Demand, hours: Sequence[int], shares: int) -> _Models:
    keys = sorted({g.model for ns in cfg.nodesets.values() if ns.machine is not None for g in ns.machine.gpus})
    frac, mixes = {}, {}
    for key in keys:
        model = get_model(key)
        small, whole = d.load(hours, lambda r, m=model: held_share(m, r, 0 if m.mig else shares))
        frac[key] = small / (small + whole) if small + whole else 0.0
        if model.mig is not None:
            mixes[key] = best_mixes(model, profile_need(model, d, hours))
    return _Models(frac, mixes, shares)


def split_layout(cfg: PoolConfig, models: _Models, split: Split) -> tuple[dict[str, Any], list[str]]:
    """A layout (YAML shape) for every node set with a machine description, and what it
    does per node set (for the report)."""
    out: dict[str, Any] = {}
    what = []
    for name, ns in cfg.nodesets.items():
        if ns.machine is None:
            continue
        by_model: dict[str, list[int]] = {}
        for g in ns.machine.gpus:
            by_model.setdefault(g.model, []).append(g.index)
        entry: dict[str, Any] = {}
        count = len(ns.machine.gpus)
        for key, idx in sorted(by_model.items()):
            model = get_model(key)
            f = models.fraction.get(key, 0.0)
            k = len(idx) if split.all_gpus and f > 0 else round(f * len(idx))
            if f > 0:
                k = min(len(idx), max(1, k) + split.extra)
            mixes = models.mixes.get(key, [])
            mig = split.form == "mig" and model.mig is not None and mixes
            target: Any
            if mig:
                mix = mixes[min(split.rank, len(mixes) - 1)]
                target = {"mig": dict(sorted(mix.items()))}
                form = "mig " + ", ".join(f"{c}x{p}" for p, c in sorted(mix.items()))
            else:
                target = {"shared": models.shares}
                form = f"shared {models.shares}"
            if k:
                entry[selector(idx[:k], count)] = target
            if k < len(idx):
                entry[selector(idx[k:], count)] = "whole"
            what.append(f"{name}: {k} of {len(idx)} {key} {form}" if k else f"{name}: {key} whole")
        out[name] = entry
    return out, what


def _whole_layout(cfg: PoolConfig) -> tuple[str, dict[str, Any] | None]:
    """The config's layout with every GPU whole on every node, or a new one (name, YAML)."""
    for name, entries in cfg.layouts.items():
        if all(all(t.mode == "whole" for _, t in e.entries) for e in entries) and all(
            cfg.covers(name, n) for n in cfg.all_nodes()
        ):
            return name, None
    name = _free_name(cfg, "whole")
    return name, {ns: {"all": "whole"} for ns in cfg.nodesets}


def _free_name(cfg: PoolConfig, base: str) -> str:
    name, i = base, 2
    while name in cfg.layouts:
        name, i = f"{base}_{i}", i + 1
    return name


def _shares(d: Demand) -> int:
    """Shards per time-sliced GPU: about one per median fractional request, 2 to 8."""
    fr = sorted(r.milli for i, r in enumerate(d.requests) if d.fractional(i))
    if not fr:
        return 4
    median = fr[len(fr) // 2]
    return min(8, max(2, round(1000 / median)))


def candidates(
    cfg: PoolConfig, jobs: Sequence[SimJob], epoch: datetime, limit: int = MAX_CANDIDATES
) -> tuple[list[Candidate], Demand]:
    """Up to ``limit`` candidates for this demand, most promising first (the replay decides)."""
    tz = cfg.schedule.tz if cfg.schedule is not None else None
    d = demand(jobs, epoch, tz)
    tzname = str(((cfg.raw or {}).get("schedule") or {}).get("timezone", "local"))
    whole, whole_yaml = _whole_layout(cfg)
    night = cfg.schedule.default if cfg.schedule is not None else whole
    if cfg.schedule is not None and not all(cfg.covers(night, n) for n in _described(cfg)):
        night = whole
    advised = _free_name(cfg, ADVISED)
    shares = _shares(d)
    cw = config_window(cfg)
    days = cw[0].days if cw else ("mon-fri" if d.weekend_share < 0.1 else "daily")
    ref = _reference_model(cfg)
    fw = fitted_window(d, ref, days)
    windows: list[tuple[Window, str]] = []
    if cw:
        windows.append((cw[0], "the config's day window"))
    if fw and (not cw or fw.hours != cw[0].hours):
        windows.append((fw, "fitted to the hours when fractional requests dominate"))
    small = any(d.fractional(i) for i in range(len(d.requests)))

    out: list[Candidate] = []
    seen: list[tuple[str, str]] = []

    def add(label: str, why: str, layout: dict[str, Any], window: Window | None) -> None:
        layouts = {advised: layout}
        default = night if window is not None else advised
        if default == whole and whole_yaml is not None:
            layouts[whole] = whole_yaml
        sched: dict[str, Any] = {"timezone": tzname, "default": default, "rules": []}
        if window is not None:
            sched["rules"] = [window.rule(advised)]
        key = (repr(sorted(layout.items())), window.text if window else "")
        if key in seen:
            return
        seen.append(key)
        out.append(Candidate(label, why, layouts, sched))

    if small:
        for window, whence in windows or [(None, "")]:  # type: ignore[list-item]
            hours = window.hours if window is not None else ALL_HOURS
            models = _models(cfg, d, hours, shares)
            when = f"day {window.text}" if window is not None else "static"
            lay, what = split_layout(cfg, models, Split("mig"))
            add(f"{when}: split", _why(what, whence, hours, models), lay, window)
        best_window = fw or (cw[0] if cw else None)
        hours = best_window.hours if best_window is not None else ALL_HOURS
        models = _models(cfg, d, hours, shares)
        when = f"day {best_window.text}" if best_window is not None else "static"
        variants = [
            (Split("mig", rank=1), "second-closest mix"),
            (Split("shared"), f"time-sliced {shares} ways"),
            (Split("mig", extra=1), "one GPU more cut"),
        ]
        if max(models.fraction.values(), default=0.0) >= ALL_CUT:  # mostly fractional: cut them all
            variants.insert(0, (Split("mig", all_gpus=True), "every GPU cut"))
        for split, label in variants:
            lay, what = split_layout(cfg, models, split)
            add(f"{when}: {label}", _why(what, "", hours, models), lay, best_window)
        if windows:  # the split all the time
            models = _models(cfg, d, ALL_HOURS, shares)
            lay, what = split_layout(cfg, models, Split("mig"))
            add("static: split", _why(what, "all day", ALL_HOURS, models), lay, None)
    # every GPU whole, all the time
    sched = {"timezone": tzname, "default": whole, "rules": []}
    wl = {whole: whole_yaml} if whole_yaml is not None else {}
    out.append(Candidate("static: every GPU whole", "no MIG and no time slicing, day and night", wl, sched))
    if len(out) > limit:  # keep the whole-GPU one
        out = [*out[: limit - 1], out[-1]]
    return out, d


def _described(cfg: PoolConfig) -> list[str]:
    return [n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine is not None]


def _reference_model(cfg: PoolConfig) -> GpuModel | None:
    """The MIG-capable model with the most GPUs (its rounding weighs fractional load), or None."""
    count: Counter[str] = Counter()
    for ns in cfg.nodesets.values():
        if ns.machine is not None:
            for g in ns.machine.gpus:
                count[g.model] += len(ns.nodes)
    for key, _ in count.most_common():
        if get_model(key).mig is not None:
            return get_model(key)
    return None


def _why(what: list[str], whence: str, hours: Sequence[int], models: _Models) -> str:
    shares = ", ".join(f"{k} {100 * f:.0f} %" for k, f in sorted(models.fraction.items()) if f > 0)
    head = f"fractional requests' share of the load ({len(list(hours))} h): {shares or 'none'}"
    return "; ".join(x for x in (whence, head, *what) if x)
