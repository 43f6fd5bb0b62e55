"""``schedule: {mode: elastic, elastic: {...}}``: the bounds of demand-driven repartitioning.

::

    schedule:
      mode: elastic            # clock (the default): the rules alone decide
      default: night
      rules: [{layout: day, days: mon-fri, start: "08:00", end: "20:00"}]
      elastic:
        during: [day]          # the schedule's periods in which demand decides (default: always)
        layouts: {dgx: [day, night]}   # per node set, the layouts it may take (default: all that cover it)
        floors: {whole: 16, mig: 2, 1g.5gb: 1}   # GPU-equivalents kept at all times, per kind or GRES type
        max_changing: 2        # nodes switching at once
        window: 5m             # batching window
        cooldown: 1h           # per node, between two switches
        min_gain: 1            # GPU-equivalents of waiting jobs a switch must serve
        max_wait: 1h           # ... unless it starts a job that has waited this long
        drain_within: 2h       # for jobs waiting max_wait that no idle node serves, drain a busy node
                               # whose jobs end within this (time limits; default 0: idle nodes only)

Outside ``during`` the clock's rules switch every node as in ``mode: clock``.  The
decision itself is :func:`slurm_gpupool.core.policy.elastic.decide`; docs/elastic.md is the
reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_gpupool.core.policy.durations import parse_duration_s
from slurm_gpupool.core.policy.elastic import KINDS, Bounds
from slurm_gpupool.util.validate import Where

CLOCK, ELASTIC = "clock", "elastic"
MODES = (CLOCK, ELASTIC)


@dataclass(frozen=True)
class ElasticSettings:
    bounds: Bounds
    layouts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node set -> allowed layouts
    during: tuple[str, ...] = ()  # due layouts (periods) in which demand decides; () = always
    # gpupool-sbatch gives a slice or shares job an idle whole GPU when none of those is idle
    idle_first: bool = True

    def active(self, due: str | None) -> bool:
        """Does demand decide while ``due`` is the clock's layout?"""
        return not self.during or due in self.during


def parse_elastic(raw: Any, top: Where, nodesets: Iterable[str], layouts: Iterable[str]) -> ElasticSettings | None:
    """``schedule.mode`` and ``schedule.elastic`` (None: clock mode)."""
    if not isinstance(raw, dict):
        return None
    w = top.key("schedule")
    mode = w.optional(raw, "mode", str, CLOCK)
    if mode not in MODES:
        raise w.key("mode").error(f"unknown mode {mode!r}", hint="clock or elastic")
    el = raw.get("elastic")
    if mode == CLOCK:
        if el is not None:
            raise w.key("elastic").error("only with mode: elastic")
        return None
    we = w.key("elastic")
    el = we.check_type(el if el is not None else {}, dict)
    we.only_keys(
        el,
        {"during", "layouts", "floors", "max_changing", "window", "cooldown", "min_gain", "max_wait", "drain_within"}
        | {"idle_first"},
    )
    names, sets = set(layouts), set(nodesets)
    during = tuple(we.optional(el, "during", list, []))
    for i, lay in enumerate(during):
        we.key("during").index(i).check_type(lay, str)  # before `in`: a list there is unhashable
        if lay not in names:
            raise (
                we.key("during").index(i).error(f"no layout named {lay!r}", hint="layouts: " + ", ".join(sorted(names)))
            )
    allowed: dict[str, tuple[str, ...]] = {}
    wl = we.key("layouts")
    for ns, lays in (we.optional(el, "layouts", dict, {})).items():
        if ns not in sets:
            raise wl.key(ns).error(f"no node set named {ns!r}", hint="node sets: " + ", ".join(sorted(sets)))
        wl.key(ns).check_type(lays, list)
        if not lays:
            raise wl.key(ns).error("name at least one layout (leave the node set out: every layout covering it)")
        for i, lay in enumerate(lays):
            wl.key(ns).index(i).check_type(lay, str)
            if lay not in names:
                raise wl.key(ns).index(i).error(f"no layout named {lay!r}")
        allowed[str(ns)] = tuple(lays)
    floors: dict[str, float] = {}
    wf = we.key("floors")
    for key, value in (we.optional(el, "floors", dict, {})).items():
        wf.key(key).check_type(value, (int, float))
        if value < 0:
            raise wf.key(key).error("a floor cannot be negative")
        floors[str(key)] = float(value)
    max_changing = we.optional(el, "max_changing", int, 2)
    if max_changing < 1:
        raise we.key("max_changing").error("at least 1")
    min_gain = we.optional(el, "min_gain", (int, float), 1.0)
    if min_gain < 0:
        raise we.key("min_gain").error("cannot be negative")
    bounds = Bounds(
        floors=floors,
        max_changing=max_changing,
        window_s=float(_duration(we, el, "window", 300)),
        cooldown_s=float(_duration(we, el, "cooldown", 3600)),
        min_gain_eq=float(min_gain),
        starve_s=float(_duration(we, el, "max_wait", 3600)),
        drain_within_s=float(_duration(we, el, "drain_within", 0)),
    )
    return ElasticSettings(bounds, allowed, during, we.optional(el, "idle_first", bool, True))


def _duration(w: Where, d: dict, key: str, default: int) -> int:

    if d.get(key) is None:
        return default
    try:
        return parse_duration_s(w.key(key).check_type(d[key], (str, int)))
    except ValueError as e:
        raise w.key(key).error(str(e)) from None


def floor_keys_known(floors: Mapping[str, float], types: Iterable[str]) -> list[str]:
    """Floor keys that are neither a kind nor a GRES type of the pool (a typo keeps nothing)."""
    known = set(KINDS) | set(types)
    return sorted(k for k in floors if k not in known)
