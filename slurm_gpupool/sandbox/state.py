"""``<root>/sandbox.json``: what ``up`` decided, so later commands find the same cluster.

It records the pool config the sandbox plays, its node map, the base port, each
node's address slot and the database password; a change of the first four
means the daemons' files change too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_gpupool.sandbox.paths import write_if_changed
from slurm_gpupool.sandbox.plan import DEFAULT_BASE_PORT, assign_slots, validate_node_map
from slurm_gpupool.sandbox.poolconfig import node_map
from slurm_gpupool.util.records import read_record
from slurm_gpupool.util.resources import etc_dir

STATE_SCHEMA = 1
CLUSTER = "gpupool"


def default_config_path() -> str:
    """The shipped example config: the sandbox's embedded default."""

    return str((etc_dir() / "gpupool.yaml").resolve())


def initial_state() -> dict[str, Any]:
    """What a sandbox that was never brought up records."""
    return {
        "schema": STATE_SCHEMA,
        "config": default_config_path(),
        "nodes": {},
        "base_port": DEFAULT_BASE_PORT,
        "cluster": CLUSTER,
        "db_password": "",
    }


def read_state(state_file: Path) -> dict[str, Any] | None:
    """The recorded state; None if there is none, a typed error if it cannot be used."""
    return read_record(state_file, "sandbox state", STATE_SCHEMA, "gpupool sandbox down --purge, then up")


def decide_state(
    state_file: Path, current: dict[str, Any], config: str | None, base_port: int | None
) -> tuple[dict[str, Any], bool]:
    """Merge the requested config (its node map) and port into the recorded state (else
    ``current``); the new state, and True if config, nodes, port or slots changed.  The
    config's modules are imported here, not by every `sandbox start|stop|restart`."""
    import secrets

    from slurm_gpupool.config.load import load_config

    old = read_state(state_file)
    new = dict(old) if old else dict(current)
    if config is not None:
        new["config"] = config
    new.setdefault("config", default_config_path())
    new["nodes"] = node_map(load_config(new["config"]))
    if base_port is not None:
        new["base_port"] = int(base_port)
    if not new.get("db_password"):
        new["db_password"] = secrets.token_hex(16)
    validate_node_map(new["nodes"])
    new["slots"] = assign_slots(new["nodes"], new.get("slots"))
    changed = old is None or any(old.get(k) != new[k] for k in ("config", "nodes", "base_port", "slots"))
    return new, changed


def write_state(state_file: Path, state: dict[str, Any]) -> None:
    """Record ``state`` (mode 600: it holds the database password)."""
    write_if_changed(state_file, json.dumps(state, indent=1) + "\n", 0o600)
