"""Reports from the real sandbox accounting equal the figures computed by hand.

A known set of jobs (MIG slices, shards, whole GPUs; two accounts; one job
running across a day → night switch by the repartitioner) runs through the real
Slurm.  The test reads each job's Submit/Start/End straight from ``sacct`` and
computes GPU-hours, GPU-equivalent hours, waits and cost by hand; ``gpupool
report`` must say the same.  The MIG job's peak memory, which Slurm cannot
see, comes from the hooks' usage spool.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from .repartition_support import SLURM_WAIT_S, Background, Gate, job_state, reserved, wait_until

pytestmark = pytest.mark.integration

GPUPOOL = [sys.executable, "-m", "slurm_gpupool.cli.main"]
PRICES = {"H100-SXM5-80GB": 4.0, "V100-SXM2-32GB": 1.0, "A100-SXM4-40GB": 3.0, "A30": 2.0}
# job → (account, Slurm GPU count, GPU-equivalents, catalog model, layout it ran in)
EXPECT = {
    "mig": ("phys", 1, 1 / 7, "H100-SXM5-80GB", "day"),  # 1g.10gb: 1 of 7 compute slices
    "shard": ("bio", 0, 2 / 4, "V100-SXM2-32GB", "day"),  # 2 shards of a GPU shared 4 ways
    "held": ("bio", 1, 3 / 7, "A100-SXM4-40GB", "day"),  # 3g.20gb, held 3 s before release
    "across": ("phys", 1, 1.0, "V100-SXM2-32GB", "day"),  # whole V100, running as the switch begins
    "night2": ("phys", 2, 2.0, "A100-SXM4-40GB", "night"),
    "night1": ("bio", 1, 1.0, "A30", "night"),
}


# account → GRES type → quota (a count, or GPU-equivalents: 1 of 1g.10gb slices is 7 of them)
QUOTAS = {"phys": {"a100": 2, "1g.10gb": {"gpu_eq": 1}}, "bio": {"shard": 4, "3g.20gb": 1}}
# (account, quota type) → (job, the TRES count it held: devices, or shards), and the quota's count
QUOTA_JOBS = {
    ("phys", "a100"): ("night2", 2, 2),
    ("phys", "1g.10gb"): ("mig", 1, 7),
    ("bio", "shard"): ("shard", 2, 4),
    ("bio", "3g.20gb"): ("held", 1, 1),
}


def sbatch(sb, *args: str) -> str:
    return sb.run(["sbatch", "--parsable", *args], timeout=600).stdout.strip().split(";")[0]


def repartition(sb, layout: str) -> None:
    proc = sb.run([*GPUPOOL, "repartition", "--to", layout, "--quiet"], timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def sacct_times(sb, ids: list[str]) -> dict[str, tuple[datetime, datetime, datetime]]:
    out = sb.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,Submit,Start,End", "-j", ",".join(ids)]).stdout
    times = {}
    for line in out.splitlines():
        jid, *ts = line.split("|")
        times[jid] = tuple(datetime.fromisoformat(t).astimezone(UTC) for t in ts)
    return times


def wait_done(sb, ids: list[str], timeout: float = SLURM_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sb.run(["sacct", "-X", "-n", "-P", "-o", "JobIDRaw,State", "-j", ",".join(ids)]).stdout
        states = dict(line.split("|") for line in out.splitlines() if line)
        if len(states) == len(ids) and all(s == "COMPLETED" for s in states.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs not completed: {states}")


@pytest.fixture(scope="module")
def history(_sandbox_session, tmp_path_factory):
    sb = _sandbox_session.ready()
    tmp = tmp_path_factory.mktemp("reports")
    sb.run(["sacctmgr", "-i", "add", "account", "phys,bio"], check=False)
    sb.run(["sacctmgr", "-i", "add", "user", "root", "account=phys,bio"], check=False)
    repartition(sb, "day")
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    ids: dict[str, str] = {}
    register = "gpupool --node h100n1 sim process 0 $$ --mig-uuid $CUDA_VISIBLE_DEVICES --memory-mib 900"
    across = Gate(tmp, "across")  # still running when the night switch starts, whatever the load
    ids["across"] = sbatch(
        sb, "-A", "phys", "-w", "v100n1", "--gres=gpu:v100:1", "-t", "30", "-o", "/dev/null", "--wrap", across.wrap()
    )
    ids["held"] = sbatch(
        sb, "--hold", "-A", "bio", "-w", "a100n1", "--gres=gpu:3g.20gb:1", "-o", "/dev/null", "--wrap", "sleep 2"
    )
    ids["mig"] = sbatch(
        sb,
        "--wait",
        "-A",
        "phys",
        "-w",
        "h100n1",
        "--gres=gpu:1g.10gb:1",
        "-o",
        "/dev/null",
        "--wrap",
        f"{register}; sleep 2; gpupool --node h100n1 sim process 0 $$ --remove",
    )
    sb.run(["scontrol", "release", ids["held"]])  # held while the MIG job ran: a wait of seconds
    ids["shard"] = sbatch(
        sb, "--wait", "-A", "bio", "-w", "v100n1", "--gres=shard:2", "-o", "/dev/null", "--wrap", "sleep 2"
    )
    wait_done(sb, [ids["held"]])
    with Background(sb, tmp, "--to", "night", "--quiet") as run:  # v100n1 waits for "across"; no job is killed
        wait_until(lambda: reserved(sb, "gpupool_night", "v100n1"), "the night switch to reserve v100n1")
        assert job_state(sb, ids["across"])[0] == "RUNNING"
        across.open()
        proc = run.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids["night2"] = sbatch(
        sb, "--wait", "-A", "phys", "-w", "a100n2", "--gres=gpu:a100:2", "-o", "/dev/null", "--wrap", "sleep 2"
    )
    ids["night1"] = sbatch(
        sb, "--wait", "-A", "bio", "-w", "a30n1", "--gres=gpu:a30:1", "-o", "/dev/null", "--wrap", "sleep 2"
    )
    wait_done(sb, list(ids.values()))
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    # the pool config with a price table, for the cost report
    cfg = yaml.safe_load((sb.root / "etc" / "gpupool.yaml").read_text())
    cfg["reports"] = {"prices": PRICES, "currency": "EUR"}
    cfg["quotas"] = QUOTAS  # the quota report reads them from the config
    cfg_path = tmp / "gpupool.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    times = sacct_times(sb, list(ids.values()))
    return sb, ids, times, since, until, cfg_path, tmp


def report(history, name: str, *args: str) -> dict:
    sb, _, _, since, until, cfg_path, _ = history
    proc = sb.run(
        [
            *GPUPOOL,
            "--config",
            str(cfg_path),
            "report",
            name,
            "--since",
            since.isoformat(),
            "--until",
            until.isoformat(),
            "--format",
            "json",
            *args,
        ],
        timeout=600,
    )
    return json.loads(proc.stdout)


def elapsed_h(history, job: str) -> float:
    _, ids, times, *_ = history
    _, start, end = times[ids[job]]
    return (end - start).total_seconds() / 3600


def rows(doc: dict, key: str, table: str | None = None) -> dict[str, dict]:
    tables = doc["reports"][0]["tables"]
    return {r[key]: r for r in tables[table or next(iter(tables))]}


def test_usage_equals_hand_computed_gpu_hours_and_equivalents(history):
    doc = report(history, "usage", "--by", "account")
    assert doc["load"]["malformed_total"] == 0
    got = rows(doc, "account")
    for acct in ("phys", "bio"):
        mine = [j for j, e in EXPECT.items() if e[0] == acct]
        # a job sacct shows as 0 s long held its GPUs for no time: it is no GPU job of the window
        assert got[acct]["gpu_jobs"] == sum(1 for j in mine if elapsed_h(history, j) > 0) >= len(mine) - 1
        assert got[acct]["gpu_hours"] == pytest.approx(sum(elapsed_h(history, j) * EXPECT[j][1] for j in mine))
        assert got[acct]["eq_hours"] == pytest.approx(sum(elapsed_h(history, j) * EXPECT[j][2] for j in mine))


def test_usage_by_layout_follows_the_journal_across_the_switch(history):
    got = rows(report(history, "usage", "--by", "layout"), "layout")
    for layout in ("day", "night"):
        mine = [j for j, e in EXPECT.items() if e[4] == layout]
        assert got[layout]["eq_hours"] == pytest.approx(sum(elapsed_h(history, j) * EXPECT[j][2] for j in mine))


def test_waits_equal_sacct_start_minus_submit(history):
    _, ids, times, *_ = history
    got = rows(report(history, "waits"), "gres", "by type")
    submit, start, _ = times[ids["held"]]
    held_wait = (start - submit).total_seconds()
    assert held_wait >= 2  # held while the MIG job ran
    assert got["gpu:3g.20gb"]["max_s"] == pytest.approx(held_wait)
    submit, start, _ = times[ids["mig"]]
    assert got["gpu:1g.10gb"]["max_s"] == pytest.approx((start - submit).total_seconds())


def test_cost_equals_hours_times_share_times_model_price(history):
    doc = report(history, "cost", "--by", "account")
    got = rows(doc, "account")
    for acct in ("phys", "bio"):
        want = sum(
            elapsed_h(history, j) * EXPECT[j][2] * PRICES[EXPECT[j][3]] for j, e in EXPECT.items() if e[0] == acct
        )
        assert got[acct]["cost"] == pytest.approx(want)
    assert doc["reports"][0]["currency"] == "EUR"


def test_efficiency_takes_the_mig_jobs_peak_memory_from_the_usage_spool(history):
    _, ids, *_ = history
    got = rows(report(history, "efficiency"), "job_id", "jobs")
    mig = got[ids["mig"]]
    assert mig["peak_mem_mib"] == 900 and mig["slice_mib"] == 9984  # H100 1g.10gb
    assert "peak memory" in mig["why"]


def test_quota_report_gives_each_accounts_peak_mean_and_hours_at_its_quota(history):
    _, _, _, since, until, *_ = history
    window_h = (until - since).total_seconds() / 3600
    got = {(r["account"], r["type"]): r for r in report(history, "quota")["reports"][0]["tables"]["quota"]}
    assert set(got) == set(QUOTA_JOBS)
    for key, (job, count, quota) in QUOTA_JOBS.items():
        h = elapsed_h(history, job)
        held = count if h > 0 else 0  # a job sacct shows as 0 s long held nothing
        r = got[key]
        assert (r["quota"], r["peak"], r["jobs"]) == (quota, held, 1 if h > 0 else 0), key
        assert r["peak_pct"] == pytest.approx(100 * held / quota), key
        assert r["mean"] == pytest.approx(count * h / window_h), key
        assert r["hours_at_quota"] == pytest.approx(h if count >= quota else 0.0), key
        assert r["eq_hours"] == pytest.approx(h * EXPECT[job][2]), key


def test_every_report_renders_as_one_html_file_with_its_charts(history):
    sb, _, _, since, until, cfg_path, tmp = history
    out = tmp / "report.html"
    sb.run(
        [
            *GPUPOOL,
            "--config",
            str(cfg_path),
            "report",
            "all",
            "--since",
            since.isoformat(),
            "--until",
            until.isoformat(),
            "-o",
            str(out),
        ],
        timeout=600,
    )
    html = out.read_text()
    for chart in ("utilization", "usage", "waits"):
        assert f'id="chart-{chart}"' in html
    assert "<svg" in html and "phys" in html and "Advice" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org', "").replace('xmlns:xlink="http://www.w3.org', "")


def test_export_then_report_away_from_the_cluster_gives_the_same_usage(history):
    sb, _, _, since, until, cfg_path, tmp = history
    exported = tmp / "jobs.csv"
    base = [*GPUPOOL, "--config", str(cfg_path), "report"]
    window = ["--since", since.isoformat(), "--until", until.isoformat()]
    sb.run([*base, "export", *window, "-o", str(exported)], timeout=600)
    live = report(history, "usage", "--by", "account")
    away = json.loads(
        sb.run(
            [*base, "usage", *window, "--by", "account", "--format", "json", "--from", str(exported)], timeout=600
        ).stdout
    )
    assert live["reports"][0]["tables"] == away["reports"][0]["tables"]
    assert Path(exported).read_text().startswith("# gpupool-jobs v1")


def test_sacct_json_and_parsable2_give_the_same_report(history):
    by_json = report(history, "usage", "--by", "account", "--sacct", "json")
    by_text = report(history, "usage", "--by", "account", "--sacct", "parsable2")
    assert by_json["reports"][0]["tables"] == by_text["reports"][0]["tables"]
    assert by_json["load"]["jobs"] == by_text["load"]["jobs"] > 0
