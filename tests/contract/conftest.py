"""Contract suite plumbing: the same tests against simulated and real NVML.

``gpu(model)`` yields a pynvml-ready GPU of that model:
* ``sim``: a fresh simulated node (libnvidia-ml replaced beneath pynvml);
* ``real``: a real GPU of that model, if NVML and such a GPU are present.
  Tests that change MIG state also need SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE=1,
  because they create and destroy instances on that GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.hw.sim.lib import SimNvmlLibrary
from slurm_gpupool.hw.sim.state import SimStore, create_node_state

MACHINE_FOR_MODEL = {
    "A100-SXM4-40GB": "dgx-a100",
    "H100-SXM5-80GB": "hgx-h100",
    "A30": "pcie-a30",
    "V100-SXM2-32GB": "dgx1-v100",
    "H100-NVL": "h100-nvl-pair",
}
NVML_NAME = {
    "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3",
    "A30": "NVIDIA A30",
    "V100-SXM2-32GB": "Tesla V100-SXM2-32GB",
    "H100-NVL": "NVIDIA H100 NVL",
}


@dataclass
class Gpu:
    kind: str
    handle: Any
    index: int
    store: SimStore | None  # None on real hardware

    def set_mig(self, on: bool) -> None:
        """Bring MIG mode to ``on`` (resetting where needed), with no instances."""
        from slurm_gpupool.hw.sim import inject

        destroy_all(self.handle)
        pynvml.nvmlDeviceSetMigMode(self.handle, int(on))
        cur, pend = pynvml.nvmlDeviceGetMigMode(self.handle)
        if cur != pend:
            if self.store is None:
                pytest.skip("real GPU needs a reset to change MIG mode; not done by tests")
            inject.reset_gpu(self.store, self.index)
        assert pynvml.nvmlDeviceGetMigMode(self.handle)[0] == int(on)


def destroy_all(h: Any) -> None:
    """Destroy every CI and GI on a GPU (``nvidia-smi mig -dci; -dgi``)."""
    try:
        if pynvml.nvmlDeviceGetMigMode(h)[0] != 1:
            return
    except pynvml.NVMLError_NotSupported:
        return
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue
        arr = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
        import ctypes

        n = ctypes.c_uint(len(arr))
        pynvml.nvmlDeviceGetGpuInstances(h, info.id, arr, ctypes.byref(n))
        for k in range(n.value):
            gi = arr[k]
            for ce in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    cinfo = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ce, 0)
                except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                    continue
                carr = (pynvml.c_nvmlComputeInstance_t * cinfo.instanceCount)()
                cn = ctypes.c_uint(len(carr))
                pynvml.nvmlGpuInstanceGetComputeInstances(gi, cinfo.id, carr, ctypes.byref(cn))
                for c in range(cn.value):
                    pynvml.nvmlComputeInstanceDestroy(carr[c])
            pynvml.nvmlGpuInstanceDestroy(gi)


def install_sim(store: SimStore, euid: int | None = None) -> SimNvmlLibrary:
    lib = SimNvmlLibrary(store, euid=euid)
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlInit()
    return lib


def uninstall() -> None:
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


def make_sim_node(tmp: Path, model: str, node: str = "simnode") -> SimStore:
    path = tmp / f"{node}.json"
    create_node_state(path, node, find_machine(MACHINE_FOR_MODEL[model]))
    return SimStore(path)


@pytest.fixture(params=["sim", "real"])
def nvml_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def gpu_factory(nvml_kind: str, tmp_path: Path) -> Iterator[Any]:
    """Call with a catalog model key; returns a :class:`Gpu`."""
    opened: list[bool] = []

    def make(model: str, destructive: bool = True) -> Gpu:
        if nvml_kind == "sim":
            store = make_sim_node(tmp_path, model)
            install_sim(store)
            opened.append(True)
            return Gpu("sim", pynvml.nvmlDeviceGetHandleByIndex(0), 0, store)
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            pytest.skip(f"real NVML: no NVIDIA GPU on this machine ({e})")
        opened.append(True)
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            if pynvml.nvmlDeviceGetName(h) == NVML_NAME[model]:
                if destructive and os.environ.get("SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE") != "1":
                    pytest.skip(f"real {model} found, but SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE=1 is not set")
                return Gpu("real", h, i, None)
        pytest.skip(f"real NVML: no {model} GPU on this machine")

    yield make
    if opened:
        uninstall()
