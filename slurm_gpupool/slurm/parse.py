"""Per-release parsers of Slurm's output into ``slurm/types.py`` values (pure).

``sinfo --json`` / ``squeue --json`` layouts differ by release (data parser v0.0.38 on
22.05, v0.0.42 on 24.11, v0.0.44 on 26.05); real output of each is recorded in
``tests/fixtures/slurm/<series>/`` and parsed in the unit tests."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime

from slurm_gpupool.core.gres.hostlist import expand
from slurm_gpupool.slurm import json_output as jo
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, WillRun


def _node_info(name: str, n: dict, group: dict | None = None) -> NodeInfo:
    """One node from a v0.0.38 ``nodes`` entry, or a name of a v0.0.4x ``sinfo`` group."""
    if group is None:
        base, flags = jo.state(n.get("state"), n.get("state_flags"))
        features = jo.text_list(n.get("active_features") or n.get("features"))
        gres, reason = jo.text(n.get("gres"), "total"), jo.text(n.get("reason"))
        used, tres_used = jo.text(n.get("gres_used")), jo.text(n.get("tres_used"))
        partitions = jo.text_list(n.get("partitions"))
    else:  # (sinfo --json groups nodes by GRES used too: every node of a group has the group's)
        base, flags = jo.state((group.get("node") or {}).get("state"))
        feats = group.get("features") or {}
        features = jo.text_list(feats.get("active") or feats.get("total"))
        gres, reason = jo.text(group.get("gres"), "total"), jo.text(group.get("reason"))
        used, tres_used = jo.text(group.get("gres"), "used"), ""
        partitions = tuple(p for p in [jo.text(group.get("partition"), "name")] if p)
    return NodeInfo(
        name=name,
        state=base,
        flags=flags,
        gres=gres,
        features=features,
        reason=reason,
        gres_used=used,
        tres_used=tres_used,
        partitions=partitions,
    )


def parse_sinfo_json(text: str) -> dict[str, NodeInfo]:
    """``sinfo --json`` (or ``scontrol --json show nodes``) → node name → NodeInfo.

    v0.0.38 (22.05) lists ``nodes``; v0.0.40 and later list ``sinfo`` groups, a
    node once per partition it is in.  No node at all is an error: a cluster
    without nodes is a misread, and would make the repartitioner switch nothing.
    """
    doc = jo.load(text, "sinfo --json")
    out: dict[str, NodeInfo] = {}
    if isinstance(doc.get("sinfo"), list):
        for group in doc["sinfo"]:
            for name in ((group.get("nodes") or {}).get("nodes")) or []:
                seen = _node_info(name, {}, group)
                if name in out:  # listed again for another partition: one node, in both
                    known = out[name].partitions
                    seen = replace(out[name], partitions=known + tuple(p for p in seen.partitions if p not in known))
                out[name] = seen
    elif isinstance(doc.get("nodes"), list):
        for n in doc["nodes"]:
            if isinstance(n, dict) and n.get("name"):
                out[n["name"]] = _node_info(n["name"], n)
    if not out:
        raise jo.unknown_layout(doc, "sinfo --json", "node")
    return out


def parse_squeue_json(text: str) -> list[JobInfo]:
    """``squeue --json`` → jobs (time limits in minutes there; here seconds, None = unlimited)."""
    doc = jo.load(text, "squeue --json")
    if not isinstance(doc.get("jobs"), list):
        raise jo.unknown_layout(doc, "squeue --json", '"jobs" list')
    out = []
    for j in doc["jobs"]:
        limit = None if jo.is_infinite(j.get("time_limit")) else jo.number(j.get("time_limit"))
        base, _flags = jo.state(j.get("job_state"))
        nodes = j.get("nodes") or ""
        out.append(
            JobInfo(
                job_id=int(j["job_id"]),
                state=base.upper(),
                nodes=frozenset(expand(nodes)) if nodes else frozenset(),
                user=j.get("user_name") or str(j.get("user_id", "")),
                name=j.get("name") or "",
                time_limit_s=limit * 60 if limit else None,
                start_time=jo.number(j.get("start_time")) or 0,
                requeue=bool(j.get("requeue")),
                reservation=j.get("resv_name") or "",
                gres=jo.text(j.get("tres_per_node")),
                priority=jo.number(j.get("priority")),
                state_reason=jo.text(j.get("state_reason")),
                node_count=jo.number(j.get("node_count")) or 1,
                tres_per_job=jo.text(j.get("tres_per_job")),
                qos=jo.text(j.get("qos")),
                submit_time=jo.number(j.get("submit_time")) or 0,
            )
        )
    return out


_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z]*)=")


def parse_one_line(line: str) -> dict[str, str]:
    """``scontrol -o show ...``: ``Key=value`` fields, values may hold spaces (``Reason=``)."""
    keys = list(_KEY.finditer(line))
    out = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def parse_reservations(text: str) -> dict[str, Reservation]:
    """``scontrol -o show reservation`` (``No reservations in the system`` → {})."""
    out = {}
    for line in text.splitlines():
        f = parse_one_line(line)
        if "ReservationName" not in f:
            continue
        nodes = f.get("Nodes", "")
        out[f["ReservationName"]] = Reservation(
            name=f["ReservationName"],
            nodes=frozenset(expand(nodes)) if nodes and nodes != "(null)" else frozenset(),
            start=datetime.fromisoformat(f["StartTime"]),
            end=datetime.fromisoformat(f["EndTime"]),
            flags=frozenset(x for x in f.get("Flags", "").split(",") if x),
        )
    return out


def slurm_time(t: datetime) -> str:
    """A datetime as Slurm's ``StartTime=`` wants it (local time, no zone)."""
    if t.tzinfo is not None:
        t = t.astimezone().replace(tzinfo=None)
    return t.strftime("%Y-%m-%dT%H:%M:%S")


# sbatch.c (_job_will_run), 17.11 to 24.11: "Job %u to start at %s using %u processors on nodes %s
# in partition %s"; 26.05 (libslurmfull): "Job %u to start at %s%s%s a using ..." (words after the
# time), "... using %u processors on %s" without a partition, and "%pI to start at %s on cluster %s
# using ..." in a federation; then "  Preempts: 12,13" when it would preempt jobs
_WILL_RUN = re.compile(
    r"(?:Job (\d+)|JobId=(\d+)) to start at (\S+).*? using (\d+) processors on (?:nodes )?(\S*)"
    r"(?: +in partition (\S+))?"
)
_PREEMPTS = re.compile(r"Preempts: ([0-9,\s]+)")


def parse_will_run(stderr: str) -> WillRun:
    """``sbatch --test-only ...``'s messages (on stderr) → :class:`WillRun`.

    Its time is printed in ``SLURM_TIME_FORMAT``: the caller runs sbatch with
    ``standard`` (``2026-11-28T13:29:10``).  Without the start line, the refusal is
    sbatch's error lines (job_submit.lua's message among them), else its
    ``allocation failure: ...`` line (slurmctld's); error lines without one are sbatch's
    own refusal of the command line (``"abc" is not a valid node count``, exit 255)."""
    m = _WILL_RUN.search(stderr)
    if m is not None:
        try:
            start = datetime.fromisoformat(m.group(3))
        except ValueError:
            start = None
        if start is not None:
            p = _PREEMPTS.search(stderr)
            preempts = tuple(int(x) for x in re.split(r"[,\s]+", p.group(1)) if x) if p else ()
            return WillRun(
                start=start,
                cpus=int(m.group(4)),
                nodes=frozenset(expand(m.group(5))) if m.group(5) else frozenset(),
                partition=m.group(6) or "",
                preempts=preempts,
            )
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln.removeprefix("sbatch: error:").strip() for ln in lines if ln.startswith("sbatch: error:")]
    failure = [ln.removeprefix("allocation failure:").strip() for ln in lines if ln.startswith("allocation failure:")]
    why = "; ".join(errors) or "; ".join(failure) or (lines[-1] if lines else "sbatch --test-only gave no answer")
    return WillRun(start=None, refused=why, by_sbatch=bool(errors) and not failure, reason="; ".join(failure))
