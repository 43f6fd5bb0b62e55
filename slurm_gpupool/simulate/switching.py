"""Switches between layouts, made as the repartitioner makes them (pure).

From ``lead_time_s`` before a switch the changing nodes take only jobs that end before it (the
reservation ahead); at the switch they take no new job (MAINT reservation); each switches once
idle (``switch_s`` out of service), or at its deadline is skipped and switched by the first
cron run after its jobs end; with ``requeue`` its requeueable jobs are requeued after the
grace.  A demand-driven switcher is asked every ``tick_s`` which nodes to change; a drain it
asks for waits for the node's jobs, with no deadline and no requeue.
"""

from __future__ import annotations

import math

from slurm_gpupool.simulate.records import SimNode, free_records, idle
from slurm_gpupool.simulate.replay import BACK, CRON, REQUEUE, TICK
from slurm_gpupool.simulate.scheduler import Scheduler
from slurm_gpupool.simulate.state import INF, Need, NodeState, Pending


class Switching(Scheduler):
    """The clock's switch runs, a demand-driven switcher's ticks, and each node's switch."""

    def _covers(self, layout: str, n: SimNode) -> bool:
        return self.spec.covers(layout, n.name)

    def _ahead(self, at: float, layout: str) -> None:
        """``repartition --scheduled`` reserves the changing nodes from the switch time on."""
        for n in self.nodes:
            if n.target is None and n.layout != layout and self._covers(layout, n):
                n.ahead_at = min(n.ahead_at, at)
        self.dirty = self.changed = True

    def _switch(self, layout: str) -> None:
        """A switch run to ``layout``: its reservation takes the nodes that change."""
        self.meter.new_period(layout, self.now)
        for n in self.nodes:
            n.ahead_at = INF
            if not self._covers(layout, n):
                continue
            if n.target is None:
                if n.layout != layout:
                    self._start_switch(n, layout)
            elif n.out_until > self.now:
                continue  # applying now: once back, it goes on to what is due (_back)
            elif n.layout == layout:  # waiting to leave a layout that is due again
                n.target, n.switch_at, n.idle_since, n.skipped = None, INF, INF, False
                self._set_usable(n, True)
            else:
                n.target, n.switch_at, n.skipped = layout, self.now, False
        self.dirty = self.changed = True

    def _tick(self) -> None:
        """Ask a demand-driven switcher what to change, and make it so."""
        self._schedule_main()
        nodes = [
            NodeState(
                n.name,
                n.layout,
                n.target,
                idle(n),
                n.usable,
                max((e for e, _ in n.running.values()), default=self.now),
                n.since,
                free_records(n),
            )
            for n in self.nodes
        ]
        queued = [e[2] for e in self.queue]
        pending = [self._pending(i, self.need_of_job.get(i)) for i in queued]
        pending += [self._pending(i, None) for i in sorted(self.deferred)]
        by_name = {n.name: n for n in self.nodes}
        for name, layout in self.sw.decide(self.now, nodes, pending):
            n = by_name[name]
            if n.target is None and n.layout != layout and self._covers(layout, n):
                self._start_switch(n, layout, drain=self.sw.drains(name))
        self.dirty = self.changed = True
        self._push(self.now + self.sw.tick_s, TICK, None)

    def _pending(self, i: int, need: Need | None) -> Pending:
        return Pending(self.jobs[i].request, need, self.now - self.recs[i].submit_s, self.jobs[i].limit_s)

    def _start_switch(self, n: SimNode, layout: str, drain: bool = False) -> None:
        """The node enters the run's reservation: no new job; it switches once idle."""
        n.target, n.switch_at, n.skipped, n.requeued, n.drain = layout, self.now, False, False, drain
        self._set_usable(n, False)
        if self.p.requeue and not drain:
            self._push(self.now + self.p.deadline_s, REQUEUE, (n.index, 0))
        if idle(n):
            self._node_idle(n)

    def _node_idle(self, n: SimNode) -> None:
        """A reserved node's last job ended: switch now, or (skipped at the deadline) at the
        next cron run; requeued jobs gone: now."""
        n.idle_since = self.now
        if n.requeued or self.now <= n.switch_at + (0.0 if n.drain else self.p.deadline_s):
            self._go(n)
        else:
            if not n.skipped:
                n.skipped = True
                self.skipped += self._in_window() and not n.drain  # a drain skips by design
            step = self.p.cron_s
            self._push(math.ceil(self.now / step) * step if step > 0 else self.now, CRON, n.index)

    def _cron(self, index: int) -> None:
        n = self.nodes[index]
        if n.target is not None and idle(n) and n.out_until <= self.now:
            self._go(n)

    def _requeue(self, index: int, stage: int) -> None:
        """At the deadline: SIG<checkpoint_signal> to the requeueable jobs; after the grace,
        requeue those still running (the repartitioner's --requeue)."""
        n = self.nodes[index]
        if n.target is None or idle(n) or n.out_until > self.now or n.drain:
            return  # (a drain is never requeued: an earlier switch's event finds it)
        # still running: a job that has ended holds its node through its epilog
        # (``release_s``, COMPLETING in squeue) and the repartitioner requeues only RUNNING
        # jobs (``repartition.next_action``); it frees the node on its own
        live = [i for i in n.running if self.jobs[i].requeue and self.recs[i].end_s > self.now]
        if stage == 0:
            if live:
                self._push(self.now + self.p.grace_s, REQUEUE, (index, 1))
            return
        n.requeued = True
        for i in live:
            rec = self.recs[i]
            self._release(i)
            rec.requeues += 1
            rec.start_s = rec.end_s = -1.0
            self.gen[i] += 1
            self.requeued += self._in_window()
            self._enqueue(i)

    def _go(self, n: SimNode) -> None:
        """Apply the node's new layout: out of service for ``switch_s``."""
        if self._in_window():  # counted while jobs arrive, not while the last ones drain
            self.reserved_s += max(0.0, self.now - n.idle_since)
            self.switches += 1
            self.oos_s += min(self.p.switch_s, self.window - self.now)
        n.out_until = self.now + self.p.switch_s
        self.meter.capacity(n, -1, self.now)
        self._push(n.out_until, BACK, n.index)

    def _back(self, index: int) -> None:
        n = self.nodes[index]
        target = n.target
        assert target is not None
        old = n.layout
        fresh = self._make_node(n.index, n.name, target)
        n.layout, n.free, n.cap, n.shared, n.shares, n.eq = (
            fresh.layout,
            fresh.free,
            fresh.cap,
            fresh.shared,
            fresh.shares,
            fresh.eq,
        )
        n.sock_free, n.cores_free, n.tpc, n.gpu_sock, n.bound = (
            fresh.sock_free,
            fresh.cores_free,
            fresh.tpc,
            fresh.gpu_sock,
            fresh.bound,
        )
        self.meter.relayout(old, n.layout, self.now)
        n.lines.clear()
        self._index_types()
        self.meter.capacity(n, +1, self.now)
        n.target, n.switch_at, n.idle_since, n.skipped, n.requeued = None, INF, INF, False, False
        n.since = self.now
        due = self.sw.due(self.now)
        # the clock moved on while it switched (a demand-driven switcher decides for itself)
        if not self.sw.tick_s and n.layout != due and self._covers(due, n):
            n.target, n.switch_at = due, self.now
            self._node_idle(n)
            return
        self._set_usable(n, True)
        self.dirty = self.changed = True
