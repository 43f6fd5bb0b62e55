"""Which nodes a layout switch changes, and how long a switch of N nodes takes.

Pure: the repartitioner feeds it what Slurm says (each node's ``layout_<name>``
feature, whether it is usable) and what the journal says (nodes an unfinished
run left midway); it answers per node: change, keep or skip, and why.  The
timing model is what ``benchmarks/bench_repartition.py`` uses to extrapolate
from measured sandbox switches to 1,000 nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CHANGE, KEEP, SKIP = "change", "keep", "skip"


@dataclass(frozen=True)
class NodeView:
    """What the plan needs to know of a node."""

    name: str
    layout: str | None  # from its layout_<name> feature; None if unknown
    usable: bool = True  # registered and responding
    state: str = "idle"
    retry: bool = False  # drained by an earlier switch that failed: switch again
    reason: str = ""


@dataclass(frozen=True)
class NodeDecision:
    name: str
    action: str  # change | keep | skip
    current: str | None
    target: str
    why: str


@dataclass
class SwitchPlan:
    target: str
    decisions: list[NodeDecision] = field(default_factory=list)

    def nodes(self, action: str) -> list[str]:
        return [d.name for d in self.decisions if d.action == action]

    @property
    def changing(self) -> list[str]:
        return self.nodes(CHANGE)


def plan_switch(
    target: str,
    covered: Iterable[str],
    views: Mapping[str, NodeView],
    requested: Iterable[str] | None = None,
    unfinished: Iterable[str] = (),
    force: bool = False,
) -> SwitchPlan:
    """Nodes of ``covered`` (those the target layout describes), limited to ``requested``.

    A node changes when Slurm shows another layout (or none), or when an earlier run
    left it midway (``unfinished``): its GPUs may already be switched while its GRES
    are not; with ``force`` every usable node is switched (re-applied and verified).
    Nodes Slurm does not know or cannot reach are skipped, never touched.
    """
    wanted = set(requested) if requested is not None else None
    midway = set(unfinished)
    plan = SwitchPlan(target)
    for name in sorted(covered):
        if wanted is not None and name not in wanted:
            continue
        v = views.get(name)
        if v is None:
            plan.decisions.append(NodeDecision(name, SKIP, None, target, "not known to Slurm"))
        elif not v.usable:
            plan.decisions.append(NodeDecision(name, SKIP, v.layout, target, f"not usable ({v.state})"))
        elif name in midway:
            plan.decisions.append(NodeDecision(name, CHANGE, v.layout, target, "an earlier run left it midway"))
        elif v.retry:
            why = f"drained by an earlier switch ({v.reason}): again"
            plan.decisions.append(NodeDecision(name, CHANGE, v.layout, target, why))
        elif force:
            plan.decisions.append(NodeDecision(name, CHANGE, v.layout, target, "forced: apply and verify again"))
        elif v.layout == target:
            plan.decisions.append(NodeDecision(name, KEEP, v.layout, target, f"already in layout {target}"))
        else:
            was = f"layout {v.layout}" if v.layout else "no known layout"
            plan.decisions.append(NodeDecision(name, CHANGE, v.layout, target, f"{was} -> {target}"))
    return plan


def changing_after(next_plan: SwitchPlan, due: SwitchPlan) -> list[str]:
    """The nodes the next switch will change once the due one is done, judged on the layouts
    the due switch leaves (``--scheduled --dry-run`` shows the reservation ahead the real
    run makes after its switch, not one computed on today's layouts)."""
    moved = set(due.changing) if due.target != next_plan.target else set()
    kept = set(due.changing) - moved  # switched to the next layout already by the due run
    out = []
    for d in next_plan.decisions:
        if d.name in kept:
            continue
        if (d.action != SKIP) if d.name in moved else (d.action == CHANGE):
            out.append(d.name)
    return out


def batches(items: Sequence[str], size: int) -> list[list[str]]:
    """``items`` in consecutive groups of at most ``size`` (restart batches)."""
    return [list(items[i : i + size]) for i in range(0, len(items), max(1, size))]


@dataclass(frozen=True)
class Timings:
    """Measured seconds of one switch's phases (sandbox medians, or a site's own)."""

    reserve_s: float  # create the reservation, check the jobs
    apply_s: float  # one node's `srun ... node apply` (GPUs change in parallel inside it)
    install_s: float  # render and install GRES for the cluster
    ctld_restart_s: float  # slurmctld back and answering
    slurmd_stop_s: float  # one `stop_slurmd` command for a batch of nodes
    slurmd_start_s: float  # one `start_slurmd` command for a batch (until they register)
    verify_s: float  # sinfo shows the expected GRES, resume


def estimate_switch_s(
    n_nodes: int, parallel: int, restart_batch: int, t: Timings, wave_size: int = 0
) -> dict[str, float]:
    """Wall time of a switch of ``n_nodes`` idle nodes, in waves of ``wave_size`` nodes (0:
    one wave of all).  Per wave: applies run ``parallel`` at a time, GRES are installed,
    slurmds stopped in ``ceil(n/restart_batch)`` sequential batches, slurmctld restarted
    once, the slurmds started in as many batches, and the wave verified.

    A node is out of service (drained, ``out_of_service_s`` in the report) from its apply to
    the end of its wave's verify, so in one wave it grows with the batches, not with the
    node's own work; smaller waves bound it, at one slurmctld restart each.  The run's
    reservation holds a node until its wave is through (no job may start there meanwhile),
    so a node of the last wave is unavailable for the whole switch; on average over the
    nodes, for half of it."""
    size = max(1, n_nodes if wave_size <= 0 else min(wave_size, n_nodes))
    waves = max(1, math.ceil(n_nodes / size))
    sizes = [size] * (waves - 1) + [max(0, n_nodes - size * (waves - 1))]  # the last may be smaller

    def phases(k: int) -> tuple[int, int, float, float]:
        """A wave of ``k`` nodes: its apply batches, restart batches, apply and restart time."""
        applies, restarts = math.ceil(k / max(1, parallel)), math.ceil(k / max(1, restart_batch))
        restart = restarts * t.slurmd_stop_s + t.ctld_restart_s + restarts * t.slurmd_start_s
        return applies, restarts, applies * t.apply_s, restart

    each = [phases(k) for k in sizes]
    lengths = [apply + t.install_s + restart + t.verify_s for _, _, apply, restart in each]
    ends = [sum(lengths[: k + 1]) for k in range(waves)]  # each wave's end, from the first apply
    return {
        "nodes": n_nodes,
        "waves": waves,
        "apply_batches": sum(e[0] for e in each),  # of ``parallel`` nodes, over every wave
        "restart_batches": sum(e[1] for e in each),
        "apply_s": sum(e[2] for e in each),
        "restart_s": sum(e[3] for e in each),
        "total_s": t.reserve_s + ends[-1],
        "node_out_of_service_s": max(lengths),
        "worst_node_unavailable_s": ends[-1],
        "mean_node_unavailable_s": sum(k * end for k, end in zip(sizes, ends, strict=True)) / max(1, n_nodes),
    }
