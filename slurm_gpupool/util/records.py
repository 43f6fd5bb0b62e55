"""Versioned JSON state files (``{"schema": N, ...}``), read back the one way.

Absent is None (nothing recorded yet); unreadable, not an object, or of another
schema is a :class:`StateError` naming the file, never a guess at what it meant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import StateError


def read_record(path: Path, what: str, schema: int, schema_hint: str | None = None) -> dict[str, Any] | None:
    """The record at ``path`` (``what`` names it in errors), None if there is none."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StateError(f"{what} {path}", f"unreadable: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        raise StateError(f"{what} {path}", f"unknown schema (expected {schema})", hint=schema_hint)
    return data
