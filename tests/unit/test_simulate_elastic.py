"""#17: the elastic policy in a replay: the engine's hook calls core.elastic.decide, and the
switches it names are made as the repartitioner makes them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.simulate import policies as pol
from slurm_gpupool.simulate.elastic import UNION, cron_interval_s
from slurm_gpupool.simulate.engine import Engine, Params
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest

RAW = {
    "version": 1,
    "nodesets": {"a30": {"nodes": "n[1-3]", "machine": "pcie-a30"}},
    "layouts": {
        "whole": {"a30": {"all": "whole"}},
        # per node: 16 x 1g.6gb (1/4 GPU each)
        "day": {"a30": {"all": {"mig": {"1g.6gb": 4}}}},
    },
    "schedule": {
        "timezone": "UTC",
        "default": "whole",
        "mode": "elastic",
        "elastic": {"max_changing": 2, "window": "5m", "cooldown": "30m", "min_gain": 1},
    },
    "paths": {"state_dir": "/tmp/x", "run_dir": "/tmp/x", "spool_dir": "/tmp/x"},
}
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


def replay(raw, jobs, keep_log=True):
    cfg = parse_config(raw, "test.yaml")
    (spec,) = pol.policies(cfg, ["elastic"], "whole")
    nodes = cfg.all_nodes()
    pool = pol.pool_for(cfg, spec, nodes, cfg.schedule.default)
    sw = pol.switcher(cfg, spec, EPOCH, 7 * 86400)
    sw.keep_log = keep_log
    params = Params(sample_s=0, switch_s=60, lead_time_s=0, window_s=1e12)
    return Engine(pool, sw, params).run(jobs), sw


def quarter(i, submit, duration=1800):
    return SimJob(i, submit, duration, duration * 2, TraceRequest(1, 250))


def whole4(i, submit, duration=1800):
    return SimJob(i, submit, duration, duration * 2, TraceRequest(4))


def test_slice_jobs_make_it_switch_exactly_enough_nodes_then_a_burst_of_whole_jobs_switches_back():
    # 20 quarter-GPU jobs at t=0: in elastic periods they map to 1g.6gb (UNION), which no
    # node has: they wait (idle_first off: they do not take the idle whole GPUs); after the
    # 5-minute window the decision switches 2 nodes (16 + 4 slices), not 3; they start once
    # the nodes are back (switch 60 s)
    jobs = [quarter(i, 0) for i in range(20)]
    # at 4 h: three 4-GPU jobs; the day nodes are idle again and past their cool-down
    jobs += [whole4(100 + i, 4 * 3600) for i in range(3)]
    raw = copy.deepcopy(RAW)
    raw["schedule"]["elastic"]["idle_first"] = False
    res, sw = replay(raw, jobs)
    recs = {r.job_id: r for r in res.jobs}
    assert all(recs[i].gres_type == "1g.6gb" and recs[i].layout == UNION for i in range(20))
    first = sw.stats.log[0]
    assert [(a.node, a.target) for a in first.actions] == [("n1", "day"), ("n2", "day")]
    assert first.now == 300 and [len(a.jobs) for a in first.actions] == [16, 4]
    assert all(recs[i].start_s == 360 for i in range(20))  # decided at 300, back at 360
    # the whole burst: n3 is still whole and takes one; the other two need n1 and n2 back
    back = sw.stats.log[1]
    assert sorted((a.node, a.target) for a in back.actions) == [("n1", "whole"), ("n2", "whole")]
    assert all(recs[100 + i].start_s >= 0 for i in range(3))
    assert res.switches == 4 and sw.stats.demand == 4 and sw.stats.floor == 0


def test_a_slice_job_takes_an_idle_whole_gpu_when_no_slice_is_idle():
    """idle_first (the default), as gpupool-sbatch in an elastic period: with every node
    whole and idle, the first 12 quarter-GPU jobs ask for the 12 idle whole A30s and start at
    once; the 8 after them find nothing idle and ask for a 1g.6gb, which the decision
    brings (one node: 16 slices), after its window."""
    res, sw = replay(RAW, [quarter(i, i) for i in range(20)])
    recs = {r.job_id: r for r in res.jobs}
    assert [recs[i].gres_type for i in range(20)] == ["a30"] * 12 + ["1g.6gb"] * 8
    assert all(recs[i].start_s == i for i in range(12)) and all(recs[i].wait_s >= 300 for i in range(12, 20))
    assert [(a.node, a.target) for a in sw.stats.log[0].actions] == [("n1", "day")]  # exactly enough: one node


def test_clock_periods_outside_during_switch_as_the_schedule_does():
    raw = copy.deepcopy(RAW)
    raw["schedule"]["rules"] = [{"layout": "day", "days": "daily", "start": "08:00", "end": "20:00"}]
    raw["schedule"]["elastic"]["during"] = ["day"]
    cfg = parse_config(raw, "test.yaml")
    (spec,) = pol.policies(cfg, ["elastic"], "whole")
    sw = pol.switcher(cfg, spec, EPOCH, 2 * 86400)
    # from midnight: whole (clock), 08:00 elastic (UNION covers no node: nothing switches), 20:00 whole
    assert list(zip(sw.times, sw.layouts))[:3] == [(0.0, "whole"), (8 * 3600.0, UNION), (20 * 3600.0, "whole")]
    # slice jobs at night are mapped in the clock's layout (whole GPUs), by day in UNION,
    # where an idle whole GPU is taken at once (idle_first) ...
    res, _ = replay(raw, [quarter(1, 3600), quarter(2, 9 * 3600)])
    recs = {r.job_id: r for r in res.jobs}
    assert (recs[1].gres_type, recs[1].layout) == ("a30", "whole")
    assert (recs[2].gres_type, recs[2].layout, recs[2].start_s) == ("a30", UNION, 9 * 3600)
    # ... and without idle_first the slice is asked for: one quarter GPU is below min_gain
    # (1), so it waits until max_wait (1 h), then a node switches
    raw["schedule"]["elastic"]["idle_first"] = False
    res, _ = replay(raw, [quarter(1, 3600), quarter(2, 9 * 3600)])
    recs = {r.job_id: r for r in res.jobs}
    assert (recs[2].gres_type, recs[2].layout) == ("1g.6gb", UNION)
    assert 10 * 3600 + 60 <= recs[2].start_s <= 10 * 3600 + 60 + 300


def test_floors_hold_in_a_replay_and_every_policy_list_has_elastic():
    raw = copy.deepcopy(RAW)
    raw["schedule"]["elastic"]["floors"] = {"1g.6gb": 1}  # 4 slices kept: one node in day from the start
    res, sw = replay(raw, [whole4(1, 0)])
    assert sw.stats.floor == 1 and sw.stats.log[0].actions[0].reason == "floor"
    assert res.layout_seconds.get("day", 0) > 0
    cfg = parse_config(raw, "test.yaml")
    assert [p.name for p in pol.policies(cfg, None, "whole")][-1] == "elastic"


def test_cron_interval():
    assert cron_interval_s("*/5 * * * *") == 300 and cron_interval_s("*/1 * * * *") == 60
    assert cron_interval_s("7 * * * *") == 3600


def test_under_a_load_that_keeps_every_node_busy_a_drain_serves_starving_slice_jobs():
    # 30 four-GPU jobs of 30 min (limit 1 h) keep all three nodes busy for 5 h; 8 quarter-GPU
    # jobs behind them wait for 1g.6gb, which no node has.  Idle nodes never come.
    jobs = [whole4(i, 0) for i in range(30)] + [quarter(100 + i, 1) for i in range(8)]
    res, sw = replay(RAW, jobs)
    recs = {r.job_id: r for r in res.jobs}
    slices_at = [recs[100 + i].start_s for i in range(8)]
    assert sw.stats.drain == 0 and min(slices_at) >= 5 * 3600  # idle nodes only: after the whole queue
    raw = copy.deepcopy(RAW)
    raw["schedule"]["elastic"].update({"max_wait": "1h", "drain_within": "2h"})
    res, sw = replay(raw, jobs)
    recs = {r.job_id: r for r in res.jobs}
    drains = [a for d in sw.stats.log for a in d.actions if a.reason == "drain"]
    # after the jobs waited max_wait, one busy node is reserved: its job ends, it switches, they start
    assert sw.stats.drain == 1 and drains[0].target == "day" and len(drains[0].jobs) == 8
    first = next(d for d in sw.stats.log if any(a.reason == "drain" for a in d.actions))
    assert 3600 <= first.now <= 3600 + 300
    assert all(first.now < recs[100 + i].start_s <= first.now + 1800 + 300 + 60 for i in range(8))
    assert res.requeued == 0 and res.skipped == 0  # none requeued; a drain is no deadline skip
    assert all(recs[i].end_s - recs[i].start_s == 1800 for i in range(30))
