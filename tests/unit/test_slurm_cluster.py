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
from slurm_gpupool.slurm.parse import parse_one_line, parse_reservations, parse_sinfo_json, parse_squeue_json
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
