"""The simulated GPUs' stand-in for ``hw/cuda_client.py`` (same command line, same JSON line):
a CUDA client of the simulated MPS model (``sim/mps.py``), so ``scripts/gpu-check``'s MPS
check runs unchanged against the stand-in ``nvidia-cuda-mps-control``.

``python -m slurm_gpupool.hw.sim.mps_client OVER_MIB UNDER_MIB``, with the node's state in
``$SLURM_GPUPOOL_SIM_STATE`` and the GPU in ``$CUDA_VISIBLE_DEVICES``.  An allocation the
model refuses (over ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` or the GPU's memory) is reported as
``CUDA_ERROR_OUT_OF_MEMORY``, as ``cuMemAlloc`` would; a client queued behind another user's
server reports ``cuInit`` as not returned.
"""

from __future__ import annotations

import os
import sys

from slurm_gpupool.hw.cuda_client import EXIT_NO_LIBCUDA, report


def main(argv: list[str] | None = None) -> int:
    from slurm_gpupool.hw.sim import mps
    from slurm_gpupool.hw.sim.state import SimStore

    args = sys.argv[1:] if argv is None else argv
    over_mib, under_mib = (int(a) for a in args)
    path = os.environ.get("SLURM_GPUPOOL_SIM_STATE")
    if not path:
        report({"pid": os.getpid(), "error": "no SLURM_GPUPOOL_SIM_STATE (simulated libcuda)"})
        return EXIT_NO_LIBCUDA
    store = SimStore(path)
    pid = os.getpid()
    steps: dict[str, str] = {}
    why: dict[str, str] = {}  # what the simulated driver said of a failed step (not in CUDA's API)
    mode = mps.cuda_init(store, dict(os.environ), os.getuid(), pid)
    steps["cuInit"] = "CUDA_SUCCESS" if mode != "queued" else "still waiting for the MPS server"
    if mode != "queued":
        steps["cuDeviceGet"] = steps["cuCtxCreate"] = "CUDA_SUCCESS"
        for name, mib in (("cuMemAlloc_over", over_mib), ("cuMemAlloc_under", under_mib)):
            try:
                mps.allocate(store, pid, mib)
                steps[name] = "CUDA_SUCCESS"
                if name == "cuMemAlloc_over":
                    mps.cuda_exit(store, pid)  # cuMemFree: the model frees by leaving; rejoin as before
                    mps.cuda_init(store, dict(os.environ), os.getuid(), pid)
            except mps.SimMpsError as e:
                steps[name] = "CUDA_ERROR_OUT_OF_MEMORY"
                why[name] = str(e)
    report({"pid": pid, "steps": steps, "sim_mode": mode, **({"why": why} if why else {})})
    sys.stdin.read()  # hold the context until the caller has asked the daemon
    mps.cuda_exit(store, pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
