"""Durations as admins write them: ``90s``, ``30m``, ``2h``, ``1d``, ``1h30m``, or seconds.

Also Slurm's time-limit format (``MaxTime=1-00:00:00``, ``UNLIMITED``), which the
repartitioner reads to choose how far ahead it reserves nodes.
"""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)\s*([smhd])")  # matched against lower-cased text
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 100 * 366 * 86400  # a century: longer is a typo (and overflows dates and timers)


def parse_duration_s(text: str | int | float) -> int:
    """Seconds in ``text``; ValueError with the reason if it is not a duration, or longer
    than MAX_DURATION_S (a 400-digit one overflowed later, in a date or a timer)."""
    if isinstance(text, bool):
        raise ValueError("expected a duration such as 30m, 2h or 90s")
    if isinstance(text, int | float):
        if not text >= 0:  # (NaN fails it too)
            raise ValueError("a duration cannot be negative")
        return _bounded(text, text)
    s = text.strip().lower()
    if s.isascii() and s.isdigit():
        return _bounded(int(s) if len(s) <= 20 else MAX_DURATION_S + 1, text)
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if s[pos : m.start()].strip():
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2).lower()]
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise ValueError(f"{text[:40]!r} is not a duration (e.g. 30m, 2h, 1h30m, 90s)")
    return _bounded(total, text)


def _bounded(seconds: float, text: str | int | float) -> int:
    if not seconds <= MAX_DURATION_S:
        shown = text[:40] if isinstance(text, str) else f"{text:.3g}"
        raise ValueError(f"{shown!s} is longer than a century ({MAX_DURATION_S} s): not a duration we can use")
    return int(seconds)


def format_duration(seconds: float) -> str:
    """``5400`` → ``1h30m``; ``42`` → ``42s``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{d}d" if d else "", f"{h}h" if h else "", f"{m}m" if m else "", f"{sec}s" if sec and not d else ""]
    return "".join(parts)


def parse_slurm_time_s(text: str) -> int | None:
    """Slurm's ``[days-]hours:minutes:seconds`` / ``minutes`` / ``UNLIMITED`` → seconds (None: unlimited),
    as ``time_str2secs`` reads it (``sscanf``: a missing field, as in ``7-``, is 0)."""
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A", ""):
        return None
    days = 0
    if "-" in t:
        d, t = t.split("-", 1)
        days = int(d)
        parts = [int(x) if x else 0 for x in t.split(":")] + [0, 0]
        h, m, s = parts[0], parts[1], parts[2]
    else:
        parts = [int(x) if x else 0 for x in t.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts[0], parts[1], parts[2]
    return days * 86400 + h * 3600 + m * 60 + s
