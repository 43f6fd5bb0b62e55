"""Hopper boards (H100, H800, H20, H200, GH200): their profile tables, then one row per model.

Every Hopper 7-slice table has the same IDs, placements and engine counts; the boards differ
in profile names, sizes and SMs, which each table gives as its ``nvidia-smi mig -lgip`` does.
"""

from __future__ import annotations

from dataclasses import replace

from slurm_gpupool.core.mig.catalog_data.rows import (
    ALL7,
    HALVES,
    HOPPER,
    NVLINK4,
    QUARTERS,
    MigTable,
    ModelRow,
    ProfileRow,
    ProfileSize,
    seven_slice,
)


def hopper_table(
    *, g1: ProfileSize, g1_rev2: ProfileSize, g2: ProfileSize, g3: ProfileSize, g4: ProfileSize, g7: ProfileSize
) -> MigTable:
    """A Hopper 7-slice board: IDs 19/20/15/14/9/5/0 and the H100 engine counts; each board
    gives its sizes (``g1_rev2``: one compute slice with two memory slices, double memory)."""
    one = ProfileRow(
        name=g1.name,
        nvml_enum=0,
        profile_id=19,
        compute_slices=1,
        memory_slices=1,
        memory_mib=g1.memory_mib,
        max_count=7,
        sm_count=g1.sm_count,
        copy_engines=1,
        decoders=1,
        jpegs=1,
        ofas=0,
        placement_starts=ALL7,
    )
    return seven_slice(
        one,
        replace(one, name=g1.name + "+me", nvml_enum=7, profile_id=20, max_count=1, ofas=1),
        ProfileRow(
            name=g1_rev2.name,
            nvml_enum=9,
            profile_id=15,
            compute_slices=1,
            memory_slices=2,
            memory_mib=g1_rev2.memory_mib,
            max_count=4,
            sm_count=g1_rev2.sm_count,
            copy_engines=1,
            decoders=1,
            jpegs=1,
            ofas=0,
            placement_starts=QUARTERS,
        ),
        ProfileRow(
            name=g2.name,
            nvml_enum=1,
            profile_id=14,
            compute_slices=2,
            memory_slices=2,
            memory_mib=g2.memory_mib,
            max_count=3,
            sm_count=g2.sm_count,
            copy_engines=2,
            decoders=2,
            jpegs=2,
            ofas=0,
            placement_starts=(0, 2, 4),
        ),
        ProfileRow(
            name=g3.name,
            nvml_enum=2,
            profile_id=9,
            compute_slices=3,
            memory_slices=4,
            memory_mib=g3.memory_mib,
            max_count=2,
            sm_count=g3.sm_count,
            copy_engines=3,
            decoders=3,
            jpegs=3,
            ofas=0,
            placement_starts=HALVES,
        ),
        ProfileRow(
            name=g4.name,
            nvml_enum=3,
            profile_id=5,
            compute_slices=4,
            memory_slices=4,
            memory_mib=g4.memory_mib,
            max_count=1,
            sm_count=g4.sm_count,
            copy_engines=4,
            decoders=4,
            jpegs=4,
            ofas=0,
            placement_starts=(0,),
        ),
        ProfileRow(
            name=g7.name,
            nvml_enum=4,
            profile_id=0,
            compute_slices=7,
            memory_slices=8,
            memory_mib=g7.memory_mib,
            max_count=1,
            sm_count=g7.sm_count,
            copy_engines=8,
            decoders=7,
            jpegs=7,
            ofas=1,
            placement_starts=(0,),
        ),
    )


H100_80GB = hopper_table(
    g1=ProfileSize(name="1g.10gb", memory_mib=9984, sm_count=16),
    g1_rev2=ProfileSize(name="1g.20gb", memory_mib=20096, sm_count=26),
    g2=ProfileSize(name="2g.20gb", memory_mib=20096, sm_count=32),
    g3=ProfileSize(name="3g.40gb", memory_mib=40448, sm_count=60),
    g4=ProfileSize(name="4g.40gb", memory_mib=40448, sm_count=64),
    g7=ProfileSize(name="7g.80gb", memory_mib=81152, sm_count=132),
)
# `nvidia-smi mig -lgip` on an H100 PCIe (driver 570): the H100 SXM table with fewer SMs
H100_PCIE_80GB = hopper_table(
    g1=ProfileSize(name="1g.10gb", memory_mib=9984, sm_count=14),
    g1_rev2=ProfileSize(name="1g.20gb", memory_mib=20096, sm_count=14),
    g2=ProfileSize(name="2g.20gb", memory_mib=20096, sm_count=30),
    g3=ProfileSize(name="3g.40gb", memory_mib=40448, sm_count=46),
    g4=ProfileSize(name="4g.40gb", memory_mib=40448, sm_count=62),
    g7=ProfileSize(name="7g.80gb", memory_mib=81152, sm_count=114),
)
H100_94GB = hopper_table(
    g1=ProfileSize(name="1g.12gb", memory_mib=11008, sm_count=16),
    g1_rev2=ProfileSize(name="1g.24gb", memory_mib=22144, sm_count=26),
    g2=ProfileSize(name="2g.24gb", memory_mib=22144, sm_count=32),
    g3=ProfileSize(name="3g.47gb", memory_mib=47488, sm_count=60),
    g4=ProfileSize(name="4g.47gb", memory_mib=47488, sm_count=64),
    g7=ProfileSize(name="7g.94gb", memory_mib=95360, sm_count=132),
)
# GH200 96GB full -lgip: 11.00 / 23.00 / 46.50 / 93.00 GiB; placements unverified
H100_96GB = hopper_table(
    g1=ProfileSize(name="1g.12gb", memory_mib=11264, sm_count=16),
    g1_rev2=ProfileSize(name="1g.24gb", memory_mib=23552, sm_count=26),
    g2=ProfileSize(name="2g.24gb", memory_mib=23552, sm_count=32),
    g3=ProfileSize(name="3g.48gb", memory_mib=47616, sm_count=60),
    g4=ProfileSize(name="4g.48gb", memory_mib=47616, sm_count=64),
    g7=ProfileSize(name="7g.96gb", memory_mib=95232, sm_count=132),
)
# H20: 1g rows observed (11.75 GiB, 8 SMs); larger sizes derived from that row (twice the
# next smaller plus 256 MiB, 7g kept under the board's 97871 MiB) and SMs scaled from H100 by
# 78/132 (unverified)
H20_96GB = hopper_table(
    g1=ProfileSize(name="1g.12gb", memory_mib=12032, sm_count=8),
    g1_rev2=ProfileSize(name="1g.24gb", memory_mib=24320, sm_count=15),
    g2=ProfileSize(name="2g.24gb", memory_mib=24320, sm_count=19),
    g3=ProfileSize(name="3g.48gb", memory_mib=48896, sm_count=35),
    g4=ProfileSize(name="4g.48gb", memory_mib=48896, sm_count=38),
    g7=ProfileSize(name="7g.96gb", memory_mib=97536, sm_count=78),
)
# GH200 144GB: 1g/2g rows observed (17.50 / 35.25 GiB); 3g+ sizes derived
GH200_144GB = hopper_table(
    g1=ProfileSize(name="1g.18gb", memory_mib=17920, sm_count=16),
    g1_rev2=ProfileSize(name="1g.36gb", memory_mib=36096, sm_count=26),
    g2=ProfileSize(name="2g.36gb", memory_mib=36096, sm_count=32),
    g3=ProfileSize(name="3g.72gb", memory_mib=72448, sm_count=60),
    g4=ProfileSize(name="4g.72gb", memory_mib=72448, sm_count=64),
    g7=ProfileSize(name="7g.144gb", memory_mib=145152, sm_count=132),
)
# `nvidia-smi mig -lgip` on an 8-GPU H200 (NVIDIA/mig-parted issue #120): IDs, SMs, engines
# and max counts as H100; GiB 16.00/32.25/69.50/139.75 (MiB from the GiB column, which is
# truncated to 1/100 GiB); placements unverified
H200_141GB = hopper_table(
    g1=ProfileSize(name="1g.18gb", memory_mib=16384, sm_count=16),
    g1_rev2=ProfileSize(name="1g.35gb", memory_mib=33024, sm_count=26),
    g2=ProfileSize(name="2g.35gb", memory_mib=33024, sm_count=32),
    g3=ProfileSize(name="3g.71gb", memory_mib=71168, sm_count=60),
    g4=ProfileSize(name="4g.71gb", memory_mib=71168, sm_count=64),
    g7=ProfileSize(name="7g.141gb", memory_mib=143104, sm_count=132),
)
# H20-3e: H200 names and sizes, H20 SMs (all unverified)
H20_141GB = hopper_table(
    g1=ProfileSize(name="1g.18gb", memory_mib=16384, sm_count=8),
    g1_rev2=ProfileSize(name="1g.35gb", memory_mib=33024, sm_count=15),
    g2=ProfileSize(name="2g.35gb", memory_mib=33024, sm_count=19),
    g3=ProfileSize(name="3g.71gb", memory_mib=71168, sm_count=35),
    g4=ProfileSize(name="4g.71gb", memory_mib=71168, sm_count=38),
    g7=ProfileSize(name="7g.141gb", memory_mib=143104, sm_count=78),
)


ROWS = (
    ModelRow(
        key="H100-SXM5-80GB",
        nvml_names=("NVIDIA H100 80GB HBM3",),
        pci_device_ids=(0x2330,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=81559,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_80GB,
        source="MIG-UG H100 80GB table [V S7]; -lgip/-lgipp transcripts (reference §1.4)",
    ),
    ModelRow(
        key="H100-PCIE",
        nvml_names=("NVIDIA H100 PCIe",),
        pci_device_ids=(0x2331,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=81559,
        nvlink_version=NVLINK4,
        nvlinks=12,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_PCIE_80GB,
        source="driver README [V S3]; -lgip on an H100 PCIe, driver 570 (reference §1.4); NVLink bridge count "
        "unverified",
    ),
    ModelRow(
        key="H100-NVL",
        nvml_names=("NVIDIA H100 NVL",),
        pci_device_ids=(0x2321,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=95830,
        nvlink_version=NVLINK4,
        nvlinks=12,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_94GB,
        source="-lgip NVIDIA gpu-operator#900 [V S13], Azure [O S14]; -lgipp [O S16b]",
    ),
    ModelRow(
        key="H100-SXM5-94GB",
        nvml_names=("NVIDIA H100",),
        pci_device_ids=(0x2339,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=95830,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_94GB,
        source="names and max counts: vGPU docs [V S8]; id 0x2339 'NVIDIA H100' from the driver README, product not "
        "stated (unverified); other columns as H100 NVL (unverified)",
    ),
    ModelRow(
        key="H100-SXM5-96GB",
        nvml_names=("NVIDIA H100 96GB HBM3",),
        pci_device_ids=(0x233D,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=97871,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_96GB,
        source="id from mig-parted's H100-96GB filter [S S6]; NVML name unverified; table as H100 on GH200 96GB",
    ),
    ModelRow(
        key="H800",
        nvml_names=("NVIDIA H800",),
        pci_device_ids=(0x2324,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=81559,
        nvlink_version=NVLINK4,
        nvlinks=8,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_80GB,
        source="driver README [V S3]; 81559 MiB [O S46]; names/max: vGPU docs [V S8]; other columns as H100 SXM "
        "(unverified); H800 NVLink is cut to 8 links",
    ),
    ModelRow(
        key="H800-PCIE",
        nvml_names=("NVIDIA H800 PCIe",),
        pci_device_ids=(0x2322,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=81559,
        nvlink_version=NVLINK4,
        nvlinks=8,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_PCIE_80GB,
        source="driver README [V S3]; names/max: vGPU docs [V S8]; other columns as H100 PCIe (unverified)",
    ),
    ModelRow(
        key="H800-NVL",
        nvml_names=("NVIDIA H800 NVL",),
        pci_device_ids=(0x233A,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=95830,
        nvlink_version=NVLINK4,
        nvlinks=8,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_94GB,
        source="driver README [V S3]; names/max: vGPU docs [V S8]; other columns as H100 NVL (unverified)",
    ),
    ModelRow(
        key="H20",
        nvml_names=("NVIDIA H20",),
        pci_device_ids=(0x2329,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=97871,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H20_96GB,
        source="driver README [V S3]; 97871 MiB [O S47]; names/max: vGPU docs [V S8]; 1g rows from -lgip on driver "
        "535.247.01 [O S16] (1g: 11.75 GiB, 8 SMs); larger profiles derived (unverified)",
    ),
    ModelRow(
        key="H20-141GB",
        nvml_names=("NVIDIA H20-3e",),
        pci_device_ids=(0x232C,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=143771,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H20_141GB,
        source="driver README 610 [V S4]; names/max: vGPU docs [V S8]; everything else derived from H200 and H20 "
        "(unverified)",
    ),
    ModelRow(
        key="H200",
        nvml_names=("NVIDIA H200",),
        pci_device_ids=(0x2335,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=143771,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H200_141GB,
        source="-lgip on an 8-GPU H200, NVIDIA mig-parted#120 [V S9]; placements unverified",
    ),
    ModelRow(
        key="H200-NVL",
        nvml_names=("NVIDIA H200 NVL",),
        pci_device_ids=(0x233B,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=143771,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H200_141GB,
        source="driver README 610 [V S4]; 143771 MiB [O S48]; names/max: vGPU docs [V S8]; the rest as H200 SXM "
        "(unverified)",
    ),
    ModelRow(
        key="GH200-96GB",
        nvml_names=("NVIDIA GH200 480GB", "NVIDIA GH200 120GB"),
        pci_device_ids=(0x2342,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=97871,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=H100_96GB,
        source="driver README [V S3] (name by subsystem); full -lgip and -cgi transcript [O S17]; MIG-UG 'H100 on "
        "GH200 96GB' [V S7]; placements unverified",
    ),
    ModelRow(
        key="GH200-144GB",
        nvml_names=("NVIDIA GH200 144G HBM3e",),
        pci_device_ids=(0x2348,),
        architecture=HOPPER,
        compute_capability=(9, 0),
        memory_mib=146831,
        nvlink_version=NVLINK4,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=GH200_144GB,
        source="driver README 610 [V S4]; 146831 MiB [O S50]; -lgip 1g/2g rows NVIDIA mig-parted#139 [V S24]; "
        "3g/4g/7g names/max from mig-parted's config [S S6], sizes derived (unverified)",
    ),
)
