"""A stand-in for ``ctypes.util`` until something really uses it (#29).

pynvml does ``from ctypes.util import find_library`` at import and never calls it (it opens
``libnvidia-ml.so.1`` by name), and importing ``ctypes.util`` imports ``subprocess``,
``shutil`` and ``tempfile``: about a third of an isolated hook's start-up, and ~5 ms of every
``gpupool`` command that reads the GPUs (``node apply``, ``node assert``).  ``hw/nvml.py``
installs the stand-in just before it imports pynvml.  Standard library only: every launched
hook imports it.
"""

from __future__ import annotations

import sys
import types


def defer_ctypes_util() -> None:
    """Put a stand-in for ``ctypes.util`` in ``sys.modules`` unless the real one is loaded.
    Its ``find_library``, and any other name asked of it, load the real module (which then
    replaces it) and answer from it, so nothing can tell the difference but the time."""
    if "ctypes.util" in sys.modules:
        return
    stand_in = types.ModuleType("ctypes.util", "stand-in: the real ctypes.util loads on first use")

    def real() -> types.ModuleType:
        if sys.modules.get("ctypes.util") is stand_in:
            del sys.modules["ctypes.util"]
        import ctypes.util

        return ctypes.util

    def find_library(name: str) -> str | None:
        return real().find_library(name)

    def __getattr__(name: str) -> object:
        if name.startswith("__"):  # the import system asks for __path__ & co.: not a use
            raise AttributeError(name)
        return getattr(real(), name)

    stand_in.find_library = find_library  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules["ctypes.util"] = stand_in
