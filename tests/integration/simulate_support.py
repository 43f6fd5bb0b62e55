"""The comparison behind #16's validation: the simulator's replay of a sandbox run against
Slurm's own record of it (``test_simulate_slurm.py`` runs it live; the unit tests replay a
recorded run).  Tolerances and the measured hand-over time live here, once."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.config.load import load_config
from slurm_gpupool.reports.sim_accuracy import shipped
from slurm_gpupool.sandbox.users import USERS
from slurm_gpupool.simulate.accuracy import RunError
from slurm_gpupool.simulate.engine import Engine, Params, Result, Switcher
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.metrics import percentile, summarise
from slurm_gpupool.simulate.pool import PoolSpec, pool_spec
from slurm_gpupool.simulate.willrun import release_params

LIMIT_MIN = 1  # every job's --time: Slurm plans with it (backfill), as the simulator does
NO_SWITCH = 1e9  # a run that stayed in the day layout: its switch never comes
# the priority the controller gave a job at submission (26.05 logs its SLUID before it)
INIT_PRIO = re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) (?:SLUID=\S+ )?InitPrio=(\d+)")
# Tolerances. The comparison's resolution: sacct times are whole seconds (a replayed pass at
# x.97 s sees the submissions and ends of second x that came after it), and where the replay
# and Slurm start a job at different times, their next backfill pass for what follows may be
# up to one bf_interval (5 s) apart.
ORDER = 0.90  # share of job pairs (starts > 2 s apart in Slurm) the simulator orders the same
WAIT_REL, WAIT_ABS = 0.10, 5.0  # median and mean wait: within 10 %, or one backfill interval
# ... or, for the median, between Slurm's waits MEDIAN_BAND percentile points either side of
# its median (about two jobs of 64, six of 210).  A queue's waits are often two groups (jobs
# that started at once; jobs that waited for a round of ends), and Slurm's median can fall
# in the gap between them: then one job on the other side moves it by the gap, 8 to 21 s in
# a QOS run on 26.05 (median 17.5 s, 18.1 s in a run of the same workload whose replay gave
# 12.4 s while its mean and p90 agreed within 0.4 s).  Within the band, the replay's median
# splits Slurm's jobs as Slurm's own does, but for those two; the band is two jobs
# wherever the median lies, so it spans a gap within two jobs of it (docs/simulate.md).
MEDIAN_BAND = 3.0
P90_REL, P90_ABS = 0.20, 5.0
UTIL_POINTS = 5.0
SCHED_ROUND_S = 1.0  # the controller's background loop: the main scheduler's rounds for submissions
# the sandbox's scheduler settings (bf_interval=5); the switch made by hand (no lead time);
# every job names its one GRES type, as the real ones do
SANDBOX = Params(bf_interval_s=5, lead_time_s=0, any_model=False, sample_s=5)
# scripts/measure-sim-accuracy sets it: each kept run's replay appends its errors there
# instead of checking them against the shipped accuracy
ACCURACY_LOG = "SLURM_GPUPOOL_ACCURACY_LOG"


# what the controller logs at `info` of a job, on 22.05, 24.11 and 26.05 (a backfill start is
# "sched/backfill: _start_job: Started ..." on 22.05 and 24.11, and not logged on 26.05)
LOG_EVENTS = (
    ("submit", re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) ")),
    ("start", re.compile(r"sched: Allocate JobId=(\d+) NodeList=")),  # the main scheduler
    ("end", re.compile(r"_job_complete: JobId=(\d+) done$")),
)
STAMPED = re.compile(r"^\[(\S+?)\] (.*)")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def stamped_lines(log: Path, since: float, until: float = math.inf) -> Iterator[tuple[float, str]]:
    """(epoch s, text) of each line the controller wrote between ``since`` and ``until``: its
    log spans the sandbox's life, and job IDs start again with a fresh state."""
    with open(log, errors="replace") as lines:
        for line in lines:
            stamped = STAMPED.match(line.rstrip("\n"))
            if stamped is not None and since <= (at := datetime.fromisoformat(stamped[1]).timestamp()) <= until:
                yield at, stamped[2]


def log_events(
    log: Path, jobs: Collection[str], since: float, events: tuple[tuple[str, re.Pattern[str]], ...] = LOG_EVENTS
) -> dict[str, dict[str, float]]:
    """kind -> job -> when (epoch s, milliseconds), from the controller's log from ``since``
    on: each job's first line of each kind (``events``: kind and the pattern its line starts with)."""
    out: dict[str, dict[str, float]] = {kind: {} for kind, _ in events}
    for at, text in stamped_lines(log, since):
        for kind, pattern in events:
            m = pattern.match(text)
            if m is not None and m[1] in jobs:
                out[kind].setdefault(m[1], at)
                break
    return out


@dataclass
class BackfillPasses:
    """What the controller logged of its backfill passes (``DebugFlags=Backfill``)."""

    passes: int = 0
    longest_s: float = 0.0
    yields: int = 0  # a pass yields its locks every bf_yield_interval (2 s)
    breaks: int = 0  # ... and without bf_continue stops there at any job or node change

    def __str__(self) -> str:
        return (
            f"{self.passes} backfill passes, the longest {self.longest_s:.2f} s; "
            f"{self.yields} yielded their locks, {self.breaks} broke off there"
        )


PASS_DONE = re.compile(r"completed testing \d+\(\d+\) jobs, usec=(\d+)")


def backfill_passes(log: Path, since: float, until: float) -> BackfillPasses:
    """The passes logged between ``since`` and ``until`` (epoch s).  The simulator's passes
    test their jobs to the end: a Slurm pass stops early when it breaks off after a yield
    (without ``bf_continue``: on a busy queue, at the first yield, ``backfill.c``
    ``_yield_locks``) or runs past ``bf_max_time`` — what a controller too loaded to finish
    a pass in 2 s does.  (24.11 spells one yield message "after testin".)"""
    seen = BackfillPasses()
    for _, text in stamped_lines(log, since, until):
        done = PASS_DONE.search(text)
        if done is not None:
            seen.passes += 1
            seen.longest_s = max(seen.longest_s, int(done[1]) / 1e6)
        seen.yields += "yielding locks after" in text
        seen.breaks += "breaking out after testing" in text
    return seen


# a backfill pass begins, and ends (logged with DebugFlags=Backfill: seen on 22.05, 24.11 and
# 26.05), or starts a job (logged on 22.05 and 24.11 with or without the flag)
PASS_BEGINS = re.compile(r"(?:sched/backfill: )?_attempt_backfill: beginning$")
PASS_ENDS = re.compile(r"_attempt_backfill: (?:completed testing|no jobs to backfill)")
BACKFILL_START = re.compile(r"(?:sched/backfill: )?_start_job: Started JobId=")


def pass_instants(log: Path, since: float, until: float = math.inf) -> list[float]:
    """When the controller's backfill passes began (epoch s), between ``since`` and
    ``until``: each logged beginning, and, outside a logged pass (the flag off, as after a
    restart), a backfill start more than a second after the last pass seen (a pass that
    started jobs dates itself by its first).  What the replay takes as
    ``Params.bf_passes_s`` (``simulate.cadence``): Slurm's passes have their own phase and
    drift, which moved the replay's median wait by 4 s on one run and 9 s on another."""
    seen: list[float] = []
    open_pass = False
    for at, text in stamped_lines(log, since, until):
        if PASS_BEGINS.search(text):
            seen.append(at)
            open_pass = True
        elif PASS_ENDS.search(text):
            open_pass = False
        elif BACKFILL_START.search(text) and not open_pass and (not seen or at - seen[-1] > 1.0):
            seen.append(at)
    return seen


def handoff_s(
    log: Path,
    real: dict[str, tuple[float, float, float, str]],
    since: float,
    bf_interval_s: float,
    least: int = 20,
    epilogs: bool = True,
) -> Handovers:
    """How long after a job ends the **main scheduler** starts a waiting one in its place —
    what ``Params.release_s`` models (the epilog, the completion, the scheduler's next run;
    Slurm 24.11 and later run it on a one-second tick).  Measured in the controller's log,
    which has milliseconds and says which scheduler started a job (``sched: Allocate``);
    backfill starts are left out: the simulator makes its own passes, and their phase is not
    a hand-over.  The **mean**, over jobs started by the main scheduler, of their start less
    the last end on their nodes that came while they waited, within one backfill interval.

    The mean, not the median: a queue pays one hand-over per job it runs, so its waits grow
    with their sum, and on a loaded machine the gaps have a long tail (CI, 24.11: median
    0.44 s, mean 0.93 s; later runs median 1.35-1.41 s, and a replay given that median
    started jobs 6-14 s early at the median wait).  sacct's whole seconds are not precise
    enough: their median gap, backfill starts included, read 2 s where the controller's log
    says 0.44 s, and a replay handing over 2 s late gave waits 13 % too long.

    With it, each ended job's own (:class:`Handovers`), from the same reading of the log.
    ``least``: the hand-overs the run must have (the day's queue makes dozens; a short kept
    run of a family, 10 or more).  A log that dates the Epilogs' ends (``epilog_ends``) gives
    each job's own release from them instead, and the nodes' completion with it; and the
    phase of the main scheduler's rounds (``rounds_phase``); ``epilogs=False`` leaves them
    out (the main scheduler's hand-overs, as a run logged at ``info`` gives them)."""
    found = _handovers(log, real, since, bf_interval_s)
    gaps = sorted(gap for _, gap in found)
    assert len(gaps) >= least, gaps
    mean = sum(gaps) / len(gaps)
    print(
        f"\nhand-overs: {len(gaps)}, mean {mean:.2f} s, median {percentile(gaps, 50):.2f} s, "
        f"p90 {percentile(gaps, 90):.2f} s, longest {gaps[-1]:.2f} s"
    )
    seen = log_events(log, real.keys(), since)  # (read once for both)
    phase = _phase(seen)
    releases = _releases(seen["end"], epilog_ends(log, real.keys(), since)) if epilogs else {}
    if releases:
        spans = sorted(releases.values())
        print(f"Epilogs: {len(spans)}, median {percentile(spans, 50):.3f} s, longest {spans[-1]:.3f} s")
        return Handovers(sum(spans) / len(spans), releases, completing=True, rounds_phase=phase)
    return Handovers(mean, _own(found), rounds_phase=phase)


def epilog_releases(log: Path, jobs: Collection[str], since: float) -> dict[str, float]:
    """job -> how long after its (first run's) end, ``_job_complete``, the last of that run's
    Epilogs ended, to the millisecond, for each job the log dates both of (``epilog_ends``;
    a requeued job's later runs end their Epilogs two minutes and more after)."""
    return _releases(log_events(log, jobs, since)["end"], epilog_ends(log, jobs, since))


def _releases(ended: dict[str, float], epilogs: dict[str, list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for j, ats in epilogs.items():
        run = [at - ended[j] for at in ats if j in ended and 0.0 <= at - ended[j] <= EPILOG_WITHIN_S]
        if run:
            out[j] = max(run)
    return out


def rounds_phase(log: Path, jobs: Collection[str], since: float) -> float | None:
    """Where in the second the controller's background loop asks the main scheduler to run
    (``Params.sched_tick_phase_s``), from the fractions of the epoch seconds at which it
    started a job (``sched: Allocate``) within a second of its submission: the largest
    cluster of them (within ``ROUND_CLUSTER_S`` of one another), whose circular mean it is.
    Such a start can also be a hand-over (an end on its nodes, its Epilog, then the main
    scheduler at once), which falls anywhere in the second.  None: the log has no such start."""
    return _phase(log_events(log, jobs, since))


def _phase(seen: dict[str, dict[str, float]]) -> float | None:
    sub, start = seen["submit"], seen["start"]
    fractions = [start[j] % 1.0 for j in start if j in sub and start[j] - sub[j] <= 1.0]
    if not fractions:
        return None

    def near(f: float) -> list[float]:
        return [g for g in fractions if min(abs(f - g), 1 - abs(f - g)) <= ROUND_CLUSTER_S]

    cluster = max((near(f) for f in fractions), key=len)
    x = sum(math.cos(2 * math.pi * f) for f in cluster)
    y = sum(math.sin(2 * math.pi * f) for f in cluster)
    return (math.atan2(y, x) / (2 * math.pi)) % 1.0


ROUND_CLUSTER_S = 0.05  # rounds of one phase start their jobs within a few tens of ms of it


def handoff_gaps(
    log: Path, real: dict[str, tuple[float, float, float, str]], since: float, bf_interval_s: float
) -> list[float]:
    """Each hand-over the main scheduler made (s), as :func:`handoff_s` reads them."""
    return [gap for _, gap in _handovers(log, real, since, bf_interval_s)]


def _own(found: list[tuple[str, float]]) -> dict[str, float]:
    """Each ended job's own hand-over (``SimJob.release_s``): the gap to the first start its
    end was the last before (a job no start followed takes the mean)."""
    own: dict[str, float] = {}
    for ended, gap in found:
        own[ended] = min(gap, own.get(ended, gap))
    return own


def _handovers(
    log: Path, real: dict[str, tuple[float, float, float, str]], since: float, bf_interval_s: float
) -> list[tuple[str, float]]:
    """(the job whose end freed the GPUs, the gap to the start it freed them for), for each
    job the main scheduler started after a job had ended on its nodes while it waited.  The
    log names nodes, not GPUs: of several jobs that ended there meanwhile, the last."""
    seen = log_events(log, real.keys(), since)
    ends: dict[str, list[tuple[float, str]]] = {}
    for job, at in seen["end"].items():
        for node in NodeSet(real[job][3]):
            ends.setdefault(node, []).append((at, job))
    found = []
    for job, at in seen["start"].items():
        waiting_from = max(seen["submit"].get(job, real[job][0]), at - bf_interval_s)
        before = [e for node in NodeSet(real[job][3]) for e in ends.get(node, ()) if waiting_from <= e[0] <= at]
        if before:  # else it started when submitted (the next tick): no hand-over
            end, ended = max(before)
            found.append((ended, at - end))
    return found


def recorded(record: Path) -> tuple[dict, dict[str, tuple[TraceRequest, int, str]], PoolSpec]:
    """A run recorded on the sandbox (a fixture's JSON, as ``tests/fixtures/record_simulate_*``
    write it), each job's (request, sleep s, QOS) from it, and the pool it ran on (the
    repository's example config, day and night layouts)."""
    rec = json.loads(record.read_text())
    ids = {j: (TraceRequest(*v[:4]), v[4], v[5]) for j, v in rec["ids"].items()}
    example = Path(__file__).resolve().parents[2] / "etc" / "gpupool.yaml"
    return rec, ids, pool_spec(load_config(example), ["day", "night"])


def day_mapper(spec: PoolSpec) -> Engine:
    """What a validation run submits (``Engine.need("day", request)``): each request as the
    GRES the simulator maps it to in the day layout, as ``gpupool-sbatch`` would."""
    return Engine(spec, Switcher("map", [(0.0, "day")]), SANDBOX)


# Kept runs whose replay misses a tolerance, not explained yet (docs/simulate.md, "Validation
# families on each release"): the run's label (``Kept.label``) -> the first measure the
# comparison finds out of tolerance.  Their tests assert that it still misses there, so a
# change that brings one within (or moves the miss) is seen; the tolerances stay as published.
KNOWN_MISSES = {
    # (the first seed's run on 24.11, 30.1 s against Slurm's 25.0 s on the replay's grid, was
    # listed here until the median's band, ``MEDIAN_BAND``: Slurm's waits of 23 to 31 s lie
    # within two jobs of its median)
    "qos-s3131@24.11": "median wait",
    # the phase of the replay's grid alone: at any other whole second of the 5 s it agrees
    # (test_simulate_qos_replay.py; 26.05 logs no backfill start to date Slurm's passes by)
    "qos-s6161@26.05": "median wait",
    # sacct's whole seconds: Slurm started A100x2 jobs 30 s later than the replay, whose
    # whole-second submissions put one such job into a round of the main scheduler 0.57 s
    # before it was submitted; given the log's millisecond times and passes the replay is
    # Slurm's run (test_seed_7171_on_24_11_is_slurms_run_given_the_logs_submissions_and_passes).
    # Its median (16.1 s replayed, 33.0 s in Slurm) lies in the gap of Slurm's waits from
    # 16 to 32 s, within ``MEDIAN_BAND``; the mean (27.5-27.7 s against 32.9-33.1 s) misses
    "qos-s7171@24.11": "mean wait",
    "qos-s7171@26.05": "mean wait",
}


@dataclass(frozen=True)
class Kept:
    """One kept validation run: the release it ran on and its files' stem under the
    fixtures (``<release>/<stem>.json`` and ``<stem>-slurmctld.log``): ``simulate-<family>``
    for the family's first seed, ``simulate-<family>-s<seed>`` for each other workload of
    the family (``tests/fixtures/record_simulate_<family>.py RELEASE SEED``)."""

    release: str
    stem: str
    root: Path = FIXTURES  # a live run's: where the test wrote it

    @property
    def label(self) -> str:
        """``burst@22.05``, ``burst-s5151@22.05``: how the accuracy file and
        ``KNOWN_MISSES`` name it."""
        return f"{self.stem.removeprefix('simulate-')}@{self.release}"

    @property
    def record(self) -> Path:
        return self.root / self.release / f"{self.stem}.json"

    @property
    def log(self) -> Path:
        return self.root / self.release / f"{self.stem}-slurmctld.log"


def logged_times(log: Path, rec: dict, ids: dict) -> dict[str, tuple[float, float | None, float]]:
    """job -> (submission, start, end) of its one run as the controller's log times them
    (milliseconds), sacct's where the log has none: a start by the main scheduler (``sched:
    Allocate``) or backfill (``_start_job``; 26.05 logs none of backfill's: for a job that
    completed, its end less its sleep and the median overhead of the jobs whose start was
    logged, launch and completion: 0.09-0.46 s, a median of 0.12-0.14 s on each release).
    sacct's whole seconds are up to a second off, and along a queue of short jobs the errors
    added up until one missed a backfill pass (a 22.05 live run: the median wait 51.3 s
    replayed against 46.0 s; 46.3 s with the log's times)."""
    seen = log_events(log, ids, rec["since"], RUN_EVENTS)
    sub, start, end = seen["submit"], seen["start"], seen["end"]
    completed = [j for j, r in rec["runs"].items() if len(r) == 1 and r[0][3] == "COMPLETED" and j in end]
    launched = sorted(end[j] - start[j] - ids[j][1] for j in completed if j in start)
    overhead = launched[len(launched) // 2] if len(launched) >= 10 else None
    out: dict[str, tuple[float, float | None, float]] = {}
    for j, runs in rec["runs"].items():
        s_sub, s_start, s_end = runs[0][:3]
        if len(runs) > 1 or j not in sub:  # requeued: sacct's, run by run
            out[j] = (s_sub, s_start, s_end)
            continue
        began = start.get(j, s_start)
        if j not in start and j in completed and overhead is not None:
            began = end[j] - ids[j][1] - overhead
        out[j] = (
            _within(sub[j], s_sub),
            None if s_start is None else _within(began, s_start),
            _within(end.get(j, s_end), s_end),
        )
    return out


# the controller's line at ``debug2`` once a node's Epilog of a job has ended (the kept runs
# recorded with ``record_simulate_qos.epilogs_logged``): until then Slurm starts no job there
EPILOG_DONE = re.compile(r"debug2: _slurm_rpc_epilog_complete: JobId=(\d+)\b")


def epilog_ends(log: Path, jobs: Collection[str], since: float) -> dict[str, list[float]]:
    """job -> when each of its Epilogs ended (epoch s, milliseconds; one per node and run),
    for each job the controller logged one of (none, for a run recorded at ``info``)."""
    out: dict[str, list[float]] = {}
    for at, text in stamped_lines(log, since):
        m = EPILOG_DONE.match(text)
        if m is not None and m[1] in jobs:
            out.setdefault(m[1], []).append(at)
    return out


EPILOG_WITHIN_S = 60.0  # a run's Epilogs end within this of its end (a requeued run's next: 121 s on)


def _within(at: float | None, second: float | None) -> float | None:
    """``at`` kept in the second sacct recorded (none: as it is): an inferred start can fall
    outside it (its sleep's overhead varies), and a logged line can follow its second's tick
    by a few ms."""
    return at if second is None or at is None else min(max(at, second), second + 0.999)


# LOG_EVENTS with backfill's starts too (``BACKFILL_START``)
RUN_EVENTS = (
    LOG_EVENTS[0],
    ("start", re.compile(r"(?:sched: Allocate JobId=|(?:sched/backfill: )?_start_job: Started JobId=)(\d+)\b")),
    LOG_EVENTS[2],
)


def first_runs(kept: Kept) -> tuple[dict, dict, dict, PoolSpec, Handovers]:
    """A kept run whose record has every run of each job (``runs``: trace A, the chains):
    the record, (submission, start, end, nodes) of each job's first run (a job that never
    ran has no start), the jobs' requests, the pool, and the mean hand-over of the jobs that
    ran (as ``handoff_s`` reads it, which wants the 20 or more of a 210-job run).  The
    times are the log's where it has them (:func:`logged_times`); ``rec["runs"]`` keeps
    sacct's.  Read with the recording machine's TZ, UTC."""
    rec, ids, spec = recorded(kept.record)
    timed = logged_times(kept.log, rec, ids)
    real = {j: (*timed[j], r[0][4]) for j, r in rec["runs"].items()}
    ran = {j: v for j, v in real.items() if v[1] is not None}
    return rec, real, ids, spec, recorded_handoff(kept.log, ran, rec["since"])


def real_runs(kept: Kept) -> tuple[dict, dict, dict, PoolSpec, Handovers]:
    """A kept run whose record has one run per job (``real``: the QOS priorities family), as
    :func:`first_runs` gives one: the record, (submission, start, end, nodes) of each job, the
    jobs' requests, the pool and the mean hand-over.  Read with the recording machine's TZ, UTC."""
    rec, ids, spec = recorded(kept.record)
    real = log_timed(kept.log, {j: tuple(v) for j, v in rec["real"].items()}, rec["since"], ids)
    return rec, real, ids, spec, recorded_handoff(kept.log, real, rec["since"])


def log_timed(
    log: Path, real: dict[str, tuple[float, float, float, str]], since: float, ids: dict
) -> dict[str, tuple[float, float, float, str]]:
    """``real`` (sacct's (submission, start, end, nodes) of jobs that each ran once and
    completed) with the controller's times, to the millisecond (``logged_times``), where its
    log dates the Epilogs' ends (``epilog_ends``, a run at ``debug2``): for a node's
    completion to fall in the replay where it fell in Slurm.  As it is otherwise."""
    if not epilog_ends(log, ids, since):
        return real
    runs = {j: [[*v[:3], "COMPLETED", v[3]]] for j, v in real.items()}
    timed = logged_times(log, {"since": since, "runs": runs}, ids)
    return {j: (*timed[j], v[3]) for j, v in real.items()}  # type: ignore[misc]  # (a job that ran has a start)


def sleeps(rec: dict, ids: dict, never: Collection[str] = (), real: dict[str, tuple] | None = None) -> dict[str, float]:
    """What the replay runs of each job that never ran in Slurm (``never``) and of each the
    controller ended at its limit: its whole work, its sleep (a run ended by the check in
    the second of its limit is recorded as 60 s, which would not look past the limit to the
    replay).  Given ``real`` (job -> (submission, start, end, ...), the log's times), a job
    past its limit whose sleep ended before the check ran what it ran in Slurm, its sleep and
    the launch and completion around it, at most ``LAUNCH_MAX_S`` more (a start the log does
    not date is sacct's whole second, up to 1 s early): on its bare sleep a 70 s job past
    its 60 s limit ended 0.4 s early in a 24.11 replay, its node was completing it at the
    backfill pass at which Slurm started a slice there, and the slice started 4.5 s late."""
    states = {j: r[0][3] for j, r in rec["runs"].items()}
    out = {}
    for j in ids:
        if j in never or states[j] == "TIMEOUT":
            sleep = float(ids[j][1])
            ran = real[j][2] - real[j][1] if real and real[j][1] is not None and real[j][2] is not None else 0.0
            out[j] = max(sleep, min(ran, sleep + LAUNCH_MAX_S))
    return out


# the most a batch job's launch and completion add to its sleep on the sandbox (0.09-0.46 s
# measured on every release: ``logged_times``)
LAUNCH_MAX_S = 0.5


def kept_runs(family: str) -> list[Kept]:
    """Every kept run of ``family`` on every release, oldest release first, the first seed
    first."""
    seeds = re.compile(rf"simulate-{re.escape(family)}(-s\d+)?\.json")
    found = [
        Kept(d.name, p.name.removesuffix(".json"))
        for d in FIXTURES.iterdir()
        if d.is_dir()
        for p in d.iterdir()
        if seeds.fullmatch(p.name)
    ]
    return sorted(found, key=lambda k: (tuple(int(x) for x in k.release.split(".")), len(k.stem), k.stem))


def recorded_releases(family: str) -> list[str]:
    """The releases with a kept run of ``family``'s first seed (``<release>/simulate-<family>.json``)."""
    return [k.release for k in kept_runs(family) if k.stem == f"simulate-{family}"]


def assert_spread_over_users(rec: dict) -> None:
    """The run's jobs were the sandbox's unprivileged users', each in its account, as
    accounting kept them (the record's ``owners``: job -> [user, account]): at least three
    users in two accounts, no job of root's, each job charged to its submitter's account."""
    account_of = {u.name: u.account for u in USERS}
    owners = rec["owners"]
    assert set(owners) == set(rec["ids"])
    for job, (user, account) in owners.items():
        assert user == rec["ids"][job][6] and account == account_of[user], (job, user, account)
    assert len({u for u, _ in owners.values()}) >= 3 and len({a for _, a in owners.values()}) >= 2


@dataclass(frozen=True)
class Handovers:
    """A recorded run's hand-overs as the replay takes them: each ended job's own
    and, for a job no start followed, their mean (:func:`handoff_s` reads both).
    ``completing``: the own ones are the Epilogs' ends, to the millisecond, and the nodes
    complete meanwhile (``Params.completing_blocks_node``); ``rounds_phase``: where the main
    scheduler's rounds fall (``Params.sched_tick_phase_s``; None: not known)."""

    mean: float
    own: dict[str, float]
    completing: bool = False
    rounds_phase: float | None = None


def recorded_handoff(log: Path, real: dict[str, tuple[float, float, float, str]], since: float) -> Handovers:
    """The hand-overs of a short recorded run (a fixture), as :func:`handoff_s` reads them
    from a 210-job one: at least 10."""
    return handoff_s(log, real, since, SANDBOX.bf_interval_s, least=10)


def _concordant(real: dict[str, float], sim: dict[str, float]) -> float:
    """Share of pairs that Slurm started > 2 s apart which the simulator starts in the same order."""
    ids = sorted(real)
    same = total = 0
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            x, y = ids[a], ids[b]
            if abs(real[x] - real[y]) <= 2:
                continue
            total += 1
            same += (real[x] < real[y]) == (sim[x] < sim[y])
    return same / total if total else 1.0


def median_agrees(real_wait: list[float], med_s: float) -> bool:
    """The replay's median wait ``med_s`` agrees with Slurm's sorted waits: within the
    tolerance of their median, or between their percentiles ``MEDIAN_BAND`` points
    either side of it (where Slurm's median falls in a gap between two groups of waits)."""
    med_r = percentile(real_wait, 50)
    if abs(med_s - med_r) <= max(WAIT_REL * med_r, WAIT_ABS):
        return True
    return percentile(real_wait, 50 - MEDIAN_BAND) <= med_s <= percentile(real_wait, 50 + MEDIAN_BAND)


def _compare(
    ids, real, epoch, res, switch_at, out, exact, held=None, kept=None, judged=True
) -> dict[str, tuple[float, float]]:
    """The simulator's replay against Slurm's: start order, waits, utilisation; returns
    measure -> (Slurm's, the simulator's).  ``held``: job -> the (start, end) of each of its
    runs, when it had more than the one in ``real`` (a preempted job's).  ``kept``: the kept
    run's name (family@release) when this is its replay as the simulator makes it for a site:
    then its errors must be within the simulator's shipped accuracy (:func:`_kept`), whether
    or not it meets the tolerances (a run in ``KNOWN_MISSES`` errs more than them)."""
    sim = {str(r.job_id): r for r in res.jobs}
    assert all(sim[j].start_s >= 0 for j in ids), [sim[j] for j in ids if sim[j].start_s < 0][:3]
    real_start = {j: real[j][1] - epoch for j in ids}
    sim_start = {j: sim[j].start_s for j in ids}
    real_wait = sorted(real[j][1] - real[j][0] for j in ids)
    sim_wait = sorted(sim[j].wait_s for j in ids)
    concordant = _concordant(real_start, sim_start)
    med_r, med_s = percentile(real_wait, 50), percentile(sim_wait, 50)
    mean_r, mean_s = sum(real_wait) / len(real_wait), sum(sim_wait) / len(sim_wait)
    p90_r, p90_s = percentile(real_wait, 90), percentile(sim_wait, 90)
    # utilisation over the same window (first submission to last), GPU-eq held / offered
    horizon = res.window_s  # the last submission, a cancelled job's too
    spans = {j: (held or {}).get(j, [(real[j][1], real[j][2])]) for j in ids}
    held_real = sum(sim[j].eq * max(0.0, min(e - epoch, horizon) - (b - epoch)) for j in ids for b, e in spans[j])
    summary = summarise(res)
    util_sim = 100 * summary["utilisation"]
    util_real = 100 * held_real / (summary["capacity_eq_h"] * 3600)
    print(
        f"\n{'exact' if exact else 'fast'}: {len(ids)} jobs; order {concordant:.3f}; median wait real {med_r:.1f} s "
        f"sim {med_s:.1f} s; mean real {mean_r:.1f} s sim {mean_s:.1f} s; p90 real {p90_r:.1f} s sim {p90_s:.1f} s; utilisation real {util_real:.1f} % sim "
        f"{util_sim:.1f} %; switch at {switch_at:.0f} s, out of service median {percentile(out, 50):.1f} s"
    )
    print(_detail(real_wait, sim_wait, real_start, sim_start))
    print(first_apart(real, epoch, sim, ids))
    figures = {"median wait": (med_r, med_s), "mean wait": (mean_r, mean_s), "p90 wait": (p90_r, p90_s)}
    if kept is not None:  # before the tolerances: a kept run that misses them counts in the error too
        waits = {measure.removesuffix(" wait"): v for measure, v in figures.items()}
        _kept(RunError(kept, waits, (util_real, util_sim), concordant))
    if not judged:
        return figures
    assert concordant >= ORDER, ("order", concordant)
    assert median_agrees(real_wait, med_s), ("median wait", med_r, med_s)
    assert abs(mean_s - mean_r) <= max(WAIT_REL * mean_r, WAIT_ABS), ("mean wait", mean_r, mean_s)
    assert abs(p90_s - p90_r) <= max(P90_REL * p90_r, P90_ABS), ("p90 wait", p90_r, p90_s)
    assert abs(util_sim - util_real) <= UTIL_POINTS, ("utilisation", util_real, util_sim)
    assert med_r > 0 and p90_r > 10  # the trace did queue: the comparison says something
    return figures


def _detail(
    real_wait: list[float], sim_wait: list[float], real_start: dict[str, float], sim_start: dict[str, float]
) -> str:
    """What a miss needs to be understood from a CI log alone, where the run's record is
    lost with the machine (shown with a failing test's output): each side's waits about its
    median (a gap there is the median's band's case), and the jobs whose starts differ most."""
    mid = len(real_wait) // 2

    def about(waits: list[float]) -> str:
        return " ".join(f"{w:.1f}" for w in waits[max(0, mid - 4) : mid + 5])

    apart = sorted(real_start, key=lambda j: -abs(sim_start[j] - real_start[j]))[:6]
    moved = ", ".join(f"{j} {real_start[j]:.1f}/{sim_start[j]:.1f}" for j in apart)
    return (
        f"  waits about the median, Slurm: {about(real_wait)}; replay: {about(sim_wait)}\n"
        f"  starts farthest apart (job Slurm/replay s): {moved}"
    )


def first_apart(real: dict, epoch: float, sim: dict, ids: Collection[str], window_s: float = 30.0) -> str:
    """Where the replay first parted from Slurm, for a miss read from a CI log alone: the
    job whose start came first (in either run) among those started more than 2 s apart, and
    what ran on its node in Slurm in the ``window_s`` before the later of its two starts: each job's start and end in
    Slurm and in the replay (a CI miss on 24.11 was a dependency's Epilog: its job 8 and
    job 14 took that node in the other order).  Times in s from the first submission."""
    apart = [j for j in ids if abs(sim[j].start_s - (real[j][1] - epoch)) > 2.0]
    if not apart:
        return "  no start more than 2 s apart"
    j = min(apart, key=lambda k: (min(sim[k].start_s, real[k][1] - epoch), int(k)))
    at = max(sim[j].start_s, real[j][1] - epoch)
    nodes = set(NodeSet(real[j][3]))

    def run(k: str) -> str:
        r = sim[k]
        sim_part = f"{r.start_s:.2f}-{r.end_s:.2f}" if r.start_s >= 0 else "not run"
        return f"{k} ({r.need}) Slurm {real[k][1] - epoch:.2f}-{real[k][2] - epoch:.2f}, replay {sim_part}"

    near = sorted(
        (
            k
            for k in ids
            if k != j
            and nodes & set(NodeSet(real[k][3]))
            and real[k][1] - epoch <= at
            and real[k][2] - epoch >= at - window_s
        ),
        key=lambda k: real[k][1],
    )
    lines = [f"  first start apart: {run(j)}, submitted {real[j][0] - epoch:.2f}, on {real[j][3]} in Slurm"]
    lines += [f"    ran there in Slurm within {window_s:.0f} s before: {run(k)}" for k in near[-8:]]
    return "\n".join(lines)


def _kept(err: RunError) -> None:
    """A kept run's errors: logged for scripts/measure-sim-accuracy, or held to the shipped
    figures that ``gpupool simulate`` and ``report advice`` print beside theirs."""
    log = os.environ.get(ACCURACY_LOG)
    if log:
        with open(log, "a") as f:
            f.write(
                json.dumps({"run": err.run, "waits": err.waits, "utilisation": err.utilisation, "order": err.order})
            )
            f.write("\n")
        return
    over = shipped().exceeded(err)
    assert not over, (err, f"errs more than the shipped accuracy on {over}: run scripts/measure-sim-accuracy")


def replay_and_compare(
    spec,
    params: Params,
    ids,
    real,
    switch_at: float,
    out: list[float],
    handoff: float | Handovers,
    release: str | None = None,
    work: dict[str, float] | None = None,
    requeue: Collection[str] = (),
    results: dict[bool, Result] | None = None,
    held: dict[str, list[tuple[float, float]]] | None = None,
    cancel: dict[str, float] | None = None,
    kept: str | None = None,
    passes: Collection[float] = (),
    after: dict[str, list] | None = None,
    checks: Collection[float] = (),
    judged: bool = True,
    partition: dict[str, str] | None = None,
    owners: dict[str, list[str]] | None = None,
    billing: dict[str, float] | None = None,
) -> dict[bool, dict[str, tuple[float, float]]]:
    """The same jobs in the simulator, with their submission and run times as Slurm recorded
    them, the switch when it began (``switch_at`` s after the first submission) and the
    measured out-of-service and hand-over times (``ids``: job -> (request, sleep s[, QOS]));
    then compared with Slurm's run (what
    :func:`_compare` returns, with every reservation placed and with the fast shortcut).
    ``release``: the Slurm release that ran, whose backfill rules the replay takes
    (``willrun.release_params``; None: ``params``'); the clock's epoch aligns its batches.
    ``work``: the run time of a job whose recorded run is not its whole work (one a
    preemption ended for good); ``requeue``: the jobs submitted with ``--requeue``;
    ``results``: filled with each replay's own result; ``held``: each run of a job that ran
    more than once (:func:`_compare`); ``cancel``: job -> when (epoch s) its user cancelled
    it while it was pending in Slurm (``scancel``): replayed (it queues until then), not
    compared (it has no start); its ``work`` is what it would have run.  ``kept``: see
    :func:`_compare`.  ``passes``: when Slurm's backfill passes began (epoch s,
    :func:`pass_instants`): the replay's passes fall there (none: on its own grid).
    ``after``: job -> [[the jobs it depends on], afterany?] (``--dependency``).
    ``checks``: when the controller's time-limit checks ended jobs (epoch s,
    ``burst_support.checks``): the replay's checks count from the nearest.
    ``handoff``: every job's, or the run's :class:`Handovers` (each job's own, the mean for
    the others).  ``judged``: False, the tolerances are not checked (the kept run's
    error still is).  ``partition``: job -> the partition it was submitted to; ``owners``:
    job -> [user, account] (its association, for the fair-share factor); ``billing``: job ->
    what a second of its run adds to its association's usage.  A job
    that never started in Slurm (cancelled while pending, or its dependency never
    satisfied) is replayed but not compared.

    A kept run's error (``kept``) is that of its replay as a site's simulator makes it,
    which knows neither each job's own hand-over nor the controller's passes: the mean
    hand-over, on the replay's own grid.  Given them, the replay is compared with Slurm
    as well, without logging its error."""
    epoch = min(v[0] for v in real.values())
    work = work or {}
    own_release = handoff.own if isinstance(handoff, Handovers) else {}
    completing = isinstance(handoff, Handovers) and handoff.completing
    phase = handoff.rounds_phase if isinstance(handoff, Handovers) else None
    handoff = handoff.mean if isinstance(handoff, Handovers) else handoff
    if kept is not None and (own_release or passes or phase is not None):
        site = (spec, params, ids, real, switch_at, out, handoff, release, work, requeue, None, held, cancel)
        more = {"partition": partition, "owners": owners, "billing": billing}
        replay_and_compare(*site, kept=kept, after=after, checks=checks, judged=False, **more)
        kept = None
    order = sorted(ids, key=lambda j: (real[j][0], int(j)))
    jobs = [
        SimJob(
            int(j),
            real[j][0] - epoch,
            work[j] if j in work else real[j][2] - real[j][1],
            LIMIT_MIN * 60.0,
            ids[j][0],
            requeue=j in requeue,
            qos=ids[j][2] if len(ids[j]) > 2 else "normal",
            partition=(partition or {}).get(j, ""),
            user=(owners or {}).get(j, [""])[0],
            account=(owners or {}).get(j, ["", ""])[1],
            billing=float((billing or {}).get(j, 1.0)),
            cancel_s=(cancel or {})[j] - epoch if j in (cancel or {}) else None,
            after=tuple(int(d) for d in (after or {}).get(j, [[]])[0]),
            after_any=bool((after or {}).get(j, [[], False])[1]),
            release_s=own_release.get(j),
        )
        for j in order
    ]
    sw = Switcher("schedule", [(0.0, "day"), (switch_at, "night")])
    got = {}
    for exact in (True, False):  # every reservation placed as Slurm does, and the fast shortcut
        measured = {"switch_s": percentile(out, 50), "release_s": handoff, "clock_origin_s": epoch}
        # the main scheduler's rounds, once a second: where the log puts them, else from the
        # first submission (a site's accounting dates none); the nodes' completion where the
        # Epilogs' ends are known to the millisecond
        measured["sched_tick_s"] = SCHED_ROUND_S
        if SCHED_ROUND_S:
            measured["sched_tick_phase_s"] = epoch % SCHED_ROUND_S if phase is None else phase
        measured["completing_blocks_node"] = completing
        measured["bf_passes_s"] = tuple(at - epoch for at in passes)  # Params sorts them
        measured["limit_checks_s"] = tuple(at - epoch for at in checks)
        if release is not None:
            measured.update(release_params(release))
        fields = {**params.__dict__, **measured, "window_s": None, "bf_exact": exact}
        res = Engine(spec, sw, Params(**fields)).run(jobs)
        if results is not None:
            results[exact] = res
        ran = {j: v for j, v in ids.items() if j not in (cancel or {}) and real[j][1] is not None}
        got[exact] = _compare(ran, real, epoch, res, switch_at, out, exact, held, kept, judged)
    return got
