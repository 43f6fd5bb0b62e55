"""The shipped pool (5 nodes) on simulated GPUs behind the shipped fake Slurm, for the
repartitioner's unit tests: ``srun`` runs the real ``gpupool node apply`` in this process,
the restart commands act on the fake (``repartition/fakes.py``), time is a fake clock."""

from __future__ import annotations

import contextlib
import io
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from slurm_gpupool.config.load import load_config
from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.repartition.executor import Repartitioner
from slurm_gpupool.repartition.fakes import FakeRestarter
from slurm_gpupool.slurm.fake import FakeClock, FakeSlurm, Killed
from slurm_gpupool.slurm.runner import Result
from slurm_gpupool.slurm.types import JobInfo
from tests.unit.site import shipped_raw

START = 1_790_000_000.0  # 2026-09-21, a fixed moment: the runs' decisions do not depend on the day's time
_SRUN = threading.Lock()  # one apply at a time: each real srun is a process; here NVML's state is shared


@dataclass
class Site:
    cfg: PoolConfig
    slurm: FakeSlurm
    clock: FakeClock
    config_path: Path
    sim: Path


def make_site(tmp_path: Path, layout: str = "night", **extra) -> Site:
    """Every node in ``layout`` (GPUs, installed files, what Slurm shows); ``extra``: config sections."""
    from slurm_gpupool.cli.main import main
    from slurm_gpupool.config.machines import find_machine
    from slurm_gpupool.controller.gres_install import install, render
    from slurm_gpupool.hw.sim.state import create_node_state

    raw = shipped_raw(tmp_path)
    raw["slurm"] = {"config_dir": str(tmp_path / "etc"), "version": "22.05.8"}
    raw["repartition"] = {"verify_timeout": "10s", "deadline": "60s", "checkpoint_grace": "5s"}
    raw.update(extra)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    sim = tmp_path / "sim"
    for name, ns in ((n, cfg.nodeset_of(n)) for n in cfg.all_nodes()):
        create_node_state(sim / f"{name}.json", name, find_machine(ns.machine.name))
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["--node", name, "--sim-dir", str(sim), "--config", str(path), "node", "apply", layout]) == 0
    install(cfg, render(cfg, cfg.all_nodes(), None), backup=False)  # from the GPUs' states
    return _site(path)


def copy_site(template: Site, tmp_path: Path) -> Site:
    """A site as ``template`` was made, under ``tmp_path`` (a copy: applying a layout on
    simulated GPUs takes most of a second per site; a copy, milliseconds)."""
    src, dst = template.config_path.parent, tmp_path / "site"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        if p.is_file() and p.suffix in (".yaml", ".conf"):  # the files that name the site's directory
            p.write_text(p.read_text().replace(str(src), str(dst)))
    return _site(dst / template.config_path.name)


def _site(path: Path) -> Site:
    cfg = load_config(path)
    sim = path.parent / "sim"
    clock = FakeClock(START, limit_s=3600)  # no run here waits that long: one that does never ends
    slurm = FakeSlurm(cfg.all_nodes(), clock, in_process_srun(path, sim), cfg.slurm.path("nodes_include"))
    slurm.register_from_files(cfg.all_nodes())
    return Site(cfg, slurm, clock, path, sim)


def in_process_srun(config_path: Path, sim: Path):
    """``srun ... gpupool node apply LAYOUT --json`` on a node: the real command, in this process."""

    def srun(node: str, argv: Sequence[str]) -> Result:
        from slurm_gpupool.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        with _SRUN, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--node", node, "--sim-dir", str(sim), "--config", str(config_path), *argv[-4:]])
        return Result(tuple(argv), code, out.getvalue(), err.getvalue())

    return srun


class KillAt:
    """The journal's and the restarter's kill hook: "kill -9" right after ``point`` (a journaled
    step, or ``restart:K``/``others:K``).  A killed process does nothing more: once fired, every
    later call raises too (a parallel apply stops at its next step)."""

    def __init__(self, point: str, nth: int = 1) -> None:
        self.point, self.fired = point, False
        self.left = nth  # at the nth time the run reaches it (a second wave's step: 2)

    def __call__(self, step: str) -> None:
        if step == self.point:
            self.left -= 1
        if self.fired or self.left == 0:
            self.fired = True
            raise Killed(step)


def repartitioner(site: Site, cfg: PoolConfig | None = None, kill: KillAt | None = None) -> Repartitioner:
    """A fresh process's repartitioner: ``said`` keeps what it showed, ``restarter.log`` the commands."""
    cfg = cfg or site.cfg
    said: list[str] = []
    restarter = FakeRestarter(site.slurm, cfg.repartition, kill)
    rp = Repartitioner(cfg, site.slurm, restarter, progress=said.append, poll_s=0.05, clock=site.clock, kill=kill)
    rp.said = said  # type: ignore[attr-defined]
    return rp


def job(
    jid: int, node: str, state: str = "RUNNING", requeue: bool = False, limit_s: int = 600, start: int = 1, **kw
) -> JobInfo:
    return JobInfo(jid, state, frozenset({node} if node else ()), "alice", "j", limit_s, start, requeue, "", **kw)


def outcome(report, node: str) -> str:
    return report.every_node()[node]["outcome"]


def site_templates(tmp_path_factory) -> dict[str, Site]:
    """Every node night, and every node day (a module's fixture: each test works on a copy)."""
    return {layout: make_site(tmp_path_factory.mktemp(layout), layout) for layout in ("night", "day")}
