"""Parsers of the controller-side Slurm commands, on output recorded from the sandbox's 22.05."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gpupool.core.durations import format_duration, parse_duration_s, parse_slurm_time_s
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.cluster import (
    SlurmCluster,
    gres_counts,
    parse_one_line,
    parse_reservations,
    parse_sinfo_json,
    parse_squeue_json,
)
from slurm_gpupool.slurm.runner import Result

REC = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def test_sinfo_json_nodes_layouts_and_drain():
    nodes = parse_sinfo_json((REC / "sinfo.json").read_text())
    assert sorted(nodes) == ["a100n1", "a100n2", "a30n1", "h100n1", "v100n1"]
    a30 = nodes["a30n1"]
    assert a30.drained and a30.reason == "gpupool: switching to layout day" and a30.usable
    assert a30.layout == "night" and a30.gres_counts() == {"gpu:a30": 4}
    assert nodes["a100n1"].state in ("mixed", "allocated") and not nodes["a100n1"].drained
    assert "nvlink8" in nodes["h100n1"].features


def test_squeue_json_jobs():
    jobs = {j.job_id: j for j in parse_squeue_json((REC / "squeue.json").read_text())}
    running = jobs[334]
    assert running.state == "RUNNING" and running.nodes == {"a100n1"} and running.time_limit_s == 600
    assert running.requeue and running.user == "root"
    assert not jobs[335].requeue and jobs[335].name == "name with space"
    assert jobs[336].state == "PENDING" and jobs[336].nodes == frozenset()


def test_reservation_and_partition_lines():
    (r,) = parse_reservations((REC / "reservations.txt").read_text()).values()
    assert r.name == "gpupool_night" and r.nodes == {"a100n1", "a100n2"} and "MAINT" in r.flags
    assert (r.end - r.start).total_seconds() == 3600
    assert parse_reservations("No reservations in the system\n") == {}
    f = parse_one_line("NodeName=x Reason=gpupool: switching to layout day [root@2026-11-22T01:03:05] State=IDLE")
    assert f["Reason"] == "gpupool: switching to layout day [root@2026-11-22T01:03:05]" and f["State"] == "IDLE"


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


def test_partition_max_time_and_ping():
    cluster = SlurmCluster(
        Replay(
            {
                "scontrol -o show": (REC / "partitions.txt").read_text(),
                "scontrol ping": (REC / "ping.txt").read_text(),
            }
        )
    )
    assert cluster.partition_max_time_s(None) == 86400
    assert cluster.partition_max_time_s("gpu") == 86400
    with pytest.raises(SlurmUnavailableError):
        cluster.partition_max_time_s("nope")
    assert cluster.ping()


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
