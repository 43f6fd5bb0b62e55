"""Repartitioner pieces that need no Slurm: planning, batching, timing model, journal, lock,
restart commands, schedule files, status, config validation."""

from __future__ import annotations

import copy
import json
import multiprocessing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.config.model import RepartitionSettings
from slurm_gpupool.controller.schedule_install import install_schedule, on_calendar, parse_env, render_schedule
from slurm_gpupool.core.policy.switch_plan import CHANGE, KEEP, SKIP, NodeView, Timings, batches, estimate_switch_s
from slurm_gpupool.core.policy.switch_plan import plan_switch as plan
from slurm_gpupool.errors import BusyError, ConfigError, StateError, UsageError
from slurm_gpupool.observe.status import pool_status
from slurm_gpupool.repartition import journal as jr
from slurm_gpupool.repartition.executor import restored_gres
from slurm_gpupool.repartition.journal import Journal, run_lock
from slurm_gpupool.repartition.restarts import CommandResult, Restarter
from slurm_gpupool.slurm.types import NodeInfo, Reservation

TOP = Path(__file__).resolve().parents[2]
EXAMPLE = TOP / "etc" / "gpupool.yaml"


def test_plan_changes_only_what_differs_and_skips_what_it_cannot_reach():
    views = {
        "a": NodeView("a", "night"),
        "b": NodeView("b", "day"),
        "c": NodeView("c", None),
        "d": NodeView("d", "night", usable=False, state="down"),
        "e": NodeView("e", "day"),
    }
    p = plan("day", ["a", "b", "c", "d", "e", "ghost"], views, unfinished=["e"])
    got = {d.name: d.action for d in p.decisions}
    assert got == {"a": CHANGE, "b": KEEP, "c": CHANGE, "d": SKIP, "e": CHANGE, "ghost": SKIP}
    assert p.changing == ["a", "c", "e"]
    assert "earlier run" in next(d.why for d in p.decisions if d.name == "e")
    assert plan("day", ["a", "b"], views, requested=["b"]).nodes(KEEP) == ["b"]
    assert plan("day", ["a", "b"], views, force=True).changing == ["a", "b"]


def test_batches_and_the_timing_model():
    assert batches(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    t = Timings(
        reserve_s=0.5, apply_s=2.0, install_s=1.0, ctld_restart_s=3.0, slurmd_stop_s=0.5, slurmd_start_s=2.0, verify_s=2
    )
    small = estimate_switch_s(4, parallel=16, restart_batch=64, t=t)
    assert small["apply_batches"] == 1 and small["restart_batches"] == 1
    assert small["total_s"] == pytest.approx(0.5 + 2.0 + 1.0 + 0.5 + 3.0 + 2.0 + 2)
    big = estimate_switch_s(1000, parallel=64, restart_batch=128, t=t)
    assert big["apply_batches"] == 16 and big["restart_batches"] == 8
    assert big["restart_s"] == pytest.approx(8 * 0.5 + 3.0 + 8 * 2.0)
    assert big["worst_node_unavailable_s"] < big["total_s"]
    # waves of 64 (repartition.wave_size): 16 restarts of slurmctld, each node out for its own
    waved = estimate_switch_s(1000, parallel=64, restart_batch=128, t=t, wave_size=64)
    assert waved["waves"] == 16 and waved["apply_batches"] == 16 and waved["restart_batches"] == 16
    per_wave = 2.0 + 1.0 + (0.5 + 3.0 + 2.0) + 2
    assert waved["node_out_of_service_s"] == pytest.approx(per_wave)  # drained: its own wave
    assert waved["total_s"] == pytest.approx(0.5 + 16 * per_wave)
    # reserved until its wave is through: the last wave's nodes for the whole switch
    assert waved["worst_node_unavailable_s"] == pytest.approx(16 * per_wave)
    # 15 waves of 64 and a last one of 40: a node's mean wait to its wave's end
    assert waved["mean_node_unavailable_s"] == pytest.approx((64 * sum(range(1, 16)) + 40 * 16) / 1000 * per_wave)
    # a smaller last wave costs less: 100 nodes in waves of 64 with parallel 16 apply 4 + 3 batches
    part = estimate_switch_s(100, parallel=16, restart_batch=128, t=t, wave_size=64)
    assert part["apply_batches"] == 4 + 3 and part["apply_s"] == pytest.approx(7 * 2.0)
    assert part["total_s"] == pytest.approx(0.5 + 2 * (1.0 + 0.5 + 3.0 + 2.0 + 2) + 7 * 2.0)
    assert estimate_switch_s(0, 16, 64, t)["mean_node_unavailable_s"] == 0
    assert big["waves"] == 1 and waved["total_s"] > big["total_s"]
    assert big["node_out_of_service_s"] == big["worst_node_unavailable_s"] == big["mean_node_unavailable_s"]
    assert waved["node_out_of_service_s"] < big["node_out_of_service_s"]


def test_journal_records_steps_and_survives_a_reload(tmp_path: Path):
    j = Journal(tmp_path)
    j.start("day", ["n1", "n2"], "gpupool_day", 1e12, {"n1": "night", "n2": None})
    j.step("n1", jr.APPLYING)
    j.step("n1", jr.DRAINED, drained_by_us=True)
    j.cluster_step(jr.GRES_INSTALLED, restart_nodes=["n1"])
    again = Journal(tmp_path).load()
    assert again.unfinished() is not None and again.run["target"] == "day"
    assert again.node("n1")["step"] == jr.DRAINED and again.node("n1")["previous"] == "night"
    assert again.has(jr.GRES_INSTALLED) and not again.has(jr.RESTARTED)
    assert again.nodes_at(jr.WAITING) == ["n2"]
    # a new run to another layout keeps what the midway node had before the first run
    again.start("night", ["n1"], "gpupool_night", 1e12, {"n1": "day"}, ["gpupool_day"])
    assert again.node("n1")["previous"] == "night" and again.node("n1")["drained_by_us"]
    assert again.run["stale_reservations"] == ["gpupool_day"]
    again.cluster_step(jr.FINISHED)
    assert Journal(tmp_path).load().unfinished() is None
    lines = [json.loads(x) for x in (tmp_path / "journal.log").read_text().splitlines()]
    assert [x.get("step") for x in lines if x.get("node") == "n1"] == [jr.APPLYING, jr.DRAINED]


def test_a_corrupt_journal_is_a_clear_error(tmp_path: Path):
    (tmp_path / "journal.json").write_text("{not json")
    with pytest.raises(Exception, match="unreadable"):
        Journal(tmp_path).load()


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"schema": 1, "run": None}, "`nodes` must map each node"),
        ({"schema": 1, "nodes": {"n1": {}}, "run": None}, "`nodes` must map each node"),
        ({"schema": 1, "nodes": {}, "run": ["x"]}, "`run` must be a mapping"),
        ({"schema": 1, "nodes": {}, "run": {"target": "day", "nodes": [], "steps": []}}, "`reservation` is missing"),
        (
            {"schema": 1, "nodes": {}, "run": {"target": "day", "reservation": "r", "nodes": ["n1"], "steps": []}},
            "no record of the run's node n1",
        ),
    ],
)
def test_a_journal_of_the_right_schema_but_the_wrong_shape_is_a_clear_error(tmp_path: Path, data, said):
    """Valid JSON with ``schema: 1`` that lacks what the repartitioner reads (a hand edit)
    ended in a KeyError or AttributeError: exit 70."""
    (tmp_path / "journal.json").write_text(json.dumps(data))
    with pytest.raises(StateError, match=f"malformed: .*{said}"):
        Journal(tmp_path).load()


def test_a_run_retaken_after_a_clock_step_keeps_an_earlier_processs_notes_stale(tmp_path: Path):
    """A run taken again at a clock stepped back (``Journal.retake``): the notes of the process
    that had the run before this one, older than when this one took it, stayed stale by design;
    moving ``taken_epoch`` back must not make them count (they are dropped), while this
    process's own notes count on."""
    from slurm_gpupool.slurm.fake import FakeClock

    clock = FakeClock(1000.0)
    j = Journal(tmp_path, clock=clock)
    j.start("day", ["n1", "n2"], "gpupool_day", 5000.0, {"n1": "night", "n2": "night"})
    j.data["nodes"]["n1"]["seen_switched_at"] = 990.0  # the killed earlier process's
    j.data["nodes"]["n2"]["signalled_at"] = 1005.0  # this process's, before the step
    clock.t = 900.0
    j.retake()
    again = Journal(tmp_path).load()
    assert again.run["taken_epoch"] == 900.0
    assert "seen_switched_at" not in again.node("n1") and again.node("n2")["signalled_at"] == 1005.0


def _hold(directory: str, ready, release) -> None:
    with run_lock(Path(directory)):
        ready.set()
        release.wait(10)


def test_the_lock_keeps_two_runs_apart(tmp_path: Path):
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(BusyError, match=f"pid {holder.pid}"), run_lock(tmp_path):
            pass
    finally:
        release.set()
        holder.join(10)
    with run_lock(tmp_path):  # free again
        pass


def test_restart_order_stop_slurmds_restart_controller_start_slurmds():
    s = RepartitionSettings(restart_batch=2)
    calls = []

    def fake(argv, timeout):
        calls.append(argv)
        return CommandResult(list(argv), 0, "", 0.01)

    r = Restarter(s, run=fake)
    assert r.restart(["n3", "n1", "n2"]) is None
    assert calls == [
        ["clush", "-w", "n[1-2]", "systemctl", "stop", "slurmd"],
        ["clush", "-w", "n3", "systemctl", "stop", "slurmd"],
        ["systemctl", "restart", "slurmctld"],
        ["clush", "-w", "n[1-2]", "systemctl", "start", "slurmd"],
        ["clush", "-w", "n3", "systemctl", "start", "slurmd"],
    ]
    calls.clear()

    def ctld_fails(argv, timeout):
        calls.append(argv)
        return CommandResult(list(argv), 1 if "slurmctld" in argv else 0, "fatal: parse error\n", 0.01)

    failed = Restarter(s, run=ctld_fails).restart(["n1"])
    assert failed is not None and failed.why() == "fatal: parse error" and len(calls) == 2  # stops there


def test_unswitched_slurmds_restart_batch_by_batch_and_a_failed_stop_is_still_started():
    """Without slurmctld nothing orders the batches: each is stopped and started at once, and
    a stop that failed on one node (clush exits non-zero, the others stopped) is followed by
    its start all the same."""
    s = RepartitionSettings(restart_batch=2)
    calls = []

    def stop_fails_once(argv, timeout):
        calls.append(argv)
        bad = argv[-2:] == ["stop", "slurmd"] and argv[2] == "n[1-2]"
        return CommandResult(list(argv), 1 if bad else 0, "n2: ssh: connect refused\n", 0.01)

    failed = Restarter(s, run=stop_fails_once).restart_slurmds(["n3", "n1", "n2"])
    assert failed is not None and failed.why() == "n2: ssh: connect refused"
    assert calls == [
        ["clush", "-w", "n[1-2]", "systemctl", "stop", "slurmd"],
        ["clush", "-w", "n[1-2]", "systemctl", "start", "slurmd"],
        ["clush", "-w", "n3", "systemctl", "stop", "slurmd"],
        ["clush", "-w", "n3", "systemctl", "start", "slurmd"],
    ]


def _raw() -> dict:
    return copy.deepcopy(load_config(EXAMPLE).raw)


@pytest.mark.parametrize(
    "section,needle",
    [
        ({"deadline": "soon"}, "repartition.deadline"),
        ({"parallel": 0}, "repartition.parallel"),
        ({"wave_size": -1}, "repartition.wave_size"),
        ({"wave_size": "all"}, "repartition.wave_size"),
        ({"stop_slurmd": ["ssh", "x"]}, "repartition.stop_slurmd"),
        ({"restart_slurmctld": "systemctl restart slurmctld"}, "repartition.restart_slurmctld"),
        ({"cron": "every 5 minutes"}, "repartition.cron"),
        ({"reservation_prefix": "bad name"}, "repartition.reservation_prefix"),
        ({"checkpoint_signal": "US R1"}, "repartition.checkpoint_signal"),
        ({"surprise": 1}, "repartition"),
    ],
)
def test_bad_repartition_settings_name_the_key(section, needle):
    raw = _raw()
    raw["repartition"] = section
    with pytest.raises(ConfigError) as e:
        parse_config(raw, str(EXAMPLE))
    assert needle in str(e.value) or needle in e.value.what


def test_repartition_settings_parse_durations_and_commands():
    raw = _raw()
    raw["repartition"] = {"deadline": "1h30m", "lead_time": "2h", "restart_slurmctld": ["svc", "restart"]}
    s = parse_config(raw, str(EXAMPLE)).repartition
    assert s.deadline_s == 5400 and s.lead_time_s == 7200 and s.restart_slurmctld == ("svc", "restart")
    assert s.wave_size == 0  # every node free to apply, in one wave
    raw["repartition"] = {"wave_size": 16}
    assert parse_config(raw, str(EXAMPLE)).repartition.wave_size == 16
    assert parse_config(_raw(), str(EXAMPLE)).repartition.lead_time_s is None  # the partition's MaxTime


def test_schedule_files_render_cron_and_systemd(tmp_path: Path):
    cfg = load_config(EXAMPLE)
    ((cron_name, cron),) = render_schedule(cfg, gpupool="/opt/gpupool/bin/gpupool").items()
    assert cron_name == "/etc/cron.d/slurm-gpupool"
    line = next(x for x in cron.splitlines() if x.startswith("*/5"))
    assert line.endswith(f"root /opt/gpupool/bin/gpupool --config {EXAMPLE} repartition --scheduled --quiet")
    units = render_schedule(cfg, systemd=True, gpupool="/usr/bin/gpupool")
    timer = units["/etc/systemd/system/gpupool-repartition.timer"]
    assert "OnCalendar=*:0/5" in timer
    service = units["/etc/systemd/system/gpupool-repartition.service"]
    # #15: exit 75 (nodes still busy) must show as a failure, and a killed run keeps its restarts
    assert "SuccessExitStatus" not in service and "KillMode=process" in service
    written = install_schedule(units, tmp_path)
    assert sorted(p.name for p in written) == ["gpupool-repartition.service", "gpupool-repartition.timer"]
    from slurm_gpupool.controller.schedule_install import uninstall_schedule

    assert sorted(p.name for p in uninstall_schedule(cfg, True, tmp_path)) == sorted(p.name for p in written)
    assert not any(p.exists() for p in written) and uninstall_schedule(cfg, True, tmp_path) == []
    assert on_calendar("30 7 * * *") == "*-*-* 07:30:00" and on_calendar("15 * * * *") == "*:15"
    with pytest.raises(UsageError):
        on_calendar("0 8 * * 1-5")


def test_schedule_environment_reaches_cron_and_systemd():
    cfg = load_config(EXAMPLE)
    env = parse_env(["SLURM_CONF=/etc/slurm-b/slurm.conf", "LABEL=50% off"])
    cron = render_schedule(cfg, env_vars=env)["/etc/cron.d/slurm-gpupool"].splitlines()
    job = next(i for i, x in enumerate(cron) if x.startswith("*/5"))
    assert cron.index("SLURM_CONF=/etc/slurm-b/slurm.conf") < job and "LABEL=50% off" in cron
    service = render_schedule(cfg, systemd=True, env_vars=env)["/etc/systemd/system/gpupool-repartition.service"]
    assert 'Environment="SLURM_CONF=/etc/slurm-b/slurm.conf"' in service.splitlines()
    assert 'Environment="LABEL=50%% off"' in service.splitlines()  # % is a systemd specifier
    for bad in ("NOEQUALS", "1X=y", 'X=a"b', "X='a b'", "X=a\\b", "X=a\nb", "X= padded"):
        with pytest.raises(UsageError, match="--env"):
            parse_env([bad])


def test_status_per_node_and_next_switch():
    cfg = load_config(EXAMPLE)
    monday_noon = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    nodes = {
        "a100n1": NodeInfo("a100n1", "idle", frozenset(), "gpu:a100:8", ("a100", "layout_night"), ""),
        "a100n2": NodeInfo("a100n2", "idle", frozenset({"DRAIN"}), "", ("layout_day",), "gpupool: switching"),
    }
    journal = {
        "run": {"id": "r1", "target": "day", "nodes": ["a100n2"], "steps": ["reserved"], "started_at": "t"},
        "nodes": {"a100n2": {"step": jr.APPLYING, "target": "day", "since": "t1", "reason": ""}},
    }
    resv = {
        "gpupool_day": Reservation("gpupool_day", frozenset({"a100n2"}), datetime(2026, 1, 1), datetime(2026, 1, 2)),
        "other": Reservation("other", frozenset({"x"}), datetime(2026, 1, 1), datetime(2026, 1, 2)),
    }
    st = pool_status(cfg, nodes, journal, resv, monday_noon)
    by = {n["node"]: n for n in st["nodes"]}
    assert by["a100n1"]["active"] == "night" and by["a100n1"]["state"] == "scheduled"
    assert by["a100n2"]["state"] == "applying" and by["a100n2"]["since"] == "t1"
    assert by["a100n2"]["slurm_state"] == "idle+drain"
    assert by["h100n1"]["active"] is None and by["h100n1"]["slurm_state"] == "unknown"
    assert [r["name"] for r in st["reservations"]] == ["gpupool_day"]
    assert st["next_switch"]["layout"] == "night" and st["run"]["finished"] is False


def test_restored_gres_reads_the_node_lines(tmp_path: Path):
    conf = tmp_path / "nodes.conf"
    conf.write_text(
        "# managed\nNodeName=a100n[1-2] Sockets=2 Gres=gpu:a100:8 Features=a100,layout_night\n"
        "NodeName=v100n1 Gres=gpu:v100_shared:4,gpu:v100:4,shard:16 Features=v100\n"
    )
    assert restored_gres(conf) == {
        "a100n1": {"gpu:a100": 8},
        "a100n2": {"gpu:a100": 8},
        "v100n1": {"gpu:v100_shared": 4, "gpu:v100": 4, "shard": 16},
    }


def test_a_pause_or_a_pin_holds_the_schedule_until_its_time(tmp_path: Path):
    from datetime import datetime, timedelta

    from slurm_gpupool.repartition.hold import clear_hold, read_hold, write_hold

    now = datetime.now().astimezone()
    assert read_hold(tmp_path) is None
    hold = write_hold(tmp_path, "night", now + timedelta(hours=2), "maintenance of the day partition")
    got = read_hold(tmp_path)
    assert got == hold and got.active(now) and not got.active(now + timedelta(hours=3))
    assert got.describe().startswith("schedule pinned to layout night until ") and "(maintenance" in got.describe()
    write_hold(tmp_path, None, None)
    assert read_hold(tmp_path).describe().startswith("schedule paused until `gpupool schedule resume`")
    assert clear_hold(tmp_path) and read_hold(tmp_path) is None and not clear_hold(tmp_path)
    (tmp_path / "schedule-hold.json").write_text("{not json")
    with pytest.raises(StateError, match="schedule hold"):
        read_hold(tmp_path)


def test_status_says_why_the_due_layout_differs_from_the_active_one(tmp_path: Path):
    """Right after a switch by hand to day on a Saturday (the schedule has night due), status
    said "due: layout night" and no more (#26 item 21): it now says the switch was by hand,
    that the next scheduled run undoes it, and how to keep it; a pin and a pause say so."""
    from slurm_gpupool.repartition.hold import Hold

    cfg = load_config(EXAMPLE)
    saturday = datetime(2026, 11, 21, 12, 0).astimezone()
    j = Journal(tmp_path)
    j.load()
    j.start("day", ["a100n1"], "gpupool_day", 1e12, {"a100n1": "night"})  # `repartition --to day`: by hand
    j.step("a100n1", jr.DONE)
    j.cluster_step(jr.FINISHED)
    data = Journal(tmp_path).load().data
    assert data["run"]["trigger"] == jr.TRIGGER_BY_HAND and data["nodes"]["a100n1"]["trigger"] == jr.TRIGGER_BY_HAND
    nodes = {"a100n1": NodeInfo("a100n1", "idle", frozenset(), "gpu:1g.5gb:28", ("a100", "layout_day"), "")}
    st = pool_status(cfg, nodes, data, {}, saturday)
    (n1,) = [n for n in st["nodes"] if n["node"] == "a100n1"]
    assert st["due"] == st["schedule_due"] == "night" and st["due_why"] == "the schedule's"
    assert n1["state"] == "scheduled" and n1["reason"].startswith("due: layout night (the schedule's)")
    assert "switch by hand" in n1["reason"] and "`gpupool schedule pin day` keeps it" in n1["reason"]
    pin = Hold("day", None, "root", "2026-11-21T11:00", "large run")
    st = pool_status(cfg, nodes, data, {}, saturday, pin)
    (n1,) = [n for n in st["nodes"] if n["node"] == "a100n1"]
    assert st["due"] == "day" and st["schedule_due"] == "night" and "pinned to layout day" in st["due_why"]
    assert n1["state"] == "done"
    pause = Hold(None, None, "root", "2026-11-21T11:00")
    st = pool_status(cfg, nodes, data, {}, saturday, pause)
    (n1,) = [n for n in st["nodes"] if n["node"] == "a100n1"]
    assert st["due"] is None and "paused" in st["due_why"]
    assert n1["reason"] == "schedule paused: stays in layout day (the schedule has night due)"
