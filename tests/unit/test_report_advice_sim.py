"""#16: ``report advice`` asks the simulator: candidate layouts and schedules from the site's
demand (placed by the planner), replays with uncertainty, and a recommendation only when it
beats the current policy in every scenario.

Synthetic accounting on two A30 nodes (8 GPUs) where the answer is known: many quarter-GPU
jobs on whole GPUs wait, and slices end the wait; a whole-GPU-heavy history gains nothing
from slices."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_gpupool.cli.main import cli
from slurm_gpupool.config.load import parse_config
from slurm_gpupool.core.mig.catalog import get_model
from slurm_gpupool.core.mig.planner import plan_gpu
from slurm_gpupool.reports.advice import advice
from slurm_gpupool.reports.dataset import Source, build
from slurm_gpupool.reports.output import human_s
from slurm_gpupool.simulate import advise as adv
from slurm_gpupool.simulate import candidates as cand
from slurm_gpupool.simulate.jobs import SimJob
from slurm_gpupool.simulate.mapping import TraceRequest

ROOT = Path(__file__).resolve().parents[2]
MONDAY = datetime(2026, 11, 16, tzinfo=UTC)
HEADER = "JobID|JobIDRaw|JobName|User|Account|Partition|NodeList|State|Submit|Start|End|TimelimitRaw|ReqTRES|AllocTRES"
PATHS = {"state_dir": "/tmp/x", "run_dir": "/tmp/x", "spool_dir": "/tmp/x", "controller_dir": "/nonexistent"}
WHOLE_ONLY = {  # every GPU whole, no schedule: the current policy is that layout all the time
    "version": 1,
    "nodesets": {"a30": {"nodes": "n[1-2]", "machine": "pcie-a30"}},
    "layouts": {"whole": {"a30": {"all": "whole"}}},
    "paths": PATHS,
}


def _line(jid: int, node: str, submit: datetime, run_s: float, alloc: str, limit_min: int) -> str:
    f = lambda t: t.isoformat(timespec="seconds")  # noqa: E731
    end = submit + timedelta(seconds=run_s)
    return f"{jid}|{jid}|j{jid}|u|acct|gpu|{node}|COMPLETED|{f(submit)}|{f(submit)}|{f(end)}|{limit_min}||{alloc}"


def history(days: int, small_per_day: int, whole_per_day: int, whole_gpus=(1,), seed: int = 1) -> str:
    """sacct --parsable2 from Monday: 1g.6gb jobs (a quarter of an A30) submitted 08-19 h,
    40-90 min, limit 2 h; whole-A30 jobs at any hour, 1-4 h, limit 5 h."""
    rnd = random.Random(seed)
    rows, jid = [HEADER], 0
    for d in range(days):
        day = MONDAY + timedelta(days=d)
        for _ in range(small_per_day):
            jid += 1
            t = day + timedelta(seconds=rnd.uniform(8 * 3600, 19 * 3600))
            rows.append(
                _line(jid, f"n{rnd.randint(1, 2)}", t, rnd.uniform(2400, 5400), "gres/gpu:1g.6gb=1,gres/gpu=1", 120)
            )
        for _ in range(whole_per_day):
            jid += 1
            g = rnd.choice(whole_gpus)
            t = day + timedelta(seconds=rnd.uniform(0, 86400))
            alloc = f"gres/gpu:a30={g},gres/gpu={g}"
            rows.append(_line(jid, f"n{rnd.randint(1, 2)}", t, rnd.uniform(3600, 4 * 3600), alloc, 300))
    return "\n".join(rows) + "\n"


def _config(tmp_path: Path, raw: dict) -> Path:
    p = tmp_path / "gpupool.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def _data(tmp_path: Path, raw: dict, text: str):
    f = tmp_path / "sacct.txt"
    f.write_text(text)
    cfg = parse_config(raw, str(tmp_path / "gpupool.yaml"), tmp_path)
    data, _, spool = build(cfg, Source(files=(f,), tz="UTC"), None, None)
    return cfg, data, spool


@pytest.fixture(scope="module")
def small_jobs(tmp_path_factory):
    """90 quarter-GPU jobs a weekday and 6 whole-GPU ones, on whole GPUs only."""
    tmp = tmp_path_factory.mktemp("small")
    cfg, data, spool = _data(tmp, WHOLE_ONLY, history(5, 90, 6))
    return cfg, advice(data, spool, simulate=adv.Settings())


@pytest.fixture(scope="module")
def whole_jobs(tmp_path_factory):
    """Whole-GPU jobs of 1, 2 and 4 GPUs keep the pool busy; two quarter-GPU jobs a day."""
    tmp = tmp_path_factory.mktemp("whole")
    cfg, data, spool = _data(tmp, WHOLE_ONLY, history(5, 2, 26, whole_gpus=(1, 1, 2, 4)))
    return cfg, advice(data, spool, simulate=adv.Settings())


# -- candidates ----------------------------------------------------------------------------


def _mixed_jobs(n: int = 400, seed: int = 3) -> list[SimJob]:
    """Fractions from a tenth to most of a GPU (with their memory), and whole-GPU jobs."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        t = rnd.uniform(0, 7 * 86400)
        if rnd.random() < 0.6:
            req = TraceRequest(1, rnd.choice((100, 140, 250, 280, 400, 500)), rnd.choice((0, 4000, 9000, 18000)))
        else:
            req = TraceRequest(rnd.choice((1, 2, 4)))
        out.append(SimJob(i + 1, t, rnd.uniform(600, 7200), 7200, req))
    return sorted(out, key=lambda j: j.submit_s)


def test_every_candidate_is_placed_by_the_planner_and_taken_by_the_config_parser():
    """On the shipped pool (A100, H100, A30 and V100 nodes): each MIG target is a valid
    combination for its GPU's model, a V100 is never given MIG, and every candidate's
    layouts and schedule parse as a config of their own."""
    raw = yaml.safe_load((ROOT / "etc" / "gpupool.yaml").read_text())
    raw.pop("mig_parted")
    raw["schedule"]["timezone"] = "UTC"
    cfg = parse_config(raw, str(ROOT / "etc" / "gpupool.yaml"), ROOT / "etc")
    cands, _ = cand.candidates(cfg, _mixed_jobs(), MONDAY)
    assert 3 <= len(cands) <= cand.MAX_CANDIDATES
    assert len({c.name for c in cands}) == len(cands)
    mig_targets = 0
    for c in cands:
        for layout in c.layouts.values():
            for ns, entry in layout.items():
                machine = cfg.nodesets[ns].machine
                for sel, target in entry.items():
                    if isinstance(target, dict) and "mig" in target:
                        idx = range(len(machine.gpus)) if sel == "all" else [int(sel.split("-")[0].split(",")[0])]
                        model = get_model(machine.gpus[idx[0]].model)
                        assert model.mig is not None, (c.name, ns)
                        assert plan_gpu(model, target["mig"]).instances  # placed, or InfeasibleError
                        mig_targets += 1
        policy = adv.candidate_policy(cfg, c)  # with_layouts + the candidate's schedule
        assert policy.cfg.schedule is not None and policy.cfg.schedule.default == c.schedule["default"]
        assert (not c.schedule["rules"]) == c.static
    assert mig_targets > 0
    assert any(c.schedule["rules"] for c in cands) and any(c.static for c in cands)  # day windows and statics
    assert cands[-1].name == "static: every GPU whole"


def test_an_infeasible_candidate_is_refused_by_the_config_parser():
    from slurm_gpupool.errors import ConfigError, InfeasibleError

    cfg = parse_config(WHOLE_ONLY, "t.yaml")
    bad = cand.Candidate(
        "bad",
        "",
        {"advised": {"a30": {"all": {"mig": {"2g.12gb": 2, "1g.6gb": 1}}}}},  # 5 of 4 compute slices
        {"timezone": "UTC", "default": "advised", "rules": []},
    )
    with pytest.raises((ConfigError, InfeasibleError)):
        adv.candidate_policy(cfg, bad)


@pytest.mark.parametrize(
    ("model", "requests", "mix"),
    [
        ("A100-SXM4-40GB", [TraceRequest(1, 100)] * 10, {"1g.5gb": 7}),  # tenths: seven 1g
        ("A100-SXM4-40GB", [TraceRequest(1, 400)] * 10, {"3g.20gb": 2}),  # 0.4 GPU: 3g (3/7)
        ("A100-SXM4-40GB", [TraceRequest(1, 250)] * 10, {"2g.10gb": 3, "1g.5gb": 1}),  # a quarter: 2g
        ("A30", [TraceRequest(1, 200)] * 10, {"1g.6gb": 4}),
        ("H100-SXM5-80GB", [TraceRequest(1, 100, 20000)] * 10, {"2g.20gb": 3, "1g.10gb": 1}),  # memory: 2g.20gb
    ],
)
def test_the_mix_follows_the_demand_s_profiles(model, requests, mix):
    m = get_model(model)
    jobs = [SimJob(i, 3600.0 * i, 3600.0, 3600.0, r) for i, r in enumerate(requests)]
    d = cand.demand(jobs, MONDAY, UTC)
    best = cand.best_mixes(m, cand.profile_need(m, d, cand.ALL_HOURS))[0]
    assert best == mix
    assert dict(best) in [dict(x) for x in cand.maximal_mixes(model)]


def test_a_request_needing_most_of_a_gpu_is_whole_demand():
    a100 = get_model("A100-SXM4-40GB")
    assert cand.profile_for(a100, TraceRequest(1, 600)) is None  # more than 4g (4/7): the 7g, i.e. whole
    assert cand.profile_for(a100, TraceRequest(1, 100, 30000)) is None  # 30 GB: only the 7g.40gb holds it
    assert cand.profile_for(a100, TraceRequest(1, 142, 4864)) == "1g.5gb"  # a 1g.5gb job from accounting
    assert all("7g.40gb" not in dict(m) for m in cand.maximal_mixes(a100.key))


def test_the_fitted_window_covers_the_hours_small_jobs_run():
    """Quarter-GPU jobs run 10:00-16:00, whole-GPU jobs around the clock: the window is
    those hours (give or take the hour the load ramps in); a flat mix has no window."""
    jobs = []
    for day in range(5):
        for k in range(45):  # submitted 10:00-15:30, half an hour each
            jobs.append(SimJob(len(jobs), day * 86400 + 10 * 3600 + k * 450, 1800, 3600, TraceRequest(1, 250)))
        for k in range(24):
            jobs.append(SimJob(len(jobs), day * 86400 + k * 3600, 3600, 7200, TraceRequest(1)))
    jobs.sort(key=lambda j: j.submit_s)
    d = cand.demand(jobs, MONDAY, UTC)
    w = cand.fitted_window(d, get_model("A30"), "mon-fri")
    assert w is not None and w.days == "mon-fri"
    assert w.start_h == 10 and w.end_h in (16, 17), w
    flat = [SimJob(i, i * 1800, 1800, 3600, TraceRequest(1, 250 if i % 2 else 1000)) for i in range(48 * 5)]
    assert cand.fitted_window(cand.demand(flat, MONDAY, UTC), get_model("A30"), "daily") is None


def test_a_config_day_window_is_read_from_its_schedule():
    raw = yaml.safe_load((ROOT / "etc" / "gpupool.yaml").read_text())
    raw.pop("mig_parted")
    cfg = parse_config(raw, str(ROOT / "etc" / "gpupool.yaml"), ROOT / "etc")
    w, layout = cand.config_window(cfg)
    assert (w.start_h, w.end_h, w.days, layout) == (8, 20, "mon-fri", "day")
    assert w.hours == tuple(range(8, 20))
    assert cand.Window(22, 6, "daily").hours == (22, 23, 0, 1, 2, 3, 4, 5)
    assert cand.selector([0, 1, 2, 5, 7], 8) == "0-2,5,7" and cand.selector(range(4), 4) == "all"


def test_resampling_by_day_keeps_times_of_day_and_the_kind_of_day():
    """Two weeks, each job tagged with its day's kind: every resampled job keeps its time of
    day, weekend slots get weekend jobs, and a seed gives the same draw."""
    jobs = []
    for day in range(14):
        kind = "weekend" if (MONDAY + timedelta(days=day)).weekday() >= 5 else "weekday"
        for k in range(5 if kind == "weekday" else 1):
            jobs.append(SimJob(len(jobs) + 1, day * 86400 + 3600 * (8 + k) + day, 600, 900, TraceRequest(1), kind))
    a = adv.resample_by_day(jobs, MONDAY, seed=1)
    assert a == adv.resample_by_day(jobs, MONDAY, seed=1) and a != adv.resample_by_day(jobs, MONDAY, seed=2)
    for j in a:
        slot = int(j.submit_s // 86400)
        weekend = (MONDAY + timedelta(days=slot)).weekday() >= 5
        assert j.account == ("weekend" if weekend else "weekday")
        assert (j.submit_s % 86400) in {(j2.submit_s % 86400) for j2 in jobs if j2.account == j.account}
    assert [j.job_id for j in a] == list(range(1, len(a) + 1))
    assert len(a) == 10 * 5 + 4 * 1  # each slot takes a whole day of its kind


# -- the recommendation --------------------------------------------------------------------


def test_small_jobs_waiting_on_whole_gpus_get_mig_slices_and_a_lower_p90_wait(small_jobs):
    cfg, report = small_jobs
    sim = report.meta["simulation"]
    rec = sim["recommendation"]
    assert rec is not None, report.text
    cur = sim["current"]
    assert cur["name"] == "current: whole all the time"
    # quarter-GPU jobs get 1g.6gb slices on some GPUs of every node
    entry = rec["layouts"]["advised"]["a30"]
    slices = [t["mig"] for t in entry.values() if isinstance(t, dict) and "mig" in t]
    assert slices and all(m == {"1g.6gb": 4} for m in slices)
    # the gain: lower p90 wait at the point and in every scenario, paired with the current policy
    assert rec["point"]["p90_wait_s"] < cur["point"]["p90_wait_s"] - 3600
    row = next(c for c in sim["candidates"] if c["name"] == rec["name"])
    assert row["beats_current_everywhere"] is True and row["gain_at_point"] == "wait"
    assert rec["point"]["not_started"] == 0
    assert "recommended by the simulator" in report.text and f": {rec['name']}" in report.text
    assert "p90 wait 2h 35m -> 0 s (range 0 s-0 s over slowdown 1-2 and 3 resamples)" in report.text
    # with the simulator's measured error beside it, and the margin it imposed (#27)
    assert "the simulator's measured error against Slurm on" in report.text
    assert sim["accuracy"]["runs"] and sim["margins"]["p90_wait"] >= sim["accuracy"]["wait_rel"]["p90"]
    # the YAML to paste: the config with it parses, and runs the recommended layout by default
    pasted = yaml.safe_load(report.text[report.text.index("layouts:") :])
    raw = {**WHOLE_ONLY, "layouts": {**WHOLE_ONLY["layouts"], **pasted["layouts"]}, "schedule": pasted["schedule"]}
    new = parse_config(raw, "pasted.yaml")
    assert new.schedule is not None and new.schedule.default == "advised"


def test_a_whole_gpu_heavy_history_gets_no_change(whole_jobs):
    _, report = whole_jobs
    sim = report.meta["simulation"]
    assert sim["recommendation"] is None
    assert sim["candidates"], "slices were tried"
    cur = sim["current"]["point"]
    for c in sim["candidates"]:
        assert c["beats_current_everywhere"] in (None, False)
        assert c["point"]["p90_wait_s"] >= cur["p90_wait_s"]  # slices only take GPUs from whole jobs
    assert "no change recommended" in report.text and "layouts:" not in report.text
    assert "a gain had to clear 16.7 % of the p90 wait or 4.1 points of utilisation" in report.text
    assert "with the mean wait no more than 15.5 % longer" in report.text  # the shipped error on the mean
    best = sim["candidates"][0]["point"]
    assert f"mean wait {human_s(cur['mean_wait_s'])} -> {human_s(best['mean_wait_s'])}" in report.text
    assert all(c["name"] != "static: every GPU whole" for c in sim["candidates"])  # that is the current policy


def test_the_uncertainty_range_brackets_the_point_estimate(small_jobs, whole_jobs):
    checked = 0
    for _, report in (small_jobs, whole_jobs):
        sim = report.meta["simulation"]
        assert len(sim["scenarios"]) == 4 * 2  # the jobs and 3 resamples, at slowdown 1 and 2
        for r in [sim["current"], *sim["candidates"]]:
            if r.get("range") is None:
                continue
            for m in adv.METRICS:
                lo, hi = r["range"][m]
                assert lo <= r["point"][m] <= hi, (r["name"], m)
                checked += 1
    assert checked >= 2 * len(adv.METRICS)
    cur = small_jobs[1].meta["simulation"]["current"]["range"]["p90_wait_s"]
    assert cur[0] < cur[1]  # the resamples do move the p90 wait


def test_the_slowdown_changes_only_policies_with_time_shared_gpus(tmp_path):
    """The whole-GPU current policy is replayed once per job set; a time-sliced candidate
    at each slowdown, its jobs running longer at 2 than at 1."""
    cfg, data, _ = _data(tmp_path, WHOLE_ONLY, history(3, 90, 6))
    from slurm_gpupool.reports.sim_accounting import accounting_jobs

    epoch, jobs, _ = accounting_jobs(data)
    shared = next(c for c in cand.candidates(cfg, jobs, epoch)[0] if "time-sliced" in c.name)
    s = adv.Settings(resamples=0)
    run = adv._Run(epoch, [jobs], ["n1", "n2"], 8, 10 * 86400, s, 18000)
    cur, p = adv.current_policy(cfg), adv.candidate_policy(cfg, shared)
    a, b = run.metrics(cur, 0, 1.0), run.metrics(cur, 0, 2.0)
    assert a is b and run.replays == 1
    one, two = run.metrics(p, 0, 1.0), run.metrics(p, 0, 2.0)
    assert run.replays == 3 and one["held"] < two["held"]  # shards held twice as long


def test_json_output_shape_and_html(tmp_path):
    cfg = _config(tmp_path, WHOLE_ONLY)
    f = tmp_path / "sacct.txt"
    f.write_text(history(5, 90, 6))
    env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(cfg)}
    args = ["report", "advice", "--from", str(f), "--tz", "UTC"]
    res = CliRunner().invoke(cli, [*args, "--format", "json"], env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output

    def no_nan(x):
        raise AssertionError(f"not strict JSON: {x}")

    doc = json.loads(res.output, parse_constant=no_nan)
    r = doc["reports"][0]
    assert r["report"] == "advice" and set(r["tables"]) == {"advice", "simulated policies"}
    sim = r["simulation"]
    assert set(sim) >= {"jobs", "gpus", "point", "scenarios", "current", "candidates", "recommendation"}
    assert sim["jobs"] == 5 * 96 and sim["gpus"] == 8
    rows = r["tables"]["simulated policies"]
    assert len(rows) == 1 + len(sim["candidates"]) and rows[0]["verdict"] == "the policy now"
    assert set(rows[0]) >= {"policy", "p90_wait_s", "p90_low_s", "p90_high_s", "utilisation_pct", "held_pct"}
    for c in sim["candidates"]:
        assert set(c) >= {"name", "why", "layouts", "schedule", "point", "range", "verdict"}
        assert set(c["point"]) == set(adv.METRICS)
    rec = sim["recommendation"]
    assert set(rec) >= {"name", "point", "range", "current_point", "current_range", "layouts", "schedule"}
    assert "schedule:" in r["text"] and "advised" in r["text"]
    html = tmp_path / "a.html"
    res = CliRunner().invoke(cli, [*args, "--format", "html", "-o", str(html)], env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    page = html.read_text()
    assert '<pre class="text">' in page and "paste into the pool config" in page and "simulated policies" in page


def test_no_simulate_and_too_few_jobs_skip_the_replay(tmp_path, monkeypatch, capsys):
    from slurm_gpupool.cli.main import main

    cfg = _config(tmp_path, WHOLE_ONLY)
    f = tmp_path / "sacct.txt"
    env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(cfg)}
    f.write_text(history(5, 90, 6))
    args = ["report", "advice", "--from", str(f), "--tz", "UTC", "--format", "json"]
    r = json.loads(CliRunner().invoke(cli, [*args, "--no-simulate"], env=env, catch_exceptions=False).output)
    rep = r["reports"][0]
    assert set(rep["tables"]) == {"advice"} and "simulation" not in rep and "text" not in rep
    f.write_text(history(1, 20, 5))
    r = json.loads(CliRunner().invoke(cli, args, env=env, catch_exceptions=False).output)
    rep = r["reports"][0]
    assert set(rep["tables"]) == {"advice"} and rep["simulation"] is None
    assert any(n.startswith("simulation skipped: 25 finished GPU jobs") and "at least 50" in n for n in rep["notes"])
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(cfg))
    assert main([*args, "--slowdown", "0.5,2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpupool: --slowdown 0.5,2: ") and "at least 1" in err
    assert main([*args, "--slurm-release", "sid"]) == 2
    assert capsys.readouterr().err.startswith("gpupool: --slurm-release sid: expected a release")


def test_forked_workers_give_the_same_advice_as_one_process(tmp_path):
    from slurm_gpupool.reports.advice import process_map
    from slurm_gpupool.reports.sim_accounting import accounting_jobs

    cfg, data, _ = _data(tmp_path, WHOLE_ONLY, history(3, 90, 6))
    epoch, jobs, _ = accounting_jobs(data)
    s = adv.Settings(resamples=1)
    one = adv.advise(cfg, epoch, jobs, s)
    two = adv.advise(cfg, epoch, jobs, s, parallel=process_map(2))
    assert one == two and one["replays"] == two["replays"] > 4
    assert adv._STATE is None  # nothing left behind for the next call


def test_an_elastic_config_is_replayed_as_its_elastic_policy(tmp_path):
    """In elastic mode the current policy is the demand-driven one (#17): it switches a node
    to slices for the waiting quarter-GPU jobs, so every GPU whole waits longer than it."""
    raw = {
        **WHOLE_ONLY,
        "layouts": {
            "day": {"a30": {"0-1": {"mig": {"1g.6gb": 4}}, "2-3": "whole"}},
            "night": {"a30": {"all": "whole"}},
        },
        "schedule": {
            "timezone": "UTC",
            "default": "night",
            "rules": [],
            "mode": "elastic",
            "elastic": {"max_changing": 1, "window": "5m", "cooldown": "1h", "min_gain": 1},
        },
    }
    cfg, data, spool = _data(tmp_path, raw, history(3, 90, 6))
    sim = advice(data, spool, simulate=adv.Settings(resamples=1)).meta["simulation"]
    cur = sim["current"]
    assert cur["name"] == "current: the config's elastic schedule" and cur["point"]["switches"] >= 1
    whole = next(c for c in sim["candidates"] if c["name"] == "static: every GPU whole")
    assert whole["point"]["p90_wait_s"] > cur["point"]["p90_wait_s"] + 3600
    assert sim["recommendation"] is None or sim["recommendation"]["name"] != whole["name"]


def engine_params(monkeypatch) -> list:
    """The Params of every replay advice runs from now on (in this process)."""
    seen: list = []
    real_engine = adv.Engine

    def engine(pool, sw, params):
        seen.append(params)
        return real_engine(pool, sw, params)

    monkeypatch.setattr(adv, "Engine", engine)
    return seen


def test_advice_replays_as_simulate_does_the_tiers_queue_and_the_grid_from_the_first_job(tmp_path, monkeypatch):
    """``report advice`` replayed with every QOS at priority 0 and its backfill grid from the
    accounting's midnight, where ``gpupool simulate`` (whose measured error it prints) takes
    the tiers' QOS priorities and starts the grid at the first submission (the engine's
    default, ``test_simulate_cadence``)."""
    raw = {**WHOLE_ONLY, "tiers": {"urgent": {"priority": 500}}}
    cfg, data, _ = _data(tmp_path, raw, history(2, 20, 4))
    from slurm_gpupool.reports.sim_accounting import accounting_jobs

    epoch, jobs, _ = accounting_jobs(data)
    seen = engine_params(monkeypatch)
    run = adv._Run(epoch, [jobs], ["n1", "n2"], 8, 10 * 86400, adv.Settings(resamples=0), 18000)
    run.metrics(adv.current_policy(cfg), 0, 1.0)
    (params,) = seen
    assert params.qos_priority == (("gpupool_urgent", 500),)
    assert params.bf_grid_from_s is None and min(j.submit_s for j in jobs) > 0
    assert params.clock_origin_s == epoch.timestamp()
    assert (params.will_run, params.bf_end_up, params.bf_overdue_now) == ("batch", False, False)  # 22.05's
    # --slurm-release: that release's backfill, as `gpupool simulate --slurm-release` replays it
    run = adv._Run(epoch, [jobs], ["n1", "n2"], 8, 10 * 86400, adv.Settings(resamples=0, slurm_release="26.05"), 18000)
    run.metrics(adv.current_policy(cfg), 0, 1.0)
    assert (seen[-1].will_run, seen[-1].bf_end_up, seen[-1].bf_overdue_now) == ("batch-nodes", True, True)


def test_advice_follows_the_sites_priority_setup_and_names_what_it_does_not_replay(tmp_path, monkeypatch):
    """``report advice --slurm-config``: the replays take the site's QOS weight (0 under
    priority/basic, which orders by submission alone) and age factor, and a factor it weighs
    that they leave out (fair-share, ...) is a note beside the advice, as ``gpupool simulate``
    says it."""
    raw = {**WHOLE_ONLY, "tiers": {"urgent": {"priority": 500}}}
    cfg = _config(tmp_path, raw)
    f = tmp_path / "sacct.txt"
    f.write_text(history(5, 90, 6))
    seen = engine_params(monkeypatch)
    env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(cfg)}
    args = [
        "report",
        "advice",
        "--from",
        str(f),
        "--tz",
        "UTC",
        "--format",
        "json",
        "--resamples",
        "0",
        "--workers",
        "1",
    ]
    conf = tmp_path / "slurm.conf"
    age = "PriorityWeightAge=1000\nPriorityMaxAge=1-0\n"
    for text, weight, note in (
        ("PriorityType=priority/basic\nPriorityWeightQOS=10000\n" + age, 0, None),
        ("PriorityType=priority/multifactor\nPriorityWeightQOS=2000\n" + age, 2000, None),
        ("PriorityType=priority/multifactor\nPriorityWeightQOS=2000\nPriorityWeightFairshare=5\n", 2000, "fair-share"),
    ):
        conf.write_text(text)
        seen.clear()
        res = CliRunner().invoke(cli, [*args, "--slurm-config", str(conf)], env=env, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert seen and {p.priority_weight_qos for p in seen} == {weight}
        aged = "Age=1000" in text and weight > 0  # (basic weighs no factor)
        assert {p.priority_weight_age for p in seen} == {1000 if aged else 0}
        assert not aged or {p.priority_max_age_s for p in seen} == {86400.0}
        notes = json.loads(res.output)["reports"][0]["notes"]
        said = [n for n in notes if "also ordered by" in n]
        assert (said == []) if note is None else ("fair-share (PriorityWeightFairshare=5)" in said[0]), notes


def test_advice_replays_the_fair_share_factor_from_the_shares_given(tmp_path, monkeypatch, capsys):
    """``report advice --fairshare-from`` (``sshare -a -l -P`` at the window's start), as
    ``gpupool simulate`` takes it: with the site's PriorityWeightFairshare, the replays rank
    the associations as Fair Tree does and the factor is no longer named as left out; given
    where the site weighs none, a note says the shares change nothing; an unreadable file is
    a usage error naming the option."""
    cfg = _config(tmp_path, WHOLE_ONLY)
    f = tmp_path / "sacct.txt"
    f.write_text(history(5, 90, 6))
    shares = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "22.05" / "simulate-fairshare-s82-sshare.txt"
    seen = engine_params(monkeypatch)
    env = {**os.environ, "SLURM_GPUPOOL_CONFIG": str(cfg)}
    args = ["report", "advice", "--from", str(f), "--tz", "UTC", "--format", "json", "--resamples", "0"]
    args += ["--workers", "1"]
    conf = tmp_path / "slurm.conf"
    weighed = "PriorityType=priority/multifactor\nPriorityWeightFairshare=5000\nPriorityDecayHalfLife=14-0\n"

    def advice(text: str, *more: str) -> list[str]:
        conf.write_text(text)
        seen.clear()
        res = CliRunner().invoke(cli, [*args, "--slurm-config", str(conf), *more], env=env, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return json.loads(res.output)["reports"][0]["notes"]

    notes = advice(weighed, "--fairshare-from", str(shares))
    assert seen and {p.priority_weight_fairshare for p in seen} == {5000}
    assert {p.priority_decay_half_life_s for p in seen} == {14 * 86400.0}
    users = {u for _, u, _ in seen[0].fairshare_users}
    assert {"gpupool-alice", "gpupool-bob", "gpupool-carol"} <= users
    assert not [n for n in notes if "fair-share" in n and "also ordered by" in n], notes
    assert any("Fair Tree" in n for n in notes), notes
    notes = advice(weighed)  # no shares: the factor is left out, and said so
    assert {p.priority_weight_fairshare for p in seen} == {0}
    assert any("also ordered by" in n and "fair-share" in n for n in notes), notes
    notes = advice("PriorityType=priority/multifactor\nPriorityWeightQOS=10\n", "--fairshare-from", str(shares))
    assert {p.priority_weight_fairshare for p in seen} == {0}
    assert any("--fairshare-from is not weighed: " in n for n in notes), notes
    conf.write_text(weighed)
    missing = tmp_path / "none.txt"
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(cfg))
    capsys.readouterr()
    assert main([*args, "--slurm-config", str(conf), "--fairshare-from", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--fairshare-from {missing}: cannot read" in err and "Traceback" not in err
