"""What a replay measured, as numbers a report prints (pure).

Utilisation, switches and samples cover the window jobs arrive in (the drain of the last
long jobs after it is the same under every policy and would only dilute the comparison).

* **GPU-equivalent utilisation**: GPU-eq seconds held by jobs / GPU-eq seconds offered
  (a node out of service while it switches offers nothing; one reserved for a switch and
  idle does, so the idle time a switch costs shows), overall, per GRES type and per
  period (the layout the schedule has due, or the static layout);
* **waits** (start - first submission, the wait for a later layout included): p50, p90,
  p99, mean, overall and per kind (mig | shard | whole); **job completion time** (end -
  submission);
* **unallocated and fragmented capacity**: time averages of the samples, as fractions of
  the capacity; fragmentation is FGD's measure on our GRES (``meter.Meter.sample``);
* **switches**, node-hours out of service and reserved idle, nodes skipped at the
  deadline, jobs requeued;
* **rounding loss**: GPU-eq held but not asked for (MIG profiles and shard counts round up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from slurm_gpupool.simulate.engine import JobRecord, Result

PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile by linear interpolation (numpy's default), of sorted values."""
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def distribution(values: Sequence[float]) -> dict[str, float]:
    v = sorted(values)
    out = {f"p{q}": percentile(v, q) for q in PERCENTILES}
    out["mean"] = sum(v) / len(v) if v else math.nan
    out["count"] = float(len(v))
    return out


def summarise(res: Result) -> dict[str, Any]:
    """The report of one replay (JSON-ready: plain numbers and strings)."""
    started = [j for j in res.jobs if j.start_s >= 0]
    finished = [j for j in started if j.end_s >= 0]
    cap = sum(res.capacity.values())
    alloc = sum(res.allocated.values())
    by_type: dict[str, dict[str, float]] = {}
    for (_, typ), c in res.capacity.items():
        row = by_type.setdefault(typ, {"capacity_eq_h": 0.0, "allocated_eq_h": 0.0})
        row["capacity_eq_h"] += c / 3600
    for (_, typ), a in res.allocated.items():
        by_type.setdefault(typ, {"capacity_eq_h": 0.0, "allocated_eq_h": 0.0})["allocated_eq_h"] += a / 3600
    by_period: dict[str, dict[str, float]] = {}
    for (period, _), c in res.capacity.items():
        by_period.setdefault(period, {"capacity_eq_h": 0.0, "allocated_eq_h": 0.0})["capacity_eq_h"] += c / 3600
    for (period, _), a in res.allocated.items():
        by_period.setdefault(period, {"capacity_eq_h": 0.0, "allocated_eq_h": 0.0})["allocated_eq_h"] += a / 3600
    for row in (*by_type.values(), *by_period.values()):
        row["utilisation"] = row["allocated_eq_h"] / row["capacity_eq_h"] if row["capacity_eq_h"] else math.nan
    for typ, row in by_type.items():
        row["kind"] = res.kinds.get(typ, "")  # type: ignore[assignment]
    samples = [s for s in res.samples if s[1] > 0]
    weight = sum(s[1] for s in samples)
    kinds = sorted({j.kind for j in started})
    held = sum(j.eq for j in started)
    asked = sum(j.requested_eq for j in started)
    # each partition's and each user's waits, where the jobs name them (a site's accounting)
    by_partition = _by(started, lambda j: j.partition)
    by_user = _by(started, lambda j: j.user)
    return {
        "policy": res.policy,
        "jobs": len(res.jobs),
        "started": len(started),
        "never_started": len(res.jobs) - len(started) - sum(1 for j in res.jobs if j.rejected or j.withdrawn),
        "withdrawn": sum(1 for j in res.jobs if j.withdrawn),
        "rejected": sum(1 for j in res.jobs if j.rejected),
        "rejected_why": _reasons(res.jobs),
        "timeouts": sum(1 for j in finished if j.timeout),
        "horizon_h": res.horizon_s / 3600,
        "window_h": (res.window_s - res.window_from_s) / 3600,
        "utilisation": alloc / cap if cap else math.nan,
        "capacity_eq_h": cap / 3600,
        "allocated_eq_h": alloc / 3600,
        "by_type": dict(sorted(by_type.items())),
        "by_period": dict(sorted(by_period.items())),
        "wait_s": distribution([j.wait_s for j in started]),
        "wait_s_by_kind": {k: distribution([j.wait_s for j in started if j.kind == k]) for k in kinds},
        **({"wait_s_by_partition": by_partition} if by_partition else {}),
        **({"wait_s_by_user": by_user} if by_user else {}),
        "completion_s": distribution([j.end_s - j.submit_s for j in finished]),
        "waited_for_later_layout": sum(1 for j in started if j.eligible_s > j.submit_s),
        "idle_fraction": sum(s[2] for s in samples) / weight if weight else math.nan,
        "fragmented_fraction": sum(s[3] for s in samples) / weight if weight else math.nan,
        "switches": res.switches,
        "out_of_service_node_h": res.out_of_service_s / 3600,
        "reserved_idle_node_h": res.reserved_idle_s / 3600,
        "skipped_at_deadline": res.skipped,
        "requeued": res.requeued,
        "rounding_loss_fraction": (held - asked) / held if held else math.nan,
        "layout_node_h": {k: v / 3600 for k, v in sorted(res.layout_seconds.items())},
    }


def _by(jobs: Sequence[JobRecord], key: Callable[[JobRecord], str]) -> dict[str, dict[str, float]]:
    """The waits of the jobs per value of ``key`` (the jobs that name none left out)."""
    groups: dict[str, list[float]] = {}
    for j in jobs:
        if name := key(j):
            groups.setdefault(name, []).append(j.wait_s)
    return {name: distribution(w) for name, w in sorted(groups.items())}


def _reasons(jobs: Sequence[JobRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for j in jobs:
        if j.rejected:
            out[j.rejected] = out.get(j.rejected, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
