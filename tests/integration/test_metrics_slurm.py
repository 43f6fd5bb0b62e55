"""#19 on the real sandbox Slurm: Debian's Prometheus scrapes `gpupool metrics --listen` while a
MIG job, a shard job and a pending job are there; its PromQL answers equal what sinfo and squeue
say; every dashboard query runs; the textfile passes promtool; both running jobs are in
dcgm-exporter's mapping files while they run and gone after."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .repartition_support import GPUPOOL, SLURM_WAIT_S, assert_converged, job_files, repartition, text_of

pytestmark = pytest.mark.integration

NODES = ("a100n1", "a100n2", "h100n1", "a30n1", "v100n1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float = SLURM_WAIT_S, *, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def day(_sandbox_session):
    sb = _sandbox_session.ready()
    proc = repartition(sb, "--to", "day", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield sb
    sb.run(["scancel", "--user=root"], check=False)
    proc = repartition(sb, "--to", "night", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_converged(sb, dict.fromkeys(NODES, "night"))


class Prometheus:
    """Debian's prometheus, scraping the metrics endpoint every second, on free ports.

    A scrape times out after its 1 s interval, and on a loaded machine the endpoint (which
    asks sinfo, squeue and scontrol) may answer later: that scrape fails and marks every
    series stale, so an instant query made just after sees nothing.  Queries that must
    agree with one another are evaluated at one past instant (:meth:`pin`)."""

    LAG_S = 3.0  # a pinned instant's age: every scrape begun before it has ended (1 s timeout)

    def __init__(self, tmp: Path, target: str) -> None:
        self.at: str | None = None  # the instant queries are evaluated at (None: now)
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip("Debian's prometheus is not installed (scripts/bootstrap dev and the release roots have it)")
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs:\n  - job_name: gpupool\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        """Its HTTP API answers (it takes a while to start on a loaded machine)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=60) as r:
                return r.status == 200
        except OSError:  # not listening yet, or not ready (503)
            return False

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=60) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def pin(self) -> None:
        """Evaluate the following queries at an instant ``LAG_S`` ago (``time=``): what
        Prometheus holds for it no longer changes, whatever the next scrapes do."""
        self.at = f"{time.time() - self.LAG_S:.3f}"

    def unpin(self) -> None:
        self.at = None

    def query(self, promql: str) -> dict[tuple, float]:
        """An instant query: {labels as sorted tuple: value}."""
        data = self.api("query", query=promql, **({"time": self.at} if self.at else {}))
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}

    def scalar(self, promql: str) -> float | None:
        got = self.query(promql)
        return sum(got.values()) if got else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def sinfo_gres(sb) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int], dict[str, str]]:
    """Per (gres, type) summed over the pool's nodes: configured, and (gpu records) in use; and
    each node's layout feature. Read from sinfo's plain text, not from the JSON the tool reads."""
    out = sb.run(["sinfo", "-N", "-h", "-O", "NodeList:40,Gres:2000,GresUsed:2000,Features:500"]).stdout
    per_node = {}
    for line in out.splitlines():
        name, gres, used, feats = line.split()
        per_node[name] = (gres, used, feats)  # a node in two partitions is listed twice
    total: dict[tuple[str, str], int] = {}
    used_gpu: dict[tuple[str, str], int] = {}
    layouts = {}
    for name, (gres, used, feats) in per_node.items():
        for kind, typ, n in re.findall(r"(gpu|shard):([^:(,]+):(\d+)", gres):
            total[(kind, typ)] = total.get((kind, typ), 0) + int(n)
        for typ, n in re.findall(r"gpu:([^:(,]+):(\d+)", used):
            used_gpu[("gpu", typ)] = used_gpu.get(("gpu", typ), 0) + int(n)
        (layouts[name],) = [f.removeprefix("layout_") for f in feats.split(",") if f.startswith("layout_")]
    return total, used_gpu, layouts


def squeue_tres(sb, state: str, field: str) -> dict[str, str]:
    out = sb.run(["squeue", "-h", "-t", state, "-O", f"JobID:20,{field}:300"]).stdout
    return dict(line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)


def mapping_files(sb, node: str) -> dict[str, list[str]]:
    d = sb.root / "nodes" / node / "dcgm-job-map"
    if not d.is_dir():
        return {}
    return {p.name: p.read_text().split() for p in sorted(d.iterdir()) if re.fullmatch(r"\d+(\.\d+)?", p.name)}


def mapping_keys(sb, node: str, slurm_index: int) -> set[str]:
    """The mapping files of Slurm's GPU index on the node: <gpu>; for a MIG device <gpu>.<gi> too."""
    state = sb.node_state(node)
    dev = state["slurm_devices"][slurm_index]
    if "mig_uuid" not in dev:
        return {str(dev["gpu"])}
    (gi,) = [i["gi_id"] for g in state["gpus"] for i in g["instances"] if i["uuid"] == dev["mig_uuid"]]
    return {f"{dev['gpu']}.{gi}", str(dev["gpu"])}


def test_prometheus_sees_what_sinfo_and_squeue_say_and_dcgm_sees_the_jobs(day, tmp_path: Path):
    sb = day
    port = free_port()
    server = subprocess.Popen(
        [*GPUPOOL, "metrics", "--listen", f"127.0.0.1:{port}", "--min-interval", "0.5"],
        env=sb.env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "metrics.err").open("w"),
    )
    prom = Prometheus(tmp_path, f"127.0.0.1:{port}")
    jobs: list[str] = []
    try:
        outs = {k: tmp_path / f"{k}.out" for k in ("mig", "shard")}
        script = "echo SLURM_JOB_GPUS=$SLURM_JOB_GPUS; sleep 3600"  # until cancelled below
        submit = {
            "mig": ["-w", "h100n1", "--gres=gpu:3g.40gb:1"],
            "shard": ["-w", "v100n1", "--gres=shard:3"],
        }
        ids = {}
        for k, args in submit.items():
            ids[k] = sb.run(["sbatch", "--parsable", *args, *job_files(outs[k]), "--wrap", script]).stdout.strip()
        # asks for every 3g.40gb of h100n1 while the MIG job holds one: pending (Resources)
        ids["pending"] = sb.run(
            ["sbatch", "--parsable", "-w", "h100n1", "--gres=gpu:3g.40gb:4", "--wrap", "true"]
        ).stdout.strip()
        jobs = list(ids.values())

        def started() -> bool:
            running = set(squeue_tres(sb, "R", "JobID"))
            return {ids["mig"], ids["shard"]} <= running and all("SLURM_JOB_GPUS=" in text_of(o) for o in outs.values())

        wait_for(started, what="the MIG and shard jobs to run")
        wait_for(prom.ready, what="Prometheus to start")

        # -- dcgm-exporter's mapping files while they run: <gpu>.<gi> for the MIG job, <gpu> for shards
        for k, node in (("mig", "h100n1"), ("shard", "v100n1")):
            (index,) = re.findall(r"SLURM_JOB_GPUS=(\d+)", outs[k].read_text())
            keys = mapping_keys(sb, node, int(index))
            assert mapping_files(sb, node) == {key: [ids[k]] for key in keys}, (k, keys)
        # the MIG job: its GPU's file (what dcgm-exporter reads) and its instance's own
        assert sorted("." in key for key in mapping_files(sb, "h100n1")) == [False, True]

        # -- Prometheus, once it scraped the running jobs
        total, used_gpu, layouts = sinfo_gres(sb)
        shards_used = sum(
            int(n) for t in squeue_tres(sb, "R", "tres-alloc").values() for n in re.findall(r"gres/shard=(\d+)", t)
        )
        assert shards_used == 3

        def scraped_running() -> bool:
            prom.pin()  # the checks below read this same instant
            return (
                prom.scalar('sum(gpupool_allocated_devices{gres="shard"})') == shards_used
                and prom.scalar('sum(gpupool_allocated_devices{gres="gpu",type="3g.40gb"})') == 1
                and prom.scalar("sum(gpupool_pending_devices)") is not None
            )

        wait_for(scraped_running, what="Prometheus to scrape the running jobs")
        running_at = prom.at
        assert prom.scalar("gpupool_slurm_up") == 1
        cap = {
            (dict(k)["gres"], dict(k)["type"]): v
            for k, v in prom.query("sum by (gres, type) (gpupool_capacity_devices)").items()
        }
        assert cap == {k: v for k, v in total.items() if v}, (cap, total)
        held = {
            (dict(k)["gres"], dict(k)["type"]): v
            for k, v in prom.query('sum by (gres, type) (gpupool_allocated_devices{gres="gpu"}) > 0').items()
        }
        assert held == {k: v for k, v in used_gpu.items() if v} == {("gpu", "3g.40gb"): 1}
        assert prom.query('sum by (type) (gpupool_allocated_devices{gres="shard"}) > 0') == {
            (("type", "v100_shared"),): 3.0
        }
        # GPU-equivalents: an H100 3g of 7 slices, and 3 of a V100's 4 shares
        assert prom.scalar("sum(gpupool_allocated_gpu_equivalents)") == pytest.approx(3 / 7 + 3 / 4)
        v100_shares = total[("shard", "v100_shared")] / total[("gpu", "v100_shared")]
        assert prom.scalar('sum(gpupool_allocated_gpu_equivalents{type="v100_shared"})') == pytest.approx(
            3 / v100_shares
        )
        # pending demand: what squeue says the pending job asks for per node
        asked = sum(
            int(n)
            for t in squeue_tres(sb, "PD", "tres-per-node").values()
            for n in re.findall(r"gpu:3g\.40gb:(\d+)", t)
        )
        assert asked == 4 and prom.scalar('gpupool_pending_devices{gres="gpu",type="3g.40gb"}') == asked
        assert prom.scalar('gpupool_pending_jobs{gres="gpu",type="3g.40gb"}') == 1
        # layouts and switch state per node, as Slurm's features say; runs as the journal says
        info = prom.query("gpupool_node_layout_info")
        assert {dict(k)["node"]: dict(k)["active"] for k in info} == layouts == dict.fromkeys(NODES, "day")
        assert prom.scalar("count(gpupool_node_switch_state == 1)") == len(NODES)
        prom.unpin()

        # the journal holds every earlier module's runs on this worker's sandbox, a rolled-back switch among
        # them (test_repartition_slurm): it was out of service too, so it is one more out-of-service sample
        # than there are done lines. Compare a scrape with the journal only when no run or switch landed
        # in between (the same scrape before and after reading it).
        def journal_counts() -> tuple[int, int, int]:
            starts = dones = out_of_service = 0
            applying: set[str] = set()
            for line in (sb.root / "controller" / "journal.log").read_text().splitlines():
                ev = json.loads(line)
                starts += ev.get("run") == "start"
                node, step = ev.get("node"), ev.get("step")
                dones += step == "done"
                if step == "applying":
                    applying.add(node)
                elif step in ("done", "rolled_back", "failed", "skipped") and node in applying:
                    applying.discard(node)
                    out_of_service += step in ("done", "rolled_back") and "released_at" in ev
            return starts, dones, out_of_service

        def scraped() -> tuple[float | None, ...]:
            return (
                prom.scalar("sum(gpupool_repartition_runs_total)"),
                prom.scalar('sum(gpupool_node_switches_total{outcome="done"})'),
                prom.scalar("sum(gpupool_node_switch_out_of_service_seconds_count)"),
            )

        seen: list[tuple] = []

        def consistent():
            before, counts, after = scraped(), journal_counts(), scraped()
            seen[:] = [before, counts, after]
            return counts if before == after == counts else None

        try:
            starts, dones, _ = wait_for(consistent, what="a scrape that agrees with the journal")
        except AssertionError as e:
            raise AssertionError(f"{e}: (scrape, journal, scrape) = {seen}") from None
        assert starts >= 1 and dones >= len(NODES)
        # every query of the shipped Grafana dashboard is one Prometheus accepts
        dash = json.loads((Path(__file__).parents[2] / "slurm_gpupool/data/grafana/gpupool.json").read_text())
        for p in dash["panels"]:
            for t in p.get("targets", []):
                prom.api("query", query=t["expr"].replace("$layout", ".*"))
        prom.at = running_at  # the instant that saw the jobs running, as the panels' filter asks it
        assert (prom.scalar('sum(gpupool_allocated_gpu_equivalents{layout=~".*"})') or 0) > 0
        prom.unpin()

        # -- the textfile form passes Prometheus' own lint
        prom_file = tmp_path / "textfile" / "gpupool.prom"
        sb.run([*GPUPOOL, "metrics", "--textfile", str(prom_file)])
        promtool = shutil.which("promtool")
        assert promtool, "promtool comes with Debian's prometheus"
        lint = subprocess.run([promtool, "check", "metrics"], stdin=prom_file.open(), capture_output=True, text=True)
        assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), lint.stdout + lint.stderr

        # -- after the jobs: gone from the mapping files, and from what Prometheus sees
        sb.run(["scancel", *jobs])
        wait_for(lambda: not set(jobs) & set(squeue_tres(sb, "PD,R,CG", "JobID")), what="the jobs to end")
        wait_for(lambda: not mapping_files(sb, "h100n1") and not mapping_files(sb, "v100n1"), what="the Epilogs")
        wait_for(lambda: prom.scalar("sum(gpupool_allocated_devices)") == 0, what="Prometheus to see them gone")
    finally:
        if jobs:
            sb.run(["scancel", *jobs], check=False)
        prom.stop()
        server.terminate()
        server.wait(timeout=20)
