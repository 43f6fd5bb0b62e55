"""The simulated library's GPU Performance Monitoring (GPM) and architecture query.

GPM (NVML R520+, ``nvmlGpm*``) exists on Hopper and later only: ``nvmlGpmQueryDeviceSupport``
says ``isSupportedDevice = 0`` on older GPUs and every sample call returns NOT_SUPPORTED
there.  A sample is an opaque buffer of hardware counters; ``nvmlGpmMetricsGet`` turns two
samples of the same GPU (``nvmlGpmSampleGet``) or GPU instance (``nvmlGpmMigSampleGet``)
into rates over the time between them (what ``dcgmi dmon -e 1002,1004,1005`` shows).

Here a counter is the time integral of the load injected with ``inject.set_activity``
(per GPU, or per GPU instance), so a metric is the time-weighted mean load between the two
samples, exactly as the hardware's would be.  A MIG-enabled GPU's own sample is its GPU
instances' loads weighted by their compute slices.  Samples live in the process that took
them, like real NVML's.
"""

from __future__ import annotations

import time

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import NvmlReturn, as_int, deref, handle_value, set_handle
from slurm_gpupool.hw.sim.dispatch import SimLibraryBase, c_api

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any

# nvmlDeviceArchitecture_t
ARCH_IDS = {"volta": 5, "turing": 6, "ampere": 7, "ada": 8, "hopper": 9, "blackwell": 10}
GPM_FROM_ARCH = 9  # Hopper
# the NVML_GPM_METRIC_* ids the simulation measures, and the load they follow
METRICS = {1: "sm", 2: "sm", 5: "tensor", 10: "dram"}  # GRAPHICS_UTIL, SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL
LOADS = ("sm", "tensor", "dram")
GPM_SUPPORT_VERSION = 1
GPM_METRICS_GET_VERSION = 1
_SAMPLE_BASE = 0x7E << 56  # sample buffer "addresses": never a valid handle kind


def counters(activity: dict[str, Any] | None, now: float) -> dict[str, float]:
    """The integral of each load (percent x seconds) up to ``now``."""
    if not activity:
        return dict.fromkeys(LOADS, 0.0)
    dt = max(0.0, now - float(activity.get("since", now)))
    acc, load = activity.get("acc", {}), activity.get("load", {})
    return {k: float(acc.get(k, 0.0)) + float(load.get(k, 0.0)) * dt for k in LOADS}


def fold(activity: dict[str, Any] | None, load: dict[str, float], now: float) -> dict[str, Any]:
    """``activity`` with its counters brought up to ``now`` and ``load`` in force from then."""
    return {"acc": counters(activity, now), "since": now, "load": dict(load)}


class Gpm(SimLibraryBase):
    """``nvmlDeviceGetArchitecture`` and ``nvmlGpm*``."""

    def _arch_id(self, g: dict) -> int:
        return ARCH_IDS.get(str(self._facts(g).get("architecture")), 0xFFFFFFFF)

    @c_api("nvmlDeviceGetArchitecture")
    def _architecture(self, h: Any, ref: Any) -> None:
        g, _, _ = self._any_dev(h)
        deref(ref).value = self._arch_id(g)

    def _gpm_gpu(self, h: Any) -> dict:
        g = self._dev(h)
        if not GPM_FROM_ARCH <= self._arch_id(g) < 0xFFFFFFFF:
            raise NvmlReturn(cabi.NOT_SUPPORTED)  # GPM: Hopper and later
        return g

    @c_api("nvmlGpmQueryDeviceSupport")
    def _gpm_support(self, h: Any, ref: Any) -> None:
        g = self._dev(h)
        out = deref(ref)
        if out.version != GPM_SUPPORT_VERSION:
            raise NvmlReturn(cabi.ARGUMENT_VERSION_MISMATCH)
        out.isSupportedDevice = int(GPM_FROM_ARCH <= self._arch_id(g) < 0xFFFFFFFF)

    @c_api("nvmlGpmSampleAlloc")
    def _gpm_alloc(self, ref: Any) -> None:
        samples = self._gpm_samples
        sid = _SAMPLE_BASE + len(samples) + 1 + max((k - _SAMPLE_BASE for k in samples), default=0)
        samples[sid] = None
        set_handle(ref, sid)

    def _sample_id(self, sample: Any) -> int:
        sid = handle_value(sample)
        if sid not in self._gpm_samples:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return sid

    @c_api("nvmlGpmSampleFree")
    def _gpm_free(self, sample: Any) -> None:
        del self._gpm_samples[self._sample_id(sample)]

    @c_api("nvmlGpmSampleGet")
    def _gpm_sample(self, h: Any, sample: Any) -> None:
        with self.store.consistent() as self._st:  # the counters and their time: one instant
            g = self._gpm_gpu(h)
            sid = self._sample_id(sample)
            now = time.time()
            if g["mig"] and g["mig"]["current"] == 1:
                total = self._geometry(g).compute_slices
                acc = dict.fromkeys(LOADS, 0.0)
                for gi in g["gis"]:
                    prof = self._geometry(g).by_id(gi["profile_id"])
                    weight = (prof.compute_slices if prof else 0) / total
                    for k, v in counters(gi.get("activity"), now).items():
                        acc[k] += v * weight
            else:
                acc = counters(g.get("activity"), now)
        self._gpm_samples[sid] = {"source": ("gpu", g["index"]), "t": now, "acc": acc}

    @c_api("nvmlGpmMigSampleGet")
    def _gpm_mig_sample(self, h: Any, gi_id: Any, sample: Any) -> None:
        with self.store.consistent() as self._st:  # the counters and their time: one instant
            g = self._gpm_gpu(h)
            self._require_mig_enabled(g)
            sid = self._sample_id(sample)
            want = as_int(gi_id)
            gi = next((x for x in g["gis"] if x["id"] == want), None)
            if gi is None:
                raise NvmlReturn(cabi.INVALID_ARGUMENT)
            now = time.time()
            acc = counters(gi.get("activity"), now)
        self._gpm_samples[sid] = {"source": ("gi", g["index"], gi["serial"]), "t": now, "acc": acc}

    @c_api("nvmlGpmMetricsGet")
    def _gpm_metrics(self, ref: Any) -> None:
        mg = deref(ref)
        if mg.version != GPM_METRICS_GET_VERSION:
            raise NvmlReturn(cabi.ARGUMENT_VERSION_MISMATCH)
        a = self._gpm_samples.get(handle_value(mg.sample1))
        b = self._gpm_samples.get(handle_value(mg.sample2))
        if a is None or b is None or a["source"] != b["source"] or mg.numMetrics > len(mg.metrics):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        dt = b["t"] - a["t"]
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            load = METRICS.get(int(m.metricId))
            if load is None:
                m.nvmlReturn = cabi.NOT_SUPPORTED
                continue
            m.nvmlReturn = cabi.SUCCESS
            m.value = 0.0 if dt <= 0 else max(0.0, min(100.0, (b["acc"][load] - a["acc"][load]) / dt))
