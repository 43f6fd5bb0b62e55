"""The GPU backend interface: what the rest of slurm_gpupool may ask of a node's GPUs.

One implementation, :class:`slurm_gpupool.hw.nvml.NvmlBackend`, runs over pynvml,
against the real ``libnvidia-ml.so.1`` or the simulated one; ``open_backend``
in ``hw/__init__.py`` picks.  Tests may pass any object with these methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing import Any

    from slurm_gpupool.model import GpuHealth, GpuInfo, GpuProcess, NodeInventory, Placement


class GpuBackend(Protocol):
    node: str
    kind: str  # "nvml" or "sim"

    def inventory(self) -> NodeInventory:
        """GPUs, MIG state and topology (``nvidia-smi -q``, ``mig -lgi -lci``, ``topo -m``)."""

    def gpu(self, index: int) -> GpuInfo:
        """One GPU with its MIG instances."""

    def gpu_count(self) -> int: ...

    def driver_version(self) -> str:
        """``nvidia-smi --query-gpu=driver_version``."""
        ...

    def processes(self, index: int) -> list[GpuProcess]:
        """Compute processes on a GPU, with their MIG instance."""

    def process_records(self, index: int) -> list[dict[str, int | None]]:
        """:meth:`processes` as plain dicts (the Epilog's path: no dataclasses)."""

    def health(self, index: int) -> GpuHealth:
        """ECC, page retirement / row remapping, temperature."""

    def health_counters(self, index: int) -> dict[str, Any]:
        """:meth:`health`'s fields as a plain dict (the hooks' path: no dataclasses)."""

    def mig_state(self, index: int) -> tuple[bool, list[str]]:
        """(MIG mode on, the UUIDs of the GPU's MIG devices)."""

    def device_usage(self, index: int, mig_uuid: str | None = None) -> dict[str, int | None]:
        """Memory in use and utilization (None where NVML cannot say)."""

    def activity_support(self, index: int) -> tuple[bool, str]:
        """Whether GPM measures this GPU (Hopper and later), and if not, why."""

    def activity(self, index: int, mig_uuid: str | None = None) -> dict[str, float | None] | None:
        """SM / tensor activity and DRAM bandwidth (percent) since the previous call; None if unmeasured."""

    def set_mig_mode(self, index: int, enabled: bool) -> tuple[bool, bool, int]:
        """``nvidia-smi -mig``: returns (current, pending, activation status)."""

    def reset_gpu(self, index: int) -> None:
        """``nvidia-smi --gpu-reset``."""

    def create_gpu_instance(self, index: int, profile_id: int, placement: Placement) -> int:
        """``nvidia-smi mig -cgi``, at an explicit placement; returns the GI ID."""

    def create_compute_instance(self, index: int, gi_id: int, ci_slices: int) -> tuple[int, str]:
        """``nvidia-smi mig -cci``; returns (CI ID, MIG UUID)."""

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None: ...

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> GpuBackend: ...

    def __exit__(self, *exc: object) -> None: ...
