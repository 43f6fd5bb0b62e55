"""Benchmark: the sandbox at scale (#29): N emulated DGX/HGX nodes, started, then switched.

For each ``--nodes`` count, on a fresh sandbox of its own root and ports:

* ``gpupool sandbox up --nodes N --layout day``: wall time, and the resident memory (RSS) of
  every daemon of that root (slurmds, slurmctld, slurmdbd, MariaDB, munged);
* long jobs (``sleep``) on a tenth of the nodes, then a full day→night and night→day switch
  with ``gpupool repartition --to LAYOUT --json --deadline D``: its wall time, each node's
  out-of-service time (the report's ``out_of_service_s``: apply start to resume), the
  phases from the repartitioner's journal, slurmctld restarts (its pid changing), its RSS
  and the round trip of ``sdiag`` sampled every second during the switch, and the jobs
  killed (must be 0: the busy nodes wait, are skipped at the deadline, and their jobs run on);
* between the two switches, an elastic step (``--no-elastic``: none): at night, jobs that each
  want a whole day node's slices, more than a quarter of the nodes' worth; one ``gpupool
  repartition --elastic`` capped at a quarter of the nodes, measured as a switch; it must move
  exactly that many to day, their jobs must all complete, and the switch to day keeps them.

The phases feed ``core/policy/switch_plan.estimate_switch_s``, read per wave of
``repartition.wave_size`` from the journal's lines (a run in one wave is one wave):
calibrated on the smallest N it predicts the others (error printed), and fitted on every
wave of every run (apply per batch of ``parallel``; the restart as slurmctld plus a cost per
slurmd restarted; the verify growing with the wave's nodes) it predicts 1,000 nodes.  The
same-run baseline is the smallest N: every figure of a larger N is also printed as a ratio
to it.  Needs root and Slurm (the host's); leaves nothing running unless ``--keep``.

``--smoke`` needs no Slurm: the generated pool of 4 and 8 nodes on the tests' fake Slurm
(tests/unit/repartition_site.py), the same switches, journal phases, fit and report.

    python -m benchmarks.bench_sandbox_scale --nodes 32,64 --root /var/tmp/gpupool-scale --port-base 27600
    python -m benchmarks.bench_sandbox_scale --nodes 64 --parallel 32 --root ... --port-base ...  # another parallel
    python -m benchmarks.bench_sandbox_scale --nodes 64 --restart-batch 16 --root ... --port-base ...  # smaller batches
    python -m benchmarks.bench_sandbox_scale --smoke
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import TOP, BenchError, check, run_main, table

GPUPOOL = str(Path(sys.executable).with_name("gpupool"))
BUSY_GRES = {"dgx": "gpu:1g.5gb:1", "hgx": "gpu:1g.10gb:1"}  # one day-layout slice on each machine
DAY_SLICES = 28  # the day layout's 1g slices per node (GPUs 0-3, 7 each): a demand job takes them all


@dataclass
class Wave:
    """One wave of a run (``repartition.wave_size``; a run without waves is one): its nodes
    switched and the seconds of its phases, from the journal's lines."""

    nodes: int
    apply: float  # the wave's first apply to its GRES install
    install: float
    restart: float
    verify: float  # restarted to the wave's last node released
    length: float  # the previous wave's end (the run's reservation, for the first) to this one's


@dataclass
class Switch:
    """One switch as measured."""

    target: str
    wall_s: float
    report: dict[str, Any]
    phases: dict[str, float]
    samples: list[tuple[float, int | None, float | None, float | None]]  # (t, ctld pid, RSS MiB, sdiag s)
    waves: list[Wave] = field(default_factory=list)

    def done(self) -> dict[str, dict[str, Any]]:
        return {n: v for n, v in self.report["nodes"].items() if v["outcome"] == "done"}

    def out_of_service(self) -> list[float]:
        return [v["out_of_service_s"] for v in self.done().values() if v["out_of_service_s"] is not None]

    def held(self) -> list[float]:
        """Each switched node's time in the run's reservation (``reserved_s``): in waves
        (``repartition.wave_size``), a node waits there for the waves before its own."""
        return [v["reserved_s"] for v in self.done().values() if v["reserved_s"] is not None]

    def ctld_restarts(self) -> int:
        pids = [p for _, p, _, _ in self.samples if p is not None]
        return sum(1 for a, b in itertools.pairwise(pids) if a != b)


@dataclass
class ScaleRun:
    nodes: int
    up_s: float
    rss_mib: dict[str, list[float]]
    busy: list[str]
    switches: list[Switch] = field(default_factory=list)
    killed: int = 0


def gpupool(root: Path, *args: str, timeout_s: float = 1800, ok: tuple[int, ...] = (0,)) -> str:
    """``gpupool ARGS`` with this sandbox's environment; its stdout (a :class:`BenchError` otherwise)."""
    env = {**os.environ, **sandbox_env(root)}
    p = subprocess.run([GPUPOOL, *args], env=env, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode not in ok:
        raise BenchError(f"gpupool {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def sandbox_env(root: Path) -> dict[str, str]:
    from slurm_gpupool.sandbox.cluster import Sandbox

    return Sandbox(root).env()


def slurm(root: Path, *argv: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | sandbox_env(root)
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout_s)


def daemon_rss_mib(root: Path) -> dict[str, list[float]]:
    """comm → RSS (MiB) of each daemon process of this root (``/proc/PID/status`` VmRSS)."""
    from slurm_gpupool.sandbox.daemons import DAEMON_COMMS
    from slurm_gpupool.sandbox.procs import sandbox_processes

    out: dict[str, list[float]] = {}
    for pid, comm in sandbox_processes(root, DAEMON_COMMS):
        rss = vm_rss_mib(pid)
        if rss is not None:
            out.setdefault(comm, []).append(rss)
    return out


def vm_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def ctld_pid(root: Path) -> int | None:
    from slurm_gpupool.sandbox.paths import SandboxPaths
    from slurm_gpupool.sandbox.procs import running_pid

    paths = SandboxPaths(root)
    return running_pid(paths.pidfile("slurmctld"), root, "slurmctld")


class Sampler(threading.Thread):
    """Every ``interval_s``: slurmctld's pid and RSS, and how long ``sdiag`` takes to answer
    (None when it does not: slurmctld restarting)."""

    def __init__(self, root: Path, interval_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.root, self.interval_s = root, interval_s
        self.samples: list[tuple[float, int | None, float | None, float | None]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            t = time.monotonic()
            pid = ctld_pid(self.root)
            rss = vm_rss_mib(pid) if pid else None
            try:
                p = slurm(self.root, "sdiag", timeout_s=10)
                rpc = time.monotonic() - t if p.returncode == 0 else None
            except subprocess.TimeoutExpired:
                rpc = None
            self.samples.append((t, pid, rss, rpc))
            self._halt.wait(max(0.0, self.interval_s - (time.monotonic() - t)))

    def finish(self) -> list[tuple[float, int | None, float | None, float | None]]:
        self._halt.set()
        self.join(30)
        return self.samples


def _last_run(ctl: Path) -> list[dict[str, Any]]:
    """The lines of ``journal.log`` from the last run's start on."""
    lines = [json.loads(x) for x in (ctl / "journal.log").read_text().splitlines() if x.strip()]
    return lines[max(i for i, x in enumerate(lines) if x.get("run") == "start") :]


def _stamp(x: dict[str, Any]) -> float:
    """A journal line's time: ``epoch`` (ms) where the repartitioner wrote it, else ``at``
    (whole seconds, as before it did)."""
    import datetime

    if "epoch" in x:
        return float(x["epoch"])
    return datetime.datetime.strptime(x["at"], "%Y-%m-%dT%H:%M:%S%z").timestamp()


def journal_phases(ctl: Path) -> dict[str, float]:
    """Seconds of each phase of the last run, from the repartitioner's journal (``journal.log``
    cluster steps; ``journal.json`` node stamps)."""
    lines = _last_run(ctl)
    steps: dict[str, float] = {}
    for x in lines:
        if "cluster" in x:
            steps.setdefault(x["cluster"], _stamp(x))
    doc = json.loads((ctl / "journal.json").read_text())
    # this run's nodes only: a node another run switched keeps that run's stamps
    nodes = [doc["nodes"][n] for n in doc["run"]["nodes"]]
    applying = [v["applying_at"] for v in nodes if v.get("applying_at")]
    released = [v["released_at"] for v in nodes if v.get("step") == "done" and v.get("released_at")]
    t0 = _stamp(lines[0])
    check(all(k in steps for k in ("reserved", "gres_installing", "restarting", "restarted", "finished")), f"{steps}")
    return {
        "reserve": steps["reserved"] - t0,
        "apply": steps["gres_installing"] - (min(applying) if applying else steps["reserved"]),
        "install": steps.get("gres_installed", steps["restarting"]) - steps["gres_installing"],
        "restart": steps["restarted"] - steps["restarting"],
        # to the last switched node released: the run itself ends later when it waits for busy nodes
        "verify": (max(released) if released else steps["finished"]) - steps["restarted"],
        "switched": (max(released) if released else steps["finished"]) - t0,
    }


def journal_waves(ctl: Path) -> list[Wave]:
    """The last run's waves, from ``journal.log``: each wave logs its install, restart and
    verify steps again (``NextWave`` clears them), and each node its apply and release."""
    lines = _last_run(ctl)
    steps: list[dict[str, float]] = [{}]
    applying: list[dict[str, float]] = [{}]
    released: dict[str, float] = {}
    for x in lines:
        if x.get("cluster") == "clear" and "gres_installing" in x.get("steps", ()):
            steps.append({})  # the next wave
            applying.append({})
        elif "cluster" in x:
            steps[-1].setdefault(x["cluster"], _stamp(x))
        elif x.get("step") == "applying" and not any(x["node"] in a for a in applying):
            applying[-1][x["node"]] = float(x["applying_at"] if "applying_at" in x else _stamp(x))
        elif x.get("step") == "done":
            released[x["node"]] = float(x["released_at"] if "released_at" in x else _stamp(x))
    reserved = steps[0].get("reserved", _stamp(lines[0]))
    waves, end = [], reserved
    for st, ap in zip(steps, applying, strict=True):
        if "restarted" not in st:
            continue  # a wave cut short (its nodes reverted), or none
        last = max((released[n] for n in ap if n in released), default=st.get("finished", st["restarted"]))
        first = min(ap.values(), default=st["gres_installing"])
        waves.append(
            Wave(
                nodes=sum(1 for n in ap if n in released),
                apply=st["gres_installing"] - first,
                install=st.get("gres_installed", st["restarting"]) - st["gres_installing"],
                restart=st["restarted"] - st["restarting"],
                verify=last - st["restarted"],
                length=last - end,
            )
        )
        end = last
    return waves


def submit_busy(root: Path, nodes: list[str]) -> list[str]:
    """A long job on each of ``nodes`` (one day slice); their ids once all run."""
    ids = []
    for node in nodes:
        gres = BUSY_GRES[node.rstrip("0123456789")]
        p = slurm(
            root,
            "sbatch",
            "--parsable",
            "-J",
            "bench-busy",
            "-w",
            node,
            f"--gres={gres}",
            "-t",
            "60",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 3000",
        )
        check(p.returncode == 0, f"sbatch on {node}: {p.stderr}")
        ids.append(p.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if len(running(root, ids)) == len(ids):
            return ids
        time.sleep(2)
    raise BenchError(f"the busy jobs did not all start: {running(root, ids)} of {ids}")


def running(root: Path, ids: list[str]) -> list[str]:
    p = slurm(root, "squeue", "-h", "-t", "RUNNING", "-j", ",".join(ids), "-o", "%i")
    return p.stdout.split() if p.returncode == 0 else []


def switch(root: Path, target: str, deadline: str) -> Switch:
    sampler = Sampler(root)
    sampler.start()
    t = time.monotonic()
    out = gpupool(root, "repartition", "--to", target, "--deadline", deadline, "--json", ok=(0, 75))
    wall = time.monotonic() - t
    samples = sampler.finish()
    report = json.loads(out)
    ctl = root / "controller"
    return Switch(target, wall, report, journal_phases(ctl), samples, journal_waves(ctl))


def elastic_config(root: Path, elastic: dict[str, Any]) -> Path:
    """The sandbox's pool with ``schedule.mode: elastic`` (demand decides at all hours) and
    these ``schedule.elastic`` settings (docs/elastic.md); beside the sandbox's own config, so
    its relative paths hold."""
    import copy

    import yaml

    from slurm_gpupool.config.load import load_config

    raw = copy.deepcopy(load_config(root / "etc" / "gpupool.yaml").raw)
    raw["schedule"] = {**raw["schedule"], "mode": "elastic", "rules": [], "elastic": elastic}
    path = root / "etc" / "gpupool-elastic.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def elastic_step(root: Path, busy: list[str], quarter: int) -> tuple[Switch, list[str]]:
    """From night: jobs that each want a whole day node's 1g slices (the busy nodes, still in
    day, offer the types but not a node's worth), more than ``quarter`` nodes' worth; one
    ``gpupool repartition --elastic`` step, capped at ``quarter`` more nodes, measured as a switch
    (its per-node figures from the journal, as a ``--to`` run reports them); the demand jobs'
    ids.  The nodes it switched to day, then the jobs, are checked by the caller."""
    from slurm_gpupool.repartition.rules import node_report

    # at most a quarter more nodes, no batching window nor cool-down; the busy nodes, skipped
    # by the switch to night, count as switching to it (a drain under way)
    settings = {"max_changing": quarter + len(busy), "window": "0s", "cooldown": "0s", "min_gain": 1}
    config = elastic_config(root, settings)
    demand = []
    for one in BUSY_GRES.values():
        want = one.rsplit(":", 1)[0] + f":{DAY_SLICES}"
        for _ in range(quarter // 2 + 1):
            argv = ["sbatch", "--parsable", "-J", "bench-demand", f"--gres={want}", "-t", "5", "-o", "/dev/null"]
            p = slurm(root, *argv, "--wrap", "sleep 1")
            check(p.returncode == 0, f"sbatch --gres={want}: {p.stderr}")
            demand.append(p.stdout.strip().split(";")[0])
    check(not running(root, demand), f"demand jobs started before the step: {running(root, demand)}")
    sampler = Sampler(root)
    sampler.start()
    t = time.monotonic()
    out = gpupool(root, "--config", str(config), "repartition", "--elastic", "--json")
    wall = time.monotonic() - t
    samples = sampler.finish()
    decision = json.loads(out)
    ctl = root / "controller"
    journal = json.loads((ctl / "journal.json").read_text())
    switched = [a["node"] for a in decision["actions"]]
    check(len(switched) == quarter and all(a["to"] == "day" for a in decision["actions"]), f"elastic: {decision}")
    check(not set(switched) & set(busy), f"elastic switched busy nodes: {switched}")
    report = {"nodes": {n: node_report(journal["run"], journal["nodes"][n]) for n in journal["run"]["nodes"]}}
    check({n: v["outcome"] for n, v in report["nodes"].items()} == dict.fromkeys(switched, "done"), f"{report}")
    return Switch("day (elastic)", wall, report, journal_phases(ctl), samples, journal_waves(ctl)), demand


def up_fresh(root: Path, n: int, port_base: int, repartition: dict[str, Any] | None = None) -> float:
    """A fresh sandbox of ``n`` scale-pool nodes in the day layout at ``root`` (whatever was
    there purged first); the seconds ``sandbox up`` took.  With ``repartition`` settings the
    scale pool is written beside the root with them and played with ``--config`` (what
    docs/scale-sandbox.md tells a user to do), else ``--nodes N``."""
    from slurm_gpupool.sandbox.scale import scale_config_text

    gpupool(root, "sandbox", "down", "--purge", "--root", str(root))
    source = ["--nodes", str(n)]
    if repartition:
        config = root.with_name(f"{root.name}.scale-pool.yaml")
        config.write_text(scale_config_text(n, repartition))
        source = ["--config", str(config)]
    t = time.monotonic()
    gpupool(
        root,
        "sandbox",
        "up",
        *source,
        "--layout",
        "day",
        "--root",
        str(root),
        "--port-base",
        str(port_base),
        "--no-install",
        "--json",
    )
    return time.monotonic() - t


def measure(
    n: int,
    root: Path,
    port_base: int,
    deadline: str,
    parallel: int | None = None,
    restart_batch: int | None = None,
    elastic: bool = True,
    wave_size: int | None = None,
) -> ScaleRun:
    given = (("parallel", parallel), ("restart_batch", restart_batch), ("wave_size", wave_size))
    settings = {k: v for k, v in given if v}
    up_s = up_fresh(root, n, port_base, settings or None)
    rss = daemon_rss_mib(root)
    check(len(rss.get("slurmd", [])) == n, f"{n} slurmds expected, RSS of {len(rss.get('slurmd', []))}")
    names = sorted(
        json.loads(gpupool(root, "sandbox", "status", "--root", str(root), "--json"))["nodes"], key=lambda x: x["name"]
    )
    busy = [x["name"] for x in names[::10]][: max(1, round(n / 10))]
    ids = submit_busy(root, busy)
    run = ScaleRun(n, up_s, rss, busy)
    already: list[str] = []  # nodes the elastic step put in day before the switch to day
    for target in ("night", "day"):
        sw = switch(root, target, deadline)
        outcomes = {k: v["outcome"] for k, v in sw.report["nodes"].items()}
        idle = [k for k in outcomes if k not in busy and k not in already]
        check(all(outcomes[k] == "done" for k in idle), f"{n} nodes to {target}: not all idle ones done: {outcomes}")
        check(all(outcomes.get(k, "kept") in ("skipped", "kept") for k in busy), f"busy nodes switched: {outcomes}")
        check(all(outcomes.get(k, "kept") == "kept" for k in already), f"elastic's nodes switched again: {outcomes}")
        run.switches.append(sw)
        if target == "night" and elastic:
            sw, demand = elastic_step(root, busy, max(2, n // 4))
            run.switches.append(sw)
            already = sorted(sw.done())
            states = wait_done(root, demand)
            check(set(states.values()) == {"COMPLETED"}, f"the demand jobs the elastic step served: {states}")
    alive = running(root, ids)
    run.killed = len(ids) - len(alive)
    slurm(root, "scancel", *ids)
    return run


def wait_done(root: Path, ids: list[str], timeout_s: float = 600) -> dict[str, str]:
    """Job id -> final state (``sacct``), once none is pending or running."""
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        p = slurm(root, "sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,State")
        states = dict(line.split("|", 1) for line in p.stdout.splitlines() if "|" in line)
        if len(states) == len(ids) and not {"PENDING", "RUNNING", "COMPLETING"} & set(states.values()):
            return states
        time.sleep(2)
    raise BenchError(f"jobs not done after {timeout_s:.0f} s: {states}")


def smoke(tmp: Path) -> list[ScaleRun]:
    """The same switches and report without Slurm: the scale config of 4 and 8 nodes on the
    tests' fake Slurm (tests/unit/repartition_site.py: simulated GPUs, in-process srun, a clock
    that never waits); "up" is making that site, and there are no daemons nor busy jobs."""
    from slurm_gpupool.sandbox.scale import scale_config

    sys.path.insert(0, str(TOP))
    from tests.unit.repartition_site import make_site, repartitioner

    runs = []
    for n in (4, 8):
        raw = scale_config(n)
        (tmp / str(n)).mkdir()
        t = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            site = make_site(tmp / str(n), "day", **{k: raw[k] for k in ("nodesets", "layouts", "schedule")})
        run = ScaleRun(n, time.monotonic() - t, {}, [])
        for target in ("night", "day"):
            t = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()):
                report = repartitioner(site).run(target).to_dict()
            ctl = Path(site.cfg.paths.controller_dir)
            run.switches.append(
                Switch(target, time.monotonic() - t, report, journal_phases(ctl), [], journal_waves(ctl))
            )
            outcomes = {k: v["outcome"] for k, v in report["nodes"].items()}
            check(len(outcomes) == n and set(outcomes.values()) == {"done"}, f"{n} nodes to {target}: {outcomes}")
        runs.append(run)
    return runs


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p95(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)] if xs else float("nan")


def line_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through ``points``."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - slope * mx, slope


def calibrated(run: ScaleRun, parallel: int, batch: int) -> Any:
    """The model's constants taken from one node count's waves (how it is calibrated today;
    a run in one wave is one wave)."""
    from slurm_gpupool.core.policy.switch_plan import Timings

    sws, waves = run.switches, [w for s in run.switches for w in s.waves if w.nodes]
    return Timings(
        reserve_s=med([s.phases["reserve"] for s in sws]),
        apply_s=med([w.apply / math.ceil(w.nodes / parallel) for w in waves]),
        install_s=med([w.install for w in waves]),
        ctld_restart_s=0.0,
        slurmd_stop_s=0.0,
        slurmd_start_s=med([w.restart / math.ceil(w.nodes / batch) for w in waves]),  # slurmctld counted in it
        verify_s=med([w.verify for w in waves]),
    )


def fitted(runs: list[ScaleRun], parallel: int, batch: int) -> tuple[Callable[[int], Any], str]:
    """Wave size → Timings fitted on every wave of every run (a run in one wave is one wave
    of all its nodes): apply per batch of ``parallel`` (median); the restart phase as
    slurmctld (intercept) plus a cost per slurmd restarted (slope, spread over the batches);
    the verify phase growing with the wave's nodes (the model's constant does not hold
    here); and the fit in words."""
    from slurm_gpupool.core.policy.switch_plan import Timings

    sws = [s for r in runs for s in r.switches]
    waves = [w for s in sws for w in s.waves if w.nodes]
    r0, r1 = line_fit([(w.nodes, w.restart) for w in waves])
    v0, v1 = line_fit([(w.nodes, w.verify) for w in waves])
    apply_s = med([w.apply / math.ceil(w.nodes / parallel) for w in waves])

    def at(n: int) -> Timings:
        return Timings(
            reserve_s=med([s.phases["reserve"] for s in sws]),
            apply_s=apply_s,
            install_s=med([w.install for w in waves]),
            ctld_restart_s=max(0.0, r0),
            slurmd_stop_s=0.0,
            slurmd_start_s=max(0.0, r1) * min(n, batch),
            verify_s=max(0.0, v0 + v1 * n),
        )

    return at, (
        f"apply {apply_s:.2f} s per batch of {parallel}; restart {r0:.1f} s + {r1:.3f} s per slurmd; "
        f"verify {v0:.1f} s + {v1:.3f} s per node; from {len(waves)} waves of {min(w.nodes for w in waves)}-"
        f"{max(w.nodes for w in waves)} nodes"
    )


def report(runs: list[ScaleRun], parallel: int, batch: int, where: str, wave: int = 0) -> None:
    from slurm_gpupool.core.policy.switch_plan import estimate_switch_s

    base = runs[0]
    print(f"# sandbox at scale, {where}, nodes {[r.nodes for r in runs]}; baseline: {base.nodes} nodes")
    rows = []
    for r in runs:
        total = sum(sum(v) for v in r.rss_mib.values())
        base_total = sum(sum(v) for v in base.rss_mib.values())
        rows.append(
            [
                r.nodes,
                f"{r.up_s:.1f} s",
                f"{r.up_s / base.up_s:.2f}x",
                f"{total:.0f} MiB",
                f"{total / base_total:.2f}x" if base_total else "-",
                f"{med(r.rss_mib.get('slurmd', [])):.1f} MiB",
                f"{sum(r.rss_mib.get('slurmctld', [0])):.1f} MiB",
                f"{sum(r.rss_mib.get('mariadbd', r.rss_mib.get('mysqld', [0]))):.0f} MiB",
            ]
        )
    print(table(rows, ["nodes", "up", "/ base", "RSS all daemons", "/ base", "slurmd each", "slurmctld", "MariaDB"]))
    print(f"\n# switches (parallel {parallel}, restart_batch {batch}); busy nodes: long jobs, skipped at the deadline")
    rows = []
    base_wall = {s.target: s.wall_s for s in base.switches}
    for r in runs:
        for s in r.switches:
            oos = s.out_of_service()
            rss = [x[2] for x in s.samples if x[2] is not None]
            rpc = [x[3] for x in s.samples if x[3] is not None]
            down = sum(1 for x in s.samples if x[3] is None)
            rows.append(
                [
                    r.nodes,
                    f"->{s.target}",
                    f"{s.wall_s:.1f} s",
                    f"{s.wall_s / base_wall[s.target]:.2f}x",
                    f"{len(s.done())}/{len(r.busy)}",
                    f"{med(oos):.1f} s",
                    f"{max(oos, default=math.nan):.1f} s",
                    f"{max(s.held(), default=math.nan):.1f} s",
                    s.ctld_restarts(),
                    f"{max(rss):.1f} MiB" if rss else "-",
                    f"{med(rpc) * 1000:.0f}/{p95(rpc) * 1000:.0f}/{max(rpc) * 1000:.0f} ms" if rpc else "-",
                    f"{down}/{len(s.samples)}",
                    r.killed,
                ]
            )
    print(
        table(
            rows,
            [
                "nodes",
                "switch",
                "wall",
                "/ base",
                "done/busy",
                "out-of-service med",
                "max",
                "held max",
                "ctld restarts",
                "ctld RSS max",
                "sdiag p50/p95/max",
                "sdiag no answer",
                "jobs killed",
            ],
        )
    )
    print("\n# phases from the journal (seconds; in waves, from the first wave's to the last's)")
    print(
        table(
            [
                [
                    r.nodes,
                    f"->{s.target}",
                    *(f"{s.phases[k]:.0f} s" for k in ("reserve", "apply", "install", "restart", "verify")),
                ]
                for r in runs
                for s in r.switches
            ],
            ["nodes", "switch", "reserve", "apply", "install", "restart", "verify"],
        )
    )
    if wave:
        print(f"\n# each wave of {wave} (the journal's lines of each; seconds)")
        print(
            table(
                [
                    [r.nodes, f"->{s.target}", k, w.nodes, *(f"{v:.1f} s" for v in astuple(w)[1:])]
                    for r in runs
                    for s in r.switches
                    for k, w in enumerate(s.waves, 1)
                ],
                ["nodes", "switch", "wave", "nodes switched", "apply", "install", "restart", "verify", "length"],
            )
        )
    calib = calibrated(base, parallel, batch)
    fit, fit_text = fitted(runs, parallel, batch)
    rows = []
    for r in runs:
        for s in r.switches:
            n, got = len(s.done()), s.phases["switched"]
            size = min(wave, n) if wave else n  # each wave's restart and verify are its own nodes'
            e1 = estimate_switch_s(n, parallel, batch, calib, wave)
            e2 = estimate_switch_s(n, parallel, batch, fit(size), wave)
            rows.append(
                [
                    r.nodes,
                    f"->{s.target}",
                    n,
                    f"{got:.1f} s",
                    f"{e1['total_s']:.1f} s ({(e1['total_s'] / got - 1) * 100:+.0f}%)",
                    f"{e2['total_s']:.1f} s ({(e2['total_s'] / got - 1) * 100:+.0f}%)",
                    f"{max(s.out_of_service(), default=math.nan):.1f} s",
                    f"{e2['node_out_of_service_s']:.1f} s",
                ]
            )
    print(
        f"\n# estimate_switch_s{f' in waves of {wave}' if wave else ''}: constants calibrated on {base.nodes} nodes, "
        "and fitted on every wave of all runs"
    )
    print(
        table(
            rows,
            [
                "nodes",
                "switch",
                "switched",
                "measured (to last resumed)",
                f"model ({base.nodes})",
                "model (fit)",
                "worst node",
                "model: a node out of service",
            ],
        )
    )
    print(f"\n# fit: {fit_text}")
    rows = []
    for p, b, w in (
        (16, 64, 0),
        (32, 128, 0),
        (64, 128, 0),
        (128, 250, 0),
        (256, 1000, 0),
        (64, 128, 128),
        (64, 64, 64),
    ):
        fit_b = fitted(runs, parallel, b)[0]
        e = estimate_switch_s(1000, p, b, fit_b(w or 1000), w)  # the restart and verify of a wave's nodes
        check(e["total_s"] >= 0 and e["apply_batches"] >= 1, f"estimate {e}")
        row = [1000, p, b, w or "all", e["apply_batches"], e["restart_batches"], f"{e['apply_s']:.0f} s"]
        row += [f"{e['restart_s']:.0f} s", f"{e['total_s']:.0f} s", f"{e['node_out_of_service_s']:.0f} s"]
        rows.append([*row, f"{e['mean_node_unavailable_s']:.0f} s"])
    print("\n# 1,000 nodes predicted by the fitted model (apply per wave as measured with parallel " + f"{parallel})")
    print(
        table(
            rows,
            [
                "nodes",
                "parallel",
                "restart_batch",
                "wave_size",
                "apply batches",
                "restart batches",
                "apply",
                "restart",
                "switch",
                "node out of service",
                "node held, mean",
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="32,64", help="node counts, comma-separated (default 32,64)")
    ap.add_argument("--root", type=Path, help="a sandbox root of its own (purged first)")
    ap.add_argument("--port-base", type=int, help="a port base of its own")
    ap.add_argument("--deadline", default="30s", help="how long the switch waits for the busy nodes")
    ap.add_argument("--parallel", type=int, help="repartition.parallel of the scale pool (default: its default)")
    ap.add_argument(
        "--restart-batch", type=int, help="repartition.restart_batch of the scale pool (default: its default)"
    )
    ap.add_argument("--wave-size", type=int, help="repartition.wave_size of the scale pool (default: one wave)")
    ap.add_argument("--no-elastic", action="store_true", help="no elastic step between the two switches")
    ap.add_argument("--keep", action="store_true", help="leave the last sandbox up")
    ap.add_argument("--smoke", action="store_true", help="4 and 8 nodes on a fake Slurm: no sandbox needed")
    args = ap.parse_args(argv)
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.config.model import RepartitionSettings
    from slurm_gpupool.errors import GpupoolError

    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
            runs = smoke(Path(tmp))
            defaults = RepartitionSettings()
            report(runs, defaults.parallel, defaults.restart_batch, "fake Slurm (smoke: no sandbox, no daemons)")
        return 0
    if args.root is None or args.port_base is None:
        ap.error("--root and --port-base are needed: a sandbox of its own")
    if os.geteuid() != 0:
        raise BenchError("the sandbox needs root")
    counts = [int(x) for x in args.nodes.split(",")]
    runs: list[ScaleRun] = []
    failed = ""
    try:
        for n in counts:
            print(f"# measuring {n} nodes ...", file=sys.stderr, flush=True)
            try:
                runs.append(
                    measure(
                        n,
                        args.root.absolute(),
                        args.port_base,
                        args.deadline,
                        args.parallel,
                        args.restart_batch,
                        not args.no_elastic,
                        args.wave_size,
                    )
                )
            except (BenchError, GpupoolError, subprocess.TimeoutExpired) as e:
                if not runs:
                    raise
                failed = f"{n} nodes failed: {e}"  # the smaller counts are still reported
                break
            switches = [round(s.wall_s, 1) for s in runs[-1].switches]
            print(f"#   {n}: up {runs[-1].up_s:.1f} s, switches {switches}", file=sys.stderr, flush=True)
        rep = load_config(args.root.absolute() / "etc" / "gpupool.yaml").repartition
    finally:
        if not args.keep:
            gpupool(args.root, "sandbox", "down", "--purge", "--root", str(args.root))
    check(all(r.killed == 0 for r in runs), f"jobs killed: {[(r.nodes, r.killed) for r in runs]}")
    from slurm_gpupool.sandbox.configs import sandbox_slurm_version

    version = ".".join(str(x) for x in sandbox_slurm_version(dict(os.environ)))  # slurmd -V
    report(
        runs,
        rep.parallel,
        rep.restart_batch,
        f"Slurm {version}" + (f", waves of {rep.wave_size}" if rep.wave_size else ""),
        rep.wave_size,
    )
    if failed:
        raise BenchError(failed)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
