"""A minimal CUDA client for ``scripts/gpu-check``'s MPS check: libcuda's driver API through
ctypes (no CUDA toolkit, no compiler), run as its own process so that its environment
(``CUDA_MPS_PIPE_DIRECTORY``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ...) is the one CUDA reads
at ``cuInit``, as a job's task would.

``python -m slurm_gpupool.hw.cuda_client OVER_MIB UNDER_MIB``: ``cuInit``, ``cuDeviceGet(0)``,
``cuCtxCreate``; ``cuMemAlloc`` of OVER_MIB (freed again if it succeeds), then of UNDER_MIB;
prints one JSON line ``{"pid": ..., "steps": {step: CUDA result name}}`` and keeps its context
(and the UNDER_MIB allocation) until its stdin closes, so the caller can ask the MPS daemon
who its clients are; then ``cuMemFree``, ``cuCtxDestroy`` and exit.  The simulated GPUs have
the same protocol in ``hw/sim/mps_client.py``.  Nothing here changes a GPU setting.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CUDA_SUCCESS = 0
LIBCUDA = "libcuda.so.1"  # installed by the driver, not the toolkit
EXIT_NO_LIBCUDA = 69  # errors.EXIT_UNAVAILABLE, without importing the package's errors here


def _name(cuda: ctypes.CDLL, code: int) -> str:
    """``cuGetErrorName``: ``CUDA_ERROR_OUT_OF_MEMORY`` for 2."""
    if code == CUDA_SUCCESS:
        return "CUDA_SUCCESS"
    text = ctypes.c_char_p()
    if cuda.cuGetErrorName(code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
        return text.value.decode()
    return f"CUDA error {code}"


def report(line: dict[str, object]) -> None:
    """One JSON line on stdout, flushed: the caller reads exactly one."""
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    over_mib, under_mib = (int(a) for a in args)
    try:
        cuda = ctypes.CDLL(LIBCUDA)
    except OSError as e:
        report({"pid": os.getpid(), "error": f"cannot load {LIBCUDA}: {e}"})
        return EXIT_NO_LIBCUDA
    steps: dict[str, str] = {}
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()

    def step(name: str, code: int) -> bool:
        steps[name] = _name(cuda, code)
        return code == CUDA_SUCCESS

    ok = (
        step("cuInit", cuda.cuInit(0))
        and step("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
        and step("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
    )
    if ok:
        over = ctypes.c_uint64()
        if step("cuMemAlloc_over", cuda.cuMemAlloc_v2(ctypes.byref(over), ctypes.c_size_t(over_mib << 20))):
            cuda.cuMemFree_v2(over)
        step("cuMemAlloc_under", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(under_mib << 20)))
    report({"pid": os.getpid(), "steps": steps})
    sys.stdin.read()  # hold the context until the caller has asked the daemon
    if ptr.value:
        step("cuMemFree", cuda.cuMemFree_v2(ptr))
    if ctx.value:
        cuda.cuCtxDestroy_v2(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
