"""Benchmark: layout switches on the sandbox cluster, and what they predict for 1,000 nodes.

Runs ``--cycles`` day→night→… switches of every sandbox node (idle cluster)
through the real repartitioner, in process so each phase can be timed:
reservation, per-node ``srun … node apply``, GRES install, the three restart
commands, verification.  Reports medians of the whole-cluster switch time and
of each node's unavailability (drain to resume, and apply start to resume),
then feeds the measured phase medians to ``core/switch_plan.estimate_switch_s``
for 1,000 nodes under a few ``parallel``/``restart_batch`` settings, to show how
restarts are batched.  Needs ``gpupool sandbox up``; leaves it in night.

    python -m benchmarks.bench_repartition [--cycles 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from collections import defaultdict
from typing import Any

from benchmarks.common import table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3, help="switches in each direction")
    args = ap.parse_args()

    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.core.policy.switch_plan import Timings, estimate_switch_s
    from slurm_gpupool.repartition.actions import BeginVerify, Done
    from slurm_gpupool.repartition.executor import Repartitioner
    from slurm_gpupool.repartition.restarts import Restarter, run_command
    from slurm_gpupool.sandbox.cluster import Sandbox
    from slurm_gpupool.slurm.cluster import SlurmCluster
    from slurm_gpupool.slurm.runner import SlurmRunner

    sb = Sandbox()
    env = {**os.environ, **sb.env()}
    os.environ.update(sb.env())
    cfg = load_config(sb.root / "etc" / "gpupool.yaml")
    phases: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                phases[name].append(time.monotonic() - t)

        return wrapper

    def verify_timed(do: Any, into: list[float]) -> Any:
        """Per node, its verification: from the wave's restart done (``verifying``) to done."""
        began: dict[str, float] = {}

        def wrapper(action: Any) -> None:
            if isinstance(action, BeginVerify):
                began[action.node] = time.monotonic()
            do(action)
            if isinstance(action, Done) and action.node in began:
                into.append(time.monotonic() - began.pop(action.node))

        return wrapper

    def command(argv: Any, timeout: float) -> Any:
        r = run_command(argv, timeout)
        words = set(argv)
        kind = "stop" if "stop" in words else "start" if "start" in words else "ctld"
        phases[f"restart:{kind}"].append(r.seconds)
        return r

    switch_s: list[float] = []
    drained: list[float] = []
    out_of_service: list[float] = []
    nodes = 0
    layouts = ["day", "night"] * args.cycles
    for target in layouts:
        rp = Repartitioner(cfg, SlurmCluster(SlurmRunner(env)), Restarter(cfg.repartition, run=command))
        rp._reserve = timed("reserve", rp._reserve)  # type: ignore[method-assign]
        rp._srun_apply = timed("apply", rp._srun_apply)  # type: ignore[method-assign]
        rp._install_gres = timed("install", rp._install_gres)  # type: ignore[method-assign]
        rp._do = verify_timed(rp._do, phases["verify"])  # type: ignore[method-assign]
        report = rp.run(target)
        if report.exit_code != 0:
            raise SystemExit(f"switch to {target} failed: {report.to_dict()}")
        nodes = len(report.nodes)
        switch_s.append(report.seconds)
        drained += [v["drained_s"] for v in report.nodes.values() if v["drained_s"] is not None]
        out_of_service += [v["out_of_service_s"] for v in report.nodes.values() if v["out_of_service_s"] is not None]

    med = statistics.median

    def row(name: str, xs: list[float], digits: int = 1) -> list[str]:
        return [name, *(f"{f(xs):.{digits}f} s" for f in (med, min, max))]

    print(f"# repartition on the sandbox, {datetime.date.today()}, {len(layouts)} switches of {nodes} idle nodes")
    print(
        table(
            [
                row("whole-cluster switch", switch_s),
                row("per node: drain to resume", drained),
                row("per node: apply start to resume", out_of_service),
                *[row(f"phase {k}", v, 2) for k, v in sorted(phases.items())],
            ],
            ["measure", "median", "min", "max"],
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
        rows.append(
            [
                n,
                parallel,
                batch,
                e["apply_waves"],
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


if __name__ == "__main__":
    main()
