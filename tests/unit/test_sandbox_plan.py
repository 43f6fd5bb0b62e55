"""The sandbox's pure planning: node maps, stable addresses, config rendering."""

from __future__ import annotations

import os
import stat

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.errors import ConfigError, UsageError
from slurm_gpupool.sandbox.cluster import Sandbox, default_config_path
from slurm_gpupool.sandbox.devices import device_plan, mig_minors_text
from slurm_gpupool.sandbox.plan import (
    Ports,
    assign_slots,
    env_lines,
    node_address,
    plan_nodes,
    validate_node_map,
)
from slurm_gpupool.sandbox.poolconfig import node_map
from slurm_gpupool.slurm.versions import preempt_user_signal_setting

DEFAULT_NODES = node_map(load_config(default_config_path()))


def test_validate_node_map_checks_names_and_machines():
    assert validate_node_map({"x1": "pcie-a30"})["x1"].name == "pcie-a30"
    with pytest.raises(UsageError):
        validate_node_map({"Bad_Name": "pcie-a30"})
    with pytest.raises(ConfigError):
        validate_node_map({"x1": "no-such-machine"})


def test_slots_are_stable_when_nodes_come_and_go():
    first = assign_slots(["a", "b", "c"])
    assert first == {"a": 0, "b": 1, "c": 2}
    assert assign_slots(["c", "d"], first) == {"c": 2, "d": 0}
    assert node_address(2, Ports(16800)) == ("127.0.0.4", 16902)


def test_default_nodes_come_from_the_shipped_config():
    assert DEFAULT_NODES == {
        "a100n1": "dgx-a100",
        "a100n2": "dgx-a100",
        "a30n1": "pcie-a30",
        "h100n1": "hgx-h100",
        "v100n1": "dgx1-v100",
    }
    plans = plan_nodes(validate_node_map(DEFAULT_NODES), assign_slots(DEFAULT_NODES), Ports())
    assert len({p.port for p in plans}) == len({p.addr for p in plans}) == len(plans)


def test_device_plan_has_every_mig_cap():
    plan = device_plan([0, 1])
    caps = [k for k in plan if k.startswith("nvidia-caps/")]
    assert len(caps) == 2 + 2 * 15 * 9
    assert plan["nvidia1"] == (195, 1) and plan["nvidiactl"] == (195, 255)
    assert mig_minors_text().startswith("config 1\nmonitor 2\ngpu0/gi0/access 3\n")


def test_configs_come_from_gres_install(tmp_path):
    cfg = tmp_path / "pool.yaml"
    cfg.write_text(
        "version: 1\n"
        "nodesets: {a30: {nodes: a30n1, machine: pcie-a30}}\n"
        "layouts:\n"
        "  night: {a30: {all: whole}}\n"
        "  day: {a30: {0-1: {mig: {1g.6gb: 4}}, 2-3: {shared: 4}}}\n"
        "schedule: {default: night}\n"
    )
    sb = Sandbox(tmp_path / "sb", config=cfg)
    sb._decide_state()
    plans = sb._plans()
    for d in (sb.paths.etc, sb.paths.sim):
        d.mkdir(parents=True, exist_ok=True)
    sb._prepare_nodes(plans)
    changed = sb._write_configs(plans)
    names = {p.name for p in changed}
    assert {"slurm.conf", "slurmdbd.conf", "nodes.conf", "gres.conf", "gres-types.conf", "gpupool.yaml"} <= names
    conf = sb.paths.slurm_conf.read_text()
    assert f"Include {sb.paths.nodes_conf}\n" in conf and f"Include {sb.paths.gres_types_conf}\n" in conf
    assert "SlurmdParameters=config_overrides\n" in conf
    assert preempt_user_signal_setting(sb._slurm_version()) + "\n" in conf  # named as this release names it
    nodes = sb.paths.nodes_conf.read_text()
    assert (
        "NodeName=a30n1 Sockets=2 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=489250 NodeAddr=127.0.0.2 Port=16900"
        in nodes
    )
    assert "Gres=gpu:a30:4 Features=a30,pcie-a30,pcie,layout_night" in nodes
    gres = sb.paths.gres_conf.read_text().splitlines()
    assert gres[-1] == f"NodeName=a30n1 Name=gpu Type=a30 File={sb.paths.nodes}/a30n1/dev/nvidia3 Cores=16-31"
    types = sb.paths.gres_types_conf.read_text()
    assert (
        "AccountingStorageTRES=gres/gpu,gres/gpu:1g.6gb,gres/gpu:a30,gres/gpu:a30_shared,gres/shard" in types
    )  # every layout's types
    assert oct(sb.paths.slurmdbd_conf.stat().st_mode & 0o777) == "0o600"
    assert sb._write_configs(plans) == set()  # idempotent
    derived = load_config(sb.paths.pool_config)
    assert derived.paths.for_node("state_dir", "a30n1") == sb.paths.nodes / "a30n1" / "state"
    assert (derived.paths.for_node("state_dir", "a30n1") / "node-state.json").exists()  # initial layout applied
    assert env_lines({"A": "x y"}) == "export A='x y'\n"


def test_purge_retries_while_a_leftover_process_writes_and_then_says_so(tmp_path, monkeypatch):
    """`sandbox down --purge` right after `down` met a directory that a job step outliving its
    slurmd was still writing to: rmtree failed ("Directory not empty") with a traceback."""
    import errno
    import shutil

    from slurm_gpupool.errors import BusyError
    from slurm_gpupool.sandbox import teardown

    root = tmp_path / "sb"
    root.mkdir()
    (root / "sandbox.json").write_text("{}")
    real = shutil.rmtree
    failures = [OSError(errno.ENOTEMPTY, "Directory not empty", str(root / "spool"))] * 2
    monkeypatch.setattr(teardown.time, "sleep", lambda s: None)

    def flaky(path, *a, **kw):
        if failures:
            raise failures.pop()
        real(path, *a, **kw)

    monkeypatch.setattr(teardown.shutil, "rmtree", flaky)
    Sandbox(root, config=default_config_path())._purge()
    assert not root.exists()

    root.mkdir()
    (root / "sandbox.json").write_text("{}")
    failures.extend([OSError(errno.ENOTEMPTY, "Directory not empty", str(root / "spool"))] * 5)
    with pytest.raises(BusyError) as e:
        Sandbox(root, config=default_config_path())._purge()
    assert e.value.exit_code == 75 and "Directory not empty" in str(e.value)


def test_the_sandboxs_reports_read_its_nodes_spools_not_the_sites_collected_ones(tmp_path):
    """A site config with ``reports.spool_dirs`` (its collected spools) made the sandbox's
    ``gpupool report efficiency`` read those, never the records its own hooks wrote under the
    root: every sandbox job showed unmeasured (#30)."""
    import json
    from pathlib import Path

    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.reports.usage_spool import read_records, spool_dirs
    from slurm_gpupool.sandbox.poolconfig import sandbox_config
    from tests.unit.test_hooks import CONFIG, NODE

    site = {**CONFIG, "reports": {"spool_dirs": [str(tmp_path / "site-spools")], "currency": "CHF"}}
    raw = sandbox_config(parse_config(site, "t.yaml", Path(".")), tmp_path, {NODE: ("127.0.0.2", 6818)})
    cfg = parse_config(raw, "sandbox.yaml", tmp_path)
    assert spool_dirs(cfg) == [tmp_path / "nodes" / NODE / "spool"] and cfg.reports.currency == "CHF"
    jobs = tmp_path / "nodes" / NODE / "spool" / "jobs"  # where the Epilog writes on the sandbox
    jobs.mkdir(parents=True)
    usage = {"peak_memory_mib": 4000, "memory_total_mib": 40192, "mean_sm_activity_pct": 20.0}
    (jobs / "7.json").write_text(json.dumps({"job_id": 7, "node": NODE, "start_time": 1.0, "usage": [usage]}))
    records, bad = read_records(spool_dirs(cfg))
    assert bad == 0 and records.set_index("job_id").loc["7", ["peak_mem_mib", "sm_activity_pct"]].tolist() == [4000, 20]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_char_devices_are_made_once_and_a_broken_one_is_made_again(tmp_path):
    """A full check leaves its stamp; the next call trusts it only while every planned name is
    still a special file: a cap replaced by a regular file, or removed, is made again."""
    from slurm_gpupool.sandbox.devices import ensure_char_devices

    plan = device_plan([0])
    assert ensure_char_devices(tmp_path, plan) == len(plan)
    assert ensure_char_devices(tmp_path, plan) == 0
    cap = tmp_path / next(
        rel for rel in plan if rel.startswith("nvidia-caps/nvidia-cap") and rel != "nvidia-caps/nvidia-cap1"
    )
    cap.unlink()
    cap.write_text("")  # a regular file where a device goes
    (tmp_path / "nvidia0").unlink()
    assert ensure_char_devices(tmp_path, plan) == 2
    assert stat.S_ISCHR(os.lstat(cap).st_mode) and stat.S_ISCHR(os.lstat(tmp_path / "nvidia0").st_mode)
    assert ensure_char_devices(tmp_path, plan) == 0
    assert ensure_char_devices(tmp_path, device_plan([0, 1])) > 0  # another plan: checked in full


def test_up_asks_a_running_daemon_again_before_it_restarts_it_as_hung(tmp_path, monkeypatch):
    """`sandbox up` restarted a slurmctld that was only busy: one `scontrol ping` (5 s) it
    missed on a loaded machine made it "hung" (a reading of CI's tests under load).  A running
    daemon is asked again for ANSWER_GRACE_S: one that answers late is kept, one that never
    does is restarted (`DaemonControl.ensure`, on a clock where each probe takes 5 s)."""
    import functools

    from slurm_gpupool.sandbox import lifecycle
    from slurm_gpupool.sandbox.daemons import DaemonSpec
    from slurm_gpupool.sandbox.lifecycle import ANSWER_GRACE_S, DaemonControl, UpReport
    from slurm_gpupool.sandbox.paths import SandboxPaths

    now = [0.0]
    clock, sleep = (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s + 5.0))
    monkeypatch.setattr(
        lifecycle, "answers_within", functools.partial(lifecycle.answers_within, clock=clock, sleep=sleep)
    )
    monkeypatch.setattr(lifecycle.procs, "wait_until", lambda *a, **kw: None)
    ctl = DaemonControl(SandboxPaths(tmp_path), dict, lambda line: None)
    restarts: list[str] = []
    monkeypatch.setattr(ctl, "pid_of", lambda spec: 4242)
    monkeypatch.setattr(ctl, "stop", lambda spec, timeout_s=20: restarts.append(f"stop {spec.name}") or True)
    monkeypatch.setattr(ctl, "start", lambda spec: restarts.append(f"start {spec.name}") or 4343)
    spec = DaemonSpec("slurmctld", "slurmctld", ["slurmctld", "-D"], ())

    late = iter([False, False, False, True])
    report = UpReport(str(tmp_path))
    assert ctl.ensure(spec, set(), set(), report, lambda: True, 60, healthy=lambda: next(late)) is False
    assert report.running == ["slurmctld"] and report.restarted == [] and restarts == []
    assert now[0] == 18.0  # three missed probes, then the answer

    now[0] = 0.0
    asked: list[float] = []
    report = UpReport(str(tmp_path))
    hung = lambda: asked.append(now[0]) or False  # noqa: E731
    assert ctl.ensure(spec, set(), set(), report, lambda: True, 60, healthy=hung) is True
    assert report.restarted == ["slurmctld"] and restarts == ["stop slurmctld", "start slurmctld"]
    assert asked[-1] >= ANSWER_GRACE_S and len(asked) == 6  # asked until the grace was over, then restarted
