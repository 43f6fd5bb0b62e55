"""Reports: exact figures on a hand-computed history, the real sacct samples, and bad input.

The history below runs on Monday 2026-11-16 (UTC) on the shipped pool config with
its schedule pinned to UTC: day = Mon-Fri 08:00-20:00, night otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.core.gres.tres import gpu_tres
from slurm_gpupool.errors import EXIT_DATA, DataError
from slurm_gpupool.reports import compute
from slurm_gpupool.reports.advice import advice, feasible, more_of, smaller_instead
from slurm_gpupool.reports.dataset import Source, build
from slurm_gpupool.reports.export import export_jobs
from slurm_gpupool.reports.layout_history import read_journal_log
from slurm_gpupool.reports.sacct_load import load_files
from slurm_gpupool.reports.timeline import Level

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "sacct"
SAMPLES = ROOT / "tests" / "fixtures" / "traces" / "slurm-sacct-samples"  # real, verbatim (their SOURCE.md)
SINCE = datetime(2026, 11, 16, tzinfo=UTC)
UNTIL = datetime(2026, 11, 17, tzinfo=UTC)
HB_FIELDS = (
    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
    "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
    "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
    "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment"
).split(",")

HEADER = "JobID|JobIDRaw|JobName|User|Account|Partition|NodeList|State|Submit|Start|End|TimelimitRaw|ReqTRES|AllocTRES"
D = "2026-11-16T"


def row(jid, acct, node, state, submit, start, end, req, alloc):
    s = lambda t: f"{D}{t}+00:00" if ":" in t else t  # noqa: E731
    return f"{jid}|{jid}|job{jid}|u_{acct}|{acct}|gpu|{node}|{state}|{s(submit)}|{s(start)}|{s(end)}|60|{req}|{alloc}"


HISTORY = "\n".join(
    [
        HEADER,
        row(
            1,
            "physics",
            "a100n1",
            "COMPLETED",
            "09:00:00",
            "09:30:00",
            "11:30:00",
            "",
            "cpu=1,gres/gpu:1g.5gb=2,gres/gpu=2",
        ),
        row(2, "bio", "v100n1", "COMPLETED", "10:00:00", "10:00:00", "13:00:00", "", "cpu=1,gres/shard=2"),
        row(3, "physics", "a100n2", "COMPLETED", "21:00:00", "22:00:00", "23:30:00", "", "gres/gpu:a100=1,gres/gpu=1"),
        row(4, "bio", "h100n1", "COMPLETED", "08:00:00", "12:00:00", "14:00:00", "", "gres/gpu:3g.40gb=1,gres/gpu=1"),
        row(5, "chem", "None assigned", "PENDING", "15:00:00", "Unknown", "Unknown", "gres/gpu:1g.10gb=1", ""),
        row(6, "chem", "a100n1", "RUNNING", "23:00:00", "23:00:00", "Unknown", "", "gres/gpu:a100=2,gres/gpu=2"),
        "7|7|old|u_chem|chem|gpu|a100n1|COMPLETED|2026-11-10T01:00:00+00:00|2026-11-10T01:00:00+00:00|"
        "2026-11-10T02:00:00+00:00|60||gres/gpu:a100=1",
    ]
)


@pytest.fixture(scope="module")
def cfg():
    raw = yaml.safe_load((ROOT / "etc" / "gpupool.yaml").read_text())
    raw["schedule"]["timezone"] = "UTC"
    raw["reports"] = {
        "prices": {"A100-SXM4-40GB": 3.0, "V100-SXM2-32GB": 1.0, "H100-SXM5-80GB": 4.0},
        "profile_prices": {"1g.5gb": 0.2},
        "advice": {"min_jobs": 1, "long_wait": "1h"},
    }
    raw["paths"] = {**(raw.get("paths") or {}), "controller_dir": "/nonexistent", "spool_dir": "/nonexistent"}
    return parse_config(raw, str(ROOT / "etc" / "gpupool.yaml"), ROOT / "etc")


@pytest.fixture(scope="module")
def data(cfg, tmp_path_factory):
    f = tmp_path_factory.mktemp("h") / "sacct.txt"
    f.write_text(HISTORY + "\n")
    d, stats, spool = build(cfg, Source(files=(f,)), SINCE, UNTIL, now=UNTIL)
    return d, stats, spool


def by(report, key):
    t = report.main
    return {r[0]: r for r in t.itertuples(index=False)} if key is None else t.set_index(key).to_dict("index")


def test_usage_counts_gpu_hours_and_gpu_equivalents(data):
    d, stats, _ = data
    assert stats.jobs == 7 and stats.malformed_total == 0
    assert len(d.jobs) == 6  # job 7 ended before the window
    u = compute.usage(d, "account").main.set_index("account")
    assert u.loc["physics", "gpu_hours"] == pytest.approx(2 * 2 + 1.5)
    assert u.loc["physics", "eq_hours"] == pytest.approx(2 * 2 / 7 + 1.5)
    assert u.loc["bio", "gpu_hours"] == pytest.approx(2)  # shards are no GPU to Slurm
    assert u.loc["bio", "eq_hours"] == pytest.approx(3 * 2 / 4 + 2 * 3 / 7)  # 2 of 4 shares; 3g = 3/7
    # running: counted up to the file's horizon (23:30, its latest record), not to "now"
    assert u.loc["chem", "eq_hours"] == pytest.approx(0.5 * 2)
    assert u.loc["chem", "jobs"] == 2 and u.loc["chem", "gpu_jobs"] == 1  # the pending job holds nothing
    g = compute.usage(d, "gres-type").main.set_index("gres-type")
    assert g.loc["shard:v100_shared", "eq_hours"] == pytest.approx(1.5)
    assert g.loc["gpu:1g.5gb", "gpu_hours"] == pytest.approx(4)
    dn = compute.usage(d, "day-night").main.set_index("day-night")
    assert dn.loc["night", "eq_hours"] == pytest.approx(1.5 + 2 * 0.5)
    assert dn.loc["day", "eq_hours"] == pytest.approx(4 / 7 + 1.5 + 6 / 7)


def test_cost_uses_model_prices_and_profile_fractions(data):
    d, _, _ = data
    c = compute.cost(d, "account").main.set_index("account")["cost"]
    assert c["physics"] == pytest.approx(2 * 2 * 0.2 * 3.0 + 1.5 * 3.0)  # 1g.5gb priced at 0.2 of an A100
    assert c["bio"] == pytest.approx(3 * 0.5 * 1.0 + 2 * (3 / 7) * 4.0)  # shard: its share; 3g: 3/7
    assert c["chem"] == pytest.approx(0.5 * 2 * 3.0)  # running up to the file's horizon


def test_waits_per_gres_type_and_layout_in_force(data):
    d, _, _ = data
    r = compute.waits(d)
    w = r.tables["by type"].set_index("gres")
    assert w.loc["gpu:1g.5gb", "p50_s"] == 1800
    assert w.loc["gpu:3g.40gb", "max_s"] == 4 * 3600
    assert w.loc["gpu:a100", "jobs"] == 2 and w.loc["gpu:a100", "p50_s"] == pytest.approx(1800)
    t = r.tables["by type and layout"]
    pend = t.set_index("gres")
    # never started: no wait percentile yet, but counted, with its wait so far (15:00 → 24:00)
    assert pend.loc["gpu:1g.10gb", "pending_now"] == 1 and pend.loc["gpu:1g.10gb", "jobs"] == 0
    assert pend.loc["gpu:1g.10gb", "oldest_pending_s"] == 9 * 3600
    assert set(t["layout"]) == {"day", "night"}  # no journal: the schedule's layouts were in force


def test_utilization_follows_the_schedules_layouts(data):
    d, _, _ = data
    r = compute.utilization(d)
    t = r.tables["by type"].set_index(["layout", "type"])
    # a100 whole GPUs: 2 per A100 node by day (12 h), 8 per node by night (12 h), two nodes
    assert t.loc[("day", "a100"), "capacity_eq_hours"] == pytest.approx(2 * 2 * 12)
    assert t.loc[("night", "a100"), "capacity_eq_hours"] == pytest.approx(8 * 2 * 12)
    assert t.loc[("night", "a100"), "allocated_eq_hours"] == pytest.approx(1.5 + 2 * 0.5)
    assert t.loc[("day", "1g.5gb"), "allocated_eq_hours"] == pytest.approx(2 * 2 / 7)
    assert t.loc[("day", "1g.5gb"), "capacity_eq_hours"] == pytest.approx(2 * (4 * 7 + 2 * 2) / 7 * 12)
    assert ("night", "1g.5gb") not in t.index  # the night layout has no slices
    ts = r.series["utilization"]
    assert len(ts) == 24 * 12  # 5-minute bins for a day
    night, day = ts[ts["layout"] == "night"], ts[ts["layout"] == "day"]
    assert len(day) == 12 * 12 and (night["capacity_eq"].min() > day["capacity_eq"].max())  # whole GPUs by night
    assert ts["allocated_eq"].sum() * 300 / 3600 == pytest.approx(r.tables["by layout"]["allocated_eq_hours"].sum())


def test_timeline_integrals_are_exact():
    lvl = Level.from_intervals(
        start=__import__("numpy").array([0.0, 10.0]),
        end=__import__("numpy").array([20.0, 30.0]),
        value=__import__("numpy").array([1.0, 2.0]),
    )
    assert lvl.between([0.0], [30.0])[0] == pytest.approx(20 * 1 + 20 * 2)
    assert lvl.between([5.0], [15.0])[0] == pytest.approx(10 + 5 * 2)
    assert lvl.between([-10.0], [0.0])[0] == 0


# -- real samples ------------------------------------------------------------------------


def test_real_hb_jobinfo_sample_parses_with_its_gpu_jobs():
    path = SAMPLES / "hb-jobinfo" / "sacct.txt"
    jobs, stats = load_files([path], fields=HB_FIELDS)
    assert (stats.jobs, stats.steps, stats.malformed_total) == (100, 142, 0)
    assert jobs["state"].value_counts().to_dict() == {
        "COMPLETED": 66,
        "CANCELLED": 8,
        "FAILED": 8,
        "PENDING": 7,
        "TIMEOUT": 7,
        "RUNNING": 3,
        "NODE_FAIL": 1,
    }
    d, _, _ = build(
        None,
        Source(files=(path,), fields=HB_FIELDS),
        datetime(2023, 1, 1, tzinfo=UTC),
        datetime(2024, 12, 31, tzinfo=UTC),
        now=datetime(2024, 12, 31, tzinfo=UTC),
    )
    gpu = d.jobs[d.jobs["gpus"] > 0]
    assert len(gpu) == 11  # top-level jobs with GPU TRES (pending ones by their ReqTRES)
    types = set(d.grants["gres"].astype(str))
    assert {"gpu:v100", "gpu:a100"} <= types
    # per-job GPU memory and utilization peaks from the .batch steps (NVML acct_gather)
    peaks = d.jobs.set_index("job_id")
    assert peaks.loc["7965768", "gpumem_mib"] == pytest.approx(20500736 / 1024)
    assert peaks.loc["7965768", "gpuutil_pct"] == 90


def test_real_jobanalyzer_sample_parses_with_its_gpu_jobs():
    path = SAMPLES / "jobanalyzer" / "slurm-sacct.csv"
    jobs, stats = load_files([path])
    assert (stats.jobs, stats.malformed_total) == (294, 0)
    d, _, _ = build(
        None,
        Source(files=(path,)),
        datetime(2025, 4, 1, tzinfo=UTC),
        datetime(2025, 6, 1, tzinfo=UTC),
        now=datetime(2025, 6, 1, tzinfo=UTC),
    )
    assert int((d.jobs["gpus"] > 0).sum()) == 84
    typed = d.grants[d.grants["kind"] != "untyped"].groupby("type", observed=True)["job"].nunique()
    assert typed.to_dict() == {"a100": 14, "rtx30": 1}
    assert any("rtx30 not in the catalog" in n for n in d.notes)  # counted as a whole GPU, and said so


def test_sandbox_parsable2_and_json_give_the_same_jobs():
    a, _ = load_files([FIXTURES / "sandbox-parsable2.txt"], tz="UTC")
    b, _ = load_files([FIXTURES / "sandbox.json"])
    cols = ["job_id", "account", "nodes", "state", "submit", "start", "end"]
    assert a[cols].astype(str).to_dict("records") == b[cols].astype(str).to_dict("records")
    # the same GPUs (JSON lists TRES in another order and memory in MiB)
    assert [gpu_tres(t) for t in a["alloc_tres"].astype(str)] == [gpu_tres(t) for t in b["alloc_tres"].astype(str)]
    assert sum(gpu_tres(t).gpus + gpu_tres(t).shards for t in a["alloc_tres"].astype(str)) == 2 + 1 + 2 + 1 + 1 + 1


@pytest.mark.parametrize("series", ["22.05", "24.11", "26.05"])
def test_each_release_parsable2_and_json_give_the_same_jobs(series):
    """sacct of one scenario recorded on each release (tests/fixtures/record_slurm.py):
    the MIG, shard and whole-GPU jobs and the cancelled ones, the same from either format."""
    rec = ROOT / "tests" / "fixtures" / "slurm" / series
    ids = json.loads((rec / "scenario.json").read_text())["jobs"]
    a, sa = load_files([rec / "sacct-parsable2.txt"], tz="UTC")
    b, sb = load_files([rec / "sacct.json"])
    assert sa.malformed_total == sb.malformed_total == 0, (sa.malformed, sb.malformed)
    cols = ["job_id", "account", "nodes", "state", "submit", "start", "end"]
    assert a[cols].astype(str).to_dict("records") == b[cols].astype(str).to_dict("records")
    gpus = {str(j): gpu_tres(t) for j, t in zip(b["job_id"], b["alloc_tres"].astype(str), strict=True)}
    assert gpus == {str(j): gpu_tres(t) for j, t in zip(a["job_id"], a["alloc_tres"].astype(str), strict=True)}
    assert gpus[str(ids["mig"])].typed == (("1g.5gb", 1),)
    assert gpus[str(ids["shard"])].shards == 2
    assert gpus[str(ids["whole"])].typed == (("a100", 2),) and gpus[str(ids["running"])].typed == (("a100", 1),)
    assert set(map(str, (ids["mig"], ids["shard"], ids["whole"], ids["running"], ids["norequeue"]))) <= set(gpus)


# -- bad input ----------------------------------------------------------------------------


BAD = "\n".join(
    [
        HEADER,
        row(1, "physics", "a100n1", "COMPLETED", "09:00:00", "09:30:00", "11:30:00", "", "gres/gpu:1g.5gb=1"),
        "2|2|truncated|u|physics|gpu|a100n1|COMPLETED|2026-11-16T09:00:00",  # cut off
        row(
            3, "physics", "a100n1", "COMPLETED", "09:00:00", "10:00:00", "09:00:00", "", "gres/gpu:a100=1"
        ),  # ends early
        row(4, "physics", "a100n1", "COMPLETED", "yesterday", "10:00:00", "11:00:00", "", "gres/gpu:a100=1"),
        row(5, "physics", "a100n1", "COMPLETED", "09:00:00", "10:00:00", "11:00:00", "", "gres/gpu=1,gres/fpga=2"),
        row(6, "physics", "a100n1", "COMPLETED", "09:00:00", "10:00:00", "11:00:00", "", "gres/gpu:a100=x"),
        "7|7|tz|u|physics|gpu|a100n1|COMPLETED|2026-11-16T14:00:00+05:30|2026-11-16T14:30:00+05:30|"
        "2026-11-16T15:30:00+05:30|60||gres/gpu:a100=1,gres/gpu=1",
        "8|8|naive|u|physics|gpu|a100n1|COMPLETED|2026-11-16T09:00:00|2026-11-16T09:00:00|2026-11-16T10:00:00|60||"
        "gres/gpu:a100=1,gres/gpu=1",
        "9|9|missing|u|physics|gpu|a100n1|COMPLETED|||2026-11-16T10:00:00|60||gres/gpu:a100=1",
    ]
)


def test_bad_lines_are_counted_and_reported_never_a_crash(cfg, tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text(BAD + "\n")
    d, stats, _ = build(cfg, Source(files=(f,), tz="Europe/Paris"), SINCE, UNTIL, now=UNTIL)
    m = stats.malformed
    assert m["9 fields, expected 14"] == 1
    assert m["negative duration or wait"] == 1
    assert m["unreadable submit time"] == 1 and m["no submit time"] == 2  # "yesterday", and an empty one
    assert stats.malformed_total == 5 and len(stats.examples) == 4  # one per event, with where
    assert any("bad.txt:3" in e for e in stats.examples)  # where: file and line
    jobs = d.jobs.set_index("job_id")
    assert set(jobs.index) == {"1", "5", "6", "7", "8"}
    assert jobs.loc["7", "start"] == datetime(2026, 11, 16, 9, 0, tzinfo=UTC)  # +05:30 honoured
    assert jobs.loc["8", "start"] == datetime(2026, 11, 16, 8, 0, tzinfo=UTC)  # naive: --tz Europe/Paris
    assert any("unknown TRES gres/fpga" in n for n in d.notes)
    assert any("unreadable TRES" in n for n in d.notes)
    assert jobs.loc["6", "gpus"] == 0  # its TRES did not parse: nothing counted for it


def test_unreadable_files_are_data_errors_with_their_own_exit_code(tmp_path):
    headerless = tmp_path / "noheader.txt"
    headerless.write_text("1|2|3\n")
    with pytest.raises(DataError, match="not a sacct header"):
        load_files([headerless])
    broken = tmp_path / "broken.json"
    broken.write_text('{"jobs": [')
    with pytest.raises(DataError, match="not valid JSON"):
        load_files([broken])
    res = gpupool("report", "usage", "--from", str(headerless), "--since", "2026-11-01")
    assert res.returncode == EXIT_DATA == 76
    assert "noheader.txt" in res.stderr and "--fields" in res.stderr and "Traceback" not in res.stderr


def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_gpupool.cli.main", *args], capture_output=True, text=True)


def test_cli_reports_malformed_lines_on_stderr_and_json(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text(BAD + "\n")
    args = [
        "--config",
        str(ROOT / "etc" / "gpupool.yaml"),
        "report",
        "usage",
        "--from",
        str(f),
        "--since",
        "2026-11-16",
        "--until",
        "2026-11-17",
        "--tz",
        "UTC",
    ]
    res = gpupool(*args, "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["load"]["malformed_total"] == 5
    assert doc["reports"][0]["totals"]["gpu_jobs"] == 4
    assert "5 malformed, not used" in res.stderr
    text = gpupool(*args)
    assert "5 malformed, not used" in text.stdout and "e.g." in text.stdout


def test_export_round_trip_gives_the_same_report(cfg, data, tmp_path):
    d, _, _ = data
    for fmt in ("csv", "json"):
        f = tmp_path / f"jobs.{fmt}"
        f.write_text(export_jobs(d.jobs, fmt))
        d2, stats2, _ = build(cfg, Source(files=(f,)), SINCE, UNTIL, now=UNTIL)
        assert stats2.malformed_total == 0
        a = compute.usage(d, "account").main
        b = compute.usage(d2, "account").main
        pd.testing.assert_frame_equal(a, b)


# -- layout history and advice ------------------------------------------------------------


def test_journal_log_gives_each_nodes_layout_over_time(tmp_path):
    log = tmp_path / "journal.log"
    ev = [
        {
            "at": "2026-11-16T08:00:00+0000",
            "run": "start",
            "target": "day",
            "nodes": ["a", "b"],
            "previous": {"a": "night", "b": "night"},
        },
        {"at": "2026-11-16T08:01:00+0000", "node": "a", "step": "done"},
        {"at": "2026-11-16T08:30:00+0000", "node": "b", "step": "rolled_back"},
        "not json",
    ]
    log.write_text("\n".join(e if isinstance(e, str) else json.dumps(e) for e in ev) + "\n")
    h = read_journal_log(log)
    assert h.changes["a"][-1] == (datetime(2026, 11, 16, 8, 1, tzinfo=UTC).timestamp(), "day")
    assert h.changes["a"][0][1] == "night" and h.changes["b"][-1][1] == "night"


def test_layout_suggestions_are_placed_by_the_planner(cfg):
    from slurm_gpupool.core.mig.catalog import get_model

    small = smaller_instead(cfg, "day", "3g.20gb", "1g.5gb", "A100-SXM4-40GB")
    assert small is not None and small.key == "layouts.day.dgx.4-5"
    assert small.before == {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}
    assert small.after["1g.5gb"] > 2 and "3g.20gb" not in small.after
    assert feasible(get_model("A100-SXM4-40GB"), small.after)
    more = more_of(cfg, "day", "2g.10gb", "A100-SXM4-40GB", ["1g.5gb"])
    assert more is not None and more.after["2g.10gb"] > more.before.get("2g.10gb", 0)
    assert feasible(get_model(more.model), more.after)


def test_advice_names_the_numbers_and_a_feasible_change(data):
    d, _, spool = data
    r = advice(d, spool)
    t = r.main
    waits = t[t["rule"] == "long waits"]
    assert any("gpu:3g.40gb" in a and "p90 = 4h 00m" in a for a in waits["advice"])
    idle = t[t["rule"] == "idle capacity"]
    assert any(a.startswith("a100 was idle") and "night" in a for a in idle["advice"])
    change = waits[waits["advice"].str.contains("3g.40gb")]["layout_change"].iloc[0]
    assert change.startswith("layouts.day.hopper.") and "placed by the planner" in change


def test_sacct_json_with_null_tres_counts_loads_every_job():
    """Recorded from the sandbox: 22.05 lists energy with "count": null when no energy plugin runs."""
    jobs, stats = load_files([FIXTURES / "sandbox-switch.json"])
    assert stats.malformed_total == 0 and stats.jobs == len(jobs) > 0
    assert jobs["alloc_tres"].astype(str).str.contains("gres/").any()


def test_pending_running_and_cancelled_jobs_from_json_and_parsable2_alike(cfg):
    """Recorded from the sandbox: a job running (end 0 in JSON, Unknown in text), one pending
    (start 0 / Unknown) and one cancelled while pending (start None)."""
    since, until = datetime(2026, 11, 22, 3, 0, tzinfo=UTC), datetime(2026, 11, 22, 3, 30, tzinfo=UTC)
    out = {}
    for name, tz in (("sandbox-pending-running.json", "UTC"), ("sandbox-pending-running.txt", "UTC")):
        d, stats, _ = build(cfg, Source(files=(FIXTURES / name,), tz=tz), since, until, now=until)
        assert stats.malformed_total == 0, (name, stats.to_dict())
        jobs = d.jobs.set_index("job_id")
        # running: up to the file's horizon, its latest record (not to --until: it was saved before)
        last = max(jobs[c].max() for c in ("submit", "start", "end"))
        assert last < pd.Timestamp(until)
        assert jobs.loc["28", "hours"] == pytest.approx((last - jobs.loc["28", "start"]).total_seconds() / 3600)
        assert jobs.loc["29", "hours"] == 0 and jobs.loc["30", "hours"] == 0
        w = compute.waits(d).tables["by type"].set_index("gres")
        assert w.loc["gpu:v100", "pending_now"] == 1  # 29; 30 was cancelled, not pending
        out[name] = jobs[["state", "start", "end", "gpus"]].astype(str).to_dict("index")
    assert out["sandbox-pending-running.json"] == out["sandbox-pending-running.txt"]


def test_clock_changes_lose_no_job_and_a_missing_end_is_not_running(cfg, tmp_path):
    f = tmp_path / "dst.txt"
    f.write_text(
        "\n".join(
            [
                HEADER,
                # 02:15 happens twice on 2026-10-25 in Paris; 02:30 never happens on 2026-03-29
                "1|1|a|u|phys|gpu|a100n1|COMPLETED|2026-10-25T01:00:00|2026-10-25T01:30:00|2026-10-25T02:15:00|60||"
                "gres/gpu:a100=1,gres/gpu=1",
                "2|2|b|u|phys|gpu|a100n1|COMPLETED|2026-03-29T02:00:00|2026-03-29T02:30:00|2026-03-29T04:00:00|60||"
                "gres/gpu:a100=1,gres/gpu=1",
                "3|3|c|u|phys|gpu|a100n1|COMPLETED|2026-10-20T01:00:00|2026-10-20T01:00:00|Unknown|60||"
                "gres/gpu:a100=1,gres/gpu=1",
            ]
        )
        + "\n"
    )
    since, until = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    d, stats, _ = build(cfg, Source(files=(f,), tz="Europe/Paris"), since, until, now=until)
    assert stats.malformed_total == 0
    h = d.jobs.set_index("job_id")["hours"]
    assert 0.75 <= h["1"] <= 1.75  # 01:30 CEST to either 02:15: never "running until now"
    assert h["2"] == pytest.approx(1.0)  # 02:30 does not exist: shifted to 03:00 CEST
    assert h["3"] == 0 and any("finished jobs without an end time" in n for n in d.notes)


def test_export_round_trip_keeps_each_jobs_gpu_peaks(tmp_path):
    path = SAMPLES / "hb-jobinfo" / "sacct.txt"
    jobs, _ = load_files([path], fields=HB_FIELDS)
    want = jobs.set_index("job_id")[["gpumem_mib", "gpuutil_pct"]].dropna()
    assert len(want) == 7
    for fmt in ("csv", "json"):
        f = tmp_path / f"hb.{fmt}"
        f.write_text(export_jobs(jobs, fmt))
        again, stats = load_files([f])
        assert stats.jobs == 100
        got = again.set_index("job_id")[["gpumem_mib", "gpuutil_pct"]].dropna()
        pd.testing.assert_frame_equal(got.sort_index().astype(float), want.sort_index().astype(float))


def test_a_config_without_schedule_assumes_one_layout_and_says_so(tmp_path):
    raw = yaml.safe_load((ROOT / "etc" / "gpupool.yaml").read_text())
    del raw["schedule"]
    raw["paths"] = {**(raw.get("paths") or {}), "controller_dir": "/nonexistent", "spool_dir": "/nonexistent"}
    c = parse_config(raw, str(ROOT / "etc" / "gpupool.yaml"), ROOT / "etc")
    f = tmp_path / "s.txt"
    f.write_text(HISTORY + "\n")
    d, _, _ = build(c, Source(files=(f,)), SINCE, UNTIL, now=UNTIL)
    layout = c.layout_names()[0]
    assert set(d.jobs["layout"].astype(str)) == {layout}
    assert any(f"taken to be in layout {layout}" in n for n in d.notes)
    assert set(compute.utilization(d).tables["by type"]["layout"]) == {layout}  # the one in force


def test_before_the_journal_the_schedule_holds(cfg):
    from slurm_gpupool.reports.layout_history import LayoutHistory, layouts_at

    t = lambda h: datetime(2026, 11, 16, h, tzinfo=UTC).timestamp()  # noqa: E731
    hist = LayoutHistory({"a100n1": [(t(10), "night"), (t(11), "day")]})  # run at 10:00, done at 11:00
    at = pd.Series(pd.to_datetime([t(9), t(10) + 60, t(12)], unit="s", utc=True))
    got = layouts_at(hist, cfg.schedule, pd.Series(["a100n1"] * 3), at, SINCE, UNTIL)
    assert list(got) == ["day", "night", "day"]  # schedule, then the journal's previous, then done


def test_a_report_refuses_a_grouping_it_does_not_have(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text(HISTORY + "\n")
    res = gpupool(
        "--config",
        str(ROOT / "etc" / "gpupool.yaml"),
        "report",
        "utilization",
        "--by",
        "account",
        "--from",
        str(f),
        "--since",
        "2026-11-16",
    )
    assert res.returncode == 2 and "utilization is not grouped that way" in res.stderr


def test_efficiency_joins_the_usage_spool_only_for_the_same_job(cfg, tmp_path):
    spool = tmp_path / "a100n1" / "jobs"
    spool.mkdir(parents=True)
    start = datetime(2026, 11, 16, 9, 30, tzinfo=UTC).timestamp()

    def rec(jid: str, started: float, peak: int) -> str:
        dev = {"index": 0, "type": "1g.5gb", "memory_total_mib": 4864, "peak_memory_mib": peak}
        return json.dumps({"job_id": jid, "node": "a100n1", "start_time": started, "devices": [dev], "usage": [dev]})

    (spool / "1.json").write_text(rec("1", start + 2, 600))  # job 1: 600 of 4864 MiB
    (spool / "4.json").write_text(rec("4", start - 30 * 86400, 10))  # an older job 4: not this one
    (spool / "9.json").write_text("{not json")
    f = tmp_path / "s.txt"
    f.write_text(HISTORY + "\n")
    d, _, records = build(cfg, Source(files=(f,)), SINCE, UNTIL, spools=(str(tmp_path / "a100n1"),), now=UNTIL)
    assert any("1 unreadable usage spool records" in n for n in d.notes)
    r = compute.efficiency(d, records)
    per_job = r.series["per_job"].set_index("job_id")
    assert per_job.loc["1", "peak_mem_mib"] == 600 and per_job.loc["1", "slice_mib"] == 4864
    assert "1" in set(r.tables["jobs"]["job_id"])  # 12 % of its slice: oversized
    assert pd.isna(per_job.loc["4", "peak_mem_mib"])  # the stale record was not joined


def test_long_loads_show_progress_on_a_terminal(tmp_path, capsys):
    from slurm_gpupool.reports.sacct_load import Progress

    f = tmp_path / "s.txt"
    f.write_text(HISTORY + "\n")
    load_files([f], progress=Progress(enabled=True))
    assert "loaded 7 lines" in capsys.readouterr().err  # the 7 job lines under the header
    load_files([f])  # not a terminal (pytest captures stderr): silent
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("series", ["22.05", "24.11", "26.05"])
@pytest.mark.parametrize("name", ["squeue.json", "sinfo.json", "reservations.txt", "partitions.txt"])
def test_other_slurm_output_is_refused_never_an_empty_report(series, name):
    """Another command's output (of any release) is not accounting: exit 76, never 0 jobs."""
    with pytest.raises(DataError) as err:
        load_files([ROOT / "tests" / "fixtures" / "slurm" / series / name])
    assert err.value.exit_code == EXIT_DATA


def test_a_saved_file_ends_where_its_records_end(cfg, tmp_path):
    """#15.17: a job running when the file was saved counted up to today became half of a
    report; with no --since/--until a file is read over its own span."""
    f = tmp_path / "saved.txt"
    f.write_text(
        "\n".join(
            [
                HEADER,
                row(1, "physics", "a100n1", "COMPLETED", "09:00:00", "09:00:00", "11:00:00", "", "gres/gpu:a100=1"),
                row(2, "chem", "a100n2", "RUNNING", "10:00:00", "10:00:00", "Unknown", "", "gres/gpu:a100=1"),
            ]
        )
        + "\n"
    )
    much_later = datetime(2026, 12, 24, tzinfo=UTC)
    d, _, _ = build(cfg, Source(files=(f,)), None, None, now=much_later)
    assert (d.since, d.until) == (datetime(2026, 11, 16, 9, tzinfo=UTC), datetime(2026, 11, 16, 11, 0, 1, tzinfo=UTC))
    hours = d.jobs.set_index("job_id")["hours"]
    assert hours["1"] == pytest.approx(2) and hours["2"] == pytest.approx(1)  # up to 11:00, the last record
    assert any("saved data ends at 2026-11-16 11:00 UTC" in n for n in d.notes)


def test_capacity_starts_with_the_cluster_and_other_clusters_are_named(cfg, tmp_path):
    """#15.18: a one-hour-old cluster had 7 days of capacity ("idle 100 % of night hours")."""
    f = tmp_path / "young.txt"
    f.write_text(
        HEADER + "\n" + row(1, "p", "a100n1", "COMPLETED", "22:00:00", "22:00:00", "23:00:00", "", "gres/gpu:a100=8")
    )
    since, until = datetime(2026, 11, 9, 23, tzinfo=UTC), datetime(2026, 11, 16, 23, tzinfo=UTC)
    d, _, _ = build(cfg, Source(files=(f,)), since, until, now=until)
    cap = d.capacity
    assert cap["start"].min() == pytest.approx(datetime(2026, 11, 16, 22, tzinfo=UTC).timestamp())
    t = compute.utilization(d).tables["by type"].set_index(["layout", "type"])
    assert t.loc[("night", "a100"), "capacity_eq_hours"] == pytest.approx(8 * 2 * 1)  # 2 nodes x 8, one hour
    assert any("capacity counted from 2026-11-16 22:00 UTC" in n for n in d.notes)
    other = tmp_path / "other.txt"
    other.write_text(
        HEADER + "\n" + row(1, "p", "gpu-x17", "COMPLETED", "22:00:00", "22:00:00", "23:00:00", "", "gres/gpu=1")
    )
    d, _, _ = build(cfg, Source(files=(other,)), since, until, now=until)
    assert any("1 of 1 jobs ran on nodes the pool config does not name (e.g. gpu-x17)" in n for n in d.notes)


def test_an_empty_file_is_no_accounting(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n\n  \n")
    for name in ("empty.txt", "blank.txt"):
        with pytest.raises(DataError, match="empty"):
            load_files([tmp_path / name])


def test_usage_and_cost_count_gpu_jobs_alike(data):
    d, _, _ = data
    u = compute.usage(d, "account").main.set_index("account")["gpu_jobs"]
    c = compute.cost(d, "account")
    assert c.main.set_index("account")["gpu_jobs"].to_dict() == u.to_dict()
    assert "jobs" not in c.main.columns and c.meta["gpu_jobs"] == int(u.sum())


QUOTA_HISTORY = "\n".join(
    [
        HEADER,
        row(11, "physics", "a100n1", "COMPLETED", "08:00:00", "08:00:00", "12:00:00", "", "gres/gpu:a100=1,gres/gpu=1"),
        row(12, "physics", "a100n2", "COMPLETED", "09:00:00", "10:00:00", "14:00:00", "", "gres/gpu:a100=1,gres/gpu=1"),
        row(
            13, "physics", "a100n1", "COMPLETED", "09:00:00", "09:00:00", "15:00:00", "", "gres/gpu:1g.5gb=3,gres/gpu=3"
        ),
        row(14, "bio", "v100n1", "COMPLETED", "10:00:00", "10:00:00", "13:00:00", "", "cpu=1,gres/shard=2"),
        row(15, "bio", "v100n1", "COMPLETED", "11:00:00", "11:00:00", "12:00:00", "", "cpu=1,gres/shard=4"),
        row(16, "chem", "a100n2", "COMPLETED", "20:00:00", "20:00:00", "22:00:00", "", "gres/gpu:a100=2,gres/gpu=2"),
        row(17, "chem", "None assigned", "PENDING", "21:00:00", "Unknown", "Unknown", "gres/gpu:a100=1", ""),
    ]
)
QUOTAS = {
    "physics": {"a100": 2, "1g.5gb": {"gpu_eq": 1}},  # 1 GPU-eq of 1g.5gb slices: 7 of them
    "bio": {"shard": 8, "a30": 1},
    "chem": {"a100": 1},
}


def test_quota_report_measures_concurrent_holdings_against_each_quota(cfg, tmp_path):
    f = tmp_path / "q.txt"
    f.write_text(QUOTA_HISTORY + "\n")
    c = parse_config({**cfg.raw, "quotas": QUOTAS}, cfg.source, ROOT / "etc")
    d, _, _ = build(c, Source(files=(f,)), SINCE, UNTIL, now=UNTIL)
    r = compute.quota(d)
    q = r.main.set_index(["account", "type"])
    day = 24.0
    # physics a100: 1 held 08-10, 2 held 10-12 (at the quota), 1 held 12-14
    a100 = q.loc[("physics", "a100")]
    assert (a100["quota"], a100["quota_eq"], a100["peak"], a100["peak_pct"]) == (2, 2.0, 2.0, 100.0)
    assert a100["mean"] == pytest.approx(8 / day) and a100["mean_pct"] == pytest.approx(100 * 8 / day / 2)
    assert a100["hours_at_quota"] == pytest.approx(2.0) and a100["jobs"] == 2
    assert a100["eq_hours"] == pytest.approx(8.0)
    # physics 1g.5gb: a GPU-equivalent quota is 7 slices; 3 held for 6 h, never at the quota
    mig = q.loc[("physics", "1g.5gb")]
    assert (mig["quota"], mig["peak"], mig["hours_at_quota"]) == (7, 3.0, 0.0)
    assert mig["quota_eq"] == pytest.approx(1.0) and mig["peak_pct"] == pytest.approx(300 / 7)
    assert mig["mean"] == pytest.approx(18 / day) and mig["eq_hours"] == pytest.approx(18 / 7)
    # bio shards: counted in shards, as GrpTRES gres/shard is: 2 (10-11), 6 (11-12), 2 (12-13)
    shard = q.loc[("bio", "shard")]
    assert (shard["quota"], shard["peak"], shard["hours_at_quota"]) == (8, 6.0, 0.0)
    assert shard["mean"] == pytest.approx((2 * 3 + 4) / day) and shard["peak_pct"] == pytest.approx(75.0)
    assert shard["quota_eq"] == pytest.approx(2.0) and shard["eq_hours"] == pytest.approx(2 / 4 * 3 + 4 / 4 * 1)
    # a quota nothing used, and one exceeded (set after the job started): said in a note
    assert tuple(q.loc[("bio", "a30"), ["peak", "mean", "hours_at_quota", "jobs"]]) == (0.0, 0.0, 0.0, 0)
    chem = q.loc[("chem", "a100")]
    assert (chem["peak"], chem["peak_pct"], chem["hours_at_quota"], chem["jobs"]) == (2.0, 200.0, 2.0, 1)
    assert any("held more than the quota: chem a100" in n for n in r.notes)
    assert list(r.main["account"]) == ["bio", "bio", "chem", "physics", "physics"]


def test_quota_report_from_the_cli_takes_no_grouping_and_says_when_there_are_no_quotas(cfg, tmp_path):
    f = tmp_path / "q.txt"
    f.write_text(QUOTA_HISTORY + "\n")
    conf = tmp_path / "pool.yaml"
    mig_parted = {**cfg.raw["mig_parted"], "file": str(ROOT / "etc" / cfg.raw["mig_parted"]["file"])}
    conf.write_text(yaml.safe_dump({**cfg.raw, "quotas": QUOTAS, "mig_parted": mig_parted}))
    base = ["report", "quota", "--from", str(f), "--since", "2026-11-16", "--until", "2026-11-17", "--tz", "UTC"]
    res = gpupool("--config", str(conf), *base, "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["reports"][0]["tables"]["quota"]
    assert {(x["account"], x["type"]): x["peak"] for x in rows}[("physics", "a100")] == 2
    assert gpupool("--config", str(conf), *base, "--by", "account").returncode == 2
    none = gpupool("--config", str(ROOT / "etc" / "gpupool.yaml"), *base)
    assert none.returncode == 0 and "no quotas in the pool config" in none.stdout


def test_a_job_starting_the_second_another_ends_is_not_held_with_it():
    """Slurm starts a job waiting for a quota in the second the holder ends: one at a time."""
    start, end = np.array([0.0, 3600.0]), np.array([3600.0, 7200.0])
    peak, mean, at = compute.held_level(start, end, np.array([1.0, 1.0]), 0.0, 4 * 3600.0, 1)
    assert (peak, mean, at) == (1.0, 0.5, 2.0)
    peak, _, at = compute.held_level(np.array([0.0, 1800.0]), end, np.array([1.0, 1.0]), 0.0, 4 * 3600.0, 2)
    assert (peak, at) == (2.0, 0.5)  # overlapping for half an hour


FORMULAS = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tx", "'=already", "a#b", 'q"u,ote', "plain"]


def test_csv_cells_are_never_spreadsheet_formulas_and_the_export_reads_back(tmp_path):
    """OWASP's CSV injection: a job or account name that starts with = + - @ tab or CR is
    written with a leading quote (text in every spreadsheet); the export reads back to the
    same names (#26 item 18; a '#' cut the name on reading back, too)."""
    import csv
    import io

    lines = [HEADER]
    for k, name in enumerate(FORMULAS, 1):
        lines.append(
            f"{k}|{k}|{name}|u{k}|{'=acct' if k == 1 else 'bio'}|gpu|a100n1|COMPLETED|{D}10:00:00|{D}10:00:00|"
            f"{D}11:00:00|60||gres/gpu:a100=1,gres/gpu=1"
        )
    src = tmp_path / "sacct.txt"
    src.write_text("\n".join(lines) + "\n")
    jobs, _ = load_files([src], tz="UTC")
    text = export_jobs(jobs)
    rows = list(csv.reader(io.StringIO(text.split("\n", 1)[1])))
    for row in rows[1:]:
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row), row
    back = tmp_path / "export.csv"
    back.write_text(text)
    again, _ = load_files([back])
    assert sorted(again["name"].astype(str)) == sorted(FORMULAS)
    assert export_jobs(again) == text
    res = gpupool("report", "usage", "--from", str(src), "--by", "account", "--format", "csv", "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    cells = [c for row in csv.reader(io.StringIO(res.stdout)) for c in row]
    assert "'=acct" in cells and not any(c.startswith("=") for c in cells)


def test_usage_counts_every_job_and_says_how_it_rounds(cfg, tmp_path):
    """A MIG job that starts and ends in the same second has 0 GPU-hours (sacct's times are
    whole seconds): usage dropped it (hours > 0), while waits counted it (#26 item 20)."""
    f = tmp_path / "s.txt"
    f.write_text(
        HEADER
        + "\n"
        + row(
            1, "physics", "a100n1", "COMPLETED", "09:00:00", "09:00:00", "09:00:00", "", "gres/gpu:1g.5gb=1,gres/gpu=1"
        )
        + "\n"
        + row(2, "bio", "h100n1", "COMPLETED", "09:00:00", "09:00:00", "10:00:00", "", "gres/gpu:3g.40gb=1,gres/gpu=1")
        + "\n"
    )
    d, _, _ = build(cfg, Source(files=(f,)), SINCE, UNTIL, now=UNTIL)
    for by, key in (("gres-type", "gpu:1g.5gb"), ("account", "physics")):
        r = compute.usage(d, by)
        t = r.main.set_index(by)
        assert t.loc[key, "gpu_jobs"] == 1 and t.loc[key, "gpu_hours"] == 0, (by, t)
        assert r.meta["totals"]["gpu_jobs"] == 2
        assert any("whole-second" in n and "2 decimals" in n for n in r.notes)
        assert any("1 GPU jobs ran under a second" in n for n in r.notes)
    assert compute.cost(d, "account").main.set_index("account").loc["physics", "gpu_jobs"] == 1
    assert set(compute.waits(d).main["gres"].astype(str)) == {"gpu:1g.5gb", "gpu:3g.40gb"}


def test_utilization_and_waits_split_by_the_layout_in_force_after_a_manual_switch(cfg, tmp_path):
    """Saturday: the schedule says night all day; at 10:00 an admin switched every node to
    day (the journal). The MIG jobs after it, and the pending one submitted then, count
    under day; the capacity before under night, after under day; the chart's bands too."""
    from slurm_gpupool.reports.html import render_html

    sat = "2026-11-21T"
    nodes = cfg.all_nodes()
    log = tmp_path / "journal.log"
    events = [{"at": f"{sat}10:00:00+0000", "run": "start", "target": "day", "previous": dict.fromkeys(nodes, "night")}]
    events += [{"at": f"{sat}10:05:00+0000", "node": n, "step": "done"} for n in nodes]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))

    def job(jid, node, state, submit, start, end, req, alloc):
        return (
            f"{jid}|{jid}|j{jid}|u|acct|gpu|{node}|{state}|{sat}{submit}+00:00|"
            f"{start if start == 'Unknown' else sat + start + '+00:00'}|{end if end == 'Unknown' else sat + end + '+00:00'}"
            f"|60|{req}|{alloc}"
        )

    f = tmp_path / "s.txt"
    f.write_text(
        "\n".join(
            [
                HEADER,
                job(1, "a100n1", "COMPLETED", "10:30:00", "11:00:00", "12:00:00", "", "gres/gpu:1g.5gb=2,gres/gpu=2"),
                job(2, "a100n2", "COMPLETED", "08:00:00", "08:30:00", "09:30:00", "", "gres/gpu:a100=1,gres/gpu=1"),
                job(3, "None assigned", "PENDING", "13:00:00", "Unknown", "Unknown", "gres/gpu:1g.10gb=1", ""),
                job(4, "v100n1", "COMPLETED", "00:00:00", "00:00:00", "00:30:00", "", "gres/gpu:v100=1,gres/gpu=1"),
            ]
        )
        + "\n"
    )
    since, until = datetime(2026, 11, 21, tzinfo=UTC), datetime(2026, 11, 22, tzinfo=UTC)
    d, _, _ = build(cfg, Source(files=(f,)), since, until, journal=log, now=until)
    u = compute.utilization(d)
    t = u.tables["by type"].set_index(["layout", "type"])
    assert t.loc[("day", "1g.5gb"), "allocated_eq_hours"] == pytest.approx(2 / 7)
    assert ("night", "1g.5gb") not in t.index  # the schedule's due period said night
    a100_day = 2 * 2 * (24 - 10 - 5 / 60)  # two whole A100s per DGX by day, from 10:05
    assert t.loc[("day", "a100"), "capacity_eq_hours"] == pytest.approx(a100_day)
    assert t.loc[("night", "a100"), "capacity_eq_hours"] == pytest.approx(2 * 8 * (10 + 5 / 60))
    assert t.loc[("night", "a100"), "allocated_eq_hours"] == pytest.approx(1.0)
    w = compute.waits(d).tables["by type and layout"].set_index(["gres", "layout"])
    assert w.loc[("gpu:1g.5gb", "day"), "jobs"] == 1 and w.loc[("gpu:a100", "night"), "jobs"] == 1
    assert w.loc[("gpu:1g.10gb", "day"), "pending_now"] == 1  # submitted after the switch: day
    ts = u.series["utilization"]
    hour = ts["time"].dt.hour
    assert set(ts.loc[hour < 10, "layout"]) == {"night"} and set(ts.loc[hour >= 11, "layout"]) == {"day"}
    page = render_html([u], {"title": "t", "since": since.isoformat(), "until": until.isoformat(), "load": {}})
    assert "layout: day" in page and "layout: night" in page


def _measured_job4(cfg, tmp_path, sm_pct: float, peak_mib: int = 4000):
    """Job 4 (3g.40gb on h100n1, 2 h, account bio) with a spool record as the Epilog writes it
    after the sampler measured GPM activity on its MIG instance."""
    spool = tmp_path / "h100n1" / "jobs"
    spool.mkdir(parents=True)
    start = datetime(2026, 11, 16, 12, 0, tzinfo=UTC).timestamp()
    dev = {
        "index": 0,
        "type": "3g.40gb",
        "memory_total_mib": 40448,
        "peak_memory_mib": peak_mib,
        "mean_utilization_pct": None,
        "activity_source": "gpm",
        "mean_sm_activity_pct": sm_pct,
        "peak_sm_activity_pct": sm_pct + 5,
        "mean_tensor_activity_pct": 3.0,
    }
    rec = {"job_id": "4", "node": "h100n1", "start_time": start + 1, "devices": [dev], "usage": [dev]}
    (spool / "4.json").write_text(json.dumps(rec))
    f = tmp_path / "s.txt"
    f.write_text(HISTORY + "\n")
    return build(cfg, Source(files=(f,)), SINCE, UNTIL, spools=(str(tmp_path / "h100n1"),), now=UNTIL)


def test_efficiency_shows_measured_activity_and_peak_memory_per_job_user_and_account(cfg, tmp_path):
    d, _, records = _measured_job4(cfg, tmp_path, sm_pct=20.0)
    r = compute.efficiency(d, records)
    job = r.tables["measured jobs"].set_index("job_id").loc["4"]
    assert (job["sm_activity_pct"], job["peak_sm_activity_pct"], job["peak_mem_mib"]) == (20.0, 25.0, 4000)
    assert job["slice_mib"] == 40448 and job["mem_used_pct"] == pytest.approx(100 * 4000 / 40448)
    acct = r.tables["by account"].set_index("account").loc["bio"]
    assert acct["sm_activity_pct"] == 20.0 and acct["max_mem_used_pct"] == pytest.approx(9.9, abs=0.05)
    assert r.tables["by user"].set_index("user").loc["u_bio", "activity_pct"] == 20.0
    # a MIG job has no NVML utilization: GPM's activity is what is judged (and flagged) now
    assert "4" in set(r.tables["jobs"]["job_id"])


def test_advice_proposes_the_smaller_profile_the_measured_use_fits_with_freed_hours(cfg, tmp_path):
    d, _, records = _measured_job4(cfg, tmp_path, sm_pct=20.0)  # 20 % of 3/7 of the GPU: fits 1/7
    t = advice(d, records).main
    (row,) = t[t["rule"] == "oversized slices"].itertuples(index=False)
    assert "3g.40gb jobs (1 of 1) peaked below 9.8 GB" in row.advice and "offer more 1g.10gb" in row.advice
    assert "keep it under 80% busy (p75 activity 20 % of the 3g.40gb, 1 measured)" in row.advice
    freed = 2 * 3 / 7 * (1 - 1 / 3)  # 2 h on 3/7 of a GPU, on 1/7 instead
    assert f"free {freed:,.1f} GPU-eq-h over 1 jobs" in row.advice
    assert row.layout_change.startswith("layouts.day.hopper.") and "placed by the planner" in row.layout_change
    from slurm_gpupool.core.mig.catalog import get_model

    after = row.layout_change.split("-> ")[1].split(" (placed")[0].removeprefix("mig ")
    mix = {k.strip(): int(v) for k, v in (kv.split(":") for kv in after.strip("{}").split(","))}
    assert mix.get("1g.10gb", 0) >= 1 and feasible(get_model("H100-SXM5-80GB"), mix)


def test_advice_keeps_the_slice_when_the_measured_activity_needs_it(cfg, tmp_path):
    d, _, records = _measured_job4(cfg, tmp_path, sm_pct=90.0)  # the memory fits 1g, the compute does not
    t = advice(d, records).main
    assert not (t["rule"] == "oversized slices").any()


def _measured_job3(cfg, tmp_path, peak_mib: int, util_pct: float):
    """Job 3 (a whole A100, 1.5 h, in the night layout) measured by the hooks: NVML's utilization."""
    dev = {"index": 0, "type": "a100", "memory_total_mib": 40960, "peak_memory_mib": peak_mib}
    return _measured(cfg, tmp_path, "3", "a100n2", datetime(2026, 11, 16, 22, 0, tzinfo=UTC), dev, util_pct)


def _measured(cfg, tmp_path, job: str, node: str, start: datetime, dev: dict, util_pct: float):
    """The history with job ``job``'s spool record as the Epilog writes it (``dev`` measured,
    with NVML's mean utilization)."""
    spool = tmp_path / node / "jobs"
    spool.mkdir(parents=True)
    dev = {**dev, "mean_utilization_pct": util_pct}
    rec = {"job_id": job, "node": node, "start_time": start.timestamp(), "devices": [dev], "usage": [dev]}
    (spool / f"{job}.json").write_text(json.dumps(rec))
    f = tmp_path / "s.txt"
    f.write_text(HISTORY + "\n")
    return build(cfg, Source(files=(f,)), SINCE, UNTIL, spools=(str(tmp_path / node),), now=UNTIL)


@pytest.mark.parametrize(
    ("peak_mib", "util", "offer", "check"),
    [
        (3000, 10.0, "offer more 1g.5gb", "a whole A100-SXM4-40GB as mig {1g.5gb: 7} (placed by the planner)"),
        # 6 GB and 18 % of the GPU: more than 1g.10gb's compute, 2g.10gb is 2/7 of the GPU, a
        # quarter share fits (the pool shares no A100: the share counts it uses elsewhere)
        (6000, 18.0, "offer more shares (1 of 4 of a A100-SXM4-40GB)", "time-slicing needs no placement: {shared: 4}"),
    ],
)
def test_advice_moves_a_small_whole_gpu_job_to_a_slice_or_a_share(cfg, tmp_path, peak_mib, util, offer, check):
    d, _, records = _measured_job3(cfg, tmp_path, peak_mib, util)
    t = advice(d, records).main
    rows = t[t["rule"] == "whole GPU to slice or share"]
    assert len(rows) == 1, t.to_string()
    assert offer in rows["advice"].iloc[0] and rows["layout_change"].iloc[0].startswith(check)
    assert "free " in rows["advice"].iloc[0]


def _measured_job2(cfg, tmp_path, peak_mib: int, util_pct: float):
    """Job 2 (2 shards of a time-sliced V100 on v100n1, 3 h) measured by the hooks: its own
    processes' memory and its part of the GPU's utilization."""
    dev = {"index": 0, "type": "v100_shared", "memory_total_mib": 32768, "peak_memory_mib": peak_mib}
    return _measured(cfg, tmp_path, "2", "v100n1", datetime(2026, 11, 16, 10, 0, tzinfo=UTC), dev, util_pct)


@pytest.mark.parametrize(
    ("peak_mib", "util", "fires"),
    [
        (3000, 10.0, True),  # a quarter of one share's memory, 10 % of the GPU: one share would do
        (9000, 10.0, False),  # more than one share's memory
        (3000, 30.0, False),  # 30 % of the GPU keeps one share (a quarter) over 80 % busy
    ],
)
def test_advice_tells_shard_jobs_that_held_more_shares_than_they_used(cfg, tmp_path, peak_mib, util, fires):
    d, _, records = _measured_job2(cfg, tmp_path, peak_mib, util)
    eff = compute.efficiency(d, records).tables["measured jobs"].set_index("job_id")
    each = eff.loc["2", "slice_mib"] / 2
    t = advice(d, records).main
    rows = t[t["rule"] == "oversized shares"]
    assert len(rows) == int(fires), t.to_string()
    if fires:
        text = rows["advice"].iloc[0]
        assert "most v100_shared shard jobs (1 of 1) held more shards than they used" in text
        assert "median 2 held, 1 would have done" in text and f"one share is {each / 1024:.1f} GB" in text
        assert "free 0.8 GPU-eq-h over 1 jobs" in text  # 3 h on half a GPU, a quarter would have done
        assert rows["layout_change"].iloc[0] == "a request's size: no layout change"


def test_advice_keeps_the_shards_of_a_job_whose_activity_was_not_measured(cfg, tmp_path):
    """No utilization (as on a time-sliced MIG device): its compute need is unknown, so the
    shards it held are not called too many, however small its memory."""
    d, _, records = _measured_job2(cfg, tmp_path, 3000, float("nan"))
    t = advice(d, records).main
    assert not (t["rule"] == "oversized shares").any(), t.to_string()


def test_a_period_that_ends_before_the_saved_files_begin_is_refused_not_reported_empty():
    """``--until`` before the saved files' first job (the other end taken from the files)
    gave an inverted window, "2026-11-22 .. 2020-01-01", reported as empty with exit 0; as
    an explicit ``--since``/``--until`` pair does, it is now a usage error naming the span."""
    saved = str(ROOT / "tests" / "fixtures" / "sacct" / "sandbox-parsable2.txt")
    res = gpupool("report", "usage", "--from", saved, "--until", "2020-01-01")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("gpupool: --until 2020-01-01 00:00 UTC: the period is empty")
    assert "the saved files' jobs run from 2026-11-22 02:37" in res.stderr
    res = gpupool("report", "waits", "--from", saved, "--since", "2026-11-23")  # after their end, before now
    assert res.returncode == 2 and "--since 2026-11-23 00:00 UTC: the period is empty" in res.stderr
    res = gpupool("report", "usage", "--from", saved, "--until", "2026-11-23")
    assert res.returncode == 0 and "2026-11-22 02:37 .. 2026-11-23 00:00 UTC" in res.stdout
