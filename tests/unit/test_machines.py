"""Machine descriptions: the shipped ones load; broken ones name file and key."""

from __future__ import annotations

import pytest

from slurm_gpupool.config.machines import builtin_machine_names, find_machine, parse_machine
from slurm_gpupool.errors import ConfigError

REQUIRED = {"dgx-a100", "hgx-h100", "pcie-a30", "dgx1-v100", "h100-nvl-pair", "hgx-h200", "hgx-h20", "dgx-b200"}
REQUIRED |= {"gb200-nvl", "l40s-server", "rtx-pro-6000-server"}


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


def test_an_unknown_model_in_a_site_machine_file_names_the_file_key_and_model(tmp_path):
    """#14: it said 'unknown GPU model: l40s-4', naming the machine instead of the model."""
    from pathlib import Path

    from slurm_gpupool.config.load import load_config

    top = Path(__file__).resolve().parents[2]
    (tmp_path / "machines").mkdir()
    text = (top / "etc" / "machines" / "l40s-server.yaml").read_text()
    text = text.replace("machine: l40s-server", "machine: l40s-4").replace("model: L40S,", "model: L40S-48GB,")
    (tmp_path / "machines" / "l40s-4.yaml").write_text(text)
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "version: 1\npaths: {machines_dir: machines}\nnodesets:\n  l40s: {nodes: 'l[1-2]', machine: l40s-4}\n"
        "layouts:\n  day: {l40s: {all: whole}}\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(pool)
    msg = e.value.message()
    assert "nodesets.l40s.machine: machine description l40s-4:" in msg
    assert "l40s-4.yaml: gpus[0].model: unknown GPU model 'L40S-48GB'" in msg
    assert "`gpupool layout models`" in (e.value.hint or "") and "L40S" in (e.value.hint or "")
    # the shipped one loads, and its GPUs are the whole-GPU model of the catalog
    spec = find_machine("l40s-server")
    assert {g.gpu_model.key for g in spec.gpus} == {"L40S"} and spec.gpus[0].gpu_model.mig is None
