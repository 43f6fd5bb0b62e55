"""#17: the elastic decision (core/policy/elastic.py): bounds, cool-down, batching window, floors,
minimum gain, no thrash on oscillating demand, explanations.  Pools are built by hand:
``whole`` = 8 x a100; ``day`` = 28 x 1g.5gb (1/7 GPU each) + 2 shared a100 (4 shards) +
2 x a100 whole."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from slurm_gpupool.core.policy.elastic import (
    GPU,
    SHARD,
    Bounds,
    Job,
    Node,
    Records,
    decide,
    max_switches_per_hour,
    shape_eq,
)

WHOLE_SHAPE = (Records("a100", "whole", 8, 1.0),)
DAY_SHAPE = (
    Records("1g.5gb", "mig", 28, 1 / 7),
    Records("a100_shared", "shared", 2, 1.0, 4),
    Records("a100", "whole", 2, 1.0),
)
SHAPES = {"whole": WHOLE_SHAPE, "day": DAY_SHAPE}
HOUR = 3600.0


def node(name, layout="whole", idle=True, usable=True, target=None, last=-math.inf, free=None):
    if free is None:
        free = {r.type: (r.count * r.shares if r.shares else r.count) for r in SHAPES[layout]} if idle else {}
    return Node(name, layout, SHAPES, ("whole", "day"), idle, usable, target, last, free)


def slices(n, waited=600.0, start=1):
    return [Job(str(start + i), GPU, ("1g.5gb",), 1, 1, waited) for i in range(n)]


def eights(n, waited=600.0, start=100):
    return [Job(str(start + i), GPU, ("a100",), 8, 1, waited) for i in range(n)]


B = Bounds(floors={}, max_changing=4, window_s=300, cooldown_s=HOUR, min_gain_eq=1.0)


def test_a_slice_queue_switches_exactly_enough_idle_whole_nodes():
    nodes = [node(f"n{i}") for i in range(1, 5)]
    d = decide(10_000, nodes, slices(40), B)
    # 40 slices: one day node holds 28, a second the other 12; the other two stay whole
    assert [(a.node, a.current, a.target, a.reason) for a in d.actions] == [
        ("n1", "whole", "day", "demand"),
        ("n2", "whole", "day", "demand"),
    ]
    assert [len(a.jobs) for a in d.actions] == [28, 12]
    assert d.actions[0].gain_eq == pytest.approx(4.0) and d.actions[1].gain_eq == pytest.approx(12 / 7)
    assert "28 jobs gpu:1g.5gb:1 (waited up to 10m)" in d.actions[0].why
    assert d.by_target() == {"day": ["n1", "n2"]}
    assert [(u.label, u.jobs) for u in d.unmet] == [("gpu:1g.5gb:1", 40)]
    assert d.unmet[0].eq == pytest.approx(40 / 7)
    json.dumps(d.to_dict())  # journal- and --json-ready


def test_jobs_younger_than_the_window_do_not_count():
    d = decide(10_000, [node("n1")], slices(40, waited=120), B)
    assert d.actions == () and d.unmet == ()
    assert "no job has waited longer than the batching window" in d.held[0][1]


def test_batching_window_after_a_decision_that_switched():
    nodes = [node("n1"), node("n2")]
    d = decide(10_000, nodes, slices(10), B, last_decision_s=10_000 - 100)
    assert d.actions == ()
    assert d.unmet[0].jobs == 10  # still reported: what waits, and why nothing was done
    assert "batching window" in d.held[0][1] and "next decision in 3m" in d.held[0][1]
    assert decide(10_000, nodes, slices(10), B, last_decision_s=10_000 - 300).actions


def test_cool_down_per_node():
    nodes = [node("n1", last=10_000 - 600), node("n2")]
    d = decide(10_000, nodes, slices(10), B)
    assert [a.node for a in d.actions] == ["n2"]
    assert ("n1", "cool-down: switched 10m ago, free to switch in 50m") in d.held
    # both cooling down: nothing, and the reason says so
    nodes = [node("n1", last=10_000 - 600), node("n2", last=10_000 - 3599)]
    d = decide(10_000, nodes, slices(10), B)
    assert d.actions == () and any("no idle node past its cool-down" in w for _, w in d.held)


def test_at_most_max_changing_nodes_switch_at_once_counting_those_under_way():
    bounds = Bounds(max_changing=2, window_s=300, cooldown_s=HOUR)
    nodes = [node("n1", target="day", idle=False), node("n2"), node("n3"), node("n4")]
    d = decide(10_000, nodes, eights(3), bounds)  # 8-GPU jobs: n2..n4 are whole and idle
    # they fit on idle whole nodes now: nothing unmet, nothing to switch
    assert d.actions == () and d.unmet == ()
    nodes = [node("n1", target="whole", idle=False), node("n2", "day"), node("n3", "day"), node("n4", "day")]
    d = decide(10_000, nodes, eights(4), bounds)
    # n1 is on its way to whole and takes one 8-GPU job; three are unmet; room for one switch
    assert [(a.node, a.target) for a in d.actions] == [("n2", "whole")]
    assert [u.jobs for u in d.unmet] == [3]
    assert any("at most 2 nodes switch at once (1 switching already)" in w for _, w in d.held)


def test_busy_nodes_are_never_candidates_and_idle_records_serve_first():
    # n1 in day with 10 idle slices: 8 waiting slice jobs are about to start there, not unmet
    n1 = node("n1", "day", idle=False, free={"1g.5gb": 10, "a100_shared": 0, "a100": 0})
    d = decide(10_000, [n1, node("n2")], slices(8), B)
    assert d.actions == () and d.unmet == ()
    # 20 slice jobs: 10 fit n1's idle slices, 10 are unmet; n1 is busy, so n2 switches
    d = decide(10_000, [n1, node("n2")], slices(20), B)
    assert [(a.node, len(a.jobs)) for a in d.actions] == [("n2", 10)]


def test_a_burst_of_eight_gpu_jobs_switches_day_nodes_back_to_whole():
    nodes = [node("n1", "day"), node("n2", "day"), node("n3", "day")]
    d = decide(10_000, nodes, eights(2), B)
    assert [(a.node, a.target, len(a.jobs)) for a in d.actions] == [("n1", "whole", 1), ("n2", "whole", 1)]
    assert d.actions[0].gain_eq == 8.0 and "1 job gpu:a100:8 (waited up to 10m)" in d.actions[0].why


def test_floors_are_kept_at_all_times():
    # a whole floor of 16 GPU-eq on three whole nodes (24): a day node keeps 2 whole a100
    bounds = Bounds(floors={"whole": 16}, max_changing=4, window_s=300, cooldown_s=HOUR)
    nodes = [node("n1"), node("n2"), node("n3")]
    d = decide(10_000, nodes, slices(80), bounds)
    # one switch: 8 + 8 + 2 = 18 >= 16; a second would leave 12
    assert [a.node for a in d.actions] == ["n1"]
    assert any("whole would drop to 12 GPU-eq, below its floor 16" in w for _, w in d.held)
    assert ("whole", 16.0, 18.0) in d.floors


def test_a_floor_not_met_is_restored_first_with_idle_nodes():
    # every node whole; a floor of 1 slice keeps gpu:1g.5gb submittable: one node goes to day
    bounds = Bounds(floors={"1g.5gb": 1 / 7}, max_changing=2, window_s=300, cooldown_s=HOUR)
    d = decide(10_000, [node("n1"), node("n2")], [], bounds)
    assert [(a.node, a.target, a.reason) for a in d.actions] == [("n1", "day", "floor")]
    assert "floor: 1g.5gb has 0 GPU-eq" in d.actions[0].why
    # met already: nothing
    d = decide(10_000, [node("n1", "day"), node("n2")], [], bounds)
    assert d.actions == ()
    # a busy node cannot restore it: said so
    d = decide(10_000, [node("n1", idle=False, free={})], [], bounds)
    assert d.actions == () and any("floor 1g.5gb" in w and "not met" in w for _, w in d.held)


def test_minimum_gain():
    nodes = [node("n1")]
    d = decide(10_000, nodes, slices(3), B)  # 3/7 GPU-eq < 1
    assert d.actions == () and any("below min_gain 1" in w for _, w in d.held)
    d = decide(10_000, nodes, slices(3), Bounds(window_s=300, min_gain_eq=0.4))
    assert [a.node for a in d.actions] == ["n1"]
    # no request is too small to be served ever: once a job has waited max_wait, it is
    d = decide(10_000, nodes, slices(3, waited=3600), B)
    assert [a.node for a in d.actions] == ["n1"] and "but a job has waited over 1.0h" in d.actions[0].why


def test_multi_node_jobs_count_per_node_part_and_shards_fit_per_gpu():
    # a 2-node job of 8 GPUs per node: each day node back to whole holds one part (8 GPU-eq)
    job = Job("7", GPU, ("a100",), 8, 2, 900)
    d = decide(10_000, [node("n1", "day"), node("n2", "day")], [job], B)
    assert [(a.node, a.gain_eq) for a in d.actions] == [("n1", 8.0), ("n2", 8.0)]
    assert [(u.label, u.eq) for u in d.unmet] == [("gpu:a100:8 x2 nodes", 16.0)]
    # shard jobs: 3 shards each fit one per GPU (4 shards per GPU): two fit a day node
    shard_jobs = [Job(str(i), SHARD, ("a100_shared",), 3, 1, 900) for i in range(3)]
    d = decide(10_000, [node("n1"), node("n2")], shard_jobs, Bounds(window_s=300, min_gain_eq=0.5))
    assert [len(a.jobs) for a in d.actions] == [2, 1]
    assert d.actions[0].gain_eq == pytest.approx(1.5)


def test_decide_is_pure_and_deterministic():
    nodes = [node(f"n{i}") for i in range(1, 5)]
    jobs = slices(50)
    a, b = decide(10_000, nodes, jobs, B), decide(10_000, nodes, jobs, B)
    assert a == b and [n.target for n in nodes] == [None] * 4


class Toy:
    """A pool the decision drives: a switch takes ``switch_s``, then the node is in its new
    layout (idle); jobs never start (worst case for thrash: demand stays)."""

    def __init__(self, count, bounds, switch_s=60.0):
        self.nodes = {f"n{i}": node(f"n{i}") for i in range(1, count + 1)}
        self.back: dict[str, float] = {}
        self.bounds, self.switch_s = bounds, switch_s
        self.last = -math.inf
        self.switches: list[float] = []

    def step(self, now, jobs):
        for name, t in list(self.back.items()):
            if t <= now:
                n = self.nodes[name]
                self.nodes[name] = node(name, n.target, last=t)
                del self.back[name]
        d = decide(now, list(self.nodes.values()), jobs, self.bounds, self.last)
        for a in d.actions:
            n = self.nodes[a.node]
            self.nodes[a.node] = Node(n.name, n.layout, n.shapes, n.allowed, False, False, a.target, n.last_switch_s)
            self.back[a.node] = now + self.switch_s
            self.switches.append(now)
        if d.actions:
            self.last = now
        return d


@pytest.mark.parametrize("period_s", [300.0, 900.0, 1800.0])
def test_oscillating_demand_does_not_thrash(period_s):
    """Demand flips between slices and 8-GPU jobs every ``period_s`` for a day, decided every
    minute: switches per hour stay within the bound (cool-down per node, max per window)."""
    bounds = Bounds(max_changing=2, window_s=300, cooldown_s=HOUR, min_gain_eq=1.0)
    toy = Toy(6, bounds)
    for minute in range(24 * 60):
        now = minute * 60.0
        phase = int(now // period_s) % 2
        jobs = slices(60, start=1) if phase == 0 else eights(4)
        toy.step(now, jobs)
    bound = max_switches_per_hour(bounds, 6)
    assert bound == 6  # min(6 nodes x 1 per hour, 2 per window x 12 windows)
    assert toy.switches  # it does follow the demand
    for h in range(24):
        in_hour = [t for t in toy.switches if h * HOUR <= t < (h + 1) * HOUR]
        assert len(in_hour) <= bound
    # sliding too: never more than max_changing in any window
    for t in toy.switches:
        assert sum(1 for u in toy.switches if t <= u < t + bounds.window_s) <= bounds.max_changing


def test_a_node_switches_at_most_once_per_cool_down():
    bounds = Bounds(max_changing=4, window_s=60, cooldown_s=2 * HOUR, min_gain_eq=1.0)
    toy = Toy(2, bounds, switch_s=30)
    times: dict[str, list[float]] = {}
    for minute in range(12 * 60):
        now = minute * 60.0
        jobs = slices(60) if (minute // 7) % 2 == 0 else eights(2)
        before = {n: x.target for n, x in toy.nodes.items()}
        toy.step(now, jobs)
        for n, x in toy.nodes.items():
            if x.target and not before[n]:
                times.setdefault(n, []).append(now)
    for ts in times.values():
        # from its return (switch start + 30 s) to the next switch start: at least the cool-down
        assert all(b - (a + 30) >= 2 * HOUR for a, b in itertools.pairwise(ts))
    assert sum(len(t) for t in times.values()) >= 4


def test_shape_eq_by_kind_and_type():
    assert shape_eq(DAY_SHAPE) == pytest.approx(8.0)
    assert shape_eq(DAY_SHAPE, "mig") == pytest.approx(4.0)
    assert shape_eq(DAY_SHAPE, "shared") == 2.0 and shape_eq(DAY_SHAPE, "a100") == 2.0


def busy(name, free_at, layout="whole", last=-math.inf):
    return Node(name, layout, SHAPES, ("whole", "day"), False, True, None, last, {}, free_at)


DRAIN = Bounds(max_changing=4, window_s=300, cooldown_s=HOUR, min_gain_eq=1.0, starve_s=HOUR, drain_within_s=2 * HOUR)


def test_busy_nodes_are_drained_only_for_starving_jobs_when_no_idle_node_serves_them():
    now = 100_000.0
    nodes = [busy("n1", now + 90 * 60), busy("n2", now + 20 * 60), busy("n3", now + 5 * HOUR)]
    # waited 30 min (below max_wait): no drain, whatever the bound
    d = decide(now, nodes, slices(10, waited=1800), DRAIN)
    assert d.actions == ()
    # waited over max_wait: the busy node free soonest (n2: 20 min) is reserved for them; n3's jobs
    # run 5 h, beyond drain_within
    d = decide(now, nodes, slices(10, waited=2 * HOUR), DRAIN)
    assert [(a.node, a.current, a.target, a.reason) for a in d.actions] == [("n2", "whole", "day", "drain")]
    assert len(d.actions[0].jobs) == 10 and d.actions[0].gain_eq == pytest.approx(10 / 7)
    assert "no idle node starts them" in d.actions[0].why and "end within 20m" in d.actions[0].why
    # off by default (drain_within 0): busy nodes are never taken
    assert decide(now, nodes, slices(10, waited=2 * HOUR), B).actions == ()
    # an idle node that serves them is taken instead of any drain
    d = decide(now, [*nodes, node("n4")], slices(10, waited=2 * HOUR), DRAIN)
    assert [(a.node, a.reason) for a in d.actions] == [("n4", "demand")]


def test_a_drain_keeps_floors_and_cool_downs_and_says_why_when_none_is_possible():
    now = 100_000.0
    starving = slices(5, waited=2 * HOUR)
    cooling = [busy("n1", now + 600, last=now - 600)]
    d = decide(now, cooling, starving, DRAIN)
    assert d.actions == () and any("no busy node" in why for _, why in d.held)
    floored = Bounds(**{**DRAIN.__dict__, "floors": {"whole": 8}})
    d = decide(now, [busy("n1", now + 600), busy("n2", now + 600, layout="day")], starving, floored)
    assert d.actions == ()  # n1 whole -> day would take whole GPUs from 10 to 4, below 8
    # a node switching by drain is incoming capacity: the jobs it will take are not demand again
    switching = [Node("n1", "whole", SHAPES, ("whole", "day"), False, False, "day", -math.inf, {}, now + 600)]
    d = decide(now, [*switching, busy("n2", now + 600)], starving, DRAIN)
    assert d.actions == () and d.unmet == ()


def test_an_idle_switch_that_starts_a_starving_job_comes_before_any_drain():
    """Below min_gain, the idle switch that starts a job waiting max_wait is made, even when
    another idle switch would serve more (of jobs not starving), and no busy node is drained."""
    now = 100_000.0
    shapes = {
        "z": (Records("t0", "mig", 4, 0.1),),
        "x": (Records("t1", "mig", 4, 0.1),),
        "y": (Records("t2", "mig", 4, 0.1),),
    }
    a = Node("a", "z", shapes, ("z", "x"), True, True, None, -math.inf, {"t0": 4}, now)
    b = Node("b", "z", shapes, ("z", "y"), True, True, None, -math.inf, {"t0": 4}, now)
    c = Node("c", "z", shapes, ("z", "y"), False, True, None, -math.inf, {}, now + 600)  # busy, free soon
    jobs = [Job(str(i), GPU, ("t1",), 1, 1, 600.0) for i in range(5)]  # fresh: a to x serves 0.4
    jobs.append(Job("9", GPU, ("t2",), 1, 1, 2 * HOUR))  # starving: b (or a drained c) to y serves 0.1
    d = decide(now, [a, b, c], jobs, DRAIN)  # min_gain 1: neither reaches it
    assert [(x.node, x.target, x.reason, x.jobs) for x in d.actions] == [("b", "y", "demand", ("9",))]
    assert "waited over 1.0h" in d.actions[0].why
