"""Machine descriptions: the shipped ones load; broken ones name file and key."""

from __future__ import annotations

import pytest

from slurm_gpupool.errors import ConfigError
from slurm_gpupool.machines import builtin_machine_names, find_machine, parse_machine

REQUIRED = {"dgx-a100", "hgx-h100", "pcie-a30", "dgx1-v100", "h100-nvl-pair"}


def test_required_machines_ship():
    assert set(builtin_machine_names()) >= REQUIRED


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_machine_loads(name):
    m = find_machine(name)
    assert m.name == name and m.gpus
    for g in m.gpus:
        assert set(g.cpus) <= set(range(m.cpus_total))


def test_dgx1_cube_mesh_links():
    m = find_machine("dgx1-v100")
    doubles = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
    singles = {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}
    for a in range(8):
        for b in range(a + 1, 8):
            want = 2 if (a, b) in doubles else 1 if (a, b) in singles else 0
            assert m.nvlinks(a, b) == want, (a, b)
        assert sum(m.nvlinks(a, b) for b in range(8)) == 6
    assert not m.nvlink_connected(0, 5) and m.pcie_level(0, 5) == "SYS"


def test_dgx_a100_is_all_to_all_and_two_sockets():
    m = find_machine("dgx-a100")
    assert all(m.nvlink_connected(a, b) for a in range(8) for b in range(8) if a != b)
    assert m.socket_of_cpu(m.gpus[0].cpus[0]) == 0 and m.socket_of_cpu(m.gpus[4].cpus[0]) == 1
    assert m.core_of_cpu(176) == 48  # hyperthread sibling of core 48


GOOD = {
    "machine": "x",
    "cpu": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1},
    "memory_mib": 1000,
    "numa": {0: "0-3"},
    "interconnect": "pcie",
    "gpus": [{"model": "A30", "pci_bus_id": "17:00.0", "numa_node": 0}],
}


@pytest.mark.parametrize(
    "patch, key, words",
    [
        ({"colour": "red"}, "colour", "unknown key"),
        ({"gpus": [{"model": "Z100", "pci_bus_id": "17:00.0", "numa_node": 0}]}, "gpus[0].model", "unknown GPU model"),
        ({"gpus": [{"model": "A30", "pci_bus_id": "17:00.0", "numa_node": 5}]}, "gpus[0].numa_node", "NUMA node 5"),
        ({"numa": {0: "0-9"}}, "numa.0", "beyond"),
        ({"interconnect": "wifi"}, "interconnect", "must be one of"),
        (
            {"cpu": {"sockets": "two", "cores_per_socket": 4, "threads_per_core": 1}},
            "cpu.sockets",
            "expected an integer",
        ),
        ({"interconnect": "nvlink"}, "nvlink", "no links"),
    ],
)
def test_bad_descriptions_name_the_key(patch, key, words):
    raw = {**GOOD, **patch}
    with pytest.raises(ConfigError) as e:
        parse_machine(raw, "bad.yaml")
    assert e.value.key == key and words in e.value.why
    assert str(e.value).startswith("bad.yaml: ")
