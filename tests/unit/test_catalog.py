"""The catalog is data; these checks keep it internally consistent and true to
the reference tables."""

from __future__ import annotations

import re

import pytest

from slurm_gpupool.core.gres.devices import ci_cap_minor, gi_cap_minor, mig_device_files, mig_minors_table
from slurm_gpupool.core.mig import catalog
from slurm_gpupool.errors import ConfigError

REQUIRED = {
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "A100-PCIE-40GB",
    "A100-PCIE-80GB",
    "A30",
    "H100-SXM5-80GB",
    "H100-PCIE",
    "H100-NVL",
    "H200",
    "H200-NVL",
}


def test_required_models_present():
    assert set(catalog.all_models()) >= REQUIRED


@pytest.mark.parametrize("key", sorted(REQUIRED))
def test_profiles_fit_their_axes(key):
    geo = catalog.get_model(key).mig
    assert geo is not None
    for p in geo.profiles:
        assert p.placement_starts, p.name
        for s in p.placement_starts:
            assert s >= 0 and s + p.memory_slices <= geo.memory_slots, (p.name, s)
        assert p.compute_slices <= geo.compute_slices
        assert p.max_count >= 1
        assert p.memory_mib < catalog.get_model(key).memory_mib
        assert p.profile_id != p.nvml_enum  # two numbering systems (reference §1.3)
    names = [p.name for p in geo.profiles]
    assert len(set(names)) == len(names)
    assert len({p.profile_id for p in geo.profiles}) == len(names)


def test_enum_and_id_differ_where_the_reference_says():
    a100 = catalog.get_model("A100-SXM4-40GB").mig
    assert a100 is not None
    assert (a100.by_enum(0).profile_id, a100.by_enum(4).profile_id) == (19, 0)  # type: ignore[union-attr]
    a30 = catalog.get_model("A30").mig
    assert a30 is not None
    assert a30.by_name("1g.6gb").profile_id == 14  # type: ignore[union-attr]
    assert a30.by_name("4g.24gb").profile_id == 0  # type: ignore[union-attr]


def test_lookup_by_nvml_name_and_unknown_model():
    assert catalog.model_by_nvml_name("NVIDIA H100 80GB HBM3").key == "H100-SXM5-80GB"  # type: ignore[union-attr]
    assert catalog.model_by_nvml_name("A100-SXM4-40GB").key == "A100-SXM4-40GB"  # type: ignore[union-attr]
    with pytest.raises(ConfigError) as e:
        catalog.get_model("B9000")
    assert "unknown GPU model" in str(e.value)


def test_ampere_needs_reset_for_mig_mode_hopper_does_not():
    assert catalog.get_model("A100-SXM4-40GB").mig_mode_needs_reset
    assert not catalog.get_model("H100-SXM5-80GB").mig_mode_needs_reset


def test_gi_slot_ids_follow_the_observed_scheme():
    geo = catalog.get_model("A100-SXM4-40GB").mig
    assert geo is not None
    assert catalog.gi_slot_id(geo, 0, 8) == 0
    assert (catalog.gi_slot_id(geo, 0, 4), catalog.gi_slot_id(geo, 4, 4)) == (1, 2)
    assert [catalog.gi_slot_id(geo, s, 2) for s in (0, 2, 4, 6)] == [3, 4, 5, 6]
    assert [catalog.gi_slot_id(geo, s, 1) for s in (0, 6)] == [7, 13]
    a30 = catalog.get_model("A30").mig
    assert a30 is not None
    assert [catalog.gi_slot_id(a30, s, 1) for s in range(4)] == [3, 4, 5, 6]


def test_cap_minor_formula_matches_real_files():
    # reference §4.1: real files and the MIG user guide's first/last entries
    assert gi_cap_minor(4, 7) == 606 and ci_cap_minor(4, 7, 0) == 607
    assert (gi_cap_minor(0, 7), ci_cap_minor(0, 7, 0)) == (66, 67)
    assert gi_cap_minor(0, 11) == 102
    assert [ci_cap_minor(0, 1, c) for c in range(3)] == [13, 14, 15] and gi_cap_minor(0, 1) == 12
    table = mig_minors_table()
    assert table[:4] == [("config", 1), ("monitor", 2), ("gpu0/gi0/access", 3), ("gpu0/gi0/ci0/access", 4)]
    assert table[-1] == ("gpu31/gi14/ci7/access", 4322)
    assert mig_device_files(0, 7, 0) == (
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap66",
        "/dev/nvidia-caps/nvidia-cap67",
    )


def test_h200_matches_its_lgip_transcript():
    """`nvidia-smi mig -lgip` on an H200 (NVIDIA/mig-parted issue #120): GiB 16.00, 32.25,
    69.50, 139.75; the catalog had 16896/34048/69888/143360 MiB from no source."""
    geo = catalog.get_model("H200").mig
    assert geo is not None
    got = {p.name: (p.profile_id, round(p.memory_mib / 1024, 2), p.max_count, p.sm_count) for p in geo.profiles}
    assert got == {
        "1g.18gb": (19, 16.0, 7, 16),
        "1g.18gb+me": (20, 16.0, 1, 16),
        "1g.35gb": (15, 32.25, 4, 26),
        "2g.35gb": (14, 32.25, 3, 32),
        "3g.71gb": (9, 69.5, 2, 60),
        "4g.71gb": (5, 69.5, 1, 64),
        "7g.141gb": (0, 139.75, 1, 132),
    }


@pytest.mark.parametrize(
    ("nvml_name", "device_id", "key"),
    [
        ("NVIDIA A100-PCIE-40GB", 0x20F1, "A100-PCIE-40GB"),
        ("NVIDIA A100 80GB PCIe", 0x20B5, "A100-PCIE-80GB"),
        ("NVIDIA H100 PCIe", 0x2331, "H100-PCIE"),
        ("NVIDIA H200 NVL", 0x233B, "H200-NVL"),
    ],
)
def test_pcie_and_nvl_boards_are_known_by_name_and_pci_id(nvml_name: str, device_id: int, key: str):
    assert catalog.get_model(nvml_name).key == key  # `gpupool layout profiles "NVIDIA A100-PCIE-40GB"`
    assert catalog.model_by_pci_device_id(device_id).key == key  # type: ignore[union-attr]
    geo = catalog.get_model(key).mig
    assert geo is not None and geo.memory_slots == 8 and geo.compute_slices == 7


def test_h100_pcie_has_the_sxm_table_with_its_own_sm_counts():
    pcie, sxm = catalog.get_model("H100-PCIE").mig, catalog.get_model("H100-SXM5-80GB").mig
    assert pcie is not None and sxm is not None
    assert [(p.name, p.profile_id, p.placement_starts) for p in pcie.profiles] == [
        (p.name, p.profile_id, p.placement_starts) for p in sxm.profiles
    ]
    assert [p.sm_count for p in pcie.profiles] == [14, 14, 14, 30, 46, 62, 114]


def test_node_gpus_are_identified_by_name_then_pci_id_and_unknown_ones_named():
    """#14: detection by PCI device id (NVIDIA's driver README table), else by name."""
    assert catalog.identify("NVIDIA B200", 0x2909, "GPU 0").key == "B200"  # the second B200 id
    assert catalog.identify("whatever the driver says", 0x26B9, "GPU 0").key == "L40S"
    assert catalog.identify("GH200 120GB", 0, "GPU 0").key == "GH200-96GB"  # old drivers: no 'NVIDIA '
    assert catalog.identify("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 0, "g").key == "RTX-PRO-6000"
    # one device id, two products (the review: an A2 was taken for an A16, a 72GB PRO 5000 got MIG)
    assert catalog.identify("NVIDIA A2", 0x25B6, "g").key == "A2"
    assert catalog.identify("NVIDIA A16", 0x25B6, "g").key == "A16"
    assert catalog.identify("NVIDIA RTX PRO 5000 72GB Blackwell", 0x2BB3, "g").mig is None
    with pytest.raises(ConfigError) as shared:
        catalog.identify("NVIDIA A2 (new name)", 0x25B6, "GPU 1")
    assert "that id is A16 or A2, which the name does not say" in shared.value.why
    with pytest.raises(ConfigError) as e:
        catalog.identify("NVIDIA X1000", 0xABCD, "GPU 3 of node7")
    assert e.value.exit_code == 78
    assert "GPU 3 of node7: unknown GPU 'NVIDIA X1000' (PCI device id 10de:abcd)" in e.value.message()
    assert "gpupool layout models" in (e.value.hint or "")


SHARED_IDS = {0x25B6: {"A16", "A2"}, 0x2BB3: {"RTX-PRO-5000", "RTX-PRO-5000-72GB"}}  # told apart by name


def test_every_model_is_complete_and_ids_are_unique_but_for_boards_sharing_one():
    seen: dict[int, set[str]] = {}
    names: set[str] = set()
    for key, m in catalog.all_models().items():
        assert m.source and m.nvml_names and m.pci_device_ids, key
        assert m.compute_capability >= (7, 0) and m.memory_mib > 0
        for i in m.pci_device_ids:
            seen.setdefault(i, set()).add(key)
        assert not names & set(m.nvml_names), key
        names |= set(m.nvml_names)
    assert {i: ks for i, ks in seen.items() if len(ks) > 1} == SHARED_IDS
    for key, m in catalog.all_models().items():
        # every source is tagged: [V] NVIDIA-authored, [O] observed, [S] secondary (research notes)
        assert re.search(r"\[[VOS]", m.source), key
        if m.mig is not None:
            assert m.architecture in ("ampere", "hopper", "blackwell")
    # the Blackwell workstation boards: 4 compute slices on 12 memory units
    rtx = catalog.get_model("RTX-PRO-6000").mig
    assert rtx is not None and (rtx.compute_slices, rtx.memory_slots) == (4, 12)
    assert rtx.by_name("1g.24gb+me.all").has_media_extensions and not rtx.by_name("1g.24gb-me").has_media_extensions
    assert catalog.get_model("A30").profile("4g.24gb").memory_mib == 24000  # R525+ drivers (23.44 GiB)


def test_a_site_describes_a_gpu_the_catalog_does_not_know(tmp_path, capsys):
    """The unknown-GPU error says how to describe it; described, it is a whole/time-shared model."""
    from pathlib import Path

    import yaml

    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.controller.gres_install import render

    with pytest.raises(ConfigError) as e:
        catalog.identify("NVIDIA L20", 0x26BA, "GPU 0 of n1")
    assert "gpu_models:" in (e.value.hint or "") and "pci_device_id: 0x26BA" in (e.value.hint or "")
    top = Path(__file__).resolve().parents[2]
    (tmp_path / "machines").mkdir()
    text = (top / "etc" / "machines" / "l40s-server.yaml").read_text()
    (tmp_path / "machines" / "l20-server.yaml").write_text(
        text.replace("machine: l40s-server", "machine: l20-server").replace("model: L40S,", "model: L20,")
    )
    raw = {
        "version": 1,
        "paths": {"machines_dir": "machines"},
        "gpu_models": {"L20": {"nvml_name": "NVIDIA L20", "pci_device_id": "0x26BA", "memory_mib": 46068}},
        "nodesets": {"l20": {"nodes": "l[1-2]", "machine": "l20-server"}},
        "layouts": {"day": {"l20": {"0-3": {"shared": 4}, "4-7": "whole"}}},
    }
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump(raw))
    try:
        cfg = load_config(pool)
        assert catalog.identify("whatever", 0x26BA, "GPU 0").key == "L20"
        assert catalog.get_model("L20").mig is None and "gpu_models.L20" in catalog.get_model("L20").source
        gres = render(cfg, cfg.all_nodes(), "day")["gres.conf"]
        assert "Type=l20_shared" in gres and "Type=l20 " in gres
        from slurm_gpupool.cli.main import main

        capsys.readouterr()
        assert main(["--config", str(pool), "layout", "models"]) == 0
        assert "NVIDIA L20" in capsys.readouterr().out  # the hint sends admins there
        assert main(["--config", str(pool), "layout", "profiles", "L20"]) == 2  # no MIG (not "unknown")
        assert "does not support MIG" in capsys.readouterr().err
        for bad, words in (
            ({"nvml_name": "NVIDIA L40S", "pci_device_id": 0x26B9, "memory_mib": 1}, "is the built-in model L40S"),
            ({"nvml_name": "NVIDIA L20", "pci_device_id": "zz", "memory_mib": 1}, "not a PCI device id"),
            ({"nvml_name": "NVIDIA L20", "pci_device_id": 0x26BA, "memory_mib": 0}, "positive number of MiB"),
            # the review: the name reaches gres.conf and slurm.conf (type names), so it is checked
            ({"nvml_name": "NVIDIA L20\nNodeName=evil", "pci_device_id": 0x26BA, "memory_mib": 1}, "not an NVML"),
            ({"nvml_name": "NVIDIA L20,x:y=z", "pci_device_id": 0x26BA, "memory_mib": 1}, "not an NVML GPU name"),
            ({"nvml_name": "   ", "pci_device_id": 0x26BA, "memory_mib": 1}, "not an NVML GPU name"),
            ({"nvml_name": "NVIDIA -L20", "pci_device_id": 0x26BA, "memory_mib": 1}, "gives no usable GRES type"),
            (
                {"nvml_name": "NVIDIA L20", "pci_device_id": 0x26BA, "memory_mib": 1, "compute_capability": 8.1},
                "expected a string, got float",
            ),
            (
                {"nvml_name": "NVIDIA L20", "pci_device_id": 0x26BA, "memory_mib": 1, "compute_capability": "-1.5"},
                "not a compute capability",
            ),
        ):
            raw["gpu_models"] = {"L20": bad}
            pool.write_text(yaml.safe_dump(raw))
            with pytest.raises(ConfigError) as e:
                load_config(pool)
            assert "gpu_models.L20" in e.value.message() and words in e.value.message()
        # a second config giving L20 another name: nothing cached from the first is reused
        raw["gpu_models"] = {"L20": {"nvml_name": "NVIDIA L20X", "pci_device_id": 0x26BA, "memory_mib": 46068}}
        pool.write_text(yaml.safe_dump(raw))
        other = load_config(pool)
        assert "Type=l20x_shared" in render(other, other.all_nodes(), "day")["gres.conf"]
    finally:
        catalog.set_site_models({})
    assert "L20" not in catalog.all_models()
