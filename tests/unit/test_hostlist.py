"""Hostlists Slurm can read: folded only at the trailing number of a name."""

from __future__ import annotations

import random
import re

from ClusterShell.NodeSet import NodeSet

from slurm_gpupool.core.gres.hostlist import slurm_hostlist
from slurm_gpupool.core.gres.records import fold

# Slurm 22.05 reads brackets only at the end of a name: prefix[ranges]
SLURM_PART = re.compile(r"^[^\[\],]*(\[[0-9,\-]+\])?$")


def test_a_release_from_a_reservation_named_nodes_slurm_could_not_read():
    """Seen on the sandbox: a100n2 left the reservation first and the rest folded to
    ``a[30,100]n1,h100n1,v100n1``: "Invalid node name specified", the node stayed held."""
    assert str(NodeSet.fromlist(["a100n1", "a30n1", "h100n1", "v100n1"])) == "a[30,100]n1,h100n1,v100n1"
    assert slurm_hostlist(["v100n1", "a30n1", "h100n1", "a100n1"]) == "a100n1,a30n1,h100n1,v100n1"
    assert slurm_hostlist(["a100n2", "a100n1", "a30n1"]) == "a100n[1-2],a30n1"
    assert slurm_hostlist(["n1-ib", "n2-ib"]) == "n1-ib,n2-ib"  # not n[1-2]-ib
    assert slurm_hostlist(["gpu01", "gpu02", "gpu10", "login"]) == "gpu[01-02,10],login"
    assert slurm_hostlist(["7", "8"]) == "7,8"
    assert slurm_hostlist([]) == ""


def test_any_names_fold_to_what_slurm_reads_and_expand_back():
    rng = random.Random(7)
    for _ in range(300):
        names = {
            rng.choice(["a", "gpu", "rack1n", "r2-n", "n", "x-"])
            + str(rng.randint(0, 120)).zfill(rng.choice([1, 1, 3]))
            + rng.choice(["", "", "", "-ib"])
            for _ in range(rng.randint(1, 30))
        }
        text = slurm_hostlist(names)
        assert set(NodeSet(text)) == names, text
        assert all(SLURM_PART.match(p) for p in re.split(r",(?![^\[]*\])", text)), text


def test_generated_node_lines_fold_only_where_slurm_can_read():
    """slurmctld refuses a slurm.conf whose NodeName is ``a[30,100]n1``."""
    from dataclasses import dataclass

    @dataclass
    class Node:
        node: str
        records: tuple = ()
        features: tuple = ("a",)
        node_line_params: str = ""

        def gres_value(self) -> str:
            return "gpu:1"

    lines, groups = fold([Node("a30n1"), Node("a100n1"), Node("a100n2")])  # type: ignore[list-item]
    assert [h for h, _ in lines] == ["a100n[1-2],a30n1"] and [h for h, _ in groups] == ["a100n[1-2],a30n1"]
