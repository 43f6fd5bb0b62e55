"""Slurm's backfill pass over the queue (pure).

**Backfill** (``sched/backfill``, ``backfill.c``: ``_attempt_backfill``) runs every
``bf_interval_s`` when something changed (``_more_work``): each pending job, in priority
order, up to ``bf_max_job_test``, gets the earliest start its time limit allows given running
jobs' limits and the reservations of the jobs before it; it starts now only if that delays
none of them (EASY with reservations for every job tested, as ``sched/backfill`` does), within
``bf_window_s``.  A pass is taken to test its jobs to the end, as with ``bf_continue`` on a
controller whose passes are not cut short (``docs/simulate.md``); jobs beyond
``bf_max_job_test`` wait for a later pass, which one that started something makes due.
A job that cannot start now is planned where and when the select plugin's will-run test
puts it (``willrun``; cons_tres ``_will_run_test``), often later than its exact earliest start.
A job of a preempting QOS that would fit with every job it may preempt gone preempts
(``preemption``) and holds its nodes from now; one that would not is planned as any other,
its preemptable jobs counted as running (Slurm's will-run counts them gone: not modelled).
"""

from __future__ import annotations

import math
from bisect import insort

from slurm_gpupool.simulate.cores import eval_nodes, fit_cpus
from slurm_gpupool.simulate.earliest import NOW, earliest, first_clear, overlaps, rounded
from slurm_gpupool.simulate.preemption import Preemption
from slurm_gpupool.simulate.records import Part, SimNode
from slurm_gpupool.simulate.state import GPU, INF, Need
from slurm_gpupool.simulate.willrun import EXACT, batch, planned_start


class Backfill(Preemption):
    """One backfill pass: reservations for the jobs tested, starts for those that delay none."""

    def _backfill(self) -> None:
        """One ``sched/backfill`` pass: in priority order, each job tested gets the earliest
        start its limit allows around running jobs and the reservations of the jobs before
        it; it starts now only if that delays none of them.

        As in Slurm (``backfill.c``: ``node_space`` holds node bitmaps), a reservation takes
        the job's **whole nodes** for its planned window: a lower job may use such a node
        only if it ends before the window.  Reservations live for one pass, so a pass that
        has no idle record anywhere is skipped.  A job that cannot start now rules out every
        later job of the same request that needs at least as many records, nodes and time:
        such a job is passed over without placing its reservation (the one shortcut here),
        once jobs of its request hold every node that offers it, or ``bf_hold_nodes`` of
        them (until then its reservation is placed as Slurm does: a queue of one request
        holds node after node, and lower jobs see them held).  A job with no start within
        the window places nothing: neither could one needing more."""
        self._schedule_main()
        if not self.queued or not self.changed:
            return  # nothing was freed, submitted or switched since the last pass: it would start nothing
        self.changed = False
        p, q = self.p, self.queue
        untested = len(q) > p.bf_max_job_test
        started = self.started
        if not any(self._idle_now(t) for t in self.by_type):
            return
        self._plan_overdue()
        horizon = self.now + p.bf_window_s
        tested = q[: p.bf_max_job_test]
        need_of_job = self.need_of_job
        # per request shape, (count, nodes) -> the shortest limit that could not start now
        failed: dict[tuple[tuple[str, ...], str], dict[tuple[int, int], float]] = {}
        # per need (by identity: needs are memoised per request and layout), the shortest limit
        # from which its jobs are passed over (``_bar``), until the next mark
        bar_of: dict[int, float] = {}
        plans: dict[int, list[tuple[float, float]]] = {}  # node -> windows reserved for higher jobs
        held: dict[tuple[tuple[str, ...], str], set[int]] = {}  # per request shape, the nodes it reserved
        to_hold: dict[tuple[tuple[str, ...], str], int] = {}  # per request shape, how many it holds
        for _, _, i, nid, limit in tested:
            bar = bar_of.get(nid)
            if bar is None:
                bar = bar_of[nid] = self._bar(need_of_job[i], failed)
            if limit >= bar:
                continue
            need = need_of_job[i]
            chosen = self._earliest_nodes(need, limit, horizon, plans)
            completing = False
            if chosen is not None and chosen[-1][0] <= self.now:
                completing = any(n.completing for _, _, n, _ in chosen)
                if not completing:
                    self._start(i, [(n, parts) for _, _, n, parts in chosen])
                    continue
                # a node of its is completing a job: planned a second from now and held for it
                # in this pass (backfill.c: "Need to wait for in-progress completion/epilog")
                chosen = [(self.now + 1.0, idx, n, parts) for _, idx, n, parts in chosen]
            if (
                self.preempting
                and not completing
                and (took := self._preempt_for(i, True, self._blocked(plans, self.now, self.now + limit))) is not None
            ):
                # it fits with the preemptable jobs gone (_will_run_test): it preempts through
                # select_nodes, which answers ESLURM_NODES_BUSY, and its nodes are held from now
                window = self._window(self.now, limit)
                for n, _ in took:
                    insort(plans.setdefault(n.index, []), window)
                continue
            if chosen is not None and p.will_run != EXACT and not completing:
                chosen = self._planned(need, chosen, limit, horizon, plans)  # None: beyond bf_window
            shape = (need.types, need.kind)
            if chosen is not None:  # a start later: its nodes are held for it from then (_add_reservation)
                at = chosen[-1][0]
                window = self._window(at, limit)
                for _, _, n, _ in chosen:
                    insort(plans.setdefault(n.index, []), window)
            if p.bf_exact or completing:
                continue  # (completing: a job of its request may start now on another node)
            if chosen is not None:  # passed over only once its request holds enough nodes
                held.setdefault(shape, set()).update(n.index for _, _, n, _ in chosen)
                if shape not in to_hold:
                    to_hold[shape] = self._to_hold(need)
                if len(held[shape]) < to_hold[shape]:
                    continue
            # it cannot start now (nor anywhere within the window, when chosen is None): neither
            # can a later job of this request that needs as many records, nodes and time
            marks = failed.setdefault(shape, {})
            marks[(need.count, need.nodes)] = min(limit, marks.get((need.count, need.nodes), INF))
            bar_of.clear()
        if untested and self.started > started:
            self.changed = True  # the next pass reaches jobs this one did not test
        self.dirty = True
        self._schedule_main()

    def _window(self, start: float, limit: float) -> tuple[float, float]:
        """A window from ``start`` for ``limit`` seconds as backfill keeps it (``rounded``)."""
        p = self.p
        return rounded(start, start + limit, p.bf_resolution_s, p.clock_origin_s, p.bf_end_up)

    def _plan_overdue(self) -> None:
        """Running jobs past their ``end_time`` (their limit, or a preemption's grace), whose
        records are still held (until the periodic time-limit check ends them, or their
        completion): backfill never plans them at the check it does not foresee.  Up to
        24.05 it plans them to end at ``end_time + KillWait``, or a second from now once that
        has passed too (cons_tres ``_guess_job_end``, OverTimeLimit=0; Slurm keeps ordering
        and aligning the will-run batches by ``end_time``, here the guessed end takes its
        place).  From 24.11.0 the will-run test removes every job ending before its start
        (``_build_cr_job_list``: ``end_time < args->start``), so it plans them now (here a
        second from now: their records are not free now; ``Params.bf_overdue_now``;
        ``_planned``)."""
        now, ends = self.now, self.ends
        soon = now + 1.0
        self.overdue = bool(ends) and ends[0][0] <= now
        while ends and ends[0][0] <= now:
            j = ends[0][1]
            self._move_end(j, soon if self.p.bf_overdue_now else max(self.end_time[j] + self.p.kill_wait_s, soon))

    def _planned(
        self,
        need: Need,
        chosen: list[tuple[float, int, SimNode, list[Part]]],
        limit: float,
        horizon: float,
        plans: dict[int, list[tuple[float, float]]],
    ) -> list[tuple[float, int, SimNode, list[Part]]] | None:
        """Where and when Slurm plans a job whose exact earliest start is ``chosen[-1][0]``:
        its select plugin's will-run test (``willrun``, cons_tres ``_will_run_test``) batches
        the running jobs on the nodes backfill lets it use (``avail_bitmap``: usable, no
        higher job's reservation within its window from ``start_res``), takes the first
        nodes that fit once the batch is gone (``_job_test``: node order), and plans the
        start at a removed job's end.  Planned after ``later_start`` (``_later_start``: a
        node a reservation kept out is free from then), or where its window meets a
        reservation on its nodes (``_test_resv_overlap``), the job is tested again from
        there (``TRY_LATER``), on the nodes free then: the replay that kept the first answer
        held a node for a 3g.20gb job where Slurm had planned it elsewhere, and started four
        slices 100-155 s late (a 24.11 burst run; a 22.05 partition run likewise, 5 s).
        None: planned beyond ``bf_window``."""
        at, now = chosen[-1][0], self.now
        p = self.p
        running = self.ends
        if p.bf_overdue_now and self.overdue:
            # 24.11.0 on: the test starts at the pass and first removes every job past its
            # end_time (``_build_cr_job_list``); if that makes room the job is planned now
            # (``_plan_overdue``'s second from now), else the batches run over the others
            if at <= now + 1.0:
                return chosen
            running = [e for e in running if self.end_time[e[1]] > now]
        res, planned = now, INF  # (INF: no plan found within the tries: beyond the window)
        for _ in range(len(self.nodes) + 8):  # (each retry moves res on to a later boundary)
            blocked = self._blocked(plans, res, res + limit)
            later = self._later_start(plans, res, res + limit)
            # the will-run test on the nodes no reservation keeps from it in its window
            found = self._earliest_nodes(need, limit, horizon, {x: [(-INF, INF)] for x in blocked})
            if found is None:
                if later is None or later > horizon:
                    return None
                res = later
                continue
            chosen, at = found, found[-1][0]
            picked = {n.index for _, _, n, _ in chosen}
            last, removed = batch(at, running, blocked, p.clock_origin_s, p.bf_window_linear_s)
            if last > at:
                # on the nodes of its avail_bitmap only: a node a higher job holds within the
                # window stays out of the will-run test even where that hold ends before ``last``
                chosen = self._first_fit(need, limit, last, plans, blocked) or chosen
                picked = {n.index for _, _, n, _ in chosen}
            planned = max(planned_start(at, last, removed, picked, p.will_run), res)
            # (compared as Slurm's whole seconds: a job's end_time is its start's second plus its limit)
            if later is not None and math.floor(planned + p.clock_origin_s + 1e-9) - p.clock_origin_s > later + 1e-9:
                res = later  # TRY_LATER: some node a reservation keeps from it frees before that
                continue
            lo, hi = self._window(planned, limit)
            if res < planned and any(overlaps(plans.get(x, ()), lo, hi) for x in picked):
                res = planned  # its window meets a reservation on its nodes (_test_resv_overlap)
                continue
            break
        if planned > horizon:
            return None
        return [(planned, idx, n, parts) for _, idx, n, parts in chosen]

    def _later_start(self, plans: dict[int, list[tuple[float, float]]], res: float, end: float) -> float | None:
        """Where ``backfill.c`` tries a job again (``later_start``, ``TRY_LATER``) when the
        will-run test plans it after that: the end of the first span of its node map
        (``node_space``: spans between the reservations' starts and ends) from ``res`` on
        after which some usable node no reservation held through the spans so far is free;
        None if none is, before the spans pass ``end`` (the job's window)."""
        bounds = sorted({t for windows in plans.values() for w in windows for t in w if t > res})
        if not bounds:
            return None
        bounds.append(INF)  # (the last span runs to the end of the backfill window)
        usable = {n.index for n in self.nodes if n.usable}
        avail, begin = usable, res
        for k, b in enumerate(bounds[:-1]):
            current = avail - {x for x, windows in plans.items() if overlaps(windows, begin, b)}
            following = usable - {x for x, windows in plans.items() if overlaps(windows, b, bounds[k + 1])}
            if following - current:
                return b
            if begin > end:
                return None
            avail, begin = current, b
        return None

    def _blocked(self, plans: dict[int, list[tuple[float, float]]], lo: float, hi: float) -> set[int]:
        """The nodes backfill keeps a job off in ``[lo, hi)`` (not in its ``avail_bitmap``):
        taking no jobs, their reservation ahead before ``hi``, or a higher job's reservation
        in the window."""
        out = {n.index for n in self.nodes if not n.usable or hi > n.ahead_at}
        out.update(x for x, windows in plans.items() if overlaps(windows, lo, hi))
        return out

    def _first_fit(
        self,
        need: Need,
        limit: float,
        by: float,
        plans: dict[int, list[tuple[float, float]]],
        blocked: set[int],
    ) -> list[tuple[float, int, SimNode, list[Part]]] | None:
        """The first ``need.nodes`` nodes, in node order, whose records are free by ``by``
        and whose reservations leave ``[by, by + limit)`` clear (what ``_job_test`` picks once
        the batch's jobs are gone), of those not ``blocked`` (outside the will-run test's
        ``avail_bitmap``); None if fewer."""
        now, res, nodes = self.now, self.p.bf_resolution_s, self.nodes
        lo, hi = self._window(by, limit)
        fits: dict[int, list[Part]] = {}
        for lb, idx, typ in self._by_bound(need):
            if lb > by:
                break
            n = nodes[idx]
            if idx in fits or idx in blocked or by + limit > n.ahead_at:
                continue
            windows = plans.get(idx, ())
            if windows and overlaps(windows, lo, hi):
                continue
            if typ in n.free:
                if need.kind != GPU:
                    continue
                fits[idx] = [(GPU, typ, need.count, -1)]
            else:
                t, parts = earliest(
                    n, need, typ, limit, now, by, (), self._line(n, typ), res, self.p.clock_origin_s, self.p.bf_end_up
                )
                if t <= by:
                    fits[idx] = parts
        if len(fits) < need.nodes:
            return None
        return [(by, idx, nodes[idx], fits[idx]) for idx in sorted(fits)[: need.nodes]]

    def _to_hold(self, need: Need) -> int:
        """How many nodes a request's jobs hold before later ones are passed over: every
        usable node offering it, at most ``bf_hold_nodes``."""
        return min(self.p.bf_hold_nodes, sum(n.usable for n in self._offering(need.types)))

    def _bar(self, need: Need, failed: dict[tuple[tuple[str, ...], str], dict[tuple[int, int], float]]) -> float:
        """The shortest limit from which a job of ``need`` is passed over in this pass: that of
        a failed job of its shape with no more records and nodes (INF: none; -INF: no node
        offers its GRES now, ``BadConstraints``)."""
        if not self._configured(need):
            return -INF
        marks = failed.get((need.types, need.kind), {})
        return min((lim for (c, k), lim in marks.items() if c <= need.count and k <= need.nodes), default=INF)

    def _earliest_nodes(
        self,
        need: Need,
        limit: float,
        horizon: float,
        plans: dict[int, list[tuple[float, float]]],
    ) -> list[tuple[float, int, SimNode, list[Part]]] | None:
        """The ``need.nodes`` nodes where the job starts soonest (start, node, records; ties to
        the first node), or None."""
        found: dict[int, tuple[float, list[Part]]] = {}  # node -> its earliest start and records
        kth = INF  # the need.nodes-th best start found so far
        now, res, nodes, single = self.now, self.p.bf_resolution_s, self.nodes, need.nodes == 1
        best: tuple[float, int, SimNode, list[Part]] | None = None  # single: the best so far
        # single: the nodes it could start on now, each with its first type in ``need.types`` order
        at_once: dict[int, tuple[int, SimNode, list[Part]]] = {}
        rank = {t: k for k, t in enumerate(need.types)}
        for lb, idx, typ in self._by_bound(need):
            if lb == NOW:
                lb = now
            elif lb > kth or lb > horizon:
                break
            n = nodes[idx]
            if lb + limit > n.ahead_at:
                continue  # its reservation ahead comes before this job could end there
            windows = plans.get(idx, ())
            if typ in n.free:  # plain records: idle from lb on, only the reservations decide
                if need.kind != GPU:
                    continue
                if windows:
                    line = self._line(n, typ) if lb == now else ()
                    t = first_clear(
                        lb,
                        limit,
                        now,
                        horizon,
                        n.ahead_at,
                        windows,
                        res,
                        line[0][0] if line else INF,
                        self.p.clock_origin_s,
                        self.p.bf_end_up,
                    )
                else:
                    t = lb
                parts = [(GPU, typ, need.count, -1)]
            else:
                t, parts = earliest(
                    n,
                    need,
                    typ,
                    limit,
                    now,
                    horizon,
                    windows,
                    self._line(n, typ),
                    res,
                    self.p.clock_origin_s,
                    self.p.bf_end_up,
                )
            if t == INF:
                continue
            if single:
                if t <= now and (idx not in at_once or rank[typ] < at_once[idx][0]):
                    at_once[idx] = (rank[typ], n, parts)
                if t < kth or (best is not None and t == kth and idx < best[1]):
                    kth, best = t, (t, idx, n, parts)
                continue
            if idx not in found or t < found[idx][0]:
                found[idx] = (t, parts)
                if len(found) >= need.nodes:
                    kth = sorted(v[0] for v in found.values())[need.nodes - 1]
        if single:
            if len(at_once) > 1:  # it starts now: on the node cons_tres picks
                cands = sorted((idx, n, parts) for idx, (_, n, parts) in at_once.items())
                idx, n, parts = cands[eval_nodes([(idx, fit_cpus(n, parts)) for idx, n, parts in cands], 1)[0]]
                return [(now, idx, n, parts)]
            return [best] if best is not None else None
        if len(found) < need.nodes:
            return None
        now_on = sorted((idx, parts) for idx, (t, parts) in found.items() if t <= now)
        if len(now_on) >= need.nodes:  # it starts now: on the nodes cons_tres picks
            picked = eval_nodes([(idx, fit_cpus(nodes[idx], parts)) for idx, parts in now_on], need.nodes)
            return [(now, now_on[p][0], nodes[now_on[p][0]], now_on[p][1]) for p in picked]
        return sorted((t, idx, nodes[idx], parts) for idx, (t, parts) in found.items())[: need.nodes]
