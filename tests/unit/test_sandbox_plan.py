"""The sandbox's pure planning: node maps, stable addresses, config rendering."""

from __future__ import annotations

import pytest

from slurm_gpupool.errors import ConfigError, UsageError
from slurm_gpupool.machines import find_machine
from slurm_gpupool.sandbox.cluster import DEFAULT_NODES, Sandbox, whole_gpu_type
from slurm_gpupool.sandbox.devices import device_plan, mig_minors_text
from slurm_gpupool.sandbox.plan import (
    Ports,
    accounting_tres,
    assign_slots,
    env_lines,
    gpu_types_in_gres_conf,
    node_address,
    parse_node_map,
    plan_nodes,
    validate_node_map,
)


def test_parse_node_map_keeps_order():
    assert list(parse_node_map(" h100n1=hgx-h100, a30n1=pcie-a30 ,")) == ["h100n1", "a30n1"]


@pytest.mark.parametrize("text", ["a100n1", "=dgx-a100", "a100n1=", "a=dgx-a100,a=pcie-a30", ","])
def test_parse_node_map_rejects(text):
    with pytest.raises(UsageError):
        parse_node_map(text)


def test_validate_node_map_checks_names_and_machines():
    assert validate_node_map({"x1": "pcie-a30"})["x1"].name == "pcie-a30"
    with pytest.raises(UsageError):
        validate_node_map({"Bad_Name": "pcie-a30"})
    with pytest.raises(ConfigError):
        validate_node_map({"x1": "no-such-machine"})


def test_slots_are_stable_when_nodes_come_and_go():
    first = assign_slots(["a", "b", "c"])
    assert first == {"a": 0, "b": 1, "c": 2}
    assert assign_slots(["c", "d"], first) == {"c": 2, "d": 0}
    assert node_address(2, Ports(16800)) == ("127.0.0.4", 16902)


def test_whole_gpu_types_and_accounting_tres():
    assert whole_gpu_type("A100-SXM4-40GB") == "a100-sxm4-40gb"
    gres = (
        "# comment Type=ignored\n"
        "NodeName=a Name=gpu Type=a100-sxm4-40gb File=/d/nvidia0\n"
        "NodeName=a Name=gpu Type=1g.10gb File=/d/nvidia1\n"
        "NodeName=a Name=shard Count=4\n"
    )
    assert gpu_types_in_gres_conf(gres) == ["1g.10gb", "a100-sxm4-40gb"]
    assert accounting_tres(["b", "a", "a"]) == ["gres/gpu", "gres/gpu:a", "gres/gpu:b", "gres/shard"]


def test_node_plans_describe_the_machines(tmp_path):
    machines = validate_node_map(DEFAULT_NODES)
    plans = plan_nodes(machines, assign_slots(DEFAULT_NODES), Ports(), tmp_path, whole_gpu_type)
    a100 = plans[0].context()
    assert a100["gres"] == ["gpu:a100-sxm4-40gb:8"]
    assert (a100["cpus"], a100["sockets"], a100["threads_per_core"]) == (256, 2, 2)
    assert a100["gpus"][3]["file"] == f"{tmp_path}/a100n1/dev/nvidia3"
    assert len({p.port for p in plans}) == len({p.addr for p in plans}) == len(plans)


def test_device_plan_has_every_mig_cap():
    plan = device_plan([0, 1])
    caps = [k for k in plan if k.startswith("nvidia-caps/")]
    assert len(caps) == 2 + 2 * 15 * 9
    assert plan["nvidia1"] == (195, 1) and plan["nvidiactl"] == (195, 255)
    assert mig_minors_text().startswith("config 1\nmonitor 2\ngpu0/gi0/access 3\n")


def test_templates_render_strictly(tmp_path):
    sb = Sandbox(tmp_path / "sb", nodes={"a30n1": "pcie-a30"})
    sb._state = {**sb.state, "nodes": {"a30n1": "pcie-a30"}, "db_password": "pw"}
    plans = sb._plans()
    sb.paths.etc.mkdir(parents=True)
    changed = sb._write_configs(plans, reseed=True)
    assert {p.name for p in changed} == {"slurm.conf", "slurmdbd.conf", "nodes.conf", "gres.conf", "my.cnf"}
    conf = sb.paths.slurm_conf.read_text()
    assert f"Include {sb.paths.nodes_conf}\n" in conf
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:a30,gres/shard\n" in conf
    assert "SlurmdParameters=config_overrides\n" in conf
    nodes = sb.paths.nodes_conf.read_text()
    assert "NodeName=a30n1 NodeAddr=127.0.0.2 Port=16900 CPUs=64 " in nodes
    assert "Gres=gpu:a30:4 Features=pcie-a30" in nodes
    gres = sb.paths.gres_conf.read_text().splitlines()
    assert gres[-1] == f"NodeName=a30n1 Name=gpu Type=a30 File={sb.paths.nodes}/a30n1/dev/nvidia3"
    assert oct(sb.paths.slurmdbd_conf.stat().st_mode & 0o777) == "0o600"
    assert sb._write_configs(plans, reseed=False) == set()  # idempotent
    assert find_machine("pcie-a30").cpus_total == 64
    assert env_lines({"A": "x y"}) == "export A='x y'\n"
