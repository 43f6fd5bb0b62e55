"""The scale benchmark's reading of the repartitioner's journal (benchmarks/bench_sandbox_scale.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.bench_sandbox_scale import journal_phases, journal_waves


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


def test_each_wave_has_its_own_phases_from_the_journals_lines(tmp_path: Path):
    """In waves (repartition.wave_size) each wave logs its install, restart and verify again;
    the benchmark reads each wave's own (the nodes it applied, to the last it released), not
    one set spanning the run, which hid that a wave of 16 verifies in 3 s (#29)."""
    t0 = 1795946400.0
    log = [{"run": "start", "epoch": t0}, {"cluster": "reserved", "epoch": t0 + 1}]
    for k, (first, nodes) in enumerate(((2.0, ("a", "b")), (30.0, ("c",))), 1):
        log += [{"node": n, "step": "applying", "applying_at": t0 + first + i} for i, n in enumerate(nodes)]
        log += [{"cluster": "gres_installing", "wave": k, "epoch": t0 + first + 6}]
        log += [{"cluster": "gres_installed", "wave": k, "epoch": t0 + first + 6.5}]
        log += [{"cluster": "restarting", "wave": k, "epoch": t0 + first + 7}]
        log += [{"cluster": "restarted", "wave": k, "epoch": t0 + first + 16}]
        log += [{"node": n, "step": "done", "released_at": t0 + first + 18 + k} for n in nodes]
        log += [{"cluster": "clear", "steps": ["gres_installing", "gres_installed", "restarting", "restarted"]}]
    (tmp_path / "journal.log").write_text("".join(json.dumps(x) + "\n" for x in log))
    first, second = journal_waves(tmp_path)
    assert (first.nodes, second.nodes) == (2, 1)
    assert first.apply == 6 and second.apply == 6  # each wave's first apply to its own install
    assert first.install == 0.5 and first.restart == 9 and second.restart == 9
    assert first.verify == 3 and second.verify == 4  # restarted to the wave's last release
    assert first.length == 21 - 1 and second.length == 50 - 21  # the reservation, then the previous wave's end


def test_a_run_in_waves_logs_each_waves_steps_and_the_benchmark_splits_them(tmp_path: Path):
    """The repartitioner's own journal (the tests' fake Slurm, 8 nodes in waves of 3): every
    cluster line names its wave and carries a millisecond ``epoch``, and the benchmark finds
    three waves of 3, 3 and 2 nodes."""
    from slurm_gpupool.sandbox.scale import scale_config
    from tests.unit.repartition_site import make_site, repartitioner

    raw = scale_config(8)
    extra = {k: raw[k] for k in ("nodesets", "layouts", "schedule")}
    repartition = {"verify_timeout": "10s", "deadline": "60s", "checkpoint_grace": "5s", "wave_size": 3}
    site = make_site(tmp_path, "day", repartition=repartition, **extra)
    report = repartitioner(site).run("night").to_dict()
    assert {v["outcome"] for v in report["nodes"].values()} == {"done"} and report["waves"] == 3
    ctl = Path(site.cfg.paths.controller_dir)
    lines = [json.loads(x) for x in (ctl / "journal.log").read_text().splitlines()]
    assert all(isinstance(x["epoch"], float) for x in lines)
    restarts = [x["wave"] for x in lines if x.get("cluster") == "restarted"]
    assert restarts == [1, 2, 3]
    waves = journal_waves(ctl)
    assert [w.nodes for w in waves] == [3, 3, 2]
    assert all(w.restart >= 0 and w.verify >= 0 and w.length > 0 for w in waves)
