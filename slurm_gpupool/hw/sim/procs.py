"""Whether a process the simulation registered on a GPU still runs (``/proc``).

Real NVML lists only live processes; the simulated driver and ``inject`` both ask here, so a
pid reused by another process is never taken for the registered one.
"""

from __future__ import annotations


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None
    if gone.  A zombie (state Z: exited, not yet reaped) counts as gone: it holds no GPU context."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return None if fields[0] == b"Z" else int(fields[19])


def pid_alive(pid: int, start: int | None = None) -> bool:
    """Real NVML lists only live processes; a pid reused by another process is not the one registered."""
    now = process_start(pid)
    return now is not None and (start is None or now == start)
