"""``sacctmgr``: the QOS and association limits of the service tiers (``gpupool qos``).

Reads ``sacctmgr -n --parsable2 show qos|assoc format=...`` with the columns named
explicitly, so the header names, which differ per release (``MaxTRESPU``,
``Descr``), do not matter; each release's output is recorded in
``tests/fixtures/slurm/<series>/`` (``sacctmgr-qos.txt``, ``sacctmgr-assoc.txt``).
Writes with ``sacctmgr -i`` (no prompt), one command per change.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_gpupool.core.policy.qos import QosSpec, parse_tres_limits
from slurm_gpupool.errors import SlurmUnavailableError
from slurm_gpupool.slurm.runner import SlurmRunner

QOS_FORMAT = (
    "Name",
    "Priority",
    "Preempt",
    "PreemptMode",
    "GraceTime",
    "PreemptExemptTime",
    "GrpTRES",
    "MaxTRESPerUser",
    "MaxTRESPerAccount",
    "Description",
)
ASSOC_FORMAT = ("Cluster", "Account", "User", "Partition", "GrpTRES", "QOS")


def qos_argv() -> list[str]:
    return ["sacctmgr", "-n", "--parsable2", "show", "qos", "format=" + ",".join(QOS_FORMAT)]


def assoc_argv(cluster: str) -> list[str]:
    return [
        "sacctmgr",
        "-n",
        "--parsable2",
        "show",
        "assoc",
        "where",
        f"cluster={cluster}",
        "format=" + ",".join(ASSOC_FORMAT),
    ]


def parse_duration(text: str) -> int | None:
    """sacctmgr's ``00:02:00``, ``1-00:00:00``, ``10:00`` (minutes:seconds) → seconds; empty → None."""
    text = text.strip()
    if not text:
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != width:  # a Description with '|' would shift the columns: only ours matter
            if len(cells) > width:
                cells = [*cells[: width - 1], "|".join(cells[width - 1 :])]
            else:
                raise SlurmUnavailableError(what, f"unexpected line {line[:80]!r} ({len(cells)} columns, not {width})")
        rows.append(cells)
    return rows


def parse_qos(text: str) -> dict[str, QosSpec]:
    """``sacctmgr -n -P show qos format=<QOS_FORMAT>`` → name → QosSpec."""
    out = {}
    for c in _rows(text, len(QOS_FORMAT), "sacctmgr show qos"):
        name = c[0].strip()
        out[name] = QosSpec(
            name=name,
            priority=int(c[1] or 0),
            preempt=tuple(sorted(x for x in c[2].split(",") if x)),
            preempt_mode=(c[3] or "cluster").lower(),
            grace_s=parse_duration(c[4]) or 0,
            exempt_s=parse_duration(c[5]),
            grp_tres=parse_tres_limits(c[6]),
            max_tres_per_user=parse_tres_limits(c[7]),
            max_tres_per_account=parse_tres_limits(c[8]),
            description=c[9],
        )
    return out


def parse_assoc(
    text: str,
) -> tuple[dict[str, tuple[tuple[str, int], ...]], dict[str, tuple[str, ...]], dict[tuple[str, str], tuple[str, ...]]]:
    """``sacctmgr -n -P show assoc format=<ASSOC_FORMAT>`` → account associations' GrpTRES and
    QOS lists, and the user associations' QOS lists (partition associations are skipped)."""
    tres: dict[str, tuple[tuple[str, int], ...]] = {}
    access: dict[str, tuple[str, ...]] = {}
    users: dict[tuple[str, str], tuple[str, ...]] = {}
    for c in _rows(text, len(ASSOC_FORMAT), "sacctmgr show assoc"):
        _cluster, account, user, partition, grp, qos = c
        qos_list = tuple(sorted(q for q in qos.split(",") if q))
        if partition:
            continue
        if not user:
            tres[account] = parse_tres_limits(grp)
            access[account] = qos_list
        else:
            users[(account, user)] = qos_list
    return tres, access, users


class Sacctmgr:
    """The sacctmgr calls of ``gpupool qos``."""

    def __init__(self, runner: SlurmRunner | None = None) -> None:
        self.runner = runner or SlurmRunner()

    def qos(self) -> dict[str, QosSpec]:
        return parse_qos(self.runner.run(qos_argv(), timeout_s=60).check("sacctmgr show qos").stdout)

    def assoc(self, cluster: str) -> tuple[dict, dict, dict]:
        return parse_assoc(self.runner.run(assoc_argv(cluster), timeout_s=60).check("sacctmgr show assoc").stdout)

    def run(self, argv: Sequence[str]) -> None:
        """``sacctmgr -i ARGV``; "Nothing new added" / "Nothing modified" count as done."""
        r = self.runner.run(["sacctmgr", "-i", *argv], timeout_s=60)
        text = (r.stdout + r.stderr).lower()
        if r.returncode != 0 and "nothing" not in text:
            r.check("sacctmgr " + " ".join(argv[:4]))
