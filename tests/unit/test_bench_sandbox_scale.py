"""The scale benchmark's reading of the repartitioner's journal (benchmarks/bench_sandbox_scale.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.bench_sandbox_scale import journal_phases


def at(t: int) -> str:
    return f"2026-11-29T10:{t // 60:02d}:{t % 60:02d}+0000"


def test_phases_count_only_the_last_runs_nodes(tmp_path: Path):
    """After a switch of every node, an elastic step switches two of them: its apply phase and
    its last release are those two nodes', not the stamps the others kept from the first run
    (which made a step of 8 nodes look 33 s long where it took 13)."""
    epoch = 1795946400  # 2026-11-29T10:00:00Z
    steps = ("reserved", "gres_installing", "gres_installed", "restarting", "restarted", "finished")
    log = [{"run": "start", "at": at(0)}, *({"cluster": s, "at": at(10 + i)} for i, s in enumerate(steps))]
    log += [{"run": "start", "at": at(100)}, *({"cluster": s, "at": at(120 + 5 * i)} for i, s in enumerate(steps))]
    (tmp_path / "journal.log").write_text("".join(json.dumps(x) + "\n" for x in log))
    nodes = {f"n{i}": {"step": "done", "applying_at": epoch + 2, "released_at": epoch + 16} for i in range(6)}
    for n in ("n1", "n4"):  # the step's two nodes: applied from 102, released at 150
        nodes[n] = {"step": "done", "applying_at": epoch + 102, "released_at": epoch + 150}
    (tmp_path / "journal.json").write_text(json.dumps({"run": {"nodes": ["n1", "n4"]}, "nodes": nodes}))
    phases = journal_phases(tmp_path)
    assert phases["apply"] == 125 - 102  # gres_installing at 10:02:05 (120 + 5), from the first apply
    assert phases["switched"] == 50  # run start (100) to the last of its nodes released (150)
    assert phases["verify"] == 150 - 140  # restarted at 10:02:20 (120 + 20)
