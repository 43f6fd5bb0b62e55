"""A simulated ``libnvidia-ml.so.1``, installed beneath the real ``pynvml``.

The simulation sits one layer below pynvml: pynvml's Python wrappers look up C
symbols on ``pynvml.nvmlLib`` and call them with ctypes arguments.  This class
answers those symbols.  So every pynvml function name, return struct, constant,
quirk (``nvmlDeviceIsMigDeviceHandle`` returning a ``c_uint``) and
``NVMLError_*`` subclass seen by our code is the genuine one, and
``hw/nvml.py`` runs unchanged on real GPUs and here.

Behaviour follows ``reference/mig-nvml-facts.md``:

* enum vs profile ID: ``...ProfileInfo`` is keyed by enum, everything else by ID;
* placements on the memory-slice axis; overlap, no room or count exhausted →
  INSUFFICIENT_RESOURCES; a placement not in the profile's list → INVALID_ARGUMENT;
* destroying a GI with CIs, or a CI/GI with processes → IN_USE;
* MIG mode current vs pending: on Ampere the reset inside SetMigMode fails while
  other clients hold the GPU, so the change stays pending until a GPU reset;
  Hopper applies it at once;
* MIG calls on a GPU without MIG, or with MIG disabled → NOT_SUPPORTED;
* create/destroy/set-mode need root → NO_PERMISSION;
* stale handles after destroy or reset → INVALID_ARGUMENT.

Faults can be injected per call (see ``inject.py``).  It imports no pynvml.

The library is one class, ``SimNvmlLibrary``, whose parts live beside it, one kind of call
each: ``dispatch`` (symbol lookup, checks, handles), ``device`` (system and identity),
``gpu_instances`` (MIG mode, GPU instances), ``compute_instances`` (compute instances, MIG
device handles), ``topology``, ``health`` (processes, ECC, pages, rows, temperature),
``gpm`` (architecture; GPU Performance Monitoring per GPU and GPU instance, Hopper and
later); the C ABI they share is in ``cabi`` (its numbers) and ``cargs`` (handles, out-pointers).
"""

from __future__ import annotations

from slurm_gpupool.hw.sim.compute_instances import ComputeInstances
from slurm_gpupool.hw.sim.device import Devices
from slurm_gpupool.hw.sim.dispatch import API
from slurm_gpupool.hw.sim.gpm import Gpm
from slurm_gpupool.hw.sim.gpu_instances import GpuInstances
from slurm_gpupool.hw.sim.health import Health
from slurm_gpupool.hw.sim.topology import Topology


class SimNvmlLibrary(Devices, GpuInstances, ComputeInstances, Topology, Health, Gpm):
    """Stands in for the ``CDLL("libnvidia-ml.so.1")`` object pynvml loads."""


def supported_symbols() -> tuple[str, ...]:
    """The libnvidia-ml symbols the simulation answers (others: FUNCTION_NOT_FOUND)."""
    return tuple(sorted(API))
