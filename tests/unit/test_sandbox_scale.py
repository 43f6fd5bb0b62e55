"""`gpupool sandbox up --nodes N`: the generated pool of N DGX/HGX-like nodes (sandbox/scale.py)."""

from __future__ import annotations

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.errors import UsageError
from slurm_gpupool.sandbox.plan import MAX_NODES, Ports, assign_slots, node_address
from slurm_gpupool.sandbox.poolconfig import node_map
from slurm_gpupool.sandbox.scale import scale_config_text, split_nodes


def _load(tmp_path, n, **kw):
    path = tmp_path / f"scale-{n}.yaml"
    path.write_text(scale_config_text(n, **kw))
    return load_config(path)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 129, MAX_NODES])
def test_the_config_has_n_nodes_half_of_each_machine_and_loads(tmp_path, n):
    cfg = _load(tmp_path, n)
    nodes = node_map(cfg)
    assert len(nodes) == n
    machines = sorted(nodes.values())
    assert machines.count("dgx-a100") - machines.count("hgx-h100") in (0, 1)
    # both layouts cover every node: the sandbox can start in either and switch
    for layout in ("day", "night"):
        assert all(cfg.covers(layout, node) for node in nodes)


def test_names_are_zero_padded_so_the_hostlist_sorts_and_folds(tmp_path):
    nodes = node_map(_load(tmp_path, 128))
    assert "dgx001" in nodes and "dgx064" in nodes and "hgx064" in nodes and "hgx065" not in nodes
    assert list(nodes) == sorted(nodes)


def test_every_node_gets_its_own_address_and_port(tmp_path):
    nodes = node_map(_load(tmp_path, MAX_NODES))
    addresses = [node_address(slot, Ports(27600)) for slot in assign_slots(nodes).values()]
    assert len(set(addresses)) == MAX_NODES
    assert len({port for _, port in addresses}) == MAX_NODES


def test_repartition_settings_reach_the_config(tmp_path):
    cfg = _load(tmp_path, 10, repartition={"parallel": 32, "restart_batch": 5})
    assert (cfg.repartition.parallel, cfg.repartition.restart_batch) == (32, 5)


@pytest.mark.parametrize("n", [0, MAX_NODES + 1])
def test_counts_the_sandbox_cannot_play_are_refused(n):
    with pytest.raises(UsageError):
        split_nodes(n)


def test_the_cli_takes_the_counts_the_sandbox_can_play():
    from slurm_gpupool.cli.sandbox import up

    option = next(p for p in up.params if p.name == "n_nodes")
    assert (option.type.min, option.type.max) == (1, MAX_NODES)
