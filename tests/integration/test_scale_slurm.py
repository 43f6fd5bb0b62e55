"""#29 in CI: the scale benchmark's small version, on a sandbox of 16 emulated DGX/HGX nodes.

``benchmarks/bench_sandbox_scale.py`` measures 32 to 128 nodes on every release (the figures
are in docs/scale-sandbox.md); this runs the same code on 16 nodes as a correctness test, not
a timing: long jobs on two nodes, a full day→night and night→day switch (the busy nodes
skipped at the deadline, their jobs running on) with an elastic step between them (slice jobs
waiting at night: a quarter of the nodes to day), then, with the long jobs gone, every node to
night in waves of eight (``repartition.wave_size``: one slurmctld restart a wave, each node
out of service for its own wave), and a job on every node.  It proves that every node switches, that no job is killed,
and that every hook succeeds (each job completed in one run, no node drained, and every
node's hook statistics count no failure and no health drain).

A sandbox of its own (root ``<test root>-scale``, ports above the worker's): the worker's
five-node sandbox keeps running beside it.  In CI it runs on one release a commit, in
rotation (``$SLURM_GPUPOOL_SCALE_RELEASE``, which scripts/test draws from the commit's seed;
why: docs/development.md).  Without that variable it runs on any release.  The 128-node runs of every release are in
docs/scale-sandbox.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.sandbox.cluster import Sandbox
from tests.exposition import parse, series

from .conftest import TEST_PORT_BASE, TEST_ROOT, SandboxHandle, picked_elsewhere
from .repartition_support import (
    GPUPOOL,
    assert_converged,
    never_requeued,
    nodes_info,
    report_of,
    wait_jobs_done,
)

pytestmark = [pytest.mark.integration, pytest.mark.scale]

NODES = 16
WAVE = 8  # the last switch's repartition.wave_size
# the worker's sandbox uses its base .. base+100+nodes; the next worker's starts 300 above
PORT_BASE = TEST_PORT_BASE + 150


def rotated_here() -> None:
    """Skip unless the rotation gives the 16-node run to this release: scripts/test names it
    ``host`` or a container's series, as ``$SLURM_GPUPOOL_CONTAINER`` does (a series given by
    hand also matches the host's own)."""
    if (elsewhere := picked_elsewhere("SLURM_GPUPOOL_SCALE_RELEASE")) is not None:
        pytest.skip(f"the 16-node run is on {elsewhere}; unset it to run anywhere")


@pytest.fixture
def scale_root() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root: the sandbox runs Slurm daemons as root and mknods device files")
    rotated_here()
    root = TEST_ROOT.with_name(f"{TEST_ROOT.name}-scale")
    yield root
    Sandbox(root).down(purge=True)


def handle(root: Path) -> SandboxHandle:
    sb = Sandbox(root)
    names = [n["name"] for n in sb.status()["nodes"]]
    return SandboxHandle(sandbox=sb, nodes=dict.fromkeys(names, ""), env=sb.daemon_env())


def test_sixteen_nodes_switch_to_night_and_back_with_jobs_running_and_every_hook_succeeds(scale_root):
    from benchmarks.bench_sandbox_scale import measure

    # measure() checks each switch: every idle node done, the busy ones skipped (kept); and the
    # elastic step between them: a quarter of the nodes to day for the slice jobs waiting, which
    # then all complete, and those nodes kept by the switch to day
    run = measure(NODES, scale_root, PORT_BASE, "20s")
    assert run.killed == 0, run.busy
    assert len(run.busy) == 2
    quarter = NODES // 4
    switched = {sw.target: len(sw.done()) for sw in run.switches}
    assert switched == {"night": NODES - 2, "day (elastic)": quarter, "day": NODES - 2 - quarter}, switched
    for sw in run.switches:
        assert len(sw.out_of_service()) == len(sw.done()) and min(sw.out_of_service()) > 0, sw.target
        assert sw.ctld_restarts() <= 1, sw.target  # the sampler may miss a fast restart, never two
    sb = handle(scale_root)
    assert len(sb.nodes) == NODES
    left = sb.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    if left:  # measure() cancelled the long jobs: they may still be completing
        wait_jobs_done(sb, left)

    # every node to night, the formerly busy ones too, in waves of WAVE nodes
    # (repartition.wave_size): each wave applied, restarted, verified and resumed before the next
    config = scale_root / "gpupool-waves.yaml"
    raw = yaml.safe_load((scale_root / "etc" / "gpupool.yaml").read_text())
    raw["repartition"]["wave_size"] = WAVE
    config.write_text(yaml.safe_dump(raw))
    log = scale_root / "log" / "slurmctld.log"
    started = log.read_text().count("slurmctld version")
    proc = sb.run(
        [*GPUPOOL, "--config", str(config), "repartition", "--to", "night", "--json"], timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(proc)
    nodes = report["nodes"]
    outcomes = {k: v["outcome"] for k, v in nodes.items()}
    assert {outcomes.get(n) for n in run.busy} == {"done"}, outcomes
    assert_converged(sb, dict.fromkeys(sb.nodes, "night"))
    switched = sorted((v["reserved_s"], v["out_of_service_s"]) for v in nodes.values() if v["outcome"] == "done")
    waves = -(-len(switched) // WAVE)
    assert waves >= 2, switched
    assert log.read_text().count("slurmctld version") - started == waves == report["waves"]  # one restart a wave
    # a node of the last wave was held (reserved) through every wave, but out of service for
    # its own only, from its apply to its release: in one wave of idle nodes, the two differ
    # by the seconds before the apply began
    for reserved, out_of_service in switched[-WAVE:]:
        assert out_of_service < 0.75 * reserved, switched

    # a job on every node: its Prolog, TaskProlog and Epilog run there
    jobs, infos = [], nodes_info(sb)
    for node in sorted(sb.nodes):
        (whole,) = infos[node].gres_counts()  # night: 8 whole GPUs of the machine's type
        argv = ["sbatch", "--parsable", "-w", node, f"--gres={whole}:1", "-t", "5", "-o", "/dev/null"]
        jobs.append(sb.run([*argv, "--wrap", 'test -n "$CUDA_VISIBLE_DEVICES"']).stdout.strip().split(";")[0])
    states = wait_jobs_done(sb, jobs)
    assert set(states.values()) == {"COMPLETED"}, states
    assert never_requeued(sb, jobs) == {j: ["COMPLETED"] for j in jobs}
    infos = nodes_info(sb)
    assert not [n for n, i in infos.items() if i.drained], {n: i.reason for n, i in infos.items()}

    # every node's hook statistics: no hook failed open, no health drain
    samples = parse(sb.gpupool("metrics").stdout)
    for name in ("gpupool_hook_failures_total", "gpupool_health_drains_total"):
        counts = series(samples, name)  # per node, each hook (Prolog, Epilog, ...) or drainer
        assert {labels["node"] for labels, _ in counts} == set(sb.nodes), name
        assert len(counts) >= 3 * NODES and not [x for x in counts if x[1]], (name, counts)
