"""The fault injection the real-Slurm crash tests drive (``$SLURM_GPUPOOL_FAULT_AT``): one
point, several, or every point of a run, each point's command once, told which point it is."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slurm_gpupool.repartition import journal
from slurm_gpupool.repartition.journal import fault_due, kill_point


def test_a_point_is_due_once_when_named_or_when_every_point_is():
    assert fault_due("drained", "drained", [])
    assert not fault_due("drained", "drained", ["drained"])
    assert not fault_due("drained", "reserved", [])
    assert fault_due("reserved, restart:1", "restart:1", ["reserved"])
    assert fault_due("*", "others:0", ["reserved", "drained"])
    assert not fault_due("*", "drained", ["reserved", "drained"])
    assert not fault_due("", "drained", [])


def test_every_named_point_runs_the_command_once_with_its_name(tmp_path: Path, monkeypatch):
    seen = tmp_path / "seen"
    script = "import os, sys\nopen(sys.argv[1], 'a').write(os.environ['SLURM_GPUPOOL_FAULT_POINT'] + '\\n')\n"
    monkeypatch.setenv(journal.FAULT_AT_ENV, "*")
    monkeypatch.setenv(journal.FAULT_CMD_ENV, json.dumps([sys.executable, "-c", script, str(seen)]))
    monkeypatch.setattr(journal, "_faulted", [])
    for step in ["reserved", "drained", "applying", "applying", "restart:0", "drained"]:
        kill_point(step)
    assert seen.read_text().split() == ["reserved", "drained", "applying", "restart:0"]


@pytest.mark.parametrize("spec", ["restart:0", "restart:0,done"])
def test_points_not_named_run_nothing(tmp_path: Path, monkeypatch, spec: str):
    seen = tmp_path / "seen"
    monkeypatch.setenv(journal.FAULT_AT_ENV, spec)
    monkeypatch.setenv(
        journal.FAULT_CMD_ENV, json.dumps([sys.executable, "-c", "open(__import__('sys').argv[1], 'a')", str(seen)])
    )
    monkeypatch.setattr(journal, "_faulted", [])
    kill_point("reserved")
    assert not seen.exists()
    kill_point("restart:0")
    assert seen.exists()
