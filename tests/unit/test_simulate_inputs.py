"""#16: jobs for the simulator from the public traces and from a site's accounting, the
summary figures, and ``gpupool simulate`` end to end (its table, JSON and errors)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from slurm_gpupool.cli.main import cli
from slurm_gpupool.config.load import parse_config
from slurm_gpupool.reports.dataset import Source, build
from slurm_gpupool.reports.sim_accounting import accounting_jobs
from slurm_gpupool.reports.traces import philly as st
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.metrics import distribution, percentile

ROOT = Path(__file__).resolve().parents[2]


def test_retime_keeps_order_and_count_and_follows_the_curve():
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 86400, 5000))
    curve = np.zeros(1440)
    curve[8 * 60 : 20 * 60] = 3.0  # three times the rate by day
    curve[curve == 0] = 1.0
    out = st.retime(times, curve)
    assert len(out) == len(times) and np.all(np.diff(out) >= 0)  # order kept
    by_day = np.mean((out >= 8 * 3600) & (out < 20 * 3600))
    assert by_day == pytest.approx(36 / 48, abs=0.01)  # 12 h x 3 of 12 x 3 + 12 x 1


def test_helios_curve_has_a_day_and_night_shape():
    curve = st.helios_curve()
    assert curve.shape == (1440,) and curve.sum() == pytest.approx(1.0)
    hourly = curve.reshape(24, 60).sum(1)
    assert hourly.max() / hourly.min() > 1.5  # not flat


def test_philly_jobs_are_the_trace_s_own():
    epoch, jobs = st.philly_jobs(days=1, start="2017-10-02", curve=None)
    assert epoch.isoformat() == "2017-10-02T00:00:00"
    frame = st.philly_frame()
    day = frame[(frame["submit"] >= "2017-10-02") & (frame["submit"] < "2017-10-03")]
    assert len(jobs) == len(day) > 100
    assert [j.request.gpus for j in jobs] == day["gpus"].tolist()
    assert all(0 <= j.submit_s < 86400 and j.limit_s >= j.duration_s and j.limit_s % 60 == 0 for j in jobs)
    assert {j.account for j in jobs} <= set(frame["vc"])
    _, retimed = st.philly_jobs(days=1, start="2017-10-02", curve=st.helios_curve())
    assert sorted(j.duration_s for j in retimed) == sorted(j.duration_s for j in jobs)  # same jobs, other times


def test_openb_mix_gives_one_gpu_jobs_openb_s_fractions():
    jobs = [SimJob(i, i, 10, 60, TraceRequest(1 if i % 3 else 4)) for i in range(300)]
    milli = st.openb_milli()
    mixed = st.openb_mix(jobs, milli, seed=1)
    assert [j.request.gpus for j in mixed] == [j.request.gpus for j in jobs]
    fractions = [j.request.milli for j in mixed if j.request.gpus == 1]
    assert set(fractions) <= set(milli.tolist()) and any(m < 1000 for m in fractions)
    assert all(j.request.milli == 1000 for j in mixed if j.request.gpus == 4)
    assert st.openb_mix(jobs, milli, seed=1) == mixed and st.openb_mix(jobs, milli, seed=2) != mixed


def test_accounting_jobs_become_requests(tmp_path):
    """The reports' hand-computed history: MIG slices -> their share and memory, shards ->
    their share, whole GPUs -> count and model; unfinished jobs left out with the reason."""
    from tests.unit.test_reports import HISTORY

    raw = yaml.safe_load((ROOT / "etc" / "gpupool.yaml").read_text())
    raw.pop("mig_parted")
    raw["schedule"]["timezone"] = "UTC"
    cfg = parse_config(raw, str(ROOT / "etc" / "gpupool.yaml"))
    f = tmp_path / "sacct.txt"
    f.write_text(HISTORY)
    data, _, _ = build(cfg, Source(files=(f,), tz="UTC"), None, None)
    epoch, jobs, skipped = accounting_jobs(data)
    by = {j.job_id: j for j in jobs}
    assert set(by) == {1, 2, 3, 4, 7}
    # two 1g.5gb: 2/7 of an A100 (down), their memory, and the GRES they were
    assert by[1].request == TraceRequest(1, 285, 2 * 4864, None, "gpu:1g.5gb:2")
    assert by[2].request.gpus == 1 and by[2].request.milli == 500  # 2 of v100n1's 4 shards
    assert by[2].request.gres == "shard:v100_shared:2"
    assert by[3].request == TraceRequest(1, 1000, 0, "A100-SXM4-40GB")  # a whole A100, its model
    assert by[4].request.milli == 428 and by[4].request.memory_mib > 40000  # 3g.40gb of an H100 (3/7, down)
    # replayed, a job fits the device it held: a 1g.5gb job (1/7) maps to a 1g.5gb again
    from slurm_gpupool.simulate.mapping import map_request
    from slurm_gpupool.simulate.pool import pool_spec

    offers = pool_spec(cfg, ["day"]).offers["day"]
    one = TraceRequest(1, by[1].request.milli // 2, 4864)
    assert map_request(one, offers, "day", cfg.slurm.type_naming).gres == "gpu:1g.5gb:1"
    assert map_request(by[4].request, offers, "day", cfg.slurm.type_naming).gres == "gpu:3g.40gb:1"
    assert by[1].duration_s == 7200 and by[1].limit_s == 3600 * 2  # its 60 min limit < run time: run time
    assert skipped["never started or still running"] == 2
    assert epoch.isoformat().startswith("2026-11-10")
    # --max-time: a partition MaxTime to try cuts the limit (it was ignored for accounting)
    _, cut, _ = accounting_jobs(data, max_time_s=5400)
    assert {j.job_id: j.limit_s for j in cut}[1] == 5400 and all(j.limit_s <= 5400 for j in cut)


def test_accounting_jobs_keep_their_qos_and_none_recorded_is_normal(tmp_path):
    """#27: a replay orders the queue by QOS priority, so a job keeps the QOS sacct printed."""
    from tests.unit.test_reports import HISTORY

    raw = yaml.safe_load((ROOT / "etc" / "gpupool.yaml").read_text())
    raw.pop("mig_parted")
    cfg = parse_config(raw, str(ROOT / "etc" / "gpupool.yaml"))
    header, *rows = HISTORY.splitlines()
    qos = {"3": "high", "4": ""}  # job 4: none recorded
    lines = [header + "|QOS"] + [r + "|" + qos.get(r.split("|")[0], "normal") for r in rows]
    f = tmp_path / "sacct.txt"
    f.write_text("\n".join(lines) + "\n")
    data, _, _ = build(cfg, Source(files=(f,), tz="UTC"), None, None)
    _, jobs, _ = accounting_jobs(data)
    assert {j.job_id: j.qos for j in jobs} == {1: "normal", 2: "normal", 3: "high", 4: "normal", 7: "normal"}


def test_percentiles_and_distribution():
    assert percentile([0, 10], 50) == 5
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    d = distribution([3, 1, 2])
    assert d["p50"] == 2 and d["mean"] == 2 and d["count"] == 3
    assert np.isnan(distribution([])["p50"])


def _invoke(args, config):
    env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(config)}
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def test_gpupool_simulate_compares_policies_on_philly(tmp_path):
    res = _invoke(
        ["simulate", "--trace", "philly", "--days", "0.5", "--start", "2017-10-02", "--format", "json"],
        ROOT / "etc" / "gpupool.yaml",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    names = [r["policy"] for r in out["runs"]]
    assert names[0] == "static:night" and names[-1] == "schedule"  # all-whole first (night is), the schedule last
    for r in out["runs"]:
        assert r["jobs"] == out["context"]["jobs"] > 0
        assert r["started"] + r["never_started"] + r["rejected"] == r["jobs"] and r["started"] > 0
        assert 0 <= r["utilisation"] <= 1 and r["wait_s"]["p50"] <= r["wait_s"]["p90"] <= r["wait_s"]["p99"]
    night = next(r for r in out["runs"] if r["policy"] == "static:night")
    assert night["switches"] == 0 and night["rounding_loss_fraction"] == 0  # Philly asks for whole GPUs


def test_the_slurm_release_picks_its_backfill_rules_and_the_output_says_which(monkeypatch, capsys):
    """26.05: will-run batches by the chosen nodes and windows' ends rounded up; ``--will-run`` overrides the first."""
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(ROOT / "etc" / "gpupool.yaml"))
    args = ["simulate", "--trace", "philly", "--days", "0.1", "--start", "2017-10-02", "--policy", "static:night"]
    said = {}
    for extra in ([], ["--slurm-release", "26.05"], ["--slurm-release", "26.05", "--will-run", "exact"]):
        assert main([*args, *extra, "--format", "json"]) == 0
        said[tuple(extra)] = json.loads(capsys.readouterr().out)["context"]["parameters"]["scheduler"]
    assert [s.split("whole-node reservations, ")[1] for s in said.values()] == [
        "as Slurm 22.05, will-run batch)",
        "as Slurm 26.05, will-run batch-nodes)",
        "as Slurm 26.05, will-run exact)",
    ]


def test_gpupool_simulate_html_and_slowdown_sweep(tmp_path):
    html = tmp_path / "sim.html"
    args = ["simulate", "--trace", "openb", "--days", "0.3", "--start", "2017-10-02", "--policy", "static:day"]
    res = _invoke([*args, "--slowdown", "1,2", "--format", "html", "-o", str(html)], ROOT / "etc" / "gpupool.yaml")
    assert res.exit_code == 0, res.output
    page = html.read_text()
    assert "<svg" in page and "slowdown 2" in page and "Policies side by side" in page
    res = _invoke([*args, "--slowdown", "1,2", "--format", "json"], ROOT / "etc" / "gpupool.yaml")
    runs = json.loads(res.output)["runs"]
    one, two = runs
    assert two["completion_s"]["mean"] >= one["completion_s"]["mean"]  # shard jobs run twice as long


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--policy", "static:nope"], "no layout 'nope'"),
        (["--policy", "sometimes"], "expected static:LAYOUT"),
        (["--slowdown", "0"], "above 0"),
        (["--slowdown", "x"], "numbers separated by commas"),
        (["--limit-factor", "0.5"], "at least 1"),
        (["--max-time", "soon"], "--max-time soon"),
        (["--thin", "0"], "at most 1"),
        (["--slurm-release", "latest"], "--slurm-release latest"),
        (["--slurm-release", "24.11.x"], "a release as 24.11"),
        # each of these ended in exit 70 (an internal error) or was taken silently
        (["--bf-interval", "nan"], "--bf-interval nan: must be a number of seconds more than 0"),
        (["--bf-interval", "-5"], "must be a number of seconds more than 0"),
        (["--bf-interval", "inf"], "must be a number of seconds more than 0"),
        (["--start", "notadate"], "--start notadate: not a date"),
        (["--start", "2017-10-02T99"], "not a date"),
        (["--start", "2017-10-02", "--format", "html", "-o", "/nonexistent/x.html"], "-o /nonexistent/x.html: cannot"),
    ],
)
def test_bad_arguments_are_usage_errors(args, expect, monkeypatch, capsys):
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(ROOT / "etc" / "gpupool.yaml"))
    code = main(["simulate", "--trace", "philly", "--days", "0.1", *args])
    err = capsys.readouterr().err
    assert code == 2 and expect in err and err.startswith("gpupool: ") and "Traceback" not in err


def test_a_report_to_a_missing_directory_or_from_a_binary_journal_is_said_plainly(tmp_path, monkeypatch, capsys):
    """``report -o`` into a directory that does not exist and a binary ``--journal`` ended in
    exit 70; a journal's undecodable bytes are skipped as any line that is not JSON."""
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(ROOT / "etc" / "gpupool.yaml"))
    sacct = str(ROOT / "tests" / "fixtures" / "sacct" / "sandbox-parsable2.txt")
    assert main(["report", "usage", "--from", sacct, "-o", str(tmp_path / "no" / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpupool: -o {tmp_path / 'no' / 'x'}: cannot write it") and "Traceback" not in err
    junk = tmp_path / "journal.log"
    junk.write_bytes(bytes(range(256)) * 2)
    assert main(["report", "usage", "--from", sacct, "--journal", str(junk)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_simulate_writes_through_the_path_given(tmp_path, monkeypatch, capsys):
    """``-o`` through a symlink (or ``>(gzip > x)``'s /dev/fd/N) writes where it points: an
    atomic rename beside the path replaced the link and left its target as it was."""
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(ROOT / "etc" / "gpupool.yaml"))
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    args = ["simulate", "--trace", "philly", "--days", "0.1", "--start", "2017-10-02", "--format", "json"]
    assert main([*args, "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(target.read_text())["runs"]


def test_each_variant_of_a_sweep_is_its_own_replay():
    """An elastic switcher keeps state (its last decision, cool-downs): a sweep's second
    variant used to inherit the first's and, held by a batching window from the future,
    made no switch at all.  The slowdown-2 run of a sweep is the lone slowdown-2 run."""
    args = ["simulate", "--trace", "openb", "--days", "1", "--start", "2017-10-02", "--policy", "elastic"]
    conf = ROOT / "etc" / "simulate" / "pool-512-elastic.yaml"
    sweep = json.loads(_invoke([*args, "--slowdown", "1,2", "--format", "json"], conf).output)["runs"]
    alone = json.loads(_invoke([*args, "--slowdown", "2", "--format", "json"], conf).output)["runs"]
    assert sweep[1]["switches"] == alone[0]["switches"] > 0
    assert sweep[1]["wait_s"] == alone[0]["wait_s"] and sweep[1]["utilisation"] == alone[0]["utilisation"]


def test_since_without_a_trace_means_this_sites_accounting(tmp_path, monkeypatch, capsys):
    """`gpupool simulate --since 1d` replayed the whole Philly trace (its window ignored):
    the README demo's step 12 ran 82,247 jobs for a dozen of its own. --since/--until name
    the site's accounting (sacct); with a public trace they are a usage error."""
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(ROOT / "etc" / "gpupool.yaml"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no sacct here: the accounting path says so
    assert main(["simulate", "--since", "1d", "--format", "json"]) == 69
    assert "slurm" in capsys.readouterr().err.lower()  # it asks Slurm, not the Philly trace
    assert main(["simulate", "--trace", "philly", "--since", "1d"]) == 2
    assert "--since is for --trace accounting" in capsys.readouterr().err


def test_accounting_replay_measures_utilisation_over_the_traces_window_not_from_midnight(tmp_path, monkeypatch, capsys):
    """#27: `simulate --from` counted utilisation from the first day's midnight, so a morning's
    runs at 28-74 % read 1.4-6.9 %.  Four whole A100s, submitted 10:00, 10:20, 10:40 and
    11:00 and each run 2 h at once: over the window (10:00-11:00) they hold 2 GPU-hours."""
    from slurm_gpupool.cli.main import main
    from tests.unit.test_reports import HEADER, row

    alloc = "gres/gpu:a100=1,gres/gpu=1"
    times = [("10:00:00", "12:00:00"), ("10:20:00", "12:20:00"), ("10:40:00", "12:40:00"), ("11:00:00", "13:00:00")]
    rows = [row(k + 1, "physics", "a100n1", "COMPLETED", s, s, e, "", alloc) for k, (s, e) in enumerate(times)]
    f = tmp_path / "sacct.txt"
    f.write_text("\n".join([HEADER, *rows]) + "\n")
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(ROOT / "etc" / "gpupool.yaml"))
    code = main(["simulate", "--from", str(f), "--tz", "UTC", "--policy", "static:night", "--format", "json"])
    assert code == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["window_h"] == pytest.approx(1.0)
    assert run["allocated_eq_h"] == pytest.approx(2.0)
    gpus = run["capacity_eq_h"] / run["window_h"]
    assert gpus >= 8 and run["utilisation"] == pytest.approx(2.0 / gpus)


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_accounting_jobs_keep_the_gres_they_held_on_every_releases_sacct(release):
    """Each release's recorded sacct (tests/fixtures/slurm/*/sacct-parsable2.txt): a 1g.5gb
    job and a two-shard job replay as exactly that in the day layout, not as the share the
    rules would map (#27: shard against MIG, and the shard type, were lost)."""
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.pool.submit_catalog import layout_offers
    from slurm_gpupool.reports.dataset import Source, build
    from slurm_gpupool.reports.sim_accounting import accounting_jobs
    from slurm_gpupool.simulate.mapping import PREFER_MIG, map_request

    cfg = load_config(ROOT / "etc" / "gpupool.yaml")
    sacct = ROOT / "tests" / "fixtures" / "slurm" / release / "sacct-parsable2.txt"
    data, _, _ = build(cfg, Source(files=(sacct,), tz="UTC"), None, None)
    _, jobs, _ = accounting_jobs(data)
    held = {j.request.gres for j in jobs}
    assert {"gpu:1g.5gb:1", "shard:v100_shared:2"} <= held
    day = layout_offers(cfg, "day")
    for j in jobs:
        if j.request.gres is not None:
            d = map_request(j.request, day, "day", cfg.slurm.type_naming, PREFER_MIG)
            assert d is not None and d.gres == j.request.gres, (j, d)
