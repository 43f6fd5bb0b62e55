"""Benchmark: status, one metrics scrape, GRES render and the repartitioner's planning at
128, 1,000 and 10,000 synthetic nodes, with their growth per node (#29).

The synthetic cluster is built from the shipped machine descriptions (DGX A100, HGX H100,
PCIe A30, DGX-1 V100, H100 NVL pairs; the node sets and layouts of ``bench_gres_render``):
three nodes in four in layout ``day``, the fourth in ``night``; one in 25 drained by an
admin; a running job on one node in five, and a pending job per ten nodes; an unfinished
run to ``day`` holds the ``night`` nodes in its reservation.  Slurm is the shipped fake
(``slurm_gpupool/slurm/fake.py``) for the in-process figures.  For the whole commands,
``gpupool status --json`` and ``gpupool metrics`` run as processes of the dev venv with a
``/bin/sh`` stand-in for ``sinfo``, ``squeue`` and ``scontrol`` (as ``bench_cli``) that prints
the fake's state as Slurm 22.05 prints it (each node and job copied from the recorded
output in ``tests/fixtures/slurm/22.05``, its fields set from the fake).

Measured per size, medians over repeats, and checked each time (every node shown with the
state it has, the metrics parse, the plan changes the nodes it must):

* ``status`` pure: :func:`~slurm_gpupool.observe.status.pool_status` on what Slurm said;
* ``status --json`` command: the whole process, Slurm's JSON parsed;
* ``metrics`` in process: one scrape (:func:`~slurm_gpupool.observe.metrics.collect`) on the fake,
  warm (what one process has planned per node set it keeps, as ``metrics --listen`` does);
* ``metrics`` command: the whole process;
* ``gres render``: the planned render of every node (``gres render --planned day``), config parsed;
* ``plan``: ``repartition --to night --dry-run``'s plan and description (``Repartitioner.plan``
  and ``describe``);
* ``next step``: one decision of a run to ``night`` over every changing node
  (:func:`~slurm_gpupool.repartition.next_action.next_action`), which the executor asks
  after each step.

The baseline is the smallest size of the same run: per figure, its time per node and the
growth exponent between sizes (1.0: linear; above ``SUPERLINEAR`` is flagged).  ``report
all`` over a million jobs is ``bench_reports``' (a year of 1M jobs), not repeated here.

    python -m benchmarks.bench_scale [--sizes 128,1000,10000] [--repeats 3] [--chart FILE.svg] [--smoke]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_cli import RECORDED, SLURM_ANSWERS, fake_slurm
from benchmarks.bench_gres_render import make_config
from benchmarks.common import BenchError, check, median_times, require_modules, run_main, table, timed_child

SIZES = (128, 1000, 10000)
SMOKE_SIZES = (16, 64)
SUPERLINEAR = 1.15  # growth exponent between two sizes above which a figure is flagged
TARGET_S = 2.0  # status and one scrape at 1,000 nodes (#29)
NOW = dt.datetime(2026, 11, 25, 14, 0, tzinfo=dt.UTC)  # a Wednesday afternoon: layout day is due
RUN_TARGET, SWITCH_TO = "day", "night"
ADMIN_REASON = "fan replaced, burn-in (admin)"
SAMPLE_LINE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$")


@dataclass
class Site:
    """A synthetic cluster: its config, the fake Slurm's state, and what each node was given."""

    root: Path
    cfg: Any  # PoolConfig
    slurm: Any  # FakeSlurm
    nodes: list[str]
    layouts: dict[str, str]  # node -> its active layout
    drained: set[str] = field(default_factory=set)
    busy: set[str] = field(default_factory=set)  # a job runs there
    run_nodes: list[str] = field(default_factory=list)  # the unfinished run's

    @property
    def env(self) -> dict[str, str]:
        """What a ``gpupool`` process of this site runs with (the stand-in Slurm first on PATH)."""
        return {
            "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}",
            "SLURM_GPUPOOL_CONFIG": str(self.root / "pool.yaml"),
            "SLURM_CONF": str(self.root / "etc" / "slurm.conf"),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
        }


def site_raw(n_nodes: int, root: Path) -> dict[str, Any]:
    raw = make_config(n_nodes)
    raw["schedule"] = {
        "timezone": "UTC",
        "default": "night",
        "rules": [{"layout": "day", "days": "mon-sun", "start": "08:00", "end": "20:00"}],
    }
    raw["paths"] = {k: str(root / k.removesuffix("_dir")) for k in ("state_dir", "run_dir", "spool_dir")}
    raw["paths"]["controller_dir"] = str(root / "ctl")
    raw["slurm"] = {"config_dir": str(root / "etc"), "version": "22.05.8"}
    return raw


def build_site(n_nodes: int, root: Path) -> Site:
    """The synthetic cluster of ``n_nodes`` under ``root`` (see the module's docstring)."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.controller.gres_install import render
    from slurm_gpupool.pool.planned import IDS_SIMULATED
    from slurm_gpupool.repartition.journal import Journal
    from slurm_gpupool.slurm.fake import FakeClock, FakeSlurm
    from slurm_gpupool.slurm.types import JobInfo

    root.mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(exist_ok=True)
    raw = site_raw(n_nodes, root)
    (root / "pool.yaml").write_text(yaml.safe_dump(raw))
    cfg = parse_config(raw, str(root / "pool.yaml"), root)
    nodes = cfg.all_nodes()
    rendered = {
        lay: {g.node: g for g in render(cfg, nodes, lay, mig_ids=IDS_SIMULATED).nodes} for lay in ("day", "night")
    }
    clock = FakeClock(NOW.timestamp())
    fake = FakeSlurm(nodes, clock)
    site = Site(root, cfg, fake, nodes, {})
    job_id = 1000
    for i, name in enumerate(nodes):
        layout = "night" if i % 4 == 3 else "day"
        site.layouts[name] = layout
        g, node = rendered[layout][name], fake.nodes_[name]
        node.gres, node.features = g.gres_value(), tuple(g.features)
        if i % 25 == 7:
            node.flags.add("DRAIN")
            node.reason = ADMIN_REASON
            site.drained.add(name)
        gpu = next(k for k in g.counts if k.startswith("gpu:"))
        if i % 5 == 1:
            node.state, node.gres_used = "mixed", f"{gpu}:1(IDX:0)"
            site.busy.add(name)
            job_id += 1
            start = int(NOW.timestamp()) - 3600
            fake.add_job(
                JobInfo(
                    job_id,
                    "RUNNING",
                    frozenset({name}),
                    f"user{i % 37}",
                    "train",
                    86400,
                    start,
                    True,
                    "",
                    f"gres:{gpu}:1",
                )
            )
        if i % 10 == 4:
            job_id += 1
            fake.add_job(
                JobInfo(
                    job_id,
                    "PENDING",
                    frozenset(),
                    f"user{i % 37}",
                    "wait",
                    3600,
                    0,
                    True,
                    "",
                    f"gres:{gpu}:2",
                    state_reason="Resources",
                    submit_time=int(NOW.timestamp()) - 600,
                )
            )
    # an unfinished run to the due layout holds the night nodes in its reservation
    site.run_nodes = [n for n in nodes if site.layouts[n] != RUN_TARGET and n not in site.drained]
    journal = Journal(Path(cfg.paths.controller_dir), clock)
    Path(cfg.paths.controller_dir).mkdir(parents=True, exist_ok=True)
    deadline = NOW.timestamp() + 1800
    journal.start(RUN_TARGET, site.run_nodes, f"gpupool_{RUN_TARGET}", deadline, {n: "night" for n in site.run_nodes})
    fake.create_reservation(f"gpupool_{RUN_TARGET}", site.run_nodes, None, 3600)
    write_slurm_answers(site)
    return site


# -- the stand-in's answers: the fake's state as Slurm 22.05 prints it ----------------------------------


def sinfo_json(site: Site) -> str:
    recorded = json.loads((RECORDED / "sinfo.json").read_text())
    template = recorded["nodes"][0]
    nodes = []
    for name, n in site.slurm.nodes_.items():
        e = copy.copy(template)
        feats = ",".join(n.features)
        e.update(
            name=name,
            hostname=name,
            features=feats,
            active_features=feats,
            gres=n.gres,
            gres_used=n.gres_used,
            state=n.state,
            state_flags=sorted(n.flags),
            reason=n.reason,
            partitions=list(n.partitions),
            tres_used=None,
        )
        nodes.append(e)
    return json.dumps({**recorded, "nodes": nodes})


def squeue_json(site: Site) -> str:
    from slurm_gpupool.slurm.types import hostlist

    recorded = json.loads((RECORDED / "squeue.json").read_text())
    template = recorded["jobs"][0]
    jobs = []
    for j in site.slurm.jobs():
        e = copy.copy(template)
        e.update(
            job_id=j.job_id,
            job_state=j.state,
            nodes=hostlist(j.nodes) if j.nodes else "",
            user_name=j.user,
            name=j.name,
            time_limit=(j.time_limit_s or 0) // 60,
            start_time=j.start_time,
            requeue=j.requeue,
            resv_name=j.reservation,
            tres_per_node=j.gres,
            state_reason=j.state_reason or "None",
            node_count=1,
            submit_time=j.submit_time,
        )
        jobs.append(e)
    return json.dumps({**recorded, "jobs": jobs})


def reservations_text(site: Site) -> str:
    from slurm_gpupool.slurm.parse import slurm_time
    from slurm_gpupool.slurm.types import hostlist

    lines = []
    for r in site.slurm.reservations().values():
        lines.append(
            f"ReservationName={r.name} StartTime={slurm_time(r.start)} EndTime={slurm_time(r.end)} "
            f"Duration=01:00:00 Nodes={hostlist(r.nodes)} NodeCnt={len(r.nodes)} CoreCnt=0 Features=(null) "
            f"PartitionName=(null) Flags={','.join(sorted(r.flags))},SPEC_NODES TRES=cpu=0 Users=root "
            "Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a"
        )
    return "\n".join(lines) + "\n" if lines else "No reservations in the system\n"


def write_slurm_answers(site: Site) -> None:
    out = site.root / "slurm"
    out.mkdir(exist_ok=True)
    (out / "sinfo.json").write_text(sinfo_json(site))
    (out / "squeue.json").write_text(squeue_json(site))
    (out / "reservations.txt").write_text(reservations_text(site))
    shutil.copy(RECORDED / "ping.txt", out / "ping.txt")
    fake_slurm(site.root / "bin", {k: out / v for k, v in SLURM_ANSWERS.items()})


# -- what is measured, and its checks ----------------------------------------------------------------


def status_pure(site: Site) -> Callable[[], dict[str, Any]]:
    from slurm_gpupool.observe.status import pool_status
    from slurm_gpupool.repartition.journal import Journal

    infos, resv = site.slurm.nodes(), site.slurm.reservations()
    journal = Journal(Path(site.cfg.paths.controller_dir)).load().data
    return lambda: pool_status(site.cfg, infos, journal, resv, NOW)


def check_status(site: Site, st: dict[str, Any]) -> None:
    """Every node once, with its active layout, its drain and the run's state."""
    rows = {n["node"]: n for n in st["nodes"]}
    check(len(st["nodes"]) == len(site.nodes) and set(rows) == set(site.nodes), "status does not show every node once")
    for name in site.nodes:
        row = rows[name]
        check(row["active"] == site.layouts[name], f"status: {name} active {row['active']}, not {site.layouts[name]}")
        check(("+drain" in row["slurm_state"]) == (name in site.drained), f"status: {name} drain shown wrongly")
    draining = sum(1 for r in rows.values() if r["state"] == "draining")
    check(draining == len(site.run_nodes), f"status: {draining} nodes draining, not the run's {len(site.run_nodes)}")


def metrics_scrape(site: Site) -> Callable[[], str]:
    from slurm_gpupool.observe.metrics import collect

    return lambda: collect(site.cfg, site.slurm, scope="all", now=NOW).text()


def parse_metrics(text: str) -> dict[str, list[str]]:
    """The Prometheus text as family -> sample lines; a line that does not parse fails."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        check(bool(SAMPLE_LINE.match(line)), f"metrics: a line does not parse: {line[:200]!r}")
        name = line.split("{", 1)[0].split(" ", 1)[0]
        float(line.rsplit(" ", 1)[1].replace("+Inf", "inf"))
        out.setdefault(name, []).append(line)
    return out


def check_metrics(site: Site, text: str) -> None:
    fams = parse_metrics(text)
    check(fams.get("gpupool_slurm_up") == ["gpupool_slurm_up 1"], "metrics: Slurm not read")
    info = fams.get("gpupool_node_layout_info", [])
    check(len(info) == len(site.nodes), f"metrics: {len(info)} nodes' layout info, not {len(site.nodes)}")
    drained = [ln for ln in fams.get("gpupool_node_drained", []) if ln.endswith(" 1")]
    check(len(drained) == len(site.drained), f"metrics: {len(drained)} drained, not {len(site.drained)}")
    cap = sum(float(ln.rsplit(" ", 1)[1]) for ln in fams.get("gpupool_node_capacity_gpu_equivalents", []))
    check(cap > 0, "metrics: no capacity")


def gres_render(site: Site) -> Callable[[], Any]:
    """``gres render --planned day`` of every node, the config parsed each time (as the
    command does: a parsed config keeps what it planned per node set)."""
    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.controller.gres_install import render
    from slurm_gpupool.pool.planned import IDS_SIMULATED

    raw = yaml.safe_load((site.root / "pool.yaml").read_text())
    return lambda: render(parse_config(raw, site.cfg.source, site.root), site.nodes, "day", mig_ids=IDS_SIMULATED)


def check_render(site: Site, rendered: Any) -> None:
    check(len(rendered.nodes) == len(site.nodes), f"render: {len(rendered.nodes)} nodes, not {len(site.nodes)}")
    check(rendered["nodes.conf"].count("NodeName=") >= 5, "render: nodes.conf lacks node sets")


def expected_changing(site: Site) -> set[str]:
    """A switch to SWITCH_TO changes every node not drained by an admin that is in another
    layout, or that the unfinished run left midway."""
    midway = set(site.run_nodes)
    return {n for n in site.nodes if n not in site.drained and (site.layouts[n] != SWITCH_TO or n in midway)}


def plan(site: Site) -> Callable[[], dict[str, Any]]:
    from slurm_gpupool.repartition.executor import Repartitioner

    rp = Repartitioner(site.cfg, site.slurm, clock=site.slurm.clock)

    def once() -> dict[str, Any]:
        p = rp.plan(SWITCH_TO)
        return rp.describe(p, 1800, False)

    return once


def check_plan(site: Site, described: dict[str, Any]) -> None:
    changing = {n["node"] for n in described["nodes"] if n["action"] == "change"}
    check(
        changing == expected_changing(site), f"plan: {len(changing)} nodes change, not {len(expected_changing(site))}"
    )
    with_jobs = {n["node"] for n in described["nodes"] if n["jobs"]}
    check(with_jobs == site.busy, f"plan: jobs shown on {len(with_jobs)} nodes, not {len(site.busy)}")


def run_under_way(site: Site) -> tuple[dict[str, Any], Any]:
    """(the journal, the cluster view) of a run to SWITCH_TO over every changing node: reserved,
    every node waiting for its jobs or free to apply."""
    from slurm_gpupool.repartition.journal import RESERVED, Journal
    from slurm_gpupool.repartition.next_action import ClusterView
    from slurm_gpupool.slurm.types import Reservation

    changing = sorted(expected_changing(site))
    j = Journal(site.root / "ctl-next", site.slurm.clock)
    j.dir.mkdir(exist_ok=True)
    j.start(SWITCH_TO, changing, f"gpupool_{SWITCH_TO}", NOW.timestamp() + 1800, dict.fromkeys(changing, "day"))
    j.data["run"]["steps"] = [RESERVED]
    start = dt.datetime.fromtimestamp(NOW.timestamp() - 60)
    resv = Reservation(f"gpupool_{SWITCH_TO}", frozenset(changing), start, start + dt.timedelta(hours=2))
    return j.data, ClusterView(site.slurm.nodes(), tuple(site.slurm.jobs()), {resv.name: resv})


def next_step(site: Site) -> Callable[[], tuple]:
    """One decision of that run, as the executor asks after each step (the journal read too)."""
    from slurm_gpupool.repartition.next_action import Policy, journal_state, next_action

    data, view = run_under_way(site)
    return lambda: next_action(journal_state(data), view, NOW.timestamp(), Policy())


def check_next_step(site: Site, step: tuple) -> None:
    applies = {a.node for a in step if type(a).__name__ == "Apply"}
    free = expected_changing(site) - site.busy
    check(applies == free, f"next step: {len(applies)} nodes applied, not the {len(free)} free ones")


def command(site: Site, argv: list[str]) -> Callable[[], str]:
    gpupool = str(Path(sysconfig.get_path("scripts")) / "gpupool")
    if not Path(gpupool).exists():
        raise BenchError(f"no {gpupool}: install the package into this interpreter's venv (scripts/bootstrap dev)")
    return lambda: timed_child([gpupool, *argv], site.env)[2]


# (name, what is timed on a site, the check of its result)
Measure = tuple[str, Callable[[Site], Callable[[], Any]], Callable[[Site, Any], None]]
MEASURES: list[Measure] = [
    ("status (pure)", status_pure, check_status),
    (
        "status --json (command)",
        lambda s: command(s, ["status", "--json"]),
        lambda s, out: check_status(s, json.loads(out)),
    ),
    ("metrics scrape (in process, warm)", metrics_scrape, check_metrics),
    ("metrics (command)", lambda s: command(s, ["metrics"]), check_metrics),
    ("gres render --planned (all nodes)", gres_render, check_render),
    ("repartition plan + dry-run", plan, check_plan),
    ("repartition next step", next_step, check_next_step),
]


def measure_size(
    n_nodes: int, root: Path, repeats: int, only: set[str] | None = None
) -> dict[str, tuple[float, float]]:
    """name -> (median wall s, median CPU s) of each measure on a site of ``n_nodes``; every
    result checked."""
    site = build_site(n_nodes, root)
    out = {}
    for name, make, ok in MEASURES:
        if only is not None and name not in only:
            continue
        fn = make(site)
        got: list[Any] = []
        wall, cpu, _ = median_times(lambda fn=fn, got=got: got.append(fn()), repeats)
        for result in got:  # every repeat's
            ok(site, result)
        out[name] = (wall, cpu)
    return out


def growth(sizes: list[int], times: list[float]) -> list[float]:
    """The exponent k of t ~ n^k between consecutive sizes (1.0: linear)."""
    return [
        math.log(t2 / t1) / math.log(n2 / n1) if t1 > 0 and t2 > 0 else float("nan")
        for (n1, t1), (n2, t2) in zip(zip(sizes, times), zip(sizes[1:], times[1:]))
    ]


def report(sizes: list[int], results: dict[int, dict[str, tuple[float, float]]], repeats: int) -> list[str]:
    """Print the table; returns the figures flagged superlinear."""
    print(
        f"# scale benchmark, {dt.date.today()}, Python {platform.python_version()}, {platform.machine()}, "
        f"{repeats} repeats, CPU medians (wall in brackets)"
    )
    rows, flagged = [], []
    for name, *_ in MEASURES:
        if name not in results[sizes[0]]:
            continue
        cpu = [results[n][name][1] for n in sizes]
        wall = [results[n][name][0] for n in sizes]
        ks = growth(sizes, cpu)
        super_ = [k for k in ks[-1:] if k > SUPERLINEAR]
        if super_:
            flagged.append(name)
        rows.append(
            [name]
            + [f"{c * 1e3:.0f} ms ({w * 1e3:.0f})" for c, w in zip(cpu, wall)]
            + [f"{c / n * 1e6:.0f} us" for c, n in zip(cpu, sizes)]
            + [" / ".join(f"{k:.2f}" for k in ks) + (" SUPERLINEAR" if super_ else "")]
        )
    heads = [f"{n:,} nodes" for n in sizes] + [f"per node @{n:,}" for n in sizes] + ["growth k (t ~ n^k)"]
    print(table(rows, ["measure", *heads]))
    print(f"growth k between consecutive sizes; the last above {SUPERLINEAR} is flagged SUPERLINEAR")
    return flagged


def target_verdict(sizes: list[int], results: dict[int, dict[str, tuple[float, float]]]) -> None:
    """Status and one scrape at 1,000 nodes, measured or extrapolated from the two largest sizes."""
    for name in ("status --json (command)", "metrics (command)"):
        if name not in results[sizes[0]]:
            continue
        walls, cpus = ([results[n][name][i] for n in sizes] for i in (0, 1))
        if 1000 in sizes:
            wall, cpu, how = walls[sizes.index(1000)], cpus[sizes.index(1000)], "measured"
        elif len(sizes) > 1:  # from the two largest, never better than linear
            k = max(1.0, growth(sizes[-2:], cpus[-2:])[0])
            wall, cpu = (x[-1] * (1000 / sizes[-1]) ** k for x in (walls, cpus))
            how = f"extrapolated (k {k:.2f})"
        else:
            continue
        verdict = "PASS" if cpu < TARGET_S else "FAIL"  # CPU: the wall time of a loaded VM is its tenants'
        got = f"{cpu:.2f} s CPU, {wall:.2f} s wall, {how}"
        print(f"target: {name} under {TARGET_S:g} s at 1,000 nodes: {verdict} ({got})")


def chart(sizes: list[int], results: dict[int, dict[str, tuple[float, ...]]], path: Path) -> None:
    """CPU time per node against nodes (log-log): a flat line is linear, a rising one is not."""
    require_modules("matplotlib", why="--chart")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "gpupool-scale", "font.size": 9})
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, *_ in MEASURES:
        if name in results[sizes[0]]:
            ax.plot(sizes, [results[n][name][1] / n * 1e6 for n in sizes], marker="o", label=name)
    ax.set(xscale="log", yscale="log", xlabel="nodes", ylabel="CPU time per node (µs)")
    ax.set_title("gpupool at scale: time per node (flat = linear)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xticks(sizes, labels=[f"{n:,}" for n in sizes])
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    print(f"chart: {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="node counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", action="append", help="only this measure (repeatable)")
    ap.add_argument("--chart", type=Path, help="also draw time per node against nodes into this SVG file")
    ap.add_argument("--smoke", action="store_true", help=f"sizes {SMOKE_SIZES}, one repeat: the same path in seconds")
    args = ap.parse_args(argv)
    sizes = list(SMOKE_SIZES) if args.smoke else sorted(int(x) for x in args.sizes.split(","))
    repeats = 1 if args.smoke else args.repeats
    only = set(args.only) if args.only else None
    if only and only - {m[0] for m in MEASURES}:
        raise BenchError(f"no measure {', '.join(sorted(only - {m[0] for m in MEASURES}))}")
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-bench-scale-"))
    try:
        results = {n: measure_size(n, tmp / str(n), repeats, only) for n in sizes}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    flagged = report(sizes, results, repeats)
    target_verdict(sizes, results)
    if args.chart:
        chart(sizes, results, args.chart)
    print("report all over a million jobs: see bench_reports (python -m benchmarks.bench_reports)")
    if flagged:
        print(f"superlinear: {', '.join(flagged)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
