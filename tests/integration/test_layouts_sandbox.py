"""Layouts on the sandbox's nodes, through the CLI as an admin would run it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytestmark = pytest.mark.integration


def inventory(sandbox, node: str) -> dict:
    return json.loads(sandbox.gpupool("--node", node, "inventory", "--json").stdout)


def instances(inv: dict) -> list[list[tuple[str, int]]]:
    return [sorted((gi["profile"], gi["placement"]["start"]) for gi in g["instances"]) for g in inv["gpus"]]


@pytest.mark.parametrize(
    "node,day",
    [
        (
            "a100n1",
            [Counter({"1g.5gb": 7})] * 4 + [Counter({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2})] * 2 + [Counter()] * 2,
        ),
        ("h100n1", [Counter({"1g.10gb": 7})] * 4 + [Counter({"3g.40gb": 2})] * 2 + [Counter()] * 2),
    ],
)
def test_day_night_day_on_sandbox_nodes(sandbox, node: str, day: list[Counter]):
    # the layout Slurm has the node in (the worker's earlier tests may have left the sandbox
    # in day): put back afterwards, not night, or the node's devices would no longer be the
    # ones its gres.conf and slurmd list (a later MIG job's SLURM_JOB_GPUS index past them)
    found = sandbox.node_state(node)["layout"]
    try:
        sandbox.gpupool("--node", node, "node", "apply", "day")
        inv = inventory(sandbox, node)
        assert [Counter(p for p, _ in g) for g in instances(inv)] == day
        first_day = instances(inv)
        sandbox.gpupool("--node", node, "node", "apply", "night")
        inv = inventory(sandbox, node)
        assert instances(inv) == [[]] * 8
        assert all(not g["mig_current"] and not g["mig_pending"] for g in inv["gpus"])
        assert sandbox.gpupool("--node", node, "node", "assert", "night").returncode == 0
        sandbox.gpupool("--node", node, "node", "apply", "day")
        assert instances(inventory(sandbox, node)) == first_day
        # the same MIG UUIDs from two separate processes
        a, b = inventory(sandbox, node), inventory(sandbox, node)
        uuids = [d["uuid"] for g in a["gpus"] for gi in g["instances"] for d in gi["devices"]]
        assert uuids and uuids == [d["uuid"] for g in b["gpus"] for gi in g["instances"] for d in gi["devices"]]
    finally:
        sandbox.gpupool("--node", node, "node", "apply", found)
    assert sandbox.gpupool("--node", node, "node", "assert", found).returncode == 0
