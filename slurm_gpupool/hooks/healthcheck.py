"""``gpupool-healthcheck``: Slurm's HealthCheckProgram (root, on the node, every
``HealthCheckInterval`` and when slurmd starts).

It checks every GPU of the node (ECC, row remapping, temperature, recent Xids, MIG drift:
the Prolog's rules, ``hooks/health.py``), records the result in the root-owned
``health.json`` (``gpupool health --show``), and on a failure drains the node with a reason
naming slurm_gpupool and the problem (``scontrol update nodename=N state=drain reason=...``;
a HealthCheckProgram, unlike a Prolog, may call Slurm) and exits 1.  It resumes nothing: an
admin decides.  Like the other hooks it reads ``gpupool-hooks.json``, not the YAML config,
and loads neither click nor YAML: slurmd runs it on every node, all day.  Its own errors
fail open (logged, exit 0).
"""

from __future__ import annotations

import os
import sys

from slurm_gpupool.hooks.cli import wants_help
from slurm_gpupool.hooks.runtime import (
    HookError,
    count_event,
    load_settings,
    log,
    node_name,
    node_path,
    read_json,
    record_health,
    run_hook,
)

USAGE = """
usage: gpupool-healthcheck

Slurm HealthCheckProgram for slurm_gpupool (slurm.conf: HealthCheckProgram=...,
with SLURM_CONF set by a wrapper when slurm.conf is not /etc/slurm/slurm.conf).
It checks every GPU of the node; on a failure it drains the node with the reason
and exits 1. `gpupool health --show` prints the last result.
"""
REASON_MAX = 200  # Slurm keeps a node's reason short; ours starts with "gpupool: "


def reason(problems: list[str]) -> str:
    text = "gpupool: " + "; ".join(problems)
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def _body(env: dict[str, str]) -> int:
    settings = load_settings(env)
    node = node_name(env)
    state_dir = node_path(settings, "state_dir", node)
    try:
        state = read_json(os.path.join(state_dir, "node-state.json"))
    except FileNotFoundError:
        state = {"node": node, "gpus": []}  # never applied: the GPUs are still checked
    from slurm_gpupool.hooks.health import check_gpus
    from slurm_gpupool.hw import open_backend

    with open_backend(node, settings.get("sim_dir")) as backend:
        problems = check_gpus(backend, state, range(backend.gpu_count()), settings)
    record_health(state_dir, "fail" if problems else "ok", "healthcheck", None, problems)
    sys.stdout.write(f"node {node}: {'fail' if problems else 'ok'}\n" + "".join(f"  {p}\n" for p in problems))
    if not problems:
        return 0
    log("healthcheck", None, "GPU health check failed: " + "; ".join(problems), 3)
    import subprocess  # only to drain: slurmd runs this every HealthCheckInterval on every node (#29)

    argv = ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason(problems)}"]
    drained = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=30, check=False)
    if drained.returncode != 0:
        raise HookError(f"scontrol update nodename={node} state=drain: {drained.stderr.strip()}")
    count_event(state_dir, "health_drains", "healthcheck")  # for `gpupool metrics`
    return 1


def main(argv: list[str] | None = None) -> int:
    if wants_help(sys.argv[1:] if argv is None else argv, USAGE):
        return 0
    return run_hook("healthcheck", _body)


if __name__ == "__main__":
    sys.exit(main())
