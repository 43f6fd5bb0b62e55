"""``scripts/gpu-check`` (``slurm_gpupool.hw.gpucheck``), the read-only check run on a lent
real GPU: its parsers on nvidia-smi's output forms, and the whole check against the
simulated GPUs with an ``nvidia-smi`` stand-in that prints what a real one would for them
(built here from the simulation's own state file, then altered to show that a difference is
found and named)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from slurm_gpupool.hw.gpucheck import SMI_FIELDS, compare, main, parse_list, parse_query
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
    from slurm_gpupool.hw.gpucheck import our_view

    with open_backend(NODE, site_["sim"]) as b:
        return our_view(b)


def test_on_the_simulated_gpus_every_field_agrees_with_nvidia_smis_and_a_difference_is_named(
    site,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    ours = _ours(site)
    assert any(g["mig_uuids"] for g in ours)  # the day layout has MIG devices to compare
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_smi(bin_dir, ours)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_GPUPOOL_SIM_DIR", str(site["sim"]))
    monkeypatch.setenv("SLURMD_NODENAME", NODE)
    report = tmp_path / "report.json"
    assert main(["--json", str(report)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "DIFF" not in out and "0 differ" in out
    kept = json.loads(report.read_text())
    assert kept["nvidia_smi"]["q"].startswith("==== NVSMI LOG") and len(kept["ours"]) == 8
    assert {f["what"] for f in kept["findings"]} >= {
        "UUID",
        "MIG device UUIDs (nvidia-smi -L)",
        "MIG state as the hooks read it",
    }

    _fake_smi(bin_dir, ours, memory_delta=-1024)  # a driver that reserves 1 GiB more
    assert main([]) == 1
    out = capsys.readouterr().out
    assert out.count("DIFF") == len(ours) and "memory MiB" in out and f"{len(ours)} differ" in out


def test_a_mig_device_nvidia_smi_does_not_list_is_a_difference(site):  # noqa: F811
    ours = _ours(site)
    query = [dict(zip(SMI_FIELDS, _smi_row(g), strict=True)) for g in ours]
    listing = {g["uuid"]: list(g["mig_uuids"]) for g in ours}
    assert all(f.ok for f in compare(ours, query, listing))
    gone = next(g for g in ours if g["mig_uuids"])
    listing[gone["uuid"]] = listing[gone["uuid"]][1:]
    bad = [f for f in compare(ours, query, listing) if not f.ok]
    assert [(f.gpu, f.what) for f in bad] == [(gone["index"], "MIG device UUIDs (nvidia-smi -L)")]


def test_without_nvidia_smi_it_says_so_and_exits_69(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main([]) == 69
    assert "nvidia-smi is not on PATH" in capsys.readouterr().err
