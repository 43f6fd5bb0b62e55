"""One ``sacct --json`` job record → the sacct-named fields ``--parsable2`` would print.

Data parser v0.0.38 (Slurm 22.05) and later keep times as epoch seconds under
``time`` and TRES as lists of ``{type, name, count}``; turning them back into
``AllocTRES``-style strings lets one parser serve both sources.  Pure.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from slurm_gpupool.core.gres.tres import NO_VAL_SENTINELS
from slurm_gpupool.slurm import json_output as jo


def _tres(items: list[dict[str, Any]] | None) -> str:
    """``[{"type": "gres", "name": "gpu:1g.5gb", "count": 2}]`` → ``gres/gpu:1g.5gb=2``."""
    out = []
    for t in items or []:
        count = t.get("count")
        # None or negative: not measured (energy on a cluster without an energy plugin is
        # null on 22.05, -2 on 24.11 and later), not a count
        if count is None or (isinstance(count, int | float) and not isinstance(count, bool) and count < 0):
            continue
        if isinstance(count, bool) or not isinstance(count, int | float | str):
            raise ValueError(f"TRES count of {type(count).__name__}")
        if isinstance(count, str):  # a number as text, or Slurm's NO_VAL in hex: the TRES reader decides
            if not _COUNT_TEXT.fullmatch(count):
                raise ValueError(f"TRES count {count[:30]!r}")
            text = count
        else:
            text = str(int(count))  # (NaN and inf raise: the record is counted as unreadable)
        name = f"{t['type']}/{t['name']}" if t.get("name") else str(t["type"])
        out.append(f"{name}={text}")
    return ",".join(out)


_COUNT_TEXT = re.compile(r"[0-9]{1,20}|0[xX][0-9a-fA-F]{1,16}")


def _time(epoch: Any) -> str:
    """Epoch seconds → ISO 8601 with offset (0 means "not yet", as sacct's Unknown; so do
    Slurm's NO_VAL and INFINITE)."""
    if not epoch or int(epoch) == 0 or int(epoch) in NO_VAL_SENTINELS:  # a pending job's start, a running job's end
        return "Unknown"
    return datetime.fromtimestamp(int(epoch), tz=UTC).isoformat()


def _state(job: dict[str, Any]) -> str:
    s = job["state"]
    base, _flags = jo.state(s["current"] if isinstance(s, dict) else s)
    return base.upper()


def _number(v: Any) -> str:
    """v0.0.39+ wrap numbers as ``{"set": true, "number": N}``; unset or infinite is ""."""
    n = jo.number(v)
    return "" if n is None else str(n)


def job_rows(job: dict[str, Any]) -> list[dict[str, str]]:
    """The job row and one row per step that carries GPU usage peaks."""
    t = job["time"]
    jid = str(job["job_id"])
    row = {
        "JobID": jid,
        "JobIDRaw": jid,
        "JobName": str(job.get("name") or ""),
        "User": str(job.get("user") or ""),
        "Account": str(job.get("account") or ""),
        "Partition": str(job.get("partition") or ""),
        "NodeList": str(job.get("nodes") or ""),
        "State": _state(job),
        "Submit": _time(_number(t["submission"])),
        "Start": _time(_number(t.get("start"))),
        "End": _time(_number(t.get("end"))),
        "TimelimitRaw": _number(t.get("limit")),
        "ReqTRES": _tres(job.get("tres", {}).get("requested")),
        "AllocTRES": _tres(job.get("tres", {}).get("allocated")),
        "TRESUsageInMax": "",
        "QOS": str(job.get("qos") or ""),
    }
    rows = [row]
    for step in job.get("steps") or []:
        peak = _tres(((step.get("tres") or {}).get("requested") or {}).get("max"))
        if "gres/gpu" in peak:
            sid = (step.get("step") or {}).get("id", "step")
            rows.append(
                {
                    **{k: "" for k in row},
                    "JobID": f"{jid}.{sid}",
                    "JobIDRaw": f"{jid}.{sid}",
                    "TRESUsageInMax": peak,
                    "Submit": row["Submit"],
                }
            )
    return rows
