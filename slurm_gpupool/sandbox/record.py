"""What one sandbox is, read from its root: its state, nodes, addresses, ports and daemons.

Every step of ``up``, ``restart``, ``status`` and ``down`` reads these; none of them
changes anything but ``sandbox.json`` (:meth:`SandboxRecord._decide_state`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import UsageError
from slurm_gpupool.sandbox import state
from slurm_gpupool.sandbox.client import run_client
from slurm_gpupool.sandbox.daemons import DaemonSpec, daemon_specs
from slurm_gpupool.sandbox.paths import CONFIG_ENV, ROOT_ENV, SIM_DIR_ENV, SandboxPaths, default_root
from slurm_gpupool.sandbox.plan import NodePlan, Ports, assign_slots, node_address, plan_nodes, validate_node_map


class SandboxRecord:
    """The sandbox under one root as recorded (or as ``up`` would record it).

    ``config`` is the pool config whose nodes the sandbox plays (each node set
    needs a machine description); when it is None, the config of the last ``up``
    is kept, else the shipped ``etc/gpupool.yaml``.  ``config`` and ``base_port``
    reach ``sandbox.json`` only through :meth:`_decide_state`.  ``layout`` is applied
    to nodes whose simulated GPUs are new (default: the schedule's default layout).
    """

    def __init__(
        self,
        root: Path | str | None = None,
        config: Path | str | None = None,
        base_port: int | None = None,
        progress: Callable[[str], None] | None = None,
        layout: str | None = None,
    ) -> None:
        self.paths = SandboxPaths(Path(root).absolute() if root else default_root().absolute())
        self.root = self.paths.root
        self._requested_config = str(Path(config).resolve()) if config else None
        self._requested_layout = layout
        self._requested_port = base_port
        self._progress = progress or (lambda _msg: None)
        self._state: dict[str, Any] | None = None
        self._specs_cache: tuple[tuple[Any, ...], dict[str, DaemonSpec]] | None = None

    @property
    def state(self) -> dict[str, Any]:
        """The recorded state, or what ``up`` would record."""
        if self._state is None:
            self._state = state.read_state(self.paths.state_file) or state.initial_state()
        return self._state

    @property
    def node_map(self) -> dict[str, str]:
        return dict(self.state["nodes"])

    @property
    def ports(self) -> Ports:
        return Ports(int(self.state["base_port"]))

    def exists(self) -> bool:
        return self.paths.state_file.is_file()

    def env(self) -> dict[str, str]:
        """What a shell needs to use this cluster (``eval "$(gpupool sandbox env)"``)."""
        return {
            "SLURM_CONF": str(self.paths.slurm_conf),
            SIM_DIR_ENV: str(self.paths.sim),
            ROOT_ENV: str(self.root),
            CONFIG_ENV: str(self.paths.pool_config),
        }

    def source_config(self) -> Any:
        """The user's pool config that the sandbox plays (validated)."""
        from slurm_gpupool.config.load import load_config  # not for `sandbox start|stop|restart`

        return load_config(self.state["config"])

    def pool_config(self) -> Any:
        """The sandbox's own pool config (``<root>/etc/gpupool.yaml``)."""
        from slurm_gpupool.config.load import load_config

        return load_config(self.paths.pool_config)

    def daemon_env(self) -> dict[str, str]:
        """Our environment minus any inherited ``SLURM_*`` (e.g. from inside a job), plus the sandbox's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.env())
        return env

    def node_addresses(self) -> dict[str, tuple[str, int]]:
        """Node → (NodeAddr, Port): a generator of nodes.conf must keep these for the sandbox."""
        slots = assign_slots(self.node_map, self.state.get("slots"))
        return {name: node_address(slot, self.ports) for name, slot in slots.items()}

    def _decide_state(self) -> bool:
        """Merge the requested node map and port into the recorded state; True if they changed."""
        new, changed = state.decide_state(
            self.paths.state_file, self.state, self._requested_config, self._requested_port
        )
        self._state = new
        state.write_state(self.paths.state_file, new)
        return changed

    def slurm(self, *argv: str, timeout_s: float = 20, input_text: str | None = None) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster (``SLURM_CONF`` set)."""
        return run_client(self.daemon_env(), argv, timeout_s, input_text)

    def _plans(self) -> list[NodePlan]:
        machines = validate_node_map(self.node_map)
        slots = assign_slots(self.node_map, self.state.get("slots"))
        return plan_nodes(machines, slots, self.ports)

    def daemons(self) -> list[DaemonSpec]:
        """Every daemon of the sandbox, in start order."""
        return daemon_specs(self.paths, self.ports, self.node_map, self.node_addresses())

    def _spec(self, name: str) -> DaemonSpec:
        spec = self._specs().get(name)
        if spec is None:
            raise UsageError(f"sandbox daemon {name!r}", "no such daemon")
        return spec

    def _specs(self) -> dict[str, DaemonSpec]:
        """Daemon name → spec, built once per node map and port (a restart of N slurmds asks N times)."""
        key = (tuple(sorted(self.node_map.items())), self.state.get("base_port"), str(self.state.get("slots")))
        if self._specs_cache is None or self._specs_cache[0] != key:
            self._specs_cache = (key, {d.name: d for d in self.daemons()})
        return self._specs_cache[1]

    def _known_nodes(self, node_list: list[str], what: str) -> list[str]:
        unknown = [n for n in node_list if n not in self.node_map]
        if unknown:
            raise UsageError(
                f"sandbox {what} --nodes {','.join(node_list)}",
                f"not a sandbox node: {', '.join(unknown)}",
                hint=f"nodes: {','.join(self.node_map)}",
            )
        return node_list
