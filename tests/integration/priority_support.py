"""The priority families' checks (#27: the age, partition and fair-share factors), shared by
their kept runs' replays (``tests/unit/test_simulate_{age,partition,fairshare}_replay.py``)
and their live runs (``tests/integration/test_simulate_slurm.py``), so that a kept run and a
live one are judged by the same code: the settings each replay takes from its record and log,
the priorities Slurm logged against the model's, and each group's median wait."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import replace

from slurm_gpupool.simulate.engine import Params
from slurm_gpupool.simulate.fairshare import FairTree
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.metrics import percentile
from slurm_gpupool.simulate.priority import multifactor, priorities, qos_part, static_parts

from .simulate_support import INIT_PRIO, SANDBOX, Kept, median_agrees, stamped_lines

# the decay thread's round, per pending job (``decay_apply_weighted_factors``, at debug2)
PRIO_LINE = re.compile(r"debug2: .*\bpriority for job (\d+) is now (\d+)")
QOS_WEIGHT = 10000  # the sandbox's PriorityWeightQOS


def rounds(kept: Kept, since: float) -> list[tuple[float, dict[str, int]]]:
    """The decay thread's rounds the log dates: (when its first line was logged, job ->
    the priority it gave), in order."""
    out: list[tuple[float, dict[str, int]]] = []
    for at, text in stamped_lines(kept.log, since):
        m = PRIO_LINE.search(text)
        if m is None:
            continue
        if not out or at - out[-1][0] > 1.0:
            out.append((at, {}))
        out[-1][1][m[1]] = int(m[2])
    return out


def _phase(rec: dict, kept: Kept, phased: bool) -> float:
    """Where the decay thread's rounds fall in PriorityCalcPeriod: the log's first round
    (``phased``), else the clock's whole periods, as a site's simulator that knows no
    slurmctld start places them."""
    found = rounds(kept, rec["since"])
    return found[0][0] % rec["priority"]["calc_period_s"] if found and phased else 0.0


def age_params(rec: dict, kept: Kept, phased: bool = True) -> Params:
    """The sandbox's settings with the run's QOS priorities and age settings."""
    pr = rec["priority"]
    return replace(
        SANDBOX,
        qos_priority=tuple(rec["qos"].items()),
        priority_weight_age=pr["weight_age"],
        priority_max_age_s=float(pr["max_age_s"]),
        priority_calc_period_s=float(pr["calc_period_s"]),
        priority_calc_phase_s=_phase(rec, kept, phased),
    )


def partition_params(rec: dict) -> Params:
    """The sandbox's settings with the run's QOS priorities and partitions."""
    return replace(
        SANDBOX,
        qos_priority=tuple(rec["qos"].items()),
        partition_priority=tuple((name, f, t) for name, (f, t) in rec["partitions"].items()),
        priority_weight_partition=rec["priority"]["weight_partition"],
    )


def fair_params(rec: dict, kept: Kept, phased: bool = True) -> Params:
    """The sandbox's settings with the run's QOS priorities and fair-share settings."""
    pr, a = rec["priority"], rec["associations"]
    return replace(
        SANDBOX,
        qos_priority=tuple(rec["qos"].items()),
        priority_weight_fairshare=pr["weight_fairshare"],
        priority_calc_period_s=float(pr["calc_period_s"]),
        priority_calc_phase_s=_phase(rec, kept, phased),
        priority_decay_half_life_s=float(pr["half_life_s"]),
        fairshare_accounts=tuple(tuple(x) for x in a["accounts"]),
        fairshare_users=tuple(tuple(x) for x in a["users"]),
        fairshare_usage=tuple(tuple(x) for x in a["usage"]),
    )


def fair_tree(rec: dict) -> FairTree:
    """The association tree and its usage as the run began."""
    a = rec["associations"]
    return FairTree(
        [tuple(x) for x in a["accounts"]],
        [tuple(x) for x in a["users"]],
        [tuple(x) for x in a["usage"]],
        rec["priority"]["half_life_s"],
    )


def init_prio_mismatches(kept: Kept, rec: dict, ids: dict) -> dict[str, tuple[int | None, int]]:
    """The jobs whose priority at submission (``InitPrio``, logged) is not the model's (the QOS
    part plus PriorityWeightPartition times the partition's PriorityJobFactor over the
    highest): job -> (Slurm's, the model's)."""
    logged = {m[1]: int(m[2]) for m in INIT_PRIO.finditer(kept.log.read_text())}
    jobs = [
        SimJob(int(j), 0, 1, 1, TraceRequest(1, 1000), qos=q, partition=rec["partition"][j])
        for j, (_, _, q) in ids.items()
    ]
    model = dict(zip(ids, priorities(static_parts(jobs, partition_params(rec))), strict=True))
    return {j: (logged.get(j), p) for j, p in model.items() if logged.get(j) != p}


# A loaded controller (CI's: three releases on two cores) computes priorities a little
# earlier than its log says: the decay thread dates a round when it begins (``start_time =
# time(NULL)``), then takes the job lock and adds the usage, and only then logs each pending
# job's priority; and a job accrues age from the main scheduler's first pass over it
# (``acct_policy_handle_accrue_time`` in ``build_job_queue``, under
# ``AccountingStorageEnforce=limits``), not from its submission.  On an idle machine both are
# the same second (every kept run's priorities are checked exactly, ``lag_s`` 0); two CI
# containers' live runs of the age family logged a round's first priority 0.4-0.5 s into
# the second after the one their ages were counted to.  A live run's check allows
# ``LIVE_LAG_S``: each age up to that many seconds short of the model's, a fair-share round
# begun up to that many seconds before its first line.
LIVE_LAG_S = 2


def age_priorities_checked(kept: Kept, rec: dict, real: dict, ids: dict, lag_s: int = 0) -> int:
    """Every priority the decay thread logged is ``multifactor``'s: the QOS part plus the weight
    times the job's whole seconds of age (from its submission's second to the round's, or up
    to ``lag_s`` fewer) over PriorityMaxAge, at most 1, truncated.  Returns how many were
    checked."""
    pr, checked = rec["priority"], 0
    for at, given in rounds(kept, rec["since"]):
        for job, prio in given.items():
            part = qos_part(ids[job][2], rec["qos"], QOS_WEIGHT)
            age = math.floor(at) - math.floor(real[job][0])
            allowed = {multifactor(part, age - k, pr["weight_age"], pr["max_age_s"]) for k in range(lag_s + 1)}
            assert prio in allowed, (job, at, prio, age, sorted(allowed))
            checked += 1
    return checked


def _assoc(rec: dict, job: str) -> tuple[str, str]:
    user, account = rec["owners"][job]
    return account, user


def fair_priorities_checked(kept: Kept, rec: dict, real: dict, ids: dict, lag_s: int = 0) -> int:
    """Each round of the decay thread the log dates: the usage of every run up to it (an ended
    one added at its end, then every usage decayed since the last round, then the running
    ones' added), the tree ranked, and every pending job's priority its QOS part plus the
    weight x its association's factor, truncated (``decay_apply_weighted_factors``), at the
    second of the round's first line or up to ``lag_s`` before (``LIVE_LAG_S``).  Returns how
    many were checked."""
    fair, last, checked = fair_tree(rec), None, 0
    weight = rec["priority"]["weight_fairshare"]
    for at, given in rounds(kept, rec["since"]):
        tried = {}
        for now in (float(math.floor(at) - k) for k in range(lag_s + 1)):
            since = last if last is not None else now - rec["priority"]["calc_period_s"]
            runs = [
                (_assoc(rec, j), rec["billing"][j], math.floor(start), end)
                for j, (_, start, end, _) in real.items()
                if start < now and end > since
            ]
            tree = copy.deepcopy(fair)
            factors = tree.round(since, now, runs)
            model = {
                j: max(1, int(qos_part(ids[j][2], rec["qos"], QOS_WEIGHT) + weight * factors[_assoc(rec, j)]))
                for j in given
            }
            tried[now] = {j: (p, model[j]) for j, p in given.items() if model[j] != p}
            if not tried[now]:
                fair, last = tree, now
                break
        assert fair is tree, (at, tried)
        checked += len(given)
    return checked


def group_medians_missed(
    real: dict, replayed: dict[str, float], group: dict[str, str]
) -> dict[str, tuple[float, float]]:
    """The groups (``group``: job -> its partition, user, ...) whose median wait the replay
    (``replayed``: job -> wait s) misses by the published median tolerance and band
    (``median_agrees``): group -> (Slurm's median, the replay's)."""
    slurm: dict[str, list[float]] = {}
    mine: dict[str, list[float]] = {}
    for j, g in group.items():
        slurm.setdefault(g, []).append(real[j][1] - real[j][0])
        mine.setdefault(g, []).append(replayed[j])
    missed = {}
    for g, waits in slurm.items():
        waits.sort()
        med = percentile(sorted(mine[g]), 50)
        if not median_agrees(waits, med):
            missed[g] = (percentile(waits, 50), med)
    return missed


def users_of(rec: dict) -> dict[str, str]:
    """job -> the user who submitted it."""
    return {j: owner[0] for j, owner in rec["owners"].items()}
