"""Friendly GPU requests → GRES and constraints (pure; the wrapper and job_submit.lua agree).

The *submit catalog* (``gpupool-submit.json``, written by ``gpupool gres install``)
says, per layout, which GRES the cluster offers: MIG types with their memory,
whole-GPU types with the largest NVLink-connected set a node can give, and
time-sliced GPU types with their share count; plus the schedule and the site's
rules.  Given a request and the time, :func:`decide` picks in the layout due
now, else in the next one (saying when it starts), else refuses.

The same procedure is rendered into ``job_submit.lua``; tests submit the same
requests both ways to the real slurmctld and compare.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from slurm_gpupool.core.policy.schedule import Rule, Schedule, parse_clock

TYPE_CHECKING = False  # typing costs gpupool-sbatch ~5 ms to import; mypy knows this idiom

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

NVLINK_SIZES = (2, 4, 8)
# One explicit ASCII grammar for numbers, the one job_submit.lua applies (its tonumber and
# Python's float() disagree: '1_0', '٠.٥', 'nan', ' 5' against '0x1', '.5', '5.'):
# DIGITS[.DIGITS]; a size may end in a unit K, M, G or T, then i, b or ib (any case).
_DECIMAL = r"[0-9]+(?:\.[0-9]+)?"
_SIZE = re.compile(rf"({_DECIMAL})(?:([kmgt])(i?b?))?", re.IGNORECASE | re.ASCII)
_FRACTION = re.compile(rf"({_DECIMAL})(%?)|({_DECIMAL})/({_DECIMAL})", re.ASCII)


class RequestError(ValueError):
    """A request that no layout can meet, or that makes no sense (exit 2)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


MAX_GPU_MEM_MIB = 1 << 30  # 1 PiB: a larger request is a typo


def parse_size_mib(text: str) -> int:
    """``18G``, ``18GB``, ``18GiB``, ``18000M``, ``0.5T`` → MiB (decimal and binary both as GiB, like Slurm)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise RequestError(f"--gpu-mem={text[:40]}: expected a size like 18G or 18000M")
    value, unit = float(m.group(1)), (m.group(2) or "m").lower()
    mib = value * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]
    if mib <= 0:
        raise RequestError(f"--gpu-mem={text[:40]}: must be more than 0")
    if not math.isfinite(mib) or mib > MAX_GPU_MEM_MIB:
        raise RequestError(f"--gpu-mem={text[:40]}: more than any GPU has (at most 1P)")
    return math.ceil(mib)


def parse_fraction(text: str) -> float:
    """``0.25``, ``25%``, ``1/4`` → 0.25 (a share of one GPU, at most 1)."""
    m = _FRACTION.fullmatch(text)
    if not m or (m.group(4) is not None and float(m.group(4)) == 0):
        raise RequestError(f"--gpu-share={text[:40]}: expected a fraction like 0.25, 25% or 1/4")
    if m.group(1) is not None:
        f = float(m.group(1)) / 100 if m.group(2) else float(m.group(1))
    else:
        f = float(m.group(3)) / float(m.group(4))
    if not 0 < f <= 1:
        raise RequestError(f"--gpu-share={text[:40]}: must be more than 0 and at most 1 (one GPU)")
    return f


class Request:
    __slots__ = ("amount", "kind", "text")

    def __init__(self, kind: str, amount: float, text: str) -> None:
        self.kind = kind  # "mem" | "share" | "nvlink"
        self.amount = amount  # MiB, fraction, or GPU count
        self.text = text  # as the user wrote it, for messages


class Choice:
    """The GRES (and constraint) that meets a request, and in which layout."""

    __slots__ = ("constraint", "gres", "layout", "offer", "why")

    def __init__(self, gres: str, constraint: str | None, layout: str, offer: dict[str, Any], why: str) -> None:
        self.gres, self.constraint, self.layout, self.offer, self.why = gres, constraint, layout, offer, why


class Decision:
    __slots__ = ("choice", "later", "notes")

    def __init__(
        self,
        choice: Choice | None = None,
        later: tuple[str, datetime | None] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.choice = choice
        self.later = later  # (layout, when) if only a later layout meets it; when None: not scheduled
        self.notes = notes or []


def schedule_of(catalog: dict[str, Any]) -> Schedule | None:
    raw = catalog.get("schedule")
    if not raw:
        return None
    tz = None
    if raw.get("timezone") not in (None, "local"):
        from zoneinfo import ZoneInfo

        tz = ZoneInfo(raw["timezone"])
    rules = tuple(
        Rule(r["layout"], frozenset(r["days"]), parse_clock(r["start"]), parse_clock(r["end"])) for r in raw["rules"]
    )
    return Schedule(raw["default"], rules, tz)


def _nvlink_feature(n: int) -> str:
    return f"nvlink{next(s for s in NVLINK_SIZES if s >= n)}"


def share_shards(amount: float, o: dict[str, Any]) -> int | None:
    """The fewest shards of a time-sliced offer that hold ``amount`` of a GPU, or None when
    one device's shares do not (``--gpu-share`` asks for a fraction of a GPU: a shard of a
    time-sliced 1g slice of seven holds 1/7 of it per share).  ``compute_share`` is rounded
    to 6 digits in the catalog, hence the looser tolerance on MIG devices."""
    per = o.get("compute_share") or 1
    k = max(1, math.ceil(amount * o["shares"] / per - (1e-9 if per >= 1 else 1e-3)))
    return k if k <= o["shares"] else None


def choose(request: Request, offers: list[dict[str, Any]], layout: str) -> Choice | None:
    """The best offer of one layout for a request (deterministic tie-breaks)."""
    if request.kind == "mem":
        fits = [o for o in offers if o["kind"] in ("mig", "whole") and o["memory_mib"] >= request.amount]
        if not fits:
            return None
        o = min(fits, key=lambda o: (o["memory_mib"], o["kind"] != "mig", -o["count"], o["type"]))
        what = "MIG profile" if o["kind"] == "mig" else "whole GPU"
        why = f"--gpu-mem={request.text}: smallest {what} with enough memory ({o['memory_mib']} MiB) in layout {layout}"
        return Choice(f"gpu:{o['type']}:1", None, layout, o, why)
    if request.kind == "share":
        shared = [o for o in offers if o["kind"] == "shared" and share_shards(request.amount, o) is not None]
        if not shared:
            return None

        def over(o: dict[str, Any]) -> float:  # how much more of a GPU the shards hold than asked
            return (share_shards(request.amount, o) or 0) * (o.get("compute_share") or 1) / o["shares"] - request.amount

        o = min(shared, key=lambda o: (over(o), -o["count"], o["type"]))
        k = share_shards(request.amount, o) or 0
        device = "MIG device" if o.get("compute_share") else "GPU"
        why = (
            f"--gpu-share={request.text}: {k} of the {o['shares']} shares of a {o['type']} {device} in layout {layout}"
        )
        return Choice(f"shard:{o['type']}:{k}", None, layout, o, why)
    if request.kind == "type":  # a typed request as given: is the type offered here at all
        found = [o for o in offers if o["type"] == request.text]
        return Choice(f"gpu:{request.text}", None, layout, found[0], "") if found else None
    n = int(request.amount)
    if n > NVLINK_SIZES[-1]:
        return None
    fits = [o for o in offers if o["kind"] == "whole" and o.get("nvlink_clique", 0) >= n]
    if not fits:
        return None
    o = min(fits, key=lambda o: (o["nvlink_clique"], -o["nodes"], o["type"]))
    feature = _nvlink_feature(n)
    why = f"--gpus-nvlink={n}: whole {o['type']} GPUs on nodes with {feature} in layout {layout}"
    return Choice(f"gpu:{o['type']}:{n}", feature, layout, o, why)


ELASTIC = "elastic"  # the layout a choice is made in during an elastic period: every layout's offers


def elastic_now(catalog: dict[str, Any], now: datetime) -> bool:
    """Is ``now`` in an elastic period (``schedule.mode: elastic``, within ``during``)?"""
    el = catalog.get("elastic")
    if not isinstance(el, dict):
        return False
    during = el.get("during") or []
    sched = schedule_of(catalog)
    return not during or (sched is not None and sched.due(now) in during)


def _idle_first(
    request: Request,
    c: Choice,
    offers: list[dict[str, Any]],
    idle: dict[str, int],
    may_use: Callable[[dict[str, Any]], bool],
) -> Choice:
    """In an elastic period, a slice or shares that nothing has idle now give way to what
    is idle and holds the request, in this order: the same size elsewhere (a slice of the
    same compute share on another model, shares of another time-sliced type), then the
    smallest idle whole GPU with that memory, then (``--gpu-mem``) a larger idle slice;
    only what ``may_use`` allows (the job's tier: a tier of slices and shards never gets a
    whole GPU).  The job starts now instead of waiting for the pool to reshape; ``gpupool
    simulate`` replays the same order (``RequestMapper.idle_alternatives``: whole GPUs
    before larger slices, which bigger jobs need: on the openb mix the other order doubled
    the p90 wait).  ``idle``: devices by type; for a time-sliced type the most shards
    free on one GPU."""
    kind = c.offer["kind"]
    if request.kind not in ("mem", "share") or kind == "whole":
        return c

    def shards(o: dict[str, Any]) -> int:
        return share_shards(request.amount, o) or o["shares"] + 1  # (more than a device has: never idle)

    def free(o: dict[str, Any]) -> bool:
        return idle.get(o["type"], 0) >= (shards(o) if o["kind"] == "shared" else 1) and may_use(o)

    if idle.get(c.offer["type"], 0) >= (shards(c.offer) if kind == "shared" else 1):
        return c
    mib = request.amount if request.kind == "mem" else 0
    ready = [o for o in offers if free(o)]  # choose() keeps to the memory asked for
    share = c.offer.get("compute_share")
    same = [o for o in ready if o["kind"] == kind and (kind == "shared" or o.get("compute_share") == share)]
    wholes = [o for o in ready if o["kind"] == "whole" and o["memory_mib"] >= mib]
    larger = [o for o in ready if o["kind"] == "mig"]
    alt = choose(request, same, ELASTIC)
    if alt is None and wholes:
        o = min(wholes, key=lambda o: (o["memory_mib"], -o["count"], o["type"]))
        alt = Choice(f"gpu:{o['type']}:1", None, ELASTIC, o, "")
    if alt is None and request.kind == "mem":
        alt = choose(request, larger, ELASTIC)
    if alt is None:
        return c
    what = "MIG slice" if kind == "mig" else "shares"
    option = "--gpu-mem" if request.kind == "mem" else "--gpu-share"
    held = alt.gres.split(":", 1)[1].rsplit(":", 1)[0]
    alt.why = f"{option}={request.text}: no {c.offer['type']} {what} idle now, {held} is (elastic period)"
    return alt


def decide(
    catalog: dict[str, Any],
    request: Request,
    now: datetime,
    idle: Callable[[], dict[str, int] | None] | None = None,
    may_use: Callable[[dict[str, Any]], bool] = lambda o: True,
) -> Decision:
    """Meet the request with what is offered now, else with what comes next, else refuse.

    "Now" is the layout Slurm's GRES were last installed from (``installed``), or
    the schedule's due layout where nodes are mixed or that is unknown.  "Next" is
    the due layout if the nodes are not in it yet (the repartitioner is on its way),
    then the schedule's next change.  No layout at all: RequestError (exit 2).

    In an elastic period the catalog's ``elastic.offers`` count (every layout on the nodes
    the policy may put in it: nodes are where demand put them), and ``idle()`` (``sinfo``;
    asked only for a slice or shares) may turn the choice to what is idle now among the
    offers ``may_use`` allows (:func:`_idle_first`).
    """
    layouts: dict[str, Any] = catalog["layouts"]
    if elastic_now(catalog, now):
        offers = catalog["elastic"]["offers"]
        c = choose(request, offers, ELASTIC)
        if c is None:
            option = {"mem": "gpu-mem", "share": "gpu-share"}.get(request.kind, "gpus-nvlink")
            raise RequestError(
                f"--{option}={request.text}: no layout of this cluster can ever offer that",
                largest_offer(request, layouts),
            )
        asks = catalog["elastic"].get("idle_first", True) and request.kind in ("mem", "share")
        have = idle() if idle is not None and asks and c.offer["kind"] != "whole" else None
        return Decision(_idle_first(request, c, offers, have, may_use) if have is not None else c)
    sched = schedule_of(catalog)
    installed: str | None = catalog.get("installed")
    if sched is None and installed is None:  # no schedule: any layout may be active
        for name in sorted(layouts):
            c = choose(request, layouts[name]["offers"], name)
            if c:
                return Decision(c)
        raise RequestError(f"{request.text}: no layout of this cluster offers that", largest_offer(request, layouts))
    due: str = sched.due(now) if sched else str(installed)
    current: str = installed or due
    c = choose(request, layouts.get(current, {"offers": []})["offers"], current)
    if c:
        return Decision(c)
    upcoming: list[tuple[str, datetime]] = [(due, now)] if due != current else []
    nxt = sched.next_change(now) if sched else None
    if nxt:
        upcoming.append((nxt[1], nxt[0]))
    for name, when in upcoming:
        c = choose(request, layouts.get(name, {"offers": []})["offers"], name)
        if c:
            return Decision(c, later=(name, when))
    for name in sorted(layouts):
        c = choose(request, layouts[name]["offers"], name)
        if c:
            return Decision(c, later=(name, None))  # no date: the schedule does not bring it next
    option = {"mem": "gpu-mem", "share": "gpu-share"}.get(request.kind, "gpus-nvlink")
    raise RequestError(
        f"--{option}={request.text}: no layout of this cluster can ever offer that", largest_offer(request, layouts)
    )


def typed_later(catalog: dict[str, Any], typ: str, now: datetime) -> tuple[str, datetime | None] | None:
    """A typed request (``--gres=gpu:a100:8``) for a type that every node's installed layout
    lacks but another layout offers: that layout and when it comes (Slurm would refuse
    the job now with a generic "Requested node configuration is not available").
    Types no layout offers are not ours to judge (GPUs gpupool does not manage)."""
    layouts = catalog["layouts"]
    if catalog.get("installed") not in layouts or not any(
        o["type"] == typ for lay in layouts.values() for o in lay["offers"]
    ):
        return None
    return decide(catalog, Request("type", 0, typ), now).later


def largest_offer(request: Request, layouts: dict[str, Any]) -> str:
    """The hint for a refused request: the most any layout offers of that kind."""
    offers = [(name, o) for name, lay in sorted(layouts.items()) for o in lay["offers"]]
    if request.kind == "mem":
        best = [(o["memory_mib"], o["type"], name) for name, o in offers if o["kind"] in ("mig", "whole")]
        if best:
            mib, typ, name = max(best)
            return f"the most GPU memory offered is {mib} MiB ({typ}, layout {name})"
    elif request.kind == "share":
        return "no layout of this cluster time-slices a GPU; ask for --gpu-mem instead"
    else:
        best = [(o.get("nvlink_clique", 0), o["type"], name) for name, o in offers if o["kind"] == "whole"]
        if best and max(best)[0] >= 2:
            n, typ, name = max(best)
            return f"the most NVLink-connected whole GPUs on one node is {n} ({typ}, layout {name})"
    return "no layout of this cluster offers GPUs for that"


def merge_constraint(user: str | None, ours: str) -> tuple[str, str | None]:
    """AND our feature into the user's constraint; a note if we cannot (Slurm 22.05 has no parentheses)."""
    if not user:
        return ours, None
    if ours in re.split(r"[&|,\[\]*]", user):
        return user, None
    if any(c in user for c in "|[]"):
        return user, f"your --constraint {user!r} has OR terms; {ours} was not added (Slurm 22.05 has no parentheses)"
    return f"{user}&{ours}", None


def _offers_problem(offers: Any, where: str) -> str | None:
    if not isinstance(offers, list):
        return f"{where} has no offers list"
    for o in offers:
        if not isinstance(o, dict) or o.get("kind") not in ("mig", "whole", "shared"):
            return f"{where}: an offer of unknown kind"
        if not isinstance(o.get("type"), str) or not all(
            isinstance(o.get(k), int) and not isinstance(o.get(k), bool) and o[k] >= 0
            for k in ("memory_mib", "count", "nodes")
        ):
            return f"{where}: offer {str(o.get('type'))[:40]!r} lacks its type, memory or counts"
        if o["kind"] == "shared" and not (isinstance(o.get("shares"), int) and o["shares"] > 0):
            return f"{where}: shared offer {o['type']!r} has no share count"
    return None


def catalog_problem(data: Any) -> str | None:
    """What is wrong with a submit catalog read from disk (None: fine).

    The wrapper runs for every submission: a catalog someone truncated, hand-edited or
    wrote for another version is reported and ignored, never a crash."""
    if not isinstance(data, dict) or data.get("schema") != 1:
        return "not a schema 1 submit catalog"
    layouts = data.get("layouts")
    if not isinstance(layouts, dict) or not layouts:
        return "no layouts"
    for name, lay in layouts.items():
        problem = _offers_problem(lay.get("offers") if isinstance(lay, dict) else None, f"layout {name!r}")
        if problem:
            return problem
    if not isinstance(data.get("rules", {}), dict):
        return "rules is not a mapping"
    sched = data.get("schedule")
    if sched is not None:
        try:
            schedule_of(data)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return f"unreadable schedule ({type(e).__name__}: {e})"
        if sched.get("default") not in layouts or any(r.get("layout") not in layouts for r in sched["rules"]):
            return "the schedule names a layout the catalog lacks"
    if data.get("installed") not in (None, *layouts):
        return "installed names a layout the catalog lacks"
    if not isinstance(data.get("sbatch", ""), str):
        return "sbatch is not a Slurm release"
    el = data.get("elastic")
    if el is not None:
        if not (
            isinstance(el, dict)
            and isinstance(el.get("during", []), list)
            and all(d in layouts for d in el.get("during", []))
            and isinstance(el.get("idle_first", True), bool)
        ):
            return "elastic: its periods are not layouts of the catalog, or idle_first is not true/false"
        problem = _offers_problem(el.get("offers"), "elastic")
        if problem:
            return problem
    tiers = data.get("tiers", {})
    if not isinstance(tiers, dict) or not all(
        isinstance(t, dict)
        and isinstance(t.get("qos"), str)
        and isinstance(t.get("gres"), list)
        and isinstance(t.get("grace_s"), int)
        and isinstance(t.get("signal"), (str, type(None)))
        for t in tiers.values()
    ):
        return "tiers is not a mapping of tiers with qos, gres, signal and grace_s"
    quotas = data.get("quotas", {})
    if not isinstance(quotas, dict) or not all(
        isinstance(q, dict) and all(isinstance(n, int) for n in q.values()) for q in quotas.values()
    ):
        return "quotas is not a mapping of accounts to TRES counts"
    return None
