"""Syslog for the operations that change a node or the cluster, as the job hooks log.

The hooks log to syslog (facility daemon, ident ``gpupool-<hook>``, with the pid),
so an admin finds them with ``journalctl -t gpupool-prolog``.  The repartitioner,
``gres install`` and ``node apply`` change GPUs and Slurm's files; they log each
step the same way: ``journalctl -t gpupool-repartition``, ``-t gpupool-gres-install``,
``-t gpupool-node-apply``.  Logging never fails the operation: a missing syslog
socket is ignored.  Standard library only (``node apply`` runs through srun on
every node).
"""

from __future__ import annotations

import syslog
import threading
from collections.abc import Callable

IDENT_PREFIX = "gpupool-"
MAX_CHARS = 1900  # one syslog message; longer ones are cut (a journald line is 2048 by default)
_lock = threading.Lock()  # openlog sets a process-wide ident: keep ident and message together


def log(component: str, message: str, priority: int = syslog.LOG_INFO) -> None:
    """One line to syslog as ``gpupool-<component>`` (whitespace folded, length capped)."""
    text = " ".join(str(message).split())
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 3] + "..."
    with _lock:
        try:
            syslog.openlog(f"{IDENT_PREFIX}{component}", syslog.LOG_PID, syslog.LOG_DAEMON)
            syslog.syslog(priority, text)
        except OSError:
            pass


def tee(component: str, progress: Callable[[str], None] | None) -> Callable[[str], None]:
    """A progress callback that also logs each message (``gpupool-<component>``)."""

    def both(message: str) -> None:
        lowered = message.lower()
        failed = any(w in lowered for w in ("failed", "error", "refused", "could not", "warning"))
        log(component, message, syslog.LOG_WARNING if failed else syslog.LOG_INFO)
        if progress is not None:
            progress(message)

    return both
