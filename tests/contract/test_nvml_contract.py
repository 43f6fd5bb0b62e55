"""NVML behaviour our code relies on, checked against the simulation always and
against real NVML where such a GPU exists (reference/mig-nvml-facts.md)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pynvml
import pytest

from slurm_gpupool.hw.sim import inject

from .conftest import install_sim, make_sim_node, uninstall

# Reference §1.4, written out here (not read from the catalog) so the test can fail:
# profile ID -> (name, memory-slice size, valid starts)
A100_40GB = {
    19: ("1g.5gb", 1, [0, 1, 2, 3, 4, 5, 6]),
    20: ("1g.5gb+me", 1, [0, 1, 2, 3, 4, 5, 6]),
    15: ("1g.10gb", 2, [0, 2, 4, 6]),
    14: ("2g.10gb", 2, [0, 2, 4]),
    9: ("3g.20gb", 4, [0, 4]),
    5: ("4g.20gb", 4, [0]),
    0: ("7g.40gb", 8, [0]),
}
H100_80GB = {
    19: ("1g.10gb", 1, [0, 1, 2, 3, 4, 5, 6]),
    20: ("1g.10gb+me", 1, [0, 1, 2, 3, 4, 5, 6]),
    15: ("1g.20gb", 2, [0, 2, 4, 6]),
    14: ("2g.20gb", 2, [0, 2, 4]),
    9: ("3g.40gb", 4, [0, 4]),
    5: ("4g.40gb", 4, [0]),
    0: ("7g.80gb", 8, [0]),
}
TABLES = {"A100-SXM4-40GB": A100_40GB, "H100-SXM5-80GB": H100_80GB}
# enum -> profile ID on 7-slice boards (§1.3): the two numbering systems differ.
ENUM_TO_ID = {0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}


def place(h, profile_id: int, start: int, size: int):
    p = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(p))


def full_ci(gi):
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    gprof = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(info.device, info.profileId)
    enum = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[gprof.sliceCount]
    cprof = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0)
    return pynvml.nvmlGpuInstanceCreateComputeInstance(gi, cprof.id)


@pytest.mark.parametrize("model", sorted(TABLES))
def test_profile_ids_and_possible_placements_match_reference(gpu_factory, model):
    gpu = gpu_factory(model)
    gpu.set_mig(True)
    table = TABLES[model]
    for enum, pid in ENUM_TO_ID.items():
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu.handle, enum)
        assert info.id == pid, f"enum {enum} must map to profile ID {pid}"
        assert info.name == f"MIG {table[pid][0]}"
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(gpu.handle, pid, None, ctypes.byref(count))
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(gpu.handle, pid, arr, ctypes.byref(count))
        got = [(arr[i].start, arr[i].size) for i in range(count.value)]
        assert got == [(s, table[pid][1]) for s in table[pid][2]]


@pytest.mark.parametrize("model", sorted(TABLES))
def test_every_valid_placement_is_accepted(gpu_factory, model):
    gpu = gpu_factory(model)
    gpu.set_mig(True)
    for pid, (name, size, starts) in TABLES[model].items():
        for start in starts:
            gi = place(gpu.handle, pid, start, size)
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert (info.profileId, info.placement.start, info.placement.size) == (pid, start, size)
            ci = full_ci(gi)
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, 0)
            assert pynvml.nvmlDeviceGetName(mig).endswith(f" MIG {name}")
            pynvml.nvmlComputeInstanceDestroy(ci)
            pynvml.nvmlGpuInstanceDestroy(gi)


@pytest.mark.parametrize("model", sorted(TABLES))
def test_placement_not_in_the_table_is_invalid_argument(gpu_factory, model):
    gpu = gpu_factory(model)
    gpu.set_mig(True)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place(gpu.handle, 9, 2, 4)  # 3g only starts at 0 or 4
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place(gpu.handle, 14, 0, 4)  # wrong size for 2g
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        place(gpu.handle, 19, 7, 1)  # slot 7 is never a 1g start


@pytest.mark.parametrize("model", sorted(TABLES))
def test_overlap_and_over_capacity_are_insufficient_resources(gpu_factory, model):
    gpu = gpu_factory(model)
    gpu.set_mig(True)
    h = gpu.handle
    place(h, 9, 0, 4)  # 3g at 0-3
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        place(h, 14, 2, 2)  # overlaps 3g
    place(h, 9, 4, 4)  # 3g + 3g: all 8 memory slices used
    for start in range(7):  # the famous 3g+3g+1g: no slot left
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            place(h, 19, start, 1)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 0
    gpu.set_mig(True)
    for _ in range(7):
        pynvml.nvmlDeviceCreateGpuInstance(h, 19)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(h, 19)  # max count 7


@pytest.mark.parametrize("model", sorted(TABLES))
def test_4g_plus_3g_is_valid(gpu_factory, model):
    gpu = gpu_factory(model)
    gpu.set_mig(True)
    place(gpu.handle, 5, 0, 4)
    place(gpu.handle, 9, 4, 4)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu.handle, 19) == 0


def test_remaining_capacity_counts_free_slots(gpu_factory):
    gpu = gpu_factory("H100-SXM5-80GB")
    gpu.set_mig(True)
    place(gpu.handle, 9, 0, 4)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu.handle, 19) == 3  # slots 4,5,6


def test_passing_the_enum_as_profile_id_creates_a_full_gpu(gpu_factory):
    """The classic bug: enum 0 (1 slice) used as a profile ID is the 7g profile."""
    gpu = gpu_factory("A100-SXM4-40GB")
    gpu.set_mig(True)
    gi = pynvml.nvmlDeviceCreateGpuInstance(gpu.handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    assert pynvml.nvmlGpuInstanceGetInfo(gi).placement.size == 8


def test_destroy_in_use_and_stale_handles(gpu_factory):
    gpu = gpu_factory("A100-SXM4-40GB")
    gpu.set_mig(True)
    gi = place(gpu.handle, 14, 0, 2)
    ci = full_ci(gi)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(gi)  # CIs first
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gi)


def test_mig_calls_on_disabled_or_non_mig_gpus(gpu_factory):
    gpu = gpu_factory("A100-SXM4-40GB")
    gpu.set_mig(False)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu.handle, 0)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle) == 0


def test_v100_has_no_mig(gpu_factory):
    gpu = gpu_factory("V100-SXM2-32GB", destructive=False)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(gpu.handle)


@pytest.mark.parametrize(("model", "supported"), [("H100-SXM5-80GB", 1), ("A100-SXM4-40GB", 0), ("V100-SXM2-32GB", 0)])
def test_gpm_is_hopper_and_later_and_two_samples_give_percentages(gpu_factory, model, supported):
    """nvmlGpmQueryDeviceSupport; on a supported GPU, SM/tensor/DRAM activity from two samples
    lies in 0-100; elsewhere a sample is NOT_SUPPORTED (NVML API reference, GPM functions)."""
    gpu = gpu_factory(model, destructive=False)
    assert pynvml.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice == supported
    a, b = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        if not supported:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlGpmSampleGet(gpu.handle, a)
            return
        pynvml.nvmlGpmSampleGet(gpu.handle, a)
        if gpu.kind == "real":  # NVML asks for more than 100 ms between the two samples
            import time

            time.sleep(0.2)
        pynvml.nvmlGpmSampleGet(gpu.handle, b)
        get = pynvml.c_nvmlGpmMetricsGet_t()
        get.version, get.numMetrics, get.sample1, get.sample2 = pynvml.NVML_GPM_METRICS_GET_VERSION, 3, a, b
        ids = (
            pynvml.NVML_GPM_METRIC_SM_UTIL,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        )
        for i, metric in enumerate(ids):
            get.metrics[i].metricId = metric
        pynvml.nvmlGpmMetricsGet(get)
        for i in range(3):
            assert get.metrics[i].nvmlReturn == pynvml.NVML_SUCCESS and 0.0 <= get.metrics[i].value <= 100.0
    finally:
        pynvml.nvmlGpmSampleFree(a)
        pynvml.nvmlGpmSampleFree(b)


def test_mig_devices_handles_names_and_uuids(gpu_factory):
    gpu = gpu_factory("A100-SXM4-40GB")
    gpu.set_mig(True)
    h = gpu.handle
    full_ci(place(h, 9, 4, 4))
    full_ci(place(h, 19, 0, 1))
    mig0 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    mig1 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 2)
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig0)  # a c_uint, truthy
    assert not pynvml.nvmlDeviceIsMigDeviceHandle(h)
    uuids = {pynvml.nvmlDeviceGetUUID(m) for m in (mig0, mig1)}
    assert all(u.startswith("MIG-") for u in uuids) and len(uuids) == 2
    for m in (mig0, mig1):
        u = pynvml.nvmlDeviceGetUUID(m)
        back = pynvml.nvmlDeviceGetHandleByUUID(u)
        assert pynvml.nvmlDeviceGetGpuInstanceId(back) == pynvml.nvmlDeviceGetGpuInstanceId(m)
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
        assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(h)
    names = sorted(pynvml.nvmlDeviceGetName(m) for m in (mig0, mig1))
    assert names == ["NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100-SXM4-40GB MIG 3g.20gb"]
    attrs = pynvml.nvmlDeviceGetAttributes(mig0)
    assert attrs.gpuInstanceSliceCount in (1, 3)


# -- simulation-only semantics (real GPUs cannot be steered into these states by a test) --


@pytest.fixture
def sim(tmp_path):
    stores = {}

    def make(model: str, euid: int | None = None):
        store = make_sim_node(tmp_path, model, node=f"n{len(stores)}")
        install_sim(store, euid)
        stores[model] = store
        return store, pynvml.nvmlDeviceGetHandleByIndex(0)

    yield make
    uninstall()


def test_ampere_mig_enable_stays_pending_until_reset(sim):
    store, h = sim("A100-SXM4-40GB")  # nvidia-persistenced holds the GPU by default
    status = pynvml.nvmlDeviceSetMigMode(h, 1)
    assert status == pynvml.NVML_ERROR_IN_USE  # activation status, not an exception
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 1]
    inject.reset_gpu(store, 0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]


def test_ampere_mig_enable_is_immediate_without_other_clients(sim):
    store, h = sim("A100-SXM4-40GB")
    inject.set_clients(store, 0, 0)
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]


def test_hopper_mig_enable_needs_no_reset(sim):
    store, h = sim("H100-SXM5-80GB")
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]


def test_disable_with_instances_is_in_use_and_reboot_semantics(sim):
    store, h = sim("H100-SXM5-80GB")
    pynvml.nvmlDeviceSetMigMode(h, 1)
    place(h, 19, 0, 1)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlDeviceSetMigMode(h, 0)
    inject.reboot(store)
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]  # Hopper: not persistent
    a100, ha = sim("A100-SXM4-40GB")
    pynvml.nvmlDeviceSetMigMode(ha, 1)
    inject.reboot(a100)  # a power cycle applies the pending mode and keeps it (InfoROM)
    assert pynvml.nvmlDeviceGetMigMode(ha) == [1, 1]


def test_in_use_when_a_process_runs_on_the_instance(sim):
    store, h = sim("H100-SXM5-80GB")
    pynvml.nvmlDeviceSetMigMode(h, 1)
    gi = place(h, 14, 0, 2)
    ci = full_ci(gi)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    inject.add_process(store, 0, os.getpid(), 2048, pynvml.nvmlDeviceGetUUID(mig))
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(mig)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(os.getpid(), 2048 << 20)]
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlComputeInstanceDestroy(ci)
    inject.remove_process(store, os.getpid())
    pynvml.nvmlComputeInstanceDestroy(ci)


def test_a_dead_process_no_longer_holds_the_gpu(sim):
    store, h = sim("V100-SXM2-32GB")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    inject.add_process(store, 0, child.pid, 100)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_a_reused_pid_is_not_the_registered_process(sim):
    store, h = sim("V100-SXM2-32GB")
    inject.add_process(store, 0, os.getpid(), 100)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)] == [os.getpid()]
    with store.modify() as st:  # as if our pid had belonged to a process started earlier
        st["gpus"][0]["processes"][0]["start"] -= 1
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_non_root_gets_no_permission(sim):
    store, h = sim("H100-SXM5-80GB", euid=1000)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceSetMigMode(h, 1)


def test_injected_faults_are_visible_through_health_calls(sim):
    store, h = sim("A100-SXM4-40GB")
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, 1, pynvml.NVML_VOLATILE_ECC) == 0
    inject.add_ecc_errors(store, 0, uncorrected=2)
    inject.set_temperature(store, 0, 93)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, 1, pynvml.NVML_VOLATILE_ECC) == 2
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, 1, pynvml.NVML_AGGREGATE_ECC) == 2
    assert pynvml.nvmlDeviceGetRemappedRows(h)[1:3] == (2, 1)  # uncorrectable, pending
    assert pynvml.nvmlDeviceGetTemperature(h, 0) == 93
    v100, hv = sim("V100-SXM2-32GB")
    inject.add_ecc_errors(v100, 0, uncorrected=1)
    assert len(pynvml.nvmlDeviceGetRetiredPages(hv, 1)) == 1
    assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(hv) == 1


def test_injected_nvml_call_failure(sim):
    store, h = sim("H100-SXM5-80GB")
    pynvml.nvmlDeviceSetMigMode(h, 1)
    inject.add_fault(store, "nvmlDeviceCreateGpuInstanceWithPlacement", 999, gpu=0, after=1)
    place(h, 19, 0, 1)  # the first call passes
    with pytest.raises(pynvml.NVMLError_Unknown):
        place(h, 19, 1, 1)
    place(h, 19, 1, 1)  # one failure only


def test_missing_symbol_is_function_not_found(sim):
    sim("H100-SXM5-80GB")
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0))


def test_mig_uuids_are_stable_across_processes_and_new_on_recreation(tmp_path):
    store = make_sim_node(tmp_path, "H100-SXM5-80GB", node="uuidnode")
    env = {**os.environ, "SLURM_GPUPOOL_SIM_DIR": str(tmp_path)}

    def uuids() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "slurm_gpupool.cli.main", "--node", "uuidnode", "inventory", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        ).stdout
        data = json.loads(out)
        return [d["uuid"] for g in data["gpus"] for gi in g["instances"] for d in gi["devices"]]

    install_sim(store)
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(h, 1)
        gi = place(h, 9, 0, 4)
        ci = full_ci(gi)
        first = uuids()
        assert len(first) == 1 and first == uuids()
        pynvml.nvmlComputeInstanceDestroy(ci)
        full_ci(gi)
        assert uuids() != first
    finally:
        uninstall()
