"""``scripts/gpu-check`` (``slurm_gpupool.observe.gpucheck``), the read-only check run on a lent
real GPU: its parsers on nvidia-smi's output forms; the whole check against the simulated GPUs,
with an ``nvidia-smi`` stand-in that prints what a real one would for them (built from the
simulation's own state, then altered to show that a difference is found and named), the
stand-in ``nvidia-cuda-mps-control`` and the simulated CUDA clients; that it calls no NVML
setter; and its contract-suite runner on a small suite of its own."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.mps_control import write_stand_in
from slurm_gpupool.hw.sim.state import SimStore
from slurm_gpupool.observe import gpucheck
from slurm_gpupool.observe.gpucheck import (
    SMI_FIELDS,
    ClientLayer,
    catalog_findings,
    compare,
    contract_part,
    main,
    parse_list,
    parse_query,
)
from tests.unit.test_hooks import NODE, site  # noqa: F401  (the fixture: an H100 node in its day layout)

LISTING = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5f2b3c4d-0000-1111-2222-333344445555)
  MIG 3g.20gb     Device  0: (UUID: MIG-aaaaaaaa-0000-1111-2222-333344445555)
  MIG 1g.5gb      Device  1: (UUID: MIG-bbbbbbbb-0000-1111-2222-333344445555)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-6f2b3c4d-0000-1111-2222-333344445555)
"""


def test_parse_list_keeps_each_gpus_mig_devices():
    assert parse_list(LISTING) == {
        "GPU-5f2b3c4d-0000-1111-2222-333344445555": [
            "MIG-aaaaaaaa-0000-1111-2222-333344445555",
            "MIG-bbbbbbbb-0000-1111-2222-333344445555",
        ],
        "GPU-6f2b3c4d-0000-1111-2222-333344445555": [],
    }


def test_parse_query_reads_csv_rows_and_refuses_a_short_one():
    row = "0, GPU-x, NVIDIA A30, 00000000:17:00.0, 24576, Disabled, Disabled, 31, [N/A]"
    (got,) = parse_query(row + "\n")
    assert (
        got["name"] == "NVIDIA A30"
        and got["memory.total"] == "24576"
        and got["ecc.errors.uncorrected.volatile.total"] == "[N/A]"
    )
    with pytest.raises(ValueError, match="fields"):
        parse_query("0, GPU-x\n")


def _smi_row(g: dict, memory_delta: int = 0) -> list[str]:
    """``nvidia-smi --query-gpu=<SMI_FIELDS>``'s values for one GPU of our view."""
    mode = {True: "Enabled", False: "Disabled"}
    return [
        str(g["index"]),
        g["uuid"],
        g["name"],
        g["pci_bus_id"],
        str(g["memory_mib"] + memory_delta),
        mode[bool(g["mig_current"])],
        mode[bool(g["mig_pending"])],
        str(g["temperature_c"]),
        "0",
    ]


def _fake_smi(bin_dir: Path, ours: list[dict], memory_delta: int = 0) -> None:
    """An ``nvidia-smi`` printing, for ``--query-gpu`` and ``-L``, what the real one prints for
    these GPUs."""
    query = [", ".join(_smi_row(g, memory_delta)) for g in ours]
    listing = []
    for g in ours:
        listing.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        for k, uuid in enumerate(g["mig_uuids"]):
            listing.append(f"  MIG {g['mig_profiles'][k]}     Device  {k}: (UUID: {uuid})")
    (bin_dir / "query.txt").write_text("\n".join(query) + "\n")
    (bin_dir / "list.txt").write_text("\n".join(listing) + "\n")
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-gpu=*) cat {bin_dir}/query.txt ;; -L) cat {bin_dir}/list.txt ;; '
        "-q) echo '==== NVSMI LOG ====' ;; *) exit 9 ;; esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def _ours(site_: dict) -> list[dict]:
    from slurm_gpupool.hw import open_backend
    from slurm_gpupool.observe.gpucheck import our_view

    with open_backend(NODE, site_["sim"]) as b:
        return our_view(b)


@pytest.fixture
def lent(site, tmp_path, monkeypatch):  # noqa: F811
    """The simulated node as a lent GPU machine: nvidia-smi and nvidia-cuda-mps-control on
    PATH, the simulation selected as the hooks select it."""
    ours = _ours(site)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_smi(bin_dir, ours)
    write_stand_in(str(bin_dir / "nvidia-cuda-mps-control"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_GPUPOOL_SIM_DIR", str(site["sim"]))
    monkeypatch.setenv("SLURMD_NODENAME", NODE)
    return {"ours": ours, "bin": bin_dir, "out": tmp_path / "out", "store": SimStore(site["sim"] / f"{NODE}.json")}


def _run(lent: dict, capsys) -> tuple[int, dict, str]:
    code = main([str(lent["out"])])
    report = json.loads((lent["out"] / "gpu-check.json").read_text())
    return code, report, capsys.readouterr().out


def test_on_the_simulated_gpus_every_part_agrees_and_the_report_says_so(lent, capsys):
    assert any(g["mig_uuids"] for g in lent["ours"])  # the day layout has MIG devices to compare
    code, report, out = _run(lent, capsys)
    assert code == 0, out
    parts = report["parts"]
    assert {n: p["status"] for n, p in parts.items()} == {
        "nvidia_smi": "ok",
        "catalog": "ok",
        "gpm": "ok",
        "mps": "ok",
        "contract": "skipped",
    }, out
    assert "real GPU" in parts["contract"]["reason"] and report["exit_code"] == 0 and len(report["ours"]) == 8
    assert report["version"].startswith("0.") and report["backend"] == "sim" and report["node"] == NODE
    assert (lent["out"] / "nvidia-smi-q.txt").read_text().startswith("==== NVSMI LOG")
    assert {f["what"] for f in parts["nvidia_smi"]["findings"]} >= {"UUID", "MIG device UUIDs (nvidia-smi -L)"}
    # the profile tables of the six MIG GPUs (the day layout) were read and compared, field by field
    profiles = [f for f in parts["catalog"]["findings"] if f["what"].startswith("MIG profile enum")]
    assert len({f["gpu"] for f in profiles}) == 6 and all(f["ok"] for f in profiles)
    assert parts["gpm"]["details"]["supported"] == {str(i): True for i in range(8)}  # Hopper
    # MPS on the first GPU not in MIG mode (6), in the hooks' layout, both clients limited
    mps = parts["mps"]
    assert mps["details"]["gpu"] == 6 and mps["details"]["pipe_dir"].endswith("/mps/" + lent["ours"][6]["uuid"])
    assert mps["details"]["client_env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1024M"
    steps = [c["steps"] for c in mps["details"]["clients"]]
    assert [(s["cuMemAlloc_over"], s["cuMemAlloc_under"]) for s in steps] == [
        ("CUDA_ERROR_OUT_OF_MEMORY", "CUDA_SUCCESS")
    ] * 2
    assert sorted(str(c["pid"]) for c in mps["details"]["clients"]) == mps["details"]["clients_listed"]
    assert not lent["store"].read().get("mps")  # the daemon is gone from the GPU's state
    assert not any(g["processes"] for g in lent["store"].read()["gpus"])  # and the clients
    (stopped,) = [f for f in mps["findings"] if f["what"].startswith("MPS daemon (pid")]
    assert stopped["ok"] and not gpucheck._process_running(mps["details"]["daemon_pid"])  # exited (maybe unreaped)


def test_a_difference_with_nvidia_smi_is_named_and_exits_1(lent, capsys):
    _fake_smi(lent["bin"], lent["ours"], memory_delta=-1024)  # a driver that reserves 1 GiB more
    code, report, out = _run(lent, capsys)
    assert code == 1 and report["parts"]["nvidia_smi"]["status"] == "diff"
    assert out.count("DIFF") == len(lent["ours"]) and "memory MiB" in out
    assert report["parts"]["catalog"]["status"] == "ok"  # the other parts are not blamed


def test_a_mig_device_nvidia_smi_does_not_list_is_a_difference(site):  # noqa: F811
    ours = _ours(site)
    query = [dict(zip(SMI_FIELDS, _smi_row(g), strict=True)) for g in ours]
    listing = {g["uuid"]: list(g["mig_uuids"]) for g in ours}
    assert all(f.ok for f in compare(ours, query, listing))
    gone = next(g for g in ours if g["mig_uuids"])
    listing[gone["uuid"]] = listing[gone["uuid"]][1:]
    bad = [f for f in compare(ours, query, listing) if not f.ok]
    assert [(f.gpu, f.what) for f in bad] == [(gone["index"], "MIG device UUIDs (nvidia-smi -L)")]


def test_a_catalog_profile_that_differs_from_the_gpus_is_named_by_field(site):  # noqa: F811
    g = next(g for g in _ours(site) if g["gi_profiles"])
    assert all(f.ok for f in catalog_findings(g))
    row = next(r for r in g["gi_profiles"] if r["name"] == "3g.40gb")
    row["sm_count"] += 2
    row["placements"] = row["placements"][:1]
    bad = [f for f in catalog_findings(g) if not f.ok]
    assert len(bad) == 1 and "3g.40gb" in bad[0].what and "sm_count, placements differ" in bad[0].what
    g["gi_profiles"] = [r for r in g["gi_profiles"] if r["name"] != "1g.10gb"]
    assert any(not f.ok and "1g.10gb" in f.what and f.reference is None for f in catalog_findings(g))


def test_mps_is_skipped_with_the_reason_and_nothing_is_changed(lent, capsys):
    for i in (6, 7):
        inject.set_compute_mode(lent["store"], i, 3)  # EXCLUSIVE_PROCESS, as a site may have set it
    code, report, out = _run(lent, capsys)
    mps = report["parts"]["mps"]
    assert code == 0 and mps["status"] == "skipped", out
    assert "GPU 0: in MIG mode" in mps["reason"] and "GPU 6: compute mode EXCLUSIVE_PROCESS" in mps["reason"]
    assert [g.get("compute_mode") for g in lent["store"].read()["gpus"]][6:] == [3, 3]

    inject.set_compute_mode(lent["store"], 7, 0)
    os.unlink(lent["bin"] / "nvidia-cuda-mps-control")
    code, report, _ = _run(lent, capsys)
    assert report["parts"]["mps"]["status"] == "skipped"
    assert "nvidia-cuda-mps-control is not on PATH" in report["parts"]["mps"]["reason"]


def test_mps_limits_that_do_not_hold_are_a_difference(lent, capsys, tmp_path):
    """A client layer whose over-limit allocation succeeds (MPS not reached, as on a
    pre-Volta GPU): the check must say so, not pass."""
    script = tmp_path / "client.py"
    script.write_text(
        "import json, os, sys\n"
        "print(json.dumps({'pid': os.getpid(), 'steps': {'cuInit': 'CUDA_SUCCESS',"
        " 'cuMemAlloc_over': 'CUDA_SUCCESS', 'cuMemAlloc_under': 'CUDA_SUCCESS'}}), flush=True)\n"
        "sys.stdin.read()\n"
    )
    tools = gpucheck.default_tools()
    tools.clients = lambda kind: ClientLayer([sys.executable, str(script)], lambda: None)
    code = main([str(lent["out"])], tools)
    mps = json.loads((lent["out"] / "gpu-check.json").read_text())["parts"]["mps"]
    assert code == 1 and mps["status"] == "diff", capsys.readouterr().out
    bad = {f["what"] for f in mps["findings"] if not f["ok"]}
    assert bad == {
        "client 1 is the daemon's client",
        "client 2 is the daemon's client",
        "client 1: 1536 MiB over the limit 0=1024M fails",
        "client 2: 1536 MiB over the limit 0=1024M fails",
    }
    assert not lent["store"].read().get("mps")  # the daemon was stopped all the same


SETTER = re.compile(r"nvml.*Set.*|.*Create.*|.*Destroy.*|.*Reset.*")


class SetterCalled(AssertionError):
    pass


def _guard_setters(monkeypatch) -> list[str]:
    """Every pynvml function whose name looks like a change raises and is recorded."""
    import pynvml

    called: list[str] = []
    names = [n for n in dir(pynvml) if n.startswith("nvml") and SETTER.fullmatch(n) and callable(getattr(pynvml, n))]
    assert {"nvmlDeviceSetMigMode", "nvmlDeviceSetComputeMode", "nvmlDeviceCreateGpuInstanceWithPlacement"} <= set(
        names
    ) and "nvmlDeviceResetGpuLockedClocks" in names

    def trap(name: str):
        def fn(*a, **k):
            called.append(name)
            raise SetterCalled(name)

        return fn

    for n in names:
        monkeypatch.setattr(pynvml, n, trap(n))
    return called


def test_the_whole_check_calls_no_nvml_setter(lent, capsys, monkeypatch):
    called = _guard_setters(monkeypatch)
    before = inject.call_counts(lent["store"])
    code, report, out = _run(lent, capsys)
    assert code == 0 and called == [], out
    assert inject.call_counts(lent["store"]) == before  # nor a state-changing call beneath pynvml
    assert {p["status"] for p in report["parts"].values()} == {"ok", "skipped"}


def test_the_setter_guard_catches_a_check_that_calls_one(lent, capsys, monkeypatch):
    """The guard above can fail: a check that sets the compute mode is caught."""
    import pynvml

    from slurm_gpupool.hw.nvml import NvmlBackend

    called = _guard_setters(monkeypatch)

    def compute_mode(self, index):
        pynvml.nvmlDeviceSetComputeMode(self._handle(index), 0)

    monkeypatch.setattr(NvmlBackend, "compute_mode", compute_mode)
    with pytest.raises(SetterCalled):
        main([str(lent["out"])])
    assert called == ["nvmlDeviceSetComputeMode"]


SUITE = """\
import os, pytest

def test_passes():
    assert "SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE" not in os.environ

def test_skips():
    pytest.skip("real NVML: no A100-SXM4-40GB GPU on this machine")

def test_fails():
    assert 1 == 2
"""


def test_the_contract_runner_reports_counts_failures_and_skip_reasons_without_the_destructive_flag(
    tmp_path, monkeypatch
):
    suite = tmp_path / "repo" / "tests" / "contract"
    suite.mkdir(parents=True)
    (suite / "test_small.py").write_text(SUITE)
    monkeypatch.setenv("SLURM_GPUPOOL_REAL_NVML_DESTRUCTIVE", "1")
    out = tmp_path / "out"
    out.mkdir()
    part = contract_part(suite, out, sys.executable, timeout_s=120)
    assert part.status == "failed" and part.reason.startswith("1 of 3 tests failed"), part
    d = part.details
    assert (d["tests"], d["failures"], d["skipped"]) == (3, 1, 1)
    assert len(d["failed"]) == 1 and d["failed"][0].endswith("test_small::test_fails")
    assert d["skip_reasons"] == {"real NVML: no A100-SXM4-40GB GPU on this machine": 1}
    assert (out / "contract-junit.xml").exists() and "test_fails" in (out / "contract-pytest.txt").read_text()

    (suite / "test_small.py").write_text(SUITE.replace("1 == 2", "2 == 2"))
    assert contract_part(suite, out, sys.executable, timeout_s=120).status == "ok"


def test_the_contract_part_is_skipped_without_pytest_or_a_checkout(tmp_path):
    no_pytest = tmp_path / "python"
    no_pytest.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 1\nexec python3 "$@"\n')
    no_pytest.chmod(no_pytest.stat().st_mode | stat.S_IEXEC)
    part = contract_part(tmp_path, tmp_path, str(no_pytest))
    assert part.status == "skipped" and "pytest is not importable" in part.reason
    part = contract_part(None, tmp_path, sys.executable)
    assert part.status == "skipped" and "checkout" in part.reason


def test_without_a_gpu_every_part_is_skipped_and_it_exits_69(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SLURM_GPUPOOL_SIM_DIR", raising=False)
    assert main([str(tmp_path / "out")]) == 69
    report = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert {p["status"] for p in report["parts"].values()} == {"skipped"}
    assert "no GPU could be read" in report["parts"]["mps"]["reason"]
    capsys.readouterr()


def test_usage():
    assert main([]) == 2 and main(["--json", "x"]) == 2 and main(["--help"]) == 0


def test_an_unexpected_nvml_error_costs_one_fact_not_the_report(lent, capsys):
    inject.add_fault(lent["store"], "nvmlDeviceGetComputeMode", 999, gpu=6)  # NVML_ERROR_UNKNOWN, once
    code, report, out = _run(lent, capsys)
    assert report["ours"][6]["compute_mode"] == {"error": "read the compute mode of GPU 6 on h1: Unknown Error"}
    mps = report["parts"]["mps"]
    assert code == 0 and mps["status"] == "ok" and mps["details"]["gpu"] == 7, out  # the next GPU was used
    assert mps["details"]["gpus_passed_over"][-1].startswith("GPU 6: compute mode not known")


FAKE_LIBCUDA = r"""
/* A stand-in libcuda.so.1 with the driver API calls hw/cuda_client.py makes: it checks the
   arguments arrive as the C prototypes say (cuda.h), logs each call, and refuses an
   allocation over CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<N>M") as MPS does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned long long CUdeviceptr;
static FILE *log_;
static unsigned long long limit_, used_;
static void say(const char *s, unsigned long long v) { fprintf(log_, "%s %llu\n", s, v); fflush(log_); }
int cuInit(unsigned int flags) {
    const char *l = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    log_ = fopen(getenv("FAKE_CUDA_LOG"), "a");
    if (l && strncmp(l, "0=", 2) == 0) limit_ = strtoull(l + 2, NULL, 10) << 20;
    say("cuInit", flags);
    return flags == 0 ? 0 : 1;
}
int cuDeviceGet(int *dev, int ordinal) { *dev = 7; say("cuDeviceGet", ordinal); return 0; }
int cuCtxCreate_v2(void **ctx, unsigned int flags, int dev) {
    say("cuCtxCreate_v2", dev); *ctx = (void *)0x1234; return dev == 7 ? 0 : 101;
}
int cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    say("cuMemAlloc_v2", bytes);
    if (limit_ && used_ + bytes > limit_) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    used_ += bytes; *p = 0x700000000000ULL + used_; return 0;
}
int cuMemFree_v2(CUdeviceptr p) { say("cuMemFree_v2", p); return 0; }
int cuCtxDestroy_v2(void *ctx) { say("cuCtxDestroy_v2", (unsigned long long)ctx); return 0; }
int cuGetErrorName(int e, const char **s) { *s = e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN"; return 0; }
"""


def test_the_ctypes_cuda_client_calls_the_driver_api_as_cuda_h_declares_it(tmp_path):
    """The real client against a compiled stand-in libcuda: the calls, their arguments, the
    over-limit allocation refused, the under-limit one freed when stdin closes."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    src = tmp_path / "fake.c"
    src.write_text(FAKE_LIBCUDA)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(src)], check=True, timeout=120)
    log = tmp_path / "calls.log"
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(tmp_path),
        "FAKE_CUDA_LOG": str(log),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.hw.cuda_client", "1536", "512"],
        input="",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = json.loads(proc.stdout)
    assert line["steps"] == {
        "cuInit": "CUDA_SUCCESS",
        "cuDeviceGet": "CUDA_SUCCESS",
        "cuCtxCreate": "CUDA_SUCCESS",
        "cuMemAlloc_over": "CUDA_ERROR_OUT_OF_MEMORY",
        "cuMemAlloc_under": "CUDA_SUCCESS",
    }  # printed while it holds its context; the frees follow when stdin closes (the log)
    assert log.read_text().splitlines() == [
        "cuInit 0",
        "cuDeviceGet 0",
        "cuCtxCreate_v2 7",
        f"cuMemAlloc_v2 {1536 << 20}",
        f"cuMemAlloc_v2 {512 << 20}",
        f"cuMemFree_v2 {0x700000000000 + (512 << 20)}",
        f"cuCtxDestroy_v2 {0x1234}",
    ]


def test_the_cuda_client_without_libcuda_says_so_and_exits_69(monkeypatch, capsys):
    from slurm_gpupool.hw import cuda_client

    monkeypatch.setattr(cuda_client, "LIBCUDA", "libcuda-not-here.so.1")
    assert cuda_client.main(["1536", "512"]) == 69
    assert "cannot load libcuda-not-here.so.1" in json.loads(capsys.readouterr().out)["error"]


def test_a_daemon_left_running_is_a_difference(lent, capsys, monkeypatch):
    import signal

    from slurm_gpupool.hooks import mps as hooks_mps

    monkeypatch.setattr(hooks_mps, "stop_daemon", lambda settings, env, pipes: None)
    code, report, out = _run(lent, capsys)
    mps = report["parts"]["mps"]
    pid = mps["details"]["daemon_pid"]
    try:
        assert code == 1 and mps["status"] == "diff", out
        assert [f["what"] for f in mps["findings"] if not f["ok"]] == [f"MPS daemon (pid {pid}) stopped (echo quit)"]
    finally:
        os.kill(pid, signal.SIGKILL)  # the stand-in daemon this test left running
