"""``scripts/gpu-check``: what our NVML layer reads on a real GPU node, checked against
NVIDIA's own ``nvidia-smi`` and against itself.  Read-only: NVML getters and ``nvidia-smi``
queries only, never a MIG change or a reset.

The simulated GPUs stand in for real ones everywhere else, so their fidelity rests on the
same NVML calls answering on real hardware as the simulation answers.  This is the check run
on a lent GPU: every GPU's name, UUID, PCI bus id, memory, MIG mode and MIG device UUIDs as
``nvidia-smi --query-gpu`` and ``nvidia-smi -L`` print them, with the temperature and the
volatile uncorrectable ECC count the health check reads; the job hooks' short path to the MIG
devices (``mig_state``, walking MIG device handles) equal to the full instance tree
(``gpu``); and whether the MIG catalog knows the model.  ``--json FILE``
keeps everything read, with ``nvidia-smi -q``'s raw output, for study elsewhere.

Exit codes: 0 everything agrees, 1 a difference (listed), 69 NVML or ``nvidia-smi`` missing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from slurm_gpupool.errors import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, GpupoolError

# ``nvidia-smi --query-gpu=...`` fields (``nvidia-smi --help-query-gpu``), in this order
SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "mig.mode.current",
    "mig.mode.pending",
    "temperature.gpu",
    "ecc.errors.uncorrected.volatile.total",
)
TEMPERATURE_SLACK_C = 3  # read twice, a moment apart
_GPU_LINE = re.compile(r"^GPU (\d+): (.*) \(UUID: (GPU-[^)]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)]+)\)\s*$")


@dataclass(frozen=True)
class Finding:
    """One comparison: ``ok`` when ours equals the reference."""

    gpu: int | None
    what: str
    ours: Any
    reference: Any
    ok: bool

    def line(self) -> str:
        where = f"GPU {self.gpu} " if self.gpu is not None else ""
        if self.ok:
            return f"ok    {where}{self.what}: {self.ours}"
        return f"DIFF  {where}{self.what}: ours {self.ours!r}, reference {self.reference!r}"


def parse_query(text: str) -> list[dict[str, str]]:
    """``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits``: one dict per GPU."""
    rows = []
    for line in text.splitlines():
        if line.strip():
            values = [v.strip() for v in line.split(",")]
            if len(values) != len(SMI_FIELDS):
                raise ValueError(f"nvidia-smi --query-gpu: {len(values)} fields, expected {len(SMI_FIELDS)}: {line!r}")
            rows.append(dict(zip(SMI_FIELDS, values, strict=True)))
    return rows


def parse_list(text: str) -> dict[str, list[str]]:
    """``nvidia-smi -L``: GPU UUID -> the UUIDs of its MIG devices, in the order listed."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu is not None:
            current = gpu[3]
            out[current] = []
            continue
        mig = _MIG_LINE.match(line)
        if mig is not None and current is not None:
            out[current].append(mig[1])
    return out


def _mig_mode(value: str) -> bool | None:
    """``Enabled``/``Disabled``; ``[N/A]`` (no MIG on this GPU) is None."""
    return {"enabled": True, "disabled": False}.get(value.strip().lower())


def _count(value: str) -> int | None:
    """A counter nvidia-smi prints, ``[N/A]`` (not supported, ECC off) as None."""
    value = value.strip()
    return int(value) if value.isdigit() else None


def _bus(value: str) -> str:
    """NVML and nvidia-smi both print ``00000000:07:00.0``; compare case-blind."""
    return value.strip().lower()


def compare(ours: list[dict[str, Any]], query: list[dict[str, str]], listing: dict[str, list[str]]) -> list[Finding]:
    """Our view of each GPU (see :func:`our_view`) against ``nvidia-smi``'s (pure)."""
    found = [Finding(None, "GPU count", len(ours), len(query), len(ours) == len(query))]
    smi = {int(r["index"]): r for r in query}
    for g in ours:
        i = g["index"]
        r = smi.get(i)
        if r is None:
            found.append(Finding(i, "listed by nvidia-smi", True, False, False))
            continue

        def same(what: str, mine: Any, theirs: Any, i: int = i) -> None:
            found.append(Finding(i, what, mine, theirs, mine == theirs))

        same("UUID", g["uuid"], r["uuid"])
        same("name", g["name"], r["name"])
        same("PCI bus id", _bus(g["pci_bus_id"]), _bus(r["pci.bus_id"]))
        same(
            "memory MiB", g["memory_mib"], int(r["memory.total"]) if r["memory.total"].isdigit() else r["memory.total"]
        )
        mode_now, mode_pending = _mig_mode(r["mig.mode.current"]), _mig_mode(r["mig.mode.pending"])
        same("MIG mode (current)", g["mig_current"] if mode_now is not None else None, mode_now)
        same("MIG mode (pending)", g["mig_pending"] if mode_pending is not None else None, mode_pending)
        same("MIG device UUIDs (nvidia-smi -L)", sorted(g["mig_uuids"]), sorted(listing.get(g["uuid"], [])))
        same(
            "uncorrectable ECC errors (volatile)",
            g["ecc_uncorrected_volatile"],
            _count(r["ecc.errors.uncorrected.volatile.total"]),
        )
        temp, smi_temp = g["temperature_c"], _count(r["temperature.gpu"])
        near = temp == smi_temp or (
            temp is not None and smi_temp is not None and abs(temp - smi_temp) <= TEMPERATURE_SLACK_C
        )
        found.append(Finding(i, f"temperature C (within {TEMPERATURE_SLACK_C})", temp, smi_temp, near))
        # the hooks' short path to the MIG devices against the full instance tree
        same("MIG state as the hooks read it", [g["mig_current"], sorted(g["mig_uuids"])], g["mig_state"])
        found.append(Finding(i, "model in the MIG catalog", g["model"], "a catalog model", g["model"] is not None))
    return found


def our_view(backend: Any) -> list[dict[str, Any]]:
    """What the backend reads of every GPU, full and short paths (NVML getters only)."""
    out = []
    for i in range(backend.gpu_count()):
        g = backend.gpu(i)
        counters = backend.health_counters(i)
        cur, uuids = backend.mig_state(i)
        out.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "model": g.model,
                "pci_bus_id": g.pci_bus_id,
                "pci_device_id": f"{g.pci_device_id:#06x}",
                "memory_mib": g.memory_mib,
                "mig_capable": g.mig_capable,
                "mig_current": g.mig_current,
                "mig_pending": g.mig_pending,
                "mig_uuids": [d.uuid for d in g.mig_devices],
                "mig_profiles": [d.profile for d in g.mig_devices],
                "mig_state": [cur, sorted(uuids)],
                "ecc_uncorrected_volatile": counters.get("ecc_uncorrected_volatile"),
                "temperature_c": counters.get("temperature_c"),
                "health_counters": counters,
                "processes": backend.process_records(i),
            }
        )
    return out


def _smi(*args: str) -> str:
    """``nvidia-smi ARGS``' output; an error names the command."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, errors="replace", timeout=120, check=False
        )
    except FileNotFoundError:
        raise _Missing("nvidia-smi is not on PATH") from None
    if proc.returncode != 0:
        raise _Missing(
            f"nvidia-smi {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout


class _Missing(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    """``python -m slurm_gpupool.hw.gpucheck [--json FILE]`` (what ``scripts/gpu-check`` runs)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]) or (args and (args[0] != "--json" or len(args) != 2)):
        sys.stdout.write((__doc__ or "").strip() + "\n\nusage: gpu-check [--json FILE]\n")
        return EXIT_OK if args[:1] in (["-h"], ["--help"]) else 2
    from slurm_gpupool.hw import open_backend

    try:
        query = parse_query(_smi(f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"))
        listing_text = _smi("-L")
        with open_backend() as backend:
            driver = backend.driver_version()
            ours = our_view(backend)
    except _Missing as e:
        sys.stderr.write(f"gpu-check: {e}\n")
        return EXIT_UNAVAILABLE
    except GpupoolError as e:
        sys.stderr.write(f"gpu-check: {e.message()}\n")
        return e.exit_code
    findings = compare(ours, query, parse_list(listing_text))
    print(f"driver {driver}; {len(ours)} GPUs")
    for f in findings:
        print(f.line())
    diffs = [f for f in findings if not f.ok]
    print(f"{len(findings) - len(diffs)} agree, {len(diffs)} differ")
    if args:
        report = {
            "driver": driver,
            "ours": ours,
            "nvidia_smi": {"query": query, "list": listing_text, "q": _smi_or_error("-q")},
            "findings": [asdict(f) for f in findings],
        }
        with open(args[1], "w") as out:
            json.dump(report, out, indent=1, default=str)
        print(f"wrote {args[1]}")
    return EXIT_FAILED if diffs else EXIT_OK


def _smi_or_error(*args: str) -> str:
    try:
        return _smi(*args)
    except _Missing as e:
        return f"(unavailable: {e})"


if __name__ == "__main__":
    sys.exit(main())
