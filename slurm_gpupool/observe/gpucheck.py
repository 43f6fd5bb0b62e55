"""``scripts/gpu-check OUTDIR``: the read-only check run for us on a lent real GPU node, for
minutes only.  It reads, compares and writes ``OUTDIR/gpu-check.json``; it never changes MIG
mode, clocks, compute mode or any other GPU setting (NVML getters, ``nvidia-smi`` queries, and
an MPS control daemon: a user process, stopped again).  Parts, each ``ok``, ``diff``,
``failed`` or ``skipped`` with its reason:

* ``nvidia_smi``: every GPU as our NVML layer reads it against ``nvidia-smi --query-gpu`` and
  ``nvidia-smi -L`` (name, UUID, PCI bus id, memory, MIG mode and devices, ECC, temperature),
  and the hooks' short path to the MIG devices against the full instance tree;
* ``catalog``: name, PCI device id, memory and the MIG profile table the GPU reports
  (``nvidia-smi mig -lgip``/``-lgipp``, only in MIG mode) against ``core/mig/catalog``;
* ``contract``: the NVML contract suite (``tests/contract``) on the real GPU, never with
  ``SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE`` (its MIG-changing tests skip);
* ``mps``: an MPS control daemon in the hooks' pipe layout and two CUDA clients with the
  hooks' limits (``hooks/mps.py`` ``client_env``): an allocation over
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` must fail, one under it succeed;
* ``gpm``: whether each GPU supports GPU Performance Monitoring.

Exit codes (:func:`exit_code`): 0 nothing differs (skipped parts say why), 1 a part found a
difference or failed, 2 usage, 69 no GPU could be read (NVML unavailable).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from slurm_gpupool.errors import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, GpupoolError

REPORT = "gpu-check.json"
CONTRACT_TIMEOUT_S = 150.0  # with the other parts' bounds, the whole check stays under 5 minutes
SMI_TIMEOUT_S = 20.0
MPS_TIMEOUT_S = 60.0  # a client's cuInit through cuMemAlloc
MPS_LIMIT_MIB = 1024  # the pinned limit the clients get (their shards' memory, lowered as a job may)
MPS_OVER_MIB = 1536  # must fail under MPS
MPS_UNDER_MIB = 512  # must succeed
MPS_BLOCKING_MODES = {2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}  # NVML_COMPUTEMODE_*
DESTRUCTIVE_ENV = "SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE"
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


@dataclass
class Part:
    """One part of the check: ``ok``, ``diff``, ``failed`` or ``skipped`` (``reason`` says why)."""

    name: str
    status: str
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def judged(cls, name: str, findings: list[Finding], **details: Any) -> Part:
        """``ok`` when every finding agrees, else ``diff``."""
        return cls(name, "ok" if all(f.ok for f in findings) else "diff", "", findings, dict(details))

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "findings": [asdict(f) for f in self.findings],
            "details": self.details,
        }


def exit_code(parts: list[Part], gpu_read: bool) -> int:
    """The check's exit code, decided here only: 69 when no GPU could be read, 1 when a part
    differs or failed, else 0 (skipped parts are listed with their reasons, not failures)."""
    if not gpu_read:
        return EXIT_UNAVAILABLE
    return EXIT_FAILED if any(p.status in ("diff", "failed") for p in parts) else EXIT_OK


# ---------------------------------------------------------------- what our NVML layer reads


def our_view(backend: Any) -> list[dict[str, Any]]:
    """What the backend reads of every GPU, full and short paths (NVML getters only:
    ``nvidia-smi -q``, ``nvidia-smi mig -lgip -lgipp``, ``--query-gpu=compute_mode``)."""
    out = []
    for i in range(backend.gpu_count()):
        g = backend.gpu(i)
        counters = backend.health_counters(i)
        cur, uuids = backend.mig_state(i)
        usage = _read(backend.device_usage, i)  # nvidia-smi --query-gpu=memory.used
        out.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "model": g.model,
                "pci_bus_id": g.pci_bus_id,
                "pci_device_id": f"{g.pci_device_id:#06x}",
                "memory_mib": g.memory_mib,
                "memory_used_mib": usage.get("memory_used_mib", usage.get("error")),
                "mig_capable": g.mig_capable,
                "mig_current": g.mig_current,
                "mig_pending": g.mig_pending,
                "mig_uuids": [d.uuid for d in g.mig_devices],
                "mig_profiles": [d.profile for d in g.mig_devices],
                "mig_state": [cur, sorted(uuids)],
                "gi_profiles": _read(backend.gi_profile_table, i),
                "compute_mode": _read(backend.compute_mode, i),
                "gpm_supported": _read(backend.gpm_support, i),
                "ecc_uncorrected_volatile": counters.get("ecc_uncorrected_volatile"),
                "temperature_c": counters.get("temperature_c"),
                "health_counters": counters,
                "processes": backend.process_records(i),
            }
        )
    return out


def _read(getter: Callable[[int], Any], index: int) -> Any:
    """A fact only gpu-check reads; an NVML error is kept as ``{"error": ...}`` so that one
    unexpected answer does not cost the rest of the report on a machine lent for minutes."""
    try:
        return getter(index)
    except GpupoolError as e:
        return {"error": e.message()}


# ---------------------------------------------------------------- part: nvidia-smi


class _Missing(Exception):
    """A tool the part needs is not there or did not answer: the part is skipped."""


def _smi(*args: str) -> str:
    """``nvidia-smi ARGS``' output; an error names the command."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, errors="replace", timeout=SMI_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise _Missing("nvidia-smi is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise _Missing(f"nvidia-smi {' '.join(args)} did not answer in {SMI_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        raise _Missing(
            f"nvidia-smi {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout


def smi_part(ours: list[dict[str, Any]], out_dir: Path) -> Part:
    """Our view against ``nvidia-smi --query-gpu`` and ``-L``; ``nvidia-smi -q`` kept raw."""
    try:
        query = parse_query(_smi(f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"))
        listing = _smi("-L")
    except _Missing as e:
        return Part("nvidia_smi", "skipped", str(e))
    except ValueError as e:
        return Part("nvidia_smi", "failed", str(e))
    try:
        (out_dir / "nvidia-smi-q.txt").write_text(_smi("-q"))
    except _Missing as e:
        (out_dir / "nvidia-smi-q.txt").write_text(f"(unavailable: {e})\n")
    return Part.judged("nvidia_smi", compare(ours, query, parse_list(listing)), query=query, list=listing)


# ---------------------------------------------------------------- part: catalog

_PROFILE_FIELDS = (
    "profile_id",
    "name",
    "compute_slices",
    "max_count",
    "sm_count",
    "copy_engines",
    "decoders",
    "jpegs",
    "ofas",
    "memory_mib",
)


def _catalog_profile(p: Any) -> dict[str, Any]:
    """A catalog profile in the fields :meth:`NvmlBackend.gi_profile_table` reports."""
    row = {f: getattr(p, f) for f in _PROFILE_FIELDS}
    row["placements"] = [[s, p.memory_slices] for s in p.placement_starts]
    return row


def catalog_findings(g: dict[str, Any]) -> list[Finding]:
    """One GPU as NVML reports it against its catalog row (pure): "ours" is the catalog's
    value, "reference" the GPU's."""
    from slurm_gpupool.core.mig import catalog

    i = g["index"]
    model = catalog.detect(g["name"], int(g["pci_device_id"], 16))
    if model is None:
        return [Finding(i, "model in the catalog", None, f"{g['name']} ({g['pci_device_id']})", False)]
    found = [
        Finding(i, f"name ({model.key})", list(model.nvml_names), g["name"], g["name"] in model.nvml_names),
        Finding(
            i,
            "PCI device id",
            [f"{x:#06x}" for x in model.pci_device_ids],
            g["pci_device_id"],
            int(g["pci_device_id"], 16) in model.pci_device_ids,
        ),
        Finding(i, "memory MiB", model.memory_mib, g["memory_mib"], model.memory_mib == g["memory_mib"]),
        Finding(i, "MIG capable", model.mig_capable, g["mig_capable"], model.mig_capable == g["mig_capable"]),
    ]
    table = g.get("gi_profiles")
    if isinstance(table, dict):
        return [*found, Finding(i, "MIG profile table (nvidia-smi mig -lgip)", None, table["error"], False)]
    if table is None or model.mig is None:
        return found
    reported = {r["nvml_enum"]: r for r in table}
    expected = {p.nvml_enum: _catalog_profile(p) for p in model.mig.profiles}
    for enum in sorted(set(reported) | set(expected)):
        mine, theirs = expected.get(enum), reported.get(enum)
        what = f"MIG profile enum {enum} ({(mine or theirs or {}).get('name')})"
        if mine is None or theirs is None:
            found.append(Finding(i, what, mine, theirs, False))
            continue
        keys = (*_PROFILE_FIELDS, "placements")
        differ = [k for k in keys if mine[k] != theirs[k]]
        found.append(
            Finding(
                i,
                what + (f": {', '.join(differ)} differ" if differ else ""),
                {k: mine[k] for k in differ} or mine["name"],
                {k: theirs[k] for k in differ} or theirs["name"],
                not differ,
            )
        )
    return found


def catalog_part(ours: list[dict[str, Any]]) -> Part:
    findings = [f for g in ours for f in catalog_findings(g)]
    unread = [
        f"GPU {g['index']}: MIG mode is off, so NVML does not report its profile table (nvidia-smi mig -lgip "
        "neither); gpu-check does not enable it"
        for g in ours
        if g["mig_capable"] and g["gi_profiles"] is None
    ]
    return Part.judged("catalog", findings, profile_tables_not_read=unread)


# ---------------------------------------------------------------- part: GPM


def gpm_part(ours: list[dict[str, Any]]) -> Part:
    """``nvmlGpmQueryDeviceSupport`` per GPU: reported, never a difference."""
    support = {str(g["index"]): g["gpm_supported"] for g in ours}
    if all(v is None for v in support.values()):
        return Part("gpm", "skipped", "this pynvml or driver has no nvmlGpmQueryDeviceSupport", details=support)
    return Part("gpm", "ok", details={"supported": support})


# ---------------------------------------------------------------- part: the contract suite


def contract_part(tests_dir: Path | None, out_dir: Path, python: str, timeout_s: float = CONTRACT_TIMEOUT_S) -> Part:
    """``python -m pytest tests/contract`` on this machine's GPUs, with the destructive
    variable removed (its MIG-changing tests skip); junit XML kept, counts and skip reasons
    reported.  ``python`` must import pytest: scripts/gpu-check's venv has it."""
    if tests_dir is None or not tests_dir.is_dir():
        return Part("contract", "skipped", "no tests/contract beside the package: run gpu-check from a checkout")
    probe = subprocess.run([python, "-c", "import pytest"], capture_output=True, timeout=60, check=False)
    if probe.returncode != 0:
        return Part(
            "contract",
            "skipped",
            f"pytest is not importable by {python}: scripts/gpu-check installs it into .venv; "
            "else `.venv/bin/python -m pip install pytest`",
        )
    env = {k: v for k, v in os.environ.items() if k not in (DESTRUCTIVE_ENV, "SLURM_GPUPOOL_SIM_DIR")}
    junit = out_dir / "contract-junit.xml"
    cmd = [python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}", str(tests_dir)]
    try:
        proc = subprocess.run(
            cmd,
            cwd=tests_dir.parent.parent,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Part("contract", "failed", f"pytest did not finish in {timeout_s:.0f} s", details={"command": cmd})
    (out_dir / "contract-pytest.txt").write_text(proc.stdout + proc.stderr)
    if not junit.exists():
        return Part("contract", "failed", f"pytest exited {proc.returncode} without a report: {proc.stderr[-500:]}")
    counts = junit_counts(junit.read_text())
    bad = counts["failures"] + counts["errors"]
    return Part(
        "contract",
        "failed" if bad or proc.returncode not in (0, 5) else "ok",
        f"{bad} of {counts['tests']} tests failed (contract-pytest.txt)" if bad else "",
        details={"command": cmd, "exit": proc.returncode, **counts},
    )


def junit_counts(xml: str) -> dict[str, Any]:
    """Totals, failed test ids and skip reasons (with how many tests each) of a junit XML."""
    root = ElementTree.fromstring(xml)
    cases = list(root.iter("testcase"))
    failed: list[str] = []
    skips: dict[str, int] = {}
    for c in cases:
        name = f"{c.get('classname')}::{c.get('name')}"
        if c.find("failure") is not None or c.find("error") is not None:
            failed.append(name)
        s = c.find("skipped")
        if s is not None:
            why = s.get("message") or ""
            skips[why] = skips.get(why, 0) + 1
    return {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": sum(1 for c in cases if c.find("error") is not None),
        "skipped": sum(skips.values()),
        "failed": failed,
        "skip_reasons": skips,
    }


# ---------------------------------------------------------------- part: CUDA MPS


@dataclass(frozen=True)
class ClientLayer:
    """How a CUDA client is started (its command takes OVER_MIB UNDER_MIB, prints one JSON
    line, holds its context until stdin closes) and why it cannot run here, if it cannot."""

    command: list[str]
    unavailable: Callable[[], str | None]


def _libcuda_missing() -> str | None:
    """Why ``libcuda.so.1`` (the driver's, no toolkit needed) cannot be loaded, or None."""
    import ctypes

    from slurm_gpupool.hw.cuda_client import LIBCUDA

    try:
        ctypes.CDLL(LIBCUDA)
    except OSError as e:
        return f"no {LIBCUDA} ({e}): the CUDA driver library is not installed"
    return None


def real_clients(python: str = sys.executable) -> ClientLayer:
    return ClientLayer([python, "-m", "slurm_gpupool.hw.cuda_client"], _libcuda_missing)


def sim_clients(python: str = sys.executable) -> ClientLayer:
    return ClientLayer([python, "-m", "slurm_gpupool.hw.sim.mps_client"], lambda: None)


def mps_candidate(ours: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """The first GPU MPS can be tried on without changing anything, and why each other is not."""
    why: list[str] = []
    for g in ours:
        if g["mig_current"]:
            why.append(f"GPU {g['index']}: in MIG mode (MPS would need a daemon per MIG device; not changed)")
        elif not isinstance(g["compute_mode"], int):
            why.append(f"GPU {g['index']}: compute mode not known ({g['compute_mode']})")
        elif g["compute_mode"] in MPS_BLOCKING_MODES:
            mode = MPS_BLOCKING_MODES[g["compute_mode"]]
            why.append(f"GPU {g['index']}: compute mode {mode} (our shard GPUs run in DEFAULT; not changed)")
        elif not isinstance(g["memory_used_mib"], int):
            why.append(f"GPU {g['index']}: memory in use not known ({g['memory_used_mib']})")
        elif g["memory_mib"] - g["memory_used_mib"] < MPS_OVER_MIB + MPS_UNDER_MIB + 512:
            why.append(f"GPU {g['index']}: too little free memory to tell an MPS limit from a full GPU")
        else:
            return g, why
    return None, why


def _ask(control: str, env: dict[str, str], line: str) -> str:
    """``echo LINE | nvidia-cuda-mps-control``'s answer ('' if none)."""
    try:
        proc = subprocess.run(
            [control], input=line + "\n", env=env, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _read_line(proc: subprocess.Popen[str], deadline: float) -> dict[str, Any]:
    """A client's JSON line, or why there is none (it is killed at ``deadline``, monotonic)."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(max(0.0, deadline - time.monotonic())):
            proc.kill()
            return {"pid": proc.pid, "error": "no answer in time (CUDA init waiting for an MPS server?)"}
    line = proc.stdout.readline()
    try:
        got = json.loads(line)
    except ValueError:
        return {"pid": proc.pid, "error": f"unreadable answer {line[:200]!r}"}
    return got if isinstance(got, dict) else {"pid": proc.pid, "error": f"unreadable answer {line[:200]!r}"}


def mps_part(
    ours: list[dict[str, Any]],
    node: str,
    clients: ClientLayer,
    control: str | None,
    sim_dir: str | None,
    work: Path,
    timeout_s: float = MPS_TIMEOUT_S,
) -> Part:
    """An MPS daemon in the hooks' pipe layout (``<pipe_dir>/<GPU UUID>``, ``.log`` beside it)
    started as the Prolog does (``CUDA_VISIBLE_DEVICES=<uuid> nvidia-cuda-mps-control -d``),
    two clients with the TaskProlog's variables (``client_env``), then ``echo quit``."""
    from slurm_gpupool.hooks import mps as hooks_mps

    gpu, why_not = mps_candidate(ours)
    if gpu is None:
        return Part("mps", "skipped", "; ".join(why_not) or "no GPU")
    if control is None:
        return Part("mps", "skipped", "nvidia-cuda-mps-control is not on PATH (the driver's MPS binaries)")
    missing = clients.unavailable()
    if missing:
        return Part("mps", "skipped", missing)
    settings: dict[str, Any] = {
        "mps": {"control": control, "pipe_dir": str(work / "mps"), "timeout_s": 10.0},
        "sim_dir": sim_dir,
    }
    uuid = gpu["uuid"]
    _base, pipes, logs = hooks_mps.daemon_dirs(settings, node, uuid)
    denv = hooks_mps.control_env(settings, node, uuid, pipes, logs)
    for d in (pipes, logs):
        os.makedirs(d, mode=0o755, exist_ok=True)
    cvars = dict(
        hooks_mps.client_env(
            1, 2, gpu["memory_mib"], mps={"pipe_dir": pipes, "log_dir": logs}, mem_request_mib=MPS_LIMIT_MIB
        )
    )
    details: dict[str, Any] = {
        "gpu": gpu["index"],
        "gpus_passed_over": why_not,
        "pipe_dir": pipes,
        "log_dir": logs,
        "client_env": cvars,
    }
    if not hooks_mps.control(settings, denv, ["-d"], None):
        details["control_log"] = _tail(Path(logs) / "control.log")
        return Part("mps", "failed", f"`nvidia-cuda-mps-control -d` did not start a daemon in {pipes}", details=details)
    found: list[Finding] = []
    procs: list[subprocess.Popen[str]] = []
    try:
        state, pid = hooks_mps.daemon_state(settings, denv, pipes)
        found.append(Finding(gpu["index"], "MPS daemon answers get_server_list", state, "running", state == "running"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_") and not k.startswith("SLURM_GPUPOOL")}
        env.update(cvars, CUDA_VISIBLE_DEVICES=uuid)
        if "SLURM_GPUPOOL_SIM_STATE" in denv:
            env["SLURM_GPUPOOL_SIM_STATE"] = denv["SLURM_GPUPOOL_SIM_STATE"]
        argv = [*clients.command, str(MPS_OVER_MIB), str(MPS_UNDER_MIB)]
        for _ in range(2):
            procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True))
        deadline = time.monotonic() + timeout_s  # one bound for both clients
        answers = [_read_line(p, deadline) for p in procs]
        servers = _ask(control, denv, "get_server_list").split()
        listed = {c for s in servers for c in _ask(control, denv, f"get_client_list {s}").split()}
        details.update(daemon_pid=pid, clients=answers, servers=servers, clients_listed=sorted(listed))
        for k, a in enumerate(answers, 1):
            steps = a.get("steps", {})
            if "error" in a:
                found.append(Finding(gpu["index"], f"client {k} ran", a["error"], "a CUDA context", False))
                continue
            over, under = steps.get("cuMemAlloc_over"), steps.get("cuMemAlloc_under")
            found += [
                Finding(
                    gpu["index"], f"client {k} is the daemon's client", str(a["pid"]), servers, str(a["pid"]) in listed
                ),
                Finding(
                    gpu["index"],
                    f"client {k}: {MPS_OVER_MIB} MiB over the limit {cvars['CUDA_MPS_PINNED_DEVICE_MEM_LIMIT']} fails",
                    over,
                    "CUDA_ERROR_OUT_OF_MEMORY",
                    over == "CUDA_ERROR_OUT_OF_MEMORY",
                ),
                Finding(
                    gpu["index"],
                    f"client {k}: {MPS_UNDER_MIB} MiB under it succeeds",
                    under,
                    "CUDA_SUCCESS",
                    under == "CUDA_SUCCESS",
                ),
            ]
    finally:
        for p in procs:
            _end(p)
        hooks_mps.stop_daemon(settings, denv, pipes)  # echo quit | nvidia-cuda-mps-control
        after = "running" if pid is not None and _process_running(pid) else "gone"
        found.append(
            Finding(gpu["index"], f"MPS daemon (pid {pid}) stopped (echo quit)", after, "gone", after == "gone")
        )
        details["control_log"] = _tail(Path(logs) / "control.log")
        details["server_log"] = _tail(Path(logs) / "server.log")
    return Part.judged("mps", found, **details)


def _process_running(pid: int) -> bool:
    """``/proc/<pid>/stat`` names a process that has not exited (``ps -o stat= -p PID``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] != b"Z"


def _end(proc: subprocess.Popen[str]) -> None:
    """Close a client's stdin (it frees and exits), then make sure it has."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _tail(path: Path, n: int = 40) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


# ---------------------------------------------------------------- the whole check


@dataclass
class Tools:
    """What the check uses beyond NVML, injectable by tests: the backend, the MPS control
    program, the CUDA client layer, the contract suite and the interpreter that runs it."""

    open_backend: Callable[[], Any]
    clients: Callable[[str], ClientLayer]  # by backend kind: "nvml" or "sim"
    mps_control: str | None
    tests_dir: Path | None
    python: str = sys.executable


def default_tools() -> Tools:
    from slurm_gpupool.hw import open_backend

    checkout = Path(__file__).resolve().parents[2] / "tests" / "contract"
    return Tools(
        open_backend=open_backend,
        clients=lambda kind: sim_clients() if kind == "sim" else real_clients(),
        mps_control=shutil.which("nvidia-cuda-mps-control"),
        tests_dir=checkout if checkout.is_dir() else None,
    )


def run_check(out_dir: Path, tools: Tools) -> tuple[dict[str, Any], int]:
    """Every part, in order, into one report; returns it and the exit code."""
    started = time.time()
    parts: list[Part] = []
    head: dict[str, Any] = {
        "tool": "gpu-check",
        "version": _version(),
        "host": os.uname().nodename,
        "started": started,
    }
    try:
        with tools.open_backend() as backend:
            kind, node = backend.kind, backend.node
            head.update(driver=backend.driver_version(), backend=kind, node=node)
            ours = our_view(backend)
    except GpupoolError as e:
        why = f"no GPU could be read: {e.message()}"
        parts = [Part(n, "skipped", why) for n in ("nvidia_smi", "catalog", "gpm", "mps", "contract")]
        return _report(head, parts, [], started, False), exit_code(parts, False)
    sim_dir = os.environ.get("SLURM_GPUPOOL_SIM_DIR") if kind == "sim" else None

    def mps() -> Part:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
            return mps_part(ours, node, tools.clients(kind), tools.mps_control, sim_dir, Path(work))

    def contract() -> Part:
        if kind != "nvml":
            return Part("contract", "skipped", "simulated GPUs: the contract suite's real half needs a real GPU")
        return contract_part(tools.tests_dir, out_dir, tools.python)

    for name, part in (
        ("nvidia_smi", lambda: smi_part(ours, out_dir)),
        ("catalog", lambda: catalog_part(ours)),
        ("gpm", lambda: gpm_part(ours)),
        ("mps", mps),
        ("contract", contract),
    ):
        try:
            parts.append(part())
        except (GpupoolError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
            parts.append(Part(name, "failed", f"{type(e).__name__}: {e}"))  # the report is still written
    return _report(head, parts, ours, started, True), exit_code(parts, True)


def _version() -> str:
    """The package version and, in a checkout, its commit (``git rev-parse HEAD``)."""
    from slurm_gpupool import __version__

    try:
        proc = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parents[2]), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__} ({proc.stdout.strip()})" if proc.returncode == 0 else __version__


def _report(
    head: dict[str, Any], parts: list[Part], ours: list[dict[str, Any]], started: float, read: bool
) -> dict[str, Any]:
    return {
        **head,
        "seconds": round(time.time() - started, 1),
        "exit_code": exit_code(parts, read),
        "parts": {p.name: p.to_json() for p in parts},
        "ours": ours,
    }


def _print(report: dict[str, Any]) -> None:
    print(f"gpu-check on {report['host']}: driver {report.get('driver', '?')}, {len(report['ours'])} GPUs")
    for name, p in report["parts"].items():
        print(f"[{p['status']}] {name}" + (f": {p['reason']}" if p["reason"] else ""))
        for f in p["findings"]:
            print("  " + Finding(**f).line())


USAGE = "usage: gpu-check OUTDIR   (writes OUTDIR/gpu-check.json)\n"


def main(argv: list[str] | None = None, tools: Tools | None = None) -> int:
    """``python -m slurm_gpupool.observe.gpucheck OUTDIR`` (what ``scripts/gpu-check`` runs)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write((__doc__ or "").strip() + "\n\n" + USAGE)
        return EXIT_OK
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write(USAGE)
        return EXIT_USAGE
    out_dir = Path(args[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    report, code = run_check(out_dir, tools or default_tools())
    path = out_dir / REPORT
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    _print(report)
    print(f"exit {code}; wrote {path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
