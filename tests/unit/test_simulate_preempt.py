"""#27: QOS preemption as ``preempt/qos`` with PreemptMode=REQUEUE or CANCEL does it
(``simulate/preempt.py`` cites the Slurm 22.05 sources): which running jobs a waiting job
preempts (``_run_now``), when it starts, and where a requeued job queues again."""

from __future__ import annotations

import pytest

from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.preempt import rules_of, run_now
from slurm_gpupool.simulate.scheduler import Scheduler
from tests.unit.test_simulate_engine import run, spec  # noqa: F401 (spec: the fixture)

PRIORITY = (("high", 100), ("low", 10), ("scav", 5))
PREEMPT = {
    "qos_priority": PRIORITY,
    "qos_preempt": (("high", ("low", "scav")),),
    "qos_preempt_mode": (("scav", "cancel"),),
}


def _job(i: int, submit: float, duration: float, gpus: int, qos: str = "normal", requeue: bool = True) -> SimJob:
    return SimJob(i, submit, duration, max(duration, 60.0), TraceRequest(gpus, 1000), qos=qos, requeue=requeue)


# -- the rules ---------------------------------------------------------------------------------
def test_who_preempts_whom_and_how():
    rules = rules_of(PREEMPT["qos_preempt"], PREEMPT["qos_preempt_mode"], (), PRIORITY)
    assert rules.enabled
    assert rules.may_preempt("high", "low") and rules.may_preempt("high", "scav")
    assert not rules.may_preempt("low", "high") and not rules.may_preempt("high", "normal")
    assert (rules.mode("scav"), rules.mode("low")) == ("cancel", "requeue")  # low: the cluster's mode
    # candidates of a lower QOS priority first, then those on fewer nodes
    assert rules.order_key("scav", 2) < rules.order_key("low", 1) < rules.order_key("low", 2)
    assert not rules_of(PREEMPT["qos_preempt"], (), (), PRIORITY, cluster_mode="off").enabled
    assert not rules_of((), (), (), PRIORITY).enabled
    with pytest.raises(ValueError):
        rules_of((), (("low", "suspend"),), (), PRIORITY)


def _fits(free: dict[int, int], held: dict[int, tuple[int, int]], need: int):
    """First fit of ``need`` GPUs on one node, given jobs -> (node, GPUs) removed."""

    def fits(removed):
        room = dict(free)
        for j in removed:
            node, gpus = held[j]
            room[node] += gpus
        return next(([n] for n in sorted(room) if room[n] >= need), None)

    return fits


def test_candidates_are_removed_in_order_and_only_those_on_the_chosen_node_are_preempted():
    held = {1: (0, 1), 2: (1, 2), 3: (0, 1)}  # job -> (node, GPUs); nothing free
    fits = _fits({0: 0, 1: 0}, held, 2)
    # 1 gone: node 0 has 1; 2 gone: node 1 has 2 -> fits there; 1 is not on it
    assert run_now([1, 2, 3], fits, lambda j: [held[j][0]]) == ([1], [2])
    assert run_now([1, 3], _fits({0: 0, 1: 0}, held, 3), lambda j: [held[j][0]]) is None


def test_the_reorder_preempts_fewer_jobs():
    """Node 0 holds 1 (1 GPU) and 3 (2 GPUs) with 1 GPU free; 3 GPUs wanted.  In order, 1 then
    3 are removed (both on node 0); the reorder tries 3 first, which is enough."""
    held = {1: (0, 1), 3: (0, 2)}
    fits = _fits({0: 1}, held, 3)
    assert run_now([1, 3], fits, lambda j: [held[j][0]], reorder=0) == ([0], [3])
    # without a reorder (its count below zero: the first fit is final) both go
    assert run_now([1, 3], fits, lambda j: [held[j][0]], reorder=-1) == ([0], [1, 3])


# -- in the replay -----------------------------------------------------------------------------
# spec: two nodes of 4 whole A30s (test_simulate_engine's "whole" layout)


def test_a_high_job_requeues_a_low_one_and_starts_at_once(spec):  # noqa: F811
    jobs = [_job(1, 0, 1000, 4, "low"), _job(2, 0, 1000, 4, "low"), _job(3, 10, 100, 4, "high")]
    res, r = run(spec, jobs, **PREEMPT)
    assert r[3].start_s == 10  # the records of job 1 free at once (release_s 0 here)
    assert (r[1].preemptions, r[2].preemptions, r[1].requeues, r[1].cancelled) == (1, 0, 1, False)
    # eligible again 121 s after its requeue (begin_time), ran again from the start
    assert (r[1].start_s, r[1].end_s) == (131, 1131)
    assert res.preempted == 1
    _, r = run(spec, jobs, qos_priority=PRIORITY)  # the same QOS, no preemption: it waits
    assert r[3].start_s == 1000 and r[1].preemptions == 0


def test_a_grace_time_delays_the_kill_and_a_job_that_ends_within_it_completes(spec):  # noqa: F811
    jobs = [_job(1, 0, 1000, 4, "low"), _job(2, 0, 30, 4, "low"), _job(3, 10, 100, 4, "high")]
    # both candidates (same key: job id order): job 1 removed first, and it is enough
    _, r = run(spec, jobs, **PREEMPT, qos_grace_s=(("low", 60.0),), release_s=0.5)
    assert r[1].preemptions == 1 and r[1].requeues == 1
    # job 2 ends at 30 by itself (its records free at 30.5): job 3 takes that node first
    assert r[3].start_s == 30.5
    jobs[1] = _job(2, 0, 1000, 4, "low")
    _, r = run(spec, jobs, **PREEMPT, qos_grace_s=(("low", 60.0),), release_s=0.5)
    assert r[3].start_s == 70.5  # killed at 10 + 60, free after its epilog
    assert r[1].start_s == 70.5 + 121


def test_cancel_mode_and_a_job_that_may_not_be_requeued_end_for_good(spec):  # noqa: F811
    jobs = [_job(1, 0, 1000, 4, "scav"), _job(2, 0, 1000, 4, "low"), _job(3, 10, 100, 4, "high")]
    _, r = run(spec, jobs, **PREEMPT)
    assert r[1].cancelled and r[1].requeues == 0 and r[1].end_s == 10  # scav first: lower priority
    assert r[2].preemptions == 0 and r[3].start_s == 10
    jobs = [_job(1, 0, 1000, 4, "low", requeue=False), _job(2, 0, 1000, 4, "normal"), _job(3, 10, 100, 4, "high")]
    _, r = run(spec, jobs, **PREEMPT)
    assert r[1].cancelled and r[1].end_s == 10 and r[3].start_s == 10


def test_nothing_of_a_qos_it_may_not_preempt_is_touched(spec):  # noqa: F811
    jobs = [_job(1, 0, 1000, 4), _job(2, 0, 500, 4), _job(3, 10, 100, 4, "high")]
    _, r = run(spec, jobs, **PREEMPT)
    assert r[3].start_s == 500 and not any(x.preemptions for x in r.values())


def test_a_requeued_job_queues_by_its_requeue_time(spec):  # noqa: F811
    """Job 4 (low) was submitted at 5, after job 1 (low, at 0) and before job 1's requeue at
    10: Slurm gives the requeued job a new submit time, so job 4 goes first when job 3 ends."""
    jobs = [
        _job(1, 0, 1000, 4, "low"),
        _job(2, 0, 2000, 4, "normal"),
        _job(4, 5, 50, 4, "low"),
        _job(3, 10, 200, 4, "high"),
    ]
    _, r = run(spec, jobs, **PREEMPT)
    assert r[3].start_s == 10
    assert (r[4].start_s, r[1].start_s) == (210, 260)


def test_the_preempting_job_blocks_the_jobs_after_it(spec):  # noqa: F811
    """Job 3 (high) preempts job 1 for 4 GPUs; job 4 (normal, 1 GPU) comes later: it does not
    start in the preempted job's place before job 3 (the main scheduler's partition rule)."""
    jobs = [
        _job(1, 0, 1000, 4, "low"),
        _job(2, 0, 1000, 4, "normal"),
        _job(3, 10, 100, 4, "high"),
        _job(4, 10, 100, 1, "normal"),
    ]
    _, r = run(spec, jobs, **PREEMPT, qos_grace_s=(("low", 20.0),))
    assert r[3].start_s == 30 and r[4].start_s >= 130


def test_the_what_if_frees_the_victims_cores_and_sockets_and_puts_them_back(spec, monkeypatch):  # noqa: F811
    """cons_tres's choice of node counts idle cores on the sockets of free records
    (``simulate.cores``): while the what-if has a victim removed, its core and its records'
    sockets are free too, or the node would score as if it still ran; afterwards they are
    held again until the kill."""
    seen: list[tuple[float, list[int], dict[str, list[int]]]] = []
    plain = Scheduler._fit_now

    def spy(self, need, limit, blocked=()):
        n1 = self.nodes[0]
        seen.append((self.now, list(n1.cores_free), {t: list(v) for t, v in n1.sock_free.items()}))
        return plain(self, need, limit, blocked)

    monkeypatch.setattr(Scheduler, "_fit_now", spy)
    fresh = spec.shape("whole", "n1")
    jobs = [_job(1, 0, 1000, 4, "low"), _job(2, 0, 1000, 4, "low"), _job(3, 10, 100, 4, "high")]
    _, r = run(spec, jobs, **PREEMPT)
    assert r[3].start_s == 10 and r[1].preemptions == 1
    # at 10: job 3 does not fit (n1 as job 1 holds it), then the what-if with job 1 removed
    # sees n1 as it was before job 1 started
    at_10 = [(cores, socks) for t, cores, socks in seen if t == 10]
    held, what_if = at_10[0], at_10[1]
    assert what_if == (list(fresh.cores), {t: list(v) for t, v in fresh.sockets})
    assert held != what_if and sum(held[0]) == sum(fresh.cores) - 1
