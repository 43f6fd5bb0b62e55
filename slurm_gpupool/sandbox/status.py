"""``gpupool sandbox status``: each daemon (pid alive?) and each node (slurmd alive? its
``sinfo`` state and GRES), read without changing anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from slurm_gpupool.sandbox.daemons import DaemonSpec


class RunningSandbox(Protocol):
    """What the status reads of a :class:`~slurm_gpupool.sandbox.cluster.Sandbox`."""

    root: Path

    @property
    def node_map(self) -> dict[str, str]: ...

    def exists(self) -> bool: ...

    def env(self) -> dict[str, str]: ...

    def daemons(self) -> list[DaemonSpec]: ...

    def pid_of(self, spec: DaemonSpec) -> int | None: ...

    def node_states(self) -> dict[str, dict[str, str]]: ...

    def node_addresses(self) -> dict[str, tuple[str, int]]: ...


def status_report(sb: RunningSandbox) -> dict[str, Any]:
    """Each daemon (pid alive?) and each node (slurmd alive? sinfo state and GRES)."""
    daemons = []
    pids: dict[str, int | None] = {}
    for spec in sb.daemons() if sb.exists() else []:
        pid = sb.pid_of(spec)
        pids[spec.name] = pid
        if spec.node is None:
            daemons.append({"name": spec.name, "pid": pid, "running": pid is not None, "log": str(spec.logs[0])})
    ctld_up = pids.get("slurmctld") is not None
    states = sb.node_states() if ctld_up else {}
    nodes = []
    addresses = sb.node_addresses() if sb.exists() else {}
    for name, machine in sb.node_map.items() if sb.exists() else []:
        addr, port = addresses[name]
        pid = pids.get(f"slurmd-{name}")
        st = states.get(name, {})
        nodes.append(
            {
                "name": name,
                "machine": machine,
                "addr": addr,
                "port": port,
                "slurmd_pid": pid,
                "slurmd_running": pid is not None,
                "state": st.get("state", "unknown" if ctld_up else "n/a"),
                "gres": st.get("gres", ""),
                "reason": st.get("reason", ""),
            }
        )
    all_up = sb.exists() and all(d["running"] for d in daemons) and all(n["slurmd_running"] for n in nodes)
    return {
        "root": str(sb.root),
        "exists": sb.exists(),
        "up": bool(all_up),
        "env": sb.env(),
        "daemons": daemons,
        "nodes": nodes,
    }
