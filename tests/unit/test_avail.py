"""``gpupool avail``: GRES per node set and partition, layouts and the next switch, and a
request as gpupool-sbatch translates it with Slurm's estimate, on the fake Slurm shipped in
the package (nodes as sinfo --json showed them on the sandbox) and a fake clock."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.cli import main as cli_main
from slurm_gpupool.cli.context import AppContext
from slurm_gpupool.cli.errors import run
from slurm_gpupool.config.load import load_config
from slurm_gpupool.errors import UsageError
from slurm_gpupool.observe.avail import gres_rows, takes_jobs
from slurm_gpupool.observe.avail_inputs import gather
from slurm_gpupool.pool.submit_catalog import submit_catalog
from slurm_gpupool.repartition.hold import write_hold
from slurm_gpupool.repartition.journal import Journal
from slurm_gpupool.simulate import policies as pol
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.wait import replay_wait, trace_request
from slurm_gpupool.slurm.fake import FakeClock, FakeSlurm, Node
from slurm_gpupool.slurm.parse import parse_sinfo_json
from slurm_gpupool.slurm.types import JobInfo, WillRun, requested_gres
from slurm_gpupool.submit import wrapper

from .site import shipped_raw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
TUESDAY_10 = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # the day layout is due (mon-fri 08-20)
SATURDAY_10 = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


@pytest.fixture
def cfg(tmp_path: Path):
    raw = shipped_raw(tmp_path)
    raw["schedule"]["timezone"] = "UTC"
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.fixture
def catalog(cfg):
    return submit_catalog(cfg, installed="day")


def recorded_cluster(clock: FakeClock) -> FakeSlurm:
    """The fake Slurm showing what sinfo --json showed on the 22.05 sandbox: every node in the
    day layout, a100n1 running a job on one whole A100, a30n1 drained."""
    infos = parse_sinfo_json((FIXTURES / "22.05" / "sinfo.json").read_text())
    fake = FakeSlurm(infos, clock)
    for name, i in infos.items():
        fake.nodes_[name] = Node(i.state, set(i.flags), i.gres, i.features, i.reason, i.gres_used, i.partitions)
    return fake


def clock_at(t: datetime) -> FakeClock:
    return FakeClock(t.timestamp())


def test_gres_per_node_set_and_partition_are_sinfos_counts(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    a = gather(cfg, fake, catalog, fake.clock)
    sets = {s["name"]: s for s in a["nodesets"]}
    dgx = {(g["gres"], g["type"]): g for g in sets["dgx"]["gres"]}
    # two DGX A100 nodes with 2 whole A100s each in the day layout; one held by the running job
    assert dgx["gpu", "a100"] == {
        "gres": "gpu",
        "type": "a100",
        "kind": "whole",
        "total": 4,
        "used": 1,
        "free": 3,
        "unavailable": 0,
    }
    assert dgx["gpu", "1g.5gb"]["kind"] == "mig" and dgx["gpu", "1g.5gb"]["free"] == 64
    # a30n1 is drained: nothing free there, all of it unavailable
    a30 = {(g["gres"], g["type"]): g for g in sets["a30"]["gres"]}
    assert a30["gpu", "1g.6gb"]["free"] == 0 and a30["gpu", "1g.6gb"]["unavailable"] == 8
    assert a30["shard", "a30_shared"]["kind"] == "shard" and a30["shard", "a30_shared"]["total"] == 8
    assert ("shard", "1g.6gb") not in a30  # slurmd's zero-count shard types are no offer
    assert sets["dgx"]["layout"] == "day" and sets["dgx"]["partitions"] == ["gpu"] and sets["dgx"]["missing"] == []
    # the partition adds up the node sets
    (gpu,) = a["partitions"]
    assert gpu["name"] == "gpu" and gpu["nodes"] == "a100n[1-2],a30n1,h100n1,v100n1"
    part = {(g["gres"], g["type"]): g["free"] for g in gpu["gres"]}
    assert part["gpu", "a100"] == 3 and part["shard", "v100_shared"] == 16


def test_a_reserved_or_unresponsive_node_offers_nothing_free():
    infos = parse_sinfo_json((FIXTURES / "22.05" / "sinfo.json").read_text())
    from dataclasses import replace

    h100 = infos["h100n1"]
    for flags in ({"MAINTENANCE"}, {"RESERVED"}, {"NOT_RESPONDING"}, {"DRAIN"}):
        node = replace(h100, flags=frozenset(flags))
        assert not takes_jobs(node)
        assert all(r.free == 0 and r.unavailable == r.total for r in gres_rows([node], {}))
    assert takes_jobs(h100) and all(r.free == r.total for r in gres_rows([h100], {}))


def test_the_due_layout_and_the_next_switch_follow_the_schedule(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["due"] == "day" and a["schedule"]["mode"] == "clock"
    assert a["schedule"]["next_switch"] == {"layout": "night", "at": "2026-11-24T20:00+00:00"}
    assert {s["name"]: s["next_switch"]["at"] for s in a["nodesets"]} == dict.fromkeys(
        ("a30", "dgx", "hopper", "volta"), "2026-11-24T20:00+00:00"
    )
    # on Saturday the nodes are still in day (no run switched them): night is due, day comes Monday
    fake.clock = clock_at(SATURDAY_10)
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["due"] == "night"
    assert all(s["due"] == "night" and s["layout"] == "day" for s in a["nodesets"])
    assert a["schedule"]["next_switch"] == {"layout": "day", "at": "2026-11-30T08:00+00:00"}  # after night


def test_a_pause_or_pin_moves_the_next_switch_to_its_end(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    ctl = Path(cfg.paths.controller_dir)
    until = TUESDAY_10 + timedelta(days=1)  # Wednesday 10:00: day is due then too
    write_hold(ctl, None, until, "maintenance", clock=fake.clock)
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["mode"] == "paused" and a["schedule"]["due"] is None
    assert "paused until 2026-11-25 10:00" in a["schedule"]["hold"]
    assert a["schedule"]["next_switch"] == {"layout": "night", "at": "2026-11-25T20:00+00:00"}
    write_hold(ctl, "night", until, clock=fake.clock)  # pinned to night: day comes back when it ends
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["mode"] == "pinned" and a["schedule"]["due"] == "night"
    assert a["schedule"]["next_switch"] == {"layout": "day", "at": "2026-11-25T10:00+00:00"}
    write_hold(ctl, "night", None, clock=fake.clock)  # until resumed: no scheduled switch at all
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["next_switch"] is None and all(s["next_switch"] is None for s in a["nodesets"])


def test_a_switch_under_way_is_shown_for_its_node_sets(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    j = Journal(Path(cfg.paths.controller_dir), fake.clock)
    j.start("night", ["a100n1", "a100n2"], "gpupool_night", fake.clock.time() + 1800, {})
    a = gather(cfg, fake, catalog, fake.clock)
    sets = {s["name"]: s for s in a["nodesets"]}
    assert sets["dgx"]["switching_to"] == "night" and sets["volta"]["switching_to"] is None
    assert a["run"] == {"target": "night", "nodes": ["a100n1", "a100n2"]}
    j.cluster_step("finished")
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["run"] is None and all(s["switching_to"] is None for s in a["nodesets"])


def test_an_unreadable_journal_is_a_note_not_a_failure(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    ctl = Path(cfg.paths.controller_dir)
    ctl.mkdir(parents=True)
    (ctl / "journal.json").write_text("{not json")
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["run"] is None and any(n.startswith("switches under way unknown") for n in a["notes"])
    assert a["nodesets"] and a["schedule"]["due"] == "day"


def dry_run(catalog: dict, tmp_path: Path, monkeypatch, *args: str) -> list[str]:
    """What gpupool-sbatch --dry-run prints for these options: the command it would run."""
    (tmp_path / "gpupool-submit.json").write_text(json.dumps(catalog))
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    monkeypatch.setenv("SLURM_GPUPOOL_SBATCH", "sbatch")
    out = io.StringIO()
    with redirect_stdout(out):
        assert wrapper.main(["--dry-run", *args, "--wrap", "true"]) == 0
    import shlex

    return shlex.split(out.getvalue().splitlines()[0])[1:]


def test_a_request_becomes_what_gpupool_sbatch_submits_and_slurm_says_it_starts_now(
    cfg, catalog, tmp_path, monkeypatch
):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    start = datetime.fromtimestamp(fake.clock.time())  # naive local, as sbatch prints it
    fake.will_run_reply = WillRun(start, cpus=2, nodes=frozenset({"a100n2"}), partition="gpu")
    a = gather(cfg, fake, catalog, fake.clock, ["--gpu-mem=9G", "--time=10"])
    r = a["request"]
    assert r["sbatch"] == dry_run(catalog, tmp_path, monkeypatch, "--gpu-mem=9G", "--time=10")
    assert r["per_node"] == [{"gres": "gpu", "type": "2g.10gb", "count": 1}]  # 9856 MiB: the smallest >= 9G
    assert r["changes"][0]["option"] == "gres" and "smallest MIG profile" in r["changes"][0]["why"]
    assert r["free_on"] == ["a100n1", "a100n2"] and r["fits_now"] and r["later"] is None
    assert ("will_run", tuple(r["sbatch"])) in fake.calls  # sbatch --test-only with what would be submitted
    assert r["slurm"]["starts_now"] and r["slurm"]["wait_s"] == 0 and r["slurm"]["nodes"] == ["a100n2"]


def test_a_request_that_waits_gets_slurms_start_time(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    later = datetime.fromtimestamp(fake.clock.time() + 600)
    fake.will_run_reply = WillRun(later, cpus=16, nodes=frozenset({"a100n1", "a100n2"}), partition="gpu")
    a = gather(cfg, fake, catalog, fake.clock, ["--gres=gpu:a100:2", "--nodes=2", "--partition=gpu"])
    r = a["request"]
    assert r["nodes"] == 2 and r["partition"] == "gpu"
    # a100n1 runs a job on one of its two A100s: only a100n2 has two free
    assert r["free_on"] == ["a100n2"] and not r["fits_now"]
    assert r["slurm"]["wait_s"] == 600 and not r["slurm"]["starts_now"]
    assert r["slurm"]["starts_at"] == later.astimezone().isoformat(timespec="seconds")


def test_untyped_and_partition_filters(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.nodes_["v100n1"].partitions = ("debug",)
    a = gather(cfg, fake, catalog, fake.clock, ["--gres=shard:4", "--partition=gpu"])
    assert a["request"]["free_on"] == ["h100n1"]  # v100n1's 16 free shards are in another partition
    a = gather(cfg, fake, catalog, fake.clock, ["--gres=shard:4"])
    assert a["request"]["free_on"] == ["h100n1", "v100n1"]


def test_a_request_only_a_later_layout_offers_is_not_asked_of_slurm(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    a = gather(cfg, fake, catalog, fake.clock, ["--gpus-nvlink=8"])  # eight whole H100s: night only
    r = a["request"]
    assert r["later"] == {"layout": "night", "at": "2026-11-24T20:00+00:00"}
    assert r["slurm"] is None and not r["fits_now"]
    assert not [c for c in fake.calls if c[0] == "will_run"]


def test_slurms_refusal_is_part_of_the_answer(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.will_run_reply = WillRun(None, refused="Requested node configuration is not available")
    r = gather(cfg, fake, catalog, fake.clock, ["--gres=gpu:a100:1", "--nodes=3"])["request"]
    assert r["slurm"]["refused"] == "Requested node configuration is not available"
    assert r["slurm"]["starts_at"] is None and not r["slurm"]["starts_now"]


def test_a_request_the_wrapper_refuses_is_a_usage_error_in_its_words(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    with pytest.raises(UsageError, match="--gpu-mem=200G: no layout of this cluster can ever offer that") as e:
        gather(cfg, fake, catalog, fake.clock, ["--gpu-mem=200G"])
    assert e.value.exit_code == 2 and "most GPU memory offered" in (e.value.hint or "")


def cli(cfg, catalog, fake, *args: str) -> tuple[int, str, str]:
    app = AppContext(
        config_path=cfg.source,
        factories={"slurm": lambda _: fake, "clock": lambda _: fake.clock, "catalog": lambda _: catalog},
    )
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = run(lambda: cli_main.cli.main(args=list(args), obj=app, prog_name="gpupool", standalone_mode=False))
    return rc, out.getvalue(), err.getvalue()


def test_the_command_prints_tables_and_json_with_stable_keys(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.will_run_reply = WillRun(datetime.fromtimestamp(fake.clock.time()), 2, frozenset({"a100n2"}), "gpu")
    rc, out, err = cli(cfg, catalog, fake, "avail", "--gpu-mem", "9G")
    assert rc == 0 and err == ""
    assert "dgx       a100n[1-2]  day     gpu:1g.5gb" in out
    assert "next switch: layout night at Tue 2026-11-24 20:00 (in 10h) (a30, dgx, hopper, volta)" in out
    assert "free GPUs for it now on: a100n1, a100n2 (1 node needed)" in out
    assert "starts now on a100n2 in partition gpu" in out
    rc, out, _ = cli(cfg, catalog, fake, "avail", "--json", "--gpu-mem", "9G")
    a = json.loads(out)
    assert rc == 0 and sorted(a) == ["nodesets", "notes", "now", "partitions", "request", "run", "schedule", "schema"]
    assert sorted(a["request"]) == [
        "asked",
        "changes",
        "estimate",
        "fits_now",
        "free_on",
        "later",
        "nodes",
        "notes",
        "partition",
        "per_node",
        "sbatch",
        "slurm",
    ]


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--gpu-mem", "10X"], 2, "gpupool: request: --gpu-mem=10X: expected a size like 18G or 18000M\n"),
        (["-N", "2"], 2, "gpupool: avail: a request needs --gpu-mem, --gpu-share, --gpus-nvlink or --gres\n"),
        (["--gpu-mem", "10G", "--gpu-share", "0.5"], 2, "gpupool: request: use one of --gpu-mem, --gpu-share"),
    ],
)
def test_user_mistakes_are_one_line_errors_with_exit_codes(cfg, catalog, args, code, text):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    rc, out, err = cli(cfg, catalog, fake, "avail", *args)
    assert rc == code and out == "" and err.startswith(text) and "Traceback" not in err


def test_slurm_down_is_exit_69(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.ctld_up = False
    rc, _, err = cli(cfg, catalog, fake, "avail")
    assert rc == 69 and err.startswith("gpupool: sinfo --json: Unable to contact slurm controller")


def test_in_an_elastic_period_demand_decides_and_no_switch_is_announced(tmp_path: Path):
    raw = shipped_raw(tmp_path)
    raw["schedule"].update(timezone="UTC", mode="elastic", elastic={"floors": {"1g.5gb": 1}, "during": ["day"]})
    path = tmp_path / "elastic.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    catalog = submit_catalog(cfg, installed="day")
    fake = recorded_cluster(clock_at(TUESDAY_10))
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["mode"] == "elastic" and a["schedule"]["due"] is None
    assert a["schedule"]["next_switch"] is None
    # on Saturday night is due by the clock; Monday 08:00 starts an elastic period: no switch announced
    fake.clock = clock_at(SATURDAY_10)
    a = gather(cfg, fake, catalog, fake.clock)
    assert a["schedule"]["mode"] == "clock" and a["schedule"]["due"] == "night"
    assert a["schedule"]["next_switch"] is None


@pytest.mark.parametrize("series", ["22.05", "24.11", "26.05"])
def test_a_mistake_slurm_finds_in_the_request_is_a_usage_error(cfg, catalog, series):
    """As recorded: an unknown partition (slurmctld's refusal), a malformed node count
    (sbatch's own); a GRES no node has is an answer, not a mistake."""
    from slurm_gpupool.slurm.parse import parse_will_run

    cases = json.loads((FIXTURES / series / "will-run.json").read_text())["cases"]
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.will_run_reply = parse_will_run(cases["bad_partition"]["stderr"])
    rc, out, err = cli(cfg, catalog, fake, "avail", "--gres", "gpu:a100:1", "-p", "nosuch")
    assert rc == 2 and out == "" and err == "gpupool: request: Slurm refuses it: invalid partition specified: nosuch\n"
    fake.will_run_reply = parse_will_run('sbatch: error: "abc" is not a valid node count\n')
    rc, _, err = cli(cfg, catalog, fake, "avail", "--gres", "gpu:a100:1", "-N", "abc")
    assert rc == 2 and err == 'gpupool: request: Slurm refuses it: "abc" is not a valid node count\n'
    fake.will_run_reply = parse_will_run(cases["no_such_gres"]["stderr"])
    rc, out, _ = cli(cfg, catalog, fake, "avail", "--gres", "gpu:a100:1")
    assert rc == 0 and "refused: Requested node configuration is not available" in out


def test_hostile_request_options_never_end_in_an_internal_error(cfg, catalog):
    """Seeded: every request option gets hostile strings (newlines, huge numbers, NUL, hostlist
    bombs, odd units); the answer is an answer (0) or a one-line usage error (2), never 70."""
    import random

    from tests.fuzzing import HOSTILE

    rng = random.Random(30)
    words = [v for v in HOSTILE if isinstance(v, str) and "\x00" not in v] + [
        "10G",
        "0.25",
        "1/0",
        "1e3",
        "٠.٥",
        "gpu:a100:1",
        "gpu:a100:99999999999",
        "shard:-1",
        "gpu",
        "2-1",
        "gpu:1g.5gb:1,shard:2",
    ]
    options = ["--gpu-mem", "--gpu-share", "--gpus-nvlink", "--gres", "-N", "-p", "-t"]
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.will_run_reply = WillRun(None, refused="Requested node configuration is not available", reason="x")
    seen = set()
    for _ in range(150):
        args = ["avail", "--json"]
        for opt in rng.sample(options, rng.randint(1, 3)):
            args += [opt, rng.choice(words)]
        rc, out, err = cli(cfg, catalog, fake, *args)
        seen.add(rc)
        assert rc in (0, 2), (args, rc, err)
        assert "Traceback" not in err and "internal error" not in err, (args, err)
        if rc == 2:
            assert err.startswith("gpupool: ") and len(err.rstrip("\n").splitlines()) <= 2, (args, err)
        else:
            json.loads(out)
    assert seen == {0, 2}


# -- the wait estimate: Slurm's, or the simulator's replay of the queue through a switch ------

TUESDAY_20 = datetime(2026, 11, 24, 20, 0, tzinfo=UTC)  # the night layout comes (whole GPUs)


def queued(job_id: int, gres: str, limit_s: int, state: str = "PENDING", **kw) -> JobInfo:
    """A job as squeue --json shows it (pending unless told)."""
    return JobInfo(
        job_id, state, frozenset(kw.pop("nodes", ())), "alice", "j", limit_s, kw.pop("start", 0), True, "", gres, **kw
    )


def estimated(cfg, catalog, fake, *asked: str) -> dict:
    return gather(cfg, fake, catalog, fake.clock, list(asked), replay=replay_wait)["request"]["estimate"]


def test_a_request_only_the_next_layout_offers_starts_at_the_switch_on_an_empty_queue(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    e = estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")  # 8 whole A100s on one node: night only
    assert e["source"] == "simulator"
    start = datetime.fromisoformat(e["start"])
    switch_s = pol.switch_seconds(cfg, len([n for n in cfg.all_nodes() if cfg.nodeset_of(n).machine]))
    # the switch at 20:00, its nodes out of service while they switch, then it starts
    assert TUESDAY_20 < start <= TUESDAY_20 + timedelta(seconds=switch_s + 60)
    assert e["wait_s"] == int((start - TUESDAY_10).total_seconds())
    assert "0 running and 0 pending GPU jobs ahead" in e["why"] and "an estimate, not a promise" in e["why"]


def test_the_queue_ahead_adds_its_time_limits_after_the_switch(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    empty = datetime.fromisoformat(estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")["start"])
    # two jobs ahead wanting a whole DGX each (gpu:a100:8, only night offers it) for 2 h: the two
    # DGX nodes run them first, so the request starts when the first ends, two hours later
    seen = []
    fake.jobs_ = [
        queued(100, "gres:gpu:a100:8", 7200, priority=50, submit_time=int(TUESDAY_10.timestamp()) - 60),
        queued(101, "gres:gpu:a100:8", 7200, priority=40, submit_time=int(TUESDAY_10.timestamp()) - 30),
        queued(102, "gres:gpu:a100:8", 7200, priority=0, state_reason="JobHeldUser"),  # held: not ahead
    ]
    jobs = fake.jobs
    fake.jobs = lambda: seen.append("squeue") or jobs()  # type: ignore[method-assign]
    e = estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")
    assert seen == ["squeue"] and e["source"] == "simulator"
    start = datetime.fromisoformat(e["start"])
    assert empty + timedelta(hours=2) <= start <= empty + timedelta(hours=2, minutes=2)
    assert "0 running and 2 pending GPU jobs ahead" in e["why"]


def test_a_running_job_past_the_switch_holds_its_node_until_it_ends(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    empty = datetime.fromisoformat(estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")["start"])
    # both DGX nodes run a job (one A100 each, day layout) until 20:20, past the 20:00 switch:
    # each node switches once its job ends (within the repartitioner's deadline)
    started = int(TUESDAY_10.timestamp()) - 3600
    fake.jobs_ = [
        queued(n, "gres:gpu:a100:1", 3600 + 10 * 3600 + 1200, "RUNNING", nodes={f"a100n{n}"}, start=started)
        for n in (1, 2)
    ] + [queued(3, "", 86400, "RUNNING", nodes={"a100n2"}, start=started)]  # CPUs only: not replayed
    e = estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")
    start = datetime.fromisoformat(e["start"])
    assert e["source"] == "simulator" and "2 running and 0 pending GPU jobs" in e["why"]
    assert empty + timedelta(minutes=20) <= start <= empty + timedelta(minutes=22)


def test_the_replay_follows_the_backfill_rules_of_the_slurm_release_it_asks(cfg, catalog, monkeypatch):
    """``sinfo --version`` gives the release whose backfill the replay follows
    (``willrun.release_params``): 22.05's rules on the recorded cluster, 26.05's on one that
    says it runs 26.05."""
    from slurm_gpupool.simulate import wait

    seen = []
    real_engine = wait.Engine
    monkeypatch.setattr(wait, "Engine", lambda spec, sw, p: seen.append(p) or real_engine(spec, sw, p))
    fake = recorded_cluster(clock_at(TUESDAY_10))
    estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")
    fake.version = lambda: (26, 5, 3)  # type: ignore[method-assign]
    estimated(cfg, catalog, fake, "--gpus-nvlink=8", "--time=60")
    assert [(p.will_run, p.bf_end_up, p.bf_overdue_now) for p in seen] == [
        ("batch", False, False),
        ("batch-nodes", True, True),
    ]


def test_a_request_the_layout_in_force_offers_keeps_slurms_estimate(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    later = datetime.fromtimestamp(fake.clock.time() + 600)
    fake.will_run_reply = WillRun(later, cpus=2, nodes=frozenset({"a100n1"}), partition="gpu")
    asked = []
    fake.jobs = lambda: asked.append("squeue") or []  # type: ignore[method-assign]
    e = estimated(cfg, catalog, fake, "--gres=gpu:a100:1")
    assert e["source"] == "slurm" and e["wait_s"] == 600
    assert e["start"] == later.astimezone().isoformat(timespec="seconds") and "sbatch --test-only" in e["why"]
    assert asked == []  # the queue is read only for a replay


def test_a_layout_in_force_that_offers_too_little_waits_for_one_that_offers_enough(cfg, catalog):
    """--gres=gpu:a100:8: the day layout has A100s, two per node; Slurm refuses it, night has eight."""
    fake = recorded_cluster(clock_at(TUESDAY_10))
    fake.will_run_reply = WillRun(None, refused="Requested node configuration is not available")
    r = gather(cfg, fake, catalog, fake.clock, ["--gres=gpu:a100:8"], replay=replay_wait)["request"]
    assert r["later"] is None and r["slurm"]["refused"]
    assert r["estimate"]["source"] == "simulator" and "layout night" in r["estimate"]["why"]
    assert TUESDAY_20 < datetime.fromisoformat(r["estimate"]["start"]) < TUESDAY_20 + timedelta(minutes=5)
    # what no layout offers (nine on one node) has no estimate: Slurm's refusal stands
    r = gather(cfg, fake, catalog, fake.clock, ["--gres=gpu:a100:9"], replay=replay_wait)["request"]
    assert r["estimate"]["source"] is None and r["estimate"]["why"].startswith("Slurm would refuse it")


def test_without_a_schedule_or_under_a_pause_no_switch_is_coming(tmp_path: Path, cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    write_hold(Path(cfg.paths.controller_dir), None, None, "maintenance", clock=fake.clock)  # until resumed
    e = estimated(cfg, catalog, fake, "--gpus-nvlink=8")
    assert e["source"] is None and e["start"] is None and e["wait_s"] is None
    assert e["why"].startswith("no switch is coming: no scheduled switch brings layout night")
    raw = shipped_raw(tmp_path / "none")
    del raw["schedule"]
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump(raw))
    plain = load_config(path)
    e = estimated(plain, submit_catalog(plain, installed="day"), fake, "--gpus-nvlink=8")
    assert e["source"] is None and e["why"].startswith("no switch is coming")


def test_the_estimate_is_printed_and_in_json(cfg, catalog):
    fake = recorded_cluster(clock_at(TUESDAY_10))
    rc, out, _ = cli(cfg, catalog, fake, "avail", "--gpus-nvlink", "8", "-t", "60")
    assert rc == 0 and "  estimate (the simulator's): starts at Tue 2026-11-24 20:0" in out
    assert "each to its time limit" in out
    rc, out, _ = cli(cfg, catalog, fake, "avail", "--json", "--gpus-nvlink", "8")
    e = json.loads(out)["request"]["estimate"]
    assert rc == 0 and sorted(e) == ["source", "start", "wait_s", "why"] and e["source"] == "simulator"


@pytest.mark.parametrize(
    ("gres", "nodes", "expected"),
    [
        ("gres:gpu:1g.5gb:1", 1, TraceRequest(1, 142, 4864)),  # 1/7 of an A100 40GB, its memory
        ("gres:shard:v100_shared:2", 1, TraceRequest(1, 500)),  # 2 of a V100's 4 shares
        ("gres:gpu:a100:2", 2, TraceRequest(4, 1000, 0, "A100-SXM4-40GB")),
        ("gres:gpu:3", 1, TraceRequest(3)),
        ("gres:gpu:1g.5gb:2", 1, None),  # several slices in one job: not modelled
        ("gres:gpu:a100:1,gres:shard:2", 1, None),
        ("gres:gpu:nosuch:1", 1, None),
    ],
)
def test_a_jobs_gres_becomes_the_replays_request(cfg, catalog, gres, nodes, expected):
    offers = [o for lay in catalog["layouts"].values() for o in lay["offers"]]
    assert trace_request(requested_gres(gres), nodes, offers) == expected
