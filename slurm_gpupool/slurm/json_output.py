"""Slurm's ``--json`` output across data parser versions, read in one place.

What differs between the releases we support (recorded in
``tests/fixtures/slurm/<series>/``):

* v0.0.38 (22.05): states are strings (``"idle"`` plus ``state_flags``), numbers
  are plain integers, ``sinfo --json`` lists ``nodes``.
* v0.0.40 and later (23.11, 24.11: v0.0.42, 26.05: v0.0.45): states are lists
  (``["IDLE", "DRAIN"]``), numbers are ``{"set", "infinite", "number"}``, and
  ``sinfo --json`` lists ``sinfo`` groups whose ``nodes.nodes`` share one state,
  GRES, features and reason.

Anything else is an error naming the data parser and the Slurm release, never an
empty result.  Pure.
"""

from __future__ import annotations

import json
import math
from typing import Any

from slurm_gpupool.errors import SlurmUnavailableError

UNLIMITED = 0xFFFFFFFE  # NO_VAL - 1 / INFINITE as 22.05 prints a time limit


def load(text: str, what: str) -> dict[str, Any]:
    """Parse the output of ``what`` (e.g. ``sinfo --json``) as a JSON object."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise SlurmUnavailableError(what, f"output is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise SlurmUnavailableError(what, "output is not a JSON object")
    return doc


def describe(doc: dict[str, Any]) -> str:
    """``data_parser/v0.0.42, Slurm 24.11.5`` from the ``meta`` block, for error messages."""
    meta: dict[str, Any] = doc["meta"] if isinstance(doc.get("meta"), dict) else {}
    plugin: dict[str, Any] = meta["plugin"] if isinstance(meta.get("plugin"), dict) else {}
    parser = plugin.get("data_parser") or plugin.get("type") or "unknown data parser"
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    release = slurm.get("release", "unknown release") if isinstance(slurm, dict) else "unknown release"
    return f"{parser}, Slurm {release}"


def unknown_layout(doc: dict[str, Any], what: str, missing: str) -> SlurmUnavailableError:
    return SlurmUnavailableError(
        what,
        f"unknown output layout ({describe(doc)}): no {missing}",
        hint="this Slurm release is not supported yet; please report it with the command's output",
    )


def number(value: Any) -> int | None:
    """An integer field: plain (v0.0.38) or ``{"set", "infinite", "number"}``; None if unset or infinite."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value)


def is_infinite(value: Any) -> bool:
    """``{"infinite": true}``, or 22.05's INFINITE/NO_VAL integers."""
    if isinstance(value, dict):
        return bool(value.get("infinite"))
    return isinstance(value, int) and value >= UNLIMITED


def state(value: Any, flags: Any = None) -> tuple[str, frozenset[str]]:
    """A base state in lower case and its flags in upper case.

    ``"idle"`` + ``state_flags: ["DRAIN"]`` (v0.0.38) and ``["IDLE", "DRAIN"]``
    (later) both give ``("idle", {"DRAIN"})``.
    """
    extra = [str(f).upper() for f in flags or ()] if isinstance(flags, list) else []
    if isinstance(value, list):
        items = [str(v) for v in value]
        base = items[0] if items else "unknown"
        return base.lower(), frozenset([*(i.upper() for i in items[1:]), *extra])
    return (str(value).lower() if value else "unknown"), frozenset(extra)


def text_list(value: Any) -> tuple[str, ...]:
    """``"a,b"`` (v0.0.38) or ``["a", "b"]`` → ("a", "b")."""
    if isinstance(value, list):
        return tuple(str(v) for v in value if v)
    return tuple(v for v in str(value or "").split(",") if v)


def text(value: Any, key: str = "description") -> str:
    """A string field, or the ``key`` of the object later versions wrap it in (``reason``)."""
    if isinstance(value, dict):
        value = value.get(key)
    return "" if value is None else str(value)
