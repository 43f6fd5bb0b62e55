"""A pool config of N DGX/HGX-like nodes, for ``gpupool sandbox up --nodes N`` (#29).

The shipped example has five nodes of five machines; a site's questions (how long
is a node out of service, does slurmctld cope with the restarts) need tens to
hundreds.  This writes the same kind of pool at any size: half the nodes play
the shipped ``dgx-a100`` description, half ``hgx-h100`` (8 GPUs each, NVSwitch),
with the example's day layout (MIG slices, shards, whole GPUs) and its night
layout (all whole).  Pure: it returns the config as data and as YAML text;
the sandbox writes it under its root.
"""

from __future__ import annotations

from typing import Any

from slurm_gpupool.errors import UsageError
from slurm_gpupool.sandbox.plan import MAX_NODES

# node set → (machine description, node name prefix, day layout of its 8 GPUs)
SCALE_NODESETS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "dgx": (
        "dgx-a100",
        "dgx",
        {"0-3": {"mig": {"1g.5gb": 7}}, "4-5": {"mig": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}, "6-7": "whole"},
    ),
    "hgx": (
        "hgx-h100",
        "hgx",
        {"0-3": {"mig": {"1g.10gb": 7}}, "4-5": {"mig": {"3g.40gb": 2}}, "6-7": {"shared": 4}},
    ),
}
SCALE_CONFIG_NAME = "scale-pool.yaml"  # under the sandbox root: the source config of `up --nodes N`


def split_nodes(n_nodes: int, sets: int = len(SCALE_NODESETS)) -> list[int]:
    """``n_nodes`` shared among ``sets`` node sets as evenly as possible, the first ones larger."""
    if n_nodes < 1 or n_nodes > MAX_NODES:
        raise UsageError(f"sandbox up --nodes {n_nodes}", f"the sandbox plays 1 to {MAX_NODES} nodes")
    return [n_nodes // sets + (1 if i < n_nodes % sets else 0) for i in range(sets)]


def node_names(prefix: str, count: int, width: int) -> list[str]:
    """``prefix001`` … (zero-padded to ``width`` digits, so a hostlist folds them)."""
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def scale_config(n_nodes: int, repartition: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pool config (as data) of ``n_nodes`` nodes; ``repartition`` adds settings such as
    ``parallel`` and ``restart_batch`` (docs/repartition.md)."""
    counts = split_nodes(n_nodes)
    width = max(3, len(str(max(counts))))
    nodesets: dict[str, Any] = {}
    day: dict[str, Any] = {}
    night: dict[str, Any] = {}
    for (name, (machine, prefix, day_layout)), count in zip(SCALE_NODESETS.items(), counts, strict=True):
        if count == 0:
            continue
        last = node_names(prefix, count, width)[-1]
        hostlist = f"{prefix}[{1:0{width}d}-{last[len(prefix) :]}]" if count > 1 else last
        nodesets[name] = {"nodes": hostlist, "machine": machine}
        day[name] = day_layout
        night[name] = {"all": "whole"}
    cfg: dict[str, Any] = {
        "version": 1,
        "nodesets": nodesets,
        "layouts": {"day": day, "night": night},
        "schedule": {
            "timezone": "local",
            "default": "night",
            "rules": [{"layout": "day", "days": "mon-fri", "start": "08:00", "end": "20:00"}],
        },
    }
    if repartition:
        cfg["repartition"] = dict(repartition)
    return cfg


def scale_config_text(n_nodes: int, repartition: dict[str, Any] | None = None) -> str:
    """:func:`scale_config` as the YAML file ``up --nodes`` writes (with a header saying so)."""
    import yaml

    head = (
        f"# Written by `gpupool sandbox up --nodes {n_nodes}`: {n_nodes} DGX/HGX-like nodes; edits are overwritten.\n"
    )
    return head + yaml.safe_dump(scale_config(n_nodes, repartition), sort_keys=False)
