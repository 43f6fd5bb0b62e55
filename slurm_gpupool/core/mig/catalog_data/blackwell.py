"""Blackwell boards (B200, GB200, B300, GB300, RTX PRO): their profile tables, then one row per model."""

from __future__ import annotations

from dataclasses import replace

from slurm_gpupool.core.mig.catalog_data.rows import (
    ALL7,
    BLACKWELL,
    HALVES,
    NO_NVLINK,
    NVLINK5,
    QUARTERS,
    MigTable,
    ModelRow,
    ProfileRow,
    ProfileSize,
    seven_slice,
)


def blackwell_table(
    *, g1: ProfileSize, g1_rev2: ProfileSize, g2: ProfileSize, g3: ProfileSize, g4: ProfileSize, g7: ProfileSize
) -> MigTable:
    """A Blackwell 7-slice board (B200, GB200, B300, GB300): the Hopper IDs (19/20/15/14 seen in
    transcripts; 9/5/0 unverified), MIG-UG copy engines 2/2/2/4/6/8/16 and one NVDEC/JPEG per
    slice; each board gives its sizes (``g1_rev2``: one compute slice with two memory slices)."""
    one = ProfileRow(
        name=g1.name,
        nvml_enum=0,
        profile_id=19,
        compute_slices=1,
        memory_slices=1,
        memory_mib=g1.memory_mib,
        max_count=7,
        sm_count=g1.sm_count,
        copy_engines=2,
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
            copy_engines=2,
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
            copy_engines=4,
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
            copy_engines=6,
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
            copy_engines=8,
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
            copy_engines=16,
            decoders=7,
            jpegs=7,
            ofas=1,
            placement_starts=(0,),
        ),
    )


# B200: 1g 20.50 GiB (driver of March 2025), 1g double and 2g 44.25 GiB, SM 18/30/36 observed;
# 3g+ sizes (twice the next smaller plus 256 MiB, as on Hopper) and SMs derived
B200_180GB = blackwell_table(
    g1=ProfileSize(name="1g.23gb", memory_mib=20992, sm_count=18),
    g1_rev2=ProfileSize(name="1g.45gb", memory_mib=45312, sm_count=30),
    g2=ProfileSize(name="2g.45gb", memory_mib=45312, sm_count=36),
    g3=ProfileSize(name="3g.90gb", memory_mib=90880, sm_count=54),
    g4=ProfileSize(name="4g.90gb", memory_mib=90880, sm_count=72),
    g7=ProfileSize(name="7g.180gb", memory_mib=182016, sm_count=148),
)
# GB200 production boards: 22.00 / 45.50 GiB, SM 18/32/38 observed
GB200_186GB = blackwell_table(
    g1=ProfileSize(name="1g.23gb", memory_mib=22528, sm_count=18),
    g1_rev2=ProfileSize(name="1g.47gb", memory_mib=46592, sm_count=32),
    g2=ProfileSize(name="2g.47gb", memory_mib=46592, sm_count=38),
    g3=ProfileSize(name="3g.93gb", memory_mib=93440, sm_count=56),
    g4=ProfileSize(name="4g.93gb", memory_mib=93440, sm_count=76),
    g7=ProfileSize(name="7g.186gb", memory_mib=187136, sm_count=152),
)
# B300/GB300: names and counts only (the GPU Operator's config); everything else derived
B300_288GB = blackwell_table(
    g1=ProfileSize(name="1g.34gb", memory_mib=34560, sm_count=20),
    g1_rev2=ProfileSize(name="1g.67gb", memory_mib=68864, sm_count=32),
    g2=ProfileSize(name="2g.67gb", memory_mib=68864, sm_count=40),
    g3=ProfileSize(name="3g.135gb", memory_mib=137472, sm_count=60),
    g4=ProfileSize(name="4g.135gb", memory_mib=137472, sm_count=80),
    g7=ProfileSize(name="7g.269gb", memory_mib=273664, sm_count=160),
)
GB300_288GB = blackwell_table(
    g1=ProfileSize(name="1g.35gb", memory_mib=35584, sm_count=20),
    g1_rev2=ProfileSize(name="1g.70gb", memory_mib=71168, sm_count=32),
    g2=ProfileSize(name="2g.70gb", memory_mib=71168, sm_count=40),
    g3=ProfileSize(name="3g.139gb", memory_mib=142336, sm_count=60),
    g4=ProfileSize(name="4g.139gb", memory_mib=142336, sm_count=80),
    g7=ProfileSize(name="7g.278gb", memory_mib=282880, sm_count=160),
)

# RTX PRO 6000 Blackwell: 4 compute slices on a 12-unit memory axis (`-lgipp`: 1g {0,3,6,9}:3,
# 2g {0,6}:6, 4g {0}:12); +gfx (graphics), +me.all (every media engine), -me (none) variants,
# each written as what it changes in its size's plain profile.
_RTX6000_1G = ProfileRow(
    name="1g.24gb",
    nvml_enum=0,
    profile_id=14,
    compute_slices=1,
    memory_slices=3,
    memory_mib=24192,
    max_count=4,
    sm_count=46,
    copy_engines=1,
    decoders=1,
    jpegs=1,
    ofas=0,
    placement_starts=(0, 3, 6, 9),
)
_RTX6000_2G = ProfileRow(
    name="2g.48gb",
    nvml_enum=1,
    profile_id=5,
    compute_slices=2,
    memory_slices=6,
    memory_mib=48512,
    max_count=2,
    sm_count=94,
    copy_engines=2,
    decoders=2,
    jpegs=2,
    ofas=0,
    placement_starts=(0, 6),
)
_RTX6000_4G = ProfileRow(
    name="4g.96gb",
    nvml_enum=3,
    profile_id=0,
    compute_slices=4,
    memory_slices=12,
    memory_mib=97408,
    max_count=1,
    sm_count=188,
    copy_engines=4,
    decoders=4,
    jpegs=4,
    ofas=1,
    placement_starts=(0,),
)
RTX_PRO_6000_96GB = MigTable(
    memory_slots=12,
    compute_slices=4,
    max_mig_devices=4,
    profiles=(
        _RTX6000_1G,
        replace(_RTX6000_1G, name="1g.24gb+me", nvml_enum=7, profile_id=21, max_count=1, ofas=1),
        replace(_RTX6000_1G, name="1g.24gb+gfx", nvml_enum=0xA, profile_id=47),
        replace(
            _RTX6000_1G, name="1g.24gb+me.all", nvml_enum=0xF, profile_id=65, max_count=1, decoders=4, jpegs=4, ofas=1
        ),
        replace(_RTX6000_1G, name="1g.24gb-me", nvml_enum=0xD, profile_id=67, decoders=0, jpegs=0),
        _RTX6000_2G,
        replace(_RTX6000_2G, name="2g.48gb+gfx", nvml_enum=0xB, profile_id=35),
        replace(
            _RTX6000_2G, name="2g.48gb+me.all", nvml_enum=0x10, profile_id=64, max_count=1, decoders=4, jpegs=4, ofas=1
        ),
        replace(_RTX6000_2G, name="2g.48gb-me", nvml_enum=0xE, profile_id=66, decoders=0, jpegs=0),
        _RTX6000_4G,
        replace(_RTX6000_4G, name="4g.96gb+gfx", nvml_enum=0xC, profile_id=32),
    ),
)

# RTX PRO 5000 / 4500 Blackwell: two compute slices (MIG-UG, current copy).  No transcript:
# the memory axis (2 units), IDs (by analogy with the 6000's half and full profiles), SMs and
# sizes are unverified.
_RTX5000_1G = ProfileRow(
    name="1g.24gb",
    nvml_enum=0,
    profile_id=5,
    compute_slices=1,
    memory_slices=1,
    memory_mib=24192,
    max_count=2,
    sm_count=55,
    copy_engines=1,
    decoders=1,
    jpegs=0,
    ofas=0,
    placement_starts=(0, 1),
)
_RTX5000_2G = ProfileRow(
    name="2g.48gb",
    nvml_enum=1,
    profile_id=0,
    compute_slices=2,
    memory_slices=2,
    memory_mib=48512,
    max_count=1,
    sm_count=110,
    copy_engines=4,
    decoders=3,
    jpegs=1,
    ofas=1,
    placement_starts=(0,),
)
RTX_PRO_5000_48GB = MigTable(
    memory_slots=2,
    compute_slices=2,
    max_mig_devices=2,
    profiles=(
        _RTX5000_1G,
        replace(_RTX5000_1G, name="1g.24gb+me", nvml_enum=7, profile_id=6, max_count=1, jpegs=1, ofas=1),
        replace(_RTX5000_1G, name="1g.24gb+gfx", nvml_enum=0xA, profile_id=35),
        replace(
            _RTX5000_1G, name="1g.24gb+me.all", nvml_enum=0xF, profile_id=64, max_count=1, decoders=3, jpegs=1, ofas=1
        ),
        replace(_RTX5000_1G, name="1g.24gb-me", nvml_enum=0xD, profile_id=66, decoders=0),
        _RTX5000_2G,
        replace(_RTX5000_2G, name="2g.48gb+gfx", nvml_enum=0xB, profile_id=32),
    ),
)
_RTX4500_1G = ProfileRow(
    name="1g.16gb",
    nvml_enum=0,
    profile_id=5,
    compute_slices=1,
    memory_slices=1,
    memory_mib=16128,
    max_count=2,
    sm_count=41,
    copy_engines=1,
    decoders=1,
    jpegs=1,
    ofas=0,
    placement_starts=(0, 1),
)
_RTX4500_2G = ProfileRow(
    name="2g.32gb",
    nvml_enum=1,
    profile_id=0,
    compute_slices=2,
    memory_slices=2,
    memory_mib=32256,
    max_count=1,
    sm_count=82,
    copy_engines=2,
    decoders=3,
    jpegs=2,
    ofas=1,
    placement_starts=(0,),
)
RTX_PRO_4500_32GB = MigTable(
    memory_slots=2,
    compute_slices=2,
    max_mig_devices=2,
    profiles=(
        _RTX4500_1G,
        replace(_RTX4500_1G, name="1g.16gb+gfx", nvml_enum=0xA, profile_id=35),
        replace(
            _RTX4500_1G, name="1g.16gb+me.all", nvml_enum=0xF, profile_id=64, max_count=1, decoders=3, jpegs=2, ofas=1
        ),
        replace(_RTX4500_1G, name="1g.16gb-me", nvml_enum=0xD, profile_id=66, decoders=0, jpegs=0),
        _RTX4500_2G,
        replace(_RTX4500_2G, name="2g.32gb+gfx", nvml_enum=0xB, profile_id=32),
    ),
)


ROWS = (
    ModelRow(
        key="B200",
        nvml_names=("NVIDIA B200",),
        pci_device_ids=(0x2901, 0x2909),
        architecture=BLACKWELL,
        compute_capability=(10, 0),
        memory_mib=183359,
        nvlink_version=NVLINK5,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=B200_180GB,
        source="driver README 610 [V S4]; -lgip 1g/2g rows NVIDIA mig-parted#166/#187 [V S10, S11]; MIG-UG names, "
        "copy engines, max [V S7]; 3g/4g/7g IDs, SMs and sizes derived (unverified)",
    ),
    ModelRow(
        key="GB200",
        nvml_names=("NVIDIA GB200",),
        pci_device_ids=(0x2941,),
        architecture=BLACKWELL,
        compute_capability=(10, 0),
        memory_mib=189471,
        nvlink_version=NVLINK5,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=GB200_186GB,
        source="driver README 610 [V S4]; 189471 MiB [O S51]; production -lgip 1g/2g rows NVIDIA mig-parted#227 [V "
        "S12]; 3g/4g/7g names/max from mig-parted's config [S S6], IDs, SMs and sizes derived (unverified)",
    ),
    ModelRow(
        key="B300",
        nvml_names=("NVIDIA B300 SXM6 AC",),
        pci_device_ids=(0x3182,),
        architecture=BLACKWELL,
        compute_capability=(10, 3),
        memory_mib=275040,
        nvlink_version=NVLINK5,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=B300_288GB,
        source="driver README 610 [V S4]; 275040 MiB [O S52]; names/max from the GPU Operator's config [S S6]; IDs, "
        "SMs, engines and sizes derived (unverified)",
    ),
    ModelRow(
        key="GB300",
        nvml_names=("NVIDIA GB300",),
        pci_device_ids=(0x31C2, 0x31C3),
        architecture=BLACKWELL,
        compute_capability=(10, 3),
        memory_mib=284208,
        nvlink_version=NVLINK5,
        nvlinks=18,
        temp_slowdown_c=87,
        temp_shutdown_c=92,
        mig=GB300_288GB,
        source="driver README 610 [V S4]; 284208 MiB [O S53]; names/max from the GPU Operator's config [S S6]; IDs, "
        "SMs, engines and sizes derived (unverified)",
    ),
    ModelRow(
        key="RTX-PRO-6000",
        nvml_names=(
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        ),
        pci_device_ids=(0x2BB5, 0x2BB1, 0x2BB4),
        architecture=BLACKWELL,
        compute_capability=(12, 0),
        memory_mib=97887,
        nvlink_version=NO_NVLINK,
        nvlinks=0,
        temp_slowdown_c=90,
        temp_shutdown_c=95,
        mig=RTX_PRO_6000_96GB,
        source="driver README 610 [V S4]; full -lgip and -lgipp on Server and Max-Q editions [O S20, S21, S22, S23];"
        " MIG-UG table [V S7]; NVML enums of the +gfx/+me.all/-me profiles from their names (unverified)",
    ),
    ModelRow(
        key="RTX-PRO-5000",
        nvml_names=("NVIDIA RTX PRO 5000 Blackwell",),
        pci_device_ids=(0x2BB3,),
        architecture=BLACKWELL,
        compute_capability=(12, 0),
        memory_mib=48947,
        nvlink_version=NO_NVLINK,
        nvlinks=0,
        temp_slowdown_c=90,
        temp_shutdown_c=95,
        mig=RTX_PRO_5000_48GB,
        source="driver README 610 [V S4]; MIG-UG table (current copy) [V S7b]; IDs, SMs, memory axis, sizes and the "
        "total (the 6000's reserve) derived (unverified: no transcript); the 72GB board shares the id",
    ),
    ModelRow(  # same device id as the 48GB board (subsystem 227A)
        key="RTX-PRO-5000-72GB",
        nvml_names=("NVIDIA RTX PRO 5000 72GB Blackwell",),
        pci_device_ids=(0x2BB3,),
        architecture=BLACKWELL,
        compute_capability=(12, 0),
        memory_mib=73420,
        nvlink_version=NO_NVLINK,
        nvlinks=0,
        temp_slowdown_c=90,
        temp_shutdown_c=95,
        mig=None,
        source="driver README 610 [V S4]; no MIG data found, so whole or time-shared only; memory derived (72 GiB "
        "less the 6000's reserve, unverified)",
    ),
    ModelRow(
        key="RTX-PRO-4500",
        nvml_names=("NVIDIA RTX PRO 4500 Blackwell", "NVIDIA RTX PRO 4500 Blackwell Server Edition"),
        pci_device_ids=(0x2C31, 0x2C3A),
        architecture=BLACKWELL,
        compute_capability=(12, 0),
        memory_mib=32623,
        nvlink_version=NO_NVLINK,
        nvlinks=0,
        temp_slowdown_c=90,
        temp_shutdown_c=95,
        mig=RTX_PRO_4500_32GB,
        source="driver README 610 [V S4]; MIG-UG table [V S7b]; memory [S S55]; IDs, SMs, memory axis and sizes "
        "derived (unverified: no transcript)",
    ),
)
