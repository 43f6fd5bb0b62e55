"""#27: the fair-share factor as Slurm's Fair Tree computes it (``fair_tree.c``:
``_calc_tree_fs``; usage as ``priority_multifactor.c`` adds and decays it), and the queue it
orders in the replay."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from slurm_gpupool.simulate.fairshare import FairTree, decay_factor
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from tests.unit.test_simulate_engine import run, spec  # noqa: F401 (spec: the fixture)

# the sandbox's tree: root (its own user root), research (alice, bob), teaching (carol)
ACCOUNTS = (("root", "", 1), ("research", "root", 1), ("teaching", "root", 1))
USERS = (("research", "alice", 1), ("research", "bob", 1), ("teaching", "carol", 1), ("root", "root", 1))


def tree(usage=()) -> FairTree:
    return FairTree(ACCOUNTS, USERS, usage)


def test_with_no_usage_every_level_is_infinite_and_every_user_ties_at_one():
    assert set(tree().rank().values()) == {1.0}


def test_level_fair_share_is_shares_over_usage_ranked_depth_first():
    """root: research, teaching and root's user each 1/3 of the shares; research used 2/3
    of the usage (level 0.5), teaching 1/3 (1.0), root's user none (infinite).  So root's
    user ranks 4 of 4, carol (teaching) 3, then research's users: bob, who used nothing,
    before alice: 2 and 1."""
    fs = tree([("research", "alice", 100.0), ("teaching", "carol", 50.0)]).rank()
    assert fs == {
        ("root", "root"): 1.0,
        ("teaching", "carol"): 0.75,
        ("research", "bob"): 0.5,
        ("research", "alice"): 0.25,
    }
    # an account's usage is its users' (slurmctld rebuilds it so at its start)
    t = tree([("research", "alice", 100.0), ("research", "bob", 20.0)])
    assert t.usage[("research", "")] == 120.0 and t.usage[("root", "")] == 120.0


def test_ties_share_a_rank_and_the_next_one_skips():
    """Competition ranking (``rnt`` counts down whatever the ties): alice and bob used
    alike, so they tie; carol then ranks as the fourth would."""
    fs = tree([("research", "alice", 10.0), ("research", "bob", 10.0), ("teaching", "carol", 100.0)]).rank()
    # root: research 20/120 used (level 2.0), teaching 100/120 (0.4), root's user infinite
    assert fs[("root", "root")] == 1.0
    assert fs[("research", "alice")] == fs[("research", "bob")] == 0.75
    assert fs[("teaching", "carol")] == 0.25


def test_usage_is_billing_seconds_decayed_by_slurms_factor():
    """``_apply_new_usage``: billing x run x df**run to the association and its ancestors;
    ``_apply_decay``: every association times df**dt; df = 1 - 0.693 / half-life."""
    df = decay_factor(7 * 86400)
    assert df == 1 - 0.693 / 604800 and decay_factor(0) == 1.0
    t = tree()
    assert t.run(("research", "alice"), 2, 30) == pytest.approx(60 * df**30, rel=1e-15)
    assert t.usage[("root", "")] == t.usage[("research", "")] == t.usage[("research", "alice")]
    t.decay(3600)
    assert t.usage[("research", "alice")] == pytest.approx(60 * df**3630, rel=1e-12)
    assert t.run(("nowhere", "x"), 2, 30) == 0.0  # an association the tree does not know: nothing


def _job(i: int, submit: float, duration: float, user: str, account: str) -> SimJob:
    return SimJob(i, submit, duration, duration, TraceRequest(4, 1000), account=account, user=user, billing=2)


FAIR = {
    "priority_weight_fairshare": 10000,
    "priority_calc_period_s": 60.0,
    "fairshare_accounts": ACCOUNTS,
    "fairshare_users": USERS,
}


def test_a_user_who_used_less_goes_first_once_a_round_has_counted_the_usage(spec):  # noqa: F811
    """alice holds both nodes from 0 (n1 until 100 s, n2 for long); she asks again at 70 s,
    carol at 80 s.  The round at 60 s counted alice's usage: her factor fell below carol's,
    so carol's job takes n1 at 100 s and alice's follows.  Without the fair-share weight,
    submission order; and so with no round between time 0 and n1's freeing (rounds every
    120 s, the first at 101 s): both jobs have the factors the usage at time 0 gave (all
    1.0), since a job's priority at submission takes its association's last factor."""
    jobs = [
        _job(1, 0, 100, "alice", "research"),
        _job(2, 0, 1000, "alice", "research"),
        _job(3, 70, 100, "alice", "research"),
        _job(4, 80, 100, "carol", "teaching"),
    ]
    _, r = run(spec, jobs, **FAIR)
    assert (r[4].start_s, r[3].start_s) == (100, 200)
    _, r = run(spec, jobs)
    assert (r[3].start_s, r[4].start_s) == (100, 200)
    _, r = run(spec, jobs, **{**FAIR, "priority_calc_period_s": 120.0, "priority_calc_phase_s": 101.0})
    assert (r[3].start_s, r[4].start_s) == (100, 200)


def test_the_factors_follow_the_usage_the_replay_counted(spec):  # noqa: F811
    """After the replay the tree's usage is each user's billing x seconds run up to the last
    round, at 960 s (the replay ends with its last job, before the round at 1020 s; decay is
    about 0.1 % over the run): alice 2 x (100 + 960 + 100), carol 2 x 100."""
    jobs = [
        _job(1, 0, 100, "alice", "research"),
        _job(2, 0, 1000, "alice", "research"),
        _job(3, 70, 100, "alice", "research"),
        _job(4, 80, 100, "carol", "teaching"),
    ]
    from slurm_gpupool.simulate.engine import Engine, Params
    from slurm_gpupool.simulate.switcher import Switcher

    engine = Engine(spec, Switcher("test", [(0.0, "whole")]), replace(Params(), **FAIR))
    res = engine.run(jobs)
    assert all(r.start_s >= 0 for r in res.jobs)
    fair = engine.fair
    assert fair is not None
    assert engine.last_round == 960.0
    assert fair.usage[("research", "alice")] == pytest.approx(2 * 1160, rel=2e-3)
    assert fair.usage[("teaching", "carol")] == pytest.approx(2 * 100, rel=2e-3)
    assert math.isclose(fair.usage[("root", "")], fair.usage[("research", "")] + fair.usage[("teaching", "")])
