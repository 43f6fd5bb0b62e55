"""Benchmark: layout switches on the sandbox cluster, and what they predict for 1,000 nodes.

Runs ``--cycles`` day→night→… switches of every sandbox node (idle cluster)
through the real repartitioner, in process so each phase can be timed:
reservation, per-node ``srun … node apply``, GRES install, the three restart
commands, verification.  Reports medians of the whole-cluster switch time and
of each node's unavailability (drain to resume, and apply start to resume),
then feeds the measured phase medians to ``core/switch_plan.estimate_switch_s``
for 1,000 nodes under a few ``parallel``/``restart_batch`` settings, to show how
restarts are batched.  The same-run baseline is Slurm's own part of a switch, the
restart commands (stop slurmds, restart slurmctld, start slurmds): the ratio says how
long a switch takes per second of Slurm restarting.  Needs ``gpupool sandbox up``;
leaves it in night.

``--smoke`` needs no Slurm: the same repartitioner, phase timing and estimate on the
shipped pool's 5 simulated nodes, with the tests' Slurm of dictionaries (slurm_gpupool/slurm/fake.py,
set up by tests/unit/repartition_site.py), a clock that never waits, and restart commands that only
re-register the nodes; it checks every switch ends with every node switched.

    python -m benchmarks.bench_repartition [--cycles 3] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import TOP, check, run_main, table

RESTARTS = ("restart:stop", "restart:ctld", "restart:start")


def sandbox_site() -> tuple[Any, Any, dict[str, Any], Callable[[Sequence[str], float], Any]]:
    """(config, Slurm, Repartitioner keywords, restart command runner) of the running sandbox."""
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.repartition.restarts import run_command
    from slurm_gpupool.sandbox.cluster import Sandbox
    from slurm_gpupool.slurm.cluster import SlurmCluster
    from slurm_gpupool.slurm.runner import SlurmRunner

    sb = Sandbox()
    env = {**os.environ, **sb.env()}
    os.environ.update(sb.env())
    cfg = load_config(sb.root / "etc" / "gpupool.yaml")
    return cfg, SlurmCluster(SlurmRunner(env)), {}, run_command


def stand_in_site(tmp: Path) -> tuple[Any, Any, dict[str, Any], Callable[[Sequence[str], float], Any]]:
    """The same, without Slurm: the tests' fake Slurm on simulated GPUs (in night), a clock
    that never waits, and restart commands that re-register the nodes they start."""
    from ClusterShell.NodeSet import NodeSet

    from slurm_gpupool.repartition.restarts import CommandResult

    sys.path.insert(0, str(TOP))
    from tests.unit.repartition_site import make_site

    with contextlib.redirect_stdout(io.StringIO()):  # each node apply's report
        site = make_site(tmp)
    cfg, slurm, clock = site.cfg, site.slurm, site.clock

    def command(argv: Sequence[str], timeout_s: float) -> CommandResult:
        if "start" in argv and "-w" in argv:
            slurm.register_from_files(list(NodeSet(argv[list(argv).index("-w") + 1])))
        return CommandResult(list(argv), 0, "", 0.0)

    return cfg, slurm, {"clock": clock, "poll_s": 0.05}, command


def measure(cycles: int, site: tuple) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """(whole-switch and per-node figures, phase times, nodes) of ``cycles`` day/night round trips."""
    from slurm_gpupool.repartition.actions import BeginVerify, Done
    from slurm_gpupool.repartition.executor import Repartitioner
    from slurm_gpupool.repartition.restarts import Restarter

    cfg, slurm, extra, run = site
    phases: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                phases[name].append(time.monotonic() - t)

        return wrapper

    def verify_timed(do: Any) -> Any:
        """Per node, its verification: from the wave's restart done (``verifying``) to done."""
        began: dict[str, float] = {}

        def wrapper(action: Any) -> None:
            if isinstance(action, BeginVerify):
                began[action.node] = time.monotonic()
            do(action)
            if isinstance(action, Done) and action.node in began:
                phases["verify"].append(time.monotonic() - began.pop(action.node))

        return wrapper

    def command(argv: Any, timeout: float) -> Any:
        r = run(argv, timeout)
        words = set(argv)
        kind = "stop" if "stop" in words else "start" if "start" in words else "ctld"
        phases[f"restart:{kind}"].append(r.seconds)
        return r

    figures: dict[str, list[float]] = {"switch": [], "drained": [], "out_of_service": []}
    nodes = 0
    for target in ["day", "night"] * cycles:
        rp = Repartitioner(cfg, slurm, Restarter(cfg.repartition, run=command), progress=lambda _m: None, **extra)
        rp._reserve = timed("reserve", rp._reserve)  # type: ignore[method-assign]
        rp._srun_apply = timed("apply", rp._srun_apply)  # type: ignore[method-assign]
        rp._install_gres = timed("install", rp._install_gres)  # type: ignore[method-assign]
        rp._do = verify_timed(rp._do)  # type: ignore[method-assign]
        report = rp.run(target)
        if report.exit_code != 0:
            raise SystemExit(f"switch to {target} failed: {report.to_dict()}")
        outcomes = {n: v["outcome"] for n, v in report.nodes.items()}
        check(bool(outcomes) and set(outcomes.values()) == {"done"}, f"switch to {target}: {outcomes}")
        nodes = len(report.nodes)
        figures["switch"].append(report.seconds)
        figures["drained"] += [v["drained_s"] for v in report.nodes.values() if v["drained_s"] is not None]
        figures["out_of_service"] += [
            v["out_of_service_s"] for v in report.nodes.values() if v["out_of_service_s"] is not None
        ]
    check(all(phases[k] for k in ("reserve", "apply", "install", "verify", *RESTARTS)), f"phases: {dict(phases)}")
    return figures, phases, nodes


def report(figures: dict[str, list[float]], phases: dict[str, list[float]], nodes: int, switches: int, where: str):
    from slurm_gpupool.core.policy.switch_plan import Timings, estimate_switch_s

    med = statistics.median
    slurm_s = sum(med(phases[k]) for k in RESTARTS)

    def row(name: str, xs: list[float], digits: int = 1) -> list[str]:
        ratio = f"{med(xs) / slurm_s:.2f}x" if slurm_s > 0 else "n/a"
        return [name, *(f"{f(xs):.{digits}f} s" for f in (med, min, max)), ratio]

    print(f"# repartition, {where}, {datetime.date.today()}, {switches} switches of {nodes} idle nodes")
    print(f"# baseline: Slurm's restarts (stop slurmds + restart slurmctld + start slurmds), median {slurm_s:.2f} s")
    print(
        table(
            [
                row("whole-cluster switch", figures["switch"]),
                row("per node: drain to resume", figures["drained"]),
                row("per node: apply start to resume", figures["out_of_service"]),
                *[row(f"phase {k}", v, 2) for k, v in sorted(phases.items())],
            ],
            ["measure", "median", "min", "max", "/ Slurm restarts"],
        )
    )
    t = Timings(
        reserve_s=med(phases["reserve"]),
        apply_s=med(phases["apply"]),
        install_s=med(phases["install"]),
        ctld_restart_s=med(phases["restart:ctld"]),
        slurmd_stop_s=med(phases["restart:stop"]),
        slurmd_start_s=med(phases["restart:start"]),
        verify_s=max(phases["verify"]),
    )
    rows = []
    for n, parallel, batch in [(nodes, 16, 64), (1000, 16, 64), (1000, 64, 128), (1000, 128, 250), (1000, 256, 1000)]:
        e = estimate_switch_s(n, parallel, batch, t)
        check(e["total_s"] >= 0 and e["apply_batches"] >= 1, f"estimate for {n} nodes: {e}")
        rows.append(
            [
                n,
                parallel,
                batch,
                e["apply_batches"],
                e["restart_batches"],
                f"{e['restart_s']:.0f} s",
                f"{e['total_s']:.0f} s",
                f"{e['worst_node_unavailable_s']:.0f} s",
            ]
        )
    print("\n# estimate from the measured phase medians (idle nodes; a slurmd batch assumed as fast as here)")
    print(
        table(
            rows,
            ["nodes", "parallel", "restart_batch", "apply waves", "batches", "restarts", "switch", "worst node"],
        )
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3, help="switches in each direction")
    ap.add_argument("--smoke", action="store_true", help="one round trip on a fake Slurm: no sandbox needed")
    args = ap.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
            figures, phases, nodes = measure(1, stand_in_site(Path(tmp)))
            report(figures, phases, nodes, 2, "fake Slurm (smoke: no sandbox), simulated GPUs")
        return 0
    figures, phases, nodes = measure(args.cycles, sandbox_site())
    report(figures, phases, nodes, 2 * args.cycles, "sandbox Slurm")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
