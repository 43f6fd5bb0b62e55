"""Pausing the schedule, or pinning a layout: what ``repartition --scheduled`` obeys.

An admin who switches by hand must not see cron undo it five minutes later: ``gpupool
schedule pause`` stops scheduled runs, ``gpupool schedule pin LAYOUT`` makes them keep
(or switch to) one layout, both until a time or until ``gpupool schedule resume``.  The
hold is a small JSON file in ``paths.controller_dir``, written atomically.
"""

from __future__ import annotations

import json
import os
import pwd
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_gpupool.errors import StateError
from slurm_gpupool.util.atomic import write_json_atomic
from slurm_gpupool.util.clock import SYSTEM, Clock

FILE_NAME = "schedule-hold.json"


@dataclass(frozen=True)
class Hold:
    layout: str | None  # None: paused (no scheduled switch at all); else pinned to this layout
    until: datetime | None  # None: until resumed
    by: str
    at: str
    why: str = ""

    def active(self, now: datetime) -> bool:
        return self.until is None or now < self.until

    def describe(self) -> str:
        what = f"pinned to layout {self.layout}" if self.layout else "paused"
        until = f" until {self.until:%Y-%m-%d %H:%M}" if self.until else " until `gpupool schedule resume`"
        why = f" ({self.why})" if self.why else ""
        return f"schedule {what}{until} by {self.by} at {self.at}{why}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "until": self.until.isoformat() if self.until else None,
            "by": self.by,
            "at": self.at,
            "why": self.why,
        }


def read_hold(directory: Path) -> Hold | None:
    path = directory / FILE_NAME
    try:
        data = json.loads(path.read_text())
        return Hold(
            layout=data.get("layout"),
            until=datetime.fromisoformat(data["until"]) if data.get("until") else None,
            by=str(data.get("by", "?")),
            at=str(data.get("at", "?")),
            why=str(data.get("why", "")),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StateError(f"schedule hold {path}", f"unreadable: {e}", hint="gpupool schedule resume") from None


def write_hold(
    directory: Path, layout: str | None, until: datetime | None, why: str = "", clock: Clock = SYSTEM
) -> Hold:
    try:
        who = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        who = str(os.getuid())
    hold = Hold(layout, until, who, clock.now().astimezone().isoformat(timespec="seconds"), why)
    directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(directory / FILE_NAME, hold.to_dict())
    return hold


def clear_hold(directory: Path) -> bool:
    try:
        (directory / FILE_NAME).unlink()
    except FileNotFoundError:
        return False
    return True
