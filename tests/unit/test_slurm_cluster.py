"""Parsers of the controller-side Slurm commands, on output recorded from each release.

``tests/fixtures/record_slurm.py`` records one scenario on a sandbox of each
supported release (``tests/fixtures/slurm/<series>/``, with ``scenario.json``
naming the jobs), so every parser is held to the same facts on every release.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gpupool.core.policy.durations import format_duration, parse_duration_s, parse_slurm_time_s
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.cluster import SlurmCluster
from slurm_gpupool.slurm.parse import (
    parse_one_line,
    parse_reservations,
    parse_sinfo_json,
    parse_squeue_json,
    parse_will_run,
)
from slurm_gpupool.slurm.runner import Result, SlurmRunner
from slurm_gpupool.slurm.types import gres_counts
from slurm_gpupool.slurm.versions import preempt_user_signal_setting, requeues_again_after_grace_preemption

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SERIES = ("22.05", "24.11", "26.05")


def recorded(series: str, name: str) -> str:
    return (FIXTURES / series / name).read_text()


def scenario(series: str) -> dict[str, int]:
    return json.loads(recorded(series, "scenario.json"))["jobs"]


def test_every_supported_release_is_recorded():
    from slurm_gpupool.sandbox.versions import RELEASES

    assert tuple(r.series for r in RELEASES) == SERIES
    for series in SERIES:
        assert json.loads(recorded(series, "scenario.json"))["version"].startswith(series + ".")


@pytest.mark.parametrize("series", SERIES)
def test_sinfo_json_nodes_layouts_and_drain(series):
    nodes = parse_sinfo_json(recorded(series, "sinfo.json"))
    assert sorted(nodes) == ["a100n1", "a100n2", "a30n1", "h100n1", "v100n1"]
    a30 = nodes["a30n1"]
    assert a30.drained and a30.reason == "gpupool: switching to layout day" and a30.usable and a30.responding
    assert a30.layout == "day" and a30.gres_counts() == {"gpu:1g.6gb": 8, "gpu:a30_shared": 2, "shard": 8}
    assert nodes["a100n1"].state in ("mixed", "allocated") and not nodes["a100n1"].drained
    assert nodes["a100n1"].gres_counts() == {"gpu:1g.5gb": 32, "gpu:3g.20gb": 2, "gpu:2g.10gb": 2, "gpu:a100": 2}
    assert nodes["h100n1"].state == "idle" and nodes["h100n1"].flags == frozenset()
    assert "nvswitch" in nodes["h100n1"].features and "layout_day" in nodes["h100n1"].features


@pytest.mark.parametrize("series", SERIES)
def test_squeue_json_jobs(series):
    ids = scenario(series)
    jobs = {j.job_id: j for j in parse_squeue_json(recorded(series, "squeue.json"))}
    running = jobs[ids["running"]]
    assert running.state == "RUNNING" and running.nodes == {"a100n1"} and running.time_limit_s == 600
    assert running.requeue and running.user == "root" and running.start_time > 1.7e9
    other = jobs[ids["norequeue"]]
    assert not other.requeue and other.name == "name with space" and other.nodes == {"a100n2"}
    assert jobs[ids["pending"]].state == "PENDING" and jobs[ids["pending"]].nodes == frozenset()
    assert jobs[ids["pending"]].start_time == 0
    held = jobs[ids["pending"]]  # --hold: priority 0, reason JobHeldUser, on every release
    assert held.priority == 0 and held.state_reason == "JobHeldUser"
    assert running.priority and running.priority > 0 and running.state_reason == "None"


@pytest.mark.parametrize("series", SERIES)
def test_reservation_and_partition_lines(series):
    (r,) = parse_reservations(recorded(series, "reservations.txt")).values()
    assert r.name == "gpupool_night" and r.nodes == {"a100n1", "a100n2"} and {"MAINT", "IGNORE_JOBS"} <= r.flags
    assert (r.end - r.start).total_seconds() == 3600
    cluster = SlurmCluster(
        Replay({"scontrol -o show": recorded(series, "partitions.txt"), "scontrol ping": recorded(series, "ping.txt")})
    )
    assert cluster.partition_max_time_s(None) == 86400 and cluster.partition_max_time_s("gpu") == 86400
    assert cluster.ping()


def test_one_line_fields():
    assert parse_reservations("No reservations in the system\n") == {}
    f = parse_one_line("NodeName=x Reason=gpupool: switching to layout day [root@2026-11-22T01:03:05] State=IDLE")
    assert f["Reason"] == "gpupool: switching to layout day [root@2026-11-22T01:03:05]" and f["State"] == "IDLE"


@pytest.mark.parametrize(
    "text",
    [
        '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.99"}, "slurm": {"release": "99.11.0"}}, "partitions": []}',
        '{"nodes": []}',
        '{"sinfo": [{"nodes": {"total": 0}}]}',
        "[]",
        "not json",
    ],
)
def test_sinfo_json_that_names_no_node_is_an_error_never_an_empty_cluster(text):
    with pytest.raises(SlurmUnavailableError) as err:
        parse_sinfo_json(text)
    assert err.value.exit_code == 69 and "sinfo --json" in err.value.what


def test_unknown_layout_errors_name_the_data_parser_and_release():
    doc = '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.99"}, "slurm": {"release": "99.11.0"}}}'
    with pytest.raises(SlurmUnavailableError, match=r"v0\.0\.99, Slurm 99\.11\.0"):
        parse_squeue_json(doc)
    with pytest.raises(SlurmUnavailableError, match=r"v0\.0\.99"):
        parse_sinfo_json(doc)


@pytest.mark.parametrize("series", SERIES)
@pytest.mark.parametrize("other", SERIES)
def test_each_parser_reads_every_release_or_says_why(series, other):
    """A parser fed another command's output (another release's, or another kind) errors."""
    with pytest.raises(SlurmUnavailableError):
        parse_sinfo_json(recorded(other, "squeue.json"))
    with pytest.raises(SlurmUnavailableError):
        parse_squeue_json(recorded(other, "sinfo.json"))
    assert (
        parse_sinfo_json(recorded(series, "sinfo.json")).keys()
        == parse_sinfo_json(recorded(other, "sinfo.json")).keys()
    )


class Replay:
    """Answers Slurm commands with recorded output."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.calls = answers, []

    def run(self, argv, timeout_s=None, input_text=None):
        self.calls.append(list(argv))
        key = " ".join(argv[:3])
        if key not in self.answers:
            return Result(tuple(argv), 1, "", f"no recording for {key}")
        return Result(tuple(argv), 0, self.answers[key], "")


def test_gres_counts_and_durations():
    assert gres_counts("gpu:1g.5gb:28(S:0-1),gpu:a100:2(S:0-1),shard:v100_shared:16") == {
        "gpu:1g.5gb": 28,
        "gpu:a100": 2,
        "shard": 16,
    }
    # slurmd's per-type shards (zeros included) equal the node line's plain shard count
    shown = "gpu:1g.6gb:8(S:0),gpu:a30_shared:2(S:1),shard:1g.6gb:0(S:0),shard:a30_shared:8(S:1)"
    assert gres_counts(shown) == gres_counts("gpu:1g.6gb:8,gpu:a30_shared:2,shard:8")
    assert gres_counts("(null)") == {}
    assert parse_duration_s("1h30m") == 5400 and parse_duration_s("90s") == 90 and parse_duration_s(45) == 45
    assert parse_duration_s("2d") == 172800 and parse_duration_s("0.5h") == 1800
    for bad in ("", "x", "5 parsecs", "1h x", "-3"):
        with pytest.raises(ValueError):
            parse_duration_s(bad)
    assert format_duration(5400) == "1h30m" and format_duration(42) == "42s" and format_duration(90061) == "1d1h1m"
    assert parse_slurm_time_s("1-00:00:00") == 86400 and parse_slurm_time_s("UNLIMITED") is None
    assert parse_slurm_time_s("30") == 1800 and parse_slurm_time_s("1:30:00") == 5400


class Jobs(Replay):
    """squeue answers from a list that the test changes over time."""

    def __init__(self, version: str, answers: list[str]) -> None:
        super().__init__({"slurmd -V": version, "scontrol show config": "MinJobAge               = 2 sec\n"})
        self.env: dict[str, str] = {"SLURM_CONF": "/nonexistent/slurm.conf"}
        self.squeue = answers

    def run(self, argv, timeout_s=None, input_text=None):
        if argv[0] == "squeue":
            self.calls.append(list(argv))
            return Result(tuple(argv), 0, self.squeue.pop(0) if len(self.squeue) > 1 else self.squeue[0], "")
        return super().run(argv, timeout_s, input_text)


def _squeue(*jobs: tuple[int, str, str, str]) -> str:
    return json.dumps(
        {"jobs": [{"job_id": i, "job_state": [st], "nodes": n, "tres_per_node": g} for i, st, n, g in jobs]}
    )


def test_a_restart_on_24_11_waits_until_finished_shard_jobs_of_changed_nodes_are_forgotten():
    finished_shard = (7, "COMPLETED", "v100n1", "gres/shard:2")
    other = [(8, "COMPLETED", "a100n1", "gres/gpu:a100:1"), (9, "RUNNING", "h100n1", "gres/shard:1")]
    said: list[str] = []
    cluster = SlurmCluster(Jobs("slurm-wlm 24.11.5\n", [_squeue(finished_shard, *other)] * 3 + [_squeue(*other)]))
    assert cluster.await_forgotten_shard_jobs(["v100n1", "a30n1"], said.append, poll_s=0) == []
    assert sum(c[0] == "squeue" for c in cluster.runner.calls) == 4 and "7" in said[0] and "MinJobAge" in said[0]
    # jobs on other nodes, unfinished ones and GPU jobs do not count
    quiet = SlurmCluster(Jobs("slurm-wlm 24.11.5\n", [_squeue(*other)]))
    assert quiet.await_forgotten_shard_jobs(["a100n1", "h100n1"], said.append, poll_s=0) == [] and len(said) == 1
    # releases that do not crash never wait
    for version in ("slurm-wlm 22.05.8\n", "slurm-wlm 26.05.5\n"):
        safe = SlurmCluster(Jobs(version, [_squeue(finished_shard)]))
        assert safe.await_forgotten_shard_jobs(["v100n1"], said.append, poll_s=0) == []
        assert not any(c[0] == "squeue" for c in safe.runner.calls)


def test_a_restart_goes_ahead_after_min_job_age_with_a_warning(monkeypatch):
    import slurm_gpupool.slurm.cluster as cl

    clock = iter(range(0, 10_000, 50))
    monkeypatch.setattr(cl.time, "monotonic", lambda: next(clock))
    said: list[str] = []
    stuck = SlurmCluster(Jobs("slurm-wlm 24.11.5\n", [_squeue((7, "CANCELLED", "v100n1", "gres/shard:1"))]))
    assert stuck.await_forgotten_shard_jobs(["v100n1"], said.append, poll_s=0) == [7]
    assert "up to 122 s" in said[0] and said[-1].startswith("warning:")


def test_a_query_is_asked_again_when_slurmctld_drops_the_connection(monkeypatch):
    """CI on 24.11: one `sinfo --json` answered "slurm_load_partitions: Connection reset by
    peer" mid-switch and the repartitioner failed that node.  Queries retry such drops;
    a refusal or a real error is reported at once."""
    from slurm_gpupool.slurm import cluster as mod

    monkeypatch.setattr(mod.time, "sleep", lambda s: None)

    class Flaky(SlurmRunner):
        def __init__(self, answers: list[Result]) -> None:
            super().__init__(env={})
            self.answers, self.calls = answers, 0

        def run(self, argv, timeout_s=None, input_text=None):
            self.calls += 1
            return self.answers.pop(0)

    reset = Result(("sinfo",), 1, "", "slurm_load_partitions: Connection reset by peer\n")
    ok = Result(("sinfo",), 0, recorded("22.05", "sinfo.json"), "")
    flaky = Flaky([reset, ok])
    assert "a100n1" in SlurmCluster(flaky).nodes() and flaky.calls == 2
    always = Flaky([reset] * 3)
    with pytest.raises(SlurmUnavailableError, match="Connection reset"):
        SlurmCluster(always).nodes()
    assert always.calls == 3
    down = Flaky([Result(("sinfo",), 1, "", "slurm_load_partitions: Unable to contact slurm controller\n")])
    with pytest.raises(SlurmUnavailableError):
        SlurmCluster(down).nodes()
    assert down.calls == 1


def test_the_preemption_user_signal_setting_follows_each_releases_slurm_conf_man_page():
    assert preempt_user_signal_setting((22, 5, 8)) == "SlurmctldParameters=preempt_send_user_signal"
    assert preempt_user_signal_setting((24, 11, 5)) == "PreemptParameters=send_user_signal"
    assert preempt_user_signal_setting((26, 5, 5)) == "PreemptParameters=send_user_signal"


def test_only_24_11_requeues_a_grace_preempted_job_twice():
    assert [requeues_again_after_grace_preemption(v) for v in ((22, 5, 8), (24, 11, 5), (26, 5, 5))] == [
        False,
        True,
        False,
    ]


@pytest.mark.parametrize("series", SERIES)
def test_sinfo_json_names_each_nodes_partitions(series):
    nodes = parse_sinfo_json(recorded(series, "sinfo.json"))
    assert {n.partitions for n in nodes.values()} == {("gpu",)}


def test_a_node_listed_for_two_partitions_is_in_both():
    """v0.0.40 and later list a node once per partition (sinfo groups)."""
    doc = json.loads(recorded("24.11", "sinfo.json"))
    extra = json.loads(json.dumps(doc["sinfo"][0]))
    extra["partition"]["name"] = "debug"
    doc["sinfo"].append(extra)
    nodes = parse_sinfo_json(json.dumps(doc))
    name = extra["nodes"]["nodes"][0]
    assert nodes[name].partitions == ("gpu", "debug")
    assert nodes[name].gres == parse_sinfo_json(recorded("24.11", "sinfo.json"))[name].gres


WILL_RUN_RECORDED = [s for s in SERIES if (FIXTURES / s / "will-run.json").exists()]


def will_run_cases(series: str) -> dict[str, dict]:
    return json.loads(recorded(series, "will-run.json"))["cases"]


def test_sbatch_test_only_is_recorded_on_every_release():
    assert tuple(WILL_RUN_RECORDED) == SERIES


@pytest.mark.parametrize("series", WILL_RUN_RECORDED)
def test_sbatch_test_only_start_lines(series):
    from datetime import datetime, timedelta

    cases = will_run_cases(series)
    now = parse_will_run(cases["now"]["stderr"])
    assert now.nodes == frozenset({"a30n1"}) and now.partition == "gpu" and now.cpus >= 1 and not now.refused
    assert datetime.fromisoformat(cases["now"]["before"]) <= now.start <= datetime.fromisoformat(cases["now"]["after"])
    two = parse_will_run(cases["two_nodes"]["stderr"])
    assert two.nodes == frozenset({"a100n1", "a100n2"}) and two.start is not None
    # behind a running job holding every A30 GPU for 10 minutes: it starts when that one ends
    waits = parse_will_run(cases["waits"]["stderr"])
    assert waits.nodes == frozenset({"a30n1"}) and waits.start is not None
    assert waits.start >= datetime.fromisoformat(cases["waits"]["before"]) + timedelta(minutes=9)


@pytest.mark.parametrize("series", WILL_RUN_RECORDED)
def test_sbatch_test_only_refusals_say_why(series):
    cases = will_run_cases(series)
    bad = parse_will_run(cases["bad_partition"]["stderr"])
    assert bad.start is None and "nosuch" in bad.refused and cases["bad_partition"]["returncode"] != 0
    gres = parse_will_run(cases["no_such_gres"]["stderr"])
    assert gres.start is None and gres.refused == "Requested node configuration is not available"
    lua = parse_will_run(cases["day_only_type"]["stderr"])
    assert lua.start is None and lua.refused.startswith("gpupool: gpu:1g.6gb is offered only by layout day")


def test_sbatch_test_only_preemption_and_other_time_formats():
    text = "sbatch: Job 9 to start at 2026-03-03T08:00:00 using 8 processors on nodes a100n1 in partition gpu\n"
    text += "sbatch:   Preempts: 12,13\n"
    w = parse_will_run(text)
    assert w.preempts == (12, 13) and w.cpus == 8
    # 26.05's libslurmfull also has these forms (without a partition; in a federation)
    other = parse_will_run("sbatch: Job 4 to start at 2026-03-03T08:00:00 using 2 processors on a30n1\n")
    assert other.nodes == frozenset({"a30n1"}) and other.partition == "" and other.start is not None
    fed = "sbatch: JobId=7 to start at 2026-03-03T08:00:00 on cluster c1 using 2 processors on nodes a[1-2] in"
    assert parse_will_run(fed + " partition gpu\n").nodes == frozenset({"a1", "a2"})
    # SLURM_TIME_FORMAT=relative would print "Tomorr 08:00": not a time we read; never a wrong one
    assert parse_will_run(text.replace("2026-03-03T08:00:00", "Tomorr")).start is None


def test_will_run_asks_sbatch_with_the_standard_time_format():
    seen = {}

    class Runner(SlurmRunner):
        def run(self, argv, timeout_s=None, input_text=None):
            seen["argv"], seen["fmt"] = list(argv), self.env.get("SLURM_TIME_FORMAT")
            line = "sbatch: Job 3 to start at 2026-03-03T08:00:00 using 2 processors on nodes a30n1 in partition gpu"
            return Result(tuple(argv), 0, "", line + "\n")

    w = SlurmCluster(Runner(env={"SLURM_TIME_FORMAT": "relative"})).will_run(["-N", "1", "--wrap", "true"])
    assert seen == {"argv": ["sbatch", "--test-only", "-N", "1", "--wrap", "true"], "fmt": "standard"}
    assert w.nodes == frozenset({"a30n1"})


def test_will_run_without_a_controller_is_slurm_unavailable():
    class Down(SlurmRunner):
        def run(self, argv, timeout_s=None, input_text=None):
            err = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n"
            return Result(tuple(argv), 1, "", err)

    with pytest.raises(SlurmUnavailableError):
        SlurmCluster(Down(env={})).will_run(["--wrap", "true"])


def test_sbatch_test_only_zero_nodes_and_sbatchs_own_refusals():
    """Measured on 22.05: ``-N 0`` starts "on nodes  in partition gpu" (no node named);
    ``-N abc`` is refused by sbatch itself (exit 255, no ``allocation failure`` line)."""
    zero = parse_will_run(
        "sbatch: Job 28 to start at 2026-11-28T13:37:54 using 0 processors on nodes  in partition gpu\n"
    )
    assert zero.nodes == frozenset() and zero.partition == "gpu" and zero.start is not None
    own = parse_will_run('sbatch: error: "abc" is not a valid node count\n')
    assert own.by_sbatch and own.refused == '"abc" is not a valid node count'
    ctld = parse_will_run("allocation failure: Requested node configuration is not available\n")
    assert not ctld.by_sbatch and ctld.start is None
