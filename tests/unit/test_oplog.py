"""The repartitioner, `gres install` and `node apply` log their steps to syslog, as the hooks do
(facility daemon, ident ``gpupool-<what>``, the pid): captured here at the syslog call."""

from __future__ import annotations

import syslog
from pathlib import Path

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.controller.gres_install import install, render
from slurm_gpupool.controller.support_files import install_support_files
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.state import SimStore, create_node_state
from slurm_gpupool.node.apply import apply_node
from slurm_gpupool.util import oplog

from .repartition_site import repartitioner
from .test_node_apply import CONFIG
from .test_switch_rules import site  # noqa: F401  (the fixture, by name)


@pytest.fixture
def records(monkeypatch) -> list[tuple[str, int, str]]:
    """(ident, priority, message) of every syslog line, in order."""
    out: list[tuple[str, int, str]] = []
    ident = {"now": ""}

    def openlog(name: str, option: int = 0, facility: int = 0) -> None:
        assert option == syslog.LOG_PID and facility == syslog.LOG_DAEMON  # as the hooks open it
        ident["now"] = name

    monkeypatch.setattr(syslog, "openlog", openlog)
    monkeypatch.setattr(syslog, "syslog", lambda priority, text: out.append((ident["now"], priority, text)))
    return out


def lines(records, ident: str) -> list[str]:
    return [text for who, _, text in records if who == ident]


def test_node_apply_logs_each_gpu_it_changes_and_the_outcome(tmp_path: Path, records):
    sim, state = tmp_path / "sim", tmp_path / "state"
    create_node_state(sim / "dgx1.json", "dgx1", find_machine("dgx-a100"))
    cfg = parse_config(CONFIG, "test.yaml", Path("."))
    with open_backend("dgx1", sim) as b:
        apply_node(b, cfg, "day", state)
    said = lines(records, "gpupool-node-apply")
    assert said[0] == "node dgx1: applying layout day"
    assert (
        said[1].startswith("node dgx1: GPU 0: whole (MIG off) -> mig {1g.5gb: 7}: ")
        and "nvmlDeviceSetMigMode" in said[1]
    )
    assert said.count("node dgx1: GPU 5: changed") == 1 and not any("GPU 6:" in s for s in said)  # 6-7 stay whole
    assert said[-1] == "node dgx1: layout day: ok, 6 of 8 GPUs changed"
    # a failure midway: the rolled-back GPU is an error line, with why
    records.clear()
    inject.add_fault(SimStore(sim / "dgx1.json"), "nvmlGpuInstanceDestroy", 999, gpu=5, after=1)
    with open_backend("dgx1", sim) as b:
        apply_node(b, cfg, "night", state)
    errors = [text for who, p, text in records if who == "gpupool-node-apply" and p == syslog.LOG_ERR]
    assert errors[0].startswith("node dgx1: GPU 5: rolled-back: ")
    assert errors[-1].startswith("node dgx1: layout night: rolled-back, 6 of 8 GPUs changed (apply night failed")


def test_gres_install_logs_the_files_it_writes_and_the_restarts_needed(tmp_path: Path, records):
    raw = {**CONFIG, "slurm": {"config_dir": str(tmp_path), "version": "22.05.8"}}
    cfg = parse_config(raw, "t.yaml", Path("."))
    install(cfg, render(cfg, cfg.all_nodes(), "night"))
    install_support_files(cfg, "night")
    said = lines(records, "gpupool-gres-install")
    assert f"installed {tmp_path / 'gres.conf'}" in said and f"installed {tmp_path / 'gpupool-hooks.json'}" in said
    assert any(s.startswith("GRES for layout night: GRES changed on dgx1,hgx1: drain them") for s in said), said
    records.clear()
    install(cfg, render(cfg, cfg.all_nodes(), "night"))  # the same again: nothing written, nothing to restart
    install_support_files(cfg, "night")
    assert lines(records, "gpupool-gres-install") == ["GRES for layout night: no Slurm change: nothing to restart"]


def test_the_repartitioner_logs_its_progress_and_every_journaled_step(site, records):  # noqa: F811
    rp = repartitioner(site)
    report = rp.run("day")
    assert report.exit_code == 0
    said = lines(records, "gpupool-repartition")
    assert [s for s in said if not s.startswith("journal: ")] == rp.said  # what it showed, word for word
    journal = [s for s in said if s.startswith("journal: ")]
    assert any('"run": "start"' in s and '"target": "day"' in s for s in journal)
    for node in ("a100n1", "v100n1"):
        steps = [s for s in journal if f'"node": "{node}"' in s]
        assert ['"step": "applying"' in s for s in steps].count(True) == 1
        assert '"step": "done"' in steps[-1]
    assert '"cluster": "finished"' in journal[-1]
    # gres install and node apply ran inside the switch: they logged under their own names
    assert lines(records, "gpupool-gres-install") and lines(records, "gpupool-node-apply")


def test_logging_never_fails_the_operation(monkeypatch):
    def broken(*_a) -> None:
        raise OSError("no syslog socket")

    monkeypatch.setattr(syslog, "openlog", broken)
    oplog.log("repartition", "still fine")  # no exception
    seen: list[str] = []
    oplog.tee("repartition", seen.append)("a  long\nmessage")
    assert seen == ["a  long\nmessage"]
