"""mig-parted configs import as NVIDIA wrote them, with mig-parted's semantics (#14).

NVIDIA's own files (tests/fixtures/nvidia-mig-configs, unchanged) are judged
against every machine in etc/machines; the rules mig-parted applies (api/spec/v1,
pkg/types, cmd/nvidia-mig-parted/apply) are checked one by one on small documents.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.migparted import meaning, meanings, parse_mig_parted
from slurm_gpupool.core.mig.layouts import GpuTarget
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.util.validate import Where

TOP = Path(__file__).resolve().parents[2]
NVIDIA = TOP / "tests" / "fixtures" / "nvidia-mig-configs"  # verbatim, Apache-2.0 (its SOURCE.md)
MACHINES = sorted(p.stem for p in (TOP / "etc" / "machines").glob("*.yaml"))
OPERATOR = NVIDIA / "gpu-operator" / "assets_state-mig-manager_0400_configmap.yaml"
DEFAULT = NVIDIA / "mig-parted" / "deployments_systemd_config-default.yaml"


def nodesets() -> dict:
    raw = {
        "version": 1,
        "nodesets": {m: {"nodes": f"n{k}", "machine": m} for k, m in enumerate(MACHINES)},
        "layouts": {"whole": {m: {"all": "whole"} for m in MACHINES}},
    }
    return parse_config(raw, str(TOP / "etc" / "gpupool.yaml")).nodesets


def judged(path: Path) -> dict[tuple[str, str], object]:
    return {(m.config, m.nodeset): m for m in meanings(path, nodesets())}


@pytest.mark.parametrize("path", [OPERATOR, DEFAULT], ids=["gpu-operator-configmap", "mig-parted-config-default"])
def test_nvidias_default_configs_import_unchanged_and_each_machine_gets_its_own(path: Path):
    found = judged(path)
    fits = {nodeset: {c for (c, n), m in found.items() if n == nodeset and m.targets} for nodeset in MACHINES}
    # each MIG machine gets exactly the configs NVIDIA wrote for its GPU (both files hold them all)
    for machine, sizes in {
        "dgx-a100": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        "hgx-h100": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        "h100-nvl-pair": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
        "hgx-h200": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
        "hgx-h20": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
        "dgx-b200": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
        "gb200-nvl": ("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
    }.items():
        expected = {f"all-{x}" for x in sizes} | {f"all-{sizes[0]}.me", "all-balanced", "all-disabled"}
        assert fits[machine] == expected, machine
    # the A30 has no 7-slice or 3-slice instance, and a .me variant of its 2g too
    assert fits["pcie-a30"] == {f"all-{x}" for x in ("1g.6gb", "1g.6gb.me", "2g.12gb", "2g.12gb.me", "4g.24gb")} | {
        "all-balanced",
        "all-disabled",
    }
    rtx = {"1g.24gb", "1g.24gb-me", "1g.24gb.gfx", "1g.24gb.me", "1g.24gb.me.all", "2g.48gb", "2g.48gb-me"}
    rtx |= {"2g.48gb.gfx", "2g.48gb.me.all", "4g.96gb", "4g.96gb.gfx"}
    assert fits["rtx-pro-6000-server"] == {f"all-{x}" for x in rtx} | {"all-balanced", "all-disabled"}
    assert found[("all-1g.24gb.me.all", "rtx-pro-6000-server")].targets[0][1] == GpuTarget.mig_counts(
        {"1g.24gb+me.all": 1}
    )
    # every other config is refused on a MIG machine with mig-parted's reason (a profile the GPU lacks),
    # or selects none of its GPUs; `all-enabled` (MIG on, no instance) is ours: Slurm would see no GPU
    for machine in set(MACHINES) - {"dgx1-v100", "l40s-server"}:
        for (config, nodeset), m in found.items():
            if nodeset == machine and config not in fits[machine]:
                assert m.targets is None and (not m.applies or m.why), (config, machine)
                assert (
                    not m.applies
                    or re.search(r"has no MIG profile \S+$", m.why)
                    or (config == "all-enabled" and "MIG enabled with no instances" in m.why)
                ), (config, machine, m.why)
    # GPUs that cannot do MIG (V100, L40S): `devices: all` entries skip them (as mig-parted does),
    # entries filtered to other GPUs miss them: no config sets anything there, so none fits (each
    # counted as a fit of every config, "whole", #26 item 21)
    for machine in ("dgx1-v100", "l40s-server"):
        assert fits[machine] == set(), machine
        assert all(not m.applies for (c, n), m in found.items() if n == machine), machine
        assert "MIG-capable" in found[("all-disabled", machine)].why
    assert found[("all-balanced", "hgx-h100")].targets[0][1] == GpuTarget.mig_counts(
        {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    )
    # what mig-parted would refuse on this hardware is refused, with its reason
    why = found[("all-1g.5gb", "hgx-h100")].why
    assert "has no MIG profile 1g.5gb" in why
    assert "has no MIG profile 1g.24gb+me.all" in found[("all-1g.24gb.me.all", "dgx-a100")].why


def test_every_nvidia_example_file_parses():
    for path in sorted((NVIDIA / "mig-parted").glob("*.yaml")):
        assert judged(path), path  # a file of Kubernetes manifests included


def doc(*entries: dict) -> dict:
    return {"version": "v1", "mig-configs": {"c": list(entries)}}


def judge(*entries: dict, machine: str = "dgx-a100"):
    specs = parse_mig_parted(doc(*entries), Where("t.yaml"))["c"]
    return meaning("c", specs, nodesets()[machine])


A100 = "0x20B010DE"  # A100-SXM4-40GB


def test_media_extension_attributes_are_gpu_instance_profiles():
    assert judge({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb+me": 1}}).targets
    refused = judge({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.24gb+me.all": 1}})
    assert "has no MIG profile 1g.24gb+me.all" in refused.why  # not "a compute-instance sub-profile"
    ci = judge({"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.20gb": 2}})
    assert ci.targets is None and "compute-instance sub-profile" in ci.why
    # a full-size compute instance written out is the GPU instance itself
    full = judge({"devices": "all", "mig-enabled": True, "mig-devices": {"7c.7g.40gb": 1}})
    assert full.targets and full.targets[0][1] == GpuTarget.mig_counts({"7g.40gb": 1})
    both = judge({"devices": "all", "mig-enabled": True, "mig-devices": {"1c.1g.5gb": 3, "1g.5gb": 4}})
    assert both.targets and both.targets[0][1] == GpuTarget.mig_counts({"1g.5gb": 7})


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"devices": "all", "mig-enabled": True}, "missing required field 'mig-devices'"),
        ({"mig-enabled": False}, "missing required field: devices"),
        (
            {"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 1}},
            "included when 'mig-enabled' is false",
        ),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": -1}}, "whole number >= 0"),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"1x.5gb": 1}}, "not a MIG profile name"),
        ({"devices": "some", "mig-enabled": False}, "expected all or a list"),
        ({"devices": "all", "mig-enabled": False, "device-filter": "20B010DE"}, "not a PCI device id"),
    ],
)
def test_what_mig_parted_refuses_to_parse_is_a_config_error_naming_the_place(entry: dict, needle: str):
    with pytest.raises(ConfigError) as e:
        parse_mig_parted(doc(entry), Where("t.yaml"))
    assert needle in str(e.value) and "mig-configs.c[0]" in str(e.value)


def test_all_zero_counts_are_refused_empty_counts_are_mig_with_nothing():
    zero = judge({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 0}})
    assert zero.targets is None and "all counts are 0" in zero.why
    empty = judge({"devices": "all", "mig-enabled": True, "mig-devices": {}})
    assert empty.targets is None and "no instances" in empty.why


def test_device_filters_check_the_vendor_and_a_subsystem_filter_needs_the_subsystem():
    assert judge({"devices": "all", "mig-enabled": False, "device-filter": A100}).targets
    assert not judge({"devices": "all", "mig-enabled": False, "device-filter": "0x20B01234"}).applies
    sub = judge({"devices": "all", "mig-enabled": False, "device-filter": [A100 + ":0x145F10DE"]})
    assert not sub.applies  # a machine description does not know the subsystem id


def test_entries_that_select_one_gpu_again_are_applied_in_order():
    m = judge(
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
    )
    assert [t for _, t in m.targets] == [GpuTarget.mig_counts({"1g.5gb": 7})] * 4 + [
        GpuTarget.mig_counts({"3g.20gb": 2})
    ] * 4
    # mig-parted sets MIG mode from the last entry, then fails applying the first: refused
    mixed = judge(
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {"devices": [4, 5, 6, 7], "mig-enabled": False},
    )
    assert mixed.targets is None and "disagree on mig-enabled for GPU 4" in mixed.why
    part = judge({"devices": [0, 1], "mig-enabled": False})
    assert part.targets is None and "no entry selects GPUs 2-7" in part.why


def test_not_mig_capable_gpus_are_skipped_by_devices_all_and_refused_by_index():
    skipped = judge({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}, machine="dgx1-v100")
    assert skipped.targets is None and not skipped.applies and "none of its GPUs is MIG-capable" in skipped.why
    refused = judge({"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}, machine="dgx1-v100")
    assert refused.targets is None and "not MIG-capable" in refused.why


def test_a_config_that_does_not_fit_one_node_set_still_serves_another(tmp_path: Path):
    """mig-parted validates only the config selected for a node: a config for A100s is not
    an error in a pool that also has H100s."""
    (tmp_path / "mp.yaml").write_text(
        yaml.safe_dump(doc({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}))
    )
    raw = {
        "version": 1,
        "nodesets": {"dgx": {"nodes": "a1", "machine": "dgx-a100"}, "hopper": {"nodes": "h1", "machine": "hgx-h100"}},
        "layouts": {"whole": {"dgx": {"all": "whole"}, "hopper": {"all": "whole"}}},
        "mig_parted": {"file": "mp.yaml"},
    }
    cfg = parse_config(raw, str(tmp_path / "pool.yaml"), tmp_path)
    assert cfg.covers("c", "a1") and not cfg.covers("c", "h1")


def test_the_import_command_shows_each_config_per_node_set_and_writes_layouts(tmp_path: Path):
    (tmp_path / "mp.yaml").write_text(
        yaml.safe_dump(
            {
                "version": "v1",
                "mig-configs": {
                    "c": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
                    "sub": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.20gb": 2}}],
                },
            }
        )
    )
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "nodesets": {"dgx": {"nodes": "a1", "machine": "dgx-a100"}},
                "layouts": {"whole": {"dgx": {"all": "whole"}}},
            }
        )
    )

    def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "slurm_gpupool.cli.main", "--config", str(pool), "layout", "import-mig-parted"]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60)

    text = gpupool(str(tmp_path / "mp.yaml"))
    assert text.returncode == 0 and "GPU 0-7: mig {1g.5gb: 7}" in text.stdout, text.stderr
    assert "compute-instance sub-profile" in text.stdout
    rows = json.loads(gpupool(str(tmp_path / "mp.yaml"), "--json").stdout)
    assert {r["config"]: r["layout"] is not None for r in rows} == {"c": True, "sub": False}
    layouts = yaml.safe_load(gpupool(str(tmp_path / "mp.yaml"), "--yaml").stdout)["layouts"]
    assert layouts["c"]["dgx"]["0"] == {"mig": {"1g.5gb": 7}}
    assert gpupool(str(tmp_path / "mp.yaml"), "--select", "nosuch").returncode == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n")
    refused = gpupool(str(bad))
    assert refused.returncode == 78 and "mig-configs.c[0]" in refused.stderr


def test_manifests_without_a_readable_configmap_are_a_clear_error(tmp_path: Path):
    from slurm_gpupool.config.migparted import load_mig_parted

    path = tmp_path / "k8s.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\ndata: [config.yaml]\n---\nkind: DaemonSet\n")
    with pytest.raises(ConfigError) as e:
        load_mig_parted(path)
    assert e.value.exit_code == 78 and "no mig-parted config" in str(e.value)


@pytest.mark.parametrize("name", ["x y", "", "ünïcode", "all-1g.5gb\nNodeName=evil", "-1", "a" * 65])
def test_a_config_name_that_cannot_be_a_layout_name_is_left_out_with_its_reason(tmp_path: Path, name: str):
    """Found by the mig-parted fuzzer (test_fuzz.py): a config's name becomes a layout (the
    Slurm feature layout_<name>); such a name was imported, and `--yaml` wrote layouts that
    do not load.  mig-parted takes any name, so the file still imports: that config is left
    out, with its reason, and the others become layouts."""
    entry = {"devices": "all", "mig-enabled": False}
    specs = parse_mig_parted({"version": "v1", "mig-configs": {"ok": [entry], name: [entry]}}, Where("t.yaml"))
    assert set(specs) == {"ok", name}
    left_out = meaning(name, specs[name], nodesets()["dgx-a100"])
    assert left_out.targets is None and "cannot be a gpupool layout name" in left_out.why
    assert meaning("ok", specs["ok"], nodesets()["dgx-a100"]).targets
    # through `mig_parted:` of a pool config too: no layout named so, the other one is there
    (tmp_path / "mp.yaml").write_text(yaml.safe_dump({"version": "v1", "mig-configs": {"ok": [entry], name: [entry]}}))
    raw = {
        "version": 1,
        "nodesets": {"dgx": {"nodes": "a1", "machine": "dgx-a100"}},
        "layouts": {"whole": {"dgx": {"all": "whole"}}},
        "mig_parted": {"file": "mp.yaml"},
    }
    cfg = parse_config(raw, str(tmp_path / "pool.yaml"), tmp_path)
    assert "ok" in cfg.layout_names() and name not in cfg.layout_names()


@pytest.mark.parametrize(
    ("section", "key", "needle"),
    [
        ({"file": "mp.yaml", "nodesets": [{"x": 1}]}, "mig_parted.nodesets[0]", "expected a string"),
        ({"file": "mp.yaml", "nodesets": [["dgx"]]}, "mig_parted.nodesets[0]", "expected a string"),
        ({"file": "mp.yaml", "nodesets": ["dgx", "dgx"]}, "mig_parted.nodesets[1]", "named twice"),
        ({"file": "mp\x00.yaml"}, "mig_parted.file", "not a file name"),
    ],
)
def test_a_damaged_mig_parted_section_is_a_config_error_naming_the_key(tmp_path: Path, section, key, needle):
    """Found by the mig-parted fuzzer: a mapping or list as a node set name ended in exit 70
    (TypeError: unhashable), a NUL in the file name too (ValueError from open); a node set
    named twice added its layout entries twice."""
    (tmp_path / "mp.yaml").write_text(yaml.safe_dump(doc({"devices": "all", "mig-enabled": False})))
    raw = {
        "version": 1,
        "nodesets": {"dgx": {"nodes": "a1", "machine": "dgx-a100"}},
        "layouts": {"whole": {"dgx": {"all": "whole"}}},
        "mig_parted": section,
    }
    with pytest.raises(ConfigError) as e:
        parse_config(raw, str(tmp_path / "pool.yaml"), tmp_path)
    assert e.value.source == str(tmp_path / "pool.yaml") and e.value.key == key and needle in e.value.why


def test_a_device_filter_matches_the_boards_own_device_id(tmp_path):
    """mig-parted compares the GPU's own id: a 0x2901 filter does not select a 0x2909 B200 (the
    review); a machine file says which board it has (`pci_device_id`), else the model's first id."""
    from slurm_gpupool.config.migparted import DeviceFilter

    assert DeviceFilter(0x2909, 0x10DE, None).selects(0x2909) and not DeviceFilter(0x2901, 0x10DE, None).selects(0x2909)
    top = TOP / "etc" / "machines" / "dgx-b200.yaml"
    (tmp_path / "machines").mkdir()
    text = top.read_text().replace("machine: dgx-b200", "machine: b200-2909")
    (tmp_path / "machines" / "b200-2909.yaml").write_text(
        text.replace("{model: B200,", "{model: B200, pci_device_id: 0x2909,")
    )
    raw = {
        "version": 1,
        "paths": {"machines_dir": "machines"},
        "nodesets": {"old": {"nodes": "a1", "machine": "dgx-b200"}, "new": {"nodes": "b1", "machine": "b200-2909"}},
        "layouts": {"whole": {"old": {"all": "whole"}, "new": {"all": "whole"}}},
    }
    ns = parse_config(raw, str(tmp_path / "pool.yaml")).nodesets
    specs = parse_mig_parted(
        doc({"device-filter": "0x290110DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.23gb": 7}}),
        Where("t.yaml"),
    )["c"]
    assert meaning("c", specs, ns["old"]).targets and not meaning("c", specs, ns["new"]).applies
    bad = text.replace("{model: B200,", "{model: B200, pci_device_id: 0x2941,")
    (tmp_path / "machines" / "b200-2909.yaml").write_text(bad)
    from slurm_gpupool.config.machines import load_machine_file

    with pytest.raises(ConfigError) as e:
        load_machine_file(tmp_path / "machines" / "b200-2909.yaml")
    assert "gpus[0].pci_device_id: 0x2941 is not a B200 id (0x2901, 0x2909)" in e.value.message()


def test_the_import_shows_node_sets_no_config_sets_and_counts_no_fit_without_mig(tmp_path: Path, capsys):
    """An L40S node set counted as a fit of every config, and a node set no config selects
    was left out of the table (#26 item 21)."""
    from slurm_gpupool.cli.main import main

    raw = yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text())
    raw.pop("mig_parted")
    raw["nodesets"]["lovelace"] = {"nodes": "l40sn1", "machine": "l40s-server"}
    raw["nodesets"]["bare"] = {"nodes": "x1"}  # no machine description: cannot be judged
    for layout in raw["layouts"].values():
        layout["lovelace"] = {"all": "whole"}
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert (
        main(["--config", str(path), "layout", "import-mig-parted", str(TOP / "etc" / "mig-parted" / "config.yaml")])
        == 0
    )
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["all-disabled"], ["all-1g"])]
    assert {r[1] for r in rows if r[0] == "all-disabled"} == {"a30", "dgx", "hopper"}  # not lovelace, volta
    listed = out.split("node sets no config sets a layout for:")[1]
    assert "lovelace: none of its GPUs is MIG-capable (L40S)" in listed
    assert "volta: none of its GPUs is MIG-capable (V100-SXM2-32GB)" in listed
    assert "bare: no machine description" in listed
    assert main(
        ["--config", str(path), "layout", "import-mig-parted", str(DEFAULT), "--yaml"]
    ) == 0  # fmt: skip
    layouts = yaml.safe_load(capsys.readouterr().out)["layouts"]
    assert not any("lovelace" in sets or "volta" in sets for sets in layouts.values())
