"""`gpupool metrics` on Slurm output recorded from each release, a journal and the hooks' files:
values, names and labels (promtool's lint where Prometheus is installed), textfile and HTTP."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import load_config
from slurm_gpupool.core.gres.node_gres import gres_by_type
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.observe.metrics import Exposition, collect, serve, write_textfile
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.slurm.parse import parse_reservations, parse_sinfo_json, parse_squeue_json
from slurm_gpupool.slurm.types import NodeInfo, requested_gres
from tests.exposition import parse
from tests.unit.site import shipped_raw

TOP = Path(__file__).resolve().parents[2]
FIXTURES = TOP / "tests" / "fixtures" / "slurm"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "sinfo.json").exists())


def value(samples: dict, name: str, **labels: str) -> float:
    """The sum over series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    assert found, f"no {name}{labels}"
    return sum(found)


class FakeCluster:
    """The recorded output of one release, as SlurmCluster returns it."""

    def __init__(self, release: str, jobs_edit=None) -> None:
        d = FIXTURES / release
        self._nodes = parse_sinfo_json((d / "sinfo.json").read_text())
        self._jobs = parse_squeue_json((d / "squeue.json").read_text())
        if jobs_edit:
            self._jobs = jobs_edit(self._jobs)
        self._resv = parse_reservations((d / "reservations.txt").read_text())

    def nodes(self):
        return self._nodes

    def jobs(self):
        return self._jobs

    def reservations(self):
        return self._resv


class DownCluster:
    def nodes(self):
        raise SlurmUnavailableError("sinfo --json", "slurmctld is not answering")


@pytest.fixture
def cfg(tmp_path: Path):
    raw = shipped_raw(tmp_path)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def pending(jobs):
    """The recorded pending job (held by its user there) as one waiting for resources, on 2 nodes."""
    return [
        dataclasses.replace(j, state_reason="Resources", node_count=2) if j.state == "PENDING" else j for j in jobs
    ] + [j for j in jobs if j.state == "PENDING"]


@pytest.mark.parametrize("release", RELEASES)
def test_capacity_allocation_and_demand_from_each_release(cfg, release: str):
    now = datetime(2026, 11, 24, 21, 0).astimezone()
    text = collect(cfg, FakeCluster(release, pending), scope="pool", now=now).text()
    m = parse(text)
    assert value(m, "gpupool_slurm_up") == 1
    # recorded: every node in layout day; a100n1 runs a job on one whole A100; a30n1 is drained
    day = {"layout": "day"}
    assert value(m, "gpupool_capacity_devices", gres="gpu", type="1g.5gb", **day) == 64  # 2 × 32
    assert value(m, "gpupool_capacity_devices", gres="gpu", type="1g.5gb", kind="mig", profile="1g.5gb") == 64
    assert value(m, "gpupool_capacity_devices", gres="shard", type="v100_shared", kind="shared") == 16
    assert value(m, "gpupool_capacity_gpu_equivalents", type="1g.5gb", model="A100-SXM4-40GB") == pytest.approx(64 / 7)
    assert value(m, "gpupool_capacity_gpu_equivalents", type="v100_shared") == 4  # shards are not counted twice
    assert value(m, "gpupool_allocated_devices", gres="gpu", type="a100", kind="whole") == 1
    assert value(m, "gpupool_allocated_gpu_equivalents") == 1  # nothing else is held
    assert value(m, "gpupool_node_allocated_gpu_equivalents", node="a100n1") == 1
    assert value(m, "gpupool_node_capacity_gpu_equivalents", node="a30n1") == pytest.approx(4)
    assert value(m, "gpupool_unavailable_gpu_equivalents", type="1g.6gb") == pytest.approx(2)  # a30n1: 8 × 1/4
    assert value(m, "gpupool_unavailable_gpu_equivalents") == pytest.approx(4)  # only a30n1 is out
    # pending: the one waiting for resources asks 1g.5gb:1 per node on 2 nodes; the held copy is no demand
    assert value(m, "gpupool_pending_devices", gres="gpu", type="1g.5gb") == 2
    assert value(m, "gpupool_pending_jobs", gres="gpu", type="1g.5gb") == 1
    # per node: layout, switch state (night is due; a100n1 is in the recorded gpupool_night reservation), drain
    assert value(m, "gpupool_node_layout_info", node="a100n1", active="day", desired="night") == 1
    assert value(m, "gpupool_node_switch_state", node="a100n1", state="held") == 1
    assert value(m, "gpupool_node_switch_state", node="v100n1", state="scheduled") == 1
    assert value(m, "gpupool_node_switch_state", node="a100n1") == 1  # one state at a time
    assert value(m, "gpupool_node_drained", node="a30n1") == 1 and value(m, "gpupool_node_drained", node="a100n1") == 0
    assert value(m, "gpupool_schedule_due_info", layout="night") == 1  # 21:00 on a Tuesday
    promtool_ok(text)


def promtool_ok(text: str) -> None:
    """Prometheus' own lint (names, units, _total, help): Debian's prometheus package has it."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/bootstrap dev installs Debian's prometheus)")
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res.stdout + res.stderr


def test_shards_in_use_are_read_as_each_release_prints_them():
    # 24.11+: each GPU's used/total; 22.05: the GPUs that have shards in use, and the true total in TRES
    assert gres_by_type("shard:a30_shared:0(2/4,1/4),gpu:a30:1(IDX:3)") == {
        ("shard", "a30_shared"): 3,
        ("gpu", "a30"): 1,
    }
    node = NodeInfo(
        "v100n1",
        "mixed",
        frozenset(),
        "gpu:v100_shared:4(S:0),gpu:v100:4(S:1),shard:v100_shared:16(S:0),shard:v100:0(S:1)",
        (),
        "",
        gres_used="gpu:v100_shared:0(IDX:N/A),gpu:v100:0(IDX:N/A),shard:v100_shared:1(IDX:0),shard:v100:0(IDX:N/A)",
        tres_used="cpu=2,mem=2G,gres/shard=3",
    )
    assert node.gres_allocated()[("shard", "v100_shared")] == 3  # measured on 22.05: 3 shards show as 1
    assert requested_gres("gres:gpu:3g.40gb:4") == {("gpu", "3g.40gb"): 4}
    assert requested_gres("gres/shard:2,gres/gpu:a100:1") == {("shard", ""): 2, ("gpu", "a100"): 1}


def test_shard_use_counts_its_share_of_a_gpu(cfg):
    """3 shards of a GPU time-sliced into 4 are 3/4 of a GPU-equivalent."""
    cluster = FakeCluster("24.11")
    v = cluster._nodes["v100n1"]
    cluster._nodes["v100n1"] = dataclasses.replace(
        v, gres_used=v.gres_used.replace("shard:v100_shared:0(0/4,0/4,0/4,0/4)", "shard:v100_shared:3(3/4,0/4,0/4,0/4)")
    )
    m = parse(collect(cfg, cluster, scope="pool").text())
    assert value(m, "gpupool_allocated_devices", gres="shard", type="v100_shared") == 3
    assert value(m, "gpupool_allocated_gpu_equivalents", type="v100_shared") == pytest.approx(0.75)


def test_repartition_runs_outcomes_and_out_of_service_from_the_journal(cfg, tmp_path: Path):
    from slurm_gpupool.slurm.fake import FakeClock

    j = jr.Journal(tmp_path / "ctl", FakeClock(1000.0))
    j.start("day", ["a100n1", "a30n1"], "gpupool_day", 0, {"a100n1": "night", "a30n1": "night"})
    j.step("a100n1", jr.APPLYING, applying_at=1100.0)
    j.step("a30n1", jr.APPLYING, applying_at=1100.0)
    j.step("a100n1", jr.DONE, released_at=1190.0)
    j.step("a30n1", jr.FAILED, reason="apply failed")
    j.cluster_step(jr.FINISHED)
    j.start("night", ["a100n1"], "gpupool_night", 0, {"a100n1": "day"})
    j.step("a100n1", jr.APPLYING, applying_at=3000.0)
    j.step("a100n1", jr.ROLLED_BACK, released_at=3600.0)
    m = parse(collect(cfg, DownCluster(), scope="pool").text())
    assert value(m, "gpupool_slurm_up") == 0  # Slurm is down: the journal's metrics are still there
    assert value(m, "gpupool_repartition_runs_total", target="day") == 1
    assert value(m, "gpupool_repartition_runs_total", target="night") == 1
    assert value(m, "gpupool_repartition_run_duration_seconds_count") == 1  # the second is unfinished
    assert value(m, "gpupool_repartition_run_in_progress") == 1
    assert value(m, "gpupool_node_switches_total", node="a100n1", outcome="done") == 1
    assert value(m, "gpupool_node_switches_total", node="a100n1", outcome="rolled_back") == 1
    assert value(m, "gpupool_node_switches_total", node="a30n1", outcome="failed") == 1
    assert value(m, "gpupool_node_out_of_service_seconds_total", node="a100n1") == 90 + 600
    assert value(m, "gpupool_node_switch_out_of_service_seconds_bucket", le="60") == 0
    assert value(m, "gpupool_node_switch_out_of_service_seconds_bucket", le="120") == 1
    assert value(m, "gpupool_node_switch_out_of_service_seconds_bucket", le="+Inf") == 2
    assert value(m, "gpupool_node_switch_out_of_service_seconds_sum") == 690
    (tmp_path / "ctl" / "journal.log").open("a").write("not json\n")  # a torn line is skipped
    assert value(parse(collect(cfg, DownCluster(), scope="pool").text()), "gpupool_repartition_runs_total") == 2


def test_elastic_decisions_from_the_journal(cfg, tmp_path: Path):
    """#19 asks for elastic decisions once that mode exists (#17): repartition/elastic.record writes
    one ``elastic`` line per decision into journal.log."""
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    lines = [
        {"at": "2026-11-25T08:00:00+0000", "elastic": {"actions": [
            {"node": "a100n1", "from": "night", "to": "day", "reason": "demand", "gain_eq": 1.0, "jobs": ["7"]},
            {"node": "a100n2", "from": "night", "to": "day", "reason": "floor", "gain_eq": 2.0, "jobs": []}],
            "unmet": [{"request": "gpu:1g.5gb:1", "jobs": 9, "gpu_eq": 1.286, "longest_wait_s": 600}]}},
        {"at": "2026-11-25T09:00:00+0000", "elastic": {"actions": [
            {"node": "a100n1", "from": "day", "to": "night", "reason": "demand", "gain_eq": 8.0, "jobs": ["9"]}],
            "unmet": [{"request": "gpu:a100:8", "jobs": 1, "gpu_eq": 8.0, "longest_wait_s": 60}]}},
    ]  # fmt: skip
    (ctl / "journal.log").write_text("".join(json.dumps(x) + "\n" for x in lines))
    m = parse(collect(cfg, DownCluster(), scope="pool").text())
    assert value(m, "gpupool_elastic_decisions_total") == 2
    assert value(m, "gpupool_elastic_switches_total", reason="demand", layout="day") == 1
    assert value(m, "gpupool_elastic_switches_total", reason="floor", layout="day") == 1
    assert value(m, "gpupool_elastic_switches_total", reason="demand", layout="night") == 1
    assert value(m, "gpupool_elastic_last_decision_timestamp_seconds") == 1795597200  # 2026-11-25 09:00 UTC
    assert value(m, "gpupool_elastic_unmet_jobs", request="gpu:a100:8") == 1
    assert value(m, "gpupool_elastic_unmet_gpu_equivalents", request="gpu:a100:8") == 8
    assert ("gpupool_elastic_unmet_jobs", frozenset({("request", "gpu:1g.5gb:1")})) not in m  # the last decision's only


def test_hook_failures_health_drains_and_health_from_the_nodes_files(cfg, tmp_path: Path):
    st = tmp_path / "state" / "h100n1"
    st.mkdir(parents=True)
    (st / "hook-stats.json").write_text(json.dumps({"hook_failures": {"prolog": 2}, "health_drains": {"epilog": 1}}))
    (st / "health.json").write_text(json.dumps({"status": "fail", "problems": ["GPU 6: ECC"]}))
    m = parse(collect(cfg, scope="node").text())
    assert value(m, "gpupool_hook_failures_total", node="h100n1", hook="prolog") == 2
    assert value(m, "gpupool_hook_failures_total", node="h100n1", hook="epilog") == 0
    assert value(m, "gpupool_health_drains_total", node="h100n1", by="epilog") == 1
    assert value(m, "gpupool_node_health_ok", node="h100n1") == 0
    assert not any(n == "gpupool_hook_failures_total" and ("node", "a100n1") in ls for n, ls in m)  # not seen here
    assert "gpupool_slurm_up" not in {n for n, _ in m}  # node scope asks Slurm nothing


def test_without_node_in_the_state_dir_only_this_hosts_own_counts_are_read(cfg, tmp_path: Path):
    """On a controller the (shared-name) state directory is its own, no GPU node's."""
    flat = dataclasses.replace(cfg, paths=dataclasses.replace(cfg.paths, state_dir=str(tmp_path / "flat")))
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "hook-stats.json").write_text(json.dumps({"hook_failures": {"epilog": 5}}))
    m = parse(collect(flat, scope="node", local_node="a30n1").text())
    assert {dict(ls).get("node") for n, ls in m if n == "gpupool_hook_failures_total"} == {"a30n1"}
    assert value(m, "gpupool_hook_failures_total", hook="epilog") == 5
    ctl = parse(collect(flat, scope="node", local_node="slurmctld-host").text())
    assert not [n for n, _ in ctl if n == "gpupool_hook_failures_total"]


def test_exposition_escapes_labels_and_help():
    exp = Exposition()
    exp.family("gpupool_x", "gauge", 'a "help"\nline \\').set(0.1 + 0.2, why='say "no"\\\n')
    assert exp.text() == (
        '# HELP gpupool_x a "help"\\nline \\\\\n# TYPE gpupool_x gauge\ngpupool_x{why="say \\"no\\"\\\\\\n"} 0.3\n'
    )


def test_textfile_is_replaced_atomically_and_http_serves_it(cfg, tmp_path: Path):
    out = tmp_path / "prom" / "gpupool.prom"
    write_textfile(out, "gpupool_build_info 1\n")
    write_textfile(out, "gpupool_build_info 2\n")
    assert out.read_text() == "gpupool_build_info 2\n" and [p.name for p in out.parent.iterdir()] == [out.name]
    calls: list[float] = []
    bound: list[tuple] = []

    def render() -> str:
        calls.append(time.monotonic())
        return collect(cfg, DownCluster(), scope="pool").text()

    threading.Thread(target=serve, args=(("127.0.0.1", 0), render, 60.0, bound.append), daemon=True).start()
    deadline = time.monotonic() + 10
    while not bound and time.monotonic() < deadline:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{bound[0][1]}"
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert value(parse(r.read().decode()), "gpupool_slurm_up") == 0
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        r.read()
    assert len(calls) == 1  # within --min-interval: the last result, Slurm not asked again
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(url + "/nope", timeout=10)


def test_a_client_that_hangs_up_gets_no_traceback_and_the_server_serves_on(capfd):
    """A scraper that times out (or a closed tab) resets the connection while the metrics are
    rendered: socketserver printed a BrokenPipe/ConnectionReset traceback (#26 item 18)."""
    import socket
    import struct

    bound: list[tuple] = []

    def render() -> str:
        time.sleep(0.2)  # the client is gone by the time the answer is written
        return "gpupool_x 1\n" * 50000

    threading.Thread(target=serve, args=(("127.0.0.1", 0), render, 0.0, bound.append), daemon=True).start()
    deadline = time.monotonic() + 10
    while not bound and time.monotonic() < deadline:
        time.sleep(0.02)
    for _ in range(3):
        s = socket.create_connection(bound[0][:2], timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        s.close()
    time.sleep(1.0)
    with urllib.request.urlopen(f"http://127.0.0.1:{bound[0][1]}/metrics", timeout=10) as r:
        assert r.read().startswith(b"gpupool_x 1\n")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err


def test_a_failed_render_answers_503_with_the_reason(capfd):
    from slurm_gpupool.errors import SlurmUnavailableError

    bound: list[tuple] = []

    def render() -> str:
        raise SlurmUnavailableError("sinfo", "slurmctld not responding")

    threading.Thread(target=serve, args=(("127.0.0.1", 0), render, 0.0, bound.append), daemon=True).start()
    deadline = time.monotonic() + 10
    while not bound and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(urllib.error.HTTPError, match="503") as e:
        urllib.request.urlopen(f"http://127.0.0.1:{bound[0][1]}/metrics", timeout=10)
    assert b"slurmctld not responding" in e.value.read()
    assert "Traceback" not in capfd.readouterr().err
