"""#27's partition factor and partition tiers, replayed from recorded runs: the QOS family's
sandbox (``high`` 100, ``low`` 10, the rest ``normal``; MIG slices beside whole A100s and
V100s) with two more partitions over the same nodes, ``urgent`` (``PriorityJobFactor=4``)
and ``express`` (``PriorityTier=2``), and ``PriorityWeightPartition=10000``; 80 jobs of
6-24 s at 3 a second, half in the sandbox's ``gpu`` partition, run on the sandbox of each
release by ``tests/fixtures/record_simulate_partition.py``
(``tests/fixtures/slurm/<release>/simulate-partition*``: what sacct said of each job, its
request, QOS, partition, user and account, the partitions' settings, and the controller's
log lines of those jobs).  Every kept run's replay must agree within the published
tolerances with the partition factor and tiers modelled (``simulate.priority``)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from slurm_gpupool.simulate.metrics import percentile
from tests.integration import simulate_support as support
from tests.integration.priority_support import group_medians_missed, init_prio_mismatches, partition_params
from tests.integration.simulate_support import NO_SWITCH, SANDBOX, replay_and_compare
from tests.unit.test_simulate_qos_replay import run  # noqa: F401  (the kept run, its times read in UTC)


@pytest.fixture(params=support.kept_runs("partition"), ids=lambda k: k.label)
def kept(request) -> support.Kept:
    return request.param


def _waits(real: dict, rec: dict, partition: str) -> list[float]:
    return sorted(real[j][1] - real[j][0] for j in rec["partition"] if rec["partition"][j] == partition)


def test_the_record_queued_and_the_express_tier_went_first(run, kept):  # noqa: F811
    rec, real, ids, _, _ = run
    support.assert_spread_over_users(rec)
    assert len(real) == len(ids) == 80
    assert set(rec["partition"].values()) == set(rec["partitions"]) == {"gpu", "urgent", "express"}
    gpu, express = _waits(real, rec, "gpu"), _waits(real, rec, "express")
    # the gpu partition's jobs queued, the express tier's waited far less
    assert percentile(gpu, 50) > 2 * SANDBOX.bf_interval_s and percentile(express, 50) < percentile(gpu, 50) / 2


def test_slurm_gave_each_job_the_priority_the_simulator_gives_it(run, kept):  # noqa: F811
    """The controller logs each job's priority at submission (``InitPrio``): the QOS part plus
    PriorityWeightPartition times its partition's PriorityJobFactor over the highest."""
    rec, _, ids, _, _ = run
    assert not init_prio_mismatches(kept, rec, ids)
    logged = {m[1]: int(m[2]) for m in support.INIT_PRIO.finditer(kept.log.read_text())}
    assert {2500, 10000, 12500} <= set(logged.values())


def test_the_replay_with_the_partitions_agrees_with_slurm(run, kept):  # noqa: F811
    """Within every tolerance; and given the backfill passes the controller's log dates (as
    the live validation replays), each partition's median wait too (24.11: ``urgent`` 8.1 s
    in Slurm and replayed; on the replay's own grid 1.5 s, the passes' phase: 26.05 logs no
    backfill start to date them by, and is judged on the kinds alone)."""
    rec, real, ids, spec, handoff = run
    got = replay_and_compare(
        spec, partition_params(rec), ids, real, NO_SWITCH, [60.0], handoff, kept.release,
        kept=kept.label, partition=rec["partition"],
    )  # fmt: skip
    for exact in (True, False):
        assert got[exact]["median wait"][0] > 0
    passes = support.pass_instants(kept.log, rec["since"])
    if not passes:
        assert kept.release == "26.05"
        return
    results: dict = {}
    replay_and_compare(
        spec, partition_params(rec), ids, real, NO_SWITCH, [60.0], handoff, kept.release,
        results=results, partition=rec["partition"], passes=passes,
    )  # fmt: skip
    replayed = {str(r.job_id): r.wait_s for r in results[True].jobs}
    assert not group_medians_missed(real, replayed, rec["partition"])


def test_without_the_partitions_the_express_jobs_wait_behind_the_others_in_the_replay(run, kept):  # noqa: F811
    """The QOS priorities alone (the engine before the partition factor and tiers): the express
    tier's jobs no longer go first, and their median wait in the replay grows past Slurm's
    by more than the tolerance allows."""
    rec, real, ids, spec, handoff = run
    qos_only = replace(SANDBOX, qos_priority=tuple(rec["qos"].items()))
    results: dict[str, dict] = {"with": {}, "without": {}}
    for name, p in (("with", partition_params(rec)), ("without", qos_only)):
        try:
            replay_and_compare(
                spec, p, ids, real, NO_SWITCH, [60.0], handoff, kept.release,
                results=results[name], partition=rec["partition"],
            )  # fmt: skip
        except AssertionError:
            assert name == "without"
    express = [j for j in ids if rec["partition"][j] == "express"]

    def replayed(name: str) -> float:
        waits = {str(r.job_id): r.wait_s for r in results[name][True].jobs}
        return percentile(sorted(waits[j] for j in express), 50)

    real_median = percentile(_waits(real, rec, "express"), 50)
    assert replayed("without") > max(real_median * 1.1, real_median + 5) >= replayed("with") - 5


def _replayed_wait(monkeypatch, release: str, job: str) -> tuple[float, float]:
    """Seed 3498140236's kept run on ``release``, replayed at its logged passes: ``job``'s
    wait in Slurm and in the replay."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    kept = support.Kept(release, "simulate-partition-s3498140236")
    rec, real, ids, spec, handoff = support.real_runs(kept)
    results: dict = {}
    replay_and_compare(
        spec, partition_params(rec), ids, real, NO_SWITCH, [60.0], handoff, kept.release,
        results=results, partition=rec["partition"], passes=support.pass_instants(kept.log, rec["since"]),
    )  # fmt: skip
    replayed = {str(r.job_id): r.wait_s for r in results[True].jobs}
    monkeypatch.undo()
    time.tzset()
    return real[job][1] - real[job][0], replayed[job]


def test_a_job_starts_in_the_pass_between_an_end_and_its_epilog_as_in_slurm(monkeypatch):
    """26.05, seed 3498140236: job 12 ended on a100n2 at 17:46:51.27, its Epilog at .90.  The
    backfill pass between, at .70, planned job 14 (2 GPUs, ahead in the queue) on the
    completing a100n2 a second on, and so started job 15 (1 GPU) at once on a100n1, which
    job 14's plan had held until then.  The replay, given that pass, starts job 15 in it
    (it skipped the pass, and kept job 12's records taken until its Epilog's end: job 15
    started 4.9 s late, in the next)."""
    slurm, replayed = _replayed_wait(monkeypatch, "26.05", "15")
    assert replayed == pytest.approx(slurm, abs=0.5)


def test_a_job_tried_again_from_later_start_is_planned_where_slurm_plans_it(monkeypatch):
    """22.05, the same seed under CI's load: at 18:12:12.76 backfill found job 32 (1 A100) a
    start on a100n2 at 18:13:12, after 18:13:00, when job 16's reservation on a100n1 ends
    (``later_start``), so it tried again from there (``Try later``), on a100n1 too, and
    planned it on a100n1 (node order); jobs 34 and 38 (slices) then started at once on
    a100n2.  Keeping the first answer, the replay held a100n2 for job 32 and started them
    5 s later."""
    slurm, replayed = _replayed_wait(monkeypatch, "22.05", "34")
    assert replayed == pytest.approx(slurm, abs=0.5)
