"""The arguments pynvml passes the simulated library, read and written as C would.

Handles are pointers whose value packs a kind (device, GPU instance, compute instance, MIG
device), a GPU index and a serial, so the handle of an instance goes stale once the instance
is destroyed or its GPU reset (``INVALID_ARGUMENT``, as NVML).  Out-pointers come as
``byref(x)``, ``pointer(x)`` or arrays.
A method ends with an NVML return code other than SUCCESS by raising ``NvmlReturn``.
"""

from __future__ import annotations

import ctypes

from slurm_gpupool.hw.sim import cabi

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~4 ms (#29)
if TYPE_CHECKING:
    from typing import Any


class Kind:
    """What a handle names (its top byte); the GPU index is below it, then a serial."""

    DEVICE, GI, CI, MIG = 1, 2, 3, 4


CARG = type(ctypes.byref(ctypes.c_int()))


class NvmlReturn(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def encode_handle(kind: int, gpu: int, serial: int) -> int:
    return (kind << 56) | (gpu << 48) | serial


def decode_handle(value: int) -> tuple[int, int, int]:
    return value >> 56, (value >> 48) & 0xFF, value & ((1 << 48) - 1)


def handle_value(h: Any) -> int:
    if h is None or isinstance(h, int | CARG):
        raise NvmlReturn(cabi.INVALID_ARGUMENT)
    try:
        return ctypes.cast(h, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        raise NvmlReturn(cabi.INVALID_ARGUMENT) from None


def deref(ref: Any) -> Any:
    """The object a C out-pointer argument points at (``byref(x)`` or ``pointer(x)``)."""
    if isinstance(ref, CARG):
        return ref._obj  # type: ignore[attr-defined]
    if isinstance(ref, ctypes._Pointer):
        if not ref:
            raise NvmlReturn(cabi.INVALID_ARGUMENT)
        return ref.contents
    if isinstance(ref, ctypes.Array):
        return ref
    raise NvmlReturn(cabi.INVALID_ARGUMENT)


def set_handle(ref: Any, value: int) -> None:
    obj = deref(ref)
    ctypes.memmove(ctypes.addressof(obj), ctypes.byref(ctypes.c_uint64(value)), 8)


def set_ptr_field(struct: Any, name: str, value: int) -> None:
    ftype = dict(struct._fields_)[name]
    setattr(struct, name, ctypes.cast(ctypes.c_void_p(value), ftype))


def as_int(x: Any) -> int:
    return int(x.value) if hasattr(x, "value") else int(x)


def put_handles(arr: Any, count_ref: Any, handles: list[int]) -> None:
    """Fill a C array of handles and its count (too short: INSUFFICIENT_SIZE, with the count needed)."""
    count = deref(count_ref)
    if len(arr) < len(handles):
        count.value = len(handles)
        raise NvmlReturn(cabi.INSUFFICIENT_SIZE)
    for i, value in enumerate(handles):
        ctypes.memmove(ctypes.addressof(arr) + i * 8, ctypes.byref(ctypes.c_uint64(value)), 8)
    count.value = len(handles)


def put_str(buf: Any, size: Any, text: str) -> None:
    data = text.encode()
    if len(data) + 1 > as_int(size):
        raise NvmlReturn(cabi.INSUFFICIENT_SIZE)
    buf.value = data
