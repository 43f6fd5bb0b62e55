"""Safe file writes: temp file in the same directory, fsync, rename; no symlinks followed."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` atomically.  ``O_NOFOLLOW|O_EXCL`` on the temp file means a
    planted symlink is never written through.  ``durable=False`` skips the fsync: the
    rename alone keeps the file whole for every reader and across a killed writer, and
    only a machine crash could leave it empty (the simulated GPUs' state, which a real
    GPU does not keep across a crash either)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: Any, mode: int = 0o644) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), mode)


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    write_bytes_atomic(path, text.encode(), mode)
