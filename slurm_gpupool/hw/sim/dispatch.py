"""How a call reaches the simulated library, and what its handles name.

A symbol pynvml looks up becomes a plain function (pynvml sets ``restype`` on some) that
checks initialisation, root and injected faults, loads the node's state (locked and written
back for a call that changes it) and runs the method registered for it.  The helpers that
every part shares resolve a handle to the GPU, GPU instance or compute instance it names
(stale ones: ``INVALID_ARGUMENT``), and read the GPU's model, MIG geometry and profiles.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from slurm_gpupool.hw.sim import cabi
from slurm_gpupool.hw.sim.cargs import Kind, NvmlReturn, as_int, decode_handle, handle_value
from slurm_gpupool.hw.sim.procs import pid_alive
from slurm_gpupool.hw.sim.state import SimStore, model_facts

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any

    from slurm_gpupool.core.mig import catalog


API: dict[str, tuple[Callable[..., Any], bool, bool]] = {}


def c_api(name: str, mutates: bool = False, root: bool = False) -> Callable:
    """Register a method as the C symbol ``name``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        API[name] = (fn, mutates, root)
        return fn

    return deco


class SimLibraryBase:
    """Symbol lookup and dispatch, and the handle and state helpers the parts share."""

    def __init__(self, store: SimStore, euid: int | None = None) -> None:
        self.store = store
        self._euid = euid
        self._init_count = 0
        self._entries: dict[str, Callable[..., int]] = {}
        self._st: dict[str, Any] = {}  # state for the call in progress
        self._gpm_samples: dict[int, Any] = {}  # GPM sample buffers: this process's, like NVML's

    # -- symbol lookup -------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable[..., int]:
        if name.startswith("_") or name not in API:
            raise AttributeError(name)  # pynvml turns this into FUNCTION_NOT_FOUND
        entries = self.__dict__["_entries"]
        if name not in entries:
            # A plain function, not a bound method: pynvml sets ``fn.restype`` on some.
            def entry(*args: Any) -> int:
                return self._call(name, args)

            entry.__name__ = name
            entries[name] = entry
        return entries[name]

    def _call(self, name: str, args: tuple[Any, ...]) -> int:
        fn, mutates, root = API[name]
        try:
            if name not in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString") and self._init_count <= 0:
                return cabi.UNINITIALIZED
            if name == "nvmlErrorString":
                return fn(self, *args)
            if root and (self._euid if self._euid is not None else os.geteuid()) != 0:
                return cabi.NO_PERMISSION
            st = self.store.read()  # one stat per call: the state file is cached (SimStore)
            if st.get("faults"):
                fault = self._due_fault(name, args, st)
                if fault:
                    return fault
                st = self.store.read()  # a fault counted down: the file changed
            if mutates:
                with self.store.modify() as st:
                    self._st = st
                    st["calls"][name] = st["calls"].get(name, 0) + 1
                    fn(self, *args)
            else:
                self._st = st
                fn(self, *args)
            return cabi.SUCCESS
        except NvmlReturn as r:
            return r.code
        finally:
            self._st = {}

    def _due_fault(self, name: str, args: tuple[Any, ...], st: dict[str, Any]) -> int:
        """Return an injected error code for this call, counting it down, or 0."""
        faults = [f for f in st.get("faults", []) if f["call"] == name]
        if not faults:
            return 0
        gpu = self._gpu_of(args[0]) if args else None
        code = 0
        with self.store.modify() as w:
            for f in w["faults"]:
                if f["call"] != name or (f.get("gpu") is not None and f["gpu"] != gpu):
                    continue
                if f.get("after", 0) > 0:
                    f["after"] -= 1
                    continue
                if f.get("times", 1) > 0:
                    f["times"] = f.get("times", 1) - 1
                    code = f.get("code", cabi.UNKNOWN)
                    break
            w["faults"] = [f for f in w["faults"] if f.get("times", 1) > 0]
        return code

    def _gpu_of(self, h: Any) -> int | None:
        try:
            kind, gpu, _ = decode_handle(handle_value(h))
        except NvmlReturn:
            return None
        return gpu if kind else None

    # -- handle resolution --------------------------------------------------------------
    def _gpus(self) -> list[dict[str, Any]]:
        return self._st["gpus"]

    def _dev(self, h: Any) -> dict[str, Any]:
        """A physical GPU handle → its state; MIG or other handles are invalid here."""
        kind, gpu, _ = decode_handle(handle_value(h))
        if kind != Kind.DEVICE or gpu >= len(self._gpus()):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return self._gpus()[gpu]

    def _any_dev(self, h: Any) -> tuple[dict[str, Any], dict | None, dict | None]:
        """A GPU or MIG device handle → (gpu, gi, ci); gi/ci are None for a GPU."""
        kind, gpu, serial = decode_handle(handle_value(h))
        if kind == Kind.DEVICE:
            return self._dev(h), None, None
        if kind == Kind.MIG:
            g, gi, ci = self._find_ci(gpu, serial)
            return g, gi, ci
        raise NvmlReturn(cabi.INVALID_ARGUMENT)

    def _find_gi(self, gpu: int, serial: int) -> tuple[dict, dict]:
        if gpu >= len(self._gpus()):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        g = self._gpus()[gpu]
        for gi in g["gis"]:
            if gi["serial"] == serial:
                return g, gi
        raise NvmlReturn(cabi.INVALID_ARGUMENT)  # stale: destroyed or reset

    def _find_ci(self, gpu: int, serial: int) -> tuple[dict, dict, dict]:
        if gpu >= len(self._gpus()):
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        g = self._gpus()[gpu]
        for gi in g["gis"]:
            for ci in gi["cis"]:
                if ci["serial"] == serial:
                    return g, gi, ci
        raise NvmlReturn(cabi.INVALID_ARGUMENT)

    def _gi(self, h: Any) -> tuple[dict, dict]:
        kind, gpu, serial = decode_handle(handle_value(h))
        if kind != Kind.GI:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return self._find_gi(gpu, serial)

    def _ci(self, h: Any) -> tuple[dict, dict, dict]:
        kind, gpu, serial = decode_handle(handle_value(h))
        if kind != Kind.CI:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return self._find_ci(gpu, serial)

    @staticmethod
    def _model(g: dict) -> catalog.GpuModel:
        from slurm_gpupool.core.mig import catalog

        return catalog.get_model(g["model"])

    def _facts(self, g: dict) -> dict[str, Any]:
        """The few facts of the GPU's model that a job hook's calls need, copied into the
        node's state when it was created (``model_facts``), so those calls never load the
        MIG catalog (~15 ms a process, #29); from the catalog for an older state file."""
        facts = g.get("model_facts")
        return facts if isinstance(facts, dict) else model_facts(self._model(g))

    def _require_mig_enabled(self, g: dict) -> None:
        """:meth:`_geometry`'s check (MIG-capable, MIG mode on) from the facts alone."""
        if not self._facts(g)["max_mig_devices"] or g["mig"] is None or g["mig"]["current"] != 1:
            raise NvmlReturn(cabi.NOT_SUPPORTED)

    def _geometry(self, g: dict, need_enabled: bool = True) -> catalog.MigGeometry:
        geo = self._model(g).mig
        if geo is None or g["mig"] is None:
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        if need_enabled and g["mig"]["current"] != 1:
            raise NvmlReturn(cabi.NOT_SUPPORTED)
        return geo

    def _next_serial(self) -> int:
        s = self._st["next_serial"]
        self._st["next_serial"] = s + 1
        return s

    @staticmethod
    def _mig_devices(g: dict) -> list[tuple[dict, dict]]:
        """MIG devices in index order: by (GI ID, CI ID), as transcripts show."""
        out = [(gi, ci) for gi in g["gis"] for ci in gi["cis"]]
        out.sort(key=lambda p: (p[0]["id"], p[1]["id"]))
        return out

    def _live_processes(self, g: dict) -> list[dict]:
        return [p for p in g["processes"] if pid_alive(p["pid"], p.get("start"))]

    def _ci_name(self, g: dict, gi: dict, ci_slices: int) -> str:
        prof = self._geometry(g, need_enabled=False).by_id(gi["profile_id"])
        assert prof is not None
        return prof.name if ci_slices == prof.compute_slices else f"{ci_slices}c.{prof.name}"

    def _profile_by_id(self, g: dict, pid: Any, need_enabled: bool = True) -> catalog.MigProfile:
        prof = self._geometry(g, need_enabled).by_id(as_int(pid))
        if prof is None:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return prof
