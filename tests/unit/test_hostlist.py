"""Hostlists Slurm can read: folded only at the trailing number of a name."""

from __future__ import annotations

import random
import re

import pytest
from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from slurm_gpupool.core.gres.hostlist import _fold, expand, expand_plain, node_order_key, slurm_hostlist
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


def _clustershell(hostlist: str) -> list[str] | None:
    try:
        return sorted(NodeSet(hostlist))
    except Exception:  # ClusterShell refuses it: the plain reading must not accept it
        return None


def test_plain_hostlists_expand_as_clustershell_expands_them_without_importing_it():
    """Config loading expands hostlists itself where they are plain (#29): the names must be
    ClusterShell's, and what it is unsure of (None) is left to ClusterShell."""
    rng = random.Random(29)
    plain = [
        "a100n[1-2]",
        "gpu[01-08],dgx1",
        "x[1-2]y[3-4],n1-ib",
        "a[0-10]",
        "a[00-10],a[5,3,5]",
        "[1-3]",
        "h100n1,h100n1",
    ]
    for _ in range(3000):
        parts = []
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(["a", "gpu", "n1-", "x.y", "dgx", "7", ""])
            for _ in range(rng.randint(0, 2)):
                items = []
                for _ in range(rng.randint(1, 3)):
                    a = rng.choice(["0", "1", "2", "9", "01", "08", "10", "007", ""])
                    b = rng.choice([None, "0", "3", "9", "10", "12", "010", "099", ""])
                    items.append(a if b is None else f"{a}-{b}")
                name += "[" + ",".join(items) + "]" + rng.choice(["", "", "-ib", "b"])
            parts.append(name)
        plain.append(",".join(parts))
    soup = ["".join(rng.choice("ab01-9[],.") for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    read = 0
    for hostlist in plain + soup:
        names = expand_plain(hostlist)
        if names is not None:
            read += 1
            assert names == _clustershell(hostlist), hostlist
    assert read > 1000  # many of the generated lists are read without ClusterShell
    for hostlist in plain[:7]:
        assert expand_plain(hostlist) is not None, hostlist


def test_names_fold_as_clustershell_folds_them_without_importing_it():
    rng = random.Random(25)
    folded_here = 0
    for _ in range(3000):
        prefix = rng.choice(["a", "gpu", "a100n", "n-", "x.y"])
        width = rng.choice([0, 0, 2, 3])
        top = 10**width - 1 if width else 30  # up to the full width: 100 among 001 and 010
        numbers = [str(rng.randint(0, top)).zfill(width) for _ in range(rng.randint(2, 8))]
        if rng.random() < 0.1:
            numbers.append(rng.choice(["01", "007", "5", "0"]))  # mixed padding: ClusterShell's
        names = list({prefix + n for n in numbers})  # in no particular order
        rng.shuffle(names)
        if len(names) < 2:
            continue
        assert slurm_hostlist(names) == str(NodeSet.fromlist(names)), names
        folded_here += _fold(prefix, [n[len(prefix) :] for n in names]) is not None
    assert folded_here > 2000
    assert _fold("dgx", ["100", "001", "010"]) == "dgx[001,010,100]"  # in any order: not the first's padding
    assert expand("gpu[01-02,10],login") == ["gpu01", "gpu02", "gpu10", "login"]
    assert expand_plain("a[1-2]3") is None and expand("a[1-2]3") == ["a13", "a23"]  # ClusterShell's reading
    with pytest.raises(NodeSetParseError):
        expand("a[3-1]")


def test_node_order_is_slurms_natural_order():
    """``strnatcmp``: digit runs by value wherever they are, the rest as text."""
    names = ["a100n10", "h100n1", "a100n2", "a30n1", "a100n1", "gpu-2-10", "gpu-2-9", "gpu-10-1"]
    assert sorted(names, key=node_order_key) == [
        "a30n1",
        "a100n1",
        "a100n2",
        "a100n10",
        "gpu-2-9",
        "gpu-2-10",
        "gpu-10-1",
        "h100n1",
    ]
    assert sorted(["nx", "n1", "n-1"], key=node_order_key) == ["n-1", "n1", "nx"]  # by character code
