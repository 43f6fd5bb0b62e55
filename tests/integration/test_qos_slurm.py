"""Service tiers and quotas on the real sandbox Slurm (docs/tiers.md).

* ``qos apply`` twice changes nothing the second time; ``qos diff`` on a changed config
  shows exactly the change (exit 1), and nothing when they agree (exit 0);
* the wrapper and job_submit.lua give the same tier QOS to the same requests, and refuse
  the same GRES a tier may not use;
* a shared-tier shard job is preempted by an exclusive-tier job for its GPU: it gets its
  checkpoint signal, has its grace time (as Slurm records it: the TERM comes no sooner), is
  requeued and later completes; a shared-tier job on another node is not touched;
* an account over its quota for a GPU type gets its job held with Slurm's reason
  (AssocGrpGRES), which gpupool-sbatch explains; within the quota it runs; the quota
  report, from the accounting, shows one a100 held at a time, for as long as both jobs ran.
"""

from __future__ import annotations

import copy
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.controller.support_files import install_support_files
from slurm_gpupool.slurm.versions import requeues_again_after_grace_preemption

from .repartition_support import SLURM_WAIT_S, state_after_scheduling, wait_until
from .test_submit_slurm import wrapper

pytestmark = pytest.mark.integration

GRACE_S = 15
TIERS = {
    "exclusive": {"priority": 1000, "gres": ["whole"]},
    "shared": {
        "priority": 100,
        "preempt_mode": "requeue",
        "grace": f"{GRACE_S}s",
        "gres": ["shard", "mig"],
        "checkpoint_signal": "USR1",
        "default": True,
    },
}
QUOTAS = {"sandbox": {"a100": 1}}


def write_config(sb, path: Path, **changes) -> Path:
    raw = copy.deepcopy(load_config(sb.root / "etc" / "gpupool.yaml").raw)
    raw.update(copy.deepcopy(changes))
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def tiered(_sandbox_session, tmp_path_factory):
    """The sandbox by day, with the tiers' QOS applied and the catalog and Lua knowing them."""
    sb = _sandbox_session.ready()
    sb.switch("day")
    conf = write_config(sb, sb.root / "etc" / "gpupool-tiers.yaml", tiers=TIERS, quotas=QUOTAS)
    install_support_files(parse_config(yaml.safe_load(conf.read_text()), str(conf)), "day")
    sb.gpupool("--config", str(conf), "qos", "apply")
    yield sb, conf
    sb.run(["scancel", "--user=root"], check=False)
    sb.gpupool("qos", "apply")  # the sandbox's own config has no tiers: ours go
    sb.gpupool("gres", "install")
    conf.unlink()
    sb.switch("night")


def sbatch(sb, *args: str, tool: str = "sbatch") -> str:
    return sb.run([tool, "--parsable", *args]).stdout.strip().splitlines()[-1].split(";")[0]


def field(sb, job: str, name: str, check: bool = True) -> str:
    out = sb.run(["scontrol", "-o", "show", "job", job], check=check).stdout
    return next((t.split("=", 1)[1] for t in out.split() if t.startswith(name + "=")), "")


def wait_state(sb, job: str, states: tuple[str, ...], timeout: float = SLURM_WAIT_S) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = sb.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()
        if not state:
            state = sb.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State"], check=False).stdout.strip()
        if state.split(" ")[0] in states:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job}: {state}, not {states}")


def test_apply_twice_changes_nothing_and_diff_shows_exactly_a_change(tiered, tmp_path: Path):
    sb, conf = tiered
    again = sb.gpupool("--config", str(conf), "qos", "apply", "--json")
    assert json.loads(again.stdout) == []
    same = sb.gpupool("--config", str(conf), "qos", "diff", check=False)
    assert same.returncode == 0, same.stdout + same.stderr
    tiers = copy.deepcopy(TIERS)
    tiers["shared"]["grace"] = f"{GRACE_S * 2}s"
    changed = write_config(sb, tmp_path / "changed.yaml", tiers=tiers, quotas={"sandbox": {"a100": 2}})
    d = sb.gpupool("--config", str(changed), "qos", "diff", check=False)
    assert d.returncode == 1
    assert d.stdout.splitlines() == [
        f"~ qos gpupool_shared: GraceTime {GRACE_S} -> {GRACE_S * 2}",
        "~ account sandbox: GrpTRES gres/gpu:a100 1 -> 2",
    ]
    qos = sb.run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name,Priority,Preempt,PreemptMode,Description"])
    rows = {line.split("|")[0]: line.split("|") for line in qos.stdout.splitlines()}
    assert rows["gpupool_exclusive"][1:4] == ["1000", "gpupool_shared", "cluster"]
    assert rows["gpupool_shared"][1:4] == ["100", "", "requeue"] and rows["normal"][4] != "managed by slurm_gpupool"


def test_wrapper_and_lua_give_the_same_tier(tiered):
    sb, _conf = tiered
    cases = [  # (wrapper args, the same through job_submit.lua, expected QOS)
        (["--gres=shard:1"], ["--gres=shard:1"], "gpupool_shared"),  # a GPU job: the default tier
        (
            ["--tier=exclusive", "--gres=gpu:v100:1"],
            ["--comment=gpupool: tier=exclusive", "--gres=gpu:v100:1"],
            "gpupool_exclusive",
        ),
        (
            ["--qos=gpupool_exclusive", "--gres=gpu:a100:1"],
            ["--qos=gpupool_exclusive", "--gres=gpu:a100:1"],
            "gpupool_exclusive",
        ),
        (["--gpu-share=0.25"], ["--comment=gpupool: gpu-share=0.25"], "gpupool_shared"),
        ([], [], "normal"),  # no GPU, no tier: as before
    ]
    jobs = []
    try:
        for ours, lua, qos in cases:
            a = sbatch(sb, "--hold", *ours, "--wrap", "true", tool=wrapper())
            b = sbatch(sb, "--hold", *lua, "--wrap", "true")
            jobs += [a, b]
            assert field(sb, a, "QOS") == field(sb, b, "QOS") == qos, (ours, lua)
            assert field(sb, a, "TresPerNode") == field(sb, b, "TresPerNode"), (ours, lua)
        for ours, lua in (
            (["--gres=gpu:v100:1"], ["--gres=gpu:v100:1"]),  # the default (shared) tier may not use whole GPUs
            (["--tier=exclusive", "--gres=shard:1"], ["--comment=gpupool: tier=exclusive", "--gres=shard:1"]),
            (["--tier=gold"], ["--comment=gpupool: tier=gold"]),
            (["--qos=normal", "--gres=shard:1"], ["--qos=normal", "--gres=shard:1"]),  # no escape from the tiers
        ):
            w = sb.run([wrapper(), "--hold", *ours, "--wrap", "true"], check=False)
            s = sb.run(["sbatch", "--hold", *lua, "--wrap", "true"], check=False)
            assert w.returncode == 2 and "tier" in w.stderr, w.stderr
            assert s.returncode != 0 and "gpupool:" in s.stderr and "tier" in s.stderr, s.stderr
    finally:
        if jobs:
            sb.run(["scancel", *jobs], check=False)


def test_a_pending_jobs_changes_meet_the_submission_rules(tiered):
    """scontrol update on a pending job goes through job_submit.lua's slurm_job_modify: a
    shared-tier shard job cannot leave for `normal`, for a tier that may not use shards, or
    take whole GPUs its tier may not use; a change within the rules is made."""
    sb, _conf = tiered
    job = sbatch(sb, "--hold", "--gres=shard:1", "--wrap", "true")
    try:
        assert field(sb, job, "QOS") == "gpupool_shared"
        before = field(sb, job, "TresPerNode")
        assert "shard:1" in before
        for change in ("qos=normal", "qos=gpupool_exclusive", "gres=gpu:v100:1"):
            r = sb.run(["scontrol", "update", f"jobid={job}", change], check=False)
            assert r.returncode != 0, (change, r.stdout, r.stderr)
            if sb.slurm_version >= (23, 2, 0):  # 22.05 does not pass job_modify's message on
                assert "gpupool:" in r.stderr, (change, r.stderr)
        assert (field(sb, job, "QOS"), field(sb, job, "TresPerNode")) == ("gpupool_shared", before)
        # qos= (the association's default) keeps the job in its tier
        sb.run(["scontrol", "update", f"jobid={job}", "qos="], check=False)
        assert field(sb, job, "QOS") == "gpupool_shared"
        ok = sb.run(["scontrol", "update", f"jobid={job}", "gres=shard:2"], check=False)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "shard:2" in field(sb, job, "TresPerNode")
    finally:
        sb.run(["scancel", job], check=False)


CHECKPOINTING = """#!/bin/bash
log={log}
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then echo "resumed $(date +%s.%N)" >> $log; exit 0; fi
trap 'echo "signal $(date +%s.%N)" >> $log' USR1
trap 'echo "term $(date +%s.%N)" >> $log; exit 0' TERM
echo "start $(date +%s.%N)" >> $log
while :; do sleep 1; done  # until preempted, or cancelled by the test
"""


def grace_of(sb, job: str) -> tuple[float, float] | None:
    """(PreemptTime, EndTime) of a job in its grace time (epoch s), None before it is preempted."""
    preempted, end = field(sb, job, "PreemptTime"), field(sb, job, "EndTime")
    if preempted in ("", "None", "Unknown") or end in ("", "None", "Unknown"):
        return None
    return datetime.fromisoformat(preempted).timestamp(), datetime.fromisoformat(end).timestamp()


def times(log: Path, what: str) -> list[float]:
    return [float(line.split()[1]) for line in log.read_text().splitlines() if line.startswith(what + " ")]


def test_shared_job_is_checkpointed_preempted_requeued_and_completes(tiered, tmp_path: Path):
    sb, _conf = tiered
    log = tmp_path / "preempted.log"
    script = tmp_path / "job.sh"
    script.write_text(CHECKPOINTING.format(log=log))
    other_log = tmp_path / "other.log"
    other = tmp_path / "other.sh"
    other.write_text(CHECKPOINTING.format(log=other_log))
    # the shared tier's signal comes from the wrapper (the Lua cannot set one)
    victim = sbatch(sb, "-w", "v100n1", "--gres=shard:1", "--requeue", "-o", "/dev/null", str(script), tool=wrapper())
    bystander = sbatch(sb, "-w", "a30n1", "--gres=shard:1", "--requeue", "-o", "/dev/null", str(other), tool=wrapper())
    assert field(sb, victim, "QOS") == "gpupool_shared"
    try:
        wait_state(sb, victim, ("RUNNING",))
        wait_state(sb, bystander, ("RUNNING",))
        wait_until(log.exists, "the victim's traps")  # set before it writes its log
        # the whole node, so every release sees the conflict (24.11 and later let a whole-GPU
        # request share a GPU with its shards: docs/slurm-versions.md): it gets the victim's GPU
        boss = sbatch(
            sb, "--tier=exclusive", "-w", "v100n1", "--exclusive", "--gres=gpu:v100:1", "-o", "/dev/null",
            "--wrap", "sleep 3", tool=wrapper(),
        )  # fmt: skip
        assert field(sb, boss, "QOS") == "gpupool_exclusive"
        # Slurm's own record of the grace, shown while it runs: the preemption (PreemptTime)
        # and the victim's end planned GraceTime later (EndTime)
        preempt_s, end_s = wait_until(lambda: grace_of(sb, victim), "the victim's preemption", interval=0.2)
        assert end_s - preempt_s == GRACE_S, (preempt_s, end_s)
        wait_state(sb, boss, ("RUNNING", "COMPLETING", "COMPLETED"))
        signal, term = times(log, "signal"), times(log, "term")
        # the checkpoint signal came at preemption, within the grace time, and the TERM only
        # once the grace time was over; measured against Slurm's times, not the signal's
        # arrival, which a loaded machine delays by seconds
        assert signal and preempt_s <= signal[0] < end_s, (preempt_s, end_s, log.read_text())
        assert term and term[0] >= end_s, (preempt_s, end_s, log.read_text())
        wait_state(sb, boss, ("COMPLETED",))
        # requeued, started again, resumed, done.  A requeued job waits for Slurm's requeue
        # delay (~2 min, pending with reason BeginTime): waiting it out proves nothing of ours,
        # so it may start at once.  24.11 requeues it once more after that run
        # (docs/slurm-versions.md): it resumes twice there.
        runs = 2 if requeues_again_after_grace_preemption(sb.slurm_version) else 1
        deadline = time.monotonic() + SLURM_WAIT_S * runs
        seen: list[str] = []
        # Restarts is read while Slurm lists the job (it counts at each requeue, so the pending
        # job of the last run shows the last count): after its end Slurm forgets it in
        # MinJobAge (20 s), which a slow sacct below could outlast
        restarts = ""
        while (state := sb.run(["squeue", "-h", "-j", victim, "-o", "%T %r"], check=False).stdout.strip()) != "":
            if not seen or seen[-1] != state:
                seen.append(state)
            restarts = field(sb, victim, "Restarts", check=False) or restarts
            assert time.monotonic() < deadline, seen
            if state == "PENDING BeginTime":
                # not in the second of the requeue: slurmd revoked the job's credential then, and a
                # run started in that second is refused ("Job credential revoked": the job FAILS).
                # Slurm's own requeue delay exists for this; measured on 24.11.5's second requeue
                time.sleep(2)
                sb.run(["scontrol", "update", f"jobid={victim}", "StartTime=now"], check=False)
            time.sleep(0.5)
        assert wait_state(sb, victim, ("COMPLETED",)), seen
        assert restarts == str(runs), (restarts, seen)
        assert len(times(log, "resumed")) == runs, log.read_text()
        # nothing else was touched
        assert wait_state(sb, bystander, ("RUNNING",)) == "RUNNING"
        assert not times(other_log, "signal") and field(sb, bystander, "Restarts") == "0"
    finally:
        sb.run(["scancel", victim, bystander], check=False)


def test_over_quota_jobs_wait_with_slurms_reason_and_the_wrapper_says_why(tiered):
    sb, conf = tiered
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    first = sbatch(  # runs until the test cancels it
        sb, "--tier=exclusive", "--gres=gpu:a100:1", "-o", "/dev/null", "--wrap", "sleep 3600", tool=wrapper()
    )
    try:
        wait_state(sb, first, ("RUNNING",))  # within the quota (1 a100): it runs
        over = sb.run(
            [wrapper(), "--parsable", "--tier=exclusive", "--gres=gpu:a100:1", "-o", "/dev/null", "--wrap", "sleep 2"]
        )
        second = over.stdout.strip().split(";")[0]
        # both schedulers passed it over (sdiag), not a 2 s guess; and said why
        assert state_after_scheduling(sb, second) == ("PENDING", "AssocGrpGRES")
        assert f"job {second} waits (AssocGrpGRES)" in over.stderr and "at most 1 a100" in over.stderr, over.stderr
        sb.run(["scancel", first])
        wait_state(sb, second, ("RUNNING", "COMPLETING", "COMPLETED"))  # back within the quota
        wait_state(sb, second, ("COMPLETED",))
    finally:
        sb.run(["scancel", first], check=False)
    # the quota report, from the accounting of what Slurm enforced: one a100 at a time
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    out = sb.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,Start,End", "-j", f"{first},{second}"]).stdout
    spans = {
        j: [datetime.fromisoformat(t).astimezone(UTC) for t in ts] for j, *ts in (x.split("|") for x in out.split())
    }
    assert spans[second][0] >= spans[first][1]  # it started when the first ended
    held_h = sum((end - start).total_seconds() for start, end in spans.values()) / 3600
    window = ["--since", since.isoformat(), "--until", until.isoformat()]
    doc = json.loads(sb.gpupool("--config", str(conf), "report", "quota", *window, "--format", "json").stdout)
    q = {(r["account"], r["type"]): r for r in doc["reports"][0]["tables"]["quota"]}[("sandbox", "a100")]
    assert (q["quota"], q["peak"], q["jobs"]) == (1, 1, 2)
    assert q["hours_at_quota"] == pytest.approx(held_h)
    assert q["mean"] == pytest.approx(held_h / ((until - since).total_seconds() / 3600))
